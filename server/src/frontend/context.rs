//! What a front-end works with while it handles one frame: the
//! [`Context`] of the connection and its burst, the [`Flow`] that says how
//! the connection goes on, and the [`Refusal`] of what the server will not
//! carry out (each protocol turns it into its own error).

use std::rc::Rc;
use std::sync::Arc;

use herald_protocol::frame::{ErrorFrame, RefusedSend};
use herald_protocol::{DestinationKind, ErrorCode, MessageView};

use super::outbound::Outbound;
use super::shared::{confirmation, DestinationCounts, Shared};
use crate::broker::delivery::Deliveries;
use crate::broker::{Backlog, ConnectionRef, Routed};
use crate::session::Session;
use crate::store::StoreError;

/// What a front-end needs, besides the session, to handle a frame.
pub struct Context<'a> {
    /// The server's shared state: config, broker, workers.
    pub shared: &'a Arc<Shared>,
    /// The connection being served.
    pub me: ConnectionRef,
    /// Where routed messages go.
    pub deliveries: &'a mut Deliveries,
    /// Messages accepted from this connection in this burst.
    pub published: u64,
    /// The backlog of a subscriber one of them went to, if it has one:
    /// the worker pauses reading this connection until it is drained.
    pub backlog: Option<Arc<Backlog>>,
    /// Per-destination counts of this burst, added to the worker's when
    /// the destination changes and when the context ends: one lookup per
    /// run of messages to one destination, not one per message.
    /// Its name is shared (`Rc`) with the routing of the next message to
    /// it, which takes it as that message's destination.
    tally: Option<((DestinationKind, Rc<str>), DestinationCounts)>,
}

impl<'a> Context<'a> {
    /// A context for handling frames of connection `me`.
    pub fn new(shared: &'a Arc<Shared>, me: ConnectionRef, deliveries: &'a mut Deliveries) -> Self {
        Context {
            shared,
            me,
            deliveries,
            published: 0,
            backlog: None,
            tally: None,
        }
    }

    /// Takes note of a routed message: counts it and the deliveries it
    /// made, and whether a subscriber asks its publisher to pause.
    /// `name` is its destination.
    pub fn routed(&mut self, message: &MessageView, name: &str, routed: Routed) {
        self.published += 1;
        if self.backlog.is_none() {
            self.backlog = routed.backlog;
        }
        self.count(message, name, routed.delivered);
    }

    /// The destination of the last message routed in this burst: it
    /// passed the naming rules.
    pub fn last_destination(&self) -> Option<&str> {
        self.tally.as_ref().map(|((_, name), _)| &**name)
    }

    /// `message`'s destination if it is the last one routed in this
    /// burst: taken from there, its bytes are not checked as UTF-8 again.
    pub fn known_destination(&self, message: &MessageView) -> Option<Rc<str>> {
        match &self.tally {
            Some(((_, name), _)) if message.has_destination(name) => Some(name.clone()),
            _ => None,
        }
    }

    fn count(&mut self, message: &MessageView, name: &str, delivered: usize) {
        let kind = message.destination_kind;
        let same = matches!(&self.tally, Some(((k, n), _)) if *k == kind && **n == *name);
        if !same {
            self.flush_tally();
            self.tally = Some(((kind, Rc::from(name)), DestinationCounts::default()));
        }
        if let Some((_, counts)) = &mut self.tally {
            counts.add(message.block().len() as u64, delivered as u64);
        }
    }

    fn flush_tally(&mut self) {
        if let Some(((kind, name), counts)) = self.tally.take() {
            self.shared.stats[self.me.worker].add((kind, name.to_string()), counts);
        }
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        self.flush_tally();
    }
}

/// Whether the connection goes on after a frame.
pub enum Flow {
    /// Keep reading.
    Continue,
    /// Stop reading; close once the queued frames are written.
    Close,
    /// A send waits for room in a full queue: stop reading (the producer
    /// is pushed back on through TCP) until the queue wakes it.
    Park(Parked),
    /// CONNECT's credentials are being checked: stop reading until the
    /// answer comes, then welcome the client or refuse it.
    Login(Welcome),
}

/// A SEND held back because its queue is full.
pub struct Parked {
    /// The message.
    pub message: MessageView,
    /// Its request id.
    pub request_id: u32,
    /// When it was first held back, for `block_timeout_ms`.
    pub since: std::time::Instant,
    /// Held for a limit of the whole server (its memory, its journal's
    /// free space), not for one full queue: no queue will wake it, so the
    /// worker's tick retries it.
    pub for_server: bool,
}

/// A frame the server will not carry out.
#[derive(Debug)]
pub struct Refusal {
    code: ErrorCode,
    message: String,
    fatal: bool,
    /// The message of a refused SEND that asked for no RECEIPT.
    refused: Option<RefusedSend>,
}

/// The one place a store's failure becomes a protocol error.
impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Refusal {
        let code = match e {
            StoreError::Journal(_) | StoreError::Unconfirmed(_) | StoreError::Refused => {
                ErrorCode::Internal
            }
        };
        Refusal::soft(code, e.to_string())
    }
}

impl From<crate::session::TxLimit> for Refusal {
    fn from(limit: crate::session::TxLimit) -> Refusal {
        Refusal::soft(ErrorCode::LimitExceeded, limit.to_string())
    }
}

impl Refusal {
    /// A refusal after which the connection stays usable.
    pub fn soft(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            fatal: false,
            refused: None,
        }
    }

    /// Names the refused `message` in the ERROR, for a send the client
    /// cannot otherwise tell (it asked for no RECEIPT).
    pub fn naming(mut self, message: &MessageView) -> Refusal {
        let message_id = message
            .fields()
            .map(|f| f.message_id.to_owned())
            .unwrap_or_default();
        self.refused = Some(RefusedSend {
            destination: herald_protocol::Destination {
                kind: message.destination_kind,
                name: message.destination().to_owned(),
            },
            message_id,
        });
        self
    }

    /// Its code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// Its explanation.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code, whether it is fatal, and the explanation.
    pub fn into_parts(self) -> (ErrorCode, bool, String) {
        (self.code, self.fatal, self.message)
    }

    /// The refusal as the native protocol's ERROR frame.
    pub fn into_frame(self) -> ErrorFrame {
        ErrorFrame {
            refused: self.refused,
            ..ErrorFrame::new(self.code, self.fatal, self.message)
        }
    }

    /// A refusal that closes the connection.
    pub fn fatal(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            fatal: true,
            refused: None,
        }
    }
}

/// Refuses what the connection's user lacks `permission` for.
pub fn authorize(
    session: &Session,
    permission: crate::auth::Permission,
    kind: herald_protocol::DestinationKind,
    target: &str,
) -> Result<(), Refusal> {
    session
        .principal
        .check(permission, kind, target)
        .map_err(|denied| Refusal::soft(ErrorCode::NotAuthorized, denied.to_string()))
}

/// Has the RECEIPT of `request_id` follow what was appended to the
/// journal so far (at once if nothing was), counting it as pending; it is
/// an ERROR if one of the records `written` stands for failed.
pub fn await_journal(
    request_id: u32,
    written: crate::broker::Written,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    if request_id != 0 {
        session.pending_receipts += 1;
        out.owe_answer(request_id);
        let done = written.guard(confirmation(ctx.shared, ctx.me, request_id));
        ctx.shared.broker.barrier(Some(ctx.me), done);
    }
}

/// The answer to a CONNECT whose login is being checked, encoded in the
/// connection's protocol (its CONNECTED, or CONNACK) when the CONNECT was
/// handled, to be sent as it is if the login succeeds.
pub struct Welcome {
    /// The CONNECT's request id (its refusal, if the login fails, names it).
    pub request_id: u32,
    /// The bytes of the answer, ready for the wire.
    pub answer: bytes::Bytes,
}
