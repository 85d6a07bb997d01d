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
//! # Ok(()) }
//! ```
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
mod transport;
mod writer;

pub use connection::Connection;
pub use consumer::Consumer;
pub use error::{Error, Result};
pub use factory::{ConnectionFactory, FactoryConfig};
pub use herald_protocol::{Body, DeliveryMode, Destination, ErrorCode, Message, Value};
pub use producer::Producer;
pub use requestor::{reply, Requestor};
pub use session::{AckMode, ConsumerOptions, QueueBrowser, Session};
