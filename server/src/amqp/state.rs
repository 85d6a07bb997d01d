//! An AMQP connection's state: its stage, sessions, links and the
//! deliveries whose outcome it owes, and how it writes frames.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use herald_protocol::amqp::delivery::DeliveryState;
use herald_protocol::amqp::performative::{
    AmqpCondition, Attach, Detach, Disposition, Open, TransferHead,
};
use herald_protocol::amqp::sasl::outcome;
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};
use herald_protocol::message::streamed_body;
use herald_protocol::{Destination, ErrorCode};

use super::mapping;
use crate::auth::Principal;
use crate::frontend::chunks::Chunks;
use crate::frontend::outbound::Outbound;
use crate::frontend::streams::{self, BodyFrames, Framer};
use crate::store::large::{LargeStore, Spool};
use crate::websocket::{self, WebSocket};

/// The WebSocket subprotocol AMQP rides in.
const SUBPROTOCOLS: &[&str] = &["amqp"];
use crate::broker::Written;
use crate::frontend::{await_journal, Context, Flow, Refusal};
use crate::session::Session;

/// Error conditions (part 2.8.15 and after).
pub(super) mod condition {
    pub const INTERNAL: &str = "amqp:internal-error";
    pub const NOT_FOUND: &str = "amqp:not-found";
    pub const UNAUTHORIZED: &str = "amqp:unauthorized-access";
    pub const DECODE: &str = "amqp:decode-error";
    pub const LIMIT: &str = "amqp:resource-limit-exceeded";
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    pub const FORCED: &str = "amqp:connection:forced";
    pub const FRAMING: &str = "amqp:connection:framing-error";
    pub const UNATTACHED: &str = "amqp:session:unattached-handle";
    pub const HANDLE_IN_USE: &str = "amqp:session:handle-in-use";
    pub const MESSAGE_SIZE: &str = "amqp:link:message-size-exceeded";
    pub const TRANSFER_LIMIT: &str = "amqp:link:transfer-limit-exceeded";
    pub const TXN_ROLLBACK: &str = "amqp:transaction:rollback";
}

/// The largest frame taken before `open` (SASL, headers, the open itself).
pub(super) const HANDSHAKE_FRAME: u32 = 64 * 1024;
/// A session's transfer window: renewed with every flow this side sends.
pub(super) const WINDOW: u32 = 1 << 20;

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Waiting for the client's first protocol header.
    Header,
    /// SASL: waiting for `sasl-init`.
    SaslInit,
    /// SASL: the credentials are being checked.
    LoggingIn,
    /// SASL done: waiting for the AMQP protocol header.
    AmqpHeader,
    /// Waiting for `open`.
    Open,
    /// Open: sessions and links.
    Opened,
    /// `close` sent or received: nothing more is read.
    Closed,
}

/// An AMQP session: one `begin` on one channel.
pub(super) struct Channel {
    /// The next transfer id expected from the client.
    pub(super) next_incoming_id: u32,
    /// Its links, by the client's handle.
    pub(super) links: HashMap<u32, Link>,
    /// Handles this side detached whose detach from the client has not
    /// come yet: frames for them are dropped, their detach ends them.
    pub(super) detaching: HashSet<u32>,
    /// The next transfer id this side sends.
    pub(super) next_outgoing_id: u32,
    /// The next delivery id this side gives.
    pub(super) next_delivery_id: u32,
    /// Deliveries this side sent that the client has not settled:
    /// delivery id → (the link's handle, Herald's delivery id).
    pub(super) unsettled: HashMap<u32, (u32, u64)>,
}

impl Channel {
    /// A session the client began, its first transfer id `next_incoming_id`.
    pub(super) fn new(next_incoming_id: u32) -> Channel {
        Channel {
            next_incoming_id,
            links: HashMap::new(),
            detaching: HashSet::new(),
            next_outgoing_id: 0,
            next_delivery_id: 0,
            unsettled: HashMap::new(),
        }
    }
}

/// An answer that waits for the broker: a delivery's outcome (once the
/// journal has the message), or a detach, encoded, whose durable
/// subscription's deletion must be kept first (in the journal, or in a
/// cluster in Redis's registry).
#[derive(Debug, Clone)]
pub(super) enum Owed {
    Outcome { channel: u16, delivery_id: u32 },
    Kept(Bytes),
}

/// What an AMQP connection needs besides the protocol-neutral session.
pub struct AmqpSession {
    pub(super) stage: Stage,
    /// Who logged in through SASL, until `open` admits the connection.
    pub(super) principal: Option<Box<Principal>>,
    /// The largest frame the client takes.
    pub(super) peer_max_frame: u32,
    /// Its sessions, by the client's channel (this side answers on the
    /// same number).
    pub(super) channels: HashMap<u16, Channel>,
    /// Answers that wait, by request id.
    pub(super) owed: HashMap<u32, Owed>,
    /// Attaches answered once their subscriptions are kept, by the token
    /// of their wait: (channel, handle, the answer).
    pub(super) attaching: HashMap<u32, (u16, u32, Box<Attach>)>,
    pub(super) next_request: u32,
    /// Numbers the messages that come without an id, after this prefix
    /// (`ID:amqp-<connection>-`, made at `open`, not per message).
    pub(super) next_message: u64,
    pub(super) id_prefix: String,
    /// The blocks of the messages it sends are cut from these.
    pub(super) chunks: Chunks,
    /// The credit each link on which the client sends is given.
    pub(super) link_credit: u32,
    /// Links on which this side sends, by their subscription's id:
    /// (channel, handle).
    pub(super) subscriptions: HashMap<u32, (u16, u32)>,
    pub(super) next_subscription: u32,
    /// Numbers the transactions the coordinator declares.
    pub(super) next_txn: u32,
    /// How often this side must send a frame, if the client asked.
    pub(super) heartbeat: Option<Duration>,
    pub(super) last_write: Instant,
    /// The WebSocket it rides in, on the AMQP-over-WebSocket listener.
    pub(super) websocket: Option<Box<WebSocket>>,
}

thread_local! {
    /// The last message this worker wrote for an AMQP receiver, and its
    /// sections after the header (the same for every delivery of it): a
    /// message that goes to many receivers is encoded once. Holding the
    /// message keeps its address from being another's.
    static LAST_SECTIONS: std::cell::RefCell<Option<(Bytes, Bytes)>> =
        const { std::cell::RefCell::new(None) };
}

/// The largest message whose sections [`LAST_SECTIONS`] keeps: what a
/// worker holds for it stays small.
const CACHED_BLOCK: usize = 64 * 1024;

/// A fault that ends the connection: the condition and why.
pub(super) struct Fatal(pub(super) &'static str, pub(super) String);

impl AmqpSession {
    /// Lets go of the chunk its messages are cut from: one that went
    /// quiet holds none.
    pub fn release_chunk(&mut self) {
        self.chunks.release();
    }

    /// A connection that has sent nothing yet, in WebSocket messages if
    /// `websocket`.
    pub fn new(websocket: bool) -> AmqpSession {
        AmqpSession {
            stage: Stage::Header,
            principal: None,
            peer_max_frame: HANDSHAKE_FRAME,
            channels: HashMap::new(),
            owed: HashMap::new(),
            attaching: HashMap::new(),
            next_request: 1,
            next_message: 1,
            id_prefix: String::new(),
            chunks: Chunks::default(),
            link_credit: 1,
            subscriptions: HashMap::new(),
            next_subscription: 1,
            next_txn: 1,
            heartbeat: None,
            last_write: Instant::now(),
            websocket: websocket.then(|| Box::new(WebSocket::new(SUBPROTOCOLS))),
        }
    }

    /// Bytes as they go on the wire: in a WebSocket message if the
    /// connection is one.
    fn wire(&self, bytes: Bytes) -> Bytes {
        match &self.websocket {
            Some(_) => websocket::wrap(0x2, &bytes),
            None => bytes,
        }
    }

    /// Queues a protocol header.
    pub(super) fn header(&self, out: &mut Outbound, header: ProtocolHeader) {
        out.push_raw(self.wire(Bytes::copy_from_slice(&header.bytes())));
    }

    /// Notes that bytes were handed to the socket.
    pub fn wrote(&mut self, now: Instant) {
        self.last_write = now;
    }

    /// Queues an empty frame if the client asked for frames at least every
    /// so often and nothing else went out for that long; true if it did.
    pub fn heartbeat_due(&mut self, out: &mut Outbound, now: Instant) -> bool {
        let Some(every) = self.heartbeat else {
            return false;
        };
        if !out.is_empty() || now.duration_since(self.last_write) < every {
            return false;
        }
        let mut b = BytesMut::with_capacity(8);
        FrameHeader::write(FrameKind::Amqp, 0, 0, &mut b);
        out.push_raw(self.wire(b.freeze()));
        true
    }

    /// A frame's bytes as they go on the wire: `body` after its header,
    /// then `payload`.
    fn frame(&self, kind: FrameKind, channel: u16, body: &Value, payload: &[u8]) -> Bytes {
        let mut encoded = BytesMut::new();
        body.encode(&mut encoded);
        self.encoded_frame(kind, channel, &encoded, payload)
    }

    /// [`frame`](Self::frame), its body encoded already.
    fn encoded_frame(&self, kind: FrameKind, channel: u16, body: &[u8], payload: &[u8]) -> Bytes {
        let mut frame = BytesMut::with_capacity(8 + body.len() + payload.len());
        FrameHeader::write(kind, channel, body.len() + payload.len(), &mut frame);
        frame.extend_from_slice(body);
        frame.extend_from_slice(payload);
        self.wire(frame.freeze())
    }

    /// Queues a frame: `body` after its header, then `payload`.
    pub(super) fn send(
        &self,
        out: &mut Outbound,
        kind: FrameKind,
        channel: u16,
        body: &Value,
        payload: &[u8],
    ) {
        out.push_raw(self.frame(kind, channel, body, payload));
    }

    /// Queues a performative.
    pub(super) fn perform(&self, out: &mut Outbound, channel: u16, p: Performative) {
        self.send(out, FrameKind::Amqp, channel, &p.to_value(), &[]);
    }

    /// The bytes of a performative, for an answer owed in its place.
    fn performance_bytes(&self, channel: u16, p: &Performative) -> Bytes {
        self.frame(FrameKind::Amqp, channel, &p.to_value(), &[])
    }

    pub(super) fn sasl(&self, out: &mut Outbound, frame: Sasl) {
        self.send(out, FrameKind::Sasl, 0, &frame.to_value(), &[]);
    }

    /// Closes the connection with `error`: in the protocol it has reached.
    pub(super) fn fail(
        &mut self,
        out: &mut Outbound,
        Fatal(condition, why): Fatal,
        serial: u64,
    ) -> Flow {
        log::info!("AMQP connection {serial}: {condition}: {why}");
        match self.stage {
            Stage::Header | Stage::AmqpHeader => {
                self.header(out, ProtocolHeader::Amqp);
            }
            Stage::SaslInit | Stage::LoggingIn => self.sasl(
                out,
                Sasl::Outcome {
                    code: match condition {
                        condition::UNAUTHORIZED => outcome::AUTH,
                        _ => outcome::SYS,
                    },
                    additional_data: None,
                },
            ),
            Stage::Open => {
                // A close must follow an open of this side's.
                self.perform(out, 0, Performative::Open(server_open_minimal()));
                self.close_with(out, condition, why);
            }
            Stage::Opened => self.close_with(out, condition, why),
            Stage::Closed => {}
        }
        self.stage = Stage::Closed;
        Flow::Close
    }

    pub(super) fn close_with(&self, out: &mut Outbound, condition: &'static str, why: String) {
        self.perform(out, 0, Performative::Close(error(condition, why)));
    }

    /// Queues a detach of `handle` for good, with why.
    pub(super) fn detach(
        &self,
        out: &mut Outbound,
        channel: u16,
        handle: u32,
        (condition, why): (&str, String),
    ) {
        let detach = Detach {
            handle,
            closed: true,
            error: error(condition, why),
        };
        self.perform(out, channel, Performative::Detach(detach));
    }

    /// Reports an error the server raises (a timeout, a shutdown, an
    /// administrator's close, a refused login): the connection closes.
    pub fn error(&mut self, out: &mut Outbound, code: ErrorCode, message: &str, serial: u64) {
        let condition = match code {
            ErrorCode::AuthenticationFailed | ErrorCode::NotAuthorized => condition::UNAUTHORIZED,
            ErrorCode::LimitExceeded => condition::LIMIT,
            ErrorCode::Internal => condition::INTERNAL,
            _ => condition::FORCED,
        };
        let _ = self.fail(out, Fatal(condition, message.to_owned()), serial);
    }

    /// Settles request `request_id` (a delivery waiting for its outcome):
    /// `accepted`, or `rejected` with why.
    pub fn settle_request(
        &mut self,
        out: &mut Outbound,
        request_id: u32,
        result: Result<(), Refusal>,
    ) {
        if let Some(bytes) = self.answer_bytes(request_id, result) {
            out.push_answer(bytes);
        }
    }

    /// [`settle_request`](Self::settle_request)'s disposition as bytes, for
    /// one owed in its place.
    pub fn answer_bytes(&mut self, request_id: u32, result: Result<(), Refusal>) -> Option<Bytes> {
        match self.owed.remove(&request_id)? {
            Owed::Outcome {
                channel,
                delivery_id,
            } => {
                let settled = settled_as(delivery_id, outcome(result));
                Some(self.performance_bytes(channel, &settled))
            }
            Owed::Kept(answer) => match result {
                Ok(()) => Some(answer),
                // The client must not go on believing in a subscription (or
                // its end) that is not kept.
                Err(refusal) => {
                    let why = format!("a subscription change is not kept: {}", refusal.message());
                    log::warn!("AMQP: {why}; closing the connection");
                    let close = Performative::Close(error(condition::INTERNAL, why));
                    Some(self.performance_bytes(0, &close))
                }
            },
        }
    }

    /// Sends `p` (a detach that deleted a durable subscription) once the
    /// deletion is kept, so that nothing sent after it, through any node,
    /// is kept for the subscription; answers owed before it go first.
    pub(super) fn perform_when_kept(
        &mut self,
        out: &mut Outbound,
        channel: u16,
        p: Performative,
        session: &mut Session,
        ctx: &mut Context<'_>,
    ) {
        let answer = self.performance_bytes(channel, &p);
        let id = self.owe_answer(Owed::Kept(answer));
        await_journal(id, Written::default(), session, out, ctx);
    }

    /// The outgoing link `handle` on `channel`, if there is one.
    pub(super) fn outgoing(&mut self, channel: u16, handle: u32) -> Option<&mut Outgoing> {
        match self.channels.get_mut(&channel)?.links.get_mut(&handle)? {
            Link::Outgoing(link) => Some(link),
            Link::Incoming(_) | Link::Dormant(_) => None,
        }
    }

    /// Queues one delivery of subscription `subscription_id` for its link:
    /// sent now if the client gave credit, else kept until it does.
    /// Whether the server must acknowledge it itself: one sent settled.
    pub fn message(
        &mut self,
        out: &mut Outbound,
        (subscription_id, delivery_id, count): (u32, u64, u32),
        block: &Bytes,
        large: Option<&LargeStore>,
    ) -> bool {
        let Some(&(channel, handle)) = self.subscriptions.get(&subscription_id) else {
            return true;
        };
        let Some(link) = self.outgoing(channel, handle) else {
            return true;
        };
        if link.credit == 0 || link.held.is_some() {
            link.waiting.push_back((delivery_id, count, block.clone()));
            return false;
        }
        self.transfer_out(out, (channel, handle), (delivery_id, count, block), large)
    }

    /// Sends one delivery on an outgoing link that has credit, in as many
    /// frames as the client's max-frame-size needs; a large message's body
    /// follows from its file in frames of its own, read as they are
    /// written. Whether it went settled.
    pub(super) fn transfer_out(
        &mut self,
        out: &mut Outbound,
        (channel, handle): (u16, u32),
        (herald_id, count, block): (u64, u32, &Bytes),
        large: Option<&LargeStore>,
    ) -> bool {
        let max_frame = self.peer_max_frame as usize;
        // A body of up to 4 GiB is one data section (a vbin32) streamed;
        // a larger one, or one without a store, goes inline or is said
        // not to be carried.
        let streamed = streamed_body(block).filter(|s| s.len > 0);
        let (inlined, streamed) = match (streamed, large) {
            (Some(s), Some(_)) if s.len <= u64::from(u32::MAX) => (None, Some(s)),
            (Some(_), _) => (Some(streams::inline(block.clone(), large, "AMQP")), None),
            (None, _) => (None, None),
        };
        let block = inlined.as_ref().unwrap_or(block);
        let Some(ch) = self.channels.get_mut(&channel) else {
            return true;
        };
        let Some(Link::Outgoing(link)) = ch.links.get_mut(&handle) else {
            return true;
        };
        let m = match herald_protocol::message::MessageRef::read(block) {
            Ok(m) => m,
            Err(e) => {
                log::error!("a message for AMQP cannot be read: {e}");
                return true;
            }
        };
        link.credit -= 1;
        link.delivery_count = link.delivery_count.wrapping_add(1);
        let settled = link.presettled;
        let delivery_id = ch.next_delivery_id;
        ch.next_delivery_id = ch.next_delivery_id.wrapping_add(1);
        if !settled {
            ch.unsettled.insert(delivery_id, (handle, herald_id));
        }
        let tag = delivery_id.to_be_bytes();
        let first = TransferHead {
            handle,
            delivery_id: Some(delivery_id),
            delivery_tag: Some(&tag),
            message_format: Some(0),
            settled,
            more: false,
            aborted: false,
        };
        // Written in place as one frame, cut from the connection's chunk:
        // its header, the transfer, the message's sections.
        let frame = self.chunks.room(block.len() + 256);
        frame.put_bytes(0, 8);
        first.encode(frame);
        let payload_at = frame.len();
        mapping::header_to(&m, count, mapping::now_ms(), frame);
        let sections_at = frame.len();
        let encoded = LAST_SECTIONS.with_borrow(|last| match last {
            Some((b, sections)) if b.as_ptr() == block.as_ptr() && b.len() == block.len() => {
                frame.extend_from_slice(sections);
                true
            }
            _ => false,
        });
        if !encoded {
            mapping::sections_to(&m, block, frame);
        }
        let len = frame.len();
        let whole = len <= max_frame && streamed.is_none();
        if whole {
            FrameHeader::write(FrameKind::Amqp, channel, len - 8, &mut &mut frame[..8]);
        }
        let frame = self.chunks.cut();
        if !encoded && block.len() <= CACHED_BLOCK {
            let sections = frame.slice(sections_at..);
            LAST_SECTIONS.set(Some((block.clone(), sections)));
        }
        if whole {
            ch.next_outgoing_id = ch.next_outgoing_id.wrapping_add(1);
            out.push_raw(self.wire(frame));
            return settled;
        }
        // Too large for one frame: in pieces, each after a transfer that
        // says whether more follow (the first alone names the delivery).
        let payload = frame.slice(payload_at..);
        let mut rest = &payload[..];
        let mut head = BytesMut::new();
        let mut transfer = TransferHead {
            more: true,
            ..first
        };
        loop {
            head.clear();
            transfer.encode(&mut head);
            let room = max_frame.saturating_sub(8 + head.len()).max(1);
            let (part, left) = rest.split_at(rest.len().min(room));
            if left.is_empty() && streamed.is_none() {
                // `more` costs no byte more than its false.
                head.clear();
                TransferHead {
                    more: false,
                    ..transfer
                }
                .encode(&mut head);
            }
            out.push_raw(self.encoded_frame(FrameKind::Amqp, channel, &head, part));
            if let Some(ch) = self.channels.get_mut(&channel) {
                ch.next_outgoing_id = ch.next_outgoing_id.wrapping_add(1);
            }
            rest = left;
            if rest.is_empty() {
                break;
            }
            transfer = continued(handle, true);
        }
        if let Some(s) = streamed {
            let pieces = Pieces::new((channel, handle), max_frame, self.websocket.is_some());
            // The frames to come, counted now: the session's next outgoing
            // id is what it will be once they have gone.
            let frames = s.len.div_ceil(pieces.piece_len() as u64) as u32;
            if let Some(ch) = self.channels.get_mut(&channel) {
                ch.next_outgoing_id = ch.next_outgoing_id.wrapping_add(frames);
            }
            let body = BodyFrames::open(large, &s, herald_id, pieces);
            out.push_source(Box::new(body));
        }
        settled
    }

    /// Owes the outcome of delivery `delivery_id` on `channel`: the request
    /// id the broker answers.
    pub(super) fn owe(&mut self, channel: u16, delivery_id: u32) -> u32 {
        self.owe_answer(Owed::Outcome {
            channel,
            delivery_id,
        })
    }

    fn owe_answer(&mut self, owed: Owed) -> u32 {
        let id = self.next_id();
        self.owed.insert(id, owed);
        id
    }

    /// A number for a request or a wait, never 0.
    fn next_id(&mut self) -> u32 {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        id
    }

    /// Answers the attach of outgoing link `handle` with `reply` once its
    /// (durable or shared) subscription is kept, as a native durable
    /// SUBSCRIBE's RECEIPT: what is sent after it, through any node, is
    /// kept for it. The link holds what it is routed until then.
    pub(super) fn attach_when_kept(
        &mut self,
        (channel, handle): (u16, u32),
        reply: Box<Attach>,
        ctx: &mut Context<'_>,
    ) {
        if let Some(link) = self.outgoing(channel, handle) {
            link.held = Some(FlowAsks::default());
        }
        let token = self.next_id();
        self.attaching.insert(token, (channel, handle, reply));
        let done = crate::frontend::kept(ctx.shared, ctx.me, token);
        ctx.shared.broker.barrier(Some(ctx.me), done);
    }

    /// The answer to the attach of `handle` on `channel` if it still
    /// waits, sent now (the client detaches the link or ends its session
    /// first: the attach is answered before that is); what flows asked of
    /// the link meanwhile.
    pub(super) fn attach_now(&mut self, out: &mut Outbound, channel: u16, handle: u32) -> FlowAsks {
        let token = self
            .attaching
            .iter()
            .find(|(_, (c, h, _))| (*c, *h) == (channel, handle))
            .map(|(token, _)| *token);
        let mut asks = FlowAsks::default();
        if let Some((channel, handle, reply)) = token.and_then(|t| self.attaching.remove(&t)) {
            if let Some(link) = self.outgoing(channel, handle) {
                asks = link.held.take().unwrap_or_default();
                self.perform(out, channel, Performative::Attach(reply));
            }
        }
        asks
    }
}

/// The transfer that goes on with a delivery begun before: `more`
/// frames follow it or not.
fn continued(handle: u32, more: bool) -> TransferHead<'static> {
    TransferHead {
        handle,
        delivery_id: None,
        delivery_tag: None,
        message_format: None,
        settled: false,
        more,
        aborted: false,
    }
}

/// A large message's body in transfers that go on with its delivery, as
/// large as the client's max-frame-size allows; the last says no more
/// follow.
struct Pieces {
    channel: u16,
    handle: u32,
    /// The continuing transfer's bytes (one more than not, with `more`
    /// true or false alike).
    transfer: BytesMut,
    piece_len: usize,
    websocket: bool,
}

impl Pieces {
    fn new((channel, handle): (u16, u32), max_frame: usize, websocket: bool) -> Pieces {
        let mut transfer = BytesMut::new();
        continued(handle, true).encode(&mut transfer);
        Pieces {
            channel,
            handle,
            piece_len: max_frame.saturating_sub(8 + transfer.len()).max(1),
            transfer,
            websocket,
        }
    }
}

impl Framer for Pieces {
    fn piece_len(&self) -> usize {
        self.piece_len
    }

    fn head(&mut self, n: usize, last: bool, frame: &mut Vec<u8>) {
        self.transfer.clear();
        continued(self.handle, !last).encode(&mut self.transfer);
        let mut header = [0u8; 8];
        FrameHeader::write(
            FrameKind::Amqp,
            self.channel,
            self.transfer.len() + n,
            &mut &mut header[..],
        );
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&self.transfer);
    }

    fn finish(&self, frame: Vec<u8>) -> Bytes {
        match self.websocket {
            true => websocket::wrap(0x2, &frame),
            false => Bytes::from(frame),
        }
    }

    fn give_up(&mut self) -> Option<Bytes> {
        // The delivery aborted: the client drops what it has of it.
        let mut transfer = BytesMut::new();
        TransferHead {
            aborted: true,
            ..continued(self.handle, false)
        }
        .encode(&mut transfer);
        let mut frame = Vec::with_capacity(8 + transfer.len());
        let mut header = [0u8; 8];
        FrameHeader::write(
            FrameKind::Amqp,
            self.channel,
            transfer.len(),
            &mut &mut header[..],
        );
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&transfer);
        Some(self.finish(frame))
    }
}

/// An error field: a condition and why.
pub(super) fn error(condition: &str, why: String) -> Option<AmqpCondition> {
    Some(AmqpCondition {
        condition: condition.into(),
        description: Some(why),
    })
}

/// The disposition that settles delivery `delivery_id` (one the client
/// sent) with `state`.
pub(super) fn settled_as(delivery_id: u32, state: DeliveryState) -> Performative {
    Performative::Disposition(Disposition {
        role_receiver: true,
        first: delivery_id,
        last: None,
        settled: true,
        state: state.to_value(),
    })
}

/// An `open` this side sends before a close, when the client's open
/// could not be taken.
fn server_open_minimal() -> Open {
    Open {
        container_id: "herald".into(),
        hostname: None,
        max_frame_size: HANDSHAKE_FRAME,
        channel_max: 0,
        idle_time_out: 0,
        offered_capabilities: Vec::new(),
        desired_capabilities: Vec::new(),
        properties: Value::Null,
    }
}

/// A link of a session.
pub(super) enum Link {
    /// The client sends on it.
    Incoming(Incoming),
    /// This side sends on it.
    Outgoing(Outgoing),
    /// Names a durable subscription, (client id, name), without consuming
    /// it: a detach that closes it ends the subscription.
    Dormant((String, String)),
}

/// A link on which this side sends: a subscription.
pub(super) struct Outgoing {
    /// Its subscription's id on this connection.
    pub(super) subscription_id: u32,
    /// Messages the client lets this side send now.
    pub(super) credit: u32,
    /// Deliveries so far (the link's delivery count).
    pub(super) delivery_count: u32,
    /// Its attach is not answered yet (its durable or shared subscription
    /// is being kept): what the broker routes to it waits, whatever the
    /// credit, so that no transfer precedes the attach; and a drain or
    /// echo a flow asks for meanwhile is answered after it.
    pub(super) held: Option<FlowAsks>,
    /// Its deliveries go settled (at most once).
    pub(super) presettled: bool,
    /// What the broker routed to it beyond its credit: (Herald's delivery
    /// id, times delivered, the message block). A queue's are bounded by
    /// the consumer's prefetch.
    pub(super) waiting: std::collections::VecDeque<(u64, u32, Bytes)>,
    /// The durable subscription it consumes, (client id, name): a detach
    /// that closes the link ends it.
    pub(super) durable: Option<(String, String)>,
    /// It browses a queue: `waiting` holds what the queue held when it
    /// attached, sent settled, consuming nothing; no subscription.
    pub(super) browsing: bool,
}

/// What a flow asks of an outgoing link besides credit.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FlowAsks {
    /// Use up the credit left and say so.
    pub(super) drain: bool,
    /// Answer with the link's state.
    pub(super) echo: bool,
}

/// A link on which the client sends.
pub(super) struct Incoming {
    /// Where its messages go; `None`: the anonymous relay (each message's
    /// `to`).
    pub(super) destination: Option<std::sync::Arc<Destination>>,
    /// Messages the client may still send.
    pub(super) credit: u32,
    /// Deliveries so far (the link's delivery count).
    pub(super) delivery_count: u32,
    /// A delivery whose frames are still coming.
    pub(super) partial: Option<Partial>,
    /// It is attached to the transaction coordinator: what comes on it
    /// declares and discharges transactions.
    pub(super) coordinator: bool,
}

/// A message arriving in several transfer frames.
pub(super) struct Partial {
    pub(super) delivery_id: u32,
    pub(super) settled: bool,
    pub(super) bytes: BytesMut,
    /// The transaction it is sent in, if it is.
    pub(super) txn: Option<Bytes>,
    /// Where its body goes (see `super::intake`).
    pub(super) body: Intake,
}

/// Where a delivery's body goes as its transfers come.
pub(super) enum Intake {
    /// Into memory, until its start shows whether the body is large.
    Unknown,
    /// Into memory: it is not large, or cannot be taken in pieces.
    Memory,
    /// Into a file: it is large.
    File(Box<Arriving>),
    /// Nowhere: the message is refused for this reason, which its outcome
    /// gives once its last transfer has come.
    Refused(Fault),
}

/// A large body arriving.
pub(super) struct Arriving {
    /// Its file.
    pub(super) spool: Spool,
    /// The message, its body numbered as the file.
    pub(super) block: Bytes,
    /// What came after the body's bytes: a footer, checked and dropped.
    pub(super) after: BytesMut,
}

/// Why a message is refused: an AMQP condition and its description.
pub(super) type Fault = (&'static str, String);

/// The outcome a delivery gets from what the broker made of it.
pub(super) fn outcome(result: Result<(), Refusal>) -> DeliveryState {
    match result {
        Ok(()) => DeliveryState::Accepted,
        Err(refusal) => {
            let (condition, why) = fault(refusal);
            DeliveryState::Rejected(error(condition, why))
        }
    }
}

/// A refusal as AMQP says it.
pub(super) fn fault(refusal: Refusal) -> Fault {
    let condition = match refusal.code() {
        ErrorCode::NotAuthorized | ErrorCode::AuthenticationFailed => condition::UNAUTHORIZED,
        ErrorCode::LimitExceeded | ErrorCode::QueueFull => condition::LIMIT,
        ErrorCode::InvalidDestination | ErrorCode::UndeclaredTopic => condition::NOT_FOUND,
        ErrorCode::Internal => condition::INTERNAL,
        ErrorCode::TransactionRolledBack => condition::TXN_ROLLBACK,
        _ => condition::NOT_ALLOWED,
    };
    (condition, refusal.message().to_owned())
}
