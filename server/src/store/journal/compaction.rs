//! Compaction: old segments dropped, or their live records relocated.
//!
//! A segment is only ever deleted when it is the oldest, so no later
//! segment can hold an `End` for a record that would then be resurrected.
//! The oldest segment goes when none of its records is live; while there are
//! more than `max_segments`, its live records are first copied, byte for
//! byte, to the current segment. A crash in between leaves two copies of a
//! record with one id, which replay treats as one.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};

use super::error::{io_error, JournalError};
use super::segment::*;
use super::writer::Writer;

impl Writer {
    /// Deletes old segments, oldest first, moving their live records
    /// forward when there are too many segments.
    pub(super) fn compact(&mut self) {
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

    pub(super) fn relocate_oldest(&mut self) -> Result<(), JournalError> {
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
