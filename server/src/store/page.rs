//! Page files: the messages of a queue over its memory bound, held on
//! disk in the order they came instead of in memory, and read back in
//! that order as consumers drain the queue (Artemis's paging).
//!
//! A queue pages only while it is over its bound, and then every message
//! after the first one paged goes to the page files too, until they are
//! read back through: the queue's order holds. A page file is appended to
//! in batches and read from the front; one read through is deleted.
//!
//! Page files do not make anything durable: a persistent message is in
//! the journal before it is paged, and a restart pages it again from
//! there; a non-persistent one is lost with the process, as it would be
//! in memory. So the files of a previous run are deleted at start, and a
//! record's checksum only guards against a disk that returns other bytes
//! than it was given.
//!
//! Record: `u32 length of what follows | u64 journal id + 1 (0 = none) |
//! u32 deliveries | u8 restored | block | u32 CRC-32C of all before it`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use herald_protocol::message::streamed_body;

use super::disk::{Disk, SegmentFile};

/// Bytes of a record before its block.
const HEAD: usize = 4 + 8 + 4 + 1;

/// A page file is closed and the next one begun past this many bytes.
const FILE_BYTES: u64 = 64 << 20;

/// Records are written to the file in batches of about this many bytes.
const BATCH_BYTES: usize = 256 << 10;

/// A message as a page file keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged {
    /// The message block.
    pub block: Bytes,
    /// Its record in the journal, for a persistent message.
    pub journal_id: Option<u64>,
    /// Times it had been delivered.
    pub deliveries: u32,
    /// Kept from before a restart, and so maybe delivered then.
    pub restored: bool,
}

/// Messages held in memory behind the paged ones while the page files
/// take none (a failed write, the disk's floor), in order, with their
/// bytes: they count against the queue's bound at once.
#[derive(Debug, Default)]
pub struct HeldBack {
    messages: VecDeque<Paged>,
    bytes: usize,
}

impl HeldBack {
    /// Messages held.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Their blocks' bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `m` behind the others.
    pub fn push_back(&mut self, m: Paged) {
        self.bytes += m.block.len();
        self.messages.push_back(m);
    }

    /// Puts `m`, just taken, back in front.
    pub fn push_front(&mut self, m: Paged) {
        self.bytes += m.block.len();
        self.messages.push_front(m);
    }

    /// Takes the first one held.
    pub fn pop_front(&mut self) -> Option<Paged> {
        let m = self.messages.pop_front()?;
        self.bytes -= m.block.len();
        Some(m)
    }

    /// Every one, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Paged> {
        self.messages.iter()
    }

    /// Takes every one, in order.
    pub fn take_all(&mut self) -> VecDeque<Paged> {
        self.bytes = 0;
        std::mem::take(&mut self.messages)
    }
}

/// Where page files go, and on what disk: one directory per queue under
/// `root`.
#[derive(Clone)]
pub struct PagingRoot {
    /// `data_dir/paging`.
    pub root: PathBuf,
    /// The journal's disk, so that faults reach paging too.
    pub disk: Arc<dyn Disk>,
    /// Free bytes the disk keeps (`journal.min_free_bytes`): page files
    /// stop short of them, so that the journal is not starved by them.
    pub min_free_bytes: u64,
    /// The data directory, whose file system's free space that is.
    pub data_dir: PathBuf,
}

impl PagingRoot {
    /// Paging under `data_dir/paging`, whose files of an earlier run are
    /// deleted (see the module's doc), short of `min_free_bytes` free.
    pub fn new(data_dir: &Path, disk: Arc<dyn Disk>, min_free_bytes: u64) -> PagingRoot {
        let root = data_dir.join("paging");
        let _ = std::fs::remove_dir_all(&root);
        PagingRoot {
            root,
            disk,
            min_free_bytes,
            data_dir: data_dir.to_owned(),
        }
    }
}

/// One queue's page files.
pub struct Pager {
    dir: PathBuf,
    disk: Arc<dyn Disk>,
    min_free_bytes: u64,
    data_dir: PathBuf,
    /// A write failed, or would have gone below the free-space floor:
    /// nothing more is paged until a message is read back.
    failed: bool,
    /// Numbers of the files written to, oldest first; the last is being
    /// written.
    files: VecDeque<u64>,
    next_file: u64,
    writer: Option<Box<dyn SegmentFile>>,
    /// Bytes written to the last file, batch included.
    written: u64,
    /// Records not yet written to the file.
    batch: BytesMut,
    /// The first file, open for reading where the next record starts.
    reader: Option<BufReader<File>>,
    count: usize,
    bytes: u64,
    /// The blocks of the large messages paged, in order: each holds its
    /// body's file, which a block read back from a page file does not.
    large: VecDeque<Bytes>,
}

impl Pager {
    /// A queue's pager, its files in `name` under `root`.
    pub fn new(root: &PagingRoot, name: &str) -> Pager {
        Pager {
            dir: root.root.join(name),
            disk: root.disk.clone(),
            min_free_bytes: root.min_free_bytes,
            data_dir: root.data_dir.clone(),
            failed: false,
            files: VecDeque::new(),
            next_file: 0,
            writer: None,
            written: 0,
            batch: BytesMut::new(),
            reader: None,
            count: 0,
            bytes: 0,
            large: VecDeque::new(),
        }
    }

    /// Messages paged and not read back.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Their bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn path(&self, file: u64) -> PathBuf {
        self.dir.join(format!("{file:08}.page"))
    }

    /// Whether it takes messages now: not since a write failed or the
    /// disk came near its floor, until a message is read back.
    pub fn takes(&self) -> bool {
        !self.failed
    }

    /// Appends a message after those paged before it.
    pub fn append(&mut self, m: &Paged) -> io::Result<()> {
        let appended = self.try_append(m);
        self.failed |= appended.is_err();
        if appended.is_ok() && streamed_body(&m.block).is_some() {
            self.large.push_back(m.block.clone());
        }
        appended
    }

    fn try_append(&mut self, m: &Paged) -> io::Result<()> {
        // Once a batch: the batch and the next one must fit above the
        // free-space floor.
        if self.batch.is_empty() {
            let free = self.disk.free_space(&self.data_dir)?;
            let needed = self.min_free_bytes.saturating_add(2 * BATCH_BYTES as u64);
            if free < needed.saturating_add(m.block.len() as u64) {
                return Err(io::Error::other(format!(
                    "{free} bytes free on its disk, journal.min_free_bytes is {}",
                    self.min_free_bytes
                )));
            }
        }
        if self.writer.is_none() || self.written >= FILE_BYTES {
            self.flush()?;
            if self.files.is_empty() {
                std::fs::create_dir_all(&self.dir)?;
            }
            let n = self.next_file;
            self.writer = Some(self.disk.create(&self.path(n))?);
            (self.next_file, self.written) = (n + 1, 0);
            self.files.push_back(n);
        }
        let start = self.batch.len();
        let len = u32::try_from(HEAD - 4 + m.block.len() + 4)
            .map_err(|_| io::Error::other("a message of more than 4 GiB"))?;
        self.batch.put_u32(len);
        self.batch.put_u64(m.journal_id.map_or(0, |id| id + 1));
        self.batch.put_u32(m.deliveries);
        self.batch.put_u8(u8::from(m.restored));
        self.batch.put_slice(&m.block);
        let crc = crc32c::crc32c(&self.batch[start..]);
        self.batch.put_u32(crc);
        let size = (self.batch.len() - start) as u64;
        if self.batch.len() >= BATCH_BYTES {
            if let Err(e) = self.flush() {
                // This one is not paged (its queue keeps it in memory);
                // those before it stay in the batch for the next write,
                // the file cut back to where they go.
                if let Some(w) = self.writer.as_mut() {
                    let _ = w.rewind_to(self.written - start as u64);
                }
                self.batch.truncate(start);
                return Err(e);
            }
        }
        (self.written, self.bytes, self.count) =
            (self.written + size, self.bytes + size, self.count + 1);
        Ok(())
    }

    /// Writes the batch to the file.
    fn flush(&mut self) -> io::Result<()> {
        if let (Some(w), false) = (self.writer.as_mut(), self.batch.is_empty()) {
            w.write_all(&self.batch)?;
            self.batch.clear();
        }
        Ok(())
    }

    /// The first message paged and not read back, taken out; `None` when
    /// there is none.
    pub fn read(&mut self) -> io::Result<Option<Paged>> {
        if self.count == 0 {
            return Ok(None);
        }
        loop {
            let Some(&first) = self.files.front() else {
                return Err(corrupt("messages are counted but no page file is left"));
            };
            if first + 1 == self.next_file {
                // The file being written: what it has in the batch too.
                self.flush()?;
            }
            if self.reader.is_none() {
                self.reader = Some(BufReader::with_capacity(
                    BATCH_BYTES,
                    File::open(self.path(first))?,
                ));
            }
            let reader = self.reader.as_mut().ok_or_else(|| corrupt("no reader"))?;
            match read_record(reader)? {
                Some((mut m, size)) => {
                    if streamed_body(&m.block).is_some() {
                        // The same bytes, and the body's file with them.
                        m.block = self
                            .large
                            .pop_front()
                            .ok_or_else(|| corrupt("a large message that was not paged"))?;
                    }
                    (self.count, self.bytes) = (self.count - 1, self.bytes.saturating_sub(size));
                    self.failed = false;
                    if self.count == 0 {
                        self.clear();
                    }
                    return Ok(Some(m));
                }
                None if first + 1 == self.next_file => {
                    return Err(corrupt("the page file ends before its messages"));
                }
                None => {
                    // Read through: the next file.
                    self.reader = None;
                    self.files.pop_front();
                    let _ = self.disk.remove(&self.path(first));
                }
            }
        }
    }

    /// The messages paged and not read back, oldest first, left where
    /// they are (a browser's view): `each` gets them until it says to
    /// stop.
    pub fn peek(&mut self, mut each: impl FnMut(Paged) -> bool) -> io::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        self.flush()?;
        // The first file from where the next read starts.
        let start = match self.reader.as_mut() {
            Some(r) => r.stream_position()?,
            None => 0,
        };
        let mut large = self.large.iter();
        let mut seen = 0;
        for (i, &file) in self.files.iter().enumerate() {
            let mut f = File::open(self.path(file))?;
            if i == 0 {
                f.seek(SeekFrom::Start(start))?;
            }
            let mut r = BufReader::with_capacity(BATCH_BYTES, f);
            while let Some((mut m, _)) = read_record(&mut r)? {
                if streamed_body(&m.block).is_some() {
                    m.block = large
                        .next()
                        .cloned()
                        .ok_or_else(|| corrupt("a large message that was not paged"))?;
                }
                seen += 1;
                if !each(m) || seen == self.count {
                    return Ok(());
                }
            }
        }
        Err(corrupt("the page files end before their messages"))
    }

    /// Deletes every file: nothing is paged now.
    fn clear(&mut self) {
        self.large.clear();
        self.reader = None;
        self.writer = None;
        self.batch.clear();
        for file in std::mem::take(&mut self.files) {
            let _ = self.disk.remove(&self.path(file));
        }
        let _ = std::fs::remove_dir(&self.dir);
        (self.count, self.bytes, self.written) = (0, 0, 0);
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.clear();
    }
}

fn corrupt(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("page file: {why}"))
}

/// The next record, with its size; `None` at the end of the file.
fn read_record(r: &mut impl Read) -> io::Result<Option<(Paged, u64)>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len < HEAD - 4 + 4 {
        return Err(corrupt("a record shorter than its head"));
    }
    let mut rest = vec![0u8; len];
    r.read_exact(&mut rest)?;
    let (body, crc) = rest.split_at(len - 4);
    let mut whole = Vec::with_capacity(4 + body.len());
    whole.extend_from_slice(&(len as u32).to_be_bytes());
    whole.extend_from_slice(body);
    if crc32c::crc32c(&whole).to_be_bytes() != crc {
        return Err(corrupt("a record's checksum does not match"));
    }
    let id = u64::from_be_bytes(body[0..8].try_into().map_err(|_| corrupt("head"))?);
    let deliveries = u32::from_be_bytes(body[8..12].try_into().map_err(|_| corrupt("head"))?);
    let m = Paged {
        journal_id: id.checked_sub(1),
        deliveries,
        restored: body[12] != 0,
        block: Bytes::copy_from_slice(&body[13..]),
    };
    Ok(Some((m, 4 + len as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::disk::RealDisk;

    fn paged(i: u32) -> Paged {
        Paged {
            block: Bytes::from(vec![i as u8; 100 + i as usize]),
            journal_id: i.is_multiple_of(2).then_some(u64::from(i)),
            deliveries: i % 3,
            restored: i.is_multiple_of(5),
        }
    }

    fn root(label: &str) -> PagingRoot {
        let dir = std::env::temp_dir().join(format!("herald-page-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        PagingRoot::new(&dir, Arc::new(RealDisk), 0)
    }

    #[test]
    fn messages_come_back_in_order_across_files_and_the_files_go() {
        let root = root("order");
        let mut p = Pager::new(&root, "q");
        // Across several files: shrink nothing, write past one file's
        // worth with big blocks.
        let big = |i: u32| Paged {
            block: Bytes::from(vec![i as u8; 3 << 20]),
            ..paged(i)
        };
        for i in 0..30 {
            p.append(&big(i)).unwrap();
        }
        assert!(p.files.len() >= 2, "{:?}", p.files);
        for i in 0..10 {
            assert_eq!(p.read().unwrap(), Some(big(i)));
        }
        // Interleaved with more writes, the order holds; a browser sees
        // what is left, the unwritten batch too, and takes nothing.
        for i in 30..40 {
            p.append(&big(i)).unwrap();
        }
        p.append(&paged(40)).unwrap();
        let mut seen = Vec::new();
        p.peek(|m| {
            seen.push(m);
            true
        })
        .unwrap();
        let left: Vec<Paged> = (10..40).map(big).chain([paged(40)]).collect();
        assert!(seen == left, "{} seen", seen.len());
        let mut first = Vec::new();
        p.peek(|m| {
            first.push(m);
            first.len() < 3
        })
        .unwrap();
        assert!(first[..] == left[..3], "stops when told");
        assert_eq!(p.count(), 31);
        for i in 10..40 {
            assert_eq!(p.read().unwrap(), Some(big(i)), "{i}");
        }
        assert_eq!(p.read().unwrap(), Some(paged(40)));
        assert_eq!((p.read().unwrap(), p.count(), p.bytes()), (None, 0, 0));
        assert!(!root.root.join("q").exists(), "read through, deleted");
        for i in 0..5 {
            p.append(&paged(i)).unwrap();
        }
        assert_eq!(p.read().unwrap(), Some(paged(0)));
        drop(p);
        assert!(!root.root.join("q").exists(), "dropped, deleted");
        let _ = std::fs::remove_dir_all(root.root.parent().unwrap());
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_message() {
        let root = root("damage");
        let mut p = Pager::new(&root, "q");
        p.append(&paged(1)).unwrap();
        p.flush().unwrap();
        let path = p.path(0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[30] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let e = p.read().unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let _ = std::fs::remove_dir_all(root.root.parent().unwrap());
    }

    /// The real disk, reporting as free what the test says.
    struct Tight(std::sync::atomic::AtomicU64);

    impl Disk for Tight {
        fn create(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
            RealDisk.create(path)
        }

        fn free_space(&self, _: &Path) -> io::Result<u64> {
            Ok(self.0.load(std::sync::atomic::Ordering::Relaxed))
        }
    }

    #[test]
    fn paging_stops_at_the_free_space_floor_until_a_message_is_read_back() {
        use std::sync::atomic::Ordering;
        let dir = std::env::temp_dir().join(format!("herald-page-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let disk = Arc::new(Tight(std::sync::atomic::AtomicU64::new(u64::MAX)));
        let root = PagingRoot::new(&dir, disk.clone(), 1 << 20);
        let mut p = Pager::new(&root, "q");
        let big = Paged {
            block: Bytes::from(vec![1u8; BATCH_BYTES]),
            ..paged(0)
        };
        p.append(&big).unwrap();
        assert!(p.takes());
        disk.0.store(1 << 20, Ordering::Relaxed);
        let e = p.append(&big).unwrap_err();
        assert!(e.to_string().contains("min_free_bytes"), "{e}");
        assert!(!p.takes(), "no more until one is read back");
        disk.0.store(u64::MAX, Ordering::Relaxed);
        // The one that failed is not in the files; the first comes back.
        assert_eq!(p.read().unwrap(), Some(big.clone()));
        assert!(p.takes());
        let _ = std::fs::remove_dir_all(dir);
    }
}
