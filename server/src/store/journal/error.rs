//! Why the journal could not be opened.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

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
    /// A segment was written by a newer build, in a format this one
    /// does not know: not damage, and nothing to recover.
    #[error(
        "journal segment {path} was written by a newer version of Herald (journal format \
         {version}; this build reads format {reads}). Nothing was changed on disk: run \
         the newer version, or restore this data directory from a backup taken before it"
    )]
    Newer {
        /// The segment.
        path: PathBuf,
        /// Its format version.
        version: u8,
        /// The version this build reads.
        reads: u8,
    },
    /// A segment is damaged, and recovery was not asked for.
    #[error(
        "the journal is damaged: {0}. Nothing was changed on disk. To start anyway, skipping \
         what does not read and renaming the damaged segments to *.corrupt, set \
         journal.recover_corrupt = true or pass --recover-corrupt (back the data \
         directory up first)"
    )]
    Damaged(String),
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_owned(),
        source,
    }
}
