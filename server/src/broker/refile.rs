//! Messages that leave their queue for good: dead ones (delivered too
//! often) to their destination's dead-letter queue, expired ones to the
//! expiry queue, with the original destination and the reason in
//! properties.

use super::delivery::Deliveries;
use super::queue::{Dispatch, QueuedMessage, SharedQueue};
use super::request::Room;
use super::timers::Timed;
use super::{deliver_from, wake_blocked, Broker};
use crate::addresses::AddressSettings;
use crate::store::large::keep;
use crate::sync::lock;
use bytes::BytesMut;
use herald_protocol::{Destination, DestinationKind, Message};
use std::sync::atomic::Ordering;

/// Why a message leaves its queue for another.
#[derive(Clone, Copy)]
pub(super) enum Refile<'a> {
    /// Delivered too often; the reason.
    Dead(&'a str),
    /// Past its expiration.
    Expired,
}

impl Broker {
    /// Delivers a queue's dispatches and refiles what it found expired.
    pub(super) fn settled(
        &self,
        queue: &SharedQueue,
        dispatches: Vec<Dispatch>,
        out: &mut Deliveries,
    ) {
        let (expired, wake) = {
            let mut q = lock(queue);
            // A last-value queue's message replaced by one that arrived
            // (in a cluster, from the queue's stream) is done with.
            self.end_replaced(&mut q, out.commit.as_mut());
            (q.take_expired(), self.wake_of(&mut q))
        };
        // A delivery given back to wait out its redelivery delay.
        if let Some(due) = wake {
            self.timers.schedule(due, Timed::Queue(queue.clone()));
        }
        self.settled_apart(queue, (dispatches, expired), out);
    }

    /// [`Broker::settled`] with the expired messages taken already, under
    /// the lock of the change that dispatched: a send and a run of acks
    /// each locked their queue a second time for them, and that lock was
    /// the one the other worker's sends and acks contended for.
    pub(super) fn settled_apart(
        &self,
        queue: &SharedQueue,
        (dispatches, expired): (Vec<Dispatch>, Vec<QueuedMessage>),
        out: &mut Deliveries,
    ) {
        deliver_from(queue, dispatches, out);
        self.refile(queue, expired, Refile::Expired, out);
    }

    /// Moves dead messages to the dead-letter queue of their destination,
    /// with the original destination and the reason in properties.
    pub(super) fn dead_letter(
        &self,
        from: &SharedQueue,
        dead: Vec<QueuedMessage>,
        reason: &str,
        out: &mut Deliveries,
    ) {
        let n = dead.len() as u64;
        self.counters.dead_lettered.fetch_add(n, Ordering::Relaxed);
        self.refile(from, dead, Refile::Dead(reason), out);
    }

    /// Moves messages out of `from` for good: dead ones to their
    /// destination's dead-letter queue, expired ones to the expiry queue
    /// (or nowhere, if none is configured), with the original destination
    /// and the reason in properties.
    pub(super) fn refile(
        &self,
        from: &SharedQueue,
        messages: Vec<QueuedMessage>,
        why: Refile<'_>,
        out: &mut Deliveries,
    ) {
        if messages.is_empty() {
            return;
        }
        let (from_name, settings) = {
            let q = lock(from);
            (q.name().to_owned(), q.settings().clone())
        };
        for m in messages {
            // The copy is written before the original's record ends: a
            // crash between keeps both, not none.
            self.refile_one((&from_name, &settings), &m, why, out);
            self.ended(&from_name, &m, out.commit.as_mut());
        }
        wake_blocked(&mut lock(from), out);
    }

    /// Moves one message out of queue `from_name`, whose address has
    /// `settings`, for good (see [`Broker::refile`]).
    pub(super) fn refile_one(
        &self,
        (from_name, settings): (&str, &AddressSettings),
        m: &QueuedMessage,
        why: Refile<'_>,
        out: &mut Deliveries,
    ) {
        let Ok(mut message) = Message::decode(&m.block, m.deliveries) else {
            return;
        };
        let original = message
            .destination()
            .cloned()
            .unwrap_or_else(|| Destination::queue(from_name));
        let (target, reason) = match why {
            Refile::Dead(reason) => {
                let book = self.address_book();
                let prefix = book.defaults().dead_letter_prefix.as_str();
                if from_name.starts_with(prefix) || settings.dead_letter == from_name {
                    log::warn!(
                        "message {} failed in dead-letter queue {from_name}: dropped",
                        message.message_id(),
                    );
                    return;
                }
                let target = match settings.destination.kind {
                    DestinationKind::Queue => settings.dead_letter.clone(),
                    // A subscription's queue: by the message's topic, as
                    // before settings per address.
                    DestinationKind::Topic => self
                        .settings(original.kind, &original.name)
                        .dead_letter
                        .clone(),
                };
                (target, format!("{reason} ({} deliveries)", m.deliveries))
            }
            Refile::Expired => {
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                if settings.expiry.is_empty() {
                    log::debug!("message {} expired: dropped", message.message_id());
                    return;
                }
                // It must not expire again where it goes.
                message.expiration = 0;
                (
                    settings.expiry.clone(),
                    format!(
                        "expired at {}",
                        herald_protocol::utc::format_ms(m.expiration)
                    ),
                )
            }
        };
        message.set_property("HeraldOriginalDestination", original.to_string());
        message.set_property("HeraldDeadLetterReason", reason);
        message.set_destination(Some(Destination::queue(target.clone())));
        let mut block = BytesMut::new();
        if message.encode(&mut block).is_err() {
            return;
        }
        if self
            .send_to_queue(
                (&target, true),
                &keep(self.large(), block.freeze()),
                message.delivery_mode,
                Room::Move,
                None,
                out,
            )
            .is_err()
        {
            log::warn!(
                "queue {target} is full: message {} dropped",
                message.message_id()
            );
        }
    }
}
