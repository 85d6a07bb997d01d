//! How long the journal's writes and syncs take, and what replay skipped.

use std::sync::Arc;

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use super::super::space::SpaceGauge;

/// What replay skipped in damaged segments (all zero when there were none).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DamageReport {
    /// Damaged segments, set aside as `*.corrupt`.
    pub segments: u64,
    /// Bytes that did not read as records.
    pub bytes: u64,
    /// Records skipped whose length could be trusted; what else the
    /// skipped bytes held is not known.
    pub records: u64,
}

/// How long the journal's writes and syncs take, in seconds, and what
/// replay had to skip.
#[derive(Debug, Clone)]
pub struct JournalMetrics {
    /// One `write` of a group of records.
    pub append: Histogram,
    /// One `fdatasync`.
    pub sync: Histogram,
    /// What the replay at start skipped in damaged segments.
    pub damage: DamageReport,
    /// Set for good once a sync failed (or a failed write could not be
    /// cut back): every persistent send fails until the server restarts.
    pub stopped: Arc<std::sync::atomic::AtomicBool>,
    /// Free space on the journal's disk, against its floor.
    pub space: Arc<SpaceGauge>,
}

impl Default for JournalMetrics {
    fn default() -> JournalMetrics {
        // 10 µs to about 1.3 s.
        let buckets = || exponential_buckets(0.000_01, 2.0, 18);
        JournalMetrics {
            append: Histogram::new(buckets()),
            sync: Histogram::new(buckets()),
            damage: DamageReport::default(),
            stopped: Arc::default(),
            space: Arc::default(),
        }
    }
}
