//! The journal thread: group commit, rotation, and what a failed write or
//! sync does.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver};

use bytes::BytesMut;

use crate::collections::FastMap;

use super::super::disk::SegmentFile;
use super::super::large;
use super::super::record::{Completion, Record, StoreError};
use super::super::space::{self, Space};
use super::config::{FsyncPolicy, JournalConfig};
use super::error::{io_error, JournalError};
use super::metrics::JournalMetrics;
use super::segment::*;

/// How long records no one waits for may stay unsynced while the journal
/// is idle. Losing them in a crash costs only redeliveries (an
/// acknowledgement's `End`), never a receipted message.
pub(super) const LAZY_SYNC: std::time::Duration = std::time::Duration::from_millis(50);
/// Zeros written ahead of the records at a time (see
/// [`SegmentFile::reserve`]): a sync after a write into them commits no
/// new file size, 60 µs less a sync on this project's disk; the one after
/// each reservation flushes it.
pub(super) const RESERVE: u64 = 1 << 20;
pub(super) const MAX_BATCH: usize = 4 << 20;

/// What the handle asks of the journal thread.
pub(super) enum Request {
    Append(Record, Option<Completion>),
    /// Appended and reported on when written, without forcing a sync.
    AppendLazily(Record, Completion),
    Barrier(Completion),
    Stop,
}

/// The journal thread's state.
pub(super) struct Writer {
    pub(super) metrics: JournalMetrics,
    pub(super) config: JournalConfig,
    pub(super) segments: VecDeque<Segment>,
    /// The last segment's file, being appended to; `None` when no new
    /// segment could be made (a full disk at start): the next write tries
    /// again.
    pub(super) current: Option<Box<dyn SegmentFile>>,
    pub(super) space: Space,
    /// Set when a sync failed: what was written may not be on disk, and
    /// nothing the journal says can be trusted any more, so every later
    /// completion fails with this reason (as PostgreSQL does after a
    /// failed fsync).
    pub(super) failed: Option<String>,
    /// Which segment holds each live id.
    pub(super) index: FastMap<u64, u64>,
    /// Records written that no one waited for (acknowledgements' `End`s)
    /// and that are not synced yet: the next sync, or [`LAZY_SYNC`] of
    /// quiet, makes them durable.
    pub(super) unsynced: bool,
    /// Held for the life of the writer: the directory lock.
    pub(super) _lock: File,
}

impl Writer {
    pub(super) fn run(&mut self, rx: Receiver<Request>) {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut done: Vec<Completion> = Vec::new();
        let mut lazy: Vec<Completion> = Vec::new();
        let mut pending: Vec<(u64, u32, Record)> = Vec::new();
        let mut stop = false;
        while !stop {
            // Quiet: make what no one waited for durable too, and while
            // low on space, look for it coming back.
            let wait = match (self.unsynced, self.space.low()) {
                (true, _) => Some(LAZY_SYNC),
                (false, true) => Some(space::CHECK_EVERY),
                (false, false) => None,
            };
            let first = match wait {
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(wait) => rx.recv_timeout(wait),
            };
            let first = match first {
                Ok(request) => request,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.unsynced {
                        let _ = self.sync();
                    }
                    self.space.check(false);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            // Offsets are taken in the segment being written to, so it
            // must be there first.
            let ready = self
                .ensure_current()
                .map_err(|e| StoreError::Journal(e.to_string()));
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append(record, completion) => match self.sync_bodies(&record) {
                        Ok(()) => {
                            self.frame_pending(record, &mut buf, &mut pending);
                            done.extend(completion);
                        }
                        Err(e) => {
                            log::error!("journal: a large message's body cannot be synced ({e}): its record is not written");
                            if let Some(completion) = completion {
                                completion(Err(StoreError::Journal(format!(
                                    "the large message's body could not be made durable: {e}"
                                ))));
                            }
                        }
                    },
                    Request::AppendLazily(record, written) => {
                        self.frame_pending(record, &mut buf, &mut pending);
                        lazy.push(written);
                    }
                    Request::Barrier(completion) => done.push(completion),
                    Request::Stop => stop = true,
                }
                // Group commit: take what queued up meanwhile, unless each
                // record must be synced alone.
                if !stop && self.config.fsync != FsyncPolicy::Always && buf.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            // A record no one waits for (an acknowledgement without a
            // request id) rides the next sync instead of forcing one.
            let wanted = !done.is_empty() || stop || self.config.fsync == FsyncPolicy::Always;
            let written = ready.and_then(|()| {
                self.write(&buf, wanted)
                    .map_err(|e| StoreError::Journal(e.to_string()))
            });
            let result = match written {
                Ok(()) => {
                    let ended = pending
                        .iter()
                        .any(|(.., r)| matches!(r, Record::End { .. } | Record::Batch(_)));
                    for (offset, len, record) in pending.drain(..) {
                        self.apply(offset, len, record);
                    }
                    if ended {
                        // Draining consumers are what frees a full disk.
                        self.compact();
                    }
                    Ok(())
                }
                Err(e) => {
                    log::error!("{e}");
                    pending.clear();
                    Err(e)
                }
            };
            self.space.wrote(buf.len() as u64);
            buf.clear();
            for completion in lazy.drain(..).chain(done.drain(..)) {
                completion(result.clone());
            }
            if self.current_len() >= self.config.segment_size {
                if let Err(e) = self.rotate() {
                    log::error!("journal: cannot start a new segment: {e}");
                }
            }
            self.space.check(false);
        }
        self.cut_reserve();
    }

    /// Makes the large bodies that `record`'s messages name durable, before
    /// the record that keeps them is.
    fn sync_bodies(&self, record: &Record) -> io::Result<()> {
        match record {
            Record::Enqueue { block, .. } => large::sync_named(&self.config.dir, block),
            Record::Batch(parts) => parts.iter().try_for_each(|p| self.sync_bodies(p)),
            _ => Ok(()),
        }
    }

    /// Frames `record` into `buf`, to be written at its end.
    pub(super) fn frame_pending(
        &self,
        record: Record,
        buf: &mut BytesMut,
        pending: &mut Vec<(u64, u32, Record)>,
    ) {
        let offset = self.current_len() + buf.len() as u64;
        match frame(&record, buf) {
            Ok(len) => pending.push((offset, len, record)),
            Err(e) => log::error!("journal: record not encodable: {e}"),
        }
    }

    /// Makes the segment to write to if there is none (the disk was full
    /// when the last one was to be made), giving up the reserve file to a
    /// full disk.
    pub(super) fn ensure_current(&mut self) -> Result<(), JournalError> {
        if self.current.is_some() {
            return Ok(());
        }
        let seq = self.segments.back().map_or(1, |s| s.seq + 1);
        let reserve = RESERVE.min(self.config.segment_size);
        let create = || create_segment(&*self.config.disk, &self.config.dir, seq, reserve);
        let made = match create() {
            Err(JournalError::Io { source, .. })
                if space::is_full(&source) && self.space.release() =>
            {
                create()
            }
            made => made,
        };
        let (file, path, allocated) = made?;
        self.current = Some(file);
        self.segments.push_back(Segment {
            seq,
            path,
            len: HEADER_LEN,
            allocated,
            live: FastMap::default(),
        });
        Ok(())
    }

    pub(super) fn current_len(&self) -> u64 {
        self.segments.back().map_or(0, |s| s.len)
    }

    /// Writes `buf`, and syncs it (with everything before it) if `sync`
    /// and the policy syncs at all.
    pub(super) fn write(&mut self, buf: &[u8], sync: bool) -> io::Result<()> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(why.clone()));
        }
        if buf.is_empty() {
            // A barrier: what was written without a sync must be durable.
            return match sync && self.unsynced {
                true => self.sync(),
                false => Ok(()),
            };
        }
        let Some(segment) = self.segments.back_mut() else {
            return Err(io::Error::other("no segment to write to"));
        };
        let Some(file) = self.current.as_mut() else {
            return Err(io::Error::other("no segment to write to"));
        };
        let start = segment.len;
        let end = start + buf.len() as u64;
        if end > segment.allocated {
            let to = end
                .max(segment.allocated + RESERVE)
                .min(end.max(self.config.segment_size));
            match file.reserve(segment.allocated, to - segment.allocated) {
                Ok(()) => segment.allocated = to,
                // Written without: each sync commits a new size then.
                Err(e) => log::debug!("journal: no zeros reserved ({e})"),
            }
        }
        let began = std::time::Instant::now();
        let mut written = file.write_all(buf);
        if written.as_ref().is_err_and(space::is_full) && self.space.release() {
            segment.allocated = start;
            written = file.rewind_to(start).and_then(|()| file.write_all(buf));
        }
        self.metrics.append.observe(began.elapsed().as_secs_f64());
        if let Err(e) = written {
            // Leave no partial record behind the ones already written, and
            // go on writing where they end (a full disk may drain).
            segment.allocated = start;
            if let Err(r) = file.rewind_to(start) {
                self.stop(format!("cannot cut a failed write back ({r}) after: {e}"));
            }
            return Err(e);
        }
        segment.len = end;
        segment.allocated = segment.allocated.max(end);
        match (self.config.fsync, sync) {
            (FsyncPolicy::Never, _) => Ok(()),
            (_, false) => {
                self.unsynced = true;
                Ok(())
            }
            (_, true) => self.sync(),
        }
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        let Some(file) = self.current.as_mut() else {
            return Ok(());
        };
        let began = std::time::Instant::now();
        let synced = file.sync_data();
        self.metrics.sync.observe(began.elapsed().as_secs_f64());
        self.unsynced = false;
        synced.inspect_err(|e| {
            log::error!("journal sync failed: {e}; persistent sends fail from now on");
            self.stop(format!("the journal could not sync ({e})"));
        })
    }

    /// Stops confirming anything, for good: what was written may or may
    /// not be on disk.
    pub(super) fn stop(&mut self, why: String) {
        self.failed = Some(why);
        self.metrics.stopped.store(true, Ordering::Relaxed);
    }

    /// Updates which records are live after a successful write.
    pub(super) fn apply(&mut self, offset: u64, len: u32, record: Record) {
        for part in record.into_parts() {
            match part {
                Record::End { id } => {
                    if let Some(seq) = self.index.remove(&id) {
                        if let Some(s) = self.segments.iter_mut().find(|s| s.seq == seq) {
                            s.live.remove(&id);
                        }
                    }
                }
                r => {
                    let Some(current) = self.segments.back_mut() else {
                        return;
                    };
                    current.live.insert(r.id(), (offset, len));
                    self.index.insert(r.id(), current.seq);
                }
            }
        }
    }

    /// Cuts the zeros the segment being written did not use: a segment
    /// that is done with (at a rotation, at a stop) ends with its last
    /// record. (Replay takes zeros at a segment's end for its end anyway,
    /// as a crash leaves them.)
    pub(super) fn cut_reserve(&mut self) {
        if let (Some(file), Some(s)) = (self.current.as_mut(), self.segments.back_mut()) {
            if s.allocated > s.len {
                match file.rewind_to(s.len) {
                    Ok(()) => s.allocated = s.len,
                    Err(e) => {
                        log::debug!("journal: {}: zeros left at its end: {e}", s.path.display())
                    }
                }
            }
        }
    }

    pub(super) fn rotate(&mut self) -> Result<(), JournalError> {
        let path = self
            .segments
            .back()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        self.sync().map_err(io_error(&path))?;
        self.cut_reserve();
        let old = self.current.take();
        if let Err(e) = self.ensure_current() {
            // Go on appending to the old one.
            self.current = old;
            return Err(e);
        }
        self.compact();
        Ok(())
    }
}
