//! The MQTT 3.1.1 and 5.0 front-end: MQTT packets in, the same broker core
//! as the native protocol and STOMP, MQTT packets out.
//!
//! An MQTT connection is served by the same acceptor and workers as the
//! others; it carries an [`MqttSession`] beside its protocol-neutral
//! `Session`. Topics map onto Herald topics (`a/b` ↔ `a.b`, see
//! `herald_protocol::mqtt::topic`); QoS 1 and 2 publishes are persistent
//! messages, acknowledged (PUBACK, PUBREC) once the journal has them. A
//! subscription at QoS 1 or 2 is an acknowledged one; a persistent
//! session's subscriptions are durable subscriptions of its client id,
//! named `mqtt:<filter>`, so they and their messages outlive the
//! connection, and the server's restart.
//!
//! Errors: MQTT 5.0 answers with a reason code (in the acknowledgement, or
//! a DISCONNECT that closes the connection); 3.1.1 has return codes only in
//! CONNACK and SUBACK, so anything else it cannot carry closes the
//! connection, and the server logs why.

mod common;
mod mapping;
mod session;

pub use session::MqttSession;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use herald_protocol::frame::ReaderQos;
use herald_protocol::mqtt::{
    self, topic, ConnAck, Connect, Decoded, MqttError, Packet, Properties, Property, Publish, QoS,
    SubAck, Subscribe, UnsubAck, Unsubscribe, Version,
};
use herald_protocol::{DestinationKind, ErrorCode, MessageView};

use crate::auth::Principal;
use crate::broker::SubscribeRequest;
use crate::frontend::arriving::{largest_message, read_apart, Arrived, Arriving};
use crate::frontend::chunks::Chunks;
use crate::frontend::outbound::Outbound;
use crate::frontend::{
    admit, check_id_length, publish, resend_retained, subscribe, take_over, Context, Flow,
    PacketIds, Published, Refusal, TakeOver, Welcome,
};
use crate::session::{Phase, Session};
use crate::websocket;
pub use common::SUBPROTOCOLS;
use common::{reason_for, suback_reason, Fatal, IdPrefix, DURABLE_PREFIX};
use session::{Owed, PublishHead, Sub};

/// Handles what arrived in `buf`: the WebSocket upgrade and framing if the
/// connection is one, then every whole MQTT packet.
pub fn receive(
    mqtt: &mut MqttSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    websocket::receive_carried(mqtt, buf, session, out, ctx, decode_all)
}

impl websocket::Carried for MqttSession {
    fn websocket(&mut self) -> Option<&mut websocket::WebSocket> {
        self.websocket.as_deref_mut()
    }

    fn bad_frame(&mut self, out: &mut Outbound, phase: Phase, why: String, serial: u64) -> Flow {
        self.refuse(out, phase, Fatal(0x81, why), serial)
    }
}

/// Decodes and handles every whole MQTT packet in `buf`.
fn decode_all(
    mqtt: &mut MqttSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    loop {
        if mqtt.arriving() {
            match payload_arriving(mqtt, buf, session, out, ctx) {
                Ok(Flow::Continue) if !mqtt.arriving() => continue,
                Ok(flow) => return flow,
                Err(fatal) => return mqtt.refuse(out, session.phase, fatal, ctx.me.serial),
            }
        }
        // A payload past a threshold may be larger than a packet: it is
        // read on its own, after its head. Over WebSocket, whose messages
        // are whole, packets are too.
        let large = read_apart(session.phase, mqtt.websocket.is_some(), ctx);
        let packet = match mqtt.decoder.decode_or_head(buf, large) {
            Ok(Some(Decoded::Packet(packet))) => packet,
            Ok(Some(Decoded::Head {
                publish,
                payload_len,
            })) => match large_publish(publish, payload_len, mqtt, session, out, ctx) {
                Ok(()) => continue,
                Err(fatal) => return mqtt.refuse(out, session.phase, fatal, ctx.me.serial),
            },
            Ok(None) => return Flow::Continue,
            Err(e) => {
                // Before CONNECT the version may be known from the bytes.
                mqtt.version = mqtt.decoder.version().unwrap_or(mqtt.version);
                let fatal = match e {
                    MqttError::TooLarge { size, max } => Fatal(
                        e.reason(),
                        crate::frontend::frame_too_large(size, false, max, session.phase),
                    ),
                    e => Fatal::from(e),
                };
                return mqtt.refuse(out, session.phase, fatal, ctx.me.serial);
            }
        };
        let flow = match packet {
            Packet::Connect(connect) => connect_packet(*connect, mqtt, session, out, ctx),
            _ if session.phase != Phase::Connected => Err(Fatal(0x82, "CONNECT first".into())),
            Packet::Publish(p) => publish_packet(p, mqtt, session, out, ctx),
            Packet::PubAck(ack) => {
                mqtt.acknowledged(ack.packet_id, session, out, ctx);
                Ok(Flow::Continue)
            }
            Packet::PubRec(ack) => {
                mqtt.received(ack, session, out, ctx);
                Ok(Flow::Continue)
            }
            Packet::PubComp(ack) => {
                mqtt.completed(ack.packet_id, session, out, ctx);
                Ok(Flow::Continue)
            }
            Packet::PubRel(ack) => {
                // Known or not (a PUBCOMP lost with the last connection),
                // the id is free again: 5.0 says which.
                let known = mqtt.ex().incoming.remove(&ack.packet_id);
                let reason = if known { 0 } else { 0x92 };
                mqtt.answer(out, Packet::PubComp(mqtt.ack(ack.packet_id, reason)));
                Ok(Flow::Continue)
            }
            Packet::Subscribe(s) => subscribe_packet(s, mqtt, session, out, ctx),
            Packet::Unsubscribe(u) => unsubscribe_packet(u, mqtt, session, out, ctx),
            Packet::PingReq => {
                mqtt.answer(out, Packet::PingResp);
                Ok(Flow::Continue)
            }
            Packet::Disconnect(d) => disconnect_packet(&d, mqtt),
            Packet::Auth(..) => Err(Fatal(
                0x82,
                "AUTH: no authentication method was agreed".into(),
            )),
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(Fatal(0x82, "a packet only a server sends".into()))
            }
        };
        match flow {
            Ok(Flow::Continue) if ctx.backlog.is_some() => return Flow::Continue,
            Ok(Flow::Continue) => {}
            Ok(stop) => return stop,
            Err(fatal) => return mqtt.refuse(out, session.phase, fatal, ctx.me.serial),
        }
    }
}

fn disconnect_packet(d: &mqtt::Disconnect, mqtt: &mut MqttSession) -> Result<Flow, Fatal> {
    // 0x04: disconnect, and publish the will all the same.
    if d.reason != 0x04 {
        mqtt.will = None;
    }
    // 5.0: the session's expiry may change now, but not from none.
    for p in &d.properties.0 {
        if let Property::SessionExpiry(secs) = p {
            if mqtt.expiry == 0 && *secs > 0 {
                return Err(Fatal(
                    0x82,
                    "a session expiry set at DISCONNECT for a session that had none".into(),
                ));
            }
            mqtt.expiry = *secs;
            mqtt.persistent = *secs > 0;
        }
    }
    Ok(Flow::Close)
}

fn connect_packet(
    connect: Connect,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    if session.phase == Phase::Connected || mqtt.connecting {
        return Err(Fatal(0x82, "a second CONNECT".into()));
    }
    mqtt.version = connect.version;
    mqtt.connecting = true;
    let config = &ctx.shared.config;
    let mut expiry = 0;
    for p in &connect.properties.0 {
        match p {
            Property::SessionExpiry(secs) => expiry = *secs,
            Property::ReceiveMaximum(0) => {
                return Err(Fatal(0x82, "a receive maximum of 0".into()))
            }
            Property::ReceiveMaximum(n) => mqtt.window = (*n).min(config.mqtt.receive_maximum),
            Property::MaximumPacketSize(0) => {
                return Err(Fatal(0x82, "a maximum packet size of 0".into()))
            }
            Property::MaximumPacketSize(n) => mqtt.max_packet = *n,
            Property::RequestResponseInfo(1) => mqtt.response_info = true,
            Property::TopicAliasMaximum(n) => {
                mqtt.aliases_out_max = (*n).min(config.mqtt.topic_alias_maximum)
            }
            Property::AuthMethod(m) => {
                return Err(Fatal(
                    0x8C,
                    format!("authentication method '{m}' is not supported"),
                ))
            }
            _ => {}
        }
    }
    mqtt.expiry = expiry;
    mqtt.persistent = match connect.version {
        Version::V311 => !connect.clean,
        Version::V5 => expiry > 0,
    };
    mqtt.clean = connect.clean;
    let mut client_id = connect.client_id;
    if client_id.is_empty() {
        if connect.version == Version::V311 && !connect.clean {
            return Err(Fatal(
                0x85,
                "an empty client id needs a clean session".into(),
            ));
        }
        client_id = format!("herald-{}", ctx.me.serial);
        mqtt.assigned = true;
    }
    check_id_length("client id", &client_id, config.max_id_length)
        .map_err(|r| Fatal(0x85, r.into_parts().2))?;
    mqtt.will = connect.will.map(Box::new);
    // The client's keep-alive, or the server's most if it asked for more
    // or none: a 5.0 client is told so in CONNACK [MQTT-3.1.2-21], a
    // 3.1.1 client cannot be and is refused.
    let max = config.mqtt.max_keep_alive;
    let keep_alive = match connect.keep_alive {
        asked if max == 0 || (1..=max).contains(&asked) => asked,
        asked if connect.version == Version::V311 => {
            return Err(Fatal(
                0x85,
                format!("a keep-alive of {asked} s: this server allows 1 to {max}"),
            ));
        }
        _ => {
            mqtt.server_keep_alive = Some(max);
            max
        }
    };
    // With half as much again for the network; 0 is none.
    session.set_silence_limit(match keep_alive {
        0 => Duration::MAX,
        secs => Duration::from_millis(u64::from(secs) * 1500),
    });
    session.set_client_id(&client_id);
    mqtt.decoder.set_max_size(config.max_frame_size as usize);
    let user = connect.username.unwrap_or_default();
    let password = match connect.password {
        None => String::new(),
        Some(p) => match String::from_utf8(p.to_vec()) {
            Ok(p) => p,
            // No user's password is anything but text.
            Err(_) => return Err(Fatal(0x86, "bad user name or password".into())),
        },
    };
    // Said in the log only: a CONNACK has no room for it that 3.1.1
    // clients would show.
    let _ = ctx.shared.auth.unchecked(&user, ctx.me.serial);
    let done = crate::frontend::login_result(ctx.shared, ctx.me);
    let peer = session.peer().map(|a| a.ip());
    match ctx.shared.auth.login(&user, &password, peer, done) {
        Some(principal) => admitted(principal, mqtt, session, out, ctx)
            .map_err(|(code, why)| Fatal(reason_for(code), why)),
        None => Ok(Flow::Login(Welcome {
            request_id: 0,
            answer: Bytes::new(),
        })),
    }
}

/// Goes on with a connection whose login succeeded: takes its client id
/// over from a connection that still holds it (MQTT's session takeover),
/// then resumes or starts its session and sends CONNACK. `Flow::Login` if
/// it waits for the other connection to close.
pub fn admitted(
    principal: Principal,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, (ErrorCode, String)> {
    if let Some(will) = &mqtt.will {
        let (kind, name) = topic::to_destination(&will.topic);
        if let Err(denied) = principal.check(crate::auth::Permission::Publish, kind, &name) {
            return Err((ErrorCode::NotAuthorized, denied.to_string()));
        }
    }
    if let Err(refusal) = admit(session, principal.clone(), ctx.shared, ctx.me.serial) {
        let taken = take_over(&session.client_id, principal.clone(), ctx.shared, ctx.me);
        // Its holder closed between the two: the id is free now, unless a
        // third connection took it in that moment (then it is refused).
        let refusal = match taken {
            TakeOver::Waiting => {
                return Ok(Flow::Login(Welcome {
                    request_id: 0,
                    answer: Bytes::new(),
                }))
            }
            TakeOver::Free => admit(session, principal, ctx.shared, ctx.me.serial).err(),
            TakeOver::Refused => Some(refusal),
        };
        if let Some(refusal) = refusal {
            let (code, _, why) = refusal.into_parts();
            return Err((code, why));
        }
    }
    session.phase = Phase::Connected;
    mqtt.connecting = false;
    let client = session.client_id.clone();
    // Back in time: its will stays unsaid, its session lives on, with the
    // QoS 2 publishes it has not released.
    let ids = ctx.shared.away.back(&client);
    let kept = ctx.shared.broker.durables_of(&client, DURABLE_PREFIX);
    let present = !mqtt.clean && !kept.is_empty();
    if mqtt.clean {
        for name in &kept {
            let _ = ctx.shared.broker.unsubscribe_durable(&client, name);
        }
    }
    let mut properties = Vec::new();
    if mqtt.version == Version::V5 {
        let config = &ctx.shared.config;
        if mqtt.assigned {
            properties.push(Property::AssignedClientId(client.to_string()));
        }
        properties.extend([
            Property::ReceiveMaximum(config.mqtt.receive_maximum),
            // A PUBLISH may be as large as a large message (its payload
            // goes to a file as it comes), up to what clients take.
            Property::MaximumPacketSize(
                largest_message(mqtt.websocket.is_some(), ctx).min(mqtt::MAX_REMAINING as u64)
                    as u32,
            ),
            Property::TopicAliasMaximum(config.mqtt.topic_alias_maximum),
            Property::RetainAvailable(1),
            Property::WildcardAvailable(1),
            Property::SubscriptionIdsAvailable(1),
            Property::SharedAvailable(1),
        ]);
        // Response Information only when asked for [MQTT-3.1.2-28], and
        // only where the client id makes a topic without wildcards.
        let prefix = &config.mqtt.response_topic_prefix;
        if mqtt.response_info && !prefix.is_empty() && !topic::has_wildcard(&client) {
            properties.push(Property::ResponseInfo(format!("{prefix}/{client}")));
        }
        if let Some(secs) = mqtt.server_keep_alive {
            properties.push(Property::ServerKeepAlive(secs));
        }
    }
    let connack = ConnAck {
        session_present: present,
        code: 0,
        properties: Properties(properties),
    };
    mqtt.answer(out, Packet::ConnAck(connack));
    if !mqtt.clean {
        mqtt.resume_qos2(ids, out);
    }
    if present {
        // The session's subscriptions, as it left them: what they kept
        // follows the CONNACK.
        for name in kept {
            let Some((filter, options, identifier)) = session::parse_durable_name(&name) else {
                continue;
            };
            let terms = (options, identifier, Resumed::Yes, ReaderQos::default());
            if let Err(why) = subscribe_one(&filter, terms, mqtt, session, ctx) {
                log::warn!(
                    "connection {}: the session's subscription to '{filter}' does not resume: {}",
                    ctx.me.serial,
                    why.1
                );
            }
        }
    }
    Ok(Flow::Continue)
}

fn publish_packet(
    p: Publish,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    match taken(p, mqtt, out, ctx)? {
        Some((view, ids)) => publish_view(view, ids, mqtt, session, out, ctx),
        None => Ok(Flow::Continue),
    }
}

/// A PUBLISH's QoS and packet id (0 for QoS 0).
type Ids = (QoS, u16);

/// The message a client's PUBLISH makes, with its QoS and packet id;
/// `None` for a QoS 2 PUBLISH resent after it was routed (its PUBREC is
/// sent again).
fn taken(
    mut p: Publish,
    mqtt: &mut MqttSession,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Option<(MessageView, Ids)>, Fatal> {
    if p.properties
        .0
        .iter()
        .any(|p| matches!(p, Property::SubscriptionId(_)))
    {
        return Err(Fatal(
            0x82,
            "a PUBLISH from a client with a subscription identifier [MQTT-3.3.4-6]".into(),
        ));
    }
    let topic = mqtt.resolve_alias(&mut p, ctx.shared.config.mqtt.topic_alias_maximum)?;
    let packet_id = p.packet_id.unwrap_or(0);
    if p.qos == QoS::ExactlyOnce && mqtt.ex().incoming.contains(&packet_id) {
        // A resent PUBLISH whose PUBREC was lost: routed once already.
        mqtt.answer(out, Packet::PubRec(mqtt.ack(packet_id, 0)));
        return Ok(None);
    }
    if p.qos != QoS::AtMostOnce
        && mqtt.publishes_in_flight() >= usize::from(ctx.shared.config.mqtt.receive_maximum)
    {
        return Err(Fatal(
            0x93,
            "more QoS 1 and 2 publishes in flight than the receive maximum".into(),
        ));
    }
    let mut prefix = IdPrefix::default();
    let id = (prefix.of(ctx.me.serial), mqtt.next_message);
    mqtt.next_message += 1;
    match mapping::message_from(&p, &topic, id, mapping::now_ms(), &mut mqtt.chunks) {
        Ok(view) => Ok(Some((view, (p.qos, packet_id)))),
        Err(e) => Err(Fatal(e.reason(), e.to_string())),
    }
}

/// Routes the message a PUBLISH made, and answers it as its QoS says.
fn publish_view(
    view: MessageView,
    (qos, packet_id): Ids,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let request_id = owed(mqtt, (qos, packet_id));
    match publish(view, request_id, None, session, out, ctx) {
        Ok(Published::Now) => Ok(mqtt.settle_request(out, request_id, Ok(()))),
        Ok(Published::Later) => Ok(Flow::Continue),
        Ok(Published::Held(parked)) => Ok(Flow::Park(parked)),
        Err(refusal) => answer_refused(refusal, request_id, mqtt, out),
    }
}

/// The request a PUBLISH's answer is owed under (0 for QoS 0).
fn owed(mqtt: &mut MqttSession, (qos, packet_id): Ids) -> u32 {
    match qos {
        QoS::AtMostOnce => 0,
        QoS::AtLeastOnce => mqtt.owe(Owed::PubAck(packet_id)),
        QoS::ExactlyOnce => {
            mqtt.ex().incoming.insert(packet_id);
            mqtt.owe(Owed::PubRec(packet_id))
        }
    }
}

/// A refused PUBLISH's answer: its PUBACK or PUBREC with the reason, or
/// for QoS 0, which has none, the end of the connection.
fn answer_refused(
    refusal: crate::frontend::Refusal,
    request_id: u32,
    mqtt: &mut MqttSession,
    out: &mut Outbound,
) -> Result<Flow, Fatal> {
    match request_id {
        0 => Err(refused(refusal)),
        _ => Ok(mqtt.settle_request(out, request_id, Err(refusal))),
    }
}

/// The head of a PUBLISH whose payload is read on its own: a large
/// message's (past its address's threshold, or more than a packet may
/// be) goes to a file as it comes, once the client may send it; one under
/// its threshold is gathered and the packet handled whole.
fn large_publish(
    p: Publish,
    len: usize,
    mqtt: &mut MqttSession,
    session: &Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<(), Fatal> {
    let Some((view, ids)) = taken(p.clone(), mqtt, out, ctx)? else {
        mqtt.ex().arriving = Some(Box::new(Arriving::skip(PublishHead::Taken, len, None)));
        return Ok(());
    };
    let threshold = ctx
        .shared
        .broker
        .settings(view.destination_kind, view.destination())
        .large_message_threshold;
    let must = len >= ctx.shared.config.max_frame_size as usize;
    let arriving = match len > threshold || must {
        false => Arriving::memory(PublishHead::Whole(p), len, None),
        // One payload arrives at a time: packets follow each other.
        true => {
            let head = PublishHead::Large(ids);
            match Arriving::file(head, (&view, len, None), 0, session, ctx) {
                Ok(arriving) => arriving,
                // Refused before a byte is written: its payload is dropped
                // as it comes, and then answered.
                Err(refusal) => Arriving::skip(PublishHead::Refused(ids, refusal), len, None),
            }
        }
    };
    mqtt.ex().arriving = Some(Box::new(arriving));
    Ok(())
}

/// A refusal, as the DISCONNECT that ends the connection says it.
fn refused(refusal: crate::frontend::Refusal) -> Fatal {
    let (code, _, why) = refusal.into_parts();
    Fatal(reason_for(code), why)
}

/// Takes what has come of a PUBLISH's payload read on its own; once it
/// has all come, the PUBLISH is handled.
fn payload_arriving(
    mqtt: &mut MqttSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let Some(arriving) = mqtt.ex().arriving.as_mut() else {
        return Ok(Flow::Continue);
    };
    if !arriving.take(buf).map_err(refused)? {
        return Ok(Flow::Continue);
    }
    let Some(arriving) = mqtt.ex().arriving.take() else {
        return Ok(Flow::Continue);
    };
    match arriving.finish().map_err(refused)? {
        (PublishHead::Whole(mut p), Arrived::Whole(payload)) => {
            p.payload = payload;
            publish_packet(p, mqtt, session, out, ctx)
        }
        (PublishHead::Large(ids), Arrived::Large(view)) => {
            publish_view(view, ids, mqtt, session, out, ctx)
        }
        (PublishHead::Refused(ids, refusal), _) => {
            let request_id = owed(mqtt, ids);
            answer_refused(refusal, request_id, mqtt, out)
        }
        // A resent QoS 2 PUBLISH, answered already.
        _ => Ok(Flow::Continue),
    }
}

fn subscribe_packet(
    s: Subscribe,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let mut identifiers = s.properties.0.iter().filter_map(|p| match p {
        Property::SubscriptionId(id) => Some(*id),
        _ => None,
    });
    let identifier = identifiers.next();
    if identifiers.next().is_some() {
        return Err(Fatal(
            0x82,
            "a SUBSCRIBE with two subscription identifiers".into(),
        ));
    }
    // [MQTT-3.8.3-4]: "It is a Protocol Error to set the No Local bit to 1
    // on a Shared Subscription" (not a reason code a SUBACK may carry).
    let shared_no_local = |(filter, options): &(String, mqtt::SubscribeOptions)| {
        options.no_local && matches!(topic::shared(filter), Ok(Some(_)))
    };
    if s.filters.iter().any(shared_no_local) {
        return Err(Fatal(0x82, "no local on a shared subscription".into()));
    }
    let kept = changes_kept(mqtt, s.filters.iter().map(|(filter, _)| filter));
    // DDS reader policies, as user properties (see frontend::reader_qos),
    // for every filter of the packet.
    let user = |name: &str| {
        s.properties.0.iter().find_map(|p| match p {
            Property::User(k, v) if k == name => Some(v.clone()),
            _ => None,
        })
    };
    let reader = crate::frontend::reader_qos(user);
    let mut codes = Vec::with_capacity(s.filters.len());
    for (filter, options) in s.filters {
        let terms = reader
            .clone()
            .map(|reader| (options, identifier, Resumed::No, reader));
        let subscribed = terms
            .map_err(|why| (0x83, why))
            .and_then(|terms| subscribe_one(&filter, terms, mqtt, session, ctx));
        let code = match subscribed {
            Ok(granted) => granted as u8,
            Err((code, why)) => {
                log::info!(
                    "connection {}: subscription to '{filter}' refused: {why}",
                    ctx.me.serial
                );
                match mqtt.version {
                    Version::V5 => code,
                    Version::V311 => 0x80,
                }
            }
        };
        codes.push(code);
    }
    let suback = Packet::SubAck(SubAck {
        packet_id: s.packet_id,
        properties: Properties::default(),
        codes,
    });
    match kept {
        true => mqtt.answer_when_kept(out, suback, session, ctx),
        false => mqtt.answer(out, suback),
    }
    Ok(Flow::Continue)
}

/// Whether subscribing to or unsubscribing from `filters` changes what
/// the broker keeps (a persistent session's subscriptions are durable,
/// and a shared one's group is registered), so that the answer waits
/// until the change is kept, as a native durable SUBSCRIBE's RECEIPT does.
fn changes_kept<'a>(mqtt: &MqttSession, mut filters: impl Iterator<Item = &'a String>) -> bool {
    mqtt.persistent || filters.any(|filter| matches!(topic::shared(filter), Ok(Some(_))))
}

/// Whether a subscription is the session's own, made again on its
/// return.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resumed {
    Yes,
    No,
}

/// Subscribes to one filter (a `$share/GROUP/` one too) with its options
/// and Subscription Identifier, replacing a subscription to the same
/// filter; the QoS granted, or the 5.0 reason code and why not.
fn subscribe_one(
    filter: &str,
    (options, identifier, resumed, reader): (
        mqtt::SubscribeOptions,
        Option<u32>,
        Resumed,
        ReaderQos,
    ),
    mqtt: &mut MqttSession,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<QoS, (u8, String)> {
    let invalid = |e: MqttError| (0x8F, e.to_string());
    let group = topic::shared(filter).map_err(invalid)?;
    let plain = group.map_or(filter, |(_, f)| f);
    if plain.starts_with(topic::QUEUE_PREFIX) {
        return Err((
            0x8F,
            format!(
                "'{plain}' names a queue: MQTT clients may send to queues, \
                 and consume them over the native protocol, STOMP or AMQP"
            ),
        ));
    }
    let pattern = topic::filter_to_pattern(plain).map_err(invalid)?;
    let durable_name = match group {
        Some((group, _)) => format!("mqtt-share:{group}:{plain}"),
        None if mqtt.persistent || resumed == Resumed::Yes => {
            session::durable_name(filter, &options, identifier)
        }
        None => String::new(),
    };
    // [MQTT-3.8.4-3]: the same filter again replaces the subscription,
    // losing nothing. One asked for on the same terms goes on as it is,
    // with what it has in flight, which ending it would send again.
    if let Some(number) = mqtt.same_subscription(filter, &options, identifier, &durable_name) {
        if resumed == Resumed::No && options.retain_handling == 0 {
            resend_retained(number, &pattern, session, ctx);
        }
        return Ok(options.qos);
    }
    let existed = mqtt.end_subscription(filter, &durable_name, session, ctx);
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_subscriptions_per_connection);
    if session.subscription_count() >= limit {
        return Err((
            0x97,
            format!("this connection already holds {limit} subscriptions"),
        ));
    }
    let acknowledged = options.qos != QoS::AtMostOnce;
    let durable = group.is_none() && !durable_name.is_empty();
    let ex = mqtt.ex();
    let number = ex.next_subscription.max(1);
    ex.next_subscription = number + 1;
    // Retain handling: 0 sends the retained messages, 1 only to a new
    // subscription, 2 never; a resumed one had them.
    let kept = resumed == Resumed::No
        && match options.retain_handling {
            0 => true,
            1 => !existed,
            _ => false,
        };
    // Owned: the session is lent to `subscribe` whole. A shared one
    // belongs to no client id: every client's members share it.
    let owner = match group {
        Some(_) => String::new(),
        None => session.client_id.to_string(),
    };
    let user = session.principal.user.clone();
    let request = SubscribeRequest {
        kind: DestinationKind::Topic,
        destination: &pattern,
        selector: None,
        acknowledged,
        prefetch: u32::from(mqtt.window),
        durable_name: &durable_name,
        client_id: &owner,
        user: &user,
        temporary: false,
        shared: group.is_some(),
        durable: false,
        backlog: Some(session.backlog()),
        kept,
        no_local: false,
        priority: 0,
        exclusive: false,
        reader,
    };
    let refused = |r: Refusal| (suback_reason(r.code()), r.message().to_owned());
    subscribe(number, request, session, ctx).map_err(refused)?;
    mqtt.ex().numbers.insert(filter.to_owned(), number);
    mqtt.ex().subs.insert(
        number,
        Sub {
            qos: options.qos,
            no_local: options.no_local,
            retain_as_published: options.retain_as_published,
            dollar_guard: plain.starts_with(['+', '#']),
            durable,
            durable_name,
            identifier,
        },
    );
    Ok(options.qos)
}

fn unsubscribe_packet(
    u: Unsubscribe,
    mqtt: &mut MqttSession,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let kept = changes_kept(mqtt, u.filters.iter());
    let mut codes = Vec::with_capacity(u.filters.len());
    for filter in u.filters {
        let code = match mqtt.end_subscription(&filter, "", session, ctx) {
            true => 0,
            false => 0x11,
        };
        codes.push(code);
    }
    let unsuback = Packet::UnsubAck(UnsubAck {
        packet_id: u.packet_id,
        properties: Properties::default(),
        codes,
    });
    match kept {
        true => mqtt.answer_when_kept(out, unsuback, session, ctx),
        false => mqtt.answer(out, unsuback),
    }
    Ok(Flow::Continue)
}

/// What happens as the connection ends: a session that does not outlive
/// it loses its durable subscriptions (one resumed with clean start off
/// and no expiry too), and one that does is left to end at its expiry;
/// the will, unless the client said goodbye, goes out now, or after its
/// delay if the session lasts that long and the client does not return.
pub fn farewell(mqtt: &mut MqttSession, session: &Session, ctx: &mut Context<'_>) {
    if session.phase != Phase::Connected {
        return;
    }
    let durables: Vec<String> = mqtt
        .exchanges()
        .map(|e| {
            e.subs
                .values()
                .filter(|s| s.durable)
                .map(|s| s.durable_name.clone())
                .collect()
        })
        .unwrap_or_default();
    let now = Instant::now();
    let ends = match (mqtt.persistent, mqtt.version, mqtt.expiry) {
        (false, ..) => {
            for name in &durables {
                let _ = ctx
                    .shared
                    .broker
                    .unsubscribe_durable(&session.client_id, name);
            }
            Some(now)
        }
        // 3.1.1's persistent sessions, and 5.0's with the largest expiry,
        // never end by themselves.
        (true, Version::V311, _) | (true, _, u32::MAX) => None,
        (true, _, secs) => Some(now + Duration::from_secs(secs.into())),
    };
    let will = mqtt
        .will
        .take()
        .and_then(|w| will_message(&w, ctx.me.serial))
        .map(|(delay, view)| (now + delay, view));
    // The will waits for its delay or the session's end, whichever comes
    // first (3.1.3.2.2).
    let will = will.map(|(at, view)| (ends.map_or(at, |end| at.min(end)), view));
    let will = match will {
        Some((at, view)) if at <= now => {
            let name = view.destination().to_owned();
            let room = crate::broker::Room::Refuse;
            if let Err(e) = ctx
                .shared
                .broker
                .publish_to(&view, &name, room, None, ctx.deliveries)
            {
                log::warn!(
                    "connection {}: its will is not published: {e}",
                    ctx.me.serial
                );
            }
            None
        }
        later => later,
    };
    let ends = ends.filter(|end| *end > now).map(|end| (end, durables));
    // A persistent session remembers the QoS 2 publishes it has not
    // released: sent again after the client's return, they are answered,
    // not routed twice.
    let ids = match mqtt.persistent {
        true => mqtt.qos2_ids(),
        false => PacketIds::default(),
    };
    ctx.shared.away.leave(&session.client_id, will, ends, ids);
}

/// A will as a message, and its delay.
fn will_message(
    will: &mqtt::Will,
    serial: u64,
) -> Option<(Duration, herald_protocol::MessageView)> {
    let delay = will.properties.0.iter().find_map(|p| match p {
        Property::WillDelay(secs) => Some(Duration::from_secs((*secs).into())),
        _ => None,
    });
    let publish = Publish {
        dup: false,
        qos: will.qos,
        retain: will.retain,
        topic: will.topic.clone(),
        packet_id: None,
        properties: will.properties.clone(),
        payload: will.payload.clone(),
    };
    let mut prefix = IdPrefix::default();
    // The will's number: past any the connection could have published.
    let id = (prefix.of(serial), u64::MAX);
    let mut chunks = Chunks::default();
    match mapping::message_from(&publish, &will.topic, id, mapping::now_ms(), &mut chunks) {
        Ok(view) => Some((delay.unwrap_or_default(), view)),
        Err(e) => {
            log::warn!("connection {serial}: its will is not a message: {e}");
            None
        }
    }
}
