//! Publishing: route a message to every matching subscription, or into
//! its queue, whatever protocol it came in.

use std::time::{Duration, Instant};

use herald_protocol::destination::is_temporary;
use herald_protocol::{DeliveryMode, DestinationKind, ErrorCode, MessageView};

use super::context::{authorize as check, await_journal, Context, Parked, Refusal};
use super::outbound::Outbound;
use crate::auth::Permission;
use crate::broker::{Room, RouteError};
use crate::config::FullPolicy;
use crate::session::Session;

/// What became of a published message.
pub enum Published {
    /// Routed: its receipt can go now.
    Now,
    /// Routed and written to the journal: the worker answers the request
    /// when the journal confirms.
    Later,
    /// Its queue is full: held back until there is room.
    Held(Parked),
}

/// Refuses a message the user may not publish. Anyone may answer to a
/// temporary queue or topic (a request's reply-to), but only to one that
/// exists: a send never makes one, so no one can take another
/// connection's temporary queue name before it does.
pub fn authorize(
    session: &Session,
    message: &MessageView,
    ctx: &Context<'_>,
) -> Result<(), Refusal> {
    authorize_named(session, message, message.destination(), ctx)
}

/// [`authorize`], for the message's destination `name`.
fn authorize_named(
    session: &Session,
    message: &MessageView,
    name: &str,
    ctx: &Context<'_>,
) -> Result<(), Refusal> {
    if !is_temporary(name) {
        return check(session, Permission::Publish, message.destination_kind, name);
    }
    let missing = message.destination_kind == DestinationKind::Queue
        && ctx.shared.broker.find_queue(name).is_none();
    if missing {
        return Err(Refusal::soft(
            ErrorCode::InvalidDestination,
            format!(
                "there is no temporary queue '{name}': its connection has ended, or never made it"
            ),
        ));
    }
    Ok(())
}

/// The message as the broker keeps it, whatever protocol it came in: its
/// body in a file of its own if it is past its address's
/// `large_message_threshold` ([`Broker::spilled`](crate::broker::Broker::spilled)).
/// One whose body cannot be written (the disk at its floor, which health
/// shows) stays in memory, as a message within `max_frame_size` may.
pub fn spill(message: MessageView, ctx: &Context<'_>) -> MessageView {
    spilled(&message, ctx).unwrap_or(message)
}

/// [`spill`] of a borrowed message: `None` if it stays as it is.
fn spilled(message: &MessageView, ctx: &Context<'_>) -> Option<MessageView> {
    match ctx.shared.broker.spilled(message)? {
        Ok(spilled) => Some(spilled),
        Err(e) => {
            log::debug!(
                "a message to '{}' past its large_message_threshold stays in memory: {e}",
                message.destination()
            );
            None
        }
    }
}

/// Routes a message, whatever protocol it came in; `since` is when it was
/// first held back, if it was. A refusal of a send that asked for no
/// RECEIPT names the message, so the client can say which one it was.
pub fn publish(
    message: MessageView,
    request_id: u32,
    since: Option<Instant>,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Published, Refusal> {
    let known = ctx.known_destination(&message);
    let name = known.as_deref().unwrap_or_else(|| message.destination());
    let mut kept = None;
    let routed = authorize_named(session, &message, name, ctx).and_then(|()| {
        // Kept on disk only once it may be sent.
        kept = spilled(&message, ctx);
        let sent = kept.as_ref().unwrap_or(&message);
        route(sent, name, (request_id, since), session, out, ctx)
    });
    let message = kept.unwrap_or(message);
    match routed {
        Ok(Routing::Done(published)) => Ok(published),
        Ok(Routing::Hold { since, for_server }) => Ok(Published::Held(Parked {
            message,
            request_id,
            since,
            for_server,
        })),
        Err(refusal) if request_id == 0 => Err(refusal.naming(&message)),
        Err(refusal) => Err(refusal),
    }
}

/// Why a send to a full queue is held or refused, and what then.
fn full_reason(full: &RouteError, block: bool) -> String {
    match block {
        true => format!("{full}: publishing waits until consumers drain it"),
        false => format!("{full}: publishes to it are refused until consumers drain it"),
    }
}

/// What routing did with a send.
enum Routing {
    /// Routed: its RECEIPT goes now, or once the journal has it.
    Done(Published),
    /// Held back: it waits for room since then.
    Hold { since: Instant, for_server: bool },
}

/// [`publish`], with the message borrowed: it moves only into a held send.
fn route(
    message: &MessageView,
    name: &str,
    (request_id, since): (u32, Option<Instant>),
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Routing, Refusal> {
    let most = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_pending_receipts);
    let persistent = message.delivery_mode == DeliveryMode::Persistent;
    if request_id != 0 && persistent && session.pending_receipts >= most {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!("{most} requests of this connection already wait for the journal (max_pending_receipts)"),
        ));
    }
    let disk = match persistent {
        true => ctx.shared.broker.refusing_persistent(),
        false => None,
    };
    let for_server = disk.is_some();
    let routed = match disk {
        // Paging does not help a full disk: a paging queue's publishers
        // wait, as blocked ones do.
        Some(why) => Err((
            why,
            matches!(
                ctx.shared.config.queues.full_policy,
                FullPolicy::Block | FullPolicy::Page
            ),
        )),
        None => match ctx.shared.broker.publish_to(
            message,
            name,
            Room::Wait(ctx.me),
            Some(ctx.me),
            ctx.deliveries,
        ) {
            Ok(routed) => Ok(routed),
            Err(RouteError::Undeclared(why)) => {
                return Err(Refusal::soft(ErrorCode::UndeclaredTopic, why.to_string()))
            }
            Err(missing @ RouteError::NoQueue(_)) => {
                return Err(Refusal::soft(
                    ErrorCode::InvalidDestination,
                    missing.to_string(),
                ))
            }
            Err(RouteError::Sample(why)) => {
                return Err(Refusal::soft(ErrorCode::SampleRejected, why.to_string()))
            }
            Err(full @ RouteError::QueueFull { .. }) => {
                // A queue that cannot page (a broker without page files)
                // holds its publishers back instead.
                let block = matches!(
                    &full,
                    RouteError::QueueFull { full: f, .. }
                        if matches!(f.policy, FullPolicy::Block | FullPolicy::Page)
                );
                Err((full_reason(&full, block), block))
            }
        },
    };
    // Full, a queue or the disk: held back for a while, or refused.
    let routed = match routed {
        Ok(routed) => routed,
        Err((why, block)) => {
            let since = since.unwrap_or_else(Instant::now);
            let limit = Duration::from_millis(ctx.shared.config.queues.block_timeout_ms.into());
            if block && since.elapsed() < limit {
                return Ok(Routing::Hold { since, for_server });
            }
            return Err(Refusal::soft(ErrorCode::QueueFull, why));
        }
    };
    let (journaled, written) = (routed.journaled, routed.written.clone());
    ctx.routed(message, name, routed);
    if journaled && request_id != 0 {
        // The RECEIPT waits until the journal has the message on disk.
        await_journal(request_id, written, session, out, ctx);
        return Ok(Routing::Done(Published::Later));
    }
    Ok(Routing::Done(Published::Now))
}
