//! The journal's way to the disk: segment files to append to, deletion,
//! free space. Tests put a disk here that tears writes, fails syncs or
//! fills up.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

/// The file system, as the journal uses it.
pub trait Disk: Send + Sync {
    /// Creates (or truncates) a segment file to append to.
    fn create(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;
    /// Deletes a file the journal made.
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    /// Bytes still free for the journal on the file system of `dir`.
    fn free_space(&self, dir: &Path) -> io::Result<u64>;
}

/// A segment file being appended to.
pub trait SegmentFile: Send {
    /// Appends all of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the data written so far durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes and goes on writing there.
    fn rewind_to(&mut self, len: u64) -> io::Result<()>;
    /// Writes `len` zero bytes at `from`, where the writes to come will
    /// go, without moving where they go: a sync after a write into space
    /// the file already has need not commit a new size, which on ext4
    /// and the like saves a journal commit per sync. A disk that gains
    /// nothing by it leaves the file as it is.
    fn reserve(&mut self, from: u64, len: u64) -> io::Result<()> {
        let _ = (from, len);
        Ok(())
    }
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

    fn free_space(&self, dir: &Path) -> io::Result<u64> {
        free_space(dir)
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

    fn reserve(&mut self, from: u64, len: u64) -> io::Result<()> {
        // Written, not fallocate()d: an allocated but unwritten extent is
        // converted at its first write, which is a metadata change too.
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let mut at = from;
        while at < from + len {
            let n = (from + len - at).min(ZEROS.len() as u64) as usize;
            std::os::unix::fs::FileExt::write_all_at(self, &ZEROS[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }
}

/// Bytes an unprivileged writer can still use on the file system of `dir`.
pub fn free_space(dir: &Path) -> io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_has_some_free_space() {
        let free = free_space(Path::new(".")).unwrap();
        assert!(free > 0);
        assert!(free_space(Path::new("/no/such/dir")).is_err());
    }
}
