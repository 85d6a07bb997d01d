//! BROWSE: the waiting messages of a queue, without consuming them, then a
//! RECEIPT that marks the end.

use bytes::Bytes;
use herald_protocol::frame::Browse;
use herald_protocol::ErrorCode;

use super::answer::receipt;
use crate::frontend::outbound::Outbound;
use crate::frontend::streams;
use crate::frontend::{poster, subscribe_refusal as refusal, Context, Flow, Notice, Refusal};
use crate::session::Session;
use crate::store::large::LargeStore;

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
    crate::frontend::authorize(
        session,
        crate::auth::Permission::Browse,
        herald_protocol::DestinationKind::Queue,
        &f.queue,
    )?;
    // A browser sees as many messages as a queue holds at most.
    let limit = ctx.shared.config.queues.max_messages;
    // A cluster's shared queue is read from Redis, on the cluster's
    // thread; the worker delivers what it found and the RECEIPT.
    if let Some(peers) = ctx.shared.broker.sharing(&f.queue) {
        let selector = ctx
            .shared
            .broker
            .parse_selector(&f.selector)
            .map_err(refusal)?;
        let (post, conn, subscription_id) = (poster(ctx.shared, ctx.me), ctx.me, f.subscription_id);
        peers.browse(
            &f.queue,
            selector,
            limit,
            Box::new(move |result| {
                post(Notice::Browsed {
                    conn,
                    subscription_id,
                    request_id,
                    result,
                })
            }),
        );
        return Ok(Flow::Continue);
    }
    let found = ctx
        .shared
        .broker
        .browse(&f.queue, &f.selector, limit)
        .map_err(refusal)?;
    let messages = found.into_iter().map(|m| (m.block, m.deliveries)).collect();
    let large = ctx.shared.broker.large().map(|l| &**l);
    deliver((out, session), f.subscription_id, messages, large);
    receipt(out, request_id);
    Ok(Flow::Continue)
}

/// Queues a browse's messages (block, times delivered before) for the
/// browser; large messages' bodies follow.
pub(crate) fn deliver(
    (out, session): (&mut Outbound, &mut Session),
    subscription_id: u32,
    messages: Vec<(Bytes, u32)>,
    large: Option<&LargeStore>,
) {
    for (block, deliveries) in messages {
        let delivery_id = session.next_delivery_id();
        let ids = (subscription_id, delivery_id, deliveries + 1);
        let never = crate::frontend::outbound::Droppable::Never;
        streams::push_native(out, ids, block, never, large);
    }
}
