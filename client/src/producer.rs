//! Producers: send messages to one destination.

use std::io::Read;
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use herald_protocol::frame::CHUNK_HEAD_LEN;
use herald_protocol::{
    Body, DeliveryMode, Destination, FrameKind, Message, MessageId, Stamp, Streamed,
};

use crate::connection::Inner;
use crate::error::{Error, Result};
use crate::stream::CHUNK_BYTES;
use crate::writer::MessageIds;

/// Sends messages to one destination ([`Session::send`](crate::Session::send)
/// sends to any).
///
/// ```no_run
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use herald_client::{AckMode, ConnectionFactory, DeliveryMode, Destination, Message};
/// # fn main() -> herald_client::Result<()> {
/// let connection = ConnectionFactory::new("herald://127.0.0.1:7777")?.create_connection()?;
/// let session = connection.create_session(AckMode::Auto)?;
/// let producer = session.create_producer(&Destination::queue("invoices"))?;
/// // Persistent, as a JMS producer's messages are by default: this waits
/// // until the server has it on disk.
/// producer.send(Message::text("invoice 1"))?;
/// // Many in flight at once, each confirmed on the reader thread.
/// let confirmed = Arc::new(AtomicU64::new(0));
/// for n in 2..=100 {
///     let confirmed = confirmed.clone();
///     producer.send_async(Message::text(format!("invoice {n}")), move |r| {
///         if r.is_ok() {
///             confirmed.fetch_add(1, Ordering::Relaxed);
///         }
///     })?;
/// }
/// // Events nobody must wait for: sent without a receipt, gone if the
/// // server stops before it delivers them.
/// let mut ticks = session.create_producer(&Destination::topic("ticks"))?;
/// ticks.set_delivery_mode(DeliveryMode::NonPersistent);
/// ticks.set_time_to_live(std::time::Duration::from_secs(5));
/// ticks.send(Message::text("EURUSD 1.0841"))?;
/// // A message's own choice wins over the producer's.
/// ticks.send(Message::text("market closed").persistent().with_priority(9))?;
/// # Ok(()) }
/// ```
pub struct Producer {
    inner: Arc<Inner>,
    /// Its number on the connection, which its message ids carry.
    number: u32,
    destination: Destination,
    /// JMS's producer defaults, for the messages that do not choose
    /// their own ([`Message::or_defaults`]).
    delivery_mode: DeliveryMode,
    priority: u8,
    /// Zero: messages never expire.
    time_to_live: Duration,
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
            delivery_mode: DeliveryMode::Persistent,
            priority: herald_protocol::message::DEFAULT_PRIORITY,
            time_to_live: Duration::ZERO,
            delivery_delay: Duration::ZERO,
            transaction,
        }
    }

    /// `message` with this producer's defaults in the headers it did not
    /// choose, as JMS sends it.
    fn defaulted(&self, mut message: Message) -> Message {
        let expiration = match self.time_to_live.is_zero() {
            true => 0,
            false => now_millis().saturating_add(self.time_to_live.as_millis() as i64),
        };
        message.or_defaults(self.delivery_mode, self.priority, expiration);
        message
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
        let timestamp = now_millis();
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

    /// Sets the delivery mode of the messages sent from now on that do not
    /// choose their own ([`Message::persistent`],
    /// [`Message::non_persistent`]). Persistent by default, as in JMS.
    pub fn set_delivery_mode(&mut self, mode: DeliveryMode) {
        self.delivery_mode = mode;
    }

    /// The delivery mode of messages that do not choose their own.
    pub fn delivery_mode(&self) -> DeliveryMode {
        self.delivery_mode
    }

    /// Sets the priority, 0 (lowest) to 9 (highest), of the messages sent
    /// from now on that do not choose their own; 4 by default. Above 9 is
    /// refused.
    pub fn set_priority(&mut self, priority: u8) -> Result<()> {
        if priority > herald_protocol::message::MAX_PRIORITY {
            return Err(Error::InvalidArgument(format!(
                "priority {priority}: a priority is 0 to {}",
                herald_protocol::message::MAX_PRIORITY
            )));
        }
        self.priority = priority;
        Ok(())
    }

    /// The priority of messages that do not choose their own.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// Sets how long the messages sent from now on that do not choose
    /// their own ([`Message::with_ttl`]) live: they expire this long after
    /// they are sent. Zero, the default, means never.
    pub fn set_time_to_live(&mut self, ttl: Duration) {
        self.time_to_live = ttl;
    }

    /// How long messages that do not choose their own live; zero = ever.
    pub fn time_to_live(&self) -> Duration {
        self.time_to_live
    }

    /// Sends a message, with this producer's defaults (delivery mode,
    /// priority, time to live) for the headers it did not choose. A
    /// non-persistent one is queued for the connection's flusher and this
    /// returns at once (errors the server reports later reach the
    /// exception listener). A persistent one waits, as in JMS, until the
    /// server has it in its journal. In a transacted session every send
    /// returns at once: the commit waits.
    pub fn send(&self, message: Message) -> Result<()> {
        let message = self.defaulted(message);
        if message.delivery_mode == DeliveryMode::Persistent && self.transaction.is_none() {
            return self.request(&message);
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
        let message = self.defaulted(message);
        let (kind, encode) = self.framed(&message);
        self.inner
            .request_async(kind, encode, Box::new(completion))
            .map(drop)
    }

    /// Sends and waits until the server confirms it has routed the message,
    /// and for a persistent one written it to its journal (or refuses it,
    /// which is returned as an error).
    pub fn send_with_receipt(&self, message: Message) -> Result<()> {
        self.request(&self.defaulted(message))
    }

    /// Sends `message`, defaults applied, and waits for its receipt.
    /// Sends a large message: `message`'s headers and properties, and a
    /// body of `len` bytes read from `body` and streamed to the server in
    /// chunks as it is read, so that it is never whole in memory, here or
    /// in the server (which keeps it in a file). Waits for the RECEIPT, as
    /// [`Producer::send_with_receipt`] does, once the whole body is sent.
    /// A receiver reads it with [`Consumer::body`](crate::Consumer::body).
    ///
    /// If `body` fails or ends before `len` bytes, the server is told to
    /// drop what it has, and nothing is sent. Inside a listener, the
    /// RECEIPT is not waited for (a refusal reaches the exception
    /// listener).
    pub fn send_stream(&self, message: Message, len: u64, mut body: impl Read) -> Result<()> {
        let mut message = self.defaulted(message);
        let stream = self.inner.streams.next_stream();
        message.body = Body::Stream(Streamed { len, stream });
        let (kind, encode) = self.framed(&message);
        let (tx, rx) = mpsc::sync_channel(1);
        // The connection the SEND goes to: its chunks go there or nowhere.
        let generation = self.inner.writer.generation();
        let request_id = match self.inner.on_reader_thread() {
            true => {
                self.inner.writer.send_stamped(kind, 0, encode)?;
                None
            }
            false => {
                let waiter = Box::new(move |r| drop(tx.try_send(r)));
                Some(self.inner.request_async(kind, encode, waiter)?)
            }
        };
        let chunk = CHUNK_BYTES.min(self.inner.writer.max_body().saturating_sub(CHUNK_HEAD_LEN));
        let mut buf = vec![0; chunk.max(1)];
        let mut left = len;
        while left > 0 {
            // An answer before the whole body is a refusal: stop there.
            if let Ok(answer) = rx.try_recv() {
                return answer;
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let failed = match body.read(&mut buf[..want]) {
                Ok(0) => Error::InvalidArgument(format!(
                    "the body ended after {} of its {len} bytes: nothing was sent",
                    len - left
                )),
                Ok(n) => {
                    let data = &buf[..n];
                    self.inner
                        .writer
                        .send_within(generation, FrameKind::Chunk, |d| {
                            d.put_u64(stream);
                            d.put_slice(data);
                            Ok(())
                        })?;
                    left -= n as u64;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => Error::Io {
                    context: format!(
                        "reading the body after {} of its {len} bytes: nothing was sent",
                        len - left
                    ),
                    source,
                },
            };
            // Given up: the server drops what it has and answers nothing.
            if let Some(id) = request_id {
                self.inner.forget_request(id);
            }
            self.inner
                .writer
                .send_within(generation, FrameKind::Chunk, |d| {
                    d.put_u64(stream);
                    Ok(())
                })?;
            return Err(failed);
        }
        match request_id {
            Some(id) => self.inner.await_answer(id, &rx, "the SEND receipt"),
            None => Ok(()),
        }
    }

    fn request(&self, message: &Message) -> Result<()> {
        let (kind, encode) = self.framed(message);
        self.inner.request_with(kind, "the SEND receipt", encode)
    }
}

/// Milliseconds since the Unix epoch.
fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("destination", &self.destination)
            .field("delivery_mode", &self.delivery_mode)
            .field("priority", &self.priority)
            .field("time_to_live", &self.time_to_live)
            .field("delivery_delay", &self.delivery_delay)
            .finish()
    }
}
