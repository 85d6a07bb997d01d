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
//! Layout: `segment` (the on-disk format: segment files and the records
//! in them), `replay` (reading them back at start), `writer` (the journal
//! thread), `compaction` (dropping and relocating old segments), and the
//! handle's `config`, `error` and `metrics`.

mod compaction;
mod config;
mod error;
mod metrics;
mod replay;
mod segment;
#[cfg(test)]
mod tests;
mod writer;

use std::fs::{self, OpenOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::sync::lock;

use super::record::{Completion, Record, Store};
pub use config::{FsyncPolicy, JournalConfig};
use error::io_error;
pub use error::JournalError;
pub use metrics::{DamageReport, JournalMetrics};
pub use replay::Recovered;
use writer::{Request, Writer};

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
