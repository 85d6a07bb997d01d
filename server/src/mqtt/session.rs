//! What an MQTT connection keeps besides the protocol-neutral session: its
//! version and terms, its subscriptions' options, the publishes it owes an
//! answer for, and the QoS 1 and 2 deliveries in flight to it.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;
use herald_protocol::message::{streamed_body, MessageRef};
use herald_protocol::mqtt::{
    self, Ack, ConnAck, Decoder, Disconnect, Packet, Properties, Property, Publish, QoS,
    SubscribeOptions, Version, Will,
};
use herald_protocol::ErrorCode;

use super::common::{
    connack_311, encode, reason_for, settle_deliveries, Fatal, IdPrefix, DURABLE_PREFIX,
    SUBPROTOCOLS,
};
use super::mapping::{self, Outgoing};
use crate::broker::Written;
use crate::collections::FastMap;
use crate::frontend::arriving::Arriving;
use crate::frontend::chunks::Chunks;
use crate::frontend::outbound::Outbound;
use crate::frontend::streams::{self, BodyFrames, Raw};
use crate::frontend::{await_journal, end_subscription, Context, Flow, PacketIds, Refusal};
use crate::session::{Phase, Session};
use crate::store::large::LargeStore;
use crate::websocket::{self, WebSocket};

/// One subscription.
pub(super) struct Sub {
    /// The most QoS it takes.
    pub qos: QoS,
    /// Not the connection's own messages.
    pub no_local: bool,
    /// Live messages keep the retain flag they were published with.
    pub retain_as_published: bool,
    /// Its filter starts with a wildcard: not topics that start with `$`.
    pub dollar_guard: bool,
    /// It is a durable subscription of the session.
    pub durable: bool,
    /// The durable (or shared) subscription's name; empty if none.
    pub durable_name: String,
    /// The client's Subscription Identifier for it (5.0), sent with each
    /// message it delivers.
    pub identifier: Option<u32>,
}

/// An answer owed until what it answers is kept: a QoS 1 or 2 publish's
/// (in the journal), or a SUBACK's or UNSUBACK's (encoded already) whose
/// durable or shared subscriptions changed (in the journal, or in a
/// cluster in Redis's registry).
#[derive(Debug, Clone)]
pub(super) enum Owed {
    PubAck(u16),
    PubRec(u16),
    Kept(Bytes),
}

/// What a QoS 1 or 2 delivery waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// QoS 1, sent.
    Puback,
    /// QoS 2, sent.
    Pubrec,
    /// QoS 2, PUBREL sent.
    Pubcomp,
}

/// A delivery in flight.
struct InFlight {
    delivery_id: u64,
    stage: Stage,
}

/// A session's subscriptions and its QoS 1 and 2 exchanges.
#[derive(Default)]
pub(super) struct Exchanges {
    /// Subscriptions by the server's number for them (what deliveries
    /// name).
    pub(super) subs: FastMap<u32, Sub>,
    /// The filter of each, as the client wrote it → its number.
    pub(super) numbers: HashMap<String, u32>,
    /// Publishes waiting for the journal, by request id.
    pub(super) owed: FastMap<u32, Owed>,
    /// How many of `owed` are owed a PUBACK.
    pubacks_owed: usize,
    /// QoS 2 publishes received (PUBREC sent) whose PUBREL has not come.
    pub(super) incoming: HashSet<u16>,
    /// The client's topic aliases.
    aliases: FastMap<u16, String>,
    /// The aliases the server set for the client on this connection, by
    /// topic, and the last one given.
    aliases_out: FastMap<String, u16>,
    next_alias_out: u16,
    /// QoS 1 and 2 deliveries sent and not completed, by packet id.
    in_flight: FastMap<u16, InFlight>,
    /// A PUBLISH's payload on its way, read past its head
    /// (`super::large_publish`).
    pub(super) arriving: Option<Box<Arriving<PublishHead>>>,
    /// Deliveries waiting for room in the window: (delivery id, packet,
    /// and a large message's payload, which follows it from its file).
    waiting: VecDeque<(u64, Publish, Option<Payload>)>,
    /// The server's number for the next subscription (from 1).
    pub(super) next_subscription: u32,
    /// The request id for the next publish whose answer is owed (from 1).
    next_request: u32,
}

/// What a PUBLISH whose payload is read on its own keeps: the packet as
/// it came (for one handled whole), or the QoS and packet id of the
/// message it made (for a large one).
pub(super) enum PublishHead {
    Whole(Publish),
    Large((QoS, u16)),
    /// Refused before its payload came: answered once it has.
    Refused((QoS, u16), Refusal),
    /// A QoS 2 PUBLISH resent after it was taken, answered already.
    Taken,
}

/// A large message's payload on its way from its file.
type Payload = BodyFrames<Raw>;

/// What an MQTT connection needs besides the protocol-neutral session.
pub struct MqttSession {
    pub(super) decoder: Decoder,
    /// The version CONNECT asked for (3.1.1 until then).
    pub(super) version: Version,
    /// CONNECT was taken and the connection waits for its login.
    pub(super) connecting: bool,
    /// The session outlives the connection.
    pub(super) persistent: bool,
    /// 5.0's session expiry interval, in seconds (u32::MAX: never).
    pub(super) expiry: u32,
    /// Clean session (3.1.1) or clean start (5.0).
    pub(super) clean: bool,
    /// The server chose the client id.
    pub(super) assigned: bool,
    /// The client asked for response information.
    pub(super) response_info: bool,
    /// Published if the connection ends without a DISCONNECT.
    pub(super) will: Option<Box<Will>>,
    pub(super) next_message: u64,
    /// Its subscriptions and QoS 1 and 2 exchanges: made when the first
    /// is, so that a connection that only connects holds none of it.
    ex: Option<Box<Exchanges>>,
    next_packet_id: u16,
    /// QoS 1 and 2 deliveries in flight at once, at most.
    pub(super) window: u16,
    /// The largest packet the client takes.
    pub(super) max_packet: u32,
    /// Topic aliases the server may set for the client: the client's
    /// Topic Alias Maximum, within the server's own.
    pub(super) aliases_out_max: u16,
    /// The keep-alive the server holds a 5.0 client to instead of the one
    /// it asked for, told in CONNACK.
    pub(super) server_keep_alive: Option<u16>,
    /// For MQTT over WebSocket, the WebSocket's state.
    pub(super) websocket: Option<Box<WebSocket>>,
    /// Where the messages it publishes and the packets it is sent are
    /// written.
    pub(super) chunks: Chunks,
}

impl MqttSession {
    /// Its subscriptions and exchanges, made on first use.
    pub(super) fn ex(&mut self) -> &mut Exchanges {
        self.ex.get_or_insert_with(Box::default)
    }

    /// Lets go of the chunk its messages and packets are cut from: one
    /// that went quiet holds none (a chunk is 8 KiB).
    pub fn release_chunk(&mut self) {
        self.chunks.release();
    }

    /// Its subscriptions and exchanges, if it has any.
    pub(super) fn exchanges(&self) -> Option<&Exchanges> {
        self.ex.as_deref()
    }

    /// Whether a PUBLISH's payload is on its way.
    pub(super) fn arriving(&self) -> bool {
        self.exchanges().is_some_and(|e| e.arriving.is_some())
    }

    /// A session that has not connected yet; its
    /// first packet may be `max_connect` bytes at most.
    pub fn new(max_connect: usize, window: u16, websocket: bool) -> MqttSession {
        MqttSession {
            decoder: Decoder::new(max_connect),
            version: Version::V311,
            connecting: false,
            persistent: false,
            expiry: 0,
            clean: true,
            assigned: false,
            response_info: false,
            will: None,
            next_message: 1,
            ex: None,
            next_packet_id: 1,
            window,
            max_packet: u32::MAX,
            aliases_out_max: 0,
            server_keep_alive: None,
            websocket: websocket.then(|| Box::new(WebSocket::new(SUBPROTOCOLS))),
            chunks: Chunks::default(),
        }
    }

    /// Bytes as they go on the wire: in a binary WebSocket message if the
    /// connection is one.
    pub(super) fn wrap(&self, bytes: Bytes) -> Bytes {
        match &self.websocket {
            Some(_) => websocket::wrap(0x2, &bytes),
            None => bytes,
        }
    }

    /// The client's QoS 1 and 2 publishes the server has not finished
    /// with (no PUBACK or PUBCOMP sent yet), what its Receive Maximum
    /// bounds: the QoS 1 ones owed a PUBACK, and the QoS 2 ones from their
    /// arrival to their PUBREL (each of those owed a PUBREC is among them).
    pub(super) fn publishes_in_flight(&self) -> usize {
        self.exchanges()
            .map_or(0, |ex| ex.pubacks_owed + ex.incoming.len())
    }

    /// A request id for an answer that is owed.
    pub(super) fn owe(&mut self, owed: Owed) -> u32 {
        let ex = self.ex();
        let id = ex.next_request.max(1);
        ex.next_request = id.wrapping_add(1);
        ex.pubacks_owed += usize::from(matches!(owed, Owed::PubAck(_)));
        ex.owed.insert(id, owed);
        id
    }

    /// Sends `packet` (a SUBACK or UNSUBACK) once the subscriptions it
    /// made or ended are kept, so that a message published after it,
    /// through any node, is kept for them or no longer is; answers owed
    /// before it go first.
    pub(super) fn answer_when_kept(
        &mut self,
        out: &mut Outbound,
        packet: Packet,
        session: &mut Session,
        ctx: &mut Context<'_>,
    ) {
        let bytes = self.wrap(encode(&packet, self.version));
        let id = self.owe(Owed::Kept(bytes));
        await_journal(id, Written::default(), session, out, ctx);
    }

    /// A PUBLISH's topic, its alias (5.0) set or looked up.
    pub(super) fn resolve_alias(&mut self, p: &mut Publish, max: u16) -> Result<String, Fatal> {
        let alias = p.properties.0.iter().find_map(|p| match p {
            Property::TopicAlias(a) => Some(*a),
            _ => None,
        });
        let Some(alias) = alias else {
            return Ok(p.topic.clone());
        };
        if alias == 0 || alias > max {
            return Err(Fatal(
                0x94,
                format!("topic alias {alias} is not 1 to {max}"),
            ));
        }
        if p.topic.is_empty() {
            return self
                .ex()
                .aliases
                .get(&alias)
                .cloned()
                .ok_or_else(|| Fatal(0x82, format!("topic alias {alias} was never set")));
        }
        self.ex().aliases.insert(alias, p.topic.clone());
        Ok(p.topic.clone())
    }

    /// Sends one delivery to connection `serial`; true if the server
    /// acknowledges it itself (it goes at QoS 0, or not at all).
    /// A large message's payload, read from its file as it is written
    /// after its PUBLISH's head, up to what a remaining length holds;
    /// over WebSocket, whose messages are whole, or past that, it is
    /// read into the PUBLISH up to `max_frame_size`.
    pub fn message(
        &mut self,
        out: &mut Outbound,
        (subscription_id, delivery_id, count): (u32, u64, u32),
        block: &Bytes,
        (serial, large): (u64, Option<&LargeStore>),
    ) -> bool {
        let streamed = streamed_body(block).filter(|s| s.len > 0);
        let (inlined, payload) = match (streamed, large, &self.websocket) {
            (Some(s), Some(_), None) if s.len < mqtt::MAX_REMAINING as u64 => {
                let payload = BodyFrames::open(large, &s, delivery_id, Raw(b""));
                (None, Some(payload))
            }
            (Some(_), _, _) => (Some(streams::inline(block.clone(), large, "MQTT")), None),
            (None, _, _) => (None, None),
        };
        let block = inlined.as_ref().unwrap_or(block);
        let Some(sub) = self
            .exchanges()
            .and_then(|ex| ex.subs.get(&subscription_id))
        else {
            return true;
        };
        let m = match MessageRef::read(block) {
            Ok(m) => m,
            Err(e) => {
                log::error!("a message for MQTT cannot be read: {e}");
                return true;
            }
        };
        if sub.dollar_guard && m.destination.starts_with('$') {
            return true;
        }
        if sub.no_local && m.message_id.starts_with(IdPrefix::default().of(serial)) {
            return true;
        }
        let qos = sub.qos.min(mapping::published_qos(&m));
        let how = Outgoing {
            qos,
            packet_id: None,
            dup: count > 1 && qos != QoS::AtMostOnce,
            retain_as_published: sub.retain_as_published,
            subscription_id: sub.identifier,
        };
        let publish = mapping::publish_from(&m, block, &how, self.version);
        if qos == QoS::AtMostOnce {
            self.send(out, Packet::Publish(publish), payload);
            return true;
        }
        self.ex().waiting.push_back((delivery_id, publish, payload));
        self.fill_window(out);
        false
    }

    /// Sends what waits, as far as the window lets.
    fn fill_window(&mut self, out: &mut Outbound) {
        while self.ex().in_flight.len() < usize::from(self.window) {
            let Some((delivery_id, mut publish, payload)) = self.ex().waiting.pop_front() else {
                return;
            };
            let id = self.free_packet_id();
            publish.packet_id = Some(id);
            let stage = match publish.qos {
                QoS::ExactlyOnce => Stage::Pubrec,
                _ => Stage::Puback,
            };
            self.ex()
                .in_flight
                .insert(id, InFlight { delivery_id, stage });
            self.send(out, Packet::Publish(publish), payload);
        }
    }

    /// Queues a packet, unless it is over the client's maximum (5.0 says
    /// such a message is dropped as if it were delivered). A PUBLISH goes
    /// with a topic alias where the client takes them: the topic and a new
    /// alias the first time, the alias alone after that.
    /// A large message's `payload` follows its PUBLISH from its file.
    fn send(&mut self, out: &mut Outbound, mut packet: Packet, payload: Option<Payload>) {
        let need = match &packet {
            Packet::Publish(p) => p.payload.len() + p.topic.len() + 64,
            _ => 64,
        };
        let new_alias = match &mut packet {
            Packet::Publish(p) if self.aliases_out_max > 0 => self.alias(p),
            _ => None,
        };
        let after = payload.as_ref().map_or(0, |p| p.remaining() as usize);
        mqtt::encode_head(&packet, self.version, after, self.chunks.room(need));
        let bytes = self.chunks.cut();
        let size = bytes.len() + after;
        if size > self.max_packet as usize || size > mqtt::MAX_REMAINING {
            log::debug!(
                "a {size}-byte packet is over the client's maximum of {}: dropped",
                self.max_packet
            );
            // The client never heard of the alias it would have set.
            if let Some(topic) = new_alias {
                self.ex().aliases_out.remove(&topic);
            }
            return;
        }
        out.push_raw(self.wrap(bytes));
        if let Some(payload) = payload {
            out.push_source(Box::new(payload));
        }
    }

    /// Gives `p` a topic alias: the alias alone if its topic has one, else
    /// the topic and a new one while any are left (aliases go first come,
    /// first served, for the life of the connection). Returns the topic
    /// that was given a new alias.
    fn alias(&mut self, p: &mut Publish) -> Option<String> {
        let max = self.aliases_out_max;
        let ex = self.ex();
        if let Some(&alias) = ex.aliases_out.get(&p.topic) {
            p.topic.clear();
            p.properties.0.push(Property::TopicAlias(alias));
            return None;
        }
        if ex.next_alias_out >= max {
            return None;
        }
        // One given back (its packet was dropped) is not given again.
        ex.next_alias_out += 1;
        ex.aliases_out.insert(p.topic.clone(), ex.next_alias_out);
        p.properties.0.push(Property::TopicAlias(ex.next_alias_out));
        Some(p.topic.clone())
    }

    fn free_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = self.next_packet_id.wrapping_add(1).max(1);
            if !self.ex().in_flight.contains_key(&id) {
                return id;
            }
        }
    }

    /// The packet ids of the QoS 2 exchanges in the middle, for the
    /// session to keep while the client is away.
    pub(super) fn qos2_ids(&mut self) -> PacketIds {
        let Some(ex) = self.ex.as_deref_mut() else {
            return PacketIds::default();
        };
        let released = ex
            .in_flight
            .iter()
            .filter(|(_, f)| f.stage == Stage::Pubcomp)
            .map(|(id, _)| *id)
            .collect();
        PacketIds {
            received: ex.incoming.drain().collect(),
            released,
        }
    }

    /// Takes up the QoS 2 exchanges the session left in the middle: a
    /// publish sent again is not routed twice, and each delivery the
    /// client has gets its PUBREL again (a client may hand a QoS 2
    /// message to its application only then).
    pub(super) fn resume_qos2(&mut self, ids: PacketIds, out: &mut Outbound) {
        if ids == PacketIds::default() {
            return;
        }
        self.ex().incoming.extend(ids.received);
        for id in ids.released {
            let settled = InFlight {
                delivery_id: 0,
                stage: Stage::Pubcomp,
            };
            self.ex().in_flight.insert(id, settled);
            self.answer(out, Packet::PubRel(self.ack(id, 0)));
        }
    }

    /// Ends the subscription to `filter`, if there is one, and deletes its
    /// durable subscription unless that is named `keep` (a subscription
    /// to the same filter with the same options takes it over, with what
    /// it kept); whether there was one.
    /// The number of the subscription to `filter` if it has these terms
    /// (a Subscription Identifier aside, which it takes, unless it is in
    /// a durable subscription's name).
    pub(super) fn same_subscription(
        &mut self,
        filter: &str,
        options: &SubscribeOptions,
        identifier: Option<u32>,
        durable_name: &str,
    ) -> Option<u32> {
        let ex = self.ex.as_deref_mut()?;
        let number = *ex.numbers.get(filter)?;
        let sub = ex.subs.get_mut(&number)?;
        let same = sub.qos == options.qos
            && sub.no_local == options.no_local
            && sub.retain_as_published == options.retain_as_published
            && sub.durable_name == durable_name;
        if same {
            sub.identifier = identifier;
        }
        same.then_some(number)
    }

    pub(super) fn end_subscription(
        &mut self,
        filter: &str,
        keep: &str,
        session: &mut Session,
        ctx: &mut Context<'_>,
    ) -> bool {
        let Some(ex) = self.ex.as_deref_mut() else {
            return false;
        };
        let Some((number, sub)) = ex
            .numbers
            .remove(filter)
            .and_then(|number| Some((number, ex.subs.remove(&number)?)))
        else {
            return false;
        };
        end_subscription(number, None, session, ctx);
        if sub.durable && sub.durable_name != keep {
            let _ = ctx
                .shared
                .broker
                .unsubscribe_durable(&session.client_id, &sub.durable_name);
        }
        true
    }

    /// PUBACK: a QoS 1 delivery is done.
    pub(super) fn acknowledged(
        &mut self,
        packet_id: u16,
        session: &mut Session,
        out: &mut Outbound,
        ctx: &mut Context<'_>,
    ) {
        self.finish(packet_id, Stage::Puback, session, out, ctx);
    }

    /// PUBCOMP: a QoS 2 delivery is done.
    pub(super) fn completed(
        &mut self,
        packet_id: u16,
        session: &mut Session,
        out: &mut Outbound,
        ctx: &mut Context<'_>,
    ) {
        self.finish(packet_id, Stage::Pubcomp, session, out, ctx);
    }

    fn finish(
        &mut self,
        packet_id: u16,
        stage: Stage,
        session: &mut Session,
        out: &mut Outbound,
        ctx: &mut Context<'_>,
    ) {
        match self.ex().in_flight.get(&packet_id) {
            Some(f) if f.stage == stage => {}
            _ => {
                log::debug!(
                    "connection {}: an acknowledgement of nothing in flight ({packet_id})",
                    ctx.me.serial
                );
                return;
            }
        }
        if let Some(f) = self.ex().in_flight.remove(&packet_id) {
            if stage == Stage::Puback {
                settle_deliveries(vec![f.delivery_id], session, ctx);
            }
        }
        self.fill_window(out);
    }

    /// PUBREC: the client has a QoS 2 delivery (settled now: it is the
    /// client's), or refuses it (5.0); PUBREL follows.
    pub(super) fn received(
        &mut self,
        ack: herald_protocol::mqtt::Ack,
        session: &mut Session,
        out: &mut Outbound,
        ctx: &mut Context<'_>,
    ) {
        let Some(f) = self.ex().in_flight.get_mut(&ack.packet_id) else {
            return;
        };
        if f.stage != Stage::Pubrec {
            return;
        }
        let delivery_id = f.delivery_id;
        if ack.reason >= 0x80 {
            self.ex().in_flight.remove(&ack.packet_id);
            self.fill_window(out);
        } else {
            f.stage = Stage::Pubcomp;
            self.answer(out, Packet::PubRel(self.ack(ack.packet_id, 0)));
        }
        settle_deliveries(vec![delivery_id], session, ctx);
    }
}

impl MqttSession {
    /// Queues an answer, behind any still owed.
    pub(super) fn answer(&self, out: &mut Outbound, packet: Packet) {
        out.push_answer(self.wrap(encode(&packet, self.version)));
    }

    /// An acknowledgement with a reason (3.1.1 has none to carry).
    pub(super) fn ack(&self, packet_id: u16, reason: u8) -> Ack {
        Ack {
            packet_id,
            reason: if self.version == Version::V5 {
                reason
            } else {
                0
            },
            properties: Properties::default(),
        }
    }

    /// Refuses what the client did and closes: 5.0 says why in CONNACK
    /// (before the connection is accepted) or DISCONNECT.
    pub(super) fn refuse(
        &mut self,
        out: &mut Outbound,
        phase: Phase,
        Fatal(reason, why): Fatal,
        serial: u64,
    ) -> Flow {
        log::info!("connection {serial} (MQTT): closing: {why}");
        let packet = match (phase, self.version) {
            (Phase::AwaitingConnect, Version::V5) => Packet::ConnAck(ConnAck {
                session_present: false,
                code: reason,
                properties: Properties(vec![Property::ReasonString(why)]),
            }),
            (Phase::AwaitingConnect, Version::V311) => Packet::ConnAck(ConnAck {
                session_present: false,
                code: connack_311(reason),
                properties: Properties::default(),
            }),
            (Phase::Connected, Version::V5) => Packet::Disconnect(Disconnect {
                reason,
                properties: Properties(vec![Property::ReasonString(why)]),
            }),
            (Phase::Connected, Version::V311) => return Flow::Close,
        };
        // Only a CONNECT that was understood is answered with a CONNACK.
        if phase == Phase::AwaitingConnect && !self.connecting && reason != 0x84 {
            return Flow::Close;
        }
        self.answer(out, packet);
        Flow::Close
    }

    /// Reports that another connection took the session over (5.0's
    /// 0x8E) before the connection closes.
    pub fn taken_over(&mut self, out: &mut Outbound, phase: Phase, serial: u64) {
        let why = "another connection took the session over".to_owned();
        let _ = self.refuse(out, phase, Fatal(0x8E, why), serial);
    }

    /// Reports a server-side error (a keep-alive timeout, a shutdown, an
    /// administrator) before the connection closes.
    pub fn error(&mut self, out: &mut Outbound, phase: Phase, code: ErrorCode, why: &str) {
        let _ = self.refuse(out, phase, Fatal(reason_for(code), why.to_owned()), 0);
    }

    /// The answer to publish request `request_id`, now that it is routed
    /// (and, at QoS 1 and 2, on disk) or refused: PUBACK or PUBREC, with
    /// the reason in 5.0; 3.1.1 cannot say no, so the connection closes.
    pub fn settle_request(
        &mut self,
        out: &mut Outbound,
        request_id: u32,
        result: Result<(), Refusal>,
    ) -> Flow {
        match self.answer_bytes(request_id, result) {
            (Some(bytes), flow) => {
                out.push_answer(bytes);
                flow
            }
            (None, flow) => flow,
        }
    }

    /// [`settle_request`](Self::settle_request)'s answer as bytes, for one
    /// owed in its place; and whether the connection goes on.
    pub fn answer_bytes(
        &mut self,
        request_id: u32,
        result: Result<(), Refusal>,
    ) -> (Option<Bytes>, Flow) {
        let Some(ex) = self.ex.as_deref_mut() else {
            return (None, Flow::Continue);
        };
        let Some(owed) = ex.owed.remove(&request_id) else {
            return (None, Flow::Continue);
        };
        ex.pubacks_owed -= usize::from(matches!(owed, Owed::PubAck(_)));
        let (packet_id, exactly_once) = match owed {
            Owed::PubAck(id) => (id, false),
            Owed::PubRec(id) => (id, true),
            Owed::Kept(answer) => {
                return match result {
                    Ok(()) => (Some(answer), Flow::Continue),
                    Err(refusal) => {
                        // The subscriptions the client was about to be told
                        // of cannot be kept: it must not believe they are.
                        log::warn!(
                            "MQTT subscriptions not kept, closing the connection: {refusal:?}"
                        );
                        (None, Flow::Close)
                    }
                };
            }
        };
        let reason = match &result {
            Ok(()) => 0,
            Err(refusal) => reason_for(refusal.code()),
        };
        if let (Err(refusal), Version::V311) = (&result, self.version) {
            log::info!("MQTT 3.1.1 publish refused, closing the connection: {refusal:?}");
            return (None, Flow::Close);
        }
        let mut ack = self.ack(packet_id, reason);
        if let (Err(refusal), Version::V5) = (&result, self.version) {
            ack.properties = Properties(vec![Property::ReasonString(refusal.message().to_owned())]);
        }
        let packet = match exactly_once {
            false => Packet::PubAck(ack),
            true => {
                if reason != 0 {
                    // Not routed: the id is free for the client to retry.
                    self.ex().incoming.remove(&packet_id);
                }
                Packet::PubRec(ack)
            }
        };
        (
            Some(self.wrap(encode(&packet, self.version))),
            Flow::Continue,
        )
    }
}

/// A persistent session's durable subscription name for a filter, its
/// options and its Subscription Identifier:
/// `mqtt:<qos><no local><retain as published>[#<identifier>]:<filter>`.
pub(super) fn durable_name(filter: &str, o: &SubscribeOptions, identifier: Option<u32>) -> String {
    let identifier = identifier.map_or(String::new(), |id| format!("#{id}"));
    format!(
        "{}{}{}{}{identifier}:{filter}",
        DURABLE_PREFIX,
        o.qos as u8,
        u8::from(o.no_local),
        u8::from(o.retain_as_published)
    )
}

/// The filter, options and Subscription Identifier a durable subscription
/// name holds.
pub(super) fn parse_durable_name(name: &str) -> Option<(String, SubscribeOptions, Option<u32>)> {
    let rest = name.strip_prefix(DURABLE_PREFIX)?;
    let (terms, filter) = rest.split_once(':')?;
    let (flags, identifier) = match terms.split_once('#') {
        Some((flags, id)) => (flags, Some(id.parse().ok().filter(|&id| id != 0)?)),
        None => (terms, None),
    };
    let flags = flags.as_bytes();
    if flags.len() != 3 {
        return None;
    }
    let qos = QoS::from_bits(flags[0].wrapping_sub(b'0')).ok()?;
    Some((
        filter.to_owned(),
        SubscribeOptions {
            qos,
            no_local: flags[1] == b'1',
            retain_as_published: flags[2] == b'1',
            retain_handling: 0,
        },
        identifier,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_names_keep_the_options_and_the_identifier_and_read_old_names() {
        let options = SubscribeOptions {
            qos: QoS::ExactlyOnce,
            no_local: true,
            retain_as_published: false,
            retain_handling: 2,
        };
        let read = |name: &str| {
            parse_durable_name(name)
                .map(|(f, o, id)| (f, o.qos, o.no_local, o.retain_as_published, id))
        };
        for identifier in [None, Some(1), Some(268_435_455)] {
            let name = durable_name("a/+/#", &options, identifier);
            assert_eq!(
                read(&name),
                Some(("a/+/#".into(), QoS::ExactlyOnce, true, false, identifier)),
                "{name}"
            );
        }
        // A filter may hold '#' and ':'; names made before identifiers read
        // as before.
        assert_eq!(
            read("mqtt:101:x/#:y"),
            Some(("x/#:y".into(), QoS::AtLeastOnce, false, true, None))
        );
        for bad in [
            "mqtt:10:x",
            "mqtt:101#:x",
            "mqtt:101#0:x",
            "mqtt:101#z:x",
            "other:101:x",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }
}
