//! The clean-shutdown note: how often each kept message had been
//! delivered when the server last stopped cleanly, so that a restart marks
//! redelivered only what may have been delivered before.
//!
//! The journal does not record deliveries (a record per delivery would cost
//! every persistent message a write). After a crash every kept message may
//! have been delivered, and is marked so; but a server that stops cleanly
//! knows each one's count, and writes them here, in the data directory,
//! after the journal's last record. The next start takes the note (and
//! removes it) if it belongs to the journal it replayed: nothing newer than
//! the note may have been written since.
//!
//! # On-disk format, version 1 (`clean-shutdown`)
//!
//! | size | field |
//! |---|---|
//! | 4 | magic `HRLS` |
//! | 1 | format version, 1 |
//! | 3 | zero |
//! | 8 | the journal's next record id when it stopped, big-endian |
//! | 4 | entries `n`, big-endian |
//! | 12 × n | per entry: a kept message's record id (8), its deliveries (4) |
//! | 4 | CRC32C of everything before it, big-endian |
//!
//! A message not listed had not been delivered.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use bytes::{Buf, BufMut, BytesMut};

const NAME: &str = "clean-shutdown";
const MAGIC: &[u8; 4] = b"HRLS";
const VERSION: u8 = 1;
const HEAD: usize = 20;

/// Writes the note: the journal's next record id, and each kept message
/// that was delivered, with how many times. Durable once it returns.
pub fn write(dir: &Path, next_id: u64, delivered: &[(u64, u32)]) -> io::Result<()> {
    let mut b = BytesMut::with_capacity(HEAD + 12 * delivered.len() + 4);
    b.put_slice(MAGIC);
    b.put_u8(VERSION);
    b.put_slice(&[0; 3]);
    b.put_u64(next_id);
    b.put_u32(u32::try_from(delivered.len()).map_err(io::Error::other)?);
    for &(id, count) in delivered {
        b.put_u64(id);
        b.put_u32(count);
    }
    let crc = crc32c::crc32c(&b);
    b.put_u32(crc);
    let tmp = dir.join(format!("{NAME}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&b)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(NAME))?;
    File::open(dir)?.sync_all()
}

/// Takes the note left by the last clean stop, removing it: the delivery
/// counts by record id, if the note is whole and belongs to a journal
/// whose next record id after replay is `next_id` or less (nothing was
/// written after the note). `None` after a crash, or for a note that does
/// not fit (said in the log).
pub fn take(dir: &Path, next_id: u64) -> Option<HashMap<u64, u32>> {
    let path = dir.join(NAME);
    let data = match fs::read(&path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!(
                "{}: {e}: every kept message is marked redelivered",
                path.display()
            );
            return None;
        }
    };
    // Gone before anything new is written: a crash from here on must not
    // find it.
    let removed = fs::remove_file(&path).and_then(|()| File::open(dir)?.sync_all());
    if let Err(e) = removed {
        log::warn!("{}: cannot remove it: {e}", path.display());
        return None;
    }
    match read(&data, next_id) {
        Ok(counts) => Some(counts),
        Err(why) => {
            log::warn!(
                "{}: {why}: every kept message is marked redelivered",
                path.display()
            );
            None
        }
    }
}

/// Why a note is not believed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoteError {
    #[error("not a clean-shutdown note")]
    NotANote,
    #[error("format {0} (this build reads {VERSION})")]
    Format(u8),
    #[error("its checksum does not match")]
    Checksum,
    #[error("the journal has records up to id {next_id}, written after it (id {written_at})")]
    Stale { next_id: u64, written_at: u64 },
    #[error("{entries} entries announced, {bytes} bytes of them")]
    Length { entries: usize, bytes: usize },
}

fn read(data: &[u8], next_id: u64) -> Result<HashMap<u64, u32>, NoteError> {
    if data.len() < HEAD + 4 || &data[..4] != MAGIC {
        return Err(NoteError::NotANote);
    }
    if data[4] != VERSION {
        return Err(NoteError::Format(data[4]));
    }
    let (body, crc) = data.split_at(data.len() - 4);
    if crc32c::crc32c(body) != u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err(NoteError::Checksum);
    }
    let mut b = &body[8..];
    let written_at = b.get_u64();
    if next_id > written_at {
        return Err(NoteError::Stale {
            next_id,
            written_at,
        });
    }
    let entries = b.get_u32() as usize;
    if b.len() != 12 * entries {
        return Err(NoteError::Length {
            entries,
            bytes: b.len(),
        });
    }
    Ok((0..entries).map(|_| (b.get_u64(), b.get_u32())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn a_note_is_taken_once_by_the_journal_it_belongs_to() {
        let dir = TempDir::new("note");
        fs::create_dir_all(&dir.0).unwrap();
        write(&dir.0, 10, &[(3, 1), (7, 4)]).unwrap();
        let counts = take(&dir.0, 10).expect("taken");
        assert_eq!(counts, HashMap::from([(3, 1), (7, 4)]));
        assert_eq!(take(&dir.0, 10), None, "once only");
    }

    #[test]
    fn a_stale_or_damaged_note_is_not_believed() {
        let dir = TempDir::new("stale-note");
        fs::create_dir_all(&dir.0).unwrap();
        // Records were written after it.
        write(&dir.0, 10, &[(3, 1)]).unwrap();
        assert_eq!(take(&dir.0, 11), None);
        assert!(!dir.0.join(NAME).exists());
        write(&dir.0, 10, &[(3, 1)]).unwrap();
        let path = dir.0.join(NAME);
        let mut data = fs::read(&path).unwrap();
        data[HEAD + 11] ^= 1;
        fs::write(&path, &data).unwrap();
        assert_eq!(take(&dir.0, 10), None);
        for bad in [&b""[..], b"HRLS", &[0; 40]] {
            assert!(read(bad, 0).is_err());
        }
    }
}
