//! Large messages sent by a client: a SEND or TX_SEND whose body is
//! streamed opens a stream, its CHUNK frames go to a spool file as they
//! come, and with the last one the message is routed (or held in its
//! transaction) like any other, its body left in the file.

use bytes::Bytes;
use herald_protocol::frame::Chunk;
use herald_protocol::{ErrorCode, MessageView, Streamed};

use crate::frontend::arriving;
use crate::frontend::outbound::Outbound;
use crate::frontend::streams::Incoming;
use crate::frontend::{Context, Flow, Refusal};
use crate::session::Session;

/// Streams of refused sends whose chunks may still come, remembered so
/// that they are dropped quietly.
const REFUSED_KEPT: usize = 64;

/// Opens the stream of a message whose body follows in CHUNK frames,
/// once it may be sent: refused (before any of the body is written) if
/// it is too large, the connection has too many streams open, or the
/// user may not publish there. `transaction` is a TX_SEND's.
pub fn begin(
    message: MessageView,
    streamed: Streamed,
    (request_id, transaction): (u32, Option<u32>),
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let opened = session
        .traffic_ref()
        .is_some_and(|t| t.incoming.contains_key(&streamed.stream));
    if opened {
        return Err(Refusal::fatal(
            ErrorCode::Malformed,
            format!("stream {} is open already", streamed.stream),
        ));
    }
    if let Err(refusal) = admit(&message, &streamed, session, ctx) {
        session
            .traffic()
            .refuse_stream(streamed.stream, REFUSED_KEPT);
        return Err(match transaction {
            Some(tx) => super::transaction::doom(tx, refusal, session, ctx),
            None if request_id == 0 => refusal.naming(&message),
            None => refusal,
        });
    }
    let spool = arriving::spool(streamed.len, ctx).inspect_err(|_| {
        session
            .traffic()
            .refuse_stream(streamed.stream, REFUSED_KEPT);
    })?;
    let incoming = Incoming {
        spool,
        block: message.block().clone(),
        request_id,
        transaction,
    };
    match streamed.len {
        0 => finish(incoming, session, out, ctx),
        _ => {
            session.traffic().incoming.insert(streamed.stream, incoming);
            Ok(Flow::Continue)
        }
    }
}

/// Whether this connection may send this large message.
fn admit(
    message: &MessageView,
    streamed: &Streamed,
    session: &mut Session,
    ctx: &Context<'_>,
) -> Result<(), Refusal> {
    let open = session.traffic_ref().map_or(0, |t| t.incoming.len());
    arriving::admit(message, (streamed.len, open), session, ctx)?;
    super::send::check_origin(message)
}

/// A CHUNK: the next bytes of a stream's body; an empty one gives the
/// stream up, and its file goes.
pub fn chunk(
    f: Chunk,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let traffic = session.traffic();
    let Some(incoming) = traffic.incoming.get_mut(&f.stream) else {
        if traffic.was_refused(f.stream) {
            return Ok(Flow::Continue);
        }
        return Err(Refusal::fatal(
            ErrorCode::UnexpectedFrame,
            format!("CHUNK of stream {}, which no SEND opened", f.stream),
        ));
    };
    if f.gives_up() {
        traffic.incoming.remove(&f.stream);
        return Ok(Flow::Continue);
    }
    if let Err(e) = incoming.spool.write(&f.data) {
        let request_id = incoming.request_id;
        traffic.incoming.remove(&f.stream);
        traffic.refuse_stream(f.stream, REFUSED_KEPT);
        let refusal = match e.kind() {
            std::io::ErrorKind::InvalidInput => Refusal::fatal(ErrorCode::Malformed, e.to_string()),
            _ => arriving::cannot_write(&e),
        };
        return Ok(super::answer::refuse(refusal, out, request_id));
    }
    if incoming.spool.left() > 0 {
        return Ok(Flow::Continue);
    }
    match traffic.incoming.remove(&f.stream) {
        Some(incoming) => finish(incoming, session, out, ctx),
        None => Ok(Flow::Continue),
    }
}

/// The whole body has come: the message, its body now the spool file's,
/// goes on as a SEND or TX_SEND would.
fn finish(
    incoming: Incoming,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let Incoming {
        spool,
        block,
        request_id,
        transaction,
    } = incoming;
    let renumbered = renumber(&block, spool.id());
    let held = spool
        .finish(renumbered)
        .map_err(|e| arriving::cannot_write(&e))?;
    let message = MessageView::parse(held).map_err(|e| Refusal::fatal(e.code(), e.to_string()))?;
    let answer = match transaction {
        Some(tx) => super::transaction::hold(tx, message, request_id, session, out, ctx),
        None => super::send::handle(message, request_id, session, out, ctx),
    };
    match answer {
        Ok(flow) => Ok(flow),
        Err(refusal) => Ok(super::answer::refuse(refusal, out, request_id)),
    }
}

/// `block` with its streamed body numbered `id`: the number is the
/// block's last eight bytes.
fn renumber(block: &Bytes, id: u64) -> Bytes {
    let mut b = block.to_vec();
    let at = b.len() - 8;
    b[at..].copy_from_slice(&id.to_be_bytes());
    Bytes::from(b)
}
