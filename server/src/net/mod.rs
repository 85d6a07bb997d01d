//! Bytes in, frames out: the acceptor, the workers and their connections.
//!
//! Threads talk by messages: each worker has an inbox (an MPSC channel) and
//! a `mio::Waker`. [`WorkerHandle::send`] wakes the worker only when it
//! makes the inbox non-empty, so a burst of messages costs one wake-up.

pub mod acceptor;
mod connection;
mod stamp;
pub mod tls;
pub mod watchdog;
pub mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Token, Waker};

use crate::frontend::{Mailbox, Notice, Protocol};

/// The token of every `Poll`'s waker; connections and listeners use others.
pub const WAKER: Token = Token(usize::MAX);

/// What one thread asks of a worker.
pub enum Command {
    /// Take over a freshly accepted connection.
    Adopt(TcpStream, Protocol),
    /// Take over a connection another worker hands over (see
    /// `Worker::hand_over`).
    Take(Box<connection::Connection>),
    /// Something for connections this worker owns.
    Notice(Notice),
    /// Close every connection and stop.
    Shutdown,
}

/// The sending side of a worker's inbox.
#[derive(Clone)]
pub struct WorkerHandle {
    inbox: Sender<Command>,
    waker: Arc<Waker>,
    /// Set by the first sender after the worker last drained its inbox;
    /// cleared by the worker before it drains.
    notified: Arc<AtomicBool>,
}

impl WorkerHandle {
    /// A handle over a worker's inbox, waker and notified flag.
    pub fn new(inbox: Sender<Command>, waker: Waker, notified: Arc<AtomicBool>) -> WorkerHandle {
        WorkerHandle {
            inbox,
            waker: Arc::new(waker),
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

impl Mailbox for WorkerHandle {
    fn post(&self, notice: Notice) -> bool {
        self.send(Command::Notice(notice))
    }
}
