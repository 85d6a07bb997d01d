//! Sessions: the context in which producers and consumers are created, and
//! which fixes how received messages are acknowledged.

use std::sync::{Arc, Mutex};

use herald_protocol::frame::Subscribe;
use herald_protocol::{Destination, Frame};

use crate::connection::Inner;
use crate::consumer::{Consumer, ConsumerShared};
use crate::error::Result;
use crate::producer::Producer;

/// How a session acknowledges the messages it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckMode {
    /// A message counts as acknowledged once it has been handed to the
    /// application (returned by `receive` or passed to the listener).
    Auto,
}

/// A single-threaded context for producing and consuming.
pub struct Session {
    inner: Arc<Inner>,
    ack_mode: AckMode,
    /// Subscription ids of the consumers created here, for `close`.
    consumers: Mutex<Vec<u32>>,
}

impl Session {
    pub(crate) fn new(inner: Arc<Inner>, ack_mode: AckMode) -> Session {
        Session {
            inner,
            ack_mode,
            consumers: Mutex::new(Vec::new()),
        }
    }

    /// The session's acknowledgement mode.
    pub fn ack_mode(&self) -> AckMode {
        self.ack_mode
    }

    /// A producer that sends to `destination` (a name, not a pattern).
    pub fn create_producer(&self, destination: &Destination) -> Result<Producer> {
        herald_protocol::destination::validate_name(&destination.name)?;
        Ok(Producer::new(self.inner.clone(), destination.clone()))
    }

    /// A consumer of `destination`, which for topics may be a pattern with
    /// `*` and `#`. Returns once the server has confirmed the subscription,
    /// so every message published after this returns is received.
    pub fn create_consumer(&self, destination: &Destination) -> Result<Consumer> {
        herald_protocol::Pattern::parse(&destination.name)?;
        let id = self.inner.next_subscription_id();
        let shared = Arc::new(ConsumerShared::new(self.inner.config.pending_messages));
        // Registered before SUBSCRIBE goes out: the first message can
        // arrive before the RECEIPT does.
        self.inner
            .consumers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, shared.clone());
        let subscribe = Frame::Subscribe(Subscribe {
            subscription_id: id,
            kind: destination.kind,
            pattern: destination.name.clone(),
        });
        if let Err(e) = self.inner.request(&subscribe, "the SUBSCRIBE receipt") {
            self.inner
                .consumers
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(e);
        }
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
        Ok(Consumer::new(
            self.inner.clone(),
            shared,
            id,
            destination.clone(),
        ))
    }

    /// Closes every consumer created in this session.
    pub fn close(&self) -> Result<()> {
        let ids = std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first_error = None;
        for id in ids {
            if let Err(e) = crate::consumer::unsubscribe(&self.inner, id, true) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("ack_mode", &self.ack_mode)
            .finish()
    }
}
