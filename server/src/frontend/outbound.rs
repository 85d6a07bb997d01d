//! A connection's queue of frames waiting to be written.
//!
//! Each entry is a small per-frame head (the 12-byte header and, for
//! MESSAGE, the 16-byte delivery head) and a shared body. A write gathers
//! many entries into one `writev`, so a burst of deliveries costs one
//! syscall. A body of 1 KiB or more goes to the kernel as it is, never
//! copied; shorter parts are copied into one run first, which costs less
//! than the kernel's work for each slice of a `writev`.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use bytes::{Bytes, BytesMut};
use herald_protocol::frame::{Delivery, DELIVERY_HEAD_LEN};
use herald_protocol::{Frame, HEADER_LEN};

const HEAD_CAP: usize = HEADER_LEN + DELIVERY_HEAD_LEN;
/// Frames gathered into one `writev` (two slices each).
const FRAMES_PER_WRITE: usize = 256;
/// Parts shorter than this are copied into one run for a write.
const COPY_BELOW: usize = 1024;
/// Bytes copied for one write at most.
const GATHER_LEN: usize = 64 * 1024;

thread_local! {
    /// A worker's room for planning a write, kept between writes: a
    /// fresh array of slots per write would be written whole each time,
    /// 12 KiB for a write of one message.
    static GATHER: std::cell::RefCell<Gather> = std::cell::RefCell::new(Gather {
        bytes: Vec::with_capacity(GATHER_LEN),
        segs: Vec::with_capacity(FRAMES_PER_WRITE * 2),
    });
}

/// The short parts of a write, copied, and where each slice comes from.
struct Gather {
    bytes: Vec<u8>,
    segs: Vec<Seg>,
}

/// Where a slice of a write comes from.
#[derive(Clone, Copy)]
enum Seg {
    /// This range of the gathered bytes.
    Gathered(usize, usize),
    /// Frame `.0`'s body (true) or head, from byte `.2`.
    Part(usize, bool, usize),
}

/// Whether a queued frame may be dropped when its connection falls
/// behind, weakest guarantee last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Droppable {
    /// Never: tracked, persistent, or not a delivery.
    Never,
    /// Under the `drop_oldest` slow-consumer policy: a delivery nobody
    /// tracks (a plain topic subscription's) of a non-persistent message.
    ByPolicy,
    /// Always first, whatever the policy: a best-effort subscription's.
    BestEffort,
}

/// A control frame's bytes. Control frames the server builds always
/// encode; an error here would be a bug, and is logged rather than
/// sending half a frame.
pub fn encode_control(frame: &Frame, request_id: u32) -> Option<Bytes> {
    let mut buf = BytesMut::new();
    match frame.encode(request_id, &mut buf) {
        Ok(()) => Some(buf.freeze()),
        Err(e) => {
            log::error!("cannot encode {:?} frame: {e}", frame.kind());
            None
        }
    }
}

struct OutFrame {
    head: [u8; HEAD_CAP],
    head_len: u8,
    body: Bytes,
    droppable: Droppable,
}

impl OutFrame {
    fn len(&self) -> usize {
        self.head_len as usize + self.body.len()
    }
}

/// How far a write got.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteStatus {
    /// Everything queued was written.
    Drained,
    /// The socket would block; wait for it to become writable.
    Blocked,
    /// Not all written, but not for the socket: a TLS session still in
    /// its handshake takes no more yet. The next read goes on with it.
    Waiting,
}

/// An answer to a client's request (RECEIPT, PONG, a non-fatal ERROR)
/// that must wait for an earlier one.
enum Answer {
    /// Still owed: the journal has not confirmed request `.0` yet.
    Owed(u32),
    /// Ready, behind an owed one.
    Ready(Bytes),
}

/// Frames made as they are written: a large message's body, read from its
/// file a chunk at a time once it is at the front of its connection's
/// queue, so that a body of any size costs a chunk of memory, and the
/// frames queued after it wait behind it.
pub trait FrameSource: Send {
    /// The next frame; `None` once there is none left.
    fn next_frame(&mut self) -> Option<Bytes>;
    /// Whether it stopped short with no way to tell its client (a STOMP
    /// body cut before its content-length): the connection is closed, or
    /// what follows would be read as the rest of the body.
    fn failed(&self) -> bool {
        false
    }
}

/// A frame source in the queue.
struct Source {
    /// Frames queued ahead of it (behind the source before it, if any).
    before: usize,
    frames: Box<dyn FrameSource>,
}

/// What few connections need, made on first use: answers waiting behind
/// one still owed, and frame sources.
#[derive(Default)]
struct Rare {
    /// Answers behind one still owed, oldest first.
    answers: VecDeque<Answer>,
    sources: VecDeque<Source>,
    /// Frames queued after the last source.
    tail: usize,
}

/// Frames a source makes at most per write: a mebibyte of a large body,
/// then the worker's other connections have their turn.
const SOURCE_FRAMES_PER_WRITE: usize = 4;

/// Frames waiting to be written, in order.
///
/// Answers leave in the order of the frames they answer (PROTOCOL.md):
/// while one is owed (a persistent SEND waiting for the journal), later
/// answers wait behind it; deliveries do not. A [`FrameSource`] takes its
/// place in the order like a frame: what is queued after it is written
/// after its last frame.
#[derive(Default)]
pub struct Outbound {
    frames: VecDeque<OutFrame>,
    /// Bytes of the front frame already written.
    written: usize,
    /// Unwritten bytes in total (not counting what sources will make).
    pending: usize,
    /// One word in every connection; most never need what it holds.
    rare: Option<Box<Rare>>,
}

impl Outbound {
    /// Unwritten bytes.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty() && !self.has_sources()
    }

    /// Whether frame sources wait: a large body is still to be written.
    pub fn has_sources(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| !r.sources.is_empty())
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Queues a frame source: its frames are written after what is queued
    /// now, and before what is queued after it.
    pub fn push_source(&mut self, frames: Box<dyn FrameSource>) {
        let queued = self.frames.len();
        let rare = self.rare();
        let before = match rare.sources.is_empty() {
            true => queued,
            false => rare.tail,
        };
        rare.tail = 0;
        rare.sources.push_back(Source { before, frames });
    }

    /// How many frames may be written now: those ahead of the first
    /// source.
    fn ready(&self) -> usize {
        match self.rare.as_ref().and_then(|r| r.sources.front()) {
            Some(source) => source.before,
            None => self.frames.len(),
        }
    }

    /// Lets the first source make its next frames while it is at the
    /// front, up to `budget` of them; a source with none left goes. Fails
    /// if one stopped short without a way to say so.
    fn prime(&mut self, budget: &mut usize) -> io::Result<()> {
        while *budget > 0 {
            let Some(rare) = self.rare.as_mut() else {
                return Ok(());
            };
            let Some(source) = rare.sources.front_mut().filter(|s| s.before == 0) else {
                return Ok(());
            };
            match source.frames.next_frame() {
                Some(frame) => {
                    source.before = 1;
                    *budget -= 1;
                    self.pending += frame.len();
                    self.frames.push_front(OutFrame {
                        head: [0; HEAD_CAP],
                        head_len: 0,
                        body: frame,
                        droppable: Droppable::Never,
                    });
                }
                None if source.frames.failed() => {
                    return Err(io::Error::other(
                        "a large message's body could not be read to its end",
                    ))
                }
                None => {
                    // The next one's `before` counts what was between the
                    // two: at the front now.
                    rare.sources.pop_front();
                    if rare.sources.is_empty() {
                        rare.tail = 0;
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives back the room of the frame queue if it is empty. Not for
    /// each write that drains the queue (see `Connection::release_idle`).
    pub fn release(&mut self) {
        if self.frames.is_empty() && self.frames.capacity() > 0 {
            self.frames = VecDeque::new();
        }
    }

    /// Gives back the queue of answers if none is owed. Kept while the
    /// connection is busy (a receipted publisher owes one per message),
    /// given back when it goes quiet: an idle connection holds none.
    pub fn release_answers(&mut self) {
        if !self.owes_answers() && !self.has_sources() {
            self.rare = None;
        }
    }

    /// Queues a control frame at once (CONNECTED, a fatal ERROR ...); an
    /// answer that must keep its order goes through
    /// [`Outbound::push_answer_frame`].
    pub fn push_frame(&mut self, frame: &Frame, request_id: u32) {
        if let Some(bytes) = encode_control(frame, request_id) {
            self.push_raw(bytes);
        }
    }

    /// Notes that the answer to request `request_id` comes later: later
    /// answers wait for it.
    pub fn owe_answer(&mut self, request_id: u32) {
        self.rare().answers.push_back(Answer::Owed(request_id));
    }

    /// Whether an answer is still owed.
    pub fn owes_answers(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| !r.answers.is_empty())
    }

    /// Queues an answer (a whole encoded frame), behind any still owed.
    pub fn push_answer(&mut self, frame: Bytes) {
        match &mut self.rare {
            Some(rare) if !rare.answers.is_empty() => rare.answers.push_back(Answer::Ready(frame)),
            _ => self.push_raw(frame),
        }
    }

    /// Queues a native answer frame, behind any still owed.
    pub fn push_answer_frame(&mut self, frame: &Frame, request_id: u32) {
        if let Some(bytes) = encode_control(frame, request_id) {
            self.push_answer(bytes);
        }
    }

    /// The owed answer to `request_id` has come (`None`: there is
    /// nothing to send after all): it takes its place, and it and the
    /// ready answers behind it go out, up to the next owed one.
    pub fn pay_answer(&mut self, request_id: u32, frame: Option<Bytes>) {
        let Some(mut answers) = self.rare.as_mut().map(|r| std::mem::take(&mut r.answers)) else {
            if let Some(frame) = frame {
                self.push_raw(frame);
            }
            return;
        };
        let owed = answers
            .iter()
            .position(|a| matches!(a, Answer::Owed(id) if *id == request_id));
        match (owed, frame) {
            (Some(i), Some(frame)) => answers[i] = Answer::Ready(frame),
            (Some(i), None) => {
                answers.remove(i);
            }
            // Nothing was owed: behind what is, if anything is.
            (None, Some(frame)) if answers.is_empty() => self.push_raw(frame),
            (None, Some(frame)) => answers.push_back(Answer::Ready(frame)),
            (None, None) => {}
        }
        while let Some(Answer::Ready(_)) = answers.front() {
            if let Some(Answer::Ready(bytes)) = answers.pop_front() {
                self.push_raw(bytes);
            }
        }
        self.rare().answers = answers;
    }

    /// Queues bytes that are a whole frame already (STOMP's).
    pub fn push_raw(&mut self, frame: Bytes) {
        self.push(OutFrame {
            head: [0; HEAD_CAP],
            head_len: 0,
            body: frame,
            droppable: Droppable::Never,
        });
    }

    /// Queues a MESSAGE frame: its own head, the shared message block.
    /// `droppable` says whether it may be dropped when the connection
    /// falls behind.
    pub fn push_delivery(
        &mut self,
        subscription_id: u32,
        delivery_id: u64,
        delivery_count: u32,
        message: Bytes,
        droppable: Droppable,
    ) {
        let head = Delivery::encode_head(
            0,
            subscription_id,
            delivery_id,
            delivery_count,
            message.len(),
        );
        self.push(OutFrame {
            head,
            head_len: HEAD_CAP as u8,
            body: message,
            droppable,
        });
    }

    /// Drops the oldest frames at least as droppable as `least` (never
    /// one partly written) until at most `target` bytes wait; returns how
    /// many were dropped.
    /// (Only frames ahead of the first source: the counts of those behind
    /// one stay as they are.)
    pub fn drop_oldest(&mut self, target: usize, least: Droppable) -> u64 {
        let mut dropped = 0;
        let mut i = usize::from(self.written > 0);
        let mut ready = self.ready();
        while self.pending > target && i < ready {
            let droppable = self.frames[i].droppable;
            if droppable != Droppable::Never && droppable >= least {
                if let Some(f) = self.frames.remove(i) {
                    self.pending -= f.len();
                    dropped += 1;
                    ready -= 1;
                    self.one_less_ahead();
                }
            } else {
                i += 1;
            }
        }
        dropped
    }

    /// A frame ahead of the first source went.
    fn one_less_ahead(&mut self) {
        if let Some(source) = self.rare.as_mut().and_then(|r| r.sources.front_mut()) {
            source.before -= 1;
        }
    }

    fn push(&mut self, f: OutFrame) {
        self.pending += f.len();
        self.frames.push_back(f);
        if let Some(rare) = self.rare.as_mut().filter(|r| !r.sources.is_empty()) {
            rare.tail += 1;
        }
    }

    /// Drops everything queued but the rest of a partly written frame,
    /// which must be finished for the stream to stay decodable (a
    /// connection closed for falling behind gets its ERROR, not its
    /// backlog).
    pub fn clear(&mut self) {
        let keep = usize::from(self.written > 0);
        self.frames.truncate(keep);
        self.pending = self.frames.front().map_or(0, |f| f.len() - self.written);
        if let Some(rare) = self.rare.as_mut() {
            rare.sources.clear();
            rare.tail = 0;
        }
    }

    /// Writes as much as the socket takes, many frames per call.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<WriteStatus> {
        GATHER.with_borrow_mut(|gather| self.write_gathered(w, gather))
    }

    /// [`Outbound::write_to`], short parts copied into `gather` first:
    /// the kernel copies each `iovec` apart, at a cost per slice that
    /// outweighs a copy in user space for a small message.
    fn write_gathered(
        &mut self,
        w: &mut impl Write,
        gather: &mut Gather,
    ) -> io::Result<WriteStatus> {
        let Gather { bytes, segs } = gather;
        let mut budget = SOURCE_FRAMES_PER_WRITE;
        loop {
            self.prime(&mut budget)?;
            let ready = self.ready();
            if ready == 0 {
                break;
            }
            bytes.clear();
            segs.clear();
            let mut skip = self.written;
            for (i, f) in self
                .frames
                .iter()
                .take(FRAMES_PER_WRITE.min(ready))
                .enumerate()
            {
                for (body, part) in [(false, &f.head[..f.head_len as usize]), (true, &f.body[..])] {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    let rest = &part[skip..];
                    if rest.len() < COPY_BELOW && bytes.len() + rest.len() <= GATHER_LEN {
                        let start = bytes.len();
                        bytes.extend_from_slice(rest);
                        match segs.last_mut() {
                            Some(Seg::Gathered(_, end)) if *end == start => *end = bytes.len(),
                            _ => segs.push(Seg::Gathered(start, bytes.len())),
                        }
                    } else {
                        segs.push(Seg::Part(i, body, skip));
                    }
                    skip = 0;
                }
            }
            let mut slices = [IoSlice::new(&[]); FRAMES_PER_WRITE * 2];
            for (slice, seg) in slices.iter_mut().zip(segs.iter()) {
                *slice = IoSlice::new(match *seg {
                    Seg::Gathered(start, end) => &bytes[start..end],
                    Seg::Part(i, false, skip) => {
                        &self.frames[i].head[skip..self.frames[i].head_len as usize]
                    }
                    Seg::Part(i, true, skip) => &self.frames[i].body[skip..],
                });
            }
            let n = match w.write_vectored(&slices[..segs.len()]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(WriteStatus::Blocked),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.consume(n);
        }
        Ok(WriteStatus::Drained)
    }

    fn consume(&mut self, mut n: usize) {
        self.pending -= n;
        while let Some(front) = self.frames.front() {
            let left = front.len() - self.written;
            if n < left {
                self.written += n;
                return;
            }
            n -= left;
            self.written = 0;
            self.frames.pop_front();
            self.one_less_ahead();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends the first `cap` bytes of `bufs` to `out`; how many.
    fn take(out: &mut Vec<u8>, cap: usize, bufs: &[IoSlice<'_>]) -> usize {
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(cap - n);
            out.extend_from_slice(&b[..take]);
            n += take;
        }
        n
    }

    /// A writer that takes at most `cap` bytes per call, then blocks once
    /// every other call, to exercise partial writes.
    struct Trickle {
        out: Vec<u8>,
        cap: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(take(&mut self.out, self.cap, bufs))
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_keep_every_byte_in_order() {
        let mut o = Outbound::default();
        let mut expected = Vec::new();
        for i in 0..50u32 {
            let body = Bytes::from(vec![i as u8; (i * 7) as usize]);
            o.push_delivery(i, i.into(), 1, body.clone(), Droppable::Never);
            expected.extend_from_slice(&Delivery::encode_head(0, i, i.into(), 1, body.len()));
            expected.extend_from_slice(&body);
            o.push_frame(&Frame::Pong, i);
            let mut pong = BytesMut::new();
            Frame::Pong.encode(i, &mut pong).unwrap();
            expected.extend_from_slice(&pong);
        }
        assert_eq!(o.pending(), expected.len());
        let mut w = Trickle {
            out: Vec::new(),
            cap: 37,
            calls: 0,
        };
        while o.write_to(&mut w).unwrap() == WriteStatus::Blocked {}
        assert_eq!(w.out, expected);
        assert!(o.is_empty());
        assert_eq!(o.pending(), 0);
    }

    /// `n` frames of `[tag, i]`, made one at a time.
    struct Counted(u8, u8, u8);

    impl FrameSource for Counted {
        fn next_frame(&mut self) -> Option<Bytes> {
            (self.1 < self.2).then(|| {
                self.1 += 1;
                Bytes::from(vec![self.0, self.1])
            })
        }
    }

    #[test]
    fn a_sources_frames_keep_their_place_in_the_order() {
        let mut o = Outbound::default();
        let droppable = |tag: u8| Bytes::from(vec![tag]);
        o.push_raw(droppable(1));
        o.push_source(Box::new(Counted(b'a', 0, 10)));
        o.push_raw(droppable(2));
        o.push_source(Box::new(Counted(b'b', 0, 2)));
        o.push_source(Box::new(Counted(b'c', 0, 0)));
        o.push_raw(droppable(3));
        assert!(!o.is_empty() && o.has_sources());
        let mut w = Trickle {
            out: Vec::new(),
            cap: 3,
            calls: 0,
        };
        // A few of a source's frames per write, then the others' turn.
        let mut writes = 0;
        while !o.is_empty() {
            let _ = o.write_to(&mut w).unwrap();
            writes += 1;
        }
        assert!(writes > 3, "{writes}");
        let mut expected = vec![1];
        expected.extend((1..=10).flat_map(|i| [b'a', i]));
        expected.push(2);
        expected.extend((1..=2).flat_map(|i| [b'b', i]));
        expected.push(3);
        assert_eq!(w.out, expected);
        assert_eq!(o.pending(), 0);
        // Cleared, a source goes too.
        o.push_source(Box::new(Counted(b'd', 0, 5)));
        o.clear();
        assert!(o.is_empty());
        // Only what is ahead of the first source may be dropped.
        let x = || Bytes::from_static(b"x");
        o.push_delivery(1, 1, 1, x(), Droppable::ByPolicy);
        o.push_source(Box::new(Counted(b'e', 0, 1)));
        o.push_delivery(2, 2, 1, x(), Droppable::ByPolicy);
        assert_eq!(o.drop_oldest(0, Droppable::ByPolicy), 1);
        let from = w.out.len();
        while !o.is_empty() {
            let _ = o.write_to(&mut w).unwrap();
        }
        let mut rest = vec![b'e', 1];
        rest.extend_from_slice(&Delivery::encode_head(0, 2, 2, 1, 1));
        rest.push(b'x');
        assert_eq!(w.out[from..], rest);
    }

    /// A source that cannot go on and has no way to say so.
    struct Broken;

    impl FrameSource for Broken {
        fn next_frame(&mut self) -> Option<Bytes> {
            None
        }

        fn failed(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_source_cut_short_without_a_way_to_say_so_fails_the_write() {
        let mut o = Outbound::default();
        o.push_raw(Bytes::from_static(b"head"));
        o.push_source(Box::new(Broken));
        o.push_raw(Bytes::from_static(b"what would be read as its body"));
        let mut w = Trickle {
            out: Vec::new(),
            cap: 1 << 20,
            calls: 0,
        };
        assert!(o.write_to(&mut w).is_err());
        assert_eq!(w.out, b"head");
    }

    #[test]
    fn drop_oldest_spares_tracked_frames_and_the_one_being_written() {
        let mut o = Outbound::default();
        let body = Bytes::from_static(b"0123456789");
        o.push_delivery(0, 0, 1, body.clone(), Droppable::ByPolicy);
        for i in 1..6u32 {
            let droppable = match i {
                2 => Droppable::BestEffort,
                4 => Droppable::ByPolicy,
                _ => Droppable::Never,
            };
            o.push_delivery(i, i.into(), 1, body.clone(), droppable);
        }
        let mut w = Trickle {
            out: Vec::new(),
            cap: 5,
            calls: 0,
        };
        assert_eq!(o.write_to(&mut w).unwrap(), WriteStatus::Blocked);
        let one = 28 + 10;
        assert_eq!(o.drop_oldest(0, Droppable::BestEffort), 1, "frame 2 first");
        let dropped = 1 + o.drop_oldest(0, Droppable::ByPolicy);
        assert_eq!(
            dropped, 2,
            "frames 2 and 4; 0 is partly written, 1, 3, 5 are tracked"
        );
        assert_eq!(o.pending(), one - 5 + 3 * one);
    }

    #[test]
    fn clear_keeps_the_rest_of_a_partly_written_frame() {
        let mut o = Outbound::default();
        for i in 0..3 {
            o.push_delivery(i, 1, 1, Bytes::from_static(b"0123456789"), Droppable::Never);
        }
        let mut w = Trickle {
            out: Vec::new(),
            cap: 5,
            calls: 0,
        };
        assert_eq!(o.write_to(&mut w).unwrap(), WriteStatus::Blocked);
        o.clear();
        o.push_frame(&Frame::Pong, 9);
        while o.write_to(&mut w).unwrap() == WriteStatus::Blocked {}
        let mut expected = Delivery::encode_head(0, 0, 1, 1, 10).to_vec();
        expected.extend_from_slice(b"0123456789");
        let mut pong = BytesMut::new();
        Frame::Pong.encode(9, &mut pong).unwrap();
        expected.extend_from_slice(&pong);
        assert_eq!(w.out, expected);
    }

    #[test]
    fn a_drained_queue_gives_back_what_a_burst_grew() {
        let mut o = Outbound::default();
        let body = Bytes::from_static(b"0123456789");
        for i in 0..10_000u32 {
            o.push_delivery(i, i.into(), 1, body.clone(), Droppable::Never);
        }
        // Not while frames wait.
        o.release();
        assert!(o.frames.capacity() >= 10_000);
        let mut sink = Vec::new();
        assert_eq!(o.write_to(&mut sink).unwrap(), WriteStatus::Drained);
        // Nor as the write drains it: the next batch reuses the room.
        assert!(o.frames.capacity() >= 10_000);
        o.release();
        assert_eq!(o.frames.capacity(), 0);
    }

    /// Takes up to `cap` bytes per call and keeps each call's slice
    /// lengths.
    struct Recorder {
        out: Vec<u8>,
        cap: usize,
        calls: Vec<Vec<usize>>,
    }

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls.push(bufs.iter().map(|b| b.len()).collect());
            Ok(take(&mut self.out, self.cap, bufs))
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn short_parts_go_in_one_run_and_long_bodies_as_they_are() {
        let mut o = Outbound::default();
        let mut expected = Vec::new();
        // Short bodies around one long one, then more short ones than one
        // write gathers (GATHER_LEN), then a body just at COPY_BELOW.
        let sizes = [10, 20, 5000, 30]
            .into_iter()
            .chain(std::iter::repeat_n(COPY_BELOW - 1, 80))
            .chain([COPY_BELOW]);
        for (i, size) in sizes.enumerate() {
            let body = Bytes::from(vec![i as u8; size]);
            o.push_delivery(i as u32, i as u64, 1, body.clone(), Droppable::Never);
            expected.extend_from_slice(&Delivery::encode_head(0, i as u32, i as u64, 1, size));
            expected.extend_from_slice(&body);
        }
        let mut w = Recorder {
            out: Vec::new(),
            cap: 1 << 20,
            calls: Vec::new(),
        };
        assert_eq!(o.write_to(&mut w).unwrap(), WriteStatus::Drained);
        assert_eq!(w.out, expected);
        assert_eq!(w.calls.len(), 1, "{} frames fit one write", 85);
        let slices = &w.calls[0];
        let head = HEAD_CAP;
        // Two short frames and the long one's head; the long body; ...
        assert_eq!(&slices[..2], &[2 * head + 30 + head, 5000]);
        assert!(slices[2..].iter().all(|&n| n <= GATHER_LEN));
        assert_eq!(slices[slices.len() - 1], COPY_BELOW, "not copied");
        // ... and past the gathered room, short parts as they are.
        assert!(slices.contains(&head) && slices.contains(&(COPY_BELOW - 1)));
    }

    #[test]
    fn a_write_cut_inside_a_gathered_run_resumes_at_the_byte() {
        let mut o = Outbound::default();
        let mut expected = Vec::new();
        for i in 0..40u32 {
            let body = Bytes::from(vec![i as u8; if i % 7 == 3 { 3000 } else { 50 }]);
            o.push_delivery(i, i.into(), 1, body.clone(), Droppable::Never);
            expected.extend_from_slice(&Delivery::encode_head(0, i, i.into(), 1, body.len()));
            expected.extend_from_slice(&body);
        }
        let mut w = Recorder {
            out: Vec::new(),
            cap: 101,
            calls: Vec::new(),
        };
        assert_eq!(o.write_to(&mut w).unwrap(), WriteStatus::Drained);
        assert_eq!(w.out, expected);
        assert_eq!(o.pending(), 0);
    }
}
