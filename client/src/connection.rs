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
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_protocol::codec::DecodeError;
use herald_protocol::destination::temporary_prefix;
use herald_protocol::frame::{Connected, Delivery, Subscribe};
use herald_protocol::{Body, Decoder, ErrorCode, Frame, FrameKind, Message, RawFrame};

use crate::consumer::{ConsumerShared, Consumers, LastConsumer};
use crate::dial::{Dialer, Link, MAX_INBOUND_FRAME};
use crate::error::{Ending, Error, Result};
use crate::factory::FactoryConfig;
use crate::session::{AckMode, Session, SessionShared};
use crate::stream::Streams;
use crate::sync::{lock, read, write};
use crate::transport::ReadHalf;
use crate::writer::{MessageIds, Writer, SHRINK_AFTER};

type ExceptionListener = Box<dyn FnMut(Error) + Send>;
/// Called with the answer to a request: on the reader thread, or on the
/// thread that ends the connection.
type Waiter = Box<dyn FnOnce(Result<()>) + Send>;

/// State shared by the connection handle, its sessions, producers and
/// consumers, and its two threads.
pub(crate) struct Inner {
    pub(crate) config: FactoryConfig,
    /// How to connect again after a failure.
    dialer: Dialer,
    pub(crate) writer: Writer,
    /// A handle on the socket used only to shut it down.
    stream: Mutex<TcpStream>,
    /// What the server said in CONNECTED (the last one, after failover).
    connected: RwLock<Connected>,
    /// The shortest consumer deadline in ms (0 = none), which sets how
    /// often the reader looks at them.
    shortest_deadline: AtomicU64,
    /// The flusher thread and its "done" signal.
    flusher: Mutex<Option<(JoinHandle<()>, mpsc::Receiver<()>)>>,
    /// Waiters for a RECEIPT or ERROR, by request id.
    pending: Mutex<HashMap<u32, Waiter>>,
    next_request: AtomicU32,
    pub(crate) consumers: Consumers,
    /// Large messages' bodies on their way in.
    pub(crate) streams: Streams,
    next_subscription: AtomicU32,
    next_producer: AtomicU32,
    exception_listener: Mutex<Option<ExceptionListener>>,
    /// Set when this side starts closing: the end of the socket is then
    /// expected and not reported as a loss.
    closing: AtomicBool,
    /// Why the connection ended, once it has.
    ended: Mutex<Option<Ending>>,
    /// The sessions, to flush DUPS_OK acknowledgements and to forget
    /// deliveries of a connection that failed.
    sessions: Mutex<Vec<Weak<SessionShared>>>,
    /// The reader thread, which runs listeners: a request made there
    /// cannot wait for its RECEIPT, which that same thread reads.
    reader_thread: OnceLock<ThreadId>,
}

impl Inner {
    pub(crate) fn next_subscription_id(&self) -> u32 {
        self.next_subscription.fetch_add(1, Ordering::Relaxed)
    }

    /// The prefix of this connection's temporary queue names.
    pub(crate) fn temporary_prefix(&self) -> String {
        temporary_prefix(&self.connected().connection_id)
    }

    /// A number for a new producer, which its message ids carry.
    pub(crate) fn next_producer(&self) -> u32 {
        self.next_producer.fetch_add(1, Ordering::Relaxed)
    }

    /// The producer that sent `message_id`, if this connection sent it
    /// under its current id ("ID:<connection>-<producer>-<n>").
    fn producer_of(&self, message_id: &str) -> Option<u32> {
        let prefix = self.writer.id_prefix();
        let (producer, _) = message_id.strip_prefix(&prefix)?.split_once('-')?;
        producer.parse().ok()
    }

    /// Takes what a server said in CONNECTED into use.
    fn set_connected(&self, connected: Connected) {
        self.writer
            .set_connected(connected.max_frame_size, id_prefix(&connected));
        *write(&self.connected) = connected;
    }

    fn connected(&self) -> std::sync::RwLockReadGuard<'_, Connected> {
        read(&self.connected)
    }

    /// Registers a session: the reader sends its held-back DUPS_OK
    /// acknowledgements after each batch of frames it reads, and a
    /// failover makes it forget the old connection's deliveries.
    pub(crate) fn add_session(&self, session: Weak<SessionShared>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(session);
    }

    fn sessions(&self) -> Vec<Arc<SessionShared>> {
        lock(&self.sessions)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn flush_lazy_acks(&self) {
        for s in self.sessions() {
            if let Err(e) = s.flush_lazy() {
                log::debug!("acknowledgements not sent: {e}");
            }
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// Whether this thread must not wait for what the reader thread
    /// brings: it is the reader thread (inside a listener), or it runs a
    /// listener on messages that waited for one (see
    /// [`Inner::as_listener`]), while the reader waits for it to finish.
    pub(crate) fn on_reader_thread(&self) -> bool {
        self.reader_thread.get() == Some(&std::thread::current().id())
            || LISTENING_FOR.get() == self as *const Inner as usize
    }

    /// Runs `f` (listeners called off the reader thread) so that this
    /// thread counts as the reader's meanwhile.
    pub(crate) fn as_listener<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = LISTENING_FOR.replace(self as *const Inner as usize);
        let result = f();
        LISTENING_FOR.set(before);
        result
    }

    /// Sends a frame that asks for a RECEIPT and waits for it. Inside a
    /// listener, which runs on the thread that reads RECEIPTs, it cannot
    /// wait: the frame goes without asking, and an ERROR, should one come,
    /// reaches the exception listener. Frames keep their order either way.
    pub(crate) fn request(&self, frame: &Frame, what: &'static str) -> Result<()> {
        self.request_with(frame.kind(), what, |d, _| frame.encode_body(d))
    }

    /// Like [`Inner::request`], with the body written by `encode`.
    pub(crate) fn request_with<F>(
        &self,
        kind: FrameKind,
        what: &'static str,
        encode: F,
    ) -> Result<()>
    where
        F: FnOnce(
            &mut BytesMut,
            &mut MessageIds,
        ) -> std::result::Result<(), herald_protocol::Error>,
    {
        if self.on_reader_thread() {
            return self.writer.send_stamped(kind, 0, encode);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let id = self.request_async(kind, encode, Box::new(move |r| drop(tx.try_send(r))))?;
        self.await_answer(id, &rx, what)
    }

    /// Waits for the answer to a request `request_async` made with a
    /// waiter that passes it on to `rx`.
    pub(crate) fn await_answer(
        &self,
        request_id: u32,
        rx: &mpsc::Receiver<Result<()>>,
        what: &'static str,
    ) -> Result<()> {
        let timeout = self.request_timeout();
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                self.forget_request(request_id);
                Err(Error::Timeout {
                    what,
                    millis: timeout.as_millis(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.end_error()),
        }
    }

    /// Stops waiting for the answer to request `request_id`: none comes.
    pub(crate) fn forget_request(&self, request_id: u32) {
        lock(&self.pending).remove(&request_id);
    }

    /// Sends a frame asking for a RECEIPT; `waiter` gets the answer later.
    /// Returns the request id.
    pub(crate) fn request_async<F>(&self, kind: FrameKind, encode: F, waiter: Waiter) -> Result<u32>
    where
        F: FnOnce(
            &mut BytesMut,
            &mut MessageIds,
        ) -> std::result::Result<(), herald_protocol::Error>,
    {
        let id = self.next_request_id();
        lock(&self.pending).insert(id, waiter);
        if let Err(e) = self.writer.send_stamped(kind, id, encode) {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        Ok(id)
    }

    /// The error for an operation on a connection that has ended.
    pub(crate) fn end_error(&self) -> Error {
        match lock(&self.ended).as_ref() {
            Some(ending) if !self.closing.load(Ordering::Acquire) => ending.error(),
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
    fn end(&self, ending: Ending) {
        {
            let mut ended = lock(&self.ended);
            if ended.is_some() {
                return;
            }
            *ended = Some(ending.clone());
        }
        let expected = self.closing.load(Ordering::Acquire);
        if expected {
            self.writer.close();
        } else {
            self.writer.fail(&ending);
        }
        self.streams.clear();
        let waiters: Vec<Waiter> = lock(&self.pending).drain().map(|(_, w)| w).collect();
        for waiter in waiters {
            waiter(Err(if expected {
                Error::Closed
            } else {
                ending.error()
            }));
        }
        for c in self.consumer_list() {
            c.close();
        }
        if !expected {
            self.report(ending.error());
        }
    }

    /// A consumer asks for a deadline of `period`.
    pub(crate) fn watch_deadline(&self, period: Duration) {
        let ms = (period.as_millis() as u64).max(1);
        let _ = self
            .shortest_deadline
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                (d == 0 || ms < d).then_some(ms)
            });
    }

    /// Tells the exception listener of every consumer whose deadline
    /// passed with no message.
    fn check_deadlines(&self, now: Instant) {
        for c in self.consumer_list() {
            if let Some(period) = c.deadline_missed(now) {
                let destination = c.subscription().map(|s| s.pattern).unwrap_or_default();
                self.report(Error::DeadlineMissed {
                    destination,
                    period_ms: period.as_millis(),
                });
            }
        }
    }

    fn consumer_list(&self) -> Vec<Arc<ConsumerShared>> {
        self.consumers.all().values().cloned().collect()
    }

    fn next_request_id(&self) -> u32 {
        loop {
            let id = self.next_request.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    /// Waits `delay`; false if the connection is closed meanwhile.
    fn sleep_unless_closing(&self, delay: Duration) -> bool {
        let until = Instant::now() + delay;
        while !self.closing.load(Ordering::Acquire) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
        false
    }

    fn shutdown_socket(&self) {
        let _ = lock(&self.stream).shutdown(Shutdown::Both);
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

/// A connection to a Herald server: a socket, a reader thread that runs
/// listeners, and a flusher thread.
///
/// A `Connection` is a cheap handle: clones, and the [`Session`]s made
/// from it, share one connection, which stays open until
/// [`Connection::close`] (on any handle) or until the last of them is
/// dropped (then it says goodbye without waiting). So a function may make
/// a connection, return only a session, and the session still works. A
/// listener that holds its session keeps the connection open until
/// `close` is called.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
    keeper: Arc<Keeper>,
}

/// Closes the connection when the last handle that keeps it goes.
pub(crate) struct Keeper {
    inner: Arc<Inner>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// Starts a flusher thread for the writer's socket; `done` says when it
/// has ended.
fn start_flusher(inner: &Arc<Inner>) -> Result<()> {
    let (done_tx, done_rx) = mpsc::channel();
    let flusher_inner = inner.clone();
    let flusher = std::thread::Builder::new()
        .name("herald-flusher".into())
        .spawn(move || {
            flusher_inner.writer.run_flusher();
            let _ = done_tx.send(());
        })
        .map_err(|e| Error::io("cannot start the flusher thread", e))?;
    *lock(&inner.flusher) = Some((flusher, done_rx));
    Ok(())
}

impl Connection {
    /// Opens a connection to the first of the dialer's servers that
    /// answers.
    pub(crate) fn open(dialer: Dialer) -> Result<Connection> {
        let link = dialer.dial()?;
        let heartbeat = Duration::from_millis(link.connected.heartbeat_ms.into());
        let send_timeout = Duration::from_millis(dialer.config.send_timeout_ms);
        let writer = Writer::new(send_timeout, link.writer);
        writer.set_connected(link.connected.max_frame_size, id_prefix(&link.connected));
        let inner = Arc::new(Inner {
            config: dialer.config.clone(),
            dialer,
            writer,
            stream: Mutex::new(link.socket),
            connected: RwLock::new(link.connected),
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicU32::new(1),
            consumers: Consumers::default(),
            streams: Streams::default(),
            next_subscription: AtomicU32::new(1),
            next_producer: AtomicU32::new(1),
            exception_listener: Mutex::new(None),
            closing: AtomicBool::new(false),
            ended: Mutex::new(None),
            sessions: Mutex::new(Vec::new()),
            reader_thread: OnceLock::new(),
            flusher: Mutex::new(None),
            shortest_deadline: AtomicU64::new(0),
        });
        start_flusher(&inner)?;
        let reader_inner = inner.clone();
        let (reader, leftover) = (link.reader, link.leftover);
        let reader = std::thread::Builder::new()
            .name("herald-reader".into())
            .spawn(move || read_loop(reader_inner, reader, leftover, heartbeat))
            .map_err(|e| Error::io("cannot start the reader thread", e))?;
        let keeper = Arc::new(Keeper {
            inner: inner.clone(),
            reader: Mutex::new(Some(reader)),
        });
        Ok(Connection { inner, keeper })
    }

    /// A session in which to create producers and consumers.
    pub fn create_session(&self, ack_mode: AckMode) -> Result<Session> {
        if lock(&self.inner.ended).is_some() {
            return Err(self.inner.end_error());
        }
        Ok(Session::new(self.clone(), ack_mode))
    }

    /// Called with every asynchronous error: a lost connection, or an
    /// ERROR frame that answers no particular request.
    pub fn set_exception_listener(&self, listener: impl FnMut(Error) + Send + 'static) {
        *lock(&self.inner.exception_listener) = Some(Box::new(listener));
    }

    /// The server's version.
    pub fn server_version(&self) -> String {
        self.inner.connected().server_version.clone()
    }

    /// What the server said its user should know of this session, such
    /// as credentials it did not check because it has no users; `None`
    /// when it said nothing.
    pub fn server_notice(&self) -> Option<String> {
        Some(self.inner.connected().notice.clone()).filter(|n| !n.is_empty())
    }

    /// The server's id for this connection (a new one after a failover).
    pub fn connection_id(&self) -> String {
        self.inner.connected().connection_id.clone()
    }

    /// The negotiated heart-beat interval.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.inner.connected().heartbeat_ms.into())
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

    /// Closes gracefully: every consumer is closed as by
    /// [`Consumer::close`](crate::Consumer::close) (what it prefetched and
    /// never handed out is not counted as delivered), then DISCONNECT,
    /// wait for its RECEIPT, and stop the threads. Dropping the connection
    /// does the same without waiting. A connection that is cut instead (the
    /// process killed, the network lost) cannot say what was read: the
    /// server counts every delivery it held as delivered.
    pub fn close(&self) -> Result<()> {
        self.keeper.close()
    }

    /// The shared state, for the sessions made from it.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl Keeper {
    fn close(&self) -> Result<()> {
        if self.inner.closing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if self.inner.writer.is_paused() {
            // Away and reconnecting: there is no one to say goodbye to.
            self.teardown();
            return Ok(());
        }
        self.unsubscribe_all();
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

    /// Ends every consumer before the DISCONNECT, each saying what its
    /// application read, so that what it prefetched and never read does
    /// not count as delivered.
    fn unsubscribe_all(&self) {
        let consumers: Vec<u32> = self.inner.consumers.all().keys().copied().collect();
        for id in consumers {
            let _ = crate::consumer::unsubscribe(&self.inner, id, false);
        }
    }

    /// Stops both threads. Never waits long: the flusher gets a moment to
    /// write what is queued, then the socket is shut down under it.
    fn teardown(&self) {
        self.inner.writer.close();
        let flusher = lock(&self.inner.flusher).take();
        if let Some((flusher, done)) = flusher {
            let _ = done.recv_timeout(Duration::from_secs(1));
            self.inner.shutdown_socket();
            let _ = flusher.join();
        }
        self.inner.shutdown_socket();
        self.inner.end(String::from("closed by this side").into());
        // Closing from inside a listener runs on the reader thread, which
        // cannot join itself; it ends on its own once the socket is shut.
        if !self.inner.on_reader_thread() {
            if let Some(reader) = lock(&self.reader).take() {
                let _ = reader.join();
            }
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // No waiting for a receipt in Drop (nor for a connection that is
        // away to come back): say goodbye and go.
        if !self.inner.closing.swap(true, Ordering::AcqRel) && !self.inner.writer.is_paused() {
            self.unsubscribe_all();
            let _ = self.inner.writer.send(&Frame::Disconnect, 0);
        }
        self.teardown();
    }
}

/// Why the session with a server ended, and whether another may follow.
struct Lost {
    why: Ending,
    /// A failure of the network or of that server (the connection may
    /// fail over), not a refusal or a protocol error.
    resumable: bool,
}

impl Lost {
    fn network(why: String) -> Lost {
        Lost {
            why: why.into(),
            resumable: true,
        }
    }

    fn fatal(why: String) -> Lost {
        Lost {
            why: why.into(),
            resumable: false,
        }
    }
}

/// The reader thread: serves one session with a server after another,
/// failing over between them when the connection is set to.
fn read_loop(inner: Arc<Inner>, mut stream: ReadHalf, buf: BytesMut, heartbeat: Duration) {
    let _ = inner.reader_thread.set(std::thread::current().id());
    let mut heartbeat = heartbeat;
    let mut inbox = Inbox::new(buf);
    loop {
        let lost = serve(&inner, &mut stream, &mut inbox, heartbeat);
        let fails_over = inner.config.reconnect_attempts > 0 && lost.resumable;
        if !fails_over || inner.closing.load(Ordering::Acquire) {
            inner.end(lost.why);
            return;
        }
        match failover(&inner, &lost.why.why) {
            Ok((reader, leftover, interval)) => {
                stream = reader;
                inbox.buf = leftover;
                heartbeat = interval;
            }
            Err(why) => {
                inner.end(why.into());
                return;
            }
        }
    }
}

/// What the reader asks the socket for at first, and, once a read has
/// filled that, at most: each read of a stream of deliveries costs a
/// system call and one of TCP's window updates to the server, and reading
/// 256 KiB instead of 64 KiB at a time cut the client's CPU per message
/// by about a tenth (docs/performance.md). A quiet connection keeps the
/// smaller buffer.
const FIRST_READ: usize = 64 * 1024;
const MAX_READ: usize = 256 * 1024;

/// The reader's buffers: the scratch space the socket is read into and
/// the bytes read and not yet decoded. What a busy stretch or a large
/// message grew them to is given back once the connection has read
/// nothing for `SHRINK_AFTER`.
struct Inbox {
    scratch: Vec<u8>,
    buf: BytesMut,
}

impl Inbox {
    fn new(buf: BytesMut) -> Inbox {
        Inbox {
            scratch: vec![0u8; FIRST_READ],
            buf,
        }
    }

    /// Reads once from `stream` onto the undecoded bytes.
    fn read(&mut self, stream: &mut impl Read) -> io::Result<usize> {
        let n = stream.read(&mut self.scratch)?;
        self.buf.extend_from_slice(&self.scratch[..n]);
        if n == self.scratch.len() && n < MAX_READ {
            // More was waiting: a busy connection reads more at a time.
            self.scratch.resize(MAX_READ, 0);
        }
        Ok(n)
    }

    /// Nothing was read for a while: back to the first sizes (the bytes
    /// of a frame not yet whole are kept).
    fn idle(&mut self) {
        if self.scratch.len() > FIRST_READ {
            self.scratch = vec![0u8; FIRST_READ];
        }
        if self.buf.capacity() > FIRST_READ && self.buf.len() <= FIRST_READ {
            self.buf = BytesMut::from(&self.buf[..]);
        }
    }
}

/// Decodes, dispatches and keeps the heart beating until the session
/// ends.
fn serve(
    inner: &Arc<Inner>,
    stream: &mut ReadHalf,
    inbox: &mut Inbox,
    heartbeat: Duration,
) -> Lost {
    let decoder = Decoder::new(MAX_INBOUND_FRAME);
    // Ping when either direction has been quiet for a third of the
    // interval; give up when the server has been silent for two intervals
    // (it answers every PING, so that is several missed answers).
    let ping_every = heartbeat / 3;
    let heartbeat_tick = (ping_every / 2).max(Duration::from_millis(5));
    let mut tick = heartbeat_tick;
    if let Err(e) = stream.set_read_timeout(Some(tick)) {
        return Lost::network(format!("cannot configure the socket: {e}"));
    }
    let mut deadline_check = Instant::now();
    let mut last_read = Instant::now();
    let mut last_ping = Instant::now();
    let mut last = LastConsumer::default();
    // Frames that came with CONNECTED.
    if let Err(lost) = dispatch_all(inner, &decoder, &mut inbox.buf, &mut last) {
        return lost;
    }
    loop {
        // Deadlines are looked at four times a period, so one is reported
        // at most a quarter late.
        let shortest = inner.shortest_deadline.load(Ordering::Acquire);
        let every = Duration::from_millis(shortest / 4).max(Duration::from_millis(1));
        let wanted = if shortest == 0 {
            heartbeat_tick
        } else {
            heartbeat_tick.min(every)
        };
        if wanted != tick {
            tick = wanted;
            if let Err(e) = stream.set_read_timeout(Some(tick)) {
                return Lost::network(format!("cannot configure the socket: {e}"));
            }
        }
        match inbox.read(stream) {
            Ok(0) => return Lost::network("the server closed the connection".to_owned()),
            Ok(_) => {
                last_read = Instant::now();
                if let Err(lost) = dispatch_all(inner, &decoder, &mut inbox.buf, &mut last) {
                    return lost;
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
            Err(e) => return Lost::network(format!("read failed: {e}")),
        }
        let now = Instant::now();
        if now.duration_since(last_read) >= SHRINK_AFTER {
            inbox.idle();
        }
        if shortest != 0 && now.duration_since(deadline_check) >= every {
            deadline_check = now;
            inner.check_deadlines(now);
        }
        if now.duration_since(last_read) > heartbeat * 2 {
            return Lost::network(format!(
                "nothing heard from the server for {} ms",
                (heartbeat * 2).as_millis()
            ));
        }
        // Either direction: a producer that never stops sending still
        // needs the server's answer to know it is alive.
        let quiet = now.duration_since(last_read).max(inner.writer.idle_for());
        if quiet >= ping_every && now.duration_since(last_ping) >= ping_every {
            last_ping = now;
            if inner.writer.send(&Frame::Ping, 0).is_err() {
                return Lost::network(inner.writer.failure().unwrap_or_else(|| "closed".into()));
            }
        }
    }
}

/// After a lost session: tells the exception listener, forgets what
/// belonged to the old session, dials the servers again with back-off
/// and, once one answers, subscribes every consumer again and lets the
/// senders go on. Returns the new session's reader, the bytes that came
/// with its CONNECTED and its heart-beat; or why it gave up.
fn failover(
    inner: &Arc<Inner>,
    why: &str,
) -> std::result::Result<(ReadHalf, BytesMut, Duration), String> {
    inner.writer.pause();
    inner.shutdown_socket();
    let flusher = lock(&inner.flusher).take();
    if let Some((flusher, _)) = flusher {
        let _ = flusher.join();
    }
    log::warn!("herald connection interrupted: {why}; reconnecting");
    inner.report(Error::Interrupted(why.to_owned()));
    // Bodies on their way were the old session's: they are cut off.
    inner.streams.clear();
    let waiters: Vec<Waiter> = lock(&inner.pending).drain().map(|(_, w)| w).collect();
    for waiter in waiters {
        waiter(Err(Error::ConnectionLost(format!(
            "{why}: interrupted before the answer came, so it may or may not have been carried out"
        ))));
    }
    // Deliveries of the old session: the server delivers them again.
    for c in inner.consumer_list() {
        if c.is_tracked() {
            c.take_all();
        }
    }
    for s in inner.sessions() {
        s.connection_lost();
    }
    let config = &inner.config;
    let mut delay = Duration::from_millis(config.reconnect_delay_ms);
    let most = Duration::from_millis(config.reconnect_max_delay_ms);
    let mut last = String::new();
    for attempt in 1..=config.reconnect_attempts {
        if !inner.sleep_unless_closing(delay) {
            return Err(format!("{why}; closed while reconnecting"));
        }
        match inner.dialer.dial() {
            Ok(link) => return resume(inner, link).map_err(|e| format!("{why}; {e}")),
            Err(e) => {
                log::info!("reconnection attempt {attempt} failed: {e}");
                last = e.to_string();
            }
        }
        delay = (delay * 2).min(most);
    }
    Err(format!(
        "{why}; gave up after {} reconnection attempts, the last: {last}",
        config.reconnect_attempts
    ))
}

/// Takes a new session into use: consumers subscribe again (ahead of
/// anything else sent), a new flusher writes, senders go on.
fn resume(inner: &Arc<Inner>, link: Link) -> Result<(ReadHalf, BytesMut, Duration)> {
    let heartbeat = Duration::from_millis(link.connected.heartbeat_ms.into());
    *lock(&inner.stream) = link.socket;
    inner.set_connected(link.connected);
    let mut first = BytesMut::new();
    let mut consumers: Vec<(u32, Arc<ConsumerShared>, Subscribe)> = inner
        .consumers
        .all()
        .iter()
        .filter_map(|(id, c)| Some((*id, c.clone(), c.subscription()?)))
        .collect();
    // In the order they were made.
    consumers.sort_by_key(|(id, ..)| *id);
    // The resumption is reported once every consumer has its answer, so
    // that what is published after it reaches them.
    let resumed = Arc::new(Resumption {
        left: AtomicUsize::new(consumers.len()),
        server: link.server.clone(),
    });
    for (id, consumer, subscribe) in consumers {
        let request_id = inner.next_request_id();
        let weak = Arc::downgrade(inner);
        let resumed = resumed.clone();
        let waiter: Waiter = Box::new(move |result| {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            // A refusal, not a session lost again (the next failover
            // subscribes it once more).
            if let Err(e @ Error::Server { .. }) = result {
                // It cannot be had again (a durable subscription still
                // held by the old session, a temporary queue that ended
                // with it).
                inner.consumers.remove(id);
                consumer.close();
                inner.report(e);
            }
            resumed.one_done(&inner);
        });
        lock(&inner.pending).insert(request_id, waiter);
        Frame::Subscribe(subscribe).encode(request_id, &mut first)?;
    }
    inner.writer.resume(first, link.writer);
    start_flusher(inner)?;
    if resumed.left.load(Ordering::Acquire) == 0 {
        resumed.report(inner);
    }
    Ok((link.reader, link.leftover, heartbeat))
}

/// Counts the consumers still to be subscribed again after a failover.
struct Resumption {
    left: AtomicUsize,
    server: String,
}

impl Resumption {
    fn one_done(&self, inner: &Inner) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.report(inner);
        }
    }

    fn report(&self, inner: &Inner) {
        log::info!("herald connection resumed with {}", self.server);
        inner.report(Error::Resumed(self.server.clone()));
    }
}

fn id_prefix(connected: &Connected) -> String {
    format!("ID:{}-", connected.connection_id)
}

thread_local! {
    /// The connection (its `Inner`'s address) whose listener this thread
    /// runs off the reader thread, if any.
    static LISTENING_FOR: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Handles every whole frame in `buf`; an error ends the connection.
fn dispatch_all(
    inner: &Inner,
    decoder: &Decoder,
    buf: &mut BytesMut,
    last: &mut LastConsumer,
) -> std::result::Result<(), Lost> {
    loop {
        let raw = match decoder.decode(buf) {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(()),
            Err(DecodeError { error, .. }) => {
                return Err(Lost::fatal(format!(
                    "undecodable frame from the server: {error}"
                )))
            }
        };
        dispatch(inner, raw, last)?;
    }
}

fn dispatch(
    inner: &Inner,
    raw: RawFrame,
    last: &mut LastConsumer,
) -> std::result::Result<(), Lost> {
    let bad = |e: herald_protocol::Error| Lost::fatal(format!("bad frame from the server: {e}"));
    let request_id = raw.header.request_id;
    if raw.header.kind == FrameKind::Message {
        let d = Delivery::decode_head(raw.body).map_err(bad)?;
        let mut message = Message::from_block(d.message, d.delivery_count).map_err(bad)?;
        message.delivery_id = d.delivery_id;
        let consumer = last.get(&inner.consumers, d.subscription_id);
        if let Body::Stream(s) = &message.body {
            let wanted = consumer.is_some_and(ConsumerShared::takes_bodies);
            inner.streams.opened(d.delivery_id, s.len, wanted);
        }
        // A message for a consumer closed a moment ago is dropped.
        if let Some(c) = consumer {
            c.deliver(message, &inner.streams);
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
        Frame::Chunk(c) => inner.streams.chunk(c.stream, c.data),
        Frame::Error(e) => {
            let error = || Error::Server {
                code: e.code,
                message: e.message.clone(),
                fatal: e.fatal,
            };
            let answered = request_id != 0 && inner.complete(request_id, Err(error()));
            if e.fatal {
                // The server closes next: end with its reason, not with
                // "the server closed the connection". A server going away,
                // timing this side out or closed by its administrator (as
                // a restart would) is a reason to fail over, as RabbitMQ's
                // clients recover; a refusal is not.
                let away = [
                    ErrorCode::ServerShutdown,
                    ErrorCode::HeartbeatTimeout,
                    ErrorCode::ClosedByAdmin,
                ]
                .map(|c| c as u32)
                .contains(&e.code);
                return Err(Lost {
                    why: Ending::server(e.code, &e.message),
                    resumable: away,
                });
            }
            if !answered {
                inner.report(match e.refused.clone() {
                    Some(refused) => Error::SendRefused {
                        code: e.code,
                        message: e.message.clone(),
                        producer: inner.producer_of(&refused.message_id),
                        destination: refused.destination,
                        message_id: refused.message_id,
                    },
                    None => error(),
                });
            }
        }
        other => {
            return Err(Lost::fatal(format!(
                "the server sent {:?}, which servers do not send",
                other.kind()
            )))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A stream fills the first scratch buffer, so the reads grow to the
    /// larger one; a second without reading gives back both buffers'
    /// growth and keeps the part of a frame not yet whole.
    #[test]
    fn the_inbox_grows_for_a_stream_and_shrinks_when_idle() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut reader, _) = listener.accept().unwrap();
        let sent: Vec<u8> = (0..3 * MAX_READ).map(|i| (i % 251) as u8).collect();
        let feeding = {
            let sent = sent.clone();
            std::thread::spawn(move || writer.write_all(&sent).map(|()| writer))
        };
        let mut inbox = Inbox::new(BytesMut::new());
        while inbox.buf.len() < sent.len() {
            assert!(inbox.read(&mut reader).unwrap() > 0);
        }
        let _writer = feeding.join().unwrap().unwrap();
        assert_eq!(&inbox.buf[..], &sent[..]);
        assert_eq!(inbox.scratch.len(), MAX_READ);
        // All decoded but a frame's first 100 bytes.
        inbox.buf.clear();
        inbox.buf.extend_from_slice(&sent[..100]);
        assert!(inbox.buf.capacity() > FIRST_READ);
        inbox.idle();
        assert_eq!(inbox.scratch.len(), FIRST_READ);
        assert!(
            inbox.buf.capacity() <= FIRST_READ,
            "{}",
            inbox.buf.capacity()
        );
        assert_eq!(&inbox.buf[..], &sent[..100]);
    }
}
