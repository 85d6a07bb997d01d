//! The Herald client: blocking sockets, one reader thread per connection.
//!
//! ```no_run
//! use herald_client::{AckMode, ConnectionFactory, Destination, Message};
//! # fn main() -> herald_client::Result<()> {
//! let factory = ConnectionFactory::new("herald://127.0.0.1:7777")?;
//! let connection = factory.create_connection()?;
//! let session = connection.create_session(AckMode::Auto)?;
//! let consumer = session.create_consumer(&Destination::topic("sales.#"))?;
//! consumer.set_message_listener(|m| println!("{:?}", m.body_text()))?;
//! let producer = session.create_producer(&Destination::topic("sales.europe.smartphone"))?;
//! producer.send(Message::text("sold 3").with_property("region", "EU").with_property("units", 3))?;
//! connection.close()?;
//! # Ok(()) }
//! ```
//!
//! Runnable programs for each common task (publisher, selector listener,
//! CLIENT-acknowledgement worker, transaction, request/reply, durable
//! subscriber, failover, TLS) are in `client/examples/`; CI runs each of
//! them against a server.
//!
//! # A program of your own
//!
//! The crate is not on crates.io: depend on it by path (a checkout of
//! Herald beside your project) or by git (Herald's repository URL):
//!
//! ```toml
//! [dependencies]
//! herald-client = { path = "../herald/client" }
//! # or: herald-client = { git = "<Herald's repository URL>" }
//! ```
//!
//! Then, in a new project (`cargo new orders && cd orders`, the line
//! above in its `Cargo.toml`), `src/main.rs`:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use herald_client::{AckMode, ConnectionFactory, Destination, Message};
//!
//! fn main() -> herald_client::Result<()> {
//!     let connection = ConnectionFactory::new("herald://127.0.0.1:7777")?.create_connection()?;
//!     let session = connection.create_session(AckMode::Auto)?;
//!     let orders = Destination::queue("orders");
//!     let consumer = session.create_consumer(&orders)?;
//!     session
//!         .create_producer(&orders)?
//!         .send(Message::text("order 1").with_property("region", "EU"))?;
//!     if let Some(m) = consumer.receive(Duration::from_secs(1))? {
//!         println!("{} {:?}", m.message_id(), m.body_text());
//!     }
//!     connection.close()
//! }
//! ```
//!
//! `cargo run` with a server running prints the order. For `herald+tls://`
//! the client trusts the system's certificate authorities, or the ones in
//! a PEM file ([`ConnectionFactory::with_tls_ca`]); `herald tls-dev-cert`
//! makes a test CA and a server certificate to try it with.
//!
//! # What an application must know
//!
//! **Threads.** Each [`Connection`] has a reader thread, which decodes what
//! the server sends and runs every message listener of that connection,
//! one message at a time, in order; and a flusher thread, which writes
//! what the application sends. A listener that takes long holds up every
//! other listener of its connection: hand slow work to a thread of your
//! own, or give slow consumers a connection of their own.
//!
//! **What a listener may call.** Anything that sends or settles:
//! [`Producer::send`], [`Session::acknowledge`], [`Session::commit`],
//! [`Session::recover`], even [`Connection::close`]. Inside a listener they
//! send without waiting for the server's receipt (the reader thread that
//! would read it is busy): a refusal reaches the exception listener. A
//! listener must not wait for a message on a consumer of
//! its own connection ([`Consumer::receive`]): the thread that would
//! deliver it is the one running the listener.
//!
//! **Acknowledgements.** [`AckMode::Auto`] acknowledges each message once
//! `receive` returns it or its listener returns (a listener that panics
//! gets it redelivered). [`AckMode::Client`]: [`Session::acknowledge`]
//! covers every message the session has handed out so far, from all its
//! consumers; [`AckMode::Individual`]: [`Session::acknowledge_message`]
//! covers one. [`AckMode::Transacted`]: [`Session::commit`] covers what
//! the transaction received and sent. What is not acknowledged when its
//! consumer closes comes again, marked redelivered; after
//! `queues.max_deliveries` deliveries it goes to the dead-letter queue
//! `DLQ.<queue>`.
//!
//! **Close and drop.** [`Consumer::close`] ends a subscription: messages
//! it prefetched and never handed out return as they were (not counted as
//! delivered). [`Session::close`] closes its consumers (and rolls back an
//! open transaction). [`Connection::close`] closes everything and says
//! goodbye. Dropping does the same without waiting for the server. A
//! `Connection` is a cheap handle: its clones and its sessions keep it
//! open, so a function may return just a session. A connection that is cut
//! (the process killed) cannot say what it read: then every message it
//! held counts as delivered.
//!
//! **Errors.** Match on [`Error`]: [`Error::Server`] is a refusal with a
//! code ([`Error::server_code`]), fatal or not; [`Error::ConnectionLost`]
//! and [`Error::Closed`] end the connection; the `Invalid*` variants and
//! [`Error::TooLarge`] are refused before anything is sent. Asynchronous
//! errors (a refused fire-and-forget send, a lost connection, failover
//! news) go to [`Connection::set_exception_listener`].
//!
//! # From async code
//!
//! The client blocks: call it from `spawn_blocking` (or a thread of your
//! own), and cross into async code with a channel. With tokio:
//!
//! ```ignore
//! let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
//! let connection = tokio::task::spawn_blocking(move || -> herald_client::Result<_> {
//!     let connection = ConnectionFactory::new("herald://127.0.0.1:7777")?.create_connection()?;
//!     let session = connection.create_session(AckMode::Auto)?;
//!     let consumer = session.create_consumer(&Destination::queue("orders"))?;
//!     // The listener runs on the reader thread: it only forwards.
//!     consumer.set_message_listener(move |m| { let _ = tx.send(m); })?;
//!     Ok((connection, session, consumer))
//! })
//! .await??;
//! while let Some(order) = rx.recv().await {
//!     handle(order).await;
//! }
//! ```
//!
//! Sending from async code: `spawn_blocking(move || producer.send(m))`, or
//! a non-persistent [`Producer::send`] directly (it only queues the frame
//! and returns at once, unless the connection is failing over).
//!
//! Layout: [`factory`] (URLs and named factories from `client.toml`),
//! `connection` (socket, reader thread, receipts, heart-beats), `writer`
//! (the coalescing flusher), `session`, `producer`, `consumer`, `error`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod connection;
mod consumer;
mod dial;
mod error;
pub mod factory;
mod producer;
mod requestor;
mod session;
mod stream;
mod sync;
mod transport;
mod writer;

pub use connection::Connection;
pub use consumer::Consumer;
pub use error::{Error, Result};
pub use factory::{ConnectionFactory, FactoryConfig};
/// What the wire codec reports, inside [`Error::Protocol`].
pub use herald_protocol::Error as ProtocolError;
pub use herald_protocol::{
    Body, DeliveryMode, Destination, DestinationKind, ErrorCode, Message, Origin, Value,
};
pub use producer::Producer;
pub use requestor::{reply, Requestor};
pub use session::{AckMode, ConsumerOptions, QueueBrowser, Session};
pub use stream::BodyReader;
pub use transport::client_config as tls_client_config;
