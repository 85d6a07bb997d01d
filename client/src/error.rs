//! The client's errors. Users match on the variant to tell a refusal by the
//! server (the connection goes on) from a lost connection.

use herald_protocol::ErrorCode;
use thiserror::Error;

/// Anything that can go wrong in the client. Match on the variant: a
/// refusal by the server ([`Error::Server`], with [`Error::server_code`])
/// leaves the connection usable unless it is fatal; [`Error::ConnectionLost`]
/// and [`Error::Closed`] do not; the `Invalid*` variants are refused
/// before anything is sent. More variants may come.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    #[error("{}{}: {message}", code_name(*code), if *.fatal { " (connection closed)" } else { "" })]
    Server {
        /// The raw code; see [`Error::server_code`].
        code: u32,
        /// The server's explanation.
        message: String,
        /// The server closed the connection after this error.
        fatal: bool,
    },
    /// A send that asked for no receipt (a non-persistent
    /// [`Producer::send`](crate::Producer::send)) was refused: told to the
    /// exception listener, naming the message, its destination and the
    /// producer that sent it ([`Producer::number`](crate::Producer::number)).
    #[error("{}: {message} (message {message_id} to {destination}{})", code_name(*code),
        producer.map(|p| format!(", producer {p}")).unwrap_or_default())]
    SendRefused {
        /// The raw code; see [`Error::server_code`].
        code: u32,
        /// The server's explanation.
        message: String,
        /// Where the message was sent.
        destination: herald_protocol::Destination,
        /// The refused message's id.
        message_id: String,
        /// The number of the producer that sent it, if this connection
        /// sent it under its current id.
        producer: Option<u32>,
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
    /// The address answered, but not as a Herald native listener (the
    /// STOMP port, the management interface, another service).
    #[error("{address} is not a Herald native listener: {seems}")]
    NotHerald {
        /// The address dialled.
        address: String,
        /// What it seems to be instead.
        seems: String,
    },
    /// A TLS connection could not be made: the port does not speak TLS,
    /// or the server's certificate is not trusted.
    #[error("TLS with {address}: {reason}")]
    Tls {
        /// The server dialled.
        address: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// A frame (a message, with its headers) larger than the server takes:
    /// not sent. The server announces its `max_frame_size` when the
    /// connection opens; a bigger frame would cost the connection.
    #[error("{size} bytes is more than the server's max_frame_size ({max}): not sent")]
    TooLarge {
        /// The frame body's size.
        size: usize,
        /// The server's limit.
        max: usize,
    },
    /// A destination name, or a topic pattern, that is not valid: refused
    /// before anything was sent.
    #[error("invalid destination '{name}': {reason}")]
    InvalidDestination {
        /// The name or pattern.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A message selector that does not parse: refused before anything
    /// was sent.
    #[error("invalid selector '{selector}': {reason}")]
    InvalidSelector {
        /// The selector.
        selector: String,
        /// Where and why it does not parse.
        reason: String,
    },
    /// An argument that cannot be used (an option, a size, a mode).
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
            Error::Server { code, .. } | Error::SendRefused { code, .. } => {
                ErrorCode::from_u32(*code)
            }
            _ => None,
        }
    }

    /// Checks a destination name (not a pattern).
    pub(crate) fn check_name(name: &str) -> Result<()> {
        herald_protocol::destination::validate_name(name)
            .map_err(|e| Error::invalid_destination(name, e))
    }

    /// Checks a topic pattern (`*` and `#` allowed).
    pub(crate) fn check_pattern(pattern: &str) -> Result<()> {
        herald_protocol::Pattern::parse(pattern)
            .map(drop)
            .map_err(|e| Error::invalid_destination(pattern, e))
    }

    /// Checks a message selector; empty selects everything.
    pub(crate) fn check_selector(selector: &str) -> Result<()> {
        if selector.is_empty() {
            return Ok(());
        }
        herald_protocol::selector::Selector::parse(selector)
            .map(drop)
            .map_err(|e| Error::InvalidSelector {
                selector: selector.to_owned(),
                reason: format!("at position {}: {}", e.position, e.message),
            })
    }

    pub(crate) fn invalid_destination(name: &str, reason: impl std::fmt::Display) -> Error {
        Error::InvalidDestination {
            name: name.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// An [`Error::Io`]: `source` while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// A server's error code in words ("permission denied"), or its number
/// for a code this client does not know; the number stays available from
/// [`Error::server_code`].
fn code_name(code: u32) -> std::borrow::Cow<'static, str> {
    match ErrorCode::from_u32(code) {
        Some(known) => known.name().into(),
        None => format!("server error {code}").into(),
    }
}

/// Why a connection ended: in words, and with the server's code and
/// message when a fatal ERROR ended it, so that every later operation
/// fails with an error that can be matched on.
#[derive(Debug, Clone)]
pub(crate) struct Ending {
    pub(crate) why: String,
    server: Option<(u32, String)>,
}

impl Ending {
    /// The server closed the connection with this fatal ERROR.
    pub(crate) fn server(code: u32, message: &str) -> Ending {
        Ending {
            why: format!("{}: {message}", code_name(code)),
            server: Some((code, message.to_owned())),
        }
    }

    /// The error every operation gets from now on.
    pub(crate) fn error(&self) -> Error {
        match &self.server {
            Some((code, message)) => Error::Server {
                code: *code,
                message: message.clone(),
                fatal: true,
            },
            None => Error::ConnectionLost(self.why.clone()),
        }
    }
}

impl From<String> for Ending {
    fn from(why: String) -> Ending {
        Ending { why, server: None }
    }
}

/// The client's result type.
pub type Result<T> = std::result::Result<T, Error>;
