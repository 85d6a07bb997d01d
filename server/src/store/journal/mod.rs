//! The embedded journal: append-only segment files in the data directory,
//! written by one thread with group commit, replayed at start.
//!
//! # Writing
//!
//! Workers never touch the disk: they send records to the journal thread,
//! which takes everything that has queued up, writes it with one `write`,
//! and makes it durable with one `fdatasync` (group commit) before running
//! the completions — so a RECEIPT for a persistent message leaves only
//! after its record is on disk. `fsync = "always"` syncs each record on its
//! own; `"never"` leaves syncing to the OS.
//!
//! # Failures
//!
//! Files are written through the small [`Disk`] trait, so tests can tear a
//! write, fill the disk or fail a sync. A failed write is cut back to the
//! last whole record and its completions fail (the publisher gets an ERROR,
//! not a RECEIPT); writing goes on, so a disk that had filled up works again
//! once space returns. A failed sync is different: what was written may or
//! may not be on disk, so the journal stops confirming anything from then
//! on, and every persistent send fails until the server is restarted.
//! Running low on space is handled before it becomes a failure: see
//! [`super::space`].
//!
//! Layout: [`segment`] (the on-disk format: segment files and the records
//! in them), `replay` (reading them back at start), `writer` (the journal
//! thread), `compaction` (dropping and relocating old segments).

mod compaction;
mod replay;
mod segment;
#[cfg(test)]
mod tests;
mod writer;

use crate::collections::FastMap;
use crate::sync::lock;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use thiserror::Error;

use super::disk::{Disk, RealDisk, SegmentFile};
use super::record::{Completion, Record, Store, StoreError};
use super::space::{self, Space, SpaceGauge};
use segment::*;
use writer::*;

/// When the journal makes writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// Each record is synced on its own before its completion runs.
    Always,
    /// Everything that queued up while the previous sync ran is synced
    /// together (group commit); completions wait for that sync.
    Batch,
    /// Written but not synced: the OS flushes when it likes. A crash of
    /// the machine (not just the server) can lose receipted messages.
    Never,
}

/// Journal settings.
#[derive(Clone)]
pub struct JournalConfig {
    /// The data directory.
    pub dir: PathBuf,
    /// When writes are made durable.
    pub fsync: FsyncPolicy,
    /// A segment is closed and a new one started past this many bytes.
    pub segment_size: u64,
    /// Segments kept before the oldest one's live records are moved
    /// forward so it can be deleted.
    pub max_segments: usize,
    /// How segment files are written: the real disk, or in tests one that
    /// fails on purpose.
    pub disk: Arc<dyn Disk>,
    /// Start even if a segment is damaged (not just torn at the tail),
    /// skipping what does not read and setting the damaged files aside.
    pub recover_corrupt: bool,
    /// Free bytes below which new persistent messages wait (see
    /// [`super::space`]); 0 = no floor.
    pub min_free_bytes: u64,
}

impl JournalConfig {
    /// Settings on the real disk.
    pub fn new(
        dir: PathBuf,
        fsync: FsyncPolicy,
        segment_size: u64,
        max_segments: usize,
    ) -> JournalConfig {
        JournalConfig {
            dir,
            fsync,
            segment_size,
            max_segments,
            disk: Arc::new(RealDisk),
            recover_corrupt: false,
            min_free_bytes: 0,
        }
    }
}

/// The journal could not be opened.
#[derive(Debug, Error)]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Another server holds the data directory.
    #[error("data directory {0} is in use by another server")]
    Locked(PathBuf),
    /// A segment was written by a newer build, in a format this one
    /// does not know: not damage, and nothing to recover.
    #[error(
        "journal segment {path} was written by a newer version of Herald (journal format \
         {version}; this build reads format {VERSION}). Nothing was changed on disk: run \
         the newer version, or restore this data directory from a backup taken before it"
    )]
    Newer {
        /// The segment.
        path: PathBuf,
        /// Its format version.
        version: u8,
    },
    /// A segment is damaged, and recovery was not asked for.
    #[error(
        "the journal is damaged: {0}. Nothing was changed on disk. To start anyway, skipping \
         what does not read and renaming the damaged segments to *.corrupt, set \
         journal.recover_corrupt = true or pass --recover-corrupt (back the data \
         directory up first)"
    )]
    Damaged(String),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What replay found live, to rebuild the broker from.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Live records (`Enqueue` and `Durable`), in id order.
    pub records: Vec<Record>,
    /// Segments read.
    pub segments: usize,
    /// Records read.
    pub records_read: usize,
    /// Bytes cut off torn segment tails.
    pub truncated_bytes: u64,
    /// What was skipped in damaged segments.
    pub damage: DamageReport,
}

/// What replay skipped in damaged segments (all zero when there were none).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DamageReport {
    /// Damaged segments, set aside as `*.corrupt`.
    pub segments: u64,
    /// Bytes that did not read as records.
    pub bytes: u64,
    /// Records skipped whose length could be trusted; what else the
    /// skipped bytes held is not known.
    pub records: u64,
}

enum Request {
    Append(Record, Option<Completion>),
    /// Appended and reported on when written, without forcing a sync.
    AppendLazily(Record, Completion),
    Barrier(Completion),
    Stop,
}

/// How long the journal's writes and syncs take, in seconds, and what
/// replay had to skip.
#[derive(Debug, Clone)]
pub struct JournalMetrics {
    /// One `write` of a group of records.
    pub append: Histogram,
    /// One `fdatasync`.
    pub sync: Histogram,
    /// What the replay at start skipped in damaged segments.
    pub damage: DamageReport,
    /// Set for good once a sync failed (or a failed write could not be
    /// cut back): every persistent send fails until the server restarts.
    pub stopped: Arc<std::sync::atomic::AtomicBool>,
    /// Free space on the journal's disk, against its floor.
    pub space: Arc<SpaceGauge>,
}

impl Default for JournalMetrics {
    fn default() -> JournalMetrics {
        // 10 µs to about 1.3 s.
        let buckets = || exponential_buckets(0.000_01, 2.0, 18);
        JournalMetrics {
            append: Histogram::new(buckets()),
            sync: Histogram::new(buckets()),
            damage: DamageReport::default(),
            stopped: Arc::default(),
            space: Arc::default(),
        }
    }
}

/// The journal as the broker sees it: a channel to the journal thread.
pub struct Journal {
    metrics: JournalMetrics,
    tx: Mutex<Sender<Request>>,
    next_id: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Journal {
    /// Locks the data directory, replays it and starts the journal thread.
    pub fn open(config: JournalConfig) -> Result<(Journal, Recovered), JournalError> {
        let dir = config.dir.clone();
        fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(JournalError::Locked(dir));
        }
        let (mut writer, recovered, max_id) = Writer::replay(config, lock)?;
        let metrics = writer.metrics.clone();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("herald-journal".into())
            .spawn(move || writer.run(rx))
            .map_err(io_error(&dir))?;
        Ok((
            Journal {
                metrics,
                tx: Mutex::new(tx),
                next_id: AtomicU64::new(max_id + 1),
                thread: Mutex::new(Some(thread)),
            },
            recovered,
        ))
    }

    fn send(&self, request: Request) {
        let tx = lock(&self.tx);
        if tx.send(request).is_err() {
            log::error!("the journal thread has stopped; a record was not written");
        }
    }

    /// The id the next record will get: every record written so far has
    /// a lower one.
    pub fn next_record_id(&self) -> u64 {
        self.next_id.load(Ordering::Relaxed)
    }

    /// Latencies of its writes and syncs.
    pub fn metrics(&self) -> &JournalMetrics {
        &self.metrics
    }

    /// Writes what is queued and stops the thread (once).
    pub fn shutdown(&self) {
        let Some(thread) = lock(&self.thread).take() else {
            return;
        };
        self.send(Request::Stop);
        // The last reference can go on the journal thread itself (in a
        // completion that routes a confirmed message): it cannot wait for
        // itself, and stops after this completion anyway.
        if thread.thread().id() == std::thread::current().id() {
            return;
        }
        if thread.join().is_err() {
            log::error!("the journal thread panicked");
        }
    }
}

impl Store for Journal {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn append(&self, record: Record, done: Option<Completion>) {
        self.send(Request::Append(record, done));
    }

    fn barrier(&self, done: Completion) {
        self.send(Request::Barrier(done));
    }

    fn append_lazily(&self, record: Record, written: Completion) {
        self.send(Request::AppendLazily(record, written));
    }

    fn refusing(&self) -> Option<String> {
        self.metrics.space.refusing()
    }

    fn stopped(&self) -> bool {
        self.metrics.stopped.load(Ordering::Relaxed)
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}
