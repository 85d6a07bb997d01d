//! The embedded journal: append-only segment files in the data directory,
//! written by one thread with group commit, replayed at start.
//!
//! # On-disk format, version 1
//!
//! A segment is named `<20-digit sequence>.hlog` and holds a header and then
//! records, back to back:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `HRLJ` |
//! | 4 | 1 | format version, 1 |
//! | 5 | 3 | zero |
//! | 8 | 8 | segment sequence number, big-endian |
//!
//! Each record:
//!
//! | size | field |
//! |---|---|
//! | 4 | payload length `n`, big-endian |
//! | 4 | CRC32C of the payload, big-endian |
//! | n | payload: a [`Record`] |
//!
//! The segment being written also holds zeros after its records: the
//! journal writes them a megabyte at a time ahead of the records
//! ([`RESERVE`]), so that a record's `fdatasync` finds the file's size
//! already committed and flushes only data (on ext4 that spares a journal
//! commit: 145 against 205 µs a sync on this project's disk). A segment
//! that is done with (a rotation, a stop) is cut back to its last record.
//! No record is all zeros (its length is never 0), so replay takes zeros
//! that run to the end of a segment for its end, cuts them, and counts
//! nothing as lost or damaged.
//!
//! Replay reads segments in sequence order. What does not read as a record
//! (zeros to the end aside) is one of two things:
//!
//! - **A torn tail**: the end of the last segment, with no intact record
//!   after it, as a crash in the middle of a write leaves it. The file is
//!   cut there with a warning, and replay goes on: nothing receipted was
//!   in it, since a RECEIPT waits for the write and its sync.
//! - **Damage**: anything else (a bad record followed by intact ones, a
//!   bad record in an older segment, a bad segment header). Intact
//!   records after it are found again by scanning for the next record
//!   that verifies; a bad record whose length field leads exactly there
//!   is counted as one skipped record. The server refuses to start on
//!   damage unless told to recover (`journal.recover_corrupt`, or
//!   `--recover-corrupt`): then every live record up to the last damaged
//!   segment is copied to a fresh segment, the damaged files are renamed
//!   `<name>.corrupt` (never deleted or cut), and what was skipped is
//!   reported in the log, `/api/health` and the metrics.
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
//! # Compaction
//!
//! A segment is only ever deleted when it is the oldest, so no later
//! segment can hold an `End` for a record that would then be resurrected.
//! The oldest segment goes when none of its records is live; while there are
//! more than `max_segments`, its live records are first copied, byte for
//! byte, to the current segment. A crash in between leaves two copies of a
//! record with one id, which replay treats as one.

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

const MAGIC: &[u8; 4] = b"HRLJ";
const VERSION: u8 = 1;
const HEADER_LEN: u64 = 16;
const RECORD_HEAD: usize = 8;
/// How long records no one waits for may stay unsynced while the journal
/// is idle. Losing them in a crash costs only redeliveries (an
/// acknowledgement's `End`), never a receipted message.
const LAZY_SYNC: std::time::Duration = std::time::Duration::from_millis(50);
/// Zeros written ahead of the records at a time (see
/// [`SegmentFile::reserve`]): a sync after a write into them commits no
/// new file size, 60 µs less a sync on this project's disk; the one after
/// each reservation flushes it.
const RESERVE: u64 = 1 << 20;
/// Largest payload replay believes; a longer length is corruption.
const MAX_PAYLOAD: u32 = 256 << 20;
/// Bytes gathered into one write at most.
const MAX_BATCH: usize = 4 << 20;

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

struct Segment {
    seq: u64,
    path: PathBuf,
    len: u64,
    /// The file's length: `len` and the zeros reserved after it (only the
    /// segment being written has any).
    allocated: u64,
    /// Live records in this segment: id → (offset of the record head,
    /// whole record length).
    live: FastMap<u64, (u64, u32)>,
}

/// The journal thread's state.
struct Writer {
    metrics: JournalMetrics,
    config: JournalConfig,
    segments: VecDeque<Segment>,
    /// The last segment's file, being appended to; `None` when no new
    /// segment could be made (a full disk at start): the next write tries
    /// again.
    current: Option<Box<dyn SegmentFile>>,
    space: Space,
    /// Set when a sync failed: what was written may not be on disk, and
    /// nothing the journal says can be trusted any more, so every later
    /// completion fails with this reason (as PostgreSQL does after a
    /// failed fsync).
    failed: Option<String>,
    /// Which segment holds each live id.
    index: FastMap<u64, u64>,
    /// Records written that no one waited for (acknowledgements' `End`s)
    /// and that are not synced yet: the next sync, or [`LAZY_SYNC`] of
    /// quiet, makes them durable.
    unsynced: bool,
    /// Held for the life of the writer: the directory lock.
    _lock: File,
}

fn segment_name(seq: u64) -> String {
    format!("{seq:020}.hlog")
}

/// Makes segment `seq` with `reserve` zeros after its header (fewer if
/// the disk cannot take them); returns it, its path and its length.
fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    seq: u64,
    reserve: u64,
) -> Result<(Box<dyn SegmentFile>, PathBuf, u64), JournalError> {
    let path = dir.join(segment_name(seq));
    let mut f = disk.create(&path).map_err(io_error(&path))?;
    let mut header = [0u8; HEADER_LEN as usize];
    header[..4].copy_from_slice(MAGIC);
    header[4] = VERSION;
    header[8..].copy_from_slice(&seq.to_be_bytes());
    f.write_all(&header).map_err(io_error(&path))?;
    let allocated = match f.reserve(HEADER_LEN, reserve) {
        Ok(()) => HEADER_LEN + reserve,
        Err(e) => {
            log::debug!("journal: no zeros reserved in {}: {e}", path.display());
            f.rewind_to(HEADER_LEN).map_err(io_error(&path))?;
            HEADER_LEN
        }
    };
    f.sync_data().map_err(io_error(&path))?;
    // The new name must survive a crash too.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok((f, path, allocated))
}

/// Appends a record with its length and CRC.
fn frame(record: &Record, buf: &mut BytesMut) -> Result<u32, herald_protocol::Error> {
    let start = buf.len();
    buf.put_u64(0);
    record.encode(buf)?;
    let payload_len = buf.len() - start - RECORD_HEAD;
    let crc = crc32c::crc32c(&buf[start + RECORD_HEAD..]);
    buf[start..start + 4].copy_from_slice(&(payload_len as u32).to_be_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    Ok((buf.len() - start) as u32)
}

impl Writer {
    /// Reads every segment, truncating a torn tail and refusing damage
    /// unless told to recover; returns the writer positioned on a fresh
    /// segment, what is live, and the highest id.
    fn replay(config: JournalConfig, lock: File) -> Result<(Writer, Recovered, u64), JournalError> {
        let dir = config.dir.clone();
        let mut seqs: Vec<u64> = fs::read_dir(&dir)
            .map_err(io_error(&dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".hlog")?.parse().ok()
            })
            .collect();
        seqs.sort_unstable();
        // Before anything is cut or set aside: a newer build's journal is
        // left whole.
        for &seq in &seqs {
            let path = dir.join(segment_name(seq));
            let mut head = [0u8; 5];
            let read = File::open(&path).and_then(|mut f| f.read_exact(&mut head));
            if read.is_ok() && &head[..4] == MAGIC && head[4] > VERSION {
                return Err(JournalError::Newer {
                    path,
                    version: head[4],
                });
            }
        }
        let mut recovered = Recovered::default();
        let mut live: BTreeMap<u64, (Record, u64, u64, u32)> = BTreeMap::new();
        let mut segments = VecDeque::new();
        let mut damaged: Vec<(u64, String)> = Vec::new();
        let mut max_id = 0;
        for (i, &seq) in seqs.iter().enumerate() {
            let path = dir.join(segment_name(seq));
            let mut data = Vec::new();
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut data))
                .map_err(io_error(&path))?;
            let data = Bytes::from(data);
            recovered.segments += 1;
            let scan = scan(&data);
            let last = i + 1 == seqs.len();
            if last && scan.records.is_empty() && !scan.header_ok {
                // A crash while the segment was being made.
                log::warn!(
                    "journal segment {} was never finished ({} bytes): removed",
                    path.display(),
                    data.len()
                );
                recovered.truncated_bytes += data.len() as u64;
                fs::remove_file(&path).map_err(io_error(&path))?;
                continue;
            }
            let mut end = data.len();
            if let Some(zeros) = scan.zeros_from {
                log::debug!(
                    "journal segment {}: {} reserved zero bytes after its records cut",
                    path.display(),
                    data.len() - zeros
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_error(&path))?;
                f.set_len(zeros as u64).map_err(io_error(&path))?;
                end = zeros;
            }
            if let (true, Some(tail)) = (last, scan.torn_tail) {
                let cut = data.len() - tail;
                log::warn!(
                    "journal segment {}: torn record at byte {tail} (a write cut short by a crash); {cut} bytes truncated",
                    path.display()
                );
                recovered.truncated_bytes += cut as u64;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_error(&path))?;
                f.set_len(tail as u64).map_err(io_error(&path))?;
                f.sync_all().map_err(io_error(&path))?;
                end = tail;
            }
            let report = scan.damage_report(last);
            if report.bytes > 0 || !scan.header_ok {
                recovered.damage.segments += 1;
                recovered.damage.bytes += report.bytes;
                recovered.damage.records += report.records;
                damaged.push((seq, scan.describe(&path, last)));
            }
            for (record, at, len) in scan.records {
                recovered.records_read += 1;
                // A batch's parts all point at the batch's bytes.
                for part in record.into_parts() {
                    let id = part.id();
                    max_id = max_id.max(id);
                    match part {
                        Record::End { id } => {
                            live.remove(&id);
                        }
                        r => {
                            live.insert(id, (r, seq, at as u64, len));
                        }
                    }
                }
            }
            segments.push_back(Segment {
                seq,
                path,
                len: end as u64,
                allocated: end as u64,
                live: FastMap::default(),
            });
        }
        if !damaged.is_empty() {
            let what: Vec<&str> = damaged.iter().map(|(_, d)| d.as_str()).collect();
            if !config.recover_corrupt {
                return Err(JournalError::Damaged(what.join("; ")));
            }
            for d in &what {
                log::error!("journal: {d}");
            }
        }
        // Live entries point at the last copy of each id.
        let mut index = FastMap::default();
        for (id, (_, seq, offset, len)) in &live {
            if let Some(s) = segments.iter_mut().find(|s| s.seq == *seq) {
                s.live.insert(*id, (*offset, *len));
                index.insert(*id, *seq);
            }
        }
        recovered.records = live.into_values().map(|(r, ..)| r).collect();
        let mut space = Space::new(config.min_free_bytes, &dir, config.disk.clone());
        space.check(true);
        let mut writer = Writer {
            metrics: JournalMetrics {
                damage: recovered.damage,
                space: space.gauge(),
                ..JournalMetrics::default()
            },
            config,
            segments,
            current: None,
            space,
            failed: None,
            index,
            unsynced: false,
            _lock: lock,
        };
        // Writes always go to a fresh segment. On a full disk the server
        // starts without one, to serve consumers: the next write tries again.
        match writer.ensure_current() {
            Ok(()) => {}
            Err(JournalError::Io { source, .. }) if space::is_full(&source) => log::error!(
                "journal: the disk is full, no new segment could be made: starting anyway; consumers are served, persistent messages wait for space"
            ),
            Err(e) => return Err(e),
        }
        if let Some(&(through, _)) = damaged.last() {
            let damaged: Vec<u64> = damaged.iter().map(|(seq, _)| *seq).collect();
            writer.set_aside(through, &damaged)?;
            log::error!(
                "journal: recovered past damage: {} segments set aside as *.corrupt, {} bytes skipped ({} whole records, and whatever else those bytes held)",
                recovered.damage.segments,
                recovered.damage.bytes,
                recovered.damage.records
            );
        }
        writer.compact();
        Ok((writer, recovered, max_id))
    }

    /// Moves every live record of the segments up to `through` forward,
    /// then deletes those segments, but renames the `damaged` ones to
    /// `*.corrupt`: no later replay reads them, and none of the records
    /// they ended can come back, since every segment before them goes too.
    fn set_aside(&mut self, through: u64, damaged: &[u64]) -> Result<(), JournalError> {
        while self.segments.front().is_some_and(|s| s.seq <= through) {
            self.relocate_oldest()?;
            let Some(oldest) = self.segments.pop_front() else {
                break;
            };
            if damaged.contains(&oldest.seq) {
                let aside = oldest.path.with_extension("hlog.corrupt");
                fs::rename(&oldest.path, &aside).map_err(io_error(&oldest.path))?;
                log::error!(
                    "journal: {} set aside as {}",
                    oldest.path.display(),
                    aside.display()
                );
            } else {
                self.config
                    .disk
                    .remove(&oldest.path)
                    .map_err(io_error(&oldest.path))?;
            }
        }
        Ok(())
    }

    fn run(&mut self, rx: Receiver<Request>) {
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
                    Request::Append(record, completion) => {
                        self.frame_pending(record, &mut buf, &mut pending);
                        done.extend(completion);
                    }
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

    /// Frames `record` into `buf`, to be written at its end.
    fn frame_pending(
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
    fn ensure_current(&mut self) -> Result<(), JournalError> {
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

    fn current_len(&self) -> u64 {
        self.segments.back().map_or(0, |s| s.len)
    }

    /// Writes `buf`, and syncs it (with everything before it) if `sync`
    /// and the policy syncs at all.
    fn write(&mut self, buf: &[u8], sync: bool) -> io::Result<()> {
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

    fn sync(&mut self) -> io::Result<()> {
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
    fn stop(&mut self, why: String) {
        self.failed = Some(why);
        self.metrics.stopped.store(true, Ordering::Relaxed);
    }

    /// Updates which records are live after a successful write.
    fn apply(&mut self, offset: u64, len: u32, record: Record) {
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
    fn cut_reserve(&mut self) {
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

    fn rotate(&mut self) -> Result<(), JournalError> {
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

    /// Deletes old segments, oldest first, moving their live records
    /// forward when there are too many segments.
    fn compact(&mut self) {
        while self.segments.len() > 1 {
            let Some(oldest) = self.segments.front() else {
                return;
            };
            if !oldest.live.is_empty() {
                // Copying live records forward takes space before it frees
                // any: not while space is low.
                if self.segments.len() <= self.config.max_segments || self.space.low() {
                    return;
                }
                if let Err(e) = self.relocate_oldest() {
                    log::error!("journal compaction failed: {e}");
                    return;
                }
            }
            if let Some(oldest) = self.segments.pop_front() {
                if let Err(e) = self.config.disk.remove(&oldest.path) {
                    log::error!("journal: cannot delete {}: {e}", oldest.path.display());
                }
                log::debug!("journal: segment {} deleted", oldest.seq);
                self.space.check(true);
            }
        }
    }

    fn relocate_oldest(&mut self) -> Result<(), JournalError> {
        self.ensure_current()?;
        let Some(oldest) = self.segments.front() else {
            return Ok(());
        };
        let path = oldest.path.clone();
        let file = File::open(&path).map_err(io_error(&path))?;
        let mut entries: Vec<(u64, u64, u32)> = oldest
            .live
            .iter()
            .map(|(id, (o, l))| (*id, *o, *l))
            .collect();
        entries.sort_unstable_by_key(|e| e.1);
        let mut buf = BytesMut::new();
        let mut moved = Vec::new();
        for (id, offset, len) in entries {
            let mut bytes = vec![0u8; len as usize];
            file.read_exact_at(&mut bytes, offset)
                .map_err(io_error(&path))?;
            // Only the live record moves: out of a batch, the part with
            // its id (the others may have ended).
            let corrupt = || JournalError::Io {
                path: path.clone(),
                source: io::Error::other(format!("record {id} no longer reads back")),
            };
            let (record, _) = read_record(&Bytes::from(bytes), 0).ok_or_else(corrupt)?;
            let part = record
                .into_parts()
                .into_iter()
                .find(|r| r.id() == id)
                .ok_or_else(corrupt)?;
            let at = self.current_len() + buf.len() as u64;
            let len = frame(&part, &mut buf).map_err(|e| JournalError::Io {
                path: path.clone(),
                source: io::Error::other(e.to_string()),
            })?;
            moved.push((id, at, len));
        }
        let current_path = self
            .segments
            .back()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        self.write(&buf, false).map_err(io_error(&current_path))?;
        // The copies must be durable before the originals go.
        self.sync().map_err(io_error(&current_path))?;
        let Some(current) = self.segments.back_mut() else {
            return Ok(());
        };
        let seq = current.seq;
        for (id, offset, len) in moved {
            current.live.insert(id, (offset, len));
            self.index.insert(id, seq);
        }
        if let Some(oldest) = self.segments.front_mut() {
            oldest.live.clear();
        }
        Ok(())
    }
}

/// What one segment file holds: its intact records, and what did not read.
struct Scan {
    /// The file's length.
    len: usize,
    header_ok: bool,
    /// Intact records: the record, its offset, its whole length.
    records: Vec<(Record, usize, u32)>,
    /// Stretches that did not read, each with whether the bad record's
    /// own length led exactly to the next intact one (one whole record).
    bad: Vec<(usize, usize, bool)>,
    /// Where a stretch with no intact record after it starts, if one
    /// runs to the end of the file.
    torn_tail: Option<usize>,
    /// Where the zeros reserved after the last record start, if any are
    /// left: not damage, the end of what was written.
    zeros_from: Option<usize>,
}

/// Reads a segment: each intact record in turn, and after one that does
/// not read, the next offset where one does.
fn scan(data: &Bytes) -> Scan {
    let header_ok = data.len() >= HEADER_LEN as usize && &data[..4] == MAGIC && data[4] == VERSION;
    let mut scan = Scan {
        len: data.len(),
        header_ok,
        records: Vec::new(),
        bad: Vec::new(),
        torn_tail: None,
        zeros_from: None,
    };
    let mut at = HEADER_LEN as usize;
    while at < data.len() {
        if let Some((record, len)) = read_record(data, at) {
            scan.records.push((record, at, len));
            at += len as usize;
            continue;
        }
        // No record has a length of zero.
        if data[at..].iter().all(|&b| b == 0) {
            scan.zeros_from = Some(at);
            break;
        }
        match (at + 1..data.len()).find(|&o| read_record(data, o).is_some()) {
            Some(next) => {
                let declared = data
                    .get(at..at + 4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
                let one_record = declared.is_some_and(|n| at + RECORD_HEAD + n == next);
                scan.bad.push((at, next, one_record));
                at = next;
            }
            None => {
                scan.torn_tail = Some(at);
                break;
            }
        }
    }
    scan
}

impl Scan {
    /// What is damage here: every bad stretch but a torn tail of the last
    /// segment (which a crash leaves, and which is cut, not counted).
    fn damage_report(&self, last: bool) -> DamageReport {
        let mut report = DamageReport::default();
        for &(from, to, one) in &self.bad {
            report.bytes += (to - from) as u64;
            report.records += u64::from(one);
        }
        if let (false, Some(at)) = (last, self.torn_tail) {
            report.bytes += (self.len - at) as u64;
        }
        report
    }

    /// The damage in words, for the log and the refusal.
    fn describe(&self, path: &Path, last: bool) -> String {
        let mut parts = Vec::new();
        if !self.header_ok {
            parts.push("its header is not a segment header".to_owned());
        }
        for &(from, to, one) in &self.bad {
            parts.push(match one {
                true => format!("a bad record at byte {from} ({} bytes)", to - from),
                false => format!("{} unreadable bytes at byte {from}", to - from),
            });
        }
        if let (false, Some(at)) = (last, self.torn_tail) {
            parts.push(format!(
                "unreadable bytes from byte {at} to the end, in a segment that is not the last"
            ));
        }
        format!(
            "segment {}: {} ({} intact records read)",
            path.display(),
            parts.join(", "),
            self.records.len()
        )
    }
}

/// The record at `at`, and its whole length, if it is intact.
fn read_record(data: &Bytes, at: usize) -> Option<(Record, u32)> {
    let head = data.get(at..at + RECORD_HEAD)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_PAYLOAD {
        return None;
    }
    let start = at + RECORD_HEAD;
    let payload = data.slice(
        start
            ..start
                .checked_add(len as usize)
                .filter(|e| *e <= data.len())?,
    );
    if crc32c::crc32c(&payload) != crc {
        return None;
    }
    let record = Record::decode(&payload).ok()?;
    Some((record, len + RECORD_HEAD as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Holder;
    use crate::test_util::TempDir;
    use std::io::Write;
    use std::sync::mpsc::channel;

    fn config(dir: &TempDir) -> JournalConfig {
        JournalConfig::new(dir.0.clone(), FsyncPolicy::Batch, 64 << 20, 4)
    }

    fn enqueue(j: &Journal, queue: &str, body: &str) -> u64 {
        let id = j.next_id();
        let record = Record::Enqueue {
            id,
            holder: Holder::Queue(queue.into()),
            block: Bytes::copy_from_slice(body.as_bytes()),
        };
        j.append(record, None);
        id
    }

    fn sync(j: &Journal) -> Result<(), StoreError> {
        let (tx, rx) = channel();
        j.barrier(Box::new(move |r| tx.send(r).unwrap()));
        rx.recv().unwrap()
    }

    fn bodies(r: &Recovered) -> Vec<String> {
        r.records
            .iter()
            .filter_map(|r| match r {
                Record::Enqueue { block, .. } => Some(String::from_utf8_lossy(block).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn live_records_survive_a_reopen_in_order() {
        let dir = TempDir::new("reopen");
        let (j, r) = Journal::open(config(&dir)).unwrap();
        assert!(r.records.is_empty());
        let a = enqueue(&j, "q", "a");
        enqueue(&j, "q", "b");
        enqueue(&j, "other", "c");
        j.append(Record::End { id: a }, None);
        sync(&j).unwrap();
        drop(j);
        let (j, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["b", "c"]);
        assert!(j.next_id() > a + 2, "ids keep growing");
    }

    #[test]
    fn a_second_server_cannot_open_the_same_directory() {
        let dir = TempDir::new("lock");
        let (_j, _) = Journal::open(config(&dir)).unwrap();
        assert!(matches!(
            Journal::open(config(&dir)),
            Err(JournalError::Locked(_))
        ));
    }

    fn last_segment(dir: &TempDir) -> PathBuf {
        let mut v: Vec<PathBuf> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "hlog")
                    && fs::metadata(p).unwrap().len() > HEADER_LEN
            })
            .collect();
        v.sort();
        v.pop().unwrap()
    }

    /// Writes "one", "two", "three" and returns the segment holding them.
    fn three_records(dir: &TempDir) -> PathBuf {
        let (j, _) = Journal::open(config(dir)).unwrap();
        for body in ["one", "two", "three"] {
            enqueue(&j, "q", body);
        }
        sync(&j).unwrap();
        drop(j);
        last_segment(dir)
    }

    #[test]
    fn a_torn_tail_is_truncated_and_the_rest_recovered() {
        let dir = TempDir::new("torn");
        let path = three_records(&dir);
        let len = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let (j, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "two"]);
        assert!(r.truncated_bytes > 0);
        enqueue(&j, "q", "four");
        sync(&j).unwrap();
        drop(j);
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "two", "four"]);
    }

    /// The segment being written, copied into `to` as a crash would leave
    /// it (the zeros reserved after its records included), under the name
    /// of segment `seq`.
    fn as_a_crash_leaves_it(dir: &TempDir, to: &TempDir, seq: u64) -> Vec<u8> {
        let data = fs::read(last_segment(dir)).unwrap();
        fs::create_dir_all(&to.0).unwrap();
        let mut copy = data.clone();
        copy[8..16].copy_from_slice(&seq.to_be_bytes());
        fs::write(to.0.join(segment_name(seq)), &copy).unwrap();
        data
    }

    #[test]
    fn zeros_are_reserved_ahead_of_the_records_and_cut_when_done_with() {
        let dir = TempDir::new("reserve");
        let (j, _) = Journal::open(config(&dir)).unwrap();
        for body in ["one", "two", "three"] {
            enqueue(&j, "q", body);
        }
        sync(&j).unwrap();
        // Written into space the file already had: no size to commit.
        let data = as_a_crash_leaves_it(&dir, &TempDir::new("unused"), 1);
        assert_eq!(data.len() as u64, HEADER_LEN + RESERVE);
        let records = data.len() - data.iter().rev().take_while(|&&b| b == 0).count();
        assert!(records > HEADER_LEN as usize + 3 * RECORD_HEAD);
        // A record bigger than what is left reserves as much as it needs.
        let big = "b".repeat(RESERVE as usize + 10);
        enqueue(&j, "q", &big);
        sync(&j).unwrap();
        let len = fs::metadata(last_segment(&dir)).unwrap().len();
        assert!(
            len > RESERVE + 10 && len <= 2 * RESERVE + records as u64,
            "{len}"
        );
        // Stopped, the segment ends with its last record.
        drop(j);
        let data = fs::read(last_segment(&dir)).unwrap();
        assert_ne!(data.last(), Some(&0));
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "two", "three", big.as_str()]);
        assert_eq!((r.truncated_bytes, r.damage), (0, DamageReport::default()));
    }

    #[test]
    fn zeros_a_crash_leaves_after_the_records_are_their_end_not_damage() {
        let dir = TempDir::new("zeros");
        let (j, _) = Journal::open(config(&dir)).unwrap();
        for body in ["one", "two"] {
            enqueue(&j, "q", body);
        }
        sync(&j).unwrap();
        // The same zeros at the end of a segment that is not the last (a
        // crash between a rotation's cut and its new segment) and of the
        // last one.
        let crashed = TempDir::new("zeros-crashed");
        as_a_crash_leaves_it(&dir, &crashed, 1);
        let data = as_a_crash_leaves_it(&dir, &crashed, 2);
        let (j2, r) = Journal::open(config(&crashed)).unwrap();
        assert_eq!(bodies(&r), ["one", "two"], "one copy of each id");
        assert_eq!((r.truncated_bytes, r.damage), (0, DamageReport::default()));
        let records = data.len() - data.iter().rev().take_while(|&&b| b == 0).count();
        // (Segment 1, all of whose records have later copies, is gone.)
        let second = fs::metadata(crashed.0.join(segment_name(2))).unwrap();
        assert_eq!(second.len(), records as u64, "the zeros cut");
        enqueue(&j2, "q", "three");
        sync(&j2).unwrap();
        drop(j2);
        let (_, r) = Journal::open(config(&crashed)).unwrap();
        assert_eq!(bodies(&r), ["one", "two", "three"]);

        // A record torn before the zeros is torn: cut, the rest kept.
        let torn = TempDir::new("zeros-torn");
        let mut data = as_a_crash_leaves_it(&dir, &torn, 1);
        data[records - 3..records].fill(0);
        data[records - 12] ^= 0x40;
        fs::write(torn.0.join(segment_name(1)), &data).unwrap();
        let (_, r) = Journal::open(config(&torn)).unwrap();
        assert_eq!(bodies(&r), ["one"]);
        assert!(r.truncated_bytes > 0);
        drop(j);
    }

    #[test]
    fn a_flipped_bit_fails_the_crc_and_ends_the_segment_there() {
        let dir = TempDir::new("flip");
        let path = three_records(&dir);
        let mut data = fs::read(&path).unwrap();
        let at = data.len() - 10;
        data[at] ^= 0x20;
        fs::write(&path, &data).unwrap();
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "two"]);
        let garbage = dir.0.join(segment_name(999_999));
        fs::write(&garbage, b"not a segment").unwrap();
        drop(Journal::open(config(&dir)).unwrap());
        assert!(!garbage.exists(), "a headerless segment is removed");
    }

    /// `n` records of about a kilobyte each ("0", "1", ...) in segments of
    /// `segment_size`; returns the segment files in order.
    fn numbered(dir: &TempDir, n: usize, segment_size: u64) -> Vec<PathBuf> {
        let mut c = config(dir);
        c.segment_size = segment_size;
        c.max_segments = 1000;
        let (j, _) = Journal::open(c).unwrap();
        for i in 0..n {
            enqueue(&j, "q", &format!("{i} {}", "x".repeat(1000)));
            sync(&j).unwrap();
        }
        drop(j);
        let mut files: Vec<PathBuf> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "hlog"))
            .filter(|p| fs::metadata(p).unwrap().len() > HEADER_LEN)
            .collect();
        files.sort();
        files
    }

    fn numbers(r: &Recovered) -> Vec<usize> {
        bodies(r)
            .iter()
            .map(|b| b.split(' ').next().unwrap().parse().unwrap())
            .collect()
    }

    fn flip(path: &Path, at: usize) {
        let mut data = fs::read(path).unwrap();
        data[at] ^= 0x20;
        fs::write(path, &data).unwrap();
    }

    fn recovering(dir: &TempDir) -> JournalConfig {
        JournalConfig {
            recover_corrupt: true,
            ..config(dir)
        }
    }

    #[test]
    fn one_bad_byte_in_the_middle_is_damage_not_a_torn_tail() {
        // The case: 200 records of 1 KB, one byte flipped at 30,000
        // of the first segment. Truncating there lost 33 intact records.
        let dir = TempDir::new("damage");
        let files = numbered(&dir, 200, 65536);
        assert!(files.len() > 2);
        flip(&files[0], 30_000);
        let before = fs::read(&files[0]).unwrap();
        let e = Journal::open(config(&dir)).err().unwrap();
        let said = e.to_string();
        assert!(matches!(e, JournalError::Damaged(_)), "{said}");
        assert!(
            said.contains("recover_corrupt") && said.contains("bad record"),
            "{said}"
        );
        assert_eq!(
            fs::read(&files[0]).unwrap(),
            before,
            "nothing changed on disk"
        );
        // Told to recover: every record but the damaged one.
        let (j, r) = Journal::open(recovering(&dir)).unwrap();
        let got = numbers(&r);
        assert_eq!(got.len(), 199, "{got:?}");
        assert_eq!((r.damage.segments, r.damage.records), (1, 1));
        assert!((1000..1100).contains(&r.damage.bytes), "{:?}", r.damage);
        assert_eq!(j.metrics().damage, r.damage);
        let aside = files[0].with_extension("hlog.corrupt");
        assert_eq!(fs::read(&aside).unwrap(), before, "set aside whole");
        assert!(!files[0].exists());
        drop(j);
        // And from then on it opens cleanly, with the same records.
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(numbers(&r), got);
        assert_eq!(r.damage, DamageReport::default());
    }

    #[test]
    fn every_part_of_a_record_is_checked_in_the_last_and_an_older_segment() {
        // Offsets into the fifth record: its length, its CRC, its payload.
        for (part, offset) in [("length", 1), ("crc", 5), ("payload", 500)] {
            for older in [true, false] {
                let dir = TempDir::new("parts");
                let files = numbered(&dir, 40, 16384);
                let file = if older {
                    &files[0]
                } else {
                    files.last().unwrap()
                };
                let data = fs::read(file).unwrap();
                let fifth = {
                    let mut at = HEADER_LEN as usize;
                    for _ in 0..4 {
                        at += read_record(&Bytes::from(data.clone()), at).unwrap().1 as usize;
                    }
                    at
                };
                flip(file, fifth + offset);
                let e = Journal::open(config(&dir)).err();
                assert!(
                    matches!(e, Some(JournalError::Damaged(_))),
                    "{part}, older {older}: {e:?}"
                );
                let (_, r) = Journal::open(recovering(&dir)).unwrap();
                assert_eq!(numbers(&r).len(), 39, "{part}, older {older}");
                assert_eq!(r.damage.segments, 1);
                // A flipped length no longer leads to the next record.
                assert_eq!(r.damage.records, u64::from(part != "length"), "{part}");
            }
        }
    }

    #[test]
    fn a_segment_of_a_newer_format_is_named_as_such_and_left_alone() {
        let dir = TempDir::new("newer");
        let path = three_records(&dir);
        let mut data = fs::read(&path).unwrap();
        data[4] = VERSION + 1;
        fs::write(&path, &data).unwrap();
        let e = Journal::open(config(&dir)).err().expect("refused");
        let text = e.to_string();
        assert!(matches!(e, JournalError::Newer { .. }), "{text}");
        assert!(text.contains("newer version"), "{text}");
        assert!(!text.contains("damaged"), "{text}");
        assert_eq!(fs::read(&path).unwrap(), data, "left as it was");
    }

    #[test]
    fn a_bad_header_on_an_older_segment_is_damage_and_its_records_are_kept() {
        let dir = TempDir::new("header");
        let files = numbered(&dir, 40, 16384);
        flip(&files[0], 0);
        assert!(matches!(
            Journal::open(config(&dir)),
            Err(JournalError::Damaged(_))
        ));
        let (_, r) = Journal::open(recovering(&dir)).unwrap();
        assert_eq!(numbers(&r), (0..40).collect::<Vec<_>>());
        assert_eq!(r.damage.segments, 1);
    }

    #[test]
    fn acknowledged_segments_are_deleted_and_live_ones_moved_forward() {
        let dir = TempDir::new("compact");
        let mut c = config(&dir);
        c.segment_size = 4096;
        c.max_segments = 3;
        let (j, _) = Journal::open(c.clone()).unwrap();
        let keep = enqueue(&j, "q", "keep me");
        let body = "x".repeat(500);
        for _ in 0..200 {
            let id = enqueue(&j, "q", &body);
            j.append(Record::End { id }, None);
            sync(&j).unwrap();
        }
        let segments = fs::read_dir(&dir.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "hlog")
            })
            .count();
        assert!(segments <= c.max_segments + 1, "{segments} segments left");
        drop(j);
        let (_, r) = Journal::open(c).unwrap();
        assert_eq!(bodies(&r), ["keep me"]);
        assert_eq!(r.records[0].id(), keep);
    }

    fn queued(j: &Journal, body: &str) -> Record {
        Record::Enqueue {
            id: j.next_id(),
            holder: Holder::Queue("q".into()),
            block: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn a_torn_batch_recovers_none_of_its_records() {
        // "before", then a batch of two new records and the End of "before";
        // `torn` cuts the batch's last byte, as a crash in its write would.
        let run = |torn: bool| {
            let dir = TempDir::new("torn-batch");
            let (j, _) = Journal::open(config(&dir)).unwrap();
            let before = enqueue(&j, "q", "before");
            let batch = vec![
                queued(&j, "tx-1"),
                queued(&j, "tx-2"),
                Record::End { id: before },
            ];
            j.append_atomically(batch, None);
            sync(&j).unwrap();
            drop(j);
            if torn {
                let path = last_segment(&dir);
                let len = fs::metadata(&path).unwrap().len();
                let f = OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(len - 1).unwrap();
            }
            let (_, r) = Journal::open(config(&dir)).unwrap();
            bodies(&r)
        };
        assert_eq!(run(false), ["tx-1", "tx-2"], "a whole batch takes effect");
        // None of a torn batch's parts takes effect, not even its End.
        assert_eq!(run(true), ["before"]);
    }

    #[test]
    fn compaction_moves_only_the_live_parts_of_a_batch() {
        let dir = TempDir::new("compact-batch");
        let mut c = config(&dir);
        c.segment_size = 4096;
        c.max_segments = 3;
        let (j, _) = Journal::open(c.clone()).unwrap();
        let (gone, kept) = (queued(&j, "gone"), queued(&j, "kept"));
        let gone_id = gone.id();
        j.append_atomically(vec![gone, kept], None);
        j.append(Record::End { id: gone_id }, None);
        let body = "x".repeat(500);
        for _ in 0..100 {
            let id = enqueue(&j, "q", &body);
            j.append(Record::End { id }, None);
            sync(&j).unwrap();
        }
        drop(j);
        let (_, r) = Journal::open(c).unwrap();
        assert_eq!(bodies(&r), ["kept"]);
    }

    /// Faults to inject, shared between a test and its disk.
    #[derive(Default)]
    struct Faults {
        /// Bytes that may still be written before the disk is "full".
        room: Mutex<Option<usize>>,
        /// The next write stops halfway and fails.
        tear: std::sync::atomic::AtomicBool,
        /// Every sync fails.
        fail_sync: std::sync::atomic::AtomicBool,
        /// Syncs asked for.
        syncs: AtomicU64,
        /// The next write fails with EIO, writing nothing.
        fail_write: std::sync::atomic::AtomicBool,
    }

    struct FaultyDisk(Arc<Faults>);

    struct FaultyFile {
        file: File,
        faults: Arc<Faults>,
    }

    impl Disk for FaultyDisk {
        fn create(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(path)?;
            Ok(Box::new(FaultyFile {
                file,
                faults: self.0.clone(),
            }))
        }

        fn free_space(&self, _dir: &Path) -> io::Result<u64> {
            Ok(self.0.room.lock().unwrap().map_or(u64::MAX, |r| r as u64))
        }
    }

    impl SegmentFile for FaultyFile {
        fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
            if self.faults.fail_write.swap(false, Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(5));
            }
            if self.faults.tear.swap(false, Ordering::Relaxed) {
                Write::write_all(&mut self.file, &buf[..buf.len() / 2])?;
                return Err(io::Error::other("torn write (injected)"));
            }
            let mut room = self.faults.room.lock().unwrap();
            if let Some(left) = room.as_mut() {
                if *left < buf.len() {
                    let n = *left;
                    *left = 0;
                    Write::write_all(&mut self.file, &buf[..n])?;
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        "no space left (injected)",
                    ));
                }
                *left -= buf.len();
            }
            Write::write_all(&mut self.file, buf)
        }

        fn sync_data(&mut self) -> io::Result<()> {
            self.faults.syncs.fetch_add(1, Ordering::Relaxed);
            if self.faults.fail_sync.load(Ordering::Relaxed) {
                return Err(io::Error::other("sync failed (injected)"));
            }
            self.file.sync_data()
        }

        fn rewind_to(&mut self, len: u64) -> io::Result<()> {
            SegmentFile::rewind_to(&mut self.file, len)
        }
    }

    fn faulty(dir: &TempDir) -> (JournalConfig, Arc<Faults>) {
        let faults = Arc::new(Faults::default());
        let mut c = config(dir);
        c.disk = Arc::new(FaultyDisk(faults.clone()));
        (c, faults)
    }

    /// Appends one message and waits for its completion.
    fn durable(j: &Journal, body: &str) -> Result<(), StoreError> {
        let (tx, rx) = channel();
        let record = Record::Enqueue {
            id: j.next_id(),
            holder: Holder::Queue("q".into()),
            block: Bytes::copy_from_slice(body.as_bytes()),
        };
        j.append(record, Some(Box::new(move |r| tx.send(r).unwrap())));
        rx.recv().unwrap()
    }

    #[test]
    fn records_no_one_waits_for_ride_the_next_sync() {
        let dir = TempDir::new("lazy");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c.clone()).unwrap();
        let ids: Vec<u64> = (0..50).map(|i| enqueue(&j, "q", &i.to_string())).collect();
        sync(&j).unwrap();
        let before = faults.syncs.load(Ordering::Relaxed);
        // Fifty acknowledgements, each alone, with no one waiting: none
        // forces a sync; the quiet that follows makes them durable.
        for id in &ids {
            j.append(Record::End { id: *id }, None);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(LAZY_SYNC * 4);
        let after = faults.syncs.load(Ordering::Relaxed);
        assert!(
            after - before < 25,
            "{} syncs for 50 acknowledgements",
            after - before
        );
        assert!(after > before, "the quiet synced them");
        drop(j);
        let (_, r) = Journal::open(c).unwrap();
        assert!(r.records.is_empty(), "every acknowledgement kept");
    }

    #[test]
    fn a_barrier_makes_what_was_written_unsynced_durable() {
        let dir = TempDir::new("lazy-barrier");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c).unwrap();
        let id = enqueue(&j, "q", "x");
        sync(&j).unwrap();
        j.append(Record::End { id }, None);
        let before = faults.syncs.load(Ordering::Relaxed);
        sync(&j).unwrap();
        assert!(faults.syncs.load(Ordering::Relaxed) > before);
    }

    #[test]
    fn a_full_disk_fails_the_sends_it_cannot_keep_and_recovers_when_space_returns() {
        let dir = TempDir::new("full");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c.clone()).unwrap();
        durable(&j, "one").unwrap();
        *faults.room.lock().unwrap() = Some(10);
        let e = durable(&j, "two").unwrap_err();
        assert!(
            matches!(&e, StoreError::Journal(why) if why.contains("no space")),
            "{e}"
        );
        *faults.room.lock().unwrap() = None;
        durable(&j, "three").unwrap();
        drop(j);
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "three"], "no trace of the failed write");
        assert_eq!(
            r.truncated_bytes, 0,
            "the failed write was cut back at once"
        );
    }

    #[test]
    fn a_torn_write_is_cut_back_and_writing_goes_on_after_the_last_whole_record() {
        let dir = TempDir::new("tearing");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c).unwrap();
        durable(&j, "one").unwrap();
        faults.tear.store(true, Ordering::Relaxed);
        assert!(durable(&j, "two").is_err());
        durable(&j, "three").unwrap();
        drop(j);
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["one", "three"]);
        assert_eq!(r.truncated_bytes, 0);
    }

    #[test]
    fn after_a_failed_sync_nothing_is_confirmed_again() {
        let dir = TempDir::new("sync");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c).unwrap();
        durable(&j, "one").unwrap();
        faults.fail_sync.store(true, Ordering::Relaxed);
        let e = durable(&j, "two").unwrap_err();
        assert!(
            matches!(&e, StoreError::Journal(why) if why.contains("sync")),
            "{e}"
        );
        faults.fail_sync.store(false, Ordering::Relaxed);
        let e = durable(&j, "three").unwrap_err();
        assert!(
            matches!(&e, StoreError::Journal(why) if why.contains("could not sync")),
            "still failed: {e}"
        );
        assert!(sync(&j).is_err());
        assert!(j.metrics().stopped.load(Ordering::Relaxed));
    }

    #[test]
    fn an_io_error_on_write_fails_that_write_and_writing_goes_on() {
        let dir = TempDir::new("eio");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c.clone()).unwrap();
        durable(&j, "one").unwrap();
        faults.fail_write.store(true, Ordering::Relaxed);
        let e = durable(&j, "two").unwrap_err();
        assert!(
            matches!(&e, StoreError::Journal(why) if why.contains("Input/output error")),
            "{e}"
        );
        faults.fail_write.store(false, Ordering::Relaxed);
        durable(&j, "three").unwrap();
        assert!(!j.metrics().stopped.load(Ordering::Relaxed));
        drop(j);
        let (_, r) = Journal::open(c).unwrap();
        assert_eq!(bodies(&r), ["one", "three"]);
    }
}
