//! AMQP 1.0 (OASIS, ISO/IEC 19464): the wire of the AMQP front-end to come
//! (issue 28), written here like the STOMP and MQTT codecs: pure, bounded,
//! never panicking on what a peer sends.
//!
//! - [`types`]: the type system, values and their encodings.
//! - [`frame`]: the protocol headers and the frame layout.
//! - [`fields`]: composites, the described lists that the rest are.
//! - [`sasl`]: the SASL frames (PLAIN and ANONYMOUS).
//! - [`performative`]: the nine performatives and their error.
//! - [`terminus`]: a link's source and target, and the coordinator.
//! - [`delivery`]: delivery states and outcomes, and the transaction
//!   controls.
//! - [`message`]: a message's sections.
//! - [`put`]: values written without building them first.

pub mod delivery;
pub mod fields;
pub mod frame;
pub mod message;
pub mod performative;
pub mod put;
pub mod sasl;
pub mod terminus;
pub mod types;

pub use frame::{FrameHeader, FrameKind, ProtocolHeader};
pub use performative::Performative;
pub use sasl::Sasl;
pub use types::Value;

use thiserror::Error;

/// Why AMQP bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AmqpError {
    /// The bytes end before a field that must be there.
    #[error("truncated: the {0} is missing")]
    Truncated(&'static str),
    /// A field holds what it may not.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A frame larger than the negotiated `max-frame-size`.
    #[error("frame of {size} bytes exceeds the max-frame-size of {max}")]
    FrameTooLarge {
        /// The size the frame header says.
        size: u32,
        /// The limit in force.
        max: u32,
    },
}
