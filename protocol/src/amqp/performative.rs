//! The connection and session performatives of AMQP 1.0 (part 2.7): open,
//! begin, end and close, and the error they may carry. Fields that a peer
//! leaves out take the defaults the specification gives.

use super::fields::{composite, opt, symbols, Fields};
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

/// A frame's performative (of those this module knows).
#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// `open`.
    Open(Open),
    /// `begin`.
    Begin(Begin),
    /// `end`, with an error if the session ends on one.
    End(Option<AmqpCondition>),
    /// `close`, with an error if the connection ends on one.
    Close(Option<AmqpCondition>),
}

const OPEN: (u64, &str) = (0x10, "amqp:open:list");
const BEGIN: (u64, &str) = (0x11, "amqp:begin:list");
const END: (u64, &str) = (0x17, "amqp:end:list");
const CLOSE: (u64, &str) = (0x18, "amqp:close:list");
const ERROR: (u64, &str) = (0x1d, "amqp:error:list");

/// The composite code of a described value, by number or by name.
fn code_of(value: &Value) -> Option<u64> {
    let Value::Described(d, _) = value else {
        return None;
    };
    match **d {
        Value::Ulong(c) => Some(c),
        Value::Symbol(ref s) => [OPEN, BEGIN, END, CLOSE, ERROR]
            .into_iter()
            .find(|(_, name)| name == s)
            .map(|(c, _)| c),
        _ => None,
    }
}

impl AmqpCondition {
    fn from_field(value: Value) -> Result<Option<AmqpCondition>, AmqpError> {
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

    fn to_field(error: &Option<AmqpCondition>) -> Value {
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
        }));
        round_trip(Performative::Begin(Begin {
            remote_channel: Some(0),
            next_outgoing_id: 1,
            incoming_window: 2048,
            outgoing_window: 2048,
            handle_max: 63,
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
            (composite(0x30, vec![]), "not a performative"),
        ] {
            let e = Performative::from_value(v).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
        }
    }
}
