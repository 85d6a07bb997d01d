//! A connection: one blocking TCP socket, one reader thread that decodes
//! what the server sends and runs listeners, one flusher thread that
//! writes what callers encoded (see `writer.rs`).
//!
//! Locks, none held across a socket read or write: `pending` (waiters for
//! RECEIPTs), `consumers` (subscription id → consumer), each consumer's
//! listener slot, the exception listener, the writer's buffer. No code path
//! holds two of them at once except a consumer's listener slot, which is
//! held while a message is queued so that installing a listener and
//! draining the queue is atomic.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_protocol::codec::DecodeError;
use herald_protocol::frame::{Connect, Connected, Delivery};
use herald_protocol::{Decoder, Frame, FrameKind, Message, RawFrame};
use rustls::ClientConfig;

use crate::consumer::ConsumerShared;
use crate::error::{Error, Result};
use crate::factory::FactoryConfig;
use crate::session::{AckMode, Session, SessionShared};
use crate::transport::{ReadHalf, Transport};
use crate::writer::Writer;

/// Largest frame the client accepts from a server.
const MAX_INBOUND_FRAME: u32 = 256 << 20;

type ExceptionListener = Box<dyn FnMut(Error) + Send>;
/// Called with the answer to a request: on the reader thread, or on the
/// thread that ends the connection.
type Waiter = Box<dyn FnOnce(Result<()>) + Send>;

/// State shared by the connection handle, its sessions, producers and
/// consumers, and its two threads.
pub(crate) struct Inner {
    pub(crate) config: FactoryConfig,
    pub(crate) writer: Writer,
    /// A handle on the socket used only to shut it down.
    stream: TcpStream,
    connected: Connected,
    /// Waiters for a RECEIPT or ERROR, by request id.
    pending: Mutex<HashMap<u32, Waiter>>,
    next_request: AtomicU32,
    pub(crate) consumers: RwLock<HashMap<u32, Arc<ConsumerShared>>>,
    next_subscription: AtomicU32,
    next_message: AtomicU64,
    exception_listener: Mutex<Option<ExceptionListener>>,
    /// Set when this side starts closing: the end of the socket is then
    /// expected and not reported as a loss.
    closing: AtomicBool,
    /// Why the connection ended, once it has.
    ended: Mutex<Option<String>>,
    /// DUPS_OK sessions.
    lazy_sessions: Mutex<Vec<Weak<SessionShared>>>,
    /// The reader thread, which runs listeners: a request made there
    /// cannot wait for its RECEIPT, which that same thread reads.
    reader_thread: OnceLock<ThreadId>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent before anything
    // that could panic, so a poisoned lock's data is still good.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub(crate) fn next_subscription_id(&self) -> u32 {
        self.next_subscription.fetch_add(1, Ordering::Relaxed)
    }

    /// The prefix of this connection's temporary queue names.
    pub(crate) fn temporary_prefix(&self) -> String {
        format!("temp.{}.", self.connected.connection_id)
    }

    /// A new message id, unique across connections of this process run.
    pub(crate) fn next_message_id(&self) -> String {
        let n = self.next_message.fetch_add(1, Ordering::Relaxed);
        format!("ID:{}-{}", self.connected.connection_id, n)
    }

    /// Registers a DUPS_OK session, whose held-back acknowledgements the
    /// reader sends after each batch of frames it reads.
    pub(crate) fn add_lazy_session(&self, session: Weak<SessionShared>) {
        let mut sessions = lock(&self.lazy_sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(session);
    }

    fn flush_lazy_acks(&self) {
        let sessions: Vec<_> = lock(&self.lazy_sessions)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for s in sessions {
            if let Err(e) = s.flush_lazy() {
                log::debug!("acknowledgements not sent: {e}");
            }
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// Whether this is the reader thread (inside a listener).
    pub(crate) fn on_reader_thread(&self) -> bool {
        self.reader_thread.get() == Some(&std::thread::current().id())
    }

    /// Sends a frame that asks for a RECEIPT and waits for it. Inside a
    /// listener, which runs on the thread that reads RECEIPTs, it cannot
    /// wait: the frame goes without asking, and an ERROR, should one come,
    /// reaches the exception listener. Frames keep their order either way.
    pub(crate) fn request(&self, frame: &Frame, what: &'static str) -> Result<()> {
        self.request_with(frame.kind(), what, |d| frame.encode_body(d))
    }

    /// Like [`Inner::request`], with the body written by `encode`.
    pub(crate) fn request_with<F>(
        &self,
        kind: FrameKind,
        what: &'static str,
        encode: F,
    ) -> Result<()>
    where
        F: FnOnce(&mut BytesMut) -> std::result::Result<(), herald_protocol::Error>,
    {
        if self.on_reader_thread() {
            return self.writer.send_with(kind, 0, encode);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let id = self.request_async(kind, encode, Box::new(move |r| drop(tx.try_send(r))))?;
        let timeout = self.request_timeout();
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.pending).remove(&id);
                Err(Error::Timeout {
                    what,
                    millis: timeout.as_millis(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.end_error()),
        }
    }

    /// Sends a frame asking for a RECEIPT; `waiter` gets the answer later.
    /// Returns the request id.
    pub(crate) fn request_async<F>(&self, kind: FrameKind, encode: F, waiter: Waiter) -> Result<u32>
    where
        F: FnOnce(&mut BytesMut) -> std::result::Result<(), herald_protocol::Error>,
    {
        let id = loop {
            let id = self.next_request.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                break id;
            }
        };
        lock(&self.pending).insert(id, waiter);
        if let Err(e) = self.writer.send_with(kind, id, encode) {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        Ok(id)
    }

    /// The error for an operation on a connection that has ended.
    pub(crate) fn end_error(&self) -> Error {
        match lock(&self.ended).clone() {
            Some(why) if !self.closing.load(Ordering::Acquire) => Error::ConnectionLost(why),
            _ => Error::Closed,
        }
    }

    fn report(&self, error: Error) {
        let mut slot = lock(&self.exception_listener);
        match slot.as_mut() {
            Some(listener) => {
                let call = std::panic::AssertUnwindSafe(|| listener(error));
                if std::panic::catch_unwind(call).is_err() {
                    log::error!("the exception listener panicked");
                }
            }
            None => log::warn!("herald connection: {error}"),
        }
    }

    /// Ends the connection: fails every waiter, wakes every consumer and,
    /// unless this side was closing, tells the exception listener.
    fn end(&self, why: String) {
        {
            let mut ended = lock(&self.ended);
            if ended.is_some() {
                return;
            }
            *ended = Some(why.clone());
        }
        let expected = self.closing.load(Ordering::Acquire);
        if expected {
            self.writer.close();
        } else {
            self.writer.fail(&why);
        }
        let waiters: Vec<Waiter> = lock(&self.pending).drain().map(|(_, w)| w).collect();
        for waiter in waiters {
            waiter(Err(if expected {
                Error::Closed
            } else {
                Error::ConnectionLost(why.clone())
            }));
        }
        let consumers: Vec<_> = self
            .consumers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for c in consumers {
            c.close();
        }
        if !expected {
            self.report(Error::ConnectionLost(why));
        }
    }

    fn complete(&self, request_id: u32, result: Result<()>) -> bool {
        // Taken out first: the waiter runs without the lock held.
        let waiter = lock(&self.pending).remove(&request_id);
        match waiter {
            Some(waiter) => {
                waiter(result);
                true
            }
            None => false,
        }
    }
}

/// A connection to a Herald server.
pub struct Connection {
    inner: Arc<Inner>,
    reader: Mutex<Option<JoinHandle<()>>>,
    flusher: Mutex<Option<(JoinHandle<()>, mpsc::Receiver<()>)>>,
}

impl Connection {
    /// Opens a connection to `host:port` with these settings, over TLS
    /// with `tls`.
    pub(crate) fn open(
        host: &str,
        port: u16,
        tls: Option<Arc<ClientConfig>>,
        config: FactoryConfig,
    ) -> Result<Connection> {
        let address = format!("{host}:{port}");
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let addrs: Vec<_> = address
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("cannot resolve {address}"), e))?
            .collect();
        let mut last_error = None;
        let mut stream = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let Some(stream) = stream else {
            let e =
                last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"));
            return Err(Error::io(format!("cannot connect to {address}"), e));
        };
        let ctx = |what: &str| format!("{what} {address}");
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(connect_timeout)))
            .map_err(|e| Error::io(ctx("cannot configure socket to"), e))?;
        let transport = Transport::new(stream, tls.map(|config| (config, host)))?;
        let io_error = |e| Error::io(ctx("cannot use the socket to"), e);
        let mut stream = transport.reader().map_err(io_error)?;
        let mut write_stream = transport.writer().map_err(io_error)?;

        // The handshake is synchronous, before any thread starts.
        let connect = Frame::Connect(Connect {
            client_id: config.client_id.clone(),
            user: config.user.clone(),
            password: config.password.clone(),
            heartbeat_ms: config.heartbeat_ms,
        });
        let mut buf = BytesMut::new();
        connect.encode(0, &mut buf)?;
        write_stream
            .write_all(&buf)
            .map_err(|e| Error::io(ctx("cannot send CONNECT to"), e))?;
        let decoder = Decoder::new(MAX_INBOUND_FRAME);
        let mut rbuf = BytesMut::new();
        let raw = loop {
            if let Some(raw) = decoder
                .decode(&mut rbuf)
                .map_err(|e| Error::Protocol(e.error))?
            {
                break raw;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(Error::ConnectionLost(format!(
                        "{address} closed the connection during CONNECT"
                    )))
                }
                Ok(n) => rbuf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Error::Timeout {
                        what: "CONNECTED",
                        millis: connect_timeout.as_millis(),
                    })
                }
                Err(e) => return Err(Error::io(ctx("cannot read CONNECTED from"), e)),
            }
        };
        let connected = match Frame::decode(raw)? {
            Frame::Connected(c) => c,
            Frame::Error(e) => {
                return Err(Error::Server {
                    code: e.code,
                    message: e.message,
                    fatal: e.fatal,
                })
            }
            other => {
                return Err(Error::ConnectionLost(format!(
                    "expected CONNECTED, got {:?}",
                    other.kind()
                )))
            }
        };

        let heartbeat = Duration::from_millis(connected.heartbeat_ms.into());
        let read_stream = stream;
        let socket = transport.socket_handle().map_err(io_error)?;
        let inner = Arc::new(Inner {
            config,
            writer: Writer::new(),
            stream: socket,
            connected,
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicU32::new(1),
            consumers: RwLock::new(HashMap::new()),
            next_subscription: AtomicU32::new(1),
            next_message: AtomicU64::new(1),
            exception_listener: Mutex::new(None),
            closing: AtomicBool::new(false),
            ended: Mutex::new(None),
            lazy_sessions: Mutex::new(Vec::new()),
            reader_thread: OnceLock::new(),
        });

        let (done_tx, done_rx) = mpsc::channel();
        let flusher_inner = inner.clone();
        let flusher = std::thread::Builder::new()
            .name("herald-flusher".into())
            .spawn(move || {
                flusher_inner.writer.run_flusher(write_stream);
                let _ = done_tx.send(());
            })
            .map_err(|e| Error::io("cannot start the flusher thread", e))?;
        let reader_inner = inner.clone();
        let reader = std::thread::Builder::new()
            .name("herald-reader".into())
            .spawn(move || read_loop(reader_inner, read_stream, rbuf, heartbeat))
            .map_err(|e| Error::io("cannot start the reader thread", e))?;
        Ok(Connection {
            inner,
            reader: Mutex::new(Some(reader)),
            flusher: Mutex::new(Some((flusher, done_rx))),
        })
    }

    /// A session in which to create producers and consumers.
    pub fn create_session(&self, ack_mode: AckMode) -> Result<Session> {
        if lock(&self.inner.ended).is_some() {
            return Err(self.inner.end_error());
        }
        Ok(Session::new(self.inner.clone(), ack_mode))
    }

    /// Called with every asynchronous error: a lost connection, or an
    /// ERROR frame that answers no particular request.
    pub fn set_exception_listener(&self, listener: impl FnMut(Error) + Send + 'static) {
        *lock(&self.inner.exception_listener) = Some(Box::new(listener));
    }

    /// The server's version.
    pub fn server_version(&self) -> &str {
        &self.inner.connected.server_version
    }

    /// The server's id for this connection.
    pub fn connection_id(&self) -> &str {
        &self.inner.connected.connection_id
    }

    /// The negotiated heart-beat interval.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.inner.connected.heartbeat_ms.into())
    }

    /// The client id this connection presented.
    pub fn client_id(&self) -> &str {
        &self.inner.config.client_id
    }

    /// Whether the connection has ended (closed or lost).
    pub fn is_closed(&self) -> bool {
        lock(&self.inner.ended).is_some()
    }

    /// Round trip to the server: sends PING and waits for PONG.
    pub fn ping(&self) -> Result<()> {
        self.inner.request(&Frame::Ping, "PONG")
    }

    /// Closes gracefully: DISCONNECT, wait for its RECEIPT, then stop the
    /// threads. Every consumer stops receiving.
    pub fn close(&self) -> Result<()> {
        if self.inner.closing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let result = match self
            .inner
            .request(&Frame::Disconnect, "the DISCONNECT receipt")
        {
            // Lost before or during the goodbye: nothing left to close.
            Err(Error::ConnectionLost(_) | Error::Closed) => Ok(()),
            other => other,
        };
        self.teardown();
        result
    }

    /// Stops both threads. Never waits long: the flusher gets a moment to
    /// write what is queued, then the socket is shut down under it.
    fn teardown(&self) {
        self.inner.writer.close();
        if let Some((flusher, done)) = lock(&self.flusher).take() {
            let _ = done.recv_timeout(Duration::from_secs(1));
            let _ = self.inner.stream.shutdown(Shutdown::Both);
            let _ = flusher.join();
        }
        let _ = self.inner.stream.shutdown(Shutdown::Both);
        self.inner.end("closed by this side".into());
        // Closing from inside a listener runs on the reader thread, which
        // cannot join itself; it ends on its own once the socket is shut.
        if !self.inner.on_reader_thread() {
            if let Some(reader) = lock(&self.reader).take() {
                let _ = reader.join();
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.inner.closing.swap(true, Ordering::AcqRel) {
            // No waiting for a receipt in Drop: say goodbye and go.
            let _ = self.inner.writer.send(&Frame::Disconnect, 0);
        }
        self.teardown();
    }
}

/// The reader thread: decode, dispatch, keep the heart beating.
fn read_loop(inner: Arc<Inner>, mut stream: ReadHalf, mut buf: BytesMut, heartbeat: Duration) {
    let _ = inner.reader_thread.set(std::thread::current().id());
    let decoder = Decoder::new(MAX_INBOUND_FRAME);
    // Ping when either direction has been quiet for a third of the
    // interval; give up when the server has been silent for two intervals
    // (it answers every PING, so that is several missed answers).
    let ping_every = heartbeat / 3;
    let tick = (ping_every / 2).max(Duration::from_millis(5));
    if let Err(e) = stream.set_read_timeout(Some(tick)) {
        inner.end(format!("cannot configure the socket: {e}"));
        return;
    }
    let mut last_read = Instant::now();
    let mut last_ping = Instant::now();
    let mut scratch = vec![0u8; 64 * 1024];
    // Frames that came with CONNECTED.
    let mut why = dispatch_all(&inner, &decoder, &mut buf).err();
    while why.is_none() {
        match stream.read(&mut scratch) {
            Ok(0) => {
                why = Some("the server closed the connection".to_owned());
                break;
            }
            Ok(n) => {
                last_read = Instant::now();
                buf.extend_from_slice(&scratch[..n]);
                if let Err(e) = dispatch_all(&inner, &decoder, &mut buf) {
                    why = Some(e);
                    break;
                }
                inner.flush_lazy_acks();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                why = Some(format!("read failed: {e}"));
                break;
            }
        }
        let now = Instant::now();
        if now.duration_since(last_read) > heartbeat * 2 {
            why = Some(format!(
                "nothing heard from the server for {} ms",
                (heartbeat * 2).as_millis()
            ));
            break;
        }
        let quiet = now.duration_since(last_read).min(inner.writer.idle_for());
        if quiet >= ping_every && now.duration_since(last_ping) >= ping_every {
            last_ping = now;
            if inner.writer.send(&Frame::Ping, 0).is_err() {
                why = Some(inner.writer.failure().unwrap_or_else(|| "closed".into()));
            }
        }
    }
    inner.end(why.unwrap_or_default());
}

/// Handles every whole frame in `buf`; an error ends the connection.
fn dispatch_all(
    inner: &Inner,
    decoder: &Decoder,
    buf: &mut BytesMut,
) -> std::result::Result<(), String> {
    loop {
        let raw = match decoder.decode(buf) {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(()),
            Err(DecodeError { error, .. }) => {
                return Err(format!("undecodable frame from the server: {error}"))
            }
        };
        dispatch(inner, raw)?;
    }
}

fn dispatch(inner: &Inner, raw: RawFrame) -> std::result::Result<(), String> {
    let bad = |e: herald_protocol::Error| format!("bad frame from the server: {e}");
    let request_id = raw.header.request_id;
    if raw.header.kind == FrameKind::Message {
        let d = Delivery::decode_head(raw.body).map_err(bad)?;
        let mut message = Message::decode(&d.message, d.delivery_count).map_err(bad)?;
        message.delivery_id = d.delivery_id;
        let consumer = inner
            .consumers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&d.subscription_id)
            .cloned();
        // A message for a consumer closed a moment ago is dropped.
        if let Some(c) = consumer {
            c.deliver(message);
        }
        return Ok(());
    }
    match Frame::decode(raw).map_err(bad)? {
        Frame::Receipt | Frame::Pong => {
            inner.complete(request_id, Ok(()));
        }
        Frame::Ping => {
            let _ = inner.writer.send(&Frame::Pong, request_id);
        }
        Frame::Error(e) => {
            let error = || Error::Server {
                code: e.code,
                message: e.message.clone(),
                fatal: e.fatal,
            };
            let answered = request_id != 0 && inner.complete(request_id, Err(error()));
            if e.fatal {
                // The server closes next: end with its reason, not with
                // "the server closed the connection".
                return Err(format!("server error {}: {}", e.code, e.message));
            }
            if !answered {
                inner.report(error());
            }
        }
        other => {
            return Err(format!(
                "the server sent {:?}, which servers do not send",
                other.kind()
            ))
        }
    }
    Ok(())
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("connection_id", &self.connection_id())
            .field("client_id", &self.client_id())
            .field("closed", &self.is_closed())
            .finish()
    }
}
