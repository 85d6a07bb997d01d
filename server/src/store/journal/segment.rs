//! The on-disk format: segment files and the records in them.
//!
//! # Version 1
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

use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

use crate::collections::FastMap;

use super::super::disk::{Disk, SegmentFile};
use super::super::record::Record;
use super::error::{io_error, JournalError};
use super::metrics::DamageReport;

pub(super) const MAGIC: &[u8; 4] = b"HRLJ";
pub(super) const VERSION: u8 = 1;
pub(super) const HEADER_LEN: u64 = 16;
pub(super) const RECORD_HEAD: usize = 8;
/// Largest payload replay believes; a longer length is corruption.
pub(super) const MAX_PAYLOAD: u32 = 256 << 20;

pub(super) struct Segment {
    pub(super) seq: u64,
    pub(super) path: PathBuf,
    pub(super) len: u64,
    /// The file's length: `len` and the zeros reserved after it (only the
    /// segment being written has any).
    pub(super) allocated: u64,
    /// Live records in this segment: id → (offset of the record head,
    /// whole record length).
    pub(super) live: FastMap<u64, (u64, u32)>,
}

pub(super) fn segment_name(seq: u64) -> String {
    format!("{seq:020}.hlog")
}

/// Makes segment `seq` with `reserve` zeros after its header (fewer if
/// the disk cannot take them); returns it, its path and its length.
pub(super) fn create_segment(
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
pub(super) fn frame(record: &Record, buf: &mut BytesMut) -> Result<u32, herald_protocol::Error> {
    let start = buf.len();
    buf.put_u64(0);
    record.encode(buf)?;
    let payload_len = buf.len() - start - RECORD_HEAD;
    let crc = crc32c::crc32c(&buf[start + RECORD_HEAD..]);
    buf[start..start + 4].copy_from_slice(&(payload_len as u32).to_be_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    Ok((buf.len() - start) as u32)
}

/// What one segment file holds: its intact records, and what did not read.
pub(super) struct Scan {
    /// The file's length.
    pub(super) len: usize,
    pub(super) header_ok: bool,
    /// Intact records: the record, its offset, its whole length.
    pub(super) records: Vec<(Record, usize, u32)>,
    /// Stretches that did not read, each with whether the bad record's
    /// own length led exactly to the next intact one (one whole record).
    pub(super) bad: Vec<(usize, usize, bool)>,
    /// Where a stretch with no intact record after it starts, if one
    /// runs to the end of the file.
    pub(super) torn_tail: Option<usize>,
    /// Where the zeros reserved after the last record start, if any are
    /// left: not damage, the end of what was written.
    pub(super) zeros_from: Option<usize>,
}

/// Reads a segment: each intact record in turn, and after one that does
/// not read, the next offset where one does.
pub(super) fn scan(data: &Bytes) -> Scan {
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
    pub(super) fn damage_report(&self, last: bool) -> DamageReport {
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
    pub(super) fn describe(&self, path: &Path, last: bool) -> String {
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
pub(super) fn read_record(data: &Bytes, at: usize) -> Option<(Record, u32)> {
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
