//! The coalescing writer: callers encode frames into one shared buffer; a
//! flusher thread writes whatever has accumulated in one `write`.
//!
//! A lone frame leaves at once (the flusher is waiting and is woken); when
//! callers send faster than the socket drains, frames pile up behind the
//! write in progress and go out together, so a fast publisher costs far
//! fewer syscalls than frames. The buffer is bounded: past `MAX_BUFFERED`
//! bytes a sender waits for the flusher, which is the client's flow control.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_protocol::{Frame, FrameKind};

use crate::error::{Error, Result};

/// Bytes buffered before senders wait.
const MAX_BUFFERED: usize = 4 << 20;

struct State {
    buf: BytesMut,
    /// The flusher is parked on `data`: only then does a sender need to
    /// pay for a wake-up.
    flusher_waiting: bool,
    /// Set once: no more frames are accepted. The flusher writes what is
    /// left and stops.
    closed: bool,
    /// Why the connection failed, if it did.
    failed: Option<String>,
    /// When the flusher last took frames to write: the heart-beat clock.
    last_write: Instant,
}

/// The shared write side of a connection.
pub struct Writer {
    state: Mutex<State>,
    data: Condvar,
    space: Condvar,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            state: Mutex::new(State {
                buf: BytesMut::with_capacity(64 * 1024),
                flusher_waiting: false,
                closed: false,
                failed: None,
                last_write: Instant::now(),
            }),
            data: Condvar::new(),
            space: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a buffer and flags, valid between any two
        // statements; a panic elsewhere does not corrupt it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes a frame with `encode_body` into the buffer.
    pub fn send_with<F>(&self, kind: FrameKind, request_id: u32, encode_body: F) -> Result<()>
    where
        F: FnOnce(&mut BytesMut) -> std::result::Result<(), herald_protocol::Error>,
    {
        let mut s = self.lock();
        while s.buf.len() >= MAX_BUFFERED && !s.closed {
            s = self.space.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(why) = &s.failed {
            return Err(Error::ConnectionLost(why.clone()));
        }
        if s.closed {
            return Err(Error::Closed);
        }
        herald_protocol::codec::encode_frame(&mut s.buf, kind, request_id, encode_body)?;
        if s.flusher_waiting {
            s.flusher_waiting = false;
            self.data.notify_one();
        }
        Ok(())
    }

    /// Encodes a whole frame into the buffer.
    pub fn send(&self, frame: &Frame, request_id: u32) -> Result<()> {
        self.send_with(frame.kind(), request_id, |d| frame.encode_body(d))
    }

    /// How long since frames were last handed to the socket.
    pub fn idle_for(&self) -> Duration {
        self.lock().last_write.elapsed()
    }

    /// Why the connection failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Fails every later send with `why` and drops what is queued.
    pub fn fail(&self, why: &str) {
        let mut s = self.lock();
        if s.failed.is_none() {
            s.failed = Some(why.to_owned());
        }
        s.closed = true;
        s.buf.clear();
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

    /// The flusher thread's body.
    pub fn run_flusher(&self, mut stream: impl Write) {
        let mut spare = BytesMut::with_capacity(64 * 1024);
        loop {
            {
                let mut s = self.lock();
                while s.buf.is_empty() && !s.closed {
                    s.flusher_waiting = true;
                    s = self.data.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.buf.is_empty() {
                    return;
                }
                std::mem::swap(&mut s.buf, &mut spare);
                s.last_write = Instant::now();
                self.space.notify_all();
            }
            if let Err(e) = stream.write_all(&spare) {
                self.fail(&format!("write failed: {e}"));
                return;
            }
            spare.clear();
        }
    }
}
