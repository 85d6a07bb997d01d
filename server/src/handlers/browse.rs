//! BROWSE: the waiting messages of a queue, without consuming them, then a
//! RECEIPT that marks the end.

use herald_protocol::frame::Browse;
use herald_protocol::ErrorCode;

use super::subscribe::refusal;
use super::{receipt, Context, Flow, Refusal};
use crate::net::outbound::Outbound;
use crate::session::Session;

/// A BROWSE frame.
pub(super) fn handle(
    f: Browse,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if request_id == 0 {
        return Err(Refusal::soft(
            ErrorCode::Malformed,
            "BROWSE needs a request id: its RECEIPT marks the end of the snapshot",
        ));
    }
    herald_protocol::destination::validate_name(&f.queue)
        .map_err(|e| Refusal::soft(ErrorCode::InvalidDestination, e.to_string()))?;
    super::authorize(
        session,
        crate::auth::Permission::Browse,
        herald_protocol::DestinationKind::Queue,
        &f.queue,
    )?;
    for m in ctx
        .shared
        .broker
        .browse(&f.queue, &f.selector)
        .map_err(refusal)?
    {
        let delivery_id = session.next_delivery_id();
        out.push_delivery(
            f.subscription_id,
            delivery_id,
            m.deliveries + 1,
            m.block,
            crate::net::outbound::Droppable::Never,
        );
    }
    receipt(out, request_id);
    Ok(Flow::Continue)
}
