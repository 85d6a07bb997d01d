//! ACK and NACK: settle deliveries of acknowledged subscriptions.

use herald_protocol::frame::Settle;
use herald_protocol::ErrorCode;

use super::{receipt, Context, Flow, Refusal};
use crate::broker::Subscriber;
use crate::net::outbound::Outbound;
use crate::session::Session;

/// Processed (ACK) or to be redelivered (NACK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// ACK.
    Processed,
    /// NACK.
    Redeliver,
}

pub fn handle(
    f: Settle,
    outcome: Outcome,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let mut unknown = Vec::new();
    for id in f.delivery_ids {
        let Some(u) = session.unacked.remove(&id) else {
            unknown.push(id);
            continue;
        };
        let sub = Subscriber {
            conn: ctx.me,
            subscription_id: u.subscription_id,
        };
        let settled = match outcome {
            Outcome::Processed => ctx.shared.broker.ack(&u.ack, &sub, ctx.deliveries),
            Outcome::Redeliver => ctx.shared.broker.nack(&u.ack, &sub, ctx.deliveries),
        };
        if !settled {
            unknown.push(id);
        }
    }
    if unknown.is_empty() {
        receipt(out, request_id);
        return Ok(Flow::Continue);
    }
    let shown: Vec<String> = unknown.iter().take(10).map(u64::to_string).collect();
    let more = if unknown.len() > 10 { ", ..." } else { "" };
    Err(Refusal::soft(
        ErrorCode::UnknownDelivery,
        format!(
            "{} delivery id(s) not outstanding on this connection: {}{more}",
            unknown.len(),
            shown.join(", ")
        ),
    ))
}
