//! The journal's tests: replay, damage, failures, compaction.

use super::segment::{read_record, segment_name, HEADER_LEN, RECORD_HEAD, VERSION};
use super::writer::{LAZY_SYNC, RESERVE};
use super::*;
use crate::store::disk::{Disk, SegmentFile};
use crate::store::Holder;
use crate::store::StoreError;
use crate::test_util::TempDir;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::channel;
use std::sync::Arc;

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
