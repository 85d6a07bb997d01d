//! ACK, NACK and RECOVER: settle deliveries of tracked subscriptions.

use std::collections::HashSet;

use herald_protocol::frame::{Recover, Settle};
use herald_protocol::ErrorCode;

use super::answer::receipt;
use crate::broker::Written;
use crate::frontend::outbound::Outbound;
use crate::frontend::{settle, Context, Flow, Refusal};
use crate::session::{Outcome, Session};

/// An ACK or NACK frame.
pub fn handle(
    f: Settle,
    outcome: Outcome,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let mut written = Written::default();
    let unknown = settle(f.delivery_ids, outcome, session, &mut written, ctx);
    if unknown.is_empty() {
        match outcome {
            // A confirmed acknowledgement is one the journal has: its
            // RECEIPT follows the End records to disk.
            Outcome::Processed => {
                crate::frontend::await_journal(request_id, written, session, out, ctx)
            }
            Outcome::Redeliver | Outcome::Release | Outcome::Reject => receipt(out, request_id),
        }
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

/// RECOVER: NACKs every unsettled delivery of these subscriptions, in
/// delivery order. The RECEIPT is queued now, ahead of the redeliveries,
/// which are routed after this frame.
pub fn recover(
    f: Recover,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    recover_subscriptions(f, session, ctx);
    receipt(out, request_id);
    Ok(Flow::Continue)
}

/// NACKs every unsettled delivery of these subscriptions, in delivery
/// order (RECOVER, ROLLBACK).
pub fn recover_subscriptions(f: Recover, session: &mut Session, ctx: &mut Context<'_>) {
    let subscriptions: HashSet<u32> = f.subscription_ids.into_iter().collect();
    let mut ids: Vec<u64> = session.traffic_ref().map_or_else(Vec::new, |t| {
        t.unacked
            .iter()
            .filter(|(_, u)| subscriptions.contains(&u.subscription_id))
            .map(|(id, _)| *id)
            .collect()
    });
    ids.sort_unstable();
    settle(
        ids,
        Outcome::Redeliver,
        session,
        &mut Written::default(),
        ctx,
    );
}
