//! Producers: send messages to one destination.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use herald_protocol::{DeliveryMode, Destination, FrameKind, Message, MessageId, Stamp};

use crate::connection::Inner;
use crate::error::Result;
use crate::writer::MessageIds;

/// Sends messages to one destination ([`Session::send`](crate::Session::send)
/// sends to any).
///
/// ```no_run
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use herald_client::{AckMode, ConnectionFactory, Destination, Message};
/// # fn main() -> herald_client::Result<()> {
/// let connection = ConnectionFactory::new("herald://127.0.0.1:7777")?.create_connection()?;
/// let session = connection.create_session(AckMode::Auto)?;
/// let producer = session.create_producer(&Destination::queue("invoices"))?;
/// // Waits until the server has it on disk.
/// producer.send(Message::text("invoice 1").persistent())?;
/// // Many in flight at once, each confirmed on the reader thread.
/// let confirmed = Arc::new(AtomicU64::new(0));
/// for n in 2..=100 {
///     let confirmed = confirmed.clone();
///     producer.send_async(Message::text(format!("invoice {n}")).persistent(), move |r| {
///         if r.is_ok() {
///             confirmed.fetch_add(1, Ordering::Relaxed);
///         }
///     })?;
/// }
/// # Ok(()) }
/// ```
pub struct Producer {
    inner: Arc<Inner>,
    /// Its number on the connection, which its message ids carry.
    number: u32,
    destination: Destination,
    /// JMS 2.0 delivery delay: messages become visible this long after
    /// they are sent.
    delivery_delay: Duration,
    /// The transacted session's transaction, whose commit sends.
    transaction: Option<u32>,
}

impl Producer {
    pub(crate) fn new(
        inner: Arc<Inner>,
        destination: Destination,
        transaction: Option<u32>,
    ) -> Producer {
        Producer {
            number: inner.next_producer(),
            inner,
            destination,
            delivery_delay: Duration::ZERO,
            transaction,
        }
    }

    /// The frame a message goes in (TX_SEND in a transacted session) and
    /// its encoder, which stamps it with the next of the connection's
    /// message ids.
    fn framed<'a>(
        &'a self,
        message: &'a Message,
    ) -> (
        FrameKind,
        impl FnOnce(
                &mut BytesMut,
                &mut MessageIds,
            ) -> std::result::Result<(), herald_protocol::Error>
            + 'a,
    ) {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        // The message's own delay, or the producer's if that ends later.
        let delivery_time = match self.delivery_delay.is_zero() {
            true => message.delivery_time,
            false => message
                .delivery_time
                .max(timestamp + self.delivery_delay.as_millis() as i64),
        };
        let destination = &self.destination;
        let (transaction, number) = (self.transaction, self.number);
        let kind = match transaction {
            Some(_) => FrameKind::TxSend,
            None => FrameKind::Send,
        };
        (kind, move |d: &mut BytesMut, ids: &mut MessageIds| {
            if let Some(id) = transaction {
                d.put_u32(id);
            }
            let (prefix, id) = ids.take();
            let stamp = Stamp {
                destination,
                message_id: MessageId::Produced(prefix, number, id),
                timestamp,
                delivery_time,
            };
            message.encode_stamped(&stamp, d)
        })
    }

    /// This producer's number on its connection: the ids of the messages
    /// it sends carry it, and a refused send reported to the exception
    /// listener ([`Error::SendRefused`](crate::Error::SendRefused)) names it.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Where this producer sends.
    pub fn destination(&self) -> &Destination {
        &self.destination
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
    /// as in JMS, until the server has it in its journal. In a transacted
    /// session every send returns at once: the commit waits.
    pub fn send(&self, message: Message) -> Result<()> {
        if message.delivery_mode == DeliveryMode::Persistent && self.transaction.is_none() {
            return self.send_with_receipt(message);
        }
        let (kind, encode) = self.framed(&message);
        self.inner.writer.send_stamped(kind, 0, encode)
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
        let (kind, encode) = self.framed(&message);
        self.inner
            .request_async(kind, encode, Box::new(completion))
            .map(drop)
    }

    /// Sends and waits until the server confirms it has routed the message,
    /// and for a persistent one written it to its journal (or refuses it,
    /// which is returned as an error).
    pub fn send_with_receipt(&self, message: Message) -> Result<()> {
        let (kind, encode) = self.framed(&message);
        self.inner.request_with(kind, "the SEND receipt", encode)
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("destination", &self.destination)
            .finish()
    }
}
