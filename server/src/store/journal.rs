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
//! Replay reads segments in sequence order. A record that runs past the end
//! of its file or fails its CRC ends that segment: the file is truncated
//! there with a warning (a torn write at a crash), and replay goes on.
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
//!
//! # Compaction
//!
//! A segment is only ever deleted when it is the oldest, so no later
//! segment can hold an `End` for a record that would then be resurrected.
//! The oldest segment goes when none of its records is live; while there are
//! more than `max_segments`, its live records are first copied, byte for
//! byte, to the current segment. A crash in between leaves two copies of a
//! record with one id, which replay treats as one.

use crate::FastMap;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use thiserror::Error;

use super::{Completion, Record, Store};

const MAGIC: &[u8; 4] = b"HRLJ";
const VERSION: u8 = 1;
const HEADER_LEN: u64 = 16;
const RECORD_HEAD: usize = 8;
/// Largest payload replay believes; a longer length is corruption.
const MAX_PAYLOAD: u32 = 256 << 20;
/// Bytes gathered into one write at most.
const MAX_BATCH: usize = 4 << 20;

/// When the journal makes writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
}

/// The journal's way to the disk for the files it writes. Tests put a
/// disk here that tears writes, fails syncs or fills up.
pub trait Disk: Send + Sync {
    /// Creates (or truncates) a segment file to append to.
    fn create(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;
}

/// A segment file being appended to.
pub trait SegmentFile: Send {
    /// Appends all of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the data written so far durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes and goes on writing there.
    fn rewind_to(&mut self, len: u64) -> io::Result<()>;
}

/// The real file system.
pub struct RealDisk;

impl Disk for RealDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)?;
        Ok(Box::new(f))
    }
}

impl SegmentFile for File {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn rewind_to(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)?;
        self.seek(SeekFrom::Start(len)).map(drop)
    }
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
    /// Bytes cut off torn or corrupt segment tails.
    pub truncated_bytes: u64,
}

enum Request {
    Append(Record, Option<Completion>),
    Barrier(Completion),
    Stop,
}

/// How long the journal's writes and syncs take, in seconds.
#[derive(Debug, Clone)]
pub struct JournalMetrics {
    /// One `write` of a group of records.
    pub append: Histogram,
    /// One `fdatasync`.
    pub sync: Histogram,
}

impl Default for JournalMetrics {
    fn default() -> JournalMetrics {
        // 10 µs to about 1.3 s.
        let buckets = || exponential_buckets(0.000_01, 2.0, 18);
        JournalMetrics {
            append: Histogram::new(buckets()),
            sync: Histogram::new(buckets()),
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
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if tx.send(request).is_err() {
            log::error!("the journal thread has stopped; a record was not written");
        }
    }

    /// Latencies of its writes and syncs.
    pub fn metrics(&self) -> &JournalMetrics {
        &self.metrics
    }

    /// Writes what is queued and stops the thread (once).
    pub fn shutdown(&self) {
        let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        self.send(Request::Stop);
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
    /// Live records in this segment: id → (offset of the record head,
    /// whole record length).
    live: FastMap<u64, (u64, u32)>,
}

/// The journal thread's state.
struct Writer {
    metrics: JournalMetrics,
    config: JournalConfig,
    segments: VecDeque<Segment>,
    current: Box<dyn SegmentFile>,
    /// Set when a sync failed: what was written may not be on disk, and
    /// nothing the journal says can be trusted any more, so every later
    /// completion fails with this reason (as PostgreSQL does after a
    /// failed fsync).
    failed: Option<String>,
    /// Which segment holds each live id.
    index: FastMap<u64, u64>,
    /// Held for the life of the writer: the directory lock.
    _lock: File,
}

fn segment_name(seq: u64) -> String {
    format!("{seq:020}.hlog")
}

fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    seq: u64,
) -> Result<(Box<dyn SegmentFile>, PathBuf), JournalError> {
    let path = dir.join(segment_name(seq));
    let mut f = disk.create(&path).map_err(io_error(&path))?;
    let mut header = [0u8; HEADER_LEN as usize];
    header[..4].copy_from_slice(MAGIC);
    header[4] = VERSION;
    header[8..].copy_from_slice(&seq.to_be_bytes());
    f.write_all(&header).map_err(io_error(&path))?;
    f.sync_data().map_err(io_error(&path))?;
    // The new name must survive a crash too.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok((f, path))
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
    /// Reads every segment, truncating torn tails; returns the writer
    /// positioned on a fresh segment, what is live, and the highest id.
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
        let mut recovered = Recovered::default();
        let mut live: BTreeMap<u64, (Record, u64, u64, u32)> = BTreeMap::new();
        let mut segments = VecDeque::new();
        let mut max_id = 0;
        for &seq in &seqs {
            let path = dir.join(segment_name(seq));
            let mut data = Vec::new();
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut data))
                .map_err(io_error(&path))?;
            let data = Bytes::from(data);
            recovered.segments += 1;
            if data.len() < HEADER_LEN as usize || &data[..4] != MAGIC || data[4] != VERSION {
                log::warn!(
                    "journal segment {} has no valid header ({} bytes): removed",
                    path.display(),
                    data.len()
                );
                recovered.truncated_bytes += data.len() as u64;
                fs::remove_file(&path).map_err(io_error(&path))?;
                continue;
            }
            let mut at = HEADER_LEN as usize;
            while at < data.len() {
                let Some((record, len)) = read_record(&data, at) else {
                    break;
                };
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
                at += len as usize;
            }
            if at < data.len() {
                let cut = data.len() - at;
                log::warn!(
                    "journal segment {}: torn or corrupt record at byte {at}; {cut} bytes truncated",
                    path.display()
                );
                recovered.truncated_bytes += cut as u64;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_error(&path))?;
                f.set_len(at as u64).map_err(io_error(&path))?;
                f.sync_all().map_err(io_error(&path))?;
            }
            segments.push_back(Segment {
                seq,
                path,
                len: at as u64,
                live: FastMap::default(),
            });
        }
        // Live entries point at the last copy of each id.
        let mut index = FastMap::default();
        for (id, (_, seq, offset, len)) in &live {
            if let Some(s) = segments.iter_mut().find(|s| s.seq == *seq) {
                s.live.insert(*id, (*offset, *len));
                index.insert(*id, *seq);
            }
        }
        let next_seq = seqs.last().map_or(1, |s| s + 1);
        let (current, path) = create_segment(&*config.disk, &dir, next_seq)?;
        segments.push_back(Segment {
            seq: next_seq,
            path,
            len: HEADER_LEN,
            live: FastMap::default(),
        });
        recovered.records = live.into_values().map(|(r, ..)| r).collect();
        let mut writer = Writer {
            metrics: JournalMetrics::default(),
            config,
            segments,
            current,
            failed: None,
            index,
            _lock: lock,
        };
        writer.compact();
        Ok((writer, recovered, max_id))
    }

    fn run(&mut self, rx: Receiver<Request>) {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut done: Vec<Completion> = Vec::new();
        let mut pending: Vec<(u64, u32, Record)> = Vec::new();
        let mut stop = false;
        while !stop {
            let Ok(first) = rx.recv() else {
                break;
            };
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append(record, completion) => {
                        let offset = self.current_len() + buf.len() as u64;
                        match frame(&record, &mut buf) {
                            Ok(len) => pending.push((offset, len, record)),
                            Err(e) => log::error!("journal: record not encodable: {e}"),
                        }
                        done.extend(completion);
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
            let result = match self.write(&buf) {
                Ok(()) => {
                    for (offset, len, record) in pending.drain(..) {
                        self.apply(offset, len, record);
                    }
                    Ok(())
                }
                Err(e) => {
                    log::error!("journal write failed: {e}");
                    pending.clear();
                    Err(format!("the journal could not write: {e}"))
                }
            };
            buf.clear();
            for completion in done.drain(..) {
                completion(result.clone());
            }
            if self.current_len() >= self.config.segment_size {
                if let Err(e) = self.rotate() {
                    log::error!("journal: cannot start a new segment: {e}");
                }
            }
        }
    }

    fn current_len(&self) -> u64 {
        self.segments.back().map_or(0, |s| s.len)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(why.clone()));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let start = self.current_len();
        let began = std::time::Instant::now();
        let written = self.current.write_all(buf);
        self.metrics.append.observe(began.elapsed().as_secs_f64());
        if let Err(e) = written {
            // Leave no partial record behind the ones already written, and
            // go on writing where they end (a full disk may drain).
            if let Err(r) = self.current.rewind_to(start) {
                self.failed = Some(format!("cannot cut a failed write back ({r}) after: {e}"));
            }
            return Err(e);
        }
        if let Some(s) = self.segments.back_mut() {
            s.len += buf.len() as u64;
        }
        match self.config.fsync {
            FsyncPolicy::Never => Ok(()),
            FsyncPolicy::Always | FsyncPolicy::Batch => self.sync(),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        let began = std::time::Instant::now();
        let synced = self.current.sync_data();
        self.metrics.sync.observe(began.elapsed().as_secs_f64());
        synced.inspect_err(|e| {
            log::error!("journal sync failed: {e}; persistent sends fail from now on");
            self.failed = Some(format!("the journal could not sync ({e})"));
        })
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

    fn rotate(&mut self) -> Result<(), JournalError> {
        let path = self
            .segments
            .back()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        self.sync().map_err(io_error(&path))?;
        let seq = self.segments.back().map_or(1, |s| s.seq + 1);
        let (file, path) = create_segment(&*self.config.disk, &self.config.dir, seq)?;
        self.current = file;
        self.segments.push_back(Segment {
            seq,
            path,
            len: HEADER_LEN,
            live: FastMap::default(),
        });
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
                if self.segments.len() <= self.config.max_segments {
                    return;
                }
                if let Err(e) = self.relocate_oldest() {
                    log::error!("journal compaction failed: {e}");
                    return;
                }
            }
            if let Some(oldest) = self.segments.pop_front() {
                if let Err(e) = fs::remove_file(&oldest.path) {
                    log::error!("journal: cannot delete {}: {e}", oldest.path.display());
                }
                log::debug!("journal: segment {} deleted", oldest.seq);
            }
        }
    }

    fn relocate_oldest(&mut self) -> Result<(), JournalError> {
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
        self.write(&buf).map_err(io_error(&current_path))?;
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
    use std::sync::mpsc::channel;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir()
                .join(format!("herald-journal-{name}-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

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

    fn sync(j: &Journal) -> Result<(), String> {
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
        let (j, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["tx-1", "tx-2"], "a whole batch takes effect");
        drop(j);
        // Cut the last byte of the batch: none of its parts takes effect,
        // not even the End inside it.
        let path = last_segment(&dir);
        let len = fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 1).unwrap();
        let (_, r) = Journal::open(config(&dir)).unwrap();
        assert_eq!(bodies(&r), ["before"]);
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
    }

    impl SegmentFile for FaultyFile {
        fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
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
    fn durable(j: &Journal, body: &str) -> Result<(), String> {
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
    fn a_full_disk_fails_the_sends_it_cannot_keep_and_recovers_when_space_returns() {
        let dir = TempDir::new("full");
        let (c, faults) = faulty(&dir);
        let (j, _) = Journal::open(c.clone()).unwrap();
        durable(&j, "one").unwrap();
        *faults.room.lock().unwrap() = Some(10);
        let e = durable(&j, "two").unwrap_err();
        assert!(e.contains("no space"), "{e}");
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
        assert!(e.contains("sync"), "{e}");
        faults.fail_sync.store(false, Ordering::Relaxed);
        let e = durable(&j, "three").unwrap_err();
        assert!(e.contains("could not sync"), "still failed: {e}");
        assert!(sync(&j).is_err());
    }
}
