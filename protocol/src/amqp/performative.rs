//! The performatives of AMQP 1.0 (part 2.7): open, begin, attach, flow,
//! transfer, disposition, detach, end and close, and the error they may
//! carry. Fields that a peer leaves out take the defaults the
//! specification gives. A link's source and target, and a delivery's
//! state, are kept as values here: the front-end reads what it uses of
//! them.

use super::fields::{composite, descriptor_code, opt, symbols, Fields};
use super::types::Value;
use super::AmqpError;

/// An `error`: a condition (`amqp:not-allowed`, …) and a description.
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpCondition {
    /// The condition symbol.
    pub condition: String,
    /// What happened, in words.
    pub description: Option<String>,
}

/// `open`: the connection's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    /// The sender's container id (the JMS client id, for Qpid JMS).
    pub container_id: String,
    /// The host the client asked for.
    pub hostname: Option<String>,
    /// The largest frame the sender takes (default 4294967295).
    pub max_frame_size: u32,
    /// The highest channel the sender takes (default 65535).
    pub channel_max: u16,
    /// Milliseconds without a frame before the sender closes (0 = none).
    pub idle_time_out: u32,
    /// Capabilities offered.
    pub offered_capabilities: Vec<String>,
    /// Capabilities desired.
    pub desired_capabilities: Vec<String>,
    /// What the sender says about itself (a map with symbol keys, such as
    /// `product` and `version`; null if none).
    pub properties: Value,
}

/// `begin`: a session's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Begin {
    /// The peer's channel, when answering its begin.
    pub remote_channel: Option<u16>,
    /// The first transfer id the sender will use.
    pub next_outgoing_id: u32,
    /// Transfers the sender can take.
    pub incoming_window: u32,
    /// Transfers the sender may send.
    pub outgoing_window: u32,
    /// The highest link handle the sender takes (default 4294967295).
    pub handle_max: u32,
}

/// `attach`: a link's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Attach {
    /// The link's name (with the container ids, what identifies it).
    pub name: String,
    /// The sender's handle for it.
    pub handle: u32,
    /// `false`: the sender of this frame sends on the link; `true`: it
    /// receives.
    pub role_receiver: bool,
    /// 0 unsettled, 1 settled, 2 mixed (default 2).
    pub snd_settle_mode: u8,
    /// 0 first, 1 second (default 0).
    pub rcv_settle_mode: u8,
    /// The source terminus (a described `source`), or null.
    pub source: Value,
    /// The target terminus (a described `target`, or a coordinator), or
    /// null (the anonymous relay).
    pub target: Value,
    /// The first delivery id, from a sender.
    pub initial_delivery_count: Option<u32>,
    /// The largest message the sender takes (0 = no limit).
    pub max_message_size: u64,
    /// Capabilities offered.
    pub offered_capabilities: Vec<String>,
    /// Capabilities desired.
    pub desired_capabilities: Vec<String>,
    /// The link's properties (a map keyed by symbols, such as a
    /// consumer's `priority`), or null.
    pub properties: Value,
}

/// `flow`: windows and credit.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// The next transfer id the receiver expects.
    pub next_incoming_id: Option<u32>,
    /// Transfers the sender of this frame can take.
    pub incoming_window: u32,
    /// The next transfer id the sender of this frame will use.
    pub next_outgoing_id: u32,
    /// Transfers it may send.
    pub outgoing_window: u32,
    /// The link, if the flow is about one.
    pub handle: Option<u32>,
    /// The link's delivery count.
    pub delivery_count: Option<u32>,
    /// Credit granted.
    pub link_credit: Option<u32>,
    /// Messages the sender has that credit would let flow.
    pub available: Option<u32>,
    /// Use up the credit now.
    pub drain: bool,
    /// Ask for a flow back.
    pub echo: bool,
}

/// `transfer`: a message, or a part of one; its payload follows the
/// performative in the frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// The link.
    pub handle: u32,
    /// Its delivery id (on the first frame of a delivery).
    pub delivery_id: Option<u32>,
    /// Its tag (on the first frame).
    pub delivery_tag: Option<bytes::Bytes>,
    /// Its message format (on the first frame; 0 is AMQP's own).
    pub message_format: Option<u32>,
    /// Settled already (at most once).
    pub settled: bool,
    /// More frames of this delivery follow.
    pub more: bool,
    /// Its state, a described delivery state, or null.
    pub state: Value,
    /// The sender gives the delivery up.
    pub aborted: bool,
}

impl Transfer {
    /// Reads the performative at the start of a frame's body in place if
    /// it is a transfer (one comes with every message): the transfer,
    /// its tag a slice of `body`, and the bytes it took (its payload
    /// follows); `None` if it is another performative.
    pub fn read(body: &bytes::Bytes) -> Result<Option<(Transfer, usize)>, AmqpError> {
        let Some((f, used)) = super::fields::RawFields::read(body, TRANSFER, "transfer")? else {
            return Ok(None);
        };
        let transfer = Transfer {
            handle: f.required_uint(0, "handle")?,
            delivery_id: f.uint(1, "delivery-id")?,
            delivery_tag: f.binary(2, "delivery-tag")?.map(|t| body.slice_ref(t)),
            message_format: f.uint(3, "message-format")?,
            settled: f.bool(4, "settled")?.unwrap_or(false),
            more: f.bool(5, "more")?.unwrap_or(false),
            state: f.value(7).to_value(),
            aborted: f.bool(9, "aborted")?.unwrap_or(false),
        };
        Ok(Some((transfer, used)))
    }
}

/// The fields of a [`Transfer`] a sender of messages sets, borrowed, and
/// written without a value tree: what goes once per delivery. No state.
#[derive(Debug, Clone, Copy)]
pub struct TransferHead<'a> {
    /// The link.
    pub handle: u32,
    /// Its delivery id (on the first frame of a delivery).
    pub delivery_id: Option<u32>,
    /// Its tag (on the first frame).
    pub delivery_tag: Option<&'a [u8]>,
    /// Its message format (on the first frame).
    pub message_format: Option<u32>,
    /// Settled already.
    pub settled: bool,
    /// More frames of this delivery follow.
    pub more: bool,
    /// The delivery is given up: the receiver drops what it has of it.
    pub aborted: bool,
}

impl TransferHead<'_> {
    /// Appends the performative: the bytes [`Performative::to_value`]
    /// gives the same transfer.
    pub fn encode(&self, out: &mut bytes::BytesMut) {
        use super::put::{self, Compound};
        put::described(out, TRANSFER.0);
        let mut f = Compound::list(out);
        f.put(out, |o| put::uint(o, self.handle));
        match self.delivery_id {
            Some(id) => f.put(out, |o| put::uint(o, id)),
            None => f.skip(out),
        }
        match self.delivery_tag {
            Some(tag) => f.put(out, |o| put::binary(o, tag)),
            None => f.skip(out),
        }
        match self.message_format {
            Some(format) => f.put(out, |o| put::uint(o, format)),
            None => f.skip(out),
        }
        f.put(out, |o| put::boolean(o, self.settled));
        f.put(out, |o| put::boolean(o, self.more));
        f.skip(out);
        f.skip(out);
        f.skip(out);
        f.put(out, |o| put::boolean(o, self.aborted));
        f.close(out);
    }
}

/// `disposition`: deliveries settled or their state changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Disposition {
    /// `true`: about deliveries the sender of this frame received.
    pub role_receiver: bool,
    /// The first delivery id.
    pub first: u32,
    /// The last (default: `first`).
    pub last: Option<u32>,
    /// Settled now.
    pub settled: bool,
    /// The outcome: accepted, rejected, released, modified (described).
    pub state: Value,
}

/// `detach`: a link ends (or is closed for good).
#[derive(Debug, Clone, PartialEq)]
pub struct Detach {
    /// The link.
    pub handle: u32,
    /// For good (a durable subscription then goes).
    pub closed: bool,
    /// Why, if on an error.
    pub error: Option<AmqpCondition>,
}

/// A frame's performative.
#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// `open`.
    Open(Open),
    /// `begin`.
    Begin(Begin),
    /// `attach`.
    Attach(Box<Attach>),
    /// `flow`.
    Flow(Flow),
    /// `transfer`.
    Transfer(Transfer),
    /// `disposition`.
    Disposition(Disposition),
    /// `detach`.
    Detach(Detach),
    /// `end`, with an error if the session ends on one.
    End(Option<AmqpCondition>),
    /// `close`, with an error if the connection ends on one.
    Close(Option<AmqpCondition>),
}

const OPEN: (u64, &str) = (0x10, "amqp:open:list");
const BEGIN: (u64, &str) = (0x11, "amqp:begin:list");
const ATTACH: (u64, &str) = (0x12, "amqp:attach:list");
const FLOW: (u64, &str) = (0x13, "amqp:flow:list");
const TRANSFER: (u64, &str) = (0x14, "amqp:transfer:list");
const DISPOSITION: (u64, &str) = (0x15, "amqp:disposition:list");
const DETACH: (u64, &str) = (0x16, "amqp:detach:list");
const END: (u64, &str) = (0x17, "amqp:end:list");
const CLOSE: (u64, &str) = (0x18, "amqp:close:list");
const ERROR: (u64, &str) = (0x1d, "amqp:error:list");

/// The composite code of a described value, by number or by name.
fn code_of(value: &Value) -> Option<u64> {
    let known = [
        OPEN,
        BEGIN,
        ATTACH,
        FLOW,
        TRANSFER,
        DISPOSITION,
        DETACH,
        END,
        CLOSE,
        ERROR,
    ];
    descriptor_code(value, &known)
}

impl AmqpCondition {
    /// The error in an `error` field; `None` if null.
    pub(super) fn from_field(value: Value) -> Result<Option<AmqpCondition>, AmqpError> {
        if value == Value::Null {
            return Ok(None);
        }
        let f = Fields::of(value, ERROR, "error")?;
        let condition = f
            .symbol(0, "condition")?
            .ok_or_else(|| AmqpError::Invalid("error.condition is mandatory".into()))?;
        Ok(Some(AmqpCondition {
            condition,
            description: f.string(1, "description")?,
        }))
    }

    /// As an `error` field.
    pub(super) fn to_field(error: &Option<AmqpCondition>) -> Value {
        opt(error.as_ref(), |e| {
            composite(
                ERROR.0,
                vec![
                    Value::Symbol(e.condition.clone()),
                    opt(e.description.clone(), Value::String),
                ],
            )
        })
    }
}

impl Performative {
    /// The performative `value` is.
    pub fn from_value(value: Value) -> Result<Performative, AmqpError> {
        Ok(match code_of(&value) {
            Some(0x10) => {
                let f = Fields::of(value, OPEN, "open")?;
                Performative::Open(Open {
                    container_id: f.required_string(0, "container-id")?,
                    hostname: f.string(1, "hostname")?,
                    max_frame_size: f.uint(2, "max-frame-size")?.unwrap_or(u32::MAX),
                    channel_max: f.ushort(3, "channel-max")?.unwrap_or(u16::MAX),
                    idle_time_out: f.uint(4, "idle-time-out")?.unwrap_or(0),
                    offered_capabilities: f.symbols(7, "offered-capabilities")?,
                    desired_capabilities: f.symbols(8, "desired-capabilities")?,
                    properties: f.value(9),
                })
            }
            Some(0x11) => {
                let f = Fields::of(value, BEGIN, "begin")?;
                Performative::Begin(Begin {
                    remote_channel: f.ushort(0, "remote-channel")?,
                    next_outgoing_id: f.required_uint(1, "next-outgoing-id")?,
                    incoming_window: f.required_uint(2, "incoming-window")?,
                    outgoing_window: f.required_uint(3, "outgoing-window")?,
                    handle_max: f.uint(4, "handle-max")?.unwrap_or(u32::MAX),
                })
            }
            Some(0x12) => {
                let f = Fields::of(value, ATTACH, "attach")?;
                Performative::Attach(Box::new(Attach {
                    name: f.required_string(0, "name")?,
                    handle: f.required_uint(1, "handle")?,
                    role_receiver: f.required_bool(2, "role")?,
                    snd_settle_mode: f.ubyte(3, "snd-settle-mode")?.unwrap_or(2),
                    rcv_settle_mode: f.ubyte(4, "rcv-settle-mode")?.unwrap_or(0),
                    source: f.value(5),
                    target: f.value(6),
                    initial_delivery_count: f.uint(9, "initial-delivery-count")?,
                    max_message_size: f.ulong(10, "max-message-size")?.unwrap_or(0),
                    offered_capabilities: f.symbols(11, "offered-capabilities")?,
                    desired_capabilities: f.symbols(12, "desired-capabilities")?,
                    properties: f.value(13),
                }))
            }
            Some(0x13) => {
                let f = Fields::of(value, FLOW, "flow")?;
                Performative::Flow(Flow {
                    next_incoming_id: f.uint(0, "next-incoming-id")?,
                    incoming_window: f.required_uint(1, "incoming-window")?,
                    next_outgoing_id: f.required_uint(2, "next-outgoing-id")?,
                    outgoing_window: f.required_uint(3, "outgoing-window")?,
                    handle: f.uint(4, "handle")?,
                    delivery_count: f.uint(5, "delivery-count")?,
                    link_credit: f.uint(6, "link-credit")?,
                    available: f.uint(7, "available")?,
                    drain: f.bool(8, "drain")?.unwrap_or(false),
                    echo: f.bool(9, "echo")?.unwrap_or(false),
                })
            }
            Some(0x14) => {
                let f = Fields::of(value, TRANSFER, "transfer")?;
                Performative::Transfer(Transfer {
                    handle: f.required_uint(0, "handle")?,
                    delivery_id: f.uint(1, "delivery-id")?,
                    delivery_tag: f.binary(2, "delivery-tag")?,
                    message_format: f.uint(3, "message-format")?,
                    settled: f.bool(4, "settled")?.unwrap_or(false),
                    more: f.bool(5, "more")?.unwrap_or(false),
                    state: f.value(7),
                    aborted: f.bool(9, "aborted")?.unwrap_or(false),
                })
            }
            Some(0x15) => {
                let f = Fields::of(value, DISPOSITION, "disposition")?;
                Performative::Disposition(Disposition {
                    role_receiver: f.required_bool(0, "role")?,
                    first: f.required_uint(1, "first")?,
                    last: f.uint(2, "last")?,
                    settled: f.bool(3, "settled")?.unwrap_or(false),
                    state: f.value(4),
                })
            }
            Some(0x16) => {
                let f = Fields::of(value, DETACH, "detach")?;
                Performative::Detach(Detach {
                    handle: f.required_uint(0, "handle")?,
                    closed: f.bool(1, "closed")?.unwrap_or(false),
                    error: AmqpCondition::from_field(f.value(2))?,
                })
            }
            Some(0x17) => {
                let f = Fields::of(value, END, "end")?;
                Performative::End(AmqpCondition::from_field(f.value(0))?)
            }
            Some(0x18) => {
                let f = Fields::of(value, CLOSE, "close")?;
                Performative::Close(AmqpCondition::from_field(f.value(0))?)
            }
            _ => {
                return Err(AmqpError::Invalid(format!(
                    "not a performative this side reads: {value:?}"
                )))
            }
        })
    }

    /// As a described list; defaults left out.
    pub fn to_value(&self) -> Value {
        match self {
            Performative::Open(o) => composite(
                OPEN.0,
                vec![
                    Value::String(o.container_id.clone()),
                    opt(o.hostname.clone(), Value::String),
                    Value::Uint(o.max_frame_size),
                    Value::Ushort(o.channel_max),
                    opt(Some(o.idle_time_out).filter(|t| *t != 0), Value::Uint),
                    Value::Null,
                    Value::Null,
                    symbols(&o.offered_capabilities),
                    symbols(&o.desired_capabilities),
                    o.properties.clone(),
                ],
            ),
            Performative::Begin(b) => composite(
                BEGIN.0,
                vec![
                    opt(b.remote_channel, Value::Ushort),
                    Value::Uint(b.next_outgoing_id),
                    Value::Uint(b.incoming_window),
                    Value::Uint(b.outgoing_window),
                    Value::Uint(b.handle_max),
                ],
            ),
            Performative::Attach(a) => composite(
                ATTACH.0,
                vec![
                    Value::String(a.name.clone()),
                    Value::Uint(a.handle),
                    Value::Bool(a.role_receiver),
                    Value::Ubyte(a.snd_settle_mode),
                    Value::Ubyte(a.rcv_settle_mode),
                    a.source.clone(),
                    a.target.clone(),
                    Value::Null,
                    Value::Null,
                    opt(a.initial_delivery_count, Value::Uint),
                    opt(Some(a.max_message_size).filter(|m| *m != 0), Value::Ulong),
                    symbols(&a.offered_capabilities),
                    symbols(&a.desired_capabilities),
                    a.properties.clone(),
                ],
            ),
            Performative::Flow(f) => composite(
                FLOW.0,
                vec![
                    opt(f.next_incoming_id, Value::Uint),
                    Value::Uint(f.incoming_window),
                    Value::Uint(f.next_outgoing_id),
                    Value::Uint(f.outgoing_window),
                    opt(f.handle, Value::Uint),
                    opt(f.delivery_count, Value::Uint),
                    opt(f.link_credit, Value::Uint),
                    opt(f.available, Value::Uint),
                    Value::Bool(f.drain),
                    Value::Bool(f.echo),
                ],
            ),
            Performative::Transfer(t) => composite(
                TRANSFER.0,
                vec![
                    Value::Uint(t.handle),
                    opt(t.delivery_id, Value::Uint),
                    opt(t.delivery_tag.clone(), Value::Binary),
                    opt(t.message_format, Value::Uint),
                    Value::Bool(t.settled),
                    Value::Bool(t.more),
                    Value::Null,
                    t.state.clone(),
                    Value::Null,
                    Value::Bool(t.aborted),
                ],
            ),
            Performative::Disposition(d) => composite(
                DISPOSITION.0,
                vec![
                    Value::Bool(d.role_receiver),
                    Value::Uint(d.first),
                    opt(d.last, Value::Uint),
                    Value::Bool(d.settled),
                    d.state.clone(),
                ],
            ),
            Performative::Detach(d) => composite(
                DETACH.0,
                vec![
                    Value::Uint(d.handle),
                    Value::Bool(d.closed),
                    AmqpCondition::to_field(&d.error),
                ],
            ),
            Performative::End(e) => composite(END.0, vec![AmqpCondition::to_field(e)]),
            Performative::Close(e) => composite(CLOSE.0, vec![AmqpCondition::to_field(e)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: Performative) {
        let mut wire = Vec::new();
        p.to_value().encode(&mut wire);
        let (v, used) = Value::decode(&wire).unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(Performative::from_value(v).unwrap(), p);
    }

    #[test]
    fn performatives_round_trip() {
        round_trip(Performative::Open(Open {
            container_id: "herald".into(),
            hostname: Some("localhost".into()),
            max_frame_size: 1 << 20,
            channel_max: 255,
            idle_time_out: 30_000,
            offered_capabilities: vec!["ANONYMOUS-RELAY".into()],
            desired_capabilities: vec![],
            properties: Value::Map(vec![(
                Value::Symbol("product".into()),
                Value::String("herald".into()),
            )]),
        }));
        round_trip(Performative::Begin(Begin {
            remote_channel: Some(0),
            next_outgoing_id: 1,
            incoming_window: 2048,
            outgoing_window: 2048,
            handle_max: 63,
        }));
        round_trip(Performative::Attach(Box::new(Attach {
            name: "orders-receiver".into(),
            handle: 0,
            role_receiver: true,
            snd_settle_mode: 2,
            rcv_settle_mode: 0,
            source: composite(0x28, vec![Value::String("queue://orders".into())]),
            target: Value::Null,
            initial_delivery_count: None,
            max_message_size: 0,
            offered_capabilities: vec![],
            desired_capabilities: vec!["queue".into()],
            properties: Value::Map(vec![(Value::Symbol("priority".into()), Value::Int(5))]),
        })));
        round_trip(Performative::Flow(Flow {
            next_incoming_id: Some(0),
            incoming_window: 2048,
            next_outgoing_id: 1,
            outgoing_window: 2048,
            handle: Some(0),
            delivery_count: Some(0),
            link_credit: Some(100),
            available: None,
            drain: false,
            echo: true,
        }));
        round_trip(Performative::Transfer(Transfer {
            handle: 0,
            delivery_id: Some(7),
            delivery_tag: Some(bytes::Bytes::from_static(b"t7")),
            message_format: Some(0),
            settled: false,
            more: true,
            state: Value::Null,
            aborted: false,
        }));
        // Written directly, a transfer is what its value tree gives.
        for (id, tag, settled, more, aborted) in [
            (Some(7), Some(&b"t7"[..]), false, true, false),
            (Some(70_000), Some(&[0u8; 300][..]), true, false, false),
            (None, None, false, false, false),
            (None, None, false, false, true),
        ] {
            let head = TransferHead {
                handle: 3,
                delivery_id: id,
                delivery_tag: tag,
                message_format: id.map(|_| 0),
                settled,
                more,
                aborted,
            };
            let mut direct = bytes::BytesMut::new();
            head.encode(&mut direct);
            let mut built = Vec::new();
            Performative::Transfer(Transfer {
                handle: 3,
                delivery_id: id,
                delivery_tag: tag.map(bytes::Bytes::copy_from_slice),
                message_format: id.map(|_| 0),
                settled,
                more,
                state: Value::Null,
                aborted,
            })
            .to_value()
            .encode(&mut built);
            assert_eq!(&direct[..], &built[..]);
            // Read in place, it is the transfer the value tree gives.
            let wire = bytes::Bytes::from(built);
            let (read, used) = Transfer::read(&wire).unwrap().unwrap();
            let Performative::Transfer(t) =
                Performative::from_value(Value::decode(&wire).unwrap().0).unwrap()
            else {
                panic!("not a transfer");
            };
            assert_eq!((read, used), (t, wire.len()));
        }
        // Another performative is not read as one; a broken transfer is
        // an error.
        let mut flow = Vec::new();
        Performative::End(None).to_value().encode(&mut flow);
        assert_eq!(Transfer::read(&flow.into()), Ok(None));
        let mut bad = Vec::new();
        composite(0x14, vec![Value::String("h".into())]).encode(&mut bad);
        assert!(Transfer::read(&bad.into()).is_err());
        let mut no_handle = Vec::new();
        composite(0x14, vec![]).encode(&mut no_handle);
        assert!(Transfer::read(&no_handle.into()).is_err());
        round_trip(Performative::Disposition(Disposition {
            role_receiver: true,
            first: 3,
            last: Some(9),
            settled: true,
            state: composite(0x24, vec![]),
        }));
        round_trip(Performative::Detach(Detach {
            handle: 0,
            closed: true,
            error: None,
        }));
        round_trip(Performative::End(None));
        round_trip(Performative::Close(Some(AmqpCondition {
            condition: "amqp:unauthorized-access".into(),
            description: Some("user 'x' lacks the 'publish' permission".into()),
        })));
    }

    #[test]
    fn an_open_with_only_its_container_id_takes_the_defaults() {
        // What a minimal client sends: open with one field.
        let wire = [0x00, 0x53, 0x10, 0xc0, 0x05, 0x01, 0xa1, 0x02, b'i', b'd'];
        let (v, _) = Value::decode(&wire).unwrap();
        let Performative::Open(o) = Performative::from_value(v).unwrap() else {
            panic!("not an open");
        };
        assert_eq!(
            (
                o.container_id.as_str(),
                o.max_frame_size,
                o.channel_max,
                o.idle_time_out
            ),
            ("id", u32::MAX, u16::MAX, 0)
        );
    }

    #[test]
    fn a_bad_performative_says_which_field() {
        for (v, words) in [
            (composite(0x10, vec![]), "open.container-id is mandatory"),
            (
                composite(
                    0x10,
                    vec![
                        Value::String("a".into()),
                        Value::Null,
                        Value::String("big".into()),
                    ],
                ),
                "open.max-frame-size",
            ),
            (
                composite(0x11, vec![Value::Null, Value::Uint(0)]),
                "begin.incoming-window is mandatory",
            ),
            (
                composite(0x18, vec![composite(0x1d, vec![])]),
                "error.condition is mandatory",
            ),
            (
                composite(0x18, vec![Value::Uint(1)]),
                "not a described value",
            ),
            (
                composite(0x12, vec![Value::String("l".into()), Value::Uint(0)]),
                "attach.role is mandatory",
            ),
            (
                composite(
                    0x13,
                    vec![
                        Value::Null,
                        Value::Uint(1),
                        Value::Uint(1),
                        Value::Uint(1),
                        Value::Null,
                        Value::Null,
                        Value::Int(5),
                    ],
                ),
                "flow.link-credit",
            ),
            (composite(0x14, vec![]), "transfer.handle is mandatory"),
            (composite(0x30, vec![]), "not a performative"),
        ] {
            let e = Performative::from_value(v).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
        }
    }
}
