//! The coalescing writer: callers encode frames into one shared buffer; a
//! flusher thread writes whatever has accumulated in one `write`.
//!
//! A lone frame leaves at once: when nothing was written for a moment and
//! nobody is writing, the sender writes it itself, which saves waking the
//! flusher (a thread wake-up is most of a message's latency on loopback).
//! When callers send faster than that, they wake the flusher instead, and
//! frames pile up behind the write in progress and go out together, so a
//! fast publisher costs far fewer syscalls than frames. The buffer is
//! bounded: past `MAX_BUFFERED` bytes a sender waits for the flusher,
//! which is the client's flow control. What a burst grew the buffers to
//! is given back once the connection has written nothing for a while.
//!
//! While a connection that fails over is away, the writer is paused:
//! senders wait (up to the send timeout) for it to come back, and the
//! frames it still holds are sorted: plain SENDs go on the new connection,
//! anything tied to the old one (acknowledgements of its deliveries,
//! requests whose waiters were failed) is dropped.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_protocol::message::streamed_body;
use herald_protocol::{Frame, FrameKind, HEADER_LEN};

use crate::error::{Ending, Error, Result};
use crate::sync::lock;
use crate::transport::WriteHalf;

/// Bytes buffered before senders wait. A megabyte is about 6,000 small
/// frames, plenty to make one `write` of each batch; 4 MiB buffers (one
/// filling, one being written) fell out of the cache and cost a tenth
/// more CPU a message for the same batching (docs/performance.md).
const MAX_BUFFERED: usize = 1 << 20;

/// Each buffer's capacity when idle: what a burst or a large message grew
/// it to beyond this is given back after `SHRINK_AFTER` without a write.
const KEPT_CAPACITY: usize = 64 * 1024;

/// How long a connection's writer or reader has nothing to do before it
/// gives back what its buffers grew to.
pub(crate) const SHRINK_AFTER: Duration = Duration::from_secs(1);

/// A frame sent this long after the last write is a lone one: its sender
/// writes it itself. Shorter gaps mean a stream, which the flusher batches.
const LONE_AFTER: Duration = Duration::from_micros(50);

struct State {
    buf: BytesMut,
    /// The other buffer: `buf` is swapped with it to be written.
    spare: BytesMut,
    /// A write is in progress (by the flusher or a sender); nobody else
    /// takes `buf` meanwhile, so frames leave in order.
    writing: bool,
    /// Which connection the socket is: a flusher of an earlier one stops.
    generation: u64,
    /// The flusher is parked on `data`: only then does a sender need to
    /// pay for a wake-up.
    flusher_waiting: bool,
    /// Set once: no more frames are accepted. The flusher writes what is
    /// left and stops.
    closed: bool,
    /// Why the connection failed, if it did.
    failed: Option<Ending>,
    /// When the flusher last took frames to write: the heart-beat clock.
    last_write: Instant,
    /// The connection is away and being re-established.
    paused: bool,
    /// The server's `max_frame_size` for a frame's body, from CONNECTED
    /// (0 until known): a bigger frame would cost the connection.
    max_body: usize,
    /// Where the SENDs' message ids come from.
    ids: MessageIds,
}

impl State {
    /// Whether a buffer holds more memory than it keeps when idle.
    fn has_grown(&self) -> bool {
        self.buf.capacity() > KEPT_CAPACITY || self.spare.capacity() > KEPT_CAPACITY
    }

    /// Gives back what the buffers grew to beyond `KEPT_CAPACITY`, for
    /// those empty (not while a write holds the spare one).
    fn shrink(&mut self) {
        for b in [&mut self.buf, &mut self.spare] {
            if b.is_empty() && b.capacity() > KEPT_CAPACITY {
                *b = BytesMut::with_capacity(KEPT_CAPACITY);
            }
        }
    }
}

/// The connection's message ids, "ID:<connection id>-<producer>-<n>":
/// kept with the buffer they are written into, so that a send takes one
/// under the lock it holds anyway (a lock and a reference count of their
/// own were 6 % of a publisher's CPU).
pub struct MessageIds {
    /// "ID:<connection id>-", of the connection's current session.
    prefix: String,
    /// The number of the last one taken (0: none yet).
    last: u64,
}

impl MessageIds {
    /// The prefix and a number no other message of this connection has.
    pub fn take(&mut self) -> (&str, u64) {
        self.last += 1;
        (&self.prefix, self.last)
    }
}

/// The shared write side of a connection.
pub struct Writer {
    state: Mutex<State>,
    /// The socket's write side, for whoever writes.
    socket: Mutex<WriteHalf>,
    data: Condvar,
    space: Condvar,
    /// How long a sender waits for a paused connection to come back.
    send_timeout: Duration,
}

impl Writer {
    /// A writer to `socket` whose senders wait up to `send_timeout` while
    /// paused; [`Writer::set_connected`] gives it what CONNECTED said.
    pub fn new(send_timeout: Duration, socket: WriteHalf) -> Writer {
        Writer {
            send_timeout,
            socket: Mutex::new(socket),
            state: Mutex::new(State {
                buf: BytesMut::with_capacity(KEPT_CAPACITY),
                spare: BytesMut::with_capacity(KEPT_CAPACITY),
                writing: false,
                generation: 0,
                flusher_waiting: false,
                closed: false,
                failed: None,
                last_write: Instant::now(),
                paused: false,
                max_body: 0,
                ids: MessageIds {
                    prefix: String::new(),
                    last: 0,
                },
            }),
            data: Condvar::new(),
            space: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a buffer and flags, valid between any two
        // statements; a panic elsewhere does not corrupt it.
        lock(&self.state)
    }

    /// Encodes a frame with `encode_body` into the buffer.
    pub fn send_with<F>(&self, kind: FrameKind, request_id: u32, encode_body: F) -> Result<()>
    where
        F: FnOnce(&mut BytesMut) -> std::result::Result<(), herald_protocol::Error>,
    {
        self.send_stamped(kind, request_id, |d, _| encode_body(d))
    }

    /// Encodes a frame with `encode_body` into the buffer, giving it the
    /// connection's message ids to take one from.
    pub fn send_stamped<F>(&self, kind: FrameKind, request_id: u32, encode_body: F) -> Result<()>
    where
        F: FnOnce(
            &mut BytesMut,
            &mut MessageIds,
        ) -> std::result::Result<(), herald_protocol::Error>,
    {
        self.send_on(None, kind, request_id, encode_body)
    }

    /// Which connection frames go to now: it changes with each failover.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// [`Writer::send_with`], on connection `generation` only: a large
    /// message's chunk belongs to the stream its SEND opened there, and
    /// after a failover it fails instead.
    pub fn send_within<F>(&self, generation: u64, kind: FrameKind, encode_body: F) -> Result<()>
    where
        F: FnOnce(&mut BytesMut) -> std::result::Result<(), herald_protocol::Error>,
    {
        self.send_on(Some(generation), kind, 0, |d, _| encode_body(d))
    }

    fn send_on<F>(
        &self,
        generation: Option<u64>,
        kind: FrameKind,
        request_id: u32,
        encode_body: F,
    ) -> Result<()>
    where
        F: FnOnce(
            &mut BytesMut,
            &mut MessageIds,
        ) -> std::result::Result<(), herald_protocol::Error>,
    {
        let mut s = self.lock();
        // Read the clock only when a failover makes the send wait.
        let mut deadline = None;
        while (s.buf.len() >= MAX_BUFFERED || s.paused) && !s.closed {
            if s.paused {
                let deadline = *deadline.get_or_insert_with(|| Instant::now() + self.send_timeout);
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::ConnectionLost(format!(
                        "the connection is interrupted and did not come back within {} ms",
                        self.send_timeout.as_millis()
                    )));
                }
                s = self
                    .space
                    .wait_timeout(s, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            } else {
                s = self.space.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        }
        if let Some(ending) = &s.failed {
            return Err(ending.error());
        }
        if s.closed {
            return Err(Error::Closed);
        }
        if generation.is_some_and(|g| g != s.generation) {
            return Err(Error::ConnectionLost(
                "the connection failed over while a large message's body was being sent: \
                 the server dropped what it had, and nothing was sent"
                    .into(),
            ));
        }
        let start = s.buf.len();
        let State { buf, ids, .. } = &mut *s;
        herald_protocol::codec::encode_frame(buf, kind, request_id, |d| encode_body(d, ids))?;
        let size = s.buf.len() - start - HEADER_LEN;
        if s.max_body != 0 && size > s.max_body {
            s.buf.truncate(start);
            return Err(Error::TooLarge {
                size,
                max: s.max_body,
            });
        }
        // The clock is read only when the flusher is idle, which a stream
        // of sends rarely finds.
        if s.flusher_waiting && !s.writing {
            let now = Instant::now();
            if now.duration_since(s.last_write) >= LONE_AFTER {
                self.write_out(s, now);
                return Ok(());
            }
            s.flusher_waiting = false;
            self.data.notify_one();
        }
        Ok(())
    }

    /// Writes everything buffered on this thread; false if the socket
    /// failed. Anything sent meanwhile is left to the flusher.
    fn write_out(&self, mut s: MutexGuard<'_, State>, now: Instant) -> bool {
        s.writing = true;
        let mut out = std::mem::take(&mut s.spare);
        std::mem::swap(&mut s.buf, &mut out);
        s.last_write = now;
        self.space.notify_all();
        drop(s);
        let written = {
            let mut socket = lock(&self.socket);
            let written = socket.write_all(&out);
            if let Err(e) = &written {
                // The reader notices too, and says whether it fails over.
                log::debug!("write failed: {e}");
                socket.shutdown();
            }
            written.is_ok()
        };
        out.clear();
        let mut s = self.lock();
        s.spare = out;
        s.writing = false;
        if s.flusher_waiting && (!s.buf.is_empty() || s.closed) {
            s.flusher_waiting = false;
            self.data.notify_one();
        }
        written
    }

    /// Encodes a whole frame into the buffer.
    pub fn send(&self, frame: &Frame, request_id: u32) -> Result<()> {
        self.send_with(frame.kind(), request_id, |d| frame.encode_body(d))
    }

    /// How long since frames were last handed to the socket.
    pub fn idle_for(&self) -> Duration {
        self.lock().last_write.elapsed()
    }

    /// Takes what the server said in CONNECTED into use: its largest
    /// frame body, and the connection id that message ids start with.
    /// The largest frame body the server takes (0 before CONNECTED).
    pub fn max_body(&self) -> usize {
        self.lock().max_body
    }

    pub fn set_connected(&self, max_body: u32, id_prefix: String) {
        let mut s = self.lock();
        s.max_body = max_body as usize;
        s.ids.prefix = id_prefix;
    }

    /// "ID:<connection id>-", which this connection's message ids start
    /// with now.
    pub fn id_prefix(&self) -> String {
        self.lock().ids.prefix.clone()
    }

    /// Why the connection failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.as_ref().map(|e| e.why.clone())
    }

    /// Fails every later send as `ending` says and drops what is queued.
    pub fn fail(&self, ending: &Ending) {
        let mut s = self.lock();
        if s.failed.is_none() {
            s.failed = Some(ending.clone());
        }
        s.closed = true;
        s.buf.clear();
        self.data.notify_all();
        self.space.notify_all();
    }

    /// The connection is away: senders wait, the flusher stops, and of
    /// the frames not yet written only SENDs without a receipt are kept.
    pub fn pause(&self) {
        let mut s = self.lock();
        if s.paused || s.closed {
            return;
        }
        s.paused = true;
        s.buf = keep_plain_sends(&s.buf);
        self.data.notify_all();
    }

    /// Whether the connection is away.
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// The connection is back on `socket`: `first` (its re-established
    /// subscriptions) goes ahead of the SENDs kept from before, and
    /// senders go on. A new flusher must be started.
    pub fn resume(&self, mut first: BytesMut, socket: WriteHalf) {
        let mut s = self.lock();
        // After any write to the old socket still in progress.
        *lock(&self.socket) = socket;
        first.extend_from_slice(&s.buf);
        s.buf = first;
        s.paused = false;
        s.generation += 1;
        s.flusher_waiting = false;
        s.last_write = Instant::now();
        self.data.notify_all();
        self.space.notify_all();
    }

    /// Stops accepting frames; the flusher writes what is left and ends.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        self.data.notify_all();
        self.space.notify_all();
    }

    /// The flusher thread's body, for the socket given last.
    pub fn run_flusher(&self) {
        let generation = self.lock().generation;
        loop {
            let mut s = self.lock();
            // Whatever is written meanwhile is waited for, even when closed:
            // the rest goes out after it.
            while s.writing || (!s.closed && (s.buf.is_empty() || s.paused)) {
                if s.paused || s.generation != generation {
                    // A new flusher serves the new connection.
                    return;
                }
                s.flusher_waiting = true;
                if !s.has_grown() {
                    s = self.data.wait(s).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                s = self
                    .data
                    .wait_timeout(s, SHRINK_AFTER)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                if !s.writing && s.last_write.elapsed() >= SHRINK_AFTER {
                    s.shrink();
                }
            }
            if s.buf.is_empty() || s.generation != generation {
                return;
            }
            if !self.write_out(s, Instant::now()) {
                return;
            }
        }
    }
}

/// The SEND frames without a request id in `buf`, in order.
fn keep_plain_sends(buf: &[u8]) -> BytesMut {
    let mut kept = BytesMut::new();
    let mut at = 0;
    while let Some(head) = buf.get(at..at + HEADER_LEN) {
        let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let end = at + HEADER_LEN + len;
        let request_id = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        // Not a large message's: its body's chunks are not kept.
        let streamed = buf
            .get(at + HEADER_LEN..end)
            .and_then(streamed_body)
            .is_some();
        if head[3] == FrameKind::Send as u8 && request_id == 0 && !streamed {
            kept.extend_from_slice(&buf[at..end.min(buf.len())]);
        }
        at = end;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::codec::encode_frame;
    use std::io::Read;
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::thread::JoinHandle;

    /// A writer to a socket over loopback with its flusher running, and
    /// the socket's other end.
    fn writer_with_flusher() -> (Arc<Writer>, JoinHandle<()>, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let writer = Arc::new(Writer::new(
            Duration::from_secs(1),
            WriteHalf::Plain(socket),
        ));
        let flusher = {
            let w = writer.clone();
            std::thread::spawn(move || w.run_flusher())
        };
        (writer, flusher, peer)
    }

    /// Senders that write lone frames themselves and a flusher that
    /// batches streams share the socket: every frame arrives, each
    /// sender's in its order.
    #[test]
    fn frames_from_many_senders_arrive_whole_and_in_order() {
        let (writer, flusher, mut peer) = writer_with_flusher();
        const SENDERS: u32 = 4;
        const EACH: u32 = 5_000;
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let w = writer.clone();
                std::thread::spawn(move || {
                    for n in 0..EACH {
                        w.send_with(FrameKind::Send, 0, |d| {
                            d.extend_from_slice(&[sender as u8]);
                            d.extend_from_slice(&n.to_be_bytes());
                            Ok(())
                        })
                        .unwrap();
                        // Gaps now and then make lone frames.
                        if n % 500 == 0 {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        writer.close();
        flusher.join().unwrap();
        // The last handle: the socket closes, and the peer reads to its end.
        drop(writer);
        let mut bytes = Vec::new();
        peer.read_to_end(&mut bytes).unwrap();
        let frame = HEADER_LEN + 5;
        assert_eq!(bytes.len(), frame * (SENDERS * EACH) as usize);
        let mut next = [0u32; SENDERS as usize];
        for f in bytes.chunks(frame) {
            let body = &f[HEADER_LEN..];
            let sender = body[0] as usize;
            let n = u32::from_be_bytes(body[1..5].try_into().unwrap());
            assert_eq!(n, next[sender], "sender {sender} out of order");
            next[sender] += 1;
        }
    }

    /// A burst grows the buffers up to the bound; a second without a
    /// write gives that memory back, and the connection writes on.
    #[test]
    fn a_burst_grows_the_buffers_and_idleness_gives_it_back() {
        let (writer, flusher, mut peer) = writer_with_flusher();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            peer.read_to_end(&mut bytes).unwrap();
            bytes.len()
        });
        let capacity = |w: &Writer| {
            let s = w.lock();
            s.buf.capacity().max(s.spare.capacity())
        };
        let send = |bytes: &[u8]| {
            writer
                .send_with(FrameKind::Send, 0, |d| {
                    d.extend_from_slice(bytes);
                    Ok(())
                })
                .unwrap()
        };
        // A frame of twice the bound goes in whole.
        let big = vec![7u8; 2 * MAX_BUFFERED];
        send(&big);
        let mut grown = capacity(&writer);
        for n in 0u32..20_000 {
            send(&n.to_be_bytes());
            grown = grown.max(capacity(&writer));
        }
        assert!(grown >= 2 * MAX_BUFFERED, "grew to {grown}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while capacity(&writer) > KEPT_CAPACITY {
            assert!(Instant::now() < deadline, "still {}", capacity(&writer));
            std::thread::sleep(Duration::from_millis(50));
        }
        send(b"after");
        writer.close();
        flusher.join().unwrap();
        drop(writer);
        let frames = 1 + 20_000 + 1;
        let expected = frames * HEADER_LEN + big.len() + 20_000 * 4 + 5;
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[test]
    fn a_pause_keeps_only_plain_sends() {
        let mut buf = BytesMut::new();
        let body = |b: &'static [u8]| {
            move |d: &mut BytesMut| -> std::result::Result<(), herald_protocol::Error> {
                d.extend_from_slice(b);
                Ok(())
            }
        };
        encode_frame(&mut buf, FrameKind::Send, 0, body(b"one")).unwrap();
        encode_frame(&mut buf, FrameKind::Ack, 0, body(b"ack")).unwrap();
        encode_frame(&mut buf, FrameKind::Send, 7, body(b"receipted")).unwrap();
        encode_frame(&mut buf, FrameKind::Send, 0, body(b"two")).unwrap();
        let kept = keep_plain_sends(&buf);
        assert_eq!(kept.len(), 2 * (HEADER_LEN + 3));
        assert_eq!(&kept[HEADER_LEN..HEADER_LEN + 3], b"one");
        assert_eq!(&kept[2 * HEADER_LEN + 3..], b"two");
    }
}
