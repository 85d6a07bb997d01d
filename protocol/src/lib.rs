//! Herald's wire protocol, shared by the server and the client.
//!
//! Pure code: no sockets, no threads, no files. The layout follows the wire:
//!
//! - [`header`]: the 12-byte datagram header and the frame kinds.
//! - [`codec`]: the incremental decoder (bytes in, whole frames out) and the
//!   frame writer.
//! - [`frame`]: one module per frame kind, each with its body's encode and
//!   decode; [`Frame`] joins them.
//! - [`message`]: the JMS-shaped message model and its encoding, plus
//!   [`MessageView`], the server's validated zero-copy view of one.
//! - [`value`]: typed property values.
//! - [`destination`]: destination names and `*`/`#` subscription patterns.
//! - [`selector`]: the JMS message selector language, parsed and evaluated.
//! - [`stomp`]: STOMP 1.0–1.2 frames, for the second listener.
//! - [`mqtt`]: MQTT 3.1.1 and 5.0 packets, for the MQTT listener.
//! - [`amqp`]: AMQP 1.0's type system and framing, for the AMQP
//!   front-end to come.
//! - [`error`]: decode errors and the numeric error codes that cross the wire.
//! - [`utc`]: message times as people read them.
//!
//! `protocol/PROTOCOL.md` specifies every byte.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod amqp;
pub mod codec;
pub mod cursor;
pub mod destination;
pub mod error;
pub mod frame;
pub mod header;
pub mod message;
pub mod mqtt;
pub mod selector;
pub mod stomp;
pub mod utc;
pub mod value;

pub use codec::{Decoder, RawFrame};
pub use destination::{Destination, DestinationKind, Pattern};
pub use error::{Error, ErrorCode};
pub use frame::Frame;
pub use header::{FrameKind, HEADER_LEN, MAGIC, VERSION};
pub use message::{Body, DeliveryMode, Message, MessageId, MessageView, Origin, Stamp, Streamed};
pub use value::Value;
