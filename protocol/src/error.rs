//! Decode errors, and the stable numeric codes that ERROR frames carry.
//!
//! [`enum@Error`] is what the codec and the body decoders return; it is small and
//! never boxed because it sits on the hot path. [`ErrorCode`] is the wire's
//! view of any failure, protocol or broker, documented in PROTOCOL.md.

use thiserror::Error;

/// Why bytes could not be decoded into a frame or a message. More
/// variants may come.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The first two bytes were not `HR`.
    #[error("bad magic 0x{0:04x}, expected 0x4852 (\"HR\")")]
    BadMagic(u16),
    /// The header names a protocol version this side does not speak.
    #[error("unsupported protocol version {0}, this side speaks 1")]
    UnsupportedVersion(u8),
    /// The header names a frame kind that does not exist.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The header announces a body larger than the configured limit.
    #[error("frame body of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge {
        /// Announced body length.
        len: u32,
        /// The limit in force.
        max: u32,
    },
    /// A body ended before a field it must contain.
    #[error("truncated body: {0} is missing")]
    Truncated(&'static str),
    /// A body held bytes after its last field.
    #[error("{0} unexpected bytes after the end of the body")]
    TrailingBytes(usize),
    /// A field held a value it may not hold.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field that was wrong.
        field: &'static str,
        /// What was wrong with it.
        reason: String,
    },
}

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
        Error::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The wire code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadMagic(_) => ErrorCode::BadMagic,
            Error::UnsupportedVersion(_) => ErrorCode::UnsupportedVersion,
            Error::UnknownKind(_) => ErrorCode::UnknownKind,
            Error::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            Error::Truncated(_) | Error::TrailingBytes(_) | Error::Invalid { .. } => {
                ErrorCode::Malformed
            }
        }
    }
}

/// Stable numeric codes carried by ERROR frames. New codes are only ever
/// appended; a code's number never changes meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The datagram did not start with `HR`.
    BadMagic = 1,
    /// The header's protocol version is not supported.
    UnsupportedVersion = 2,
    /// The header's frame kind is unknown.
    UnknownKind = 3,
    /// The body is larger than the server's `max_frame_size`.
    FrameTooLarge = 4,
    /// The body does not decode.
    Malformed = 5,
    /// A frame other than CONNECT arrived before CONNECT.
    NotConnected = 6,
    /// CONNECT arrived on a connection that is already connected.
    AlreadyConnected = 7,
    /// A frame the client may not send (CONNECTED, MESSAGE, ...).
    UnexpectedFrame = 8,
    /// A destination name or pattern is not valid.
    InvalidDestination = 9,
    /// Strict mode: the topic is not declared in the topic tree.
    UndeclaredTopic = 10,
    /// The subscription id is not known on this connection.
    UnknownSubscription = 11,
    /// The subscription id is already in use on this connection.
    DuplicateSubscription = 12,
    /// Nothing arrived within the negotiated heart-beat interval.
    HeartbeatTimeout = 13,
    /// The server is shutting down.
    ServerShutdown = 14,
    /// The connection's outbound backlog exceeded its limit.
    SlowConsumer = 15,
    /// A configured limit (connections, subscriptions, ...) was reached.
    LimitExceeded = 16,
    /// The server failed in a way that is not the client's fault.
    Internal = 17,
    /// ACK or NACK of a delivery id that is not outstanding.
    UnknownDelivery = 18,
    /// The queue holds as many messages as it may.
    QueueFull = 19,
    /// A durable subscription already has a live consumer.
    SubscriptionInUse = 20,
    /// A message selector does not parse.
    InvalidSelector = 21,
    /// A durable subscription needs a client id on the connection.
    ClientIdRequired = 22,
    /// A COMMIT could not be carried out: the transaction was rolled back.
    TransactionRolledBack = 23,
    /// CONNECT without valid credentials.
    AuthenticationFailed = 24,
    /// The user lacks the permission for the operation.
    NotAuthorized = 25,
    /// An administrator closed the connection.
    ClosedByAdmin = 26,
    /// CONNECT with a client id that another live connection uses.
    InvalidClientId = 27,
    /// A keyed topic refused the sample: no key property, or an instance
    /// or history limit reached (DDS's SAMPLE_REJECTED).
    SampleRejected = 28,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::BadMagic,
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnknownKind,
        ErrorCode::FrameTooLarge,
        ErrorCode::Malformed,
        ErrorCode::NotConnected,
        ErrorCode::AlreadyConnected,
        ErrorCode::UnexpectedFrame,
        ErrorCode::InvalidDestination,
        ErrorCode::UndeclaredTopic,
        ErrorCode::UnknownSubscription,
        ErrorCode::DuplicateSubscription,
        ErrorCode::HeartbeatTimeout,
        ErrorCode::ServerShutdown,
        ErrorCode::SlowConsumer,
        ErrorCode::LimitExceeded,
        ErrorCode::Internal,
        ErrorCode::UnknownDelivery,
        ErrorCode::QueueFull,
        ErrorCode::SubscriptionInUse,
        ErrorCode::InvalidSelector,
        ErrorCode::ClientIdRequired,
        ErrorCode::TransactionRolledBack,
        ErrorCode::AuthenticationFailed,
        ErrorCode::NotAuthorized,
        ErrorCode::ClosedByAdmin,
        ErrorCode::InvalidClientId,
        ErrorCode::SampleRejected,
    ];

    /// The code for a number, if it is one.
    pub fn from_u32(n: u32) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| *c as u32 == n)
    }

    /// The code in a few words, for people: what a client prints in place
    /// of the number.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadMagic => "not the Herald protocol",
            ErrorCode::UnsupportedVersion => "unsupported protocol version",
            ErrorCode::UnknownKind => "unknown frame kind",
            ErrorCode::FrameTooLarge => "frame too large",
            ErrorCode::Malformed => "malformed frame",
            ErrorCode::NotConnected => "not connected",
            ErrorCode::AlreadyConnected => "already connected",
            ErrorCode::UnexpectedFrame => "unexpected frame",
            ErrorCode::InvalidDestination => "invalid destination",
            ErrorCode::UndeclaredTopic => "undeclared topic",
            ErrorCode::UnknownSubscription => "unknown subscription",
            ErrorCode::DuplicateSubscription => "duplicate subscription",
            ErrorCode::HeartbeatTimeout => "heart-beat timeout",
            ErrorCode::ServerShutdown => "server shutting down",
            ErrorCode::SlowConsumer => "slow consumer",
            ErrorCode::LimitExceeded => "limit exceeded",
            ErrorCode::Internal => "internal server error",
            ErrorCode::UnknownDelivery => "unknown delivery",
            ErrorCode::QueueFull => "queue full",
            ErrorCode::SubscriptionInUse => "subscription in use",
            ErrorCode::InvalidSelector => "invalid selector",
            ErrorCode::ClientIdRequired => "client id required",
            ErrorCode::TransactionRolledBack => "transaction rolled back",
            ErrorCode::AuthenticationFailed => "authentication failed",
            ErrorCode::NotAuthorized => "permission denied",
            ErrorCode::ClosedByAdmin => "closed by an administrator",
            ErrorCode::InvalidClientId => "client id in use",
            ErrorCode::SampleRejected => "sample rejected",
        }
    }
}
