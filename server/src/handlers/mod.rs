//! One handler per frame kind: the seam between the network layer, which
//! turns bytes into frames, and the broker, which routes.
//!
//! [`dispatch`] decodes a frame's body and calls its handler. A handler
//! answers by queueing frames on the connection's [`Outbound`] and routing
//! messages into [`Deliveries`]; a refusal becomes an ERROR frame, and a
//! fatal one also closes the connection.

pub mod ack;
pub(crate) mod browse;
pub mod connect;
mod disconnect;
mod heartbeat;
pub mod send;
pub mod subscribe;
pub mod transaction;
pub mod unsubscribe;
mod unsubscribe_durable;

use herald_protocol::frame::{ErrorFrame, RefusedSend};
use herald_protocol::{DestinationKind, ErrorCode, Frame, MessageView, RawFrame};

use std::sync::Arc;

use crate::broker::delivery::Deliveries;
use crate::broker::{Backlog, ConnectionRef, Routed};
use crate::net::outbound::Outbound;
use crate::net::{DestinationCounts, Shared};
use crate::session::{Outcome, Phase, Session};

/// What a handler needs besides the session it works on.
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
    tally: Option<((DestinationKind, String), DestinationCounts)>,
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

    fn count(&mut self, message: &MessageView, name: &str, delivered: usize) {
        let kind = message.destination_kind;
        let same = matches!(&self.tally, Some(((k, n), _)) if *k == kind && n == name);
        if !same {
            self.flush_tally();
            self.tally = Some(((kind, name.to_owned()), DestinationCounts::default()));
        }
        if let Some((_, counts)) = &mut self.tally {
            counts.add(message.block().len() as u64, delivered as u64);
        }
    }

    fn flush_tally(&mut self) {
        if let Some((key, counts)) = self.tally.take() {
            self.shared.stats[self.me.worker].add(key, counts);
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
    Login(connect::Welcome),
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

    /// The code, whether it is fatal, and the explanation.
    pub fn into_parts(self) -> (ErrorCode, bool, String) {
        (self.code, self.fatal, self.message)
    }

    /// Queues the ERROR; the connection closes if the refusal is fatal.
    pub fn answer(self, out: &mut Outbound, request_id: u32) -> Flow {
        let fatal = self.fatal;
        let frame = ErrorFrame {
            refused: self.refused,
            ..ErrorFrame::new(self.code, self.fatal, self.message)
        };
        push_error(out, request_id, frame);
        if fatal {
            Flow::Close
        } else {
            Flow::Continue
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

/// Decodes and handles one frame.
pub fn dispatch(
    raw: RawFrame,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    let request_id = raw.header.request_id;
    let result = Frame::decode(raw)
        .map_err(|e| Refusal::fatal(e.code(), e.to_string()))
        .and_then(|frame| handle(frame, request_id, session, out, ctx));
    match result {
        Ok(flow) => flow,
        Err(refusal) => refusal.answer(out, request_id),
    }
}

fn handle(
    frame: Frame,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if session.phase == Phase::AwaitingConnect && !matches!(frame, Frame::Connect(_)) {
        return Err(Refusal::fatal(
            ErrorCode::NotConnected,
            format!(
                "{:?} before CONNECT: the first frame must be CONNECT",
                frame.kind()
            ),
        ));
    }
    match frame {
        Frame::Connect(f) => connect::handle(f, request_id, session, out, ctx),
        Frame::Send(message) => send::handle(message, request_id, session, out, ctx),
        Frame::Subscribe(f) => subscribe::handle(f, request_id, session, out, ctx),
        Frame::Unsubscribe(f) => unsubscribe::handle(f, request_id, session, out, ctx),
        Frame::Ping => heartbeat::ping(request_id, out),
        Frame::Pong => Ok(Flow::Continue),
        Frame::Disconnect => disconnect::handle(request_id, out),
        Frame::Ack(f) => ack::handle(f, Outcome::Processed, request_id, session, out, ctx),
        Frame::Nack(f) => ack::handle(f, Outcome::Redeliver, request_id, session, out, ctx),
        Frame::Browse(f) => browse::handle(f, request_id, session, out, ctx),
        Frame::Recover(f) => ack::recover(f, request_id, session, out, ctx),
        Frame::TxSend(f) => transaction::tx_send(f, request_id, session, out, ctx),
        Frame::Commit(f) => transaction::handle_commit(f, request_id, session, out, ctx),
        Frame::Rollback(f) => transaction::handle_rollback(f, request_id, session, out, ctx),
        Frame::UnsubscribeDurable(f) => {
            unsubscribe_durable::handle(f, request_id, session, out, ctx)
        }
        Frame::Connected(_) | Frame::Error(_) | Frame::Receipt | Frame::Message(_) => {
            Err(Refusal::fatal(
                ErrorCode::UnexpectedFrame,
                format!("{:?} is a server-to-client frame", frame.kind()),
            ))
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
        .map_err(|why| Refusal::soft(ErrorCode::NotAuthorized, why))
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
        let done = written.guard(crate::net::confirmation(ctx.shared, ctx.me, request_id));
        ctx.shared.broker.barrier(Some(ctx.me), done);
    }
}

/// Queues a RECEIPT if the client asked for one.
pub fn receipt(out: &mut Outbound, request_id: u32) {
    if request_id != 0 {
        out.push_answer_frame(&Frame::Receipt, request_id);
    }
}

/// Queues an ERROR frame.
pub fn reply_error(
    out: &mut Outbound,
    request_id: u32,
    code: ErrorCode,
    fatal: bool,
    message: String,
) {
    push_error(out, request_id, ErrorFrame::new(code, fatal, message));
}

/// Queues an ERROR frame as it is.
fn push_error(out: &mut Outbound, request_id: u32, frame: ErrorFrame) {
    let fatal = frame.fatal;
    log::debug!(
        "ERROR {} (request {request_id}, fatal {fatal}): {}",
        frame.code,
        frame.message
    );
    let frame = Frame::Error(frame);
    // A fatal one goes at once: the connection ends with it.
    match fatal {
        true => out.push_frame(&frame, request_id),
        false => out.push_answer_frame(&frame, request_id),
    }
}
