//! Producers: send messages to one destination.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use herald_protocol::{DeliveryMode, Destination, FrameKind, Message};

use crate::connection::Inner;
use crate::error::Result;

/// Sends messages to one destination.
pub struct Producer {
    inner: Arc<Inner>,
    destination: Destination,
    /// JMS 2.0 delivery delay: messages become visible this long after
    /// they are sent.
    delivery_delay: Duration,
}

impl Producer {
    pub(crate) fn new(inner: Arc<Inner>, destination: Destination) -> Producer {
        Producer {
            inner,
            destination,
            delivery_delay: Duration::ZERO,
        }
    }

    /// Where this producer sends.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    fn stamp(&self, mut message: Message) -> Message {
        message.message_id = self.inner.next_message_id();
        message.destination = Some(self.destination.clone());
        message.timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        if !self.delivery_delay.is_zero() {
            message.delivery_time = message.timestamp + self.delivery_delay.as_millis() as i64;
        }
        message
    }

    /// Sets the delivery delay (JMS 2.0): each message sent from now on is
    /// delivered no sooner than this after it was sent, also across a
    /// server restart for persistent ones.
    pub fn set_delivery_delay(&mut self, delay: Duration) {
        self.delivery_delay = delay;
    }

    /// Sends a message. A non-persistent one is queued for the
    /// connection's flusher and this returns at once (errors the server
    /// reports later reach the exception listener). A persistent one waits,
    /// as in JMS, until the server has it in its journal.
    pub fn send(&self, message: Message) -> Result<()> {
        if message.delivery_mode == DeliveryMode::Persistent {
            return self.send_with_receipt(message);
        }
        let message = self.stamp(message);
        self.inner
            .writer
            .send_with(FrameKind::Send, 0, |d| message.encode(d))
    }

    /// Sends without waiting and calls `completion` with the server's
    /// answer once it comes (JMS 2.0's asynchronous send): for a persistent
    /// message, once it is in the journal. The completion runs on the
    /// connection's reader thread, so it should be quick. Many sends can be
    /// in flight at once, which is how a persistent producer keeps the
    /// journal's group commit busy.
    pub fn send_async(
        &self,
        message: Message,
        completion: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Result<()> {
        let message = self.stamp(message);
        self.inner
            .request_async(FrameKind::Send, |d| message.encode(d), Box::new(completion))
            .map(drop)
    }

    /// Sends and waits until the server confirms it has routed the message,
    /// and for a persistent one written it to its journal (or refuses it,
    /// which is returned as an error).
    pub fn send_with_receipt(&self, message: Message) -> Result<()> {
        let message = self.stamp(message);
        self.inner
            .request_with(FrameKind::Send, "the SEND receipt", |d| message.encode(d))
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("destination", &self.destination)
            .finish()
    }
}
