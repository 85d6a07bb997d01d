//! The server-wide state a front-end reaches, and how a request that
//! finishes off the connection's worker comes back to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use herald_protocol::DestinationKind;

use crate::auth::{Authenticator, Principal};
use crate::broker::delivery::Delivery;
use crate::broker::{Broker, ConnectionRef};
use crate::config::Config;
use crate::store::{Completion, StoreError};
use crate::sync::lock;

/// The protocol a listener speaks, and so its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Herald's own binary protocol.
    Native,
    /// The native protocol over TLS.
    NativeTls,
    /// STOMP 1.0 to 1.2.
    Stomp,
    /// STOMP carried in WebSocket messages (browsers).
    StompWebSocket,
    /// MQTT 3.1.1 and 5.0.
    Mqtt,
    /// MQTT over TLS.
    MqttTls,
    /// MQTT carried in WebSocket messages (subprotocol `mqtt`).
    MqttWebSocket,
    /// AMQP 1.0.
    Amqp,
    /// AMQP 1.0 over TLS (`amqps`).
    AmqpTls,
    /// AMQP 1.0 carried in WebSocket messages (subprotocol `amqp`).
    AmqpWebSocket,
}

impl Protocol {
    /// Whether its connections start with a TLS handshake.
    pub fn tls(self) -> bool {
        matches!(
            self,
            Protocol::NativeTls | Protocol::MqttTls | Protocol::AmqpTls
        )
    }
}

/// What reaches a worker from off it for the connections it owns:
/// deliveries, and the answers to requests that finished elsewhere (in
/// the journal, the authenticator, the cluster).
pub enum Notice {
    /// Deliver these messages to connections this worker owns.
    Deliver(Vec<Delivery>),
    /// These connections' blocked sends may go through now.
    Wake(Vec<ConnectionRef>),
    /// Broker work from off the workers (a persistent message the journal
    /// now holds enters its queue): run it, route what it routes.
    Run(crate::broker::SinkWork),
    /// The store has (or failed to write) what a request needed: answer
    /// it with a RECEIPT (or an ERROR).
    Confirm {
        /// The requesting connection.
        conn: ConnectionRef,
        /// Its request id.
        request_id: u32,
        /// What the store said.
        result: Result<(), StoreError>,
    },
    /// A login has been checked: go on with the connection, or refuse it.
    LoggedIn {
        /// The connection.
        conn: ConnectionRef,
        /// Who it is, or why not.
        result: Result<Principal, crate::auth::LoginError>,
    },
    /// A shared queue's messages, read from Redis for a BROWSE: deliver
    /// them and end with the RECEIPT (or an ERROR).
    Browsed {
        /// The browsing connection.
        conn: ConnectionRef,
        /// The browser's subscription id.
        subscription_id: u32,
        /// The BROWSE's request id.
        request_id: u32,
        /// The messages (block, times delivered before), or why not.
        result: Result<Vec<(bytes::Bytes, u32)>, crate::broker::PeerError>,
    },
    /// What a connection's own store barrier waited for (a subscription
    /// change) is kept, or is not: its front end goes on (an AMQP attach
    /// is answered then).
    Kept {
        /// The connection.
        conn: ConnectionRef,
        /// Which of its waits, in its protocol's terms.
        token: u32,
        /// What the store said.
        result: Result<(), StoreError>,
    },
    /// The server closes this connection, for this reason.
    Close(ConnectionRef, Closing),
    /// The management interface lists connections: describe this
    /// worker's.
    Describe(Describe),
}

impl Notice {
    /// The one connection the notice is for, if it is for one.
    pub fn target_mut(&mut self) -> Option<&mut ConnectionRef> {
        match self {
            Notice::Confirm { conn, .. }
            | Notice::LoggedIn { conn, .. }
            | Notice::Browsed { conn, .. }
            | Notice::Kept { conn, .. }
            | Notice::Close(conn, _) => Some(conn),
            Notice::Deliver(_) | Notice::Wake(_) | Notice::Run(_) | Notice::Describe(_) => None,
        }
    }
}

/// Why the server closes a connection from off its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// An administrator asked.
    ByAdmin,
    /// A new connection took its client id's session over (MQTT).
    TakenOver,
}

/// A worker's inbox, as the threads that post to it see it.
pub trait Mailbox: Send + Sync {
    /// Queues a notice, waking the worker if its inbox was empty. False if
    /// the worker has stopped.
    fn post(&self, notice: Notice) -> bool;
}

/// The limits a config reload changes, read where they apply.
#[derive(Debug)]
pub struct Limits {
    /// `max_connections`.
    pub max_connections: AtomicUsize,
    /// `max_subscriptions_per_connection`.
    pub max_subscriptions_per_connection: AtomicUsize,
    /// `max_pending_bytes`.
    pub max_pending_bytes: AtomicUsize,
    /// `max_transaction_bytes`.
    pub max_transaction_bytes: AtomicUsize,
    /// `max_pending_receipts`.
    pub max_pending_receipts: AtomicUsize,
    /// `slow_consumer_grace_ms`.
    pub slow_consumer_grace_ms: AtomicUsize,
}

impl Limits {
    /// The limits of a config.
    pub fn new(config: &Config) -> Limits {
        let limits = Limits {
            max_connections: AtomicUsize::new(0),
            max_subscriptions_per_connection: AtomicUsize::new(0),
            max_pending_bytes: AtomicUsize::new(0),
            max_transaction_bytes: AtomicUsize::new(0),
            max_pending_receipts: AtomicUsize::new(0),
            slow_consumer_grace_ms: AtomicUsize::new(0),
        };
        limits.set(config);
        limits
    }

    /// Takes a (reloaded) config's limits.
    pub fn set(&self, config: &Config) {
        for (limit, value) in [
            (&self.max_connections, config.max_connections),
            (
                &self.max_subscriptions_per_connection,
                config.max_subscriptions_per_connection,
            ),
            (&self.max_pending_bytes, config.max_pending_bytes),
            (&self.max_transaction_bytes, config.max_transaction_bytes),
            (&self.max_pending_receipts, config.max_pending_receipts),
            (
                &self.slow_consumer_grace_ms,
                config.slow_consumer_grace_ms as usize,
            ),
        ] {
            limit.store(value, Ordering::Relaxed);
        }
    }

    /// One limit's value now.
    pub fn get(&self, limit: &AtomicUsize) -> usize {
        limit.load(Ordering::Relaxed)
    }
}

/// A connection as the management interface sees it, described by the
/// worker that owns it when asked ([`Notice::Describe`]).
#[derive(Debug)]
pub struct ConnView {
    /// Server-wide unique connection number.
    pub serial: u64,
    /// The client id it connected with ("" = none, or not connected yet).
    pub client_id: Arc<str>,
    /// The user it logged in as ("" = anonymous, or not yet).
    pub user: String,
    /// The peer's address, if the socket could tell.
    pub peer: Option<std::net::SocketAddr>,
    /// Its listener's protocol.
    pub protocol: Protocol,
    /// Subscriptions it holds.
    pub subscriptions: usize,
    /// Bytes read from it.
    pub bytes_in: u64,
    /// Bytes written to it.
    pub bytes_out: u64,
    /// Messages it published.
    pub messages_in: u64,
    /// Messages delivered to it.
    pub messages_out: u64,
    /// How long it has been open.
    pub age: std::time::Duration,
}

/// A peer's address as text ("?" if the socket could not tell).
pub fn peer_name(peer: Option<std::net::SocketAddr>) -> String {
    peer.map_or_else(|| "?".into(), |a| a.to_string())
}

/// What a worker answers [`Notice::Describe`] with: its connections.
pub type Describe = Box<dyn FnOnce(Vec<ConnView>) + Send>;

/// The slot of a connection on its way to another worker.
pub const MOVING: usize = usize::MAX;

/// Where each open connection lives, by its serial: how a notice, an
/// administrator's command or a session takeover finds a connection that
/// may have moved to another worker. One small entry per connection, kept
/// by the worker that owns it.
#[derive(Default)]
pub struct Places(std::sync::Mutex<crate::collections::FastMap<u64, Place>>);

/// Where one connection lives, in eight bytes.
#[derive(Clone, Copy)]
struct Place {
    /// Its slot in its worker's slab; `u32::MAX` while it moves.
    slot: u32,
    /// Its worker.
    worker: u16,
    /// Its listener's protocol.
    protocol: Protocol,
}

impl Places {
    /// Notes where connection `home.serial`, of `protocol`, lives now (a
    /// new one, or one that has moved here).
    pub fn set_home(&self, home: ConnectionRef, protocol: Protocol) {
        // A slot indexes a slab of at most `max_connections`, and workers
        // are a few per core: both fit.
        let place = Place {
            slot: home.slot as u32,
            worker: home.worker as u16,
            protocol,
        };
        lock(&self.0).insert(home.serial, place);
    }

    /// Where connection `serial` lives now, and its protocol, if it is
    /// open. While it moves, the slot is [`MOVING`].
    pub fn home(&self, serial: u64) -> Option<(ConnectionRef, Protocol)> {
        let place = *lock(&self.0).get(&serial)?;
        let slot = match place.slot {
            u32::MAX => MOVING,
            slot => slot as usize,
        };
        let home = ConnectionRef {
            worker: place.worker.into(),
            slot,
            serial,
        };
        Some((home, place.protocol))
    }

    /// Notes that connection `serial` left worker `from` for `to`, unless
    /// `to` already said where it put it.
    pub fn set_leaving(&self, serial: u64, from: usize, to: usize) {
        if let Some(place) = lock(&self.0).get_mut(&serial) {
            if usize::from(place.worker) == from {
                place.worker = to as u16;
                place.slot = u32::MAX;
            }
        }
    }

    /// Whether a connection is open that is not in `listed`.
    pub fn missing_from(&self, listed: &std::collections::HashSet<u64>) -> bool {
        lock(&self.0).keys().any(|serial| !listed.contains(serial))
    }

    /// Forgets a connection that has closed.
    pub fn remove(&self, serial: u64) {
        lock(&self.0).remove(&serial);
    }
}

/// Posts notices to `conn`'s worker from any thread, for as long as the
/// server runs: how a request finished elsewhere comes back.
pub fn poster(shared: &Arc<Shared>, conn: ConnectionRef) -> impl Fn(Notice) + Send + 'static {
    let shared = Arc::downgrade(shared);
    move |notice| {
        if let Some(shared) = shared.upgrade() {
            shared.workers[conn.worker].post(notice);
        }
    }
}

/// A store completion that answers `request_id` on `conn` through its
/// worker's inbox.
pub fn confirmation(shared: &Arc<Shared>, conn: ConnectionRef, request_id: u32) -> Completion {
    let post = poster(shared, conn);
    Box::new(move |result| {
        post(Notice::Confirm {
            conn,
            request_id,
            result,
        })
    })
}

/// A store completion that tells `conn`'s worker that wait `token` of
/// its front end is over.
pub fn kept(shared: &Arc<Shared>, conn: ConnectionRef, token: u32) -> Completion {
    let post = poster(shared, conn);
    Box::new(move |result| {
        post(Notice::Kept {
            conn,
            token,
            result,
        })
    })
}

/// A login completion that reports to `conn`'s worker.
pub fn login_result(shared: &Arc<Shared>, conn: ConnectionRef) -> crate::auth::LoginDone {
    let post = poster(shared, conn);
    Box::new(move |result| post(Notice::LoggedIn { conn, result }))
}

/// Counters a worker keeps about itself; read by anyone.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Connections it owns now.
    pub connections: AtomicUsize,
    /// Messages published by its connections.
    pub messages_in: AtomicU64,
    /// Messages it delivered to its connections.
    pub messages_out: AtomicU64,
    /// Messages it dropped for slow consumers (policy drop_oldest, or
    /// best-effort subscriptions).
    pub dropped: AtomicU64,
    /// Times it paused a publisher while a subscriber drained a backlog.
    pub publisher_pauses: AtomicU64,
    /// Connections it took over from another worker.
    pub moved_in: AtomicU64,
    /// Time spent working rather than waiting in `poll`, in nanoseconds.
    pub busy_ns: AtomicU64,
    /// Share of its time it worked over its last tick, in thousandths.
    pub load: AtomicU32,
    /// Slow consumers it disconnected (policy disconnect).
    pub slow_consumers: AtomicU64,
    /// When its loop last turned, in nanoseconds of the process's clock
    /// (`net::stamp`): a worker whose loop stops turning makes no
    /// progress, and the acceptor's watchdog says so.
    pub last_turn: AtomicU64,
    /// Whether the watchdog found it stuck, and has not seen it turn since.
    pub stalled: AtomicBool,
    /// Times the watchdog found it stuck.
    pub stalls: AtomicU64,
    /// Messages and bytes published by its connections, and deliveries
    /// routed, per destination.
    pub destinations: std::sync::Mutex<HashMap<(DestinationKind, String), DestinationCounts>>,
}

/// What went through one destination.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DestinationCounts {
    /// Messages published to it.
    pub messages_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Deliveries routed from it (one per matching subscription; one per
    /// message for a queue).
    pub deliveries: u64,
    /// Their bytes.
    pub bytes_out: u64,
}

/// Destinations counted one by one per worker; the rest are summed under
/// [`OTHER_DESTINATIONS`].
const MAX_COUNTED_DESTINATIONS: usize = 10_000;
/// Where destinations past the limit are counted.
pub const OTHER_DESTINATIONS: &str = "(other)";
/// Where temporary destinations are counted: each lives as long as one
/// connection, and a series apiece would grow without bound.
pub const TEMPORARY_DESTINATIONS: &str = "(temporary)";

impl DestinationCounts {
    /// One published message of `bytes` that made `deliveries`.
    pub fn add(&mut self, bytes: u64, deliveries: u64) {
        self.messages_in += 1;
        self.bytes_in += bytes;
        self.deliveries += deliveries;
        self.bytes_out += bytes * deliveries;
    }

    fn merge(&mut self, other: DestinationCounts) {
        self.messages_in += other.messages_in;
        self.bytes_in += other.bytes_in;
        self.deliveries += other.deliveries;
        self.bytes_out += other.bytes_out;
    }
}

impl WorkerStats {
    /// Adds a burst's counts for one destination.
    pub fn add(&self, key: (DestinationKind, String), counts: DestinationCounts) {
        let key = match herald_protocol::destination::is_temporary(&key.1) {
            true => (key.0, TEMPORARY_DESTINATIONS.to_owned()),
            false => key,
        };
        let mut map = lock(&self.destinations);
        let key = if map.len() < MAX_COUNTED_DESTINATIONS || map.contains_key(&key) {
            key
        } else {
            (key.0, OTHER_DESTINATIONS.to_owned())
        };
        map.entry(key).or_default().merge(counts);
    }
}

/// State shared by the acceptor and every worker of one server.
pub struct Shared {
    /// Logs connections in.
    pub auth: Authenticator,
    /// The limits a config reload changes.
    pub limits: Limits,
    /// The server's configuration.
    pub config: Config,
    /// The routing state.
    pub broker: Broker,
    /// Each worker's inbox, by index.
    pub workers: Vec<Box<dyn Mailbox>>,
    /// One set of counters per worker, by index.
    pub stats: Vec<WorkerStats>,
    /// The room of the delivery batches each worker has emptied, by
    /// index, for the threads that route to it.
    pub spares: Vec<crate::broker::delivery::Spare>,
    /// Connections open across all workers; the acceptor checks it against
    /// `max_connections`.
    pub open_connections: AtomicUsize,
    /// Source of connection serial numbers.
    pub next_serial: AtomicU64,
    /// Where every open connection lives, by serial number.
    pub places: Places,
    /// The client ids of logged-in connections, and whose they are: one
    /// live connection per client id.
    pub client_ids: std::sync::Mutex<HashMap<Arc<str>, u64>>,
    /// Connections waiting to take a client id over from the one that
    /// holds it (MQTT's session takeover), with who logged in.
    pub heirs: std::sync::Mutex<HashMap<String, (ConnectionRef, Principal)>>,
    /// Sessions no connection holds, and the wills they left.
    pub away: super::away::AwaySessions,
    /// When the server started.
    pub started: std::time::Instant,
}

/// The broker's way to route off the workers: the work goes to a worker's
/// inbox, taking turns, and runs there with what that worker routes, so
/// the journal thread that confirms a persistent message stays lean and a
/// burst of confirmations is routed in batches.
pub struct WorkerSink {
    shared: std::sync::Weak<Shared>,
    next: AtomicUsize,
}

impl WorkerSink {
    /// A sink to the workers of `shared`.
    pub fn new(shared: std::sync::Weak<Shared>) -> WorkerSink {
        WorkerSink {
            shared,
            next: AtomicUsize::new(0),
        }
    }
}

impl crate::broker::Sink for WorkerSink {
    fn run(&self, on: Option<usize>, work: crate::broker::SinkWork) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let n = shared.workers.len();
        let worker = on
            .filter(|w| *w < n)
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed) % n);
        shared.workers[worker].post(Notice::Run(work));
    }
}

/// Hands messages routed off the workers (by the management interface, or
/// from other nodes) to the workers that own their connections.
pub fn hand_out(shared: &Shared, deliveries: &mut crate::broker::delivery::Deliveries) {
    for (worker, conns) in deliveries.drain_wakes() {
        shared.workers[worker].post(Notice::Wake(conns));
    }
    for (worker, batch) in deliveries.drain(None, &shared.spares) {
        shared.workers[worker].post(Notice::Deliver(batch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(worker: usize, slot: usize, serial: u64) -> ConnectionRef {
        ConnectionRef {
            worker,
            slot,
            serial,
        }
    }

    #[test]
    fn places_follow_a_connection_that_moves() {
        let places = Places::default();
        places.set_home(at(1, 7, 42), Protocol::Mqtt);
        assert_eq!(places.home(42), Some((at(1, 7, 42), Protocol::Mqtt)));
        assert_eq!(places.home(43), None);

        // On its way: the new worker, no slot yet.
        places.set_leaving(42, 1, 0);
        assert_eq!(places.home(42), Some((at(0, MOVING, 42), Protocol::Mqtt)));
        places.set_home(at(0, 3, 42), Protocol::Mqtt);
        // A late word from the worker it left changes nothing.
        places.set_leaving(42, 1, 0);
        assert_eq!(places.home(42), Some((at(0, 3, 42), Protocol::Mqtt)));

        let listed = std::collections::HashSet::from([42]);
        assert!(!places.missing_from(&listed));
        places.set_home(at(1, 0, 50), Protocol::Native);
        assert!(places.missing_from(&listed));
        places.remove(50);
        places.remove(42);
        assert_eq!(places.home(42), None);
        assert!(!places.missing_from(&Default::default()));
    }
}
