//! How the broker addresses a subscriber: its connection (which the
//! network layer interprets) and the client's id for the subscription.

/// Where a connection lives: the worker that owns it, its slot in that
/// worker, and a serial number that tells a reused slot from the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionRef {
    /// Index of the owning worker.
    pub worker: usize,
    /// Slot in the worker's connection table.
    pub slot: usize,
    /// Server-wide unique connection number.
    pub serial: u64,
}

/// One subscription of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subscriber {
    /// The connection holding the subscription.
    pub conn: ConnectionRef,
    /// The client's id for the subscription.
    pub subscription_id: u32,
}
