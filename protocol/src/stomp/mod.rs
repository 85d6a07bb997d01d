//! STOMP 1.0, 1.1 and 1.2 frames: the text protocol that standard clients
//! (stomp.py, stomp.js, ActiveMQ and RabbitMQ clients) speak.
//!
//! ```text
//! COMMAND EOL
//! (name:value EOL)*
//! EOL
//! body NUL
//! ```
//!
//! EOL is LF or CR LF. A `content-length` header gives the body's length
//! (and so lets it hold NUL bytes); without one the body ends at the first
//! NUL. Between frames, bare EOLs are heart-beats. From 1.1 on, header
//! names and values escape CR, LF, `:` and `\` as `\r`, `\n`, `\c`, `\\`
//! (except in CONNECT and CONNECTED); an undefined escape is an error. When
//! a header is repeated, the first value counts.
//!
//! Pure code like the rest of this crate: [`StompDecoder`] takes bytes and
//! yields [`StompFrame`]s; [`StompFrame::encode`] writes them.

mod codec;
mod command;

pub use codec::{Decoded, StompDecoder, StompError, StompFrame, StompLimits};
pub use command::ClientCommand;
