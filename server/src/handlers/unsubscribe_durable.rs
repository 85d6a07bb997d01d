//! UNSUBSCRIBE_DURABLE: delete a durable subscription of this client id.
//! It takes the `durable` permission on the subscription's topics, and
//! the subscription must be the user's own (or the user an administrator).

use herald_protocol::frame::UnsubscribeDurable;
use herald_protocol::DestinationKind;

use super::answer::receipt;
use crate::auth::Permission;
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
    receipt(out, request_id);
    Ok(Flow::Continue)
}
