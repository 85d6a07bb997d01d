//! Settling deliveries (ACK and NACK) and committing transactions,
//! whatever protocol asks.
//!
//! A commit first checks that it can succeed (every queue it sends to has
//! room, every topic is allowed), then routes and settles as one
//! [`Atomic`](crate::broker::Atomic) commit: its persistent messages and
//! acknowledgements reach the journal as one record. A commit that cannot
//! succeed does nothing and says why. What a transaction holds until it
//! ends is the session's ([`Transactions`](crate::session::Transactions)).

use std::collections::HashMap;
use std::sync::Arc;

use herald_protocol::{DeliveryMode, DestinationKind, ErrorCode};

use super::context::{Context, Refusal};
use crate::broker::{Room, SharedQueue, Subscriber, Written};
use crate::session::{Deferred, Held, Outcome, Session};

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
        let Some(u) = session.traffic_mut().and_then(|t| t.unacked.remove(&id)) else {
            unknown.push(id);
            continue;
        };
        let sub = Subscriber {
            conn: ctx.me,
            subscription_id: u.subscription_id,
        };
        let broker = &ctx.shared.broker;
        let held = match outcome {
            Outcome::Processed => None,
            Outcome::Redeliver => Some(broker.nack(&u.ack, &sub, ctx.deliveries)),
            Outcome::Reject => Some(broker.reject(&u.ack, &sub, ctx.deliveries)),
            Outcome::Release => Some(broker.give_up(&u.ack, &sub, ctx.deliveries)),
        };
        if let Some(held) = held {
            if !held {
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

/// Carries out a transaction's work. Returns what its RECEIPT must check
/// (the journal kept it); refuses, having done nothing, if it cannot all
/// succeed.
pub fn commit(
    held: Held,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<Written, Refusal> {
    let rolled_back = |why: String| Refusal::soft(ErrorCode::TransactionRolledBack, why);
    let ops = held.into_ops().map_err(|doomed| rolled_back(doomed.0))?;
    let broker = &ctx.shared.broker;
    let mut per_queue: HashMap<&str, usize> = HashMap::new();
    for op in &ops {
        if let Deferred::Settle(ids, _) = op {
            let outstanding = |id: &u64| {
                session
                    .traffic_ref()
                    .is_some_and(|t| t.unacked.contains_key(id))
            };
            if let Some(id) = ids.iter().find(|id| !outstanding(id)) {
                return Err(rolled_back(format!(
                    "transaction rolled back: delivery {id} is not outstanding on this connection"
                )));
            }
        }
        if let Deferred::Send(view) = op {
            if view.delivery_mode == DeliveryMode::Persistent {
                if let Some(why) = broker.refusing_persistent() {
                    return Err(rolled_back(format!("transaction rolled back: {why}")));
                }
            }
            match view.destination_kind {
                DestinationKind::Queue => *per_queue.entry(view.destination()).or_default() += 1,
                DestinationKind::Topic => broker
                    .check_topic(view.destination())
                    .map_err(|e| rolled_back(format!("transaction rolled back: {e}")))?,
            }
        }
    }
    for (queue, n) in per_queue {
        broker
            .has_room(queue, n)
            .map_err(|e| rolled_back(format!("transaction rolled back: {e}")))?;
    }
    let atomic = broker.begin_atomic(ctx.deliveries);
    for op in ops {
        match op {
            Deferred::Send(view) => {
                let name = view.destination();
                match broker.publish_to(&view, name, Room::Overfill, Some(ctx.me), ctx.deliveries) {
                    Ok(routed) => ctx.routed(&view, name, routed),
                    Err(e) => log::warn!("a committed message was not routed: {e}"),
                }
            }
            Deferred::Settle(ids, outcome) => {
                settle(ids, outcome, session, &mut Written::default(), ctx);
            }
        }
    }
    Ok(broker.end_atomic(atomic, Some(ctx.me), ctx.deliveries))
}
