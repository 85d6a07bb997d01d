//! The journal's free-space floor and its emergency reserve.
//!
//! Below `journal.min_free_bytes` free on the data directory's file
//! system, the journal is *low on space*: the broker holds or refuses new
//! persistent messages (as `queues.full_policy` says), while consumers,
//! acknowledgements and compaction go on, since they are what frees space.
//! Once 5 % above the floor again, producers go on by themselves.
//!
//! The floor keeps the server from filling the disk itself, but something
//! else can still fill it. For that, the journal keeps a reserve file,
//! `RESERVE`, a quarter of the floor in size: when a write finds the disk
//! full, the reserve is deleted and the write tried again, so that a server
//! started on a full disk can still write the acknowledgements that let
//! consumers drain it (CockroachDB keeps an "emergency ballast" file for
//! the same reason). It is made again once the disk is above the floor.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::disk::Disk;

/// How often free space is looked at while writing, and while low.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The reserve file's name in the data directory.
const RESERVE: &str = "RESERVE";

/// What the journal knows of its disk's free space, for the broker, the
/// health check and the metrics.
#[derive(Debug, Default)]
pub struct SpaceGauge {
    /// `journal.min_free_bytes`; 0 = no floor (and no reserve).
    pub floor: u64,
    /// Bytes free when last looked (the reserve not counted).
    pub free: AtomicU64,
    /// Below the floor: new persistent messages are held or refused.
    pub low: AtomicBool,
    /// The reserve file was given up to a full disk and is not back yet.
    pub reserve_released: AtomicBool,
}

impl SpaceGauge {
    /// Why persistent messages are not taken now, if they are not.
    pub fn refusing(&self) -> Option<String> {
        self.low.load(Ordering::Relaxed).then(|| {
            format!(
                "the journal's disk has {} bytes free, below journal.min_free_bytes ({}): \
                 persistent messages wait until consumers or the operator free space",
                self.free.load(Ordering::Relaxed),
                self.floor
            )
        })
    }
}

/// The journal thread's side: when to look, and the reserve file.
pub struct Space {
    gauge: Arc<SpaceGauge>,
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    checked: Option<Instant>,
    /// Bytes written since free space was last looked at.
    written: u64,
    /// Whether the reserve file is there, whole.
    reserved: bool,
}

impl Space {
    /// The floor for the file system of `dir`; an existing reserve file of
    /// the right size is kept.
    pub fn new(floor: u64, dir: &Path, disk: Arc<dyn Disk>) -> Space {
        let path = dir.join(RESERVE);
        let reserved = floor > 0
            && std::fs::metadata(&path).is_ok_and(|m| m.len() >= Space::reserve_size(floor));
        Space {
            gauge: Arc::new(SpaceGauge {
                floor,
                ..SpaceGauge::default()
            }),
            disk,
            dir: dir.to_owned(),
            checked: None,
            written: 0,
            reserved,
        }
    }

    fn reserve_size(floor: u64) -> u64 {
        floor / 4
    }

    /// The gauge the broker reads.
    pub fn gauge(&self) -> Arc<SpaceGauge> {
        self.gauge.clone()
    }

    /// Whether it is below the floor.
    pub fn low(&self) -> bool {
        self.gauge.low.load(Ordering::Relaxed)
    }

    /// Counts bytes written, so that a burst cannot run far past the floor
    /// between two looks.
    pub fn wrote(&mut self, bytes: u64) {
        self.written += bytes;
    }

    /// Looks at free space if it is time to (or `now_anyway`), and says
    /// when producers stop and go on; makes the reserve again above the
    /// floor.
    pub fn check(&mut self, now_anyway: bool) {
        let floor = self.gauge.floor;
        if floor == 0 {
            return;
        }
        let now = Instant::now();
        let due = now_anyway
            || self.written >= floor / 8
            || self
                .checked
                .is_none_or(|at| now.duration_since(at) >= CHECK_EVERY);
        if !due {
            return;
        }
        self.checked = Some(now);
        self.written = 0;
        let free = match self.disk.free_space(&self.dir) {
            Ok(free) => free,
            Err(e) => {
                log::warn!(
                    "journal: cannot tell the free space of {}: {e}",
                    self.dir.display()
                );
                return;
            }
        };
        self.gauge.free.store(free, Ordering::Relaxed);
        let was = self.low();
        let low = match was {
            true => free < floor + floor / 20,
            false => free < floor,
        };
        if low != was {
            self.gauge.low.store(low, Ordering::Relaxed);
            match low {
                true => log::error!(
                    "journal: {free} bytes free on the disk of {}, below journal.min_free_bytes ({floor}): persistent messages are held or refused until space is freed",
                    self.dir.display()
                ),
                false => log::warn!("journal: {free} bytes free again: persistent messages go on"),
            }
        }
        if !low && !self.reserved && free >= floor + Space::reserve_size(floor) {
            self.make_reserve();
        }
    }

    /// Writes the reserve file; a disk too full for it leaves none.
    fn make_reserve(&mut self) {
        let path = self.dir.join(RESERVE);
        let size = Space::reserve_size(self.gauge.floor);
        let made = self.disk.create(&path).and_then(|mut f| {
            let zeros = vec![0u8; 64 << 10];
            let mut left = size;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            f.sync_data()
        });
        match made {
            Ok(()) => {
                self.reserved = true;
                if self.gauge.reserve_released.swap(false, Ordering::Relaxed) {
                    log::info!("journal: the {size}-byte reserve file is back");
                }
            }
            Err(e) => {
                log::warn!("journal: cannot make the {size}-byte reserve file: {e}");
                let _ = self.disk.remove(&path);
            }
        }
    }

    /// Gives the reserve up to a full disk. Whether there was one to give:
    /// the failed write is worth trying again.
    pub fn release(&mut self) -> bool {
        if !self.reserved {
            return false;
        }
        self.reserved = false;
        let path = self.dir.join(RESERVE);
        match self.disk.remove(&path) {
            Ok(()) => {
                self.gauge.reserve_released.store(true, Ordering::Relaxed);
                log::error!(
                    "journal: the disk is full: the {}-byte reserve file was deleted so that acknowledgements and compaction can go on",
                    Space::reserve_size(self.gauge.floor)
                );
                true
            }
            Err(e) => {
                log::error!("journal: cannot delete the reserve file: {e}");
                false
            }
        }
    }
}

/// Whether an error says the disk (or the user's quota) is full.
pub fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}
