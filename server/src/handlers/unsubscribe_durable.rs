//! UNSUBSCRIBE_DURABLE: delete a durable subscription of this client id.
//! It takes the `durable` permission on the subscription's topics, and
//! the subscription must be the user's own (or the user an administrator).

use herald_protocol::frame::UnsubscribeDurable;
use herald_protocol::DestinationKind;

use crate::auth::Permission;
use crate::broker::Written;
use crate::frontend::outbound::Outbound;
use crate::frontend::{
    check_id_length, check_owner, subscribe_refusal as refusal, Context, Flow, Refusal,
};
use crate::session::Session;

/// A native UNSUBSCRIBE_DURABLE frame.
pub fn handle(
    f: UnsubscribeDurable,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let max_id = ctx.shared.config.max_id_length;
    check_id_length("durable subscription name", &f.name, max_id)?;
    if let Some(pattern) = check_owner(session, &f.name, ctx)? {
        crate::frontend::authorize(
            session,
            Permission::Durable,
            DestinationKind::Topic,
            &pattern.to_string(),
        )?;
    }
    ctx.shared
        .broker
        .unsubscribe_durable(&session.client_id, &f.name)
        .map_err(refusal)?;
    // As a durable subscription's RECEIPT: once its deletion is kept (in
    // the journal, or in a cluster in Redis), so that nothing sent after
    // it is kept for it any more.
    crate::frontend::await_journal(request_id, Written::default(), session, out, ctx);
    Ok(Flow::Continue)
}
