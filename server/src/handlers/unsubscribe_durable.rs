//! UNSUBSCRIBE_DURABLE: delete a durable subscription of this client id.

use herald_protocol::frame::UnsubscribeDurable;

use super::subscribe::refusal;
use super::{receipt, Context, Flow, Refusal};
use crate::net::outbound::Outbound;
use crate::session::Session;

pub fn handle(
    f: UnsubscribeDurable,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    ctx.shared
        .broker
        .unsubscribe_durable(&session.client_id, &f.name)
        .map_err(refusal)?;
    receipt(out, request_id);
    Ok(Flow::Continue)
}
