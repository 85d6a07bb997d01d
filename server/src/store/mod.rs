//! Persistence: what the broker must keep across a restart.
//!
//! The broker talks to a [`Store`]: it appends records (a persistent message
//! entering a queue, a durable subscription being created, either of them
//! ending) and learns what was kept when the server starts. The [`journal`]
//! is the embedded implementation; a distributed store can take its place
//! behind the same trait without the broker changing.
//!
//! Every record that starts something has an id; a [`Record::End`] names the
//! id it ends. What is live after replaying all records, in id order, is
//! the state to rebuild.

pub mod disk;
pub mod journal;
pub mod large;
pub mod page;
mod record;
pub mod shutdown;
pub mod space;

pub use journal::{
    DamageReport, FsyncPolicy, Journal, JournalConfig, JournalError, JournalMetrics, Recovered,
};
pub use record::{Completion, Holder, Record, Store, StoreError};
