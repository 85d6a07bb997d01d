//! ACK, NACK and RECOVER: settle deliveries of tracked subscriptions.

use std::collections::HashSet;
use std::sync::Arc;

use herald_protocol::frame::{Recover, Settle};
use herald_protocol::ErrorCode;

use super::{receipt, Context, Flow, Refusal};
use crate::broker::{SharedQueue, Subscriber, Written};
use crate::net::outbound::Outbound;
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
            Outcome::Processed => super::await_journal(request_id, written, session, out, ctx),
            Outcome::Redeliver => receipt(out, request_id),
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
    let mut ids: Vec<u64> = session
        .unacked
        .iter()
        .filter(|(_, u)| subscriptions.contains(&u.subscription_id))
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    settle(
        ids,
        Outcome::Redeliver,
        session,
        &mut Written::default(),
        ctx,
    );
}

/// Settles deliveries; returns the ids that were not outstanding.
/// `written` learns if an acknowledgement could not be written.
pub fn settle(
    ids: Vec<u64>,
    outcome: Outcome,
    session: &mut Session,
    written: &mut Written,
    ctx: &mut Context<'_>,
) -> Vec<u64> {
    let mut unknown = Vec::new();
    // Consecutive acknowledgements of one queue are settled together,
    // under one lock of it.
    let mut run: Option<AckRun> = None;
    for id in ids {
        let Some(u) = session.unacked.remove(&id) else {
            unknown.push(id);
            continue;
        };
        let sub = Subscriber {
            conn: ctx.me,
            subscription_id: u.subscription_id,
        };
        if outcome == Outcome::Redeliver {
            if !ctx.shared.broker.nack(&u.ack, &sub, ctx.deliveries) {
                unknown.push(id);
            }
            continue;
        }
        if run
            .as_ref()
            .is_some_and(|(q, ..)| !Arc::ptr_eq(q, &u.ack.queue))
        {
            ack_run(run.take(), &mut unknown, written, ctx);
        }
        let (_, acks, ids) =
            run.get_or_insert_with(|| (u.ack.queue.clone(), Vec::new(), Vec::new()));
        acks.push((sub, u.ack.seq));
        ids.push(id);
    }
    ack_run(run, &mut unknown, written, ctx);
    unknown
}

/// A queue, acknowledgements of its deliveries (subscriber, sequence
/// number), and their delivery ids.
type AckRun = (SharedQueue, Vec<(Subscriber, u64)>, Vec<u64>);

/// Settles a run of acknowledgements of one queue.
fn ack_run(
    run: Option<AckRun>,
    unknown: &mut Vec<u64>,
    written: &mut Written,
    ctx: &mut Context<'_>,
) {
    if let Some((queue, acks, ids)) = run {
        let not_held = |i: usize| unknown.push(ids[i]);
        ctx.shared
            .broker
            .ack_all(&queue, &acks, not_held, written, ctx.deliveries);
    }
}
