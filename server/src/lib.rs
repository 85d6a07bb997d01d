//! The Herald broker, as a library: [`Server::start`] returns a
//! [`ServerHandle`]; the `herald-server` binary is a thin wrapper.
//!
//! Layout (ARCHITECTURE.md says which thread owns what):
//!
//! - [`net`]: the acceptor thread and the worker threads: bytes in, frames
//!   out, and the connections they own.
//! - [`frontend`]: what a protocol front-end works with: the server-wide
//!   state, the queue it answers on, the notices that reach a worker, and
//!   the operations (publish, subscribe, settle, commit) every protocol
//!   maps its frames onto.
//! - [`handlers`]: one function per native frame kind, on `frontend`.
//! - [`broker`]: routing, the topic tree and strict mode, and the
//!   deliveries it hands the workers (`broker::delivery`). No sockets.
//! - [`session`]: per-connection protocol state.
//! - [`store`]: persistence: the storage trait and the embedded journal.
//! - [`stomp`]: the STOMP front-end, on `frontend` like `handlers`.
//! - [`mqtt`]: the MQTT 3.1.1 and 5.0 front-end, on `frontend` too.
//! - [`auth`]: users, passwords and permissions.
//! - [`config`]: the settings of `herald.toml`; [`addresses`]: the
//!   settings per address in it; [`diverts`]: the copies the broker files
//!   itself.
//! - [`admin`]: the management interface: JSON API, metrics, console.
//! - [`cluster`]: nodes sharing topics, queues and durable subscriptions
//!   through Redis.
//! - [`sync`]: locks that a panicking holder does not put out of use.
//! - [`log_limit`]: lines that could repeat, said at most once an interval.
//! - [`websocket`]: the WebSocket upgrade and framing STOMP and MQTT ride in.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addresses;
pub mod admin;
pub mod amqp;
pub mod auth;
pub mod auth_file;
pub mod broker;
pub mod cluster;
pub mod collections;
pub mod config;
pub mod diverts;
pub mod frontend;
pub mod handlers;
pub mod log_limit;
pub mod mqtt;
pub mod net;
pub mod origins;
mod server;
pub mod session;
pub mod stomp;
pub mod store;
pub mod sync;
#[cfg(test)]
mod test_util;
pub mod websocket;

pub use collections::FastMap;
pub use config::{Config, ConfigError};
pub use server::{Server, ServerHandle, StartError, Stats};
