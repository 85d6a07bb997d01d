//! The native protocol's front-end: one handler per frame kind, on the
//! operations of [`crate::frontend`].
//!
//! [`dispatch`] decodes a frame's body and calls its handler. A handler
//! answers by queueing frames on the connection's [`Outbound`] and routing
//! messages into the context's deliveries; a refusal becomes an ERROR
//! frame, and a fatal one also closes the connection.

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

use herald_protocol::frame::ErrorFrame;
use herald_protocol::{ErrorCode, Frame, RawFrame};

use crate::frontend::outbound::Outbound;
use crate::frontend::{Context, Flow, Refusal};
use crate::session::{Outcome, Phase, Session};

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
        Err(refusal) => refuse(refusal, out, request_id),
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

/// Queues the ERROR of a refusal; the connection closes if it is fatal.
pub fn refuse(refusal: Refusal, out: &mut Outbound, request_id: u32) -> Flow {
    let frame = refusal.into_frame();
    let fatal = frame.fatal;
    push_error(out, request_id, frame);
    match fatal {
        true => Flow::Close,
        false => Flow::Continue,
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
