//! Large-message bodies: a body streamed in CHUNK frames is written to a
//! file of its own under `data_dir/large` as it arrives, and read from
//! there as it is delivered, so that memory holds only the message's
//! headers whatever the body's size (Artemis's large messages).
//!
//! A stored message names its file by number in its streamed body
//! ([`Streamed::stream`]). The file lives as long as some block that
//! names it does: a block made by [`LargeStore::hold`] owns the file, and
//! the last clone of such a block to go deletes it. Whatever makes a new
//! block from one that names a file (a rewritten header, a dead letter, a
//! divert's copy) holds it through [`LargeStore::hold`] too.
//!
//! For a persistent message the journal makes the file durable before the
//! message's record ([`sync_named`]). At start, files that a kept message
//! names are held again as the journal is replayed, and the rest (a body
//! that never finished arriving, a message ended while the server was
//! down) are deleted ([`LargeStore::sweep`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use herald_protocol::message::streamed_body as streamed;
use herald_protocol::Streamed;

use super::disk::{Disk, SegmentFile};

/// The directory under `data_dir` that holds the bodies.
pub const LARGE_DIR: &str = "large";

/// Where large bodies are written, and which are in use.
pub struct LargeStore {
    dir: PathBuf,
    data_dir: PathBuf,
    disk: Arc<dyn Disk>,
    min_free_bytes: u64,
    max_inline: u64,
    next: AtomicU64,
    /// Set as the server stops: the blocks dropped then are not done
    /// with, and their files stay (the next start keeps those that kept
    /// messages name and deletes the rest).
    stopping: AtomicBool,
    /// The files some block holds, by number.
    live: Mutex<HashMap<u64, Weak<BodyFile>>>,
    /// Why the last body could not be written, other than a full disk
    /// (which the journal's floor says), until one is written again: for
    /// health.
    failing: Mutex<Option<String>>,
    /// Bodies held, their bytes, and bodies arriving: for the metrics.
    held: AtomicU64,
    held_bytes: AtomicU64,
    arriving: AtomicU64,
}

/// A body's file; deleted when the last block that holds it goes.
struct BodyFile {
    id: u64,
    len: u64,
    store: Arc<LargeStore>,
}

impl BodyFile {
    /// Body `id` of `len` bytes, counted as held.
    fn new(id: u64, len: u64, store: &Arc<LargeStore>) -> Arc<BodyFile> {
        store.held.fetch_add(1, Ordering::Relaxed);
        store.held_bytes.fetch_add(len, Ordering::Relaxed);
        Arc::new(BodyFile {
            id,
            len,
            store: store.clone(),
        })
    }
}

impl Drop for BodyFile {
    fn drop(&mut self) {
        self.store.held.fetch_sub(1, Ordering::Relaxed);
        self.store.held_bytes.fetch_sub(self.len, Ordering::Relaxed);
        if self.store.stopping.load(Ordering::Acquire) {
            return;
        }
        let mut live = lock(&self.store.live);
        // Held again meanwhile (a replayed record): that one deletes it.
        if live.get(&self.id).is_some_and(|w| w.strong_count() > 0) {
            return;
        }
        live.remove(&self.id);
        drop(live);
        let _ = self.store.disk.remove(&self.store.path(self.id));
    }
}

/// A block and the body file it names, kept alive together.
struct HeldBlock {
    block: Vec<u8>,
    _file: Arc<BodyFile>,
}

impl AsRef<[u8]> for HeldBlock {
    fn as_ref(&self) -> &[u8] {
        &self.block
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A map of weak references, valid between any two statements.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes the body file a persistent message's block names durable, if it
/// names one, and its name in the directory (a new file's entry is not
/// durable with its data): the journal does so before it writes the
/// message's record.
pub fn sync_named(data_dir: &Path, block: &[u8]) -> io::Result<()> {
    let Some(s) = streamed(block) else {
        return Ok(());
    };
    let dir = data_dir.join(LARGE_DIR);
    File::open(body_path(&dir, s.stream))?.sync_data()?;
    File::open(&dir)?.sync_all()
}

/// `block`, holding the body file it names, if it names one: every block
/// made from one that held its file goes through here (or
/// [`LargeStore::hold`]), lest the file go with the old block.
pub fn keep(large: Option<&Arc<LargeStore>>, block: Bytes) -> Bytes {
    let Some(large) = large else {
        return block;
    };
    match large.hold(block.clone()) {
        Ok(held) => held,
        Err(e) => {
            log::error!("a large message's body is gone ({e}): its message stays, without it");
            block
        }
    }
}

fn body_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.body"))
}

impl LargeStore {
    /// The store under `data_dir`; file numbers go on after the highest
    /// one there. Bodies are refused when the disk would be left with less
    /// than `min_free_bytes`; a client that cannot take a stream gets
    /// bodies of up to `max_inline` bytes read into the message.
    pub fn open(
        data_dir: &Path,
        disk: Arc<dyn Disk>,
        min_free_bytes: u64,
        max_inline: u64,
    ) -> Arc<LargeStore> {
        let dir = data_dir.join(LARGE_DIR);
        let highest = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| file_number(&e.path()))
            .max();
        Arc::new(LargeStore {
            dir,
            data_dir: data_dir.to_path_buf(),
            disk,
            min_free_bytes,
            max_inline,
            next: AtomicU64::new(highest.map_or(1, |n| n + 1)),
            stopping: AtomicBool::new(false),
            held: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            arriving: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            failing: Mutex::new(None),
        })
    }

    /// Largest body read into a message for a client that cannot take a
    /// stream.
    pub fn max_inline(&self) -> u64 {
        self.max_inline
    }

    fn path(&self, id: u64) -> PathBuf {
        body_path(&self.dir, id)
    }

    /// Starts a body of `len` bytes: refused if the disk would then be
    /// below `journal.min_free_bytes`.
    pub fn create(self: &Arc<Self>, len: u64) -> io::Result<Spool> {
        std::fs::create_dir_all(&self.dir).inspect_err(|e| self.failed(e))?;
        let free = self.disk.free_space(&self.data_dir)?;
        if free < self.min_free_bytes.saturating_add(len) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "a body of {len} bytes does not fit: {free} bytes free on the disk, journal.min_free_bytes is {}",
                    self.min_free_bytes
                ),
            ));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let file = self
            .disk
            .create(&self.path(id))
            .inspect_err(|e| self.failed(e))?;
        self.arriving.fetch_add(1, Ordering::Relaxed);
        Ok(Spool {
            len,
            id,
            file,
            left: len,
            store: self.clone(),
            finished: false,
        })
    }

    /// `block` as a block that keeps the body file it names, if it names
    /// one (otherwise `block` itself): for a block just made from another
    /// that held the file, or read back from the journal. Fails if the
    /// file is not there, or not as long as the body.
    pub fn hold(self: &Arc<Self>, block: Bytes) -> io::Result<Bytes> {
        let Some(s) = streamed(&block) else {
            return Ok(block);
        };
        let file = {
            let mut live = lock(&self.live);
            match live.get(&s.stream).and_then(Weak::upgrade) {
                Some(file) => file,
                None => {
                    let len = std::fs::metadata(self.path(s.stream))?.len();
                    if len != s.len {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("body {} has {len} of its {} bytes", s.stream, s.len),
                        ));
                    }
                    let file = BodyFile::new(s.stream, s.len, self);
                    live.insert(s.stream, Arc::downgrade(&file));
                    file
                }
            }
        };
        Ok(Bytes::from_owner(HeldBlock {
            block: block.to_vec(),
            _file: file,
        }))
    }

    /// `block` (a message whose body, bytes, is `body` at its end) as a
    /// block whose body is a file of its own, written now: for a message
    /// sent whole whose body is past its address's threshold.
    pub fn spill(self: &Arc<Self>, block: &Bytes, body: Range<usize>) -> io::Result<Bytes> {
        let len = body.len() as u64;
        let mut spool = self.create(len)?;
        spool.write(&block[body.clone()])?;
        let spilled = streamed_block(&block[..body.start - 1], len, spool.id());
        spool.finish(spilled)
    }

    /// Opens the body of `streamed` for reading, for a delivery.
    pub fn open_body(&self, streamed: &Streamed) -> io::Result<File> {
        File::open(self.path(streamed.stream))
    }

    /// Deletes the files no kept message holds: after the journal's
    /// replay, what an earlier run left half written or no longer needs.
    pub fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let live = lock(&self.live);
        let mut swept = 0;
        for path in entries.flatten().map(|e| e.path()) {
            let held = file_number(&path).is_some_and(|n| live.contains_key(&n));
            if !held && self.disk.remove(&path).is_ok() {
                swept += 1;
            }
        }
        if swept > 0 {
            log::info!(
                "large messages: {swept} body file(s) of an earlier run that no kept message names deleted"
            );
        }
    }

    /// Why bodies cannot be written now, if the last one could not be
    /// (but for a full disk): health says it until one is written again.
    pub fn failing(&self) -> Option<String> {
        lock(&self.failing).clone()
    }

    /// Records a failed write of a body: one the disk had no room for is
    /// the journal floor's to say; any other (permissions, I/O) health's.
    fn failed(&self, e: &io::Error) {
        if matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::InvalidInput
        ) {
            return;
        }
        let mut failing = lock(&self.failing);
        if failing.is_none() {
            log::error!(
                "large messages: a body cannot be written under {} ({e}): large messages are refused until one can",
                self.dir.display()
            );
        }
        *failing = Some(e.to_string());
    }

    /// Bodies held by messages, their bytes on disk, and bodies still
    /// arriving.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.held.load(Ordering::Relaxed),
            self.held_bytes.load(Ordering::Relaxed),
            self.arriving.load(Ordering::Relaxed),
        )
    }

    /// The server stops: files stay from now on (see `stopping`).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

/// A message block whose body is streamed: `head`, the block up to its
/// body's kind byte, then a streamed body of `len` bytes in file `id`.
pub fn streamed_block(head: &[u8], len: u64, id: u64) -> Bytes {
    let mut block = Vec::with_capacity(head.len() + 1 + Streamed::ENCODED_LEN);
    block.extend_from_slice(head);
    block.push(4);
    block.extend_from_slice(&len.to_be_bytes());
    block.extend_from_slice(&id.to_be_bytes());
    Bytes::from(block)
}

fn file_number(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".body")?.parse().ok()
}

/// A body being written as it arrives. Dropped before [`Spool::finish`],
/// its file is deleted: a sender that went away leaves nothing behind.
pub struct Spool {
    id: u64,
    len: u64,
    file: Box<dyn SegmentFile>,
    left: u64,
    store: Arc<LargeStore>,
    finished: bool,
}

impl Spool {
    /// The file's number, for the stored message's streamed body.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes still to come.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// Appends the next bytes of the body; more than it was said to have
    /// is an error.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let n = data.len() as u64;
        if n > self.left {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{n} more bytes, {} were left of the body", self.left),
            ));
        }
        self.file
            .write_all(data)
            .inspect_err(|e| self.store.failed(e))?;
        self.left -= n;
        Ok(())
    }

    /// The whole body has come: `block` (which names this file) becomes
    /// a block that holds it.
    pub fn finish(mut self, block: Bytes) -> io::Result<Bytes> {
        if self.left != 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} bytes of the body are missing", self.left),
            ));
        }
        let file = BodyFile::new(self.id, self.len, &self.store);
        lock(&self.store.live).insert(self.id, Arc::downgrade(&file));
        // Written whole: bodies can be written again.
        lock(&self.store.failing).take();
        // The file is the held block's now, not the spool's.
        self.finished = true;
        Ok(Bytes::from_owner(HeldBlock {
            block: block.to_vec(),
            _file: file,
        }))
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        self.store.arriving.fetch_sub(1, Ordering::Relaxed);
        if self.finished {
            return;
        }
        let _ = self.store.disk.remove(&self.store.path(self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::disk::RealDisk;
    use bytes::BytesMut;
    use herald_protocol::{Body, Destination, Message};

    fn store(label: &str, min_free_bytes: u64) -> (Arc<LargeStore>, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "herald-large-{label}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let store = LargeStore::open(&dir, Arc::new(RealDisk), min_free_bytes, 1 << 20);
        (store, dir)
    }

    fn block(len: u64, stream: u64) -> Bytes {
        let mut m = Message::new(Body::Stream(Streamed { len, stream }));
        m.set_destination(Some(Destination::queue("q")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    fn files(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(LARGE_DIR)).map_or(0, |d| d.count())
    }

    #[test]
    fn a_body_lives_as_long_as_a_block_that_holds_it() {
        let (store, dir) = store("lives", 0);
        let mut spool = store.create(6).unwrap();
        spool.write(b"abc").unwrap();
        assert!(spool.write(b"defg").is_err(), "more than the body has");
        spool.write(b"def").unwrap();
        let id = spool.id();
        let held = spool.finish(block(6, id)).unwrap();
        let copy = store.hold(Bytes::copy_from_slice(&held)).unwrap();
        drop(held);
        assert_eq!(files(&dir), 1, "the copy holds it");
        assert_eq!(store.counts(), (1, 6, 0));
        let mut body = String::new();
        std::io::Read::read_to_string(
            &mut store.open_body(&Streamed { len: 6, stream: id }).unwrap(),
            &mut body,
        )
        .unwrap();
        assert_eq!(body, "abcdef");
        drop(copy);
        assert_eq!(files(&dir), 0, "the last block took it along");
        assert_eq!(store.counts(), (0, 0, 0));
        // A block without a streamed body is itself.
        let plain = Bytes::from_static(b"x");
        assert_eq!(store.hold(plain.clone()).unwrap(), plain);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_unfinished_body_is_deleted_and_a_short_one_does_not_finish() {
        let (store, dir) = store("unfinished", 0);
        let spool = store.create(10).unwrap();
        assert_eq!(files(&dir), 1);
        drop(spool);
        assert_eq!(files(&dir), 0);
        let mut spool = store.create(10).unwrap();
        spool.write(b"12345").unwrap();
        let id = spool.id();
        assert!(spool.finish(block(10, id)).is_err());
        assert_eq!(files(&dir), 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_restart_holds_what_kept_messages_name_and_sweeps_the_rest() {
        let (store, dir) = store("restart", 0);
        let mut kept = Vec::new();
        for body in [&b"kept"[..], b"orphan"] {
            let mut spool = store.create(body.len() as u64).unwrap();
            spool.write(body).unwrap();
            let id = spool.id();
            kept.push((spool.finish(block(body.len() as u64, id)).unwrap(), id));
        }
        store.stop();
        let (kept_block, kept_id) = kept.remove(0);
        let replayed = Bytes::copy_from_slice(&kept_block);
        drop((kept, kept_block));
        assert_eq!(files(&dir), 2, "a stopping server deletes none");
        let again = LargeStore::open(&dir, Arc::new(RealDisk), 0, 1 << 20);
        let held = again.hold(replayed).unwrap();
        again.sweep();
        assert_eq!(files(&dir), 1, "the orphan is swept");
        // Numbers go on after the highest there.
        let next = again.create(1).unwrap();
        assert!(next.id() > kept_id + 1, "{} after {kept_id}", next.id());
        drop((held, next));
        assert_eq!(files(&dir), 0);
        // A body shorter than its message says is not held.
        let mut spool = again.create(3).unwrap();
        spool.write(b"abc").unwrap();
        let id = spool.id();
        let held = spool.finish(block(3, id)).unwrap();
        again.stop();
        drop(held);
        let third = LargeStore::open(&dir, Arc::new(RealDisk), 0, 1 << 20);
        assert!(third.hold(block(4, id)).is_err());
        assert!(third.hold(block(3, id + 100)).is_err(), "no such file");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_body_that_would_take_the_disk_below_its_floor_is_refused() {
        let (store, dir) = store("floor", u64::MAX / 2);
        let Err(e) = store.create(10) else {
            panic!("a body below the floor");
        };
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("journal.min_free_bytes"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
