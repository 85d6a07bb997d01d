//! The native protocol's front-end: one handler per frame kind, on the
//! operations of [`crate::frontend`].
//!
//! [`dispatch`] decodes a frame's body and calls its handler. A handler
//! answers by queueing frames on the connection's [`Outbound`] and routing
//! messages into the context's deliveries; a refusal becomes an ERROR
//! frame, and a fatal one also closes the connection.

pub mod ack;
mod answer;
pub(crate) mod browse;
pub mod connect;
mod disconnect;
mod heartbeat;
pub mod send;
mod stream;
pub mod subscribe;
pub mod transaction;
pub mod unsubscribe;
mod unsubscribe_durable;

pub use answer::{receipt, refuse, reply_error};

use herald_protocol::message::streamed_body;
use herald_protocol::{ErrorCode, Frame, FrameKind, MessageView, RawFrame};

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
    let malformed = |e: herald_protocol::Error| Refusal::fatal(e.code(), e.to_string());
    let result = match raw.header.kind {
        // A publisher repeats its destination: one that this burst routed
        // already is not checked against the naming rules again.
        FrameKind::Send if session.phase == Phase::Connected => {
            MessageView::parse_known(raw.body, ctx.last_destination())
                .map_err(malformed)
                .and_then(|message| send(message, request_id, session, out, ctx))
        }
        _ => Frame::decode(raw)
            .map_err(malformed)
            .and_then(|frame| handle(frame, request_id, session, out, ctx)),
    };
    match result {
        Ok(flow) => flow,
        Err(refusal) => refuse(refusal, out, request_id),
    }
}

/// A SEND: routed, or, a large message's, routed once its body has come.
fn send(
    message: MessageView,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    match streamed_body(message.block()) {
        Some(streamed) => stream::begin(message, streamed, (request_id, None), session, out, ctx),
        None => send::handle(message, request_id, session, out, ctx),
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
        Frame::Send(message) => send(message, request_id, session, out, ctx),
        Frame::Subscribe(f) => subscribe::handle(f, request_id, session, out, ctx),
        Frame::Unsubscribe(f) => unsubscribe::handle(f, request_id, session, out, ctx),
        Frame::Ping => heartbeat::ping(request_id, out),
        Frame::Pong => Ok(Flow::Continue),
        Frame::Disconnect => disconnect::handle(request_id, out),
        Frame::Ack(f) => ack::handle(f, Outcome::Processed, request_id, session, out, ctx),
        Frame::Nack(f) => ack::handle(f, Outcome::Redeliver, request_id, session, out, ctx),
        Frame::Browse(f) => browse::handle(f, request_id, session, out, ctx),
        Frame::Recover(f) => ack::recover(f, request_id, session, out, ctx),
        Frame::TxSend(f) => match streamed_body(f.message.block()) {
            // Its body is still to come; it is held once that has.
            Some(streamed) => {
                let at = (request_id, Some(f.transaction_id));
                stream::begin(f.message, streamed, at, session, out, ctx)
            }
            None => transaction::tx_send(f, request_id, session, out, ctx),
        },
        Frame::Commit(f) => transaction::handle_commit(f, request_id, session, out, ctx),
        Frame::Rollback(f) => transaction::handle_rollback(f, request_id, session, out, ctx),
        Frame::UnsubscribeDurable(f) => {
            unsubscribe_durable::handle(f, request_id, session, out, ctx)
        }
        Frame::Chunk(f) => stream::chunk(f, session, out, ctx),
        Frame::Connected(_) | Frame::Error(_) | Frame::Receipt | Frame::Message(_) => {
            Err(Refusal::fatal(
                ErrorCode::UnexpectedFrame,
                format!("{:?} is a server-to-client frame", frame.kind()),
            ))
        }
    }
}
