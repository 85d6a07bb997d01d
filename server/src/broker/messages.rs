//! What the management interface does to single messages of a queue:
//! look at them without consuming, delete one, move or copy one to
//! another destination, replay chosen dead letters. Nothing here is on the
//! publish path; each call locks the one queue it reads or changes.
//!
//! A message is named by its message id (what clients set and see). Only
//! a message that waits (ready or scheduled) can be taken: one in flight
//! belongs to its consumer until it is acknowledged or comes back.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use herald_protocol::message::MessageRef;
use herald_protocol::{Destination, Message, MessageView};

use super::delivery::Deliveries;
use super::queue::Held;
use super::queued::QueuedMessage;
use super::request::{RepublishError, RouteError};
use super::{Broker, Room};
use crate::store::large::{keep, LargeStore};
use crate::sync::lock;

/// A copy of one message a queue holds, and where it is in the queue.
#[derive(Debug, Clone)]
pub struct HeldMessage {
    /// The message: its block, its deliveries so far.
    pub message: QueuedMessage,
    /// Waiting, scheduled or in flight.
    pub held: Held,
}

/// Why a message could not be acted on; the queue is as it was.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// There is no such queue.
    #[error("no queue '{0}'")]
    NoQueue(String),
    /// No waiting message has the id (one in flight cannot be taken).
    #[error("no message '{id}' waiting in '{queue}'{}", if *.in_flight {
        ": it is in flight to a consumer (act on it once it comes back, or it is acknowledged)"
    } else {
        ""
    })]
    NoMessage {
        /// The queue.
        queue: String,
        /// The id asked for.
        id: String,
        /// It is there, in flight.
        in_flight: bool,
    },
    /// The queue is shared by the nodes of a cluster (a Redis stream):
    /// its messages are not managed one by one.
    #[error(
        "queue '{0}' is shared by the cluster's nodes through Redis: its messages \
         are not managed one by one (purge and replay are)"
    )]
    Shared(String),
    /// The message does not decode, or what it would become is invalid.
    #[error(transparent)]
    Message(#[from] herald_protocol::Error),
    /// The destination refuses it (a full queue, strict mode).
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A dead letter that cannot go back where it came from.
    #[error(transparent)]
    Republish(#[from] RepublishError),
}

/// The message `block` holds, addressed to `to`, with the id `new_id` if
/// given (a copy).
pub fn readdressed(
    block: &Bytes,
    to: &Destination,
    new_id: Option<String>,
    large: Option<&Arc<LargeStore>>,
) -> Result<MessageView, MessageError> {
    let mut message = Message::decode(block, 0)?;
    message.set_destination(Some(to.clone()));
    if let Some(new_id) = new_id {
        message.set_message_id(new_id);
    }
    let mut encoded = BytesMut::new();
    message.encode(&mut encoded)?;
    Ok(MessageView::parse(keep(large, encoded.freeze()))?)
}

/// The message id of a held block ("" if it does not read).
pub fn message_id(block: &[u8]) -> &str {
    MessageRef::read(block).map_or("", |m| m.message_id)
}

impl Broker {
    /// A page of the messages queue `name` holds that `wanted` picks, in
    /// the order a person reads them (see [`super::Queue::held`]), and how
    /// many it picks in all; `None` if there is no such queue. Only the
    /// page is copied, however deep the queue.
    pub fn queue_messages(
        &self,
        name: &str,
        wanted: impl Fn(&QueuedMessage) -> bool,
        (offset, limit): (usize, usize),
    ) -> Option<(usize, Vec<HeldMessage>)> {
        let queue = self.find_queue(name)?;
        let mut q = lock(&queue);
        let mut total = 0;
        let mut page = Vec::new();
        for (m, held) in q.held().filter(|(m, _)| wanted(m)) {
            if total >= offset && page.len() < limit {
                page.push(HeldMessage {
                    message: m.clone(),
                    held,
                });
            }
            total += 1;
        }
        // The paged ones after, read as far as the page goes; those past
        // it are counted unread, whether `wanted` picks them or not.
        let paged = q.paged_messages();
        let mut read = 0;
        q.walk_paged(|m| {
            if page.len() >= limit || total >= offset.saturating_add(limit) {
                return false;
            }
            read += 1;
            if wanted(&m) {
                if total >= offset {
                    page.push(HeldMessage {
                        message: m,
                        held: Held::Paged,
                    });
                }
                total += 1;
            }
            true
        });
        Some((total + paged.saturating_sub(read), page))
    }

    /// Deletes the waiting message `id` of queue `name` for good.
    pub fn delete_message(&self, name: &str, id: &str) -> Result<(), MessageError> {
        let m = self.take_message(name, id)?;
        self.ended(name, &m, None);
        Ok(())
    }

    /// Moves (`copy_id` `None`) or copies the waiting message `id` of
    /// queue `name` to `to`. A copy is a new message, named `copy_id`; a
    /// moved one keeps its id and its properties. The new message is
    /// routed before the old one's record ends, so a crash between keeps
    /// both; one that cannot be routed stays where it was.
    pub fn move_message(
        &self,
        (name, id): (&str, &str),
        to: &Destination,
        copy_id: Option<String>,
        out: &mut Deliveries,
    ) -> Result<(), MessageError> {
        let moving = copy_id.is_none();
        let m = match moving {
            true => self.take_message(name, id)?,
            false => self.find_message(name, id)?,
        };
        let routed = self.send_as(&m.block, to, copy_id, out);
        match (routed, moving) {
            (Ok(()), true) => self.ended(name, &m, None),
            (Ok(()), false) => {}
            (Err(e), true) => {
                self.give_back(name, m, out);
                return Err(e);
            }
            (Err(e), false) => return Err(e),
        }
        Ok(())
    }

    /// Replays the dead letters `ids` of queue `name` to where each came
    /// from (see [`Broker::replay`]). Returns how many went back, and for
    /// each that did not, its id and why; those stay.
    pub fn replay_messages(
        &self,
        name: &str,
        ids: &[String],
        out: &mut Deliveries,
    ) -> Result<(usize, Vec<(String, String)>), MessageError> {
        self.managed(name)?;
        let (mut moved, mut failed) = (0, Vec::new());
        for id in ids {
            let m = match self.take_message(name, id) {
                Ok(m) => m,
                Err(e) => {
                    failed.push((id.clone(), e.to_string()));
                    continue;
                }
            };
            match self.republish(&m.block, out) {
                Ok(()) => {
                    moved += 1;
                    self.ended(name, &m, None);
                }
                Err(why) => {
                    failed.push((id.clone(), why.to_string()));
                    self.give_back(name, m, out);
                }
            }
        }
        Ok((moved, failed))
    }

    /// Sends the message `block` holds to `to`, with the id `new_id` if
    /// given (a copy), as a client's send with a receipt would be.
    pub fn send_as(
        &self,
        block: &Bytes,
        to: &Destination,
        new_id: Option<String>,
        out: &mut Deliveries,
    ) -> Result<(), MessageError> {
        let view = readdressed(block, to, new_id, self.large())?;
        self.publish(&view, Room::Refuse, None, out)?;
        Ok(())
    }

    /// The queue `name`, unless it is shared through Redis.
    fn managed(&self, name: &str) -> Result<super::SharedQueue, MessageError> {
        if self.sharing(name).is_some() {
            return Err(MessageError::Shared(name.to_owned()));
        }
        self.find_queue(name)
            .ok_or_else(|| MessageError::NoQueue(name.to_owned()))
    }

    /// Takes the waiting message `id` out of queue `name`.
    fn take_message(&self, name: &str, id: &str) -> Result<QueuedMessage, MessageError> {
        let queue = self.managed(name)?;
        let mut q = lock(&queue);
        q.take_waiting(|m| message_id(&m.block) == id)
            .ok_or_else(|| missing(name, id, q.held()))
    }

    /// A copy of the waiting message `id` of queue `name`.
    fn find_message(&self, name: &str, id: &str) -> Result<QueuedMessage, MessageError> {
        let queue = self.managed(name)?;
        let q = lock(&queue);
        let found = q
            .held()
            .find(|(m, held)| *held != Held::InFlight && message_id(&m.block) == id)
            .map(|(m, _)| m.clone());
        found.ok_or_else(|| missing(name, id, q.held()))
    }

    /// Puts a message taken out of queue `name` back, as it was.
    fn give_back(&self, name: &str, m: QueuedMessage, out: &mut Deliveries) {
        let Some(queue) = self.find_queue(name) else {
            return;
        };
        let mut dispatches = Vec::new();
        let due = lock(&queue).reinsert(m, &mut dispatches);
        if let Some(due) = due {
            self.timers
                .schedule(due, super::timers::Timed::Queue(queue.clone()));
        }
        self.settled(&queue, dispatches, out);
    }
}

/// The error for a message `id` that queue `name` does not have waiting.
fn missing<'a>(
    name: &str,
    id: &str,
    mut held: impl Iterator<Item = (&'a QueuedMessage, Held)>,
) -> MessageError {
    let in_flight = held.any(|(m, h)| h == Held::InFlight && message_id(&m.block) == id);
    MessageError::NoMessage {
        queue: name.to_owned(),
        id: id.to_owned(),
        in_flight,
    }
}
