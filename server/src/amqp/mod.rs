//! The AMQP 1.0 front-end: AMQP frames in, the same broker core as the
//! native protocol, STOMP and MQTT, AMQP frames out.
//!
//! A connection is served by the same acceptor and workers as the others;
//! it carries an [`AmqpSession`] beside its protocol-neutral `Session`.
//! It starts with the protocol headers and SASL (PLAIN against Herald's
//! users, or ANONYMOUS where anonymous connections may connect), then
//! `open` (whose container id is the client id), sessions (`begin`) and
//! links (`attach`).
//!
//! Done so far: the connection, its sessions, links on which a client
//! sends (to a queue, a topic, or through the anonymous relay to each
//! message's `to`), pre-settled or not: an unsettled message is
//! `accepted` once routed, a persistent one (`header.durable`) once the
//! journal has it, as a RECEIPT is (`link`); and links on which it
//! receives, subscriptions under its credit settled by its outcomes,
//! dynamic (temporary) nodes, durable and shared subscriptions, browsing
//! (`sender`), with the JMS selector and no-local filters; and local
//! transactions (`txn`).
//!
//! Errors: a fault in a link detaches it with an error condition; one in
//! the connection closes it with one. Either names the problem.

mod intake;
mod link;
pub(crate) mod mapping;
mod sender;
mod state;
mod txn;

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use herald_protocol::amqp::performative::{Begin, Open, Transfer};
use herald_protocol::amqp::sasl::{outcome, plain_credentials};
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};

use crate::auth::Principal;
use crate::frontend::outbound::Outbound;
use crate::frontend::{admit, admit_alongside, check_id_length, Context, Flow, Welcome};
use crate::session::{Phase, Session};
use crate::websocket;
pub use link::attached;
pub use state::AmqpSession;
use state::{condition, Channel, Fatal, Stage, HANDSHAKE_FRAME, WINDOW};

/// What this broker offers on a connection, each what Qpid JMS looks for
/// and the server does: the anonymous relay (a sender without a target),
/// delivery delays (`x-opt-delivery-time`, `x-opt-delivery-delay`), shared
/// subscriptions (links with the `shared` capability), and one connection
/// per container id to a client that desires it (a second is refused with
/// `amqp:invalid-field`).
const OFFERED: [&str; 4] = [
    "ANONYMOUS-RELAY",
    "DELAYED_DELIVERY",
    "SHARED-SUBS",
    SOLE_CONNECTION,
];

/// The capability a client desires when its container id is a JMS client
/// id, to be held by one connection at a time.
const SOLE_CONNECTION: &str = "sole-connection-for-container";

/// Handles what arrived in `buf`: the WebSocket upgrade and framing if the
/// connection is one, then protocol headers and every whole frame.
pub fn receive(
    amqp: &mut AmqpSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    websocket::receive_carried(amqp, buf, session, out, ctx, receive_frames)
}

impl websocket::Carried for AmqpSession {
    fn websocket(&mut self) -> Option<&mut websocket::WebSocket> {
        self.websocket.as_deref_mut()
    }

    fn bad_frame(&mut self, out: &mut Outbound, _: Phase, why: String, serial: u64) -> Flow {
        self.fail(out, Fatal(condition::FRAMING, why), serial)
    }
}

/// Handles protocol headers and every whole frame in `buf`.
fn receive_frames(
    amqp: &mut AmqpSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Flow {
    loop {
        let step = match amqp.stage {
            Stage::Closed => {
                buf.clear();
                return Flow::Close;
            }
            Stage::Header | Stage::AmqpHeader => header(amqp, buf, out, ctx),
            _ => frame(amqp, buf, session, out, ctx),
        };
        match step {
            Ok(Some(Flow::Continue)) if ctx.backlog.is_some() => return Flow::Continue,
            Ok(Some(Flow::Continue)) => {}
            Ok(Some(stop)) => return stop,
            Ok(None) => return Flow::Continue,
            Err(fatal) => return amqp.fail(out, fatal, ctx.me.serial),
        }
    }
}

/// Reads a protocol header, if a whole one is there.
fn header(
    amqp: &mut AmqpSession,
    buf: &mut BytesMut,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Option<Flow>, Fatal> {
    let header = match ProtocolHeader::read(buf) {
        Ok(None) => return Ok(None),
        Ok(Some(h)) => h,
        Err(e) => return Err(Fatal(condition::FRAMING, e.to_string())),
    };
    buf.advance(8);
    match (amqp.stage, header) {
        (Stage::Header, ProtocolHeader::Sasl) => {
            amqp.header(out, ProtocolHeader::Sasl);
            let mut mechanisms = vec!["PLAIN".to_owned()];
            if ctx.shared.auth.anonymous().is_some() {
                mechanisms.push("ANONYMOUS".into());
            }
            amqp.sasl(out, Sasl::Mechanisms(mechanisms));
            amqp.stage = Stage::SaslInit;
        }
        // No SASL: anonymous, if anonymous connections may connect.
        (Stage::Header, ProtocolHeader::Amqp) => {
            if ctx.shared.auth.anonymous().is_none() {
                let why = "this server needs a login: use SASL (PLAIN)";
                amqp.header(out, ProtocolHeader::Sasl);
                amqp.stage = Stage::Closed;
                log::info!("AMQP connection {}: {why}", ctx.me.serial);
                return Ok(Some(Flow::Close));
            }
            amqp.principal = ctx.shared.auth.anonymous().map(Box::new);
            amqp.header(out, ProtocolHeader::Amqp);
            amqp.stage = Stage::Open;
        }
        (Stage::AmqpHeader, ProtocolHeader::Amqp) => {
            amqp.header(out, ProtocolHeader::Amqp);
            amqp.stage = Stage::Open;
        }
        (_, other) => {
            return Err(Fatal(
                condition::NOT_IMPLEMENTED,
                format!("protocol header {other:?} here: TLS is a listener of its own"),
            ))
        }
    }
    Ok(Some(Flow::Continue))
}

/// Reads and handles one frame, if a whole one is there.
fn frame(
    amqp: &mut AmqpSession,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Option<Flow>, Fatal> {
    let max = match session.phase {
        Phase::AwaitingConnect => HANDSHAKE_FRAME,
        Phase::Connected => ctx.shared.config.max_frame_size,
    };
    let header = match FrameHeader::read(buf, max) {
        Ok(None) => return Ok(None),
        Ok(Some(h)) => h,
        Err(e) => {
            let why = match e {
                herald_protocol::amqp::AmqpError::FrameTooLarge { size, max } => {
                    crate::frontend::frame_too_large(
                        size as usize,
                        false,
                        max as usize,
                        session.phase,
                    )
                }
                e => e.to_string(),
            };
            return Err(Fatal(condition::FRAMING, why));
        }
    };
    if buf.len() < header.size as usize {
        buf.reserve(header.size as usize - buf.len());
        return Ok(None);
    }
    let whole = buf.split_to(header.size as usize).freeze();
    let body = whole.slice(header.body_offset..);
    // An empty frame: a heart-beat.
    if body.is_empty() {
        return Ok(Some(Flow::Continue));
    }
    let decode = |e: herald_protocol::amqp::AmqpError| Fatal(condition::DECODE, e.to_string());
    match (amqp.stage, header.kind) {
        (Stage::SaslInit, FrameKind::Sasl) => {
            let (value, _) = Value::decode(&body).map_err(decode)?;
            let frame = Sasl::from_value(value).map_err(decode)?;
            sasl_init(amqp, frame, session, out, ctx).map(Some)
        }
        (Stage::Open | Stage::Opened, FrameKind::Amqp) => {
            // A transfer, one per message, is read in place; the others
            // through a value.
            let (p, used) = match Transfer::read(&body).map_err(decode)? {
                Some((t, used)) => (Performative::Transfer(t), used),
                None => {
                    let (value, used) = Value::decode(&body).map_err(decode)?;
                    (Performative::from_value(value).map_err(decode)?, used)
                }
            };
            let payload = body.slice(used..);
            performative(amqp, header.channel, p, payload, session, out, ctx).map(Some)
        }
        (stage, kind) => Err(Fatal(
            condition::FRAMING,
            format!("a {kind:?} frame while {stage:?}"),
        )),
    }
}

fn sasl_init(
    amqp: &mut AmqpSession,
    frame: Sasl,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let Sasl::Init {
        mechanism,
        initial_response,
        ..
    } = frame
    else {
        return Err(Fatal(condition::FRAMING, "sasl-init first".into()));
    };
    let (user, password) = match mechanism.as_str() {
        "PLAIN" => plain_credentials(initial_response.as_deref().unwrap_or_default())
            .map_err(|e| Fatal(condition::UNAUTHORIZED, e.to_string()))?,
        "ANONYMOUS" if ctx.shared.auth.anonymous().is_some() => (String::new(), String::new()),
        other => {
            return Err(Fatal(
                condition::UNAUTHORIZED,
                format!("mechanism {other} is not offered"),
            ))
        }
    };
    let _ = ctx.shared.auth.unchecked(&user, ctx.me.serial);
    let done = crate::frontend::login_result(ctx.shared, ctx.me);
    let peer = session.peer().map(|a| a.ip());
    match ctx.shared.auth.login(&user, &password, peer, done) {
        Some(principal) => {
            logged_in(principal, amqp, out);
            Ok(Flow::Continue)
        }
        None => {
            amqp.stage = Stage::LoggingIn;
            Ok(Flow::Login(Welcome {
                request_id: 0,
                answer: Bytes::new(),
            }))
        }
    }
}

/// Goes on with a connection whose SASL login succeeded: the outcome,
/// then the AMQP header is awaited.
pub fn logged_in(principal: Principal, amqp: &mut AmqpSession, out: &mut Outbound) {
    amqp.principal = Some(Box::new(principal));
    amqp.sasl(
        out,
        Sasl::Outcome {
            code: outcome::OK,
            additional_data: None,
        },
    );
    amqp.stage = Stage::AmqpHeader;
}

fn performative(
    amqp: &mut AmqpSession,
    channel: u16,
    p: Performative,
    payload: Bytes,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    if amqp.stage == Stage::Open {
        let Performative::Open(open) = p else {
            return Err(Fatal(condition::FRAMING, "open first".into()));
        };
        return open_connection(amqp, open, session, out, ctx);
    }
    match p {
        Performative::Open(_) => Err(Fatal(condition::FRAMING, "a second open".into())),
        Performative::Close(error) => {
            if let Some(e) = error {
                log::debug!(
                    "AMQP connection {} closed by the client: {e:?}",
                    ctx.me.serial
                );
            }
            amqp.perform(out, 0, Performative::Close(None));
            amqp.stage = Stage::Closed;
            Ok(Flow::Close)
        }
        Performative::Begin(begin) => begin_session(amqp, channel, &begin, out, ctx),
        Performative::End(_) => {
            if !amqp.channels.contains_key(&channel) {
                return Err(Fatal(
                    condition::FRAMING,
                    format!("end on channel {channel}, which has no session"),
                ));
            }
            link::end_session(amqp, channel, session, ctx);
            amqp.perform(out, channel, Performative::End(None));
            Ok(Flow::Continue)
        }
        _ if !amqp.channels.contains_key(&channel) => Err(Fatal(
            condition::FRAMING,
            format!("a frame on channel {channel}, which has no session"),
        )),
        p => link::performative(amqp, channel, p, payload, session, out, ctx),
    }
}

fn open_connection(
    amqp: &mut AmqpSession,
    open: Open,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let config = &ctx.shared.config;
    check_id_length("container id", &open.container_id, config.max_id_length)
        .map_err(|r| Fatal(condition::INVALID_FIELD, r.into_parts().2))?;
    amqp.peer_max_frame = open.max_frame_size.max(512);
    amqp.link_credit = config.amqp.link_credit;
    amqp.id_prefix = format!("ID:amqp-{}-", ctx.me.serial);
    if open.idle_time_out > 0 {
        // Half the client's limit, as the specification advises.
        amqp.heartbeat = Some(Duration::from_millis(
            u64::from(open.idle_time_out / 2).max(100),
        ));
    }
    let Some(principal) = amqp.principal.take() else {
        return Err(Fatal(condition::UNAUTHORIZED, "no login".into()));
    };
    session.set_client_id(&open.container_id);
    if open
        .desired_capabilities
        .iter()
        .any(|c| c == SOLE_CONNECTION)
    {
        if let Err(refusal) = admit(session, *principal, ctx.shared, ctx.me.serial) {
            let (_, _, why) = refusal.into_parts();
            return Err(Fatal(condition::INVALID_FIELD, why));
        }
    } else {
        admit_alongside(session, *principal, ctx.shared, ctx.me.serial);
    }
    session.phase = Phase::Connected;
    let idle = config.amqp.idle_timeout_ms;
    session.set_silence_limit(match idle {
        0 => Duration::MAX,
        ms => Duration::from_millis(u64::from(ms)),
    });
    amqp.stage = Stage::Opened;
    amqp.perform(
        out,
        0,
        Performative::Open(Open {
            container_id: "herald".into(),
            hostname: None,
            max_frame_size: config.max_frame_size,
            channel_max: config.amqp.max_sessions - 1,
            idle_time_out: idle,
            offered_capabilities: OFFERED.iter().map(|&c| c.to_owned()).collect(),
            desired_capabilities: Vec::new(),
            properties: Value::Map(vec![
                (
                    Value::Symbol("product".into()),
                    Value::String("herald".into()),
                ),
                (
                    Value::Symbol("version".into()),
                    Value::String(env!("CARGO_PKG_VERSION").into()),
                ),
                // Qpid JMS puts these before a queue's or topic's name in
                // the addresses it sends, and takes them off those it
                // receives: Herald's own URIs, so that a JMS name is
                // Herald's name.
                (
                    Value::Symbol("queue-prefix".into()),
                    Value::String("queue://".into()),
                ),
                (
                    Value::Symbol("topic-prefix".into()),
                    Value::String("topic://".into()),
                ),
            ]),
        }),
    );
    Ok(Flow::Continue)
}

fn begin_session(
    amqp: &mut AmqpSession,
    channel: u16,
    begin: &Begin,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let max = ctx.shared.config.amqp.max_sessions;
    if begin.remote_channel.is_some() {
        return Err(Fatal(
            condition::NOT_ALLOWED,
            "this side begins no sessions".into(),
        ));
    }
    if channel >= max {
        return Err(Fatal(
            condition::FRAMING,
            format!("channel {channel} is beyond the channel-max of {}", max - 1),
        ));
    }
    if amqp.channels.contains_key(&channel) {
        return Err(Fatal(
            condition::FRAMING,
            format!("channel {channel} has a session already"),
        ));
    }
    amqp.channels
        .insert(channel, Channel::new(begin.next_outgoing_id));
    amqp.perform(
        out,
        channel,
        Performative::Begin(Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 1,
            incoming_window: WINDOW,
            outgoing_window: WINDOW,
            handle_max: ctx.shared.config.amqp.max_links - 1,
        }),
    );
    Ok(Flow::Continue)
}
