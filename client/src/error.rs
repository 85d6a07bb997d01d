//! The client's errors. Users match on the variant to tell a refusal by the
//! server (the connection goes on) from a lost connection.

use herald_protocol::ErrorCode;
use thiserror::Error;

/// Anything that can go wrong in the client.
#[derive(Debug, Error)]
pub enum Error {
    /// A connection URL that does not parse.
    #[error("invalid connection URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A client config file that cannot be read or has a bad key.
    #[error("client config {path}: {reason}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the client was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server sent bytes this client cannot decode, or the client was
    /// asked to encode something the protocol cannot carry.
    #[error("protocol error: {0}")]
    Protocol(#[from] herald_protocol::Error),
    /// The server refused a request with an ERROR frame.
    #[error("server error {code}{}: {message}", if *.fatal { " (connection closed)" } else { "" })]
    Server {
        /// The raw code; see [`Error::server_code`].
        code: u32,
        /// The server's explanation.
        message: String,
        /// The server closed the connection after this error.
        fatal: bool,
    },
    /// No answer within the configured time.
    #[error("timed out after {millis} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        millis: u128,
    },
    /// The connection was closed by this side.
    #[error("the connection is closed")]
    Closed,
    /// The connection failed or the server went away.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// An argument that cannot be used.
    #[error("{0}")]
    InvalidArgument(String),
    /// Not a failure but news for the exception listener of a connection
    /// that fails over: it lost its server and is reconnecting. Sends wait
    /// meanwhile; requests in flight failed.
    #[error("connection interrupted, reconnecting: {0}")]
    Interrupted(String),
    /// DDS's deadline missed: no message reached the consumer of this
    /// destination for the period it asked.
    #[error("deadline missed: nothing from {destination} for {period_ms} ms")]
    DeadlineMissed {
        /// The consumer's destination.
        destination: String,
        /// The deadline, in milliseconds.
        period_ms: u128,
    },
    /// News for the exception listener: the connection is back, with this
    /// server (`host:port`), its consumers subscribed again.
    #[error("connection resumed with {0}")]
    Resumed(String),
}

impl Error {
    /// The server's error code, for [`Error::Server`].
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => ErrorCode::from_u32(*code),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The client's result type.
pub type Result<T> = std::result::Result<T, Error>;
