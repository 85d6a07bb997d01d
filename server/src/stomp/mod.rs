//! The STOMP protocol's handlers: STOMP frames in, the same broker core as
//! the native protocol, STOMP frames out.
//!
//! A STOMP connection is served by the same acceptor and workers as a
//! native one; it carries a [`StompSession`] beside its protocol-neutral
//! `Session`. STOMP's string subscription ids and receipt ids are mapped to
//! the numbers the rest of the server uses. Every STOMP error is fatal: an
//! ERROR frame (a `message` header and an explanation in the body), then
//! the connection closes, as the specification says.
//!
//! Transactions (BEGIN, COMMIT, ABORT) hold their SENDs and ACKs/NACKs in
//! the session until COMMIT, which carries them out in order (its RECEIPT
//! waits for the journal like a persistent SEND's); ABORT, or the end of
//! the connection, drops them. Heart-beats run both ways: the server
//! expects the client's and, if asked, sends bare EOLs on its worker's
//! tick when it has had nothing else to send.

mod mapping;

use crate::collections::FastMap;
use crate::websocket::{self, WebSocket};

/// STOMP's WebSocket subprotocols, most preferred first.
const SUBPROTOCOLS: &[&str] = &["v12.stomp", "v11.stomp", "v10.stomp"];

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use herald_protocol::message::streamed_body;
use herald_protocol::stomp::ClientCommand;
use herald_protocol::stomp::{Decoded, StompDecoder, StompError, StompFrame, StompLimits};
use herald_protocol::{Destination, ErrorCode, MessageView};

use crate::broker::{SubscribeRequest, Written};
use crate::frontend::arriving::{read_apart, Arrived, Arriving};
use crate::frontend::outbound::Outbound;
use crate::frontend::streams::{self, BodyFrames, Raw};
use crate::frontend::{
    admit, authorize_publish as send_authorize, await_journal, check_id_length, commit,
    delete_durable, end_subscription, publish, selector as subscribe_selector, settle, spill,
    subscribe as start, subscribe_refusal, Context, Flow, Published, Refusal, Welcome,
};
use crate::session::{Deferred, Outcome, Phase, Session, Transactions};
use crate::store::large::LargeStore;

/// How a STOMP subscription acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// The server acknowledges as it sends.
    Auto,
    /// ACK of one message acknowledges every earlier one of the
    /// subscription too.
    Client,
    /// ACK acknowledges that message only.
    Individual,
}

/// What a STOMP connection needs besides the protocol-neutral session.
pub struct StompSession {
    decoder: StompDecoder,
    /// The negotiated version: "1.0", "1.1" or "1.2".
    version: &'static str,
    /// STOMP subscription id → (the server's number for it, its ack mode).
    subscriptions: HashMap<String, (u32, Ack)>,
    /// The server's number → STOMP subscription id.
    names: FastMap<u32, String>,
    next_subscription: u32,
    /// Request numbers given to frames with a `receipt` header, → the
    /// receipt id to answer with.
    receipts: HashMap<u32, String>,
    next_request: u32,
    next_message: u64,
    /// How often the client asked to hear from the server, if at all.
    heartbeat_out: Option<Duration>,
    /// When bytes were last handed to the socket: the heart-beat clock.
    last_write: Instant,
    /// Open transactions: what their frames will do on COMMIT.
    transactions: Transactions<String>,
    /// For STOMP over WebSocket, the WebSocket's state.
    websocket: Option<WebSocket>,
    /// A SEND's body on its way, read past its head (`large_send`).
    arriving: Option<Box<Arriving<SendHead>>>,
}

/// A STOMP frame the server refuses: the ERROR's `message` header.
type Refused = String;

/// A handler's refusal, as STOMP reports it.
fn refused(refusal: Refusal) -> (ErrorCode, Refused) {
    let (code, _, message) = refusal.into_parts();
    (code, message)
}

impl StompSession {
    /// Holds a frame's work in an open transaction.
    fn hold(
        &mut self,
        name: &str,
        op: Deferred,
        ctx: &Context<'_>,
    ) -> Result<(), (ErrorCode, Refused)> {
        self.open_transaction(name)?;
        let name = name.to_owned();
        let limit = ctx
            .shared
            .limits
            .get(&ctx.shared.limits.max_transaction_bytes);
        let max_open = ctx.shared.config.max_transactions_per_connection;
        self.transactions
            .hold(name, op, limit, max_open)
            .map_err(|e| refused(e.into()))
    }

    /// Whether transaction `name` is open, as the frames that name it
    /// need.
    fn open_transaction(&self, name: &str) -> Result<(), (ErrorCode, Refused)> {
        match self.transactions.is_open(&name.to_owned()) {
            true => Ok(()),
            false => Err(no_transaction(name)),
        }
    }

    /// A session that has not connected yet; `websocket` for one that
    /// arrives over WebSocket.
    pub fn new(limits: StompLimits, websocket: bool) -> StompSession {
        StompSession {
            decoder: StompDecoder::new(limits),
            version: "1.0",
            subscriptions: HashMap::new(),
            names: FastMap::default(),
            next_subscription: 1,
            receipts: HashMap::new(),
            next_request: 1,
            next_message: 1,
            heartbeat_out: None,
            last_write: Instant::now(),
            transactions: Transactions::default(),
            websocket: websocket.then(|| WebSocket::new(SUBPROTOCOLS)),
            arriving: None,
        }
    }

    /// Notes that bytes were handed to the socket.
    pub fn wrote(&mut self, now: Instant) {
        self.last_write = now;
    }

    /// Queues a heart-beat if the client asked for them and nothing else
    /// went out for their interval; true if it did.
    pub fn heartbeat_due(&mut self, out: &mut Outbound, now: Instant) -> bool {
        let Some(every) = self.heartbeat_out else {
            return false;
        };
        if !out.is_empty() || now.duration_since(self.last_write) < every {
            return false;
        }
        // A bare EOL.
        self.push_bytes(out, b"\n");
        true
    }

    fn escapes(&self) -> bool {
        self.version != "1.0"
    }

    /// Queues a STOMP frame.
    pub fn push(&self, out: &mut Outbound, frame: &StompFrame) {
        out.push_raw(self.encode(frame));
    }

    /// A frame's bytes as they go on the wire.
    pub fn encode(&self, frame: &StompFrame) -> Bytes {
        let mut buf = BytesMut::new();
        frame.encode(self.escapes(), &mut buf);
        self.wrap(&buf)
    }

    /// Queues STOMP bytes, in a WebSocket message if the connection is one.
    fn push_bytes(&self, out: &mut Outbound, bytes: &[u8]) {
        out.push_raw(self.wrap(bytes));
    }

    /// STOMP bytes as they go on the wire: in a WebSocket message if the
    /// connection is one.
    fn wrap(&self, bytes: &[u8]) -> Bytes {
        match &self.websocket {
            Some(_) => websocket::wrap_text_or_binary(bytes),
            None => Bytes::copy_from_slice(bytes),
        }
    }

    /// A request number for a frame's `receipt` header (0 if none).
    fn request_for(&mut self, frame: &StompFrame) -> u32 {
        let Some(receipt) = frame.get("receipt") else {
            return 0;
        };
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        self.receipts.insert(id, receipt.to_owned());
        id
    }

    /// Sends the RECEIPT for request `request_id`, if it asked for one,
    /// behind any answer still owed.
    pub fn receipt(&mut self, out: &mut Outbound, request_id: u32) {
        if let Some(bytes) = self.receipt_bytes(request_id) {
            out.push_answer(bytes);
        }
    }

    /// The RECEIPT for request `request_id` as wire bytes, if it asked
    /// for one.
    pub fn receipt_bytes(&mut self, request_id: u32) -> Option<Bytes> {
        let receipt = self.receipts.remove(&request_id)?;
        let mut buf = BytesMut::new();
        StompFrame::new("RECEIPT")
            .header("receipt-id", receipt)
            .encode(self.escapes(), &mut buf);
        Some(self.wrap(&buf))
    }

    /// Sends an ERROR frame; the caller closes the connection.
    pub fn error(&mut self, out: &mut Outbound, request_id: u32, code: ErrorCode, message: &str) {
        let mut frame = StompFrame::new("ERROR")
            .header("message", first_line(message))
            .header("herald-code", (code as u32).to_string())
            .header("content-type", "text/plain")
            .body(Bytes::from(format!("{message}\n")));
        if let Some(receipt) = self.receipts.remove(&request_id) {
            frame = frame.header("receipt-id", receipt);
        }
        self.push(out, &frame);
    }

    /// Sends one delivery as a MESSAGE frame; true if the server should
    /// acknowledge it itself (an `auto` subscription).
    /// A large message's body streams after the frame's head, read from
    /// its file as it is written (over WebSocket, whose messages are
    /// whole, it is read in up to `max_frame_size`).
    pub fn message(
        &mut self,
        out: &mut Outbound,
        (subscription_id, delivery_id, count): (u32, u64, u32),
        block: &Bytes,
        large: Option<&LargeStore>,
    ) -> bool {
        let Some(name) = self.names.get(&subscription_id) else {
            return true;
        };
        let mode = self.subscriptions.get(name).map_or(Ack::Auto, |s| s.1);
        let ack = (mode != Ack::Auto).then_some(delivery_id);
        let streamed = streamed_body(block).filter(|s| s.len > 0);
        let (inlined, streamed) = match (streamed, large, &self.websocket) {
            (Some(s), Some(_), None) => (None, Some(s)),
            (Some(_), _, _) => (Some(streams::inline(block.clone(), large, "STOMP")), None),
            (None, _, _) => (None, None),
        };
        let block = inlined.as_ref().unwrap_or(block);
        match (mapping::frame_from(block, name, ack, count), streamed) {
            (Ok(frame), None) => self.push(out, &frame),
            (Ok(frame), Some(s)) => {
                let mut head = BytesMut::new();
                frame.encode_head(self.escapes(), s.len, &mut head);
                out.push_raw(head.freeze());
                // The body's bytes after the head, then the NUL that ends the frame.
                let body = BodyFrames::open(large, &s, delivery_id, Raw(b"\0"));
                out.push_source(Box::new(body));
            }
            (Err(e), _) => {
                log::error!("message for STOMP subscription {name} cannot be expressed: {e}")
            }
        }
        mode == Ack::Auto
    }
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or(message)
}

/// Handles what arrived in `buf`: the WebSocket upgrade and framing if the
/// connection is one, then every whole STOMP frame.
pub fn receive(
    stomp: &mut StompSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    websocket::receive_carried(stomp, buf, session, out, ctx, decode_all)
}

impl websocket::Carried for StompSession {
    fn websocket(&mut self) -> Option<&mut websocket::WebSocket> {
        self.websocket.as_mut()
    }

    fn bad_frame(&mut self, out: &mut Outbound, _: Phase, why: String, _: u64) -> Flow {
        self.error(out, 0, ErrorCode::Malformed, &why);
        Flow::Close
    }
}

/// Decodes and handles every whole frame in `buf`.
fn decode_all(
    stomp: &mut StompSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    loop {
        if stomp.arriving.is_some() {
            match body_arriving(stomp, buf, session, out, ctx) {
                Ok(Flow::Continue) if stomp.arriving.is_none() => continue,
                Ok(flow) => return flow,
                Err((code, message)) => {
                    stomp.error(out, 0, code, &message);
                    return Flow::Close;
                }
            }
        }
        // A body past a threshold may be longer than a frame: it is read
        // on its own, after its head. Over WebSocket, whose messages are
        // whole, frames are too.
        let large = read_apart(session.phase, stomp.websocket.is_some(), ctx);
        let frame = match stomp.decoder.decode_or_head(buf, large) {
            Ok(Some(Decoded::Frame(frame))) => frame,
            Ok(Some(Decoded::Head { frame, body_len })) => {
                match large_send(frame, body_len, stomp, session, ctx) {
                    Ok(()) => continue,
                    Err((code, message)) => {
                        stomp.error(out, 0, code, &message);
                        return Flow::Close;
                    }
                }
            }
            Ok(None) => return Flow::Continue,
            Err(StompError::TooLarge { size, partial, max }) => {
                let why = crate::frontend::frame_too_large(size, partial, max, session.phase);
                stomp.error(out, 0, ErrorCode::FrameTooLarge, &why);
                return Flow::Close;
            }
            Err(e) => {
                stomp.error(
                    out,
                    0,
                    ErrorCode::Malformed,
                    &format!("malformed frame: {e}"),
                );
                return Flow::Close;
            }
        };
        if let Err((code, why)) = check_ids(&frame, ctx.shared.config.max_id_length) {
            stomp.error(out, 0, code, &why);
            return Flow::Close;
        }
        let request_id = stomp.request_for(&frame);
        match dispatch(frame, request_id, stomp, session, out, ctx) {
            Ok(Flow::Continue) => {}
            Ok(stop) => return stop,
            Err((code, message)) => {
                stomp.error(out, request_id, code, &message);
                return Flow::Close;
            }
        }
    }
}

/// What ends a STOMP frame's body.
const NUL: Option<(u8, &str)> = Some((0, "a NUL"));

/// A SEND whose body is read on its own: its head, and the request its
/// RECEIPT answers.
struct SendHead {
    frame: StompFrame,
    request_id: u32,
}

/// The head of a SEND whose body is read on its own (a large message's,
/// to a file as it comes, or gathered in memory under its address's
/// threshold): where its body goes, once the connection may send it.
fn large_send(
    mut frame: StompFrame,
    body_len: usize,
    stomp: &mut StompSession,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), (ErrorCode, Refused)> {
    check_ids(&frame, ctx.shared.config.max_id_length)?;
    let request_id = stomp.request_for(&frame);
    let to = frame
        .get("destination")
        .ok_or_else(|| {
            (
                ErrorCode::Malformed,
                mapping::MappingError::NoDestination.to_string(),
            )
        })
        .and_then(|d| mapping::destination(d).map_err(|e| (ErrorCode::Malformed, e.to_string())))?;
    let threshold = ctx
        .shared
        .broker
        .settings(to.kind, &to.name)
        .large_message_threshold;
    // A body a frame may not hold goes to a file whatever its address says.
    let must = body_len >= ctx.shared.config.max_frame_size as usize;
    let arriving = match body_len > threshold || must {
        false => Arriving::memory(SendHead { frame, request_id }, body_len, NUL),
        true => {
            resolve_reply_to(&mut frame, stomp, session, ctx)?;
            let view = message_of(&frame, stomp, ctx)?;
            if let Some(tx) = frame.get("transaction") {
                stomp.open_transaction(tx)?;
            }
            // One body arrives at a time: STOMP frames follow each other.
            let head = SendHead { frame, request_id };
            Arriving::file(head, (&view, body_len, NUL), 0, session, ctx).map_err(refused)?
        }
    };
    stomp.arriving = Some(Box::new(arriving));
    Ok(())
}

/// Takes what has come of a SEND's body read on its own; once it has all
/// come, the SEND is handled.
fn body_arriving(
    stomp: &mut StompSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, (ErrorCode, Refused)> {
    let Some(arriving) = stomp.arriving.as_mut() else {
        return Ok(Flow::Continue);
    };
    if !arriving.take(buf).map_err(refused)? {
        return Ok(Flow::Continue);
    }
    let Some(arriving) = stomp.arriving.take() else {
        return Ok(Flow::Continue);
    };
    let (
        SendHead {
            mut frame,
            request_id,
        },
        arrived,
    ) = arriving.finish().map_err(refused)?;
    match arrived {
        Arrived::Whole(body) => {
            frame.body = body;
            dispatch(frame, request_id, stomp, session, out, ctx)
        }
        Arrived::Large(view) => {
            let transaction = frame.get("transaction");
            send(view, (request_id, transaction), stomp, session, out, ctx)
        }
        // Not made for STOMP.
        Arrived::Skipped => Ok(Flow::Continue),
    }
}

/// The message a SEND makes.
fn message_of(
    frame: &StompFrame,
    stomp: &mut StompSession,
    ctx: &Context<'_>,
) -> Result<MessageView, (ErrorCode, Refused)> {
    let id = format!("ID:stomp-{}-{}", ctx.me.serial, stomp.next_message);
    stomp.next_message += 1;
    mapping::message_from(frame, id, now_ms()).map_err(|e| (ErrorCode::Malformed, e.to_string()))
}

/// Sends a SEND's message, or holds it in its transaction.
fn send(
    view: MessageView,
    (request_id, transaction): (u32, Option<&str>),
    stomp: &mut StompSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, (ErrorCode, Refused)> {
    if let Some(tx) = transaction {
        send_authorize(session, &view, ctx).map_err(refused)?;
        stomp.hold(tx, Deferred::Send(spill(view, ctx)), ctx)?;
        stomp.receipt(out, request_id);
        return Ok(Flow::Continue);
    }
    match publish(view, request_id, None, session, out, ctx) {
        Ok(Published::Now) => {
            stomp.receipt(out, request_id);
            Ok(Flow::Continue)
        }
        Ok(Published::Later) => Ok(Flow::Continue),
        Ok(Published::Held(parked)) => Ok(Flow::Park(parked)),
        Err(refusal) => Err(refused(refusal)),
    }
}

fn dispatch(
    frame: StompFrame,
    request_id: u32,
    stomp: &mut StompSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, (ErrorCode, Refused)> {
    let command = ClientCommand::parse(&frame.command);
    if session.phase == Phase::AwaitingConnect && !command.is_some_and(ClientCommand::connects) {
        let what = &frame.command;
        return Err((ErrorCode::NotConnected, format!("{what} before CONNECT")));
    }
    let Some(command) = command else {
        let other = &frame.command;
        return Err((ErrorCode::UnknownKind, format!("unknown command '{other}'")));
    };
    let malformed = |m: String| (ErrorCode::Malformed, m);
    match command {
        ClientCommand::Connect | ClientCommand::Stomp => {
            connect(&frame, request_id, stomp, session, out, ctx)
        }
        ClientCommand::Send => {
            let mut frame = frame;
            resolve_reply_to(&mut frame, stomp, session, ctx)?;
            let view = message_of(&frame, stomp, ctx)?;
            send(
                view,
                (request_id, frame.get("transaction")),
                stomp,
                session,
                out,
                ctx,
            )
        }
        ClientCommand::Subscribe => {
            subscribe(&frame, stomp, session, ctx)?;
            match durable_name(&frame) {
                // As a native durable SUBSCRIBE's: once the subscription
                // is kept, so that what is sent after it, through any
                // node, is kept for it.
                Some(_) => await_journal(request_id, Written::default(), session, out, ctx),
                None => stomp.receipt(out, request_id),
            }
            Ok(Flow::Continue)
        }
        ClientCommand::Unsubscribe => {
            let durable = durable_name(&frame);
            let id = frame.get("id").or_else(|| frame.get("destination"));
            let ended = id.and_then(|id| stomp.subscriptions.remove(id));
            match (id, &ended, durable) {
                (None, _, None) => {
                    return Err(malformed("UNSUBSCRIBE needs an id header".into()));
                }
                (Some(id), None, None) => {
                    return Err((
                        ErrorCode::UnknownSubscription,
                        format!("no subscription with id '{id}'"),
                    ));
                }
                _ => {}
            }
            if let Some((number, _)) = ended {
                stomp.names.remove(&number);
                // A client that says goodbye did not crash on what it did
                // not acknowledge: that returns as it was (STOMP cannot say
                // which messages the application read). A dropped
                // connection counts.
                end_subscription(number, Some(&[]), session, ctx);
            }
            // Naming a durable subscription deletes it too (as ActiveMQ
            // and Artemis do), whether or not this connection had it open.
            match durable {
                Some(name) => {
                    delete_durable(name, request_id, session, out, ctx).map_err(refused)?
                }
                None => stomp.receipt(out, request_id),
            }
            Ok(Flow::Continue)
        }
        ClientCommand::Ack | ClientCommand::Nack => {
            let ack = command == ClientCommand::Ack;
            let (ids, outcome) = settlement(&frame, ack, stomp, session)?;
            match frame.get("transaction") {
                Some(tx) => stomp.hold(tx, Deferred::Settle(ids, outcome), ctx)?,
                None => {
                    let mut written = Written::default();
                    settle(ids, outcome, session, &mut written, ctx);
                    if outcome == Outcome::Processed {
                        // The RECEIPT follows the acknowledgement to disk.
                        await_journal(request_id, written, session, out, ctx);
                        return Ok(Flow::Continue);
                    }
                }
            }
            stomp.receipt(out, request_id);
            Ok(Flow::Continue)
        }
        ClientCommand::Begin => {
            let tx = transaction_name(&frame)?;
            let max_open = ctx.shared.config.max_transactions_per_connection;
            if !stomp
                .transactions
                .begin(tx.to_owned(), max_open)
                .map_err(|e| refused(e.into()))?
            {
                return Err((
                    ErrorCode::Malformed,
                    format!("transaction '{tx}' is already open"),
                ));
            }
            stomp.receipt(out, request_id);
            Ok(Flow::Continue)
        }
        ClientCommand::Commit => {
            let tx = transaction_name(&frame)?;
            let held = stomp
                .transactions
                .end(&tx.to_owned())
                .ok_or_else(|| no_transaction(tx))?;
            let written = commit(held, session, ctx).map_err(refused)?;
            await_journal(request_id, written, session, out, ctx);
            Ok(Flow::Continue)
        }
        ClientCommand::Abort => {
            let tx = transaction_name(&frame)?;
            stomp
                .transactions
                .end(&tx.to_owned())
                .ok_or_else(|| no_transaction(tx))?;
            stomp.receipt(out, request_id);
            Ok(Flow::Continue)
        }
        ClientCommand::Disconnect => {
            // As UNSUBSCRIBE: a goodbye returns unacknowledged messages
            // uncounted.
            for (_, (number, _)) in stomp.subscriptions.drain() {
                stomp.names.remove(&number);
                end_subscription(number, Some(&[]), session, ctx);
            }
            stomp.receipt(out, request_id);
            Ok(Flow::Close)
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn connect(
    frame: &StompFrame,
    request_id: u32,
    stomp: &mut StompSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, (ErrorCode, Refused)> {
    if session.phase == Phase::Connected {
        return Err((ErrorCode::AlreadyConnected, "already connected".into()));
    }
    let offered = frame.get("accept-version").unwrap_or("1.0");
    let version = ["1.2", "1.1", "1.0"]
        .into_iter()
        .find(|v| offered.split(',').any(|o| o.trim() == *v))
        .ok_or_else(|| {
            (
                ErrorCode::UnsupportedVersion,
                format!("no common protocol version: the client offers {offered}, the server speaks 1.0,1.1,1.2"),
            )
        })?;
    // Heart-beats: the client says how often it will send (cx) and wants to
    // receive (cy); neither may be more often than the server's minimum.
    let (cx, cy) = match frame.get("heart-beat") {
        None => (0, 0),
        Some(hb) => {
            let parse = |s: Option<&str>| s.and_then(|s| s.trim().parse::<u32>().ok());
            let mut parts = hb.split(',');
            match (parse(parts.next()), parse(parts.next()), parts.next()) {
                (Some(cx), Some(cy), None) => (cx, cy),
                _ => {
                    return Err((
                        ErrorCode::Malformed,
                        format!("heart-beat '{hb}' is not two numbers"),
                    ))
                }
            }
        }
    };
    let config = &ctx.shared.config;
    let (floor, ceiling) = (config.min_heartbeat_ms, config.max_heartbeat_ms);
    let incoming = if cx == 0 { 0 } else { cx.clamp(floor, ceiling) };
    let outgoing = if cy == 0 { 0 } else { cy.clamp(floor, ceiling) };
    stomp.heartbeat_out = (outgoing > 0).then(|| Duration::from_millis(outgoing.into()));
    let silence_limit = match (incoming, config.stomp.idle_timeout_ms) {
        // A STOMP client that does not heart-beat has the idle timeout.
        (0, 0) => Duration::MAX,
        (0, idle) => Duration::from_millis(idle.into()),
        // STOMP peers send exactly on time: allow for the network.
        (ms, _) => Duration::from_millis(u64::from(ms) * 2),
    };
    session.set_silence_limit(silence_limit);
    stomp.version = version;
    stomp.decoder.set_escape(version != "1.0");
    stomp
        .decoder
        .set_max_frame_size(ctx.shared.config.max_frame_size as usize);
    session.phase = Phase::Connected;
    session.set_client_id(frame.get("client-id").unwrap_or_default());
    let user = frame.get("login").unwrap_or_default();
    let mut connected = StompFrame::new("CONNECTED")
        .header("version", version)
        .header("server", format!("herald/{}", env!("CARGO_PKG_VERSION")))
        .header("session", ctx.me.serial.to_string())
        .header("heart-beat", format!("{outgoing},{incoming}"));
    if let Some(notice) = ctx.shared.auth.unchecked(user, ctx.me.serial) {
        connected = connected.header("notice", notice);
    }
    // The same users as the native protocol: login and passcode.
    let done = crate::frontend::login_result(ctx.shared, ctx.me);
    let password = frame.get("passcode").unwrap_or_default();
    let peer = session.peer().map(|a| a.ip());
    match ctx.shared.auth.login(user, password, peer, done) {
        Some(principal) => {
            admit(session, principal, ctx.shared, ctx.me.serial).map_err(refused)?;
            stomp.push(out, &connected);
            Ok(Flow::Continue)
        }
        None => Ok(Flow::Login(Welcome {
            request_id,
            answer: stomp.encode(&connected),
        })),
    }
}

fn subscribe(
    frame: &StompFrame,
    stomp: &mut StompSession,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), (ErrorCode, Refused)> {
    let destination = frame.get("destination").ok_or((
        ErrorCode::Malformed,
        "SUBSCRIBE needs a destination header".into(),
    ))?;
    let id = match (frame.get("id"), stomp.version) {
        (Some(id), _) => id,
        (None, "1.0") => destination,
        (None, _) => return Err((ErrorCode::Malformed, "SUBSCRIBE needs an id header".into())),
    };
    let ack = match frame.get("ack").unwrap_or("auto") {
        "auto" => Ack::Auto,
        "client" => Ack::Client,
        "client-individual" => Ack::Individual,
        other => {
            return Err((
                ErrorCode::Malformed,
                format!("ack mode '{other}' is not auto, client or client-individual"),
            ))
        }
    };
    let target = match destination.strip_prefix("/temp-queue/") {
        Some(short) => Destination::queue(temporary(short, session, ctx)?),
        None => mapping::destination(destination)
            .map_err(|e| (ErrorCode::InvalidDestination, e.to_string()))?,
    };
    let priority = match frame
        .get("priority")
        .or_else(|| frame.get("activemq.priority"))
    {
        None => 0,
        Some(text) => text.parse().map_err(|_| {
            (
                ErrorCode::Malformed,
                format!("priority '{text}' is not a whole number (a consumer's priority)"),
            )
        })?,
    };
    let exclusive = match frame.get("activemq.exclusive").unwrap_or("false") {
        "true" => true,
        "false" => false,
        other => {
            return Err((
                ErrorCode::Malformed,
                format!("activemq.exclusive '{other}' is not true or false"),
            ))
        }
    };
    let options = Options {
        selector: frame.get("selector").unwrap_or_default(),
        durable_name: durable_name(frame).unwrap_or_default(),
        priority,
        exclusive,
        reader: crate::frontend::reader_qos(|name| frame.get(name).map(str::to_owned))
            .map_err(|why| (ErrorCode::Malformed, why))?,
    };
    subscribe_to(id, &target, ack, options, stomp, session, ctx)
}

/// Headers that name a durable subscription: ActiveMQ's, and Artemis's
/// two, which take precedence as in Artemis when a frame has several.
const DURABLE_HEADERS: [&str; 3] = [
    "durable-subscriber-name",
    "durable-subscription-name",
    "activemq.subscriptionName",
];

/// The durable subscription a SUBSCRIBE or UNSUBSCRIBE names, if any.
fn durable_name(frame: &StompFrame) -> Option<&str> {
    DURABLE_HEADERS
        .iter()
        .find_map(|h| frame.get(h))
        .filter(|name| !name.is_empty())
}

/// What a STOMP subscription may add to its destination.
#[derive(Default)]
struct Options<'a> {
    selector: &'a str,
    durable_name: &'a str,
    /// The consumer's priority among those of its queue (the `priority`
    /// header, or ActiveMQ's `activemq.priority`).
    priority: i32,
    /// ActiveMQ's `activemq.exclusive`: its queue delivers to one consumer
    /// at a time while it is attached.
    exclusive: bool,
    /// DDS reader policies (see [`crate::frontend::reader_qos`]).
    reader: herald_protocol::frame::ReaderQos,
}

/// Subscribes STOMP id `id` to `target`.
fn subscribe_to(
    id: &str,
    target: &Destination,
    ack: Ack,
    options: Options<'_>,
    stomp: &mut StompSession,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), (ErrorCode, Refused)> {
    if stomp.subscriptions.contains_key(id) {
        return Err((
            ErrorCode::DuplicateSubscription,
            format!("subscription id '{id}' is already in use"),
        ));
    }
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_subscriptions_per_connection);
    if session.subscription_count() >= limit {
        return Err((
            ErrorCode::LimitExceeded,
            format!("this connection already holds {limit} subscriptions"),
        ));
    }
    let selector = subscribe_selector(options.selector, session, ctx).map_err(refused)?;
    let number = stomp.next_subscription;
    stomp.next_subscription += 1;
    // Owned: the session is lent to `subscribe` whole.
    let (owner, user) = (session.client_id.clone(), session.principal.user.clone());
    let request = SubscribeRequest {
        kind: target.kind,
        destination: &target.name,
        selector,
        acknowledged: ack != Ack::Auto,
        prefetch: 0,
        durable_name: options.durable_name,
        client_id: &owner,
        user: &user,
        // A STOMP temporary queue is made by `temporary` beforehand.
        temporary: false,
        shared: false,
        durable: false,
        backlog: Some(session.backlog()),
        kept: true,
        no_local: false,
        priority: options.priority,
        exclusive: options.exclusive,
        reader: options.reader,
    };
    start(number, request, session, ctx).map_err(refused)?;
    stomp.subscriptions.insert(id.to_owned(), (number, ack));
    stomp.names.insert(number, id.to_owned());
    Ok(())
}

/// The connection's temporary queue `/temp-queue/<short>` (RabbitMQ's
/// convention), made on first use and deleted when the connection ends;
/// only this connection may consume from it.
fn temporary(
    short: &str,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<String, (ErrorCode, Refused)> {
    let name = format!(
        "{}{short}",
        ctx.shared.broker.temporary_prefix(ctx.me.serial)
    );
    herald_protocol::destination::validate_name(&name)
        .map_err(|e| (ErrorCode::InvalidDestination, e.to_string()))?;
    if !session.traffic().temporary_queues.contains(&name) {
        ctx.shared
            .broker
            .temporary_queue(&name, ctx.me.serial)
            .map_err(|e| refused(subscribe_refusal(e)))?;
        session.traffic().temporary_queues.push(name.clone());
    }
    Ok(name)
}

/// A SEND whose `reply-to` is `/temp-queue/<short>`: the temporary queue is
/// made, this connection subscribed to it (as `/temp-queue/<short>`, with
/// automatic acknowledgement), and the header rewritten to the queue's
/// real name so that whoever replies reaches it.
fn resolve_reply_to(
    frame: &mut StompFrame,
    stomp: &mut StompSession,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), (ErrorCode, Refused)> {
    let Some(short) = frame
        .get("reply-to")
        .and_then(|r| r.strip_prefix("/temp-queue/"))
    else {
        return Ok(());
    };
    let short = short.to_owned();
    let name = temporary(&short, session, ctx)?;
    let id = format!("/temp-queue/{short}");
    if !stomp.subscriptions.contains_key(&id) {
        let target = Destination::queue(name.clone());
        subscribe_to(
            &id,
            &target,
            Ack::Auto,
            Options::default(),
            stomp,
            session,
            ctx,
        )?;
    }
    if let Some(header) = frame.headers.iter_mut().find(|(n, _)| n == "reply-to") {
        header.1 = format!("/queue/{name}");
    }
    Ok(())
}

/// The deliveries an ACK or NACK names, by the id a MESSAGE carried (`id`
/// in 1.2, `message-id` before); in `client` mode every earlier delivery of
/// the subscription goes with it.
fn settlement(
    frame: &StompFrame,
    processed: bool,
    stomp: &StompSession,
    session: &Session,
) -> Result<(Vec<u64>, Outcome), (ErrorCode, Refused)> {
    let header = if stomp.version == "1.2" {
        "id"
    } else {
        "message-id"
    };
    let text = frame.get(header).ok_or_else(|| {
        (
            ErrorCode::Malformed,
            format!("{} needs an {header} header", frame.command),
        )
    })?;
    let unknown = || {
        (
            ErrorCode::UnknownDelivery,
            format!("'{text}' is not a message awaiting acknowledgement"),
        )
    };
    let id: u64 = text.parse().map_err(|_| unknown())?;
    let unacked = session
        .traffic_ref()
        .map(|t| &t.unacked)
        .ok_or_else(unknown)?;
    let subscription = unacked
        .get(&id)
        .map(|u| u.subscription_id)
        .ok_or_else(unknown)?;
    let cumulative = stomp
        .names
        .get(&subscription)
        .and_then(|n| stomp.subscriptions.get(n))
        .is_some_and(|s| s.1 == Ack::Client);
    let mut ids: Vec<u64> = if cumulative {
        unacked
            .iter()
            .filter(|(d, u)| u.subscription_id == subscription && **d <= id)
            .map(|(d, _)| *d)
            .collect()
    } else {
        vec![id]
    };
    ids.sort_unstable();
    let outcome = if processed {
        Outcome::Processed
    } else {
        Outcome::Redeliver
    };
    Ok((ids, outcome))
}

fn no_transaction(name: &str) -> (ErrorCode, Refused) {
    (
        ErrorCode::Malformed,
        format!("no open transaction '{name}'"),
    )
}

/// Headers whose values the server keeps (as ids, names, or keys to
/// answer with) for as long as what they name lasts.
const ID_HEADERS: [&str; 10] = [
    "id",
    "receipt",
    "transaction",
    "client-id",
    "activemq.subscriptionName",
    "durable-subscription-name",
    "durable-subscriber-name",
    "subscription",
    "message-id",
    "ack",
];

/// Refuses a frame with an id or name longer than `max_id_length`.
fn check_ids(frame: &StompFrame, max: usize) -> Result<(), (ErrorCode, Refused)> {
    for name in ID_HEADERS {
        if let Some(value) = frame.get(name) {
            check_id_length(&format!("'{name}' header"), value, max).map_err(refused)?;
        }
    }
    Ok(())
}

fn transaction_name(frame: &StompFrame) -> Result<&str, (ErrorCode, Refused)> {
    frame.get("transaction").ok_or_else(|| {
        (
            ErrorCode::Malformed,
            format!("{} needs a transaction header", frame.command),
        )
    })
}
