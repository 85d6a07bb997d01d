//! Replay at start: every segment read back, a torn tail cut, damage
//! refused or set aside.
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

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::Read;

use bytes::Bytes;

use crate::collections::FastMap;

use super::super::record::Record;
use super::super::space::{self, Space};
use super::config::JournalConfig;
use super::error::{io_error, JournalError};
use super::metrics::{DamageReport, JournalMetrics};
use super::segment::*;
use super::writer::Writer;

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

impl Writer {
    /// Reads every segment, truncating a torn tail and refusing damage
    /// unless told to recover; returns the writer positioned on a fresh
    /// segment, what is live, and the highest id.
    pub(super) fn replay(
        config: JournalConfig,
        lock: File,
    ) -> Result<(Writer, Recovered, u64), JournalError> {
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
                    reads: VERSION,
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
    pub(super) fn set_aside(&mut self, through: u64, damaged: &[u64]) -> Result<(), JournalError> {
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
}
