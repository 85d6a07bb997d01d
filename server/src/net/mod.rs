//! Bytes in, frames out: the acceptor, the workers and their connections.
//!
//! Threads talk by messages: each worker has an inbox (an MPSC channel) and
//! a `mio::Waker`. [`WorkerHandle::send`] wakes the worker only when it
//! makes the inbox non-empty, so a burst of messages costs one wake-up.

pub mod acceptor;
mod connection;
pub mod outbound;
pub mod tls;
pub mod worker;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Token, Waker};

use crate::auth::{Authenticator, Principal};
use crate::broker::{Broker, ConnectionRef};
use crate::config::Config;
use crate::delivery::Delivery;
use crate::store::Completion;

/// The token of every `Poll`'s waker; connections and listeners use others.
pub const WAKER: Token = Token(usize::MAX);

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
}

/// What one thread asks of a worker.
pub enum Command {
    /// Take over a freshly accepted connection.
    Adopt(TcpStream, Protocol),
    /// Deliver these messages to connections this worker owns.
    Deliver(Vec<Delivery>),
    /// These connections' blocked sends may go through now.
    Wake(Vec<ConnectionRef>),
    /// The store has (or failed to write) what a request needed: answer
    /// it with a RECEIPT (or an ERROR).
    Confirm {
        /// The requesting connection.
        conn: ConnectionRef,
        /// Its request id.
        request_id: u32,
        /// What the store said.
        result: Result<(), String>,
    },
    /// A login has been checked: go on with the connection, or refuse it.
    LoggedIn {
        /// The connection.
        conn: ConnectionRef,
        /// Who it is, or why not.
        result: Result<Principal, String>,
    },
    /// Close every connection and stop.
    Shutdown,
}

/// A store completion that answers `request_id` on `conn` through its
/// worker's inbox.
pub fn confirmation(shared: &Arc<Shared>, conn: ConnectionRef, request_id: u32) -> Completion {
    let shared = Arc::downgrade(shared);
    Box::new(move |result| {
        if let Some(shared) = shared.upgrade() {
            shared.workers[conn.worker].send(Command::Confirm {
                conn,
                request_id,
                result,
            });
        }
    })
}

/// A login completion that reports to `conn`'s worker.
pub fn login_result(shared: &Arc<Shared>, conn: ConnectionRef) -> crate::auth::LoginDone {
    let shared = Arc::downgrade(shared);
    Box::new(move |result| {
        if let Some(shared) = shared.upgrade() {
            shared.workers[conn.worker].send(Command::LoggedIn { conn, result });
        }
    })
}

/// The sending side of a worker's inbox.
pub struct WorkerHandle {
    inbox: Sender<Command>,
    waker: Waker,
    /// Set by the first sender after the worker last drained its inbox;
    /// cleared by the worker before it drains.
    notified: Arc<AtomicBool>,
}

impl WorkerHandle {
    /// A handle over a worker's inbox, waker and notified flag.
    pub fn new(inbox: Sender<Command>, waker: Waker, notified: Arc<AtomicBool>) -> WorkerHandle {
        WorkerHandle {
            inbox,
            waker,
            notified,
        }
    }

    /// Queues a command, waking the worker if its inbox was empty. False if
    /// the worker has stopped.
    pub fn send(&self, command: Command) -> bool {
        if self.inbox.send(command).is_err() {
            return false;
        }
        if !self.notified.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.waker.wake() {
                log::error!("cannot wake worker: {e}");
            }
        }
        true
    }
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
    /// Messages it dropped for slow consumers (policy drop_oldest).
    pub dropped: AtomicU64,
}

/// State shared by the acceptor and every worker of one server.
pub struct Shared {
    /// The TLS listener's settings, if it runs.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Logs connections in.
    pub auth: Authenticator,
    /// The server's configuration.
    pub config: Config,
    /// The routing state.
    pub broker: Broker,
    /// One handle per worker, by index.
    pub workers: Vec<WorkerHandle>,
    /// One set of counters per worker, by index.
    pub stats: Vec<WorkerStats>,
    /// Connections open across all workers; the acceptor checks it against
    /// `max_connections`.
    pub open_connections: AtomicUsize,
    /// Source of connection serial numbers.
    pub next_serial: AtomicU64,
}
