//! BROWSE: the waiting messages of a queue, without consuming them, then a
//! RECEIPT that marks the end.

use std::sync::Arc;

use bytes::Bytes;
use herald_protocol::frame::Browse;
use herald_protocol::ErrorCode;

use super::subscribe::refusal;
use super::{receipt, Context, Flow, Refusal};
use crate::net::outbound::Outbound;
use crate::net::Command;
use crate::session::Session;
use herald_protocol::destination::temporary_owner;

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
    // A cluster's shared queue is read from Redis, on the cluster's
    // thread; the worker delivers what it found and the RECEIPT.
    let shared_queue = temporary_owner(&f.queue).is_none();
    if let Some(cluster) = ctx.shared.cluster.get().filter(|_| shared_queue) {
        let selector = ctx
            .shared
            .broker
            .parse_selector(&f.selector)
            .map_err(refusal)?;
        let (shared, conn, subscription_id) =
            (Arc::downgrade(ctx.shared), ctx.me, f.subscription_id);
        let limit = ctx.shared.config.queues.max_messages;
        cluster.browse(
            &f.queue,
            selector,
            limit,
            Box::new(move |result| {
                if let Some(shared) = shared.upgrade() {
                    shared.workers[conn.worker].send(Command::Browsed {
                        conn,
                        subscription_id,
                        request_id,
                        result,
                    });
                }
            }),
        );
        return Ok(Flow::Continue);
    }
    let found = ctx
        .shared
        .broker
        .browse(&f.queue, &f.selector)
        .map_err(refusal)?;
    let messages = found.into_iter().map(|m| (m.block, m.deliveries)).collect();
    deliver(out, session, f.subscription_id, messages);
    receipt(out, request_id);
    Ok(Flow::Continue)
}

/// Queues a browse's messages (block, times delivered before) for the
/// browser.
pub(crate) fn deliver(
    out: &mut Outbound,
    session: &mut Session,
    subscription_id: u32,
    messages: Vec<(Bytes, u32)>,
) {
    for (block, deliveries) in messages {
        let delivery_id = session.next_delivery_id();
        out.push_delivery(
            subscription_id,
            delivery_id,
            deliveries + 1,
            block,
            crate::net::outbound::Droppable::Never,
        );
    }
}
