//! UNSUBSCRIBE_DURABLE: delete a durable subscription of this client id
//! ([`delete_durable`] says who may, and when the RECEIPT goes).

use herald_protocol::frame::UnsubscribeDurable;

use crate::frontend::outbound::Outbound;
use crate::frontend::{delete_durable, Context, Flow, Refusal};
use crate::session::Session;

/// A native UNSUBSCRIBE_DURABLE frame.
pub fn handle(
    f: UnsubscribeDurable,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    delete_durable(&f.name, request_id, session, out, ctx)?;
    Ok(Flow::Continue)
}
