//! The journal's settings.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::super::disk::{Disk, RealDisk};

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
