//! Delivery states (part 3.4) and the transaction types (part 4): what a
//! transfer's or a disposition's `state` field holds, and what a sender
//! sends to the coordinator.

use bytes::Bytes;

use super::fields::{composite, descriptor_code, opt, Fields};
use super::performative::AmqpCondition;
use super::types::Value;
use super::AmqpError;

const RECEIVED: (u64, &str) = (0x23, "amqp:received:list");
const ACCEPTED: (u64, &str) = (0x24, "amqp:accepted:list");
const REJECTED: (u64, &str) = (0x25, "amqp:rejected:list");
const RELEASED: (u64, &str) = (0x26, "amqp:released:list");
const MODIFIED: (u64, &str) = (0x27, "amqp:modified:list");
const DECLARE: (u64, &str) = (0x31, "amqp:declare:list");
const DISCHARGE: (u64, &str) = (0x32, "amqp:discharge:list");
const DECLARED: (u64, &str) = (0x33, "amqp:declared:list");
const TRANSACTIONAL: (u64, &str) = (0x34, "amqp:transactional-state:list");

const STATES: [(u64, &str); 7] = [
    RECEIVED,
    ACCEPTED,
    REJECTED,
    RELEASED,
    MODIFIED,
    DECLARED,
    TRANSACTIONAL,
];

/// A delivery's state or outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryState {
    /// How much of a message arrived (resuming a link; read, not acted on).
    Received {
        /// The section it got to.
        section_number: u32,
        /// The byte within it.
        section_offset: u64,
    },
    /// Taken: an acknowledgement.
    Accepted,
    /// Refused as invalid: the message is dead-lettered.
    Rejected(Option<AmqpCondition>),
    /// Given back without being tried: redelivered, not counted.
    Released,
    /// Given back: redelivered (counted if it failed), or not here again.
    Modified {
        /// It was tried and failed: counts as a delivery.
        delivery_failed: bool,
        /// Not to this link again.
        undeliverable_here: bool,
        /// Annotations to merge into the message.
        message_annotations: Vec<(Value, Value)>,
    },
    /// A transaction was declared, with this id (the coordinator's answer).
    Declared(Bytes),
    /// Part of transaction `txn_id`, with the outcome it will have.
    Transactional {
        /// The transaction.
        txn_id: Bytes,
        /// The outcome once the transaction commits.
        outcome: Option<Box<DeliveryState>>,
    },
}

impl DeliveryState {
    /// The state in a `state` field; `None` if null.
    pub fn from_value(value: Value) -> Result<Option<DeliveryState>, AmqpError> {
        if value == Value::Null {
            return Ok(None);
        }
        let spec = descriptor_code(&value, &STATES)
            .and_then(|code| STATES.into_iter().find(|s| s.0 == code))
            .ok_or_else(|| AmqpError::Invalid(format!("not a delivery state: {value:?}")))?;
        let f = Fields::of(value, spec, spec.1)?;
        Ok(Some(match spec.0 {
            0x23 => DeliveryState::Received {
                section_number: f.required_uint(0, "section-number")?,
                section_offset: f.ulong(1, "section-offset")?.unwrap_or(0),
            },
            0x24 => DeliveryState::Accepted,
            0x25 => DeliveryState::Rejected(AmqpCondition::from_field(f.value(0))?),
            0x26 => DeliveryState::Released,
            0x27 => DeliveryState::Modified {
                delivery_failed: f.bool(0, "delivery-failed")?.unwrap_or(false),
                undeliverable_here: f.bool(1, "undeliverable-here")?.unwrap_or(false),
                message_annotations: match f.value(2) {
                    Value::Null => Vec::new(),
                    Value::Map(pairs) => pairs,
                    v => {
                        return Err(AmqpError::Invalid(format!(
                            "modified.message-annotations is {v:?}, not a map"
                        )))
                    }
                },
            },
            0x33 => DeliveryState::Declared(required_binary(&f, 0, "declared.txn-id")?),
            // 0x34, the only code left.
            _ => {
                let outcome = DeliveryState::from_value(f.value(1))?;
                if matches!(
                    outcome,
                    Some(DeliveryState::Transactional { .. } | DeliveryState::Declared(_))
                ) {
                    return Err(AmqpError::Invalid(
                        "a transactional state's outcome is itself transactional".into(),
                    ));
                }
                DeliveryState::Transactional {
                    txn_id: required_binary(&f, 0, "transactional-state.txn-id")?,
                    outcome: outcome.map(Box::new),
                }
            }
        }))
    }

    /// As a described list.
    pub fn to_value(&self) -> Value {
        match self {
            DeliveryState::Received {
                section_number,
                section_offset,
            } => composite(
                RECEIVED.0,
                vec![Value::Uint(*section_number), Value::Ulong(*section_offset)],
            ),
            DeliveryState::Accepted => composite(ACCEPTED.0, vec![]),
            DeliveryState::Rejected(error) => {
                composite(REJECTED.0, vec![AmqpCondition::to_field(error)])
            }
            DeliveryState::Released => composite(RELEASED.0, vec![]),
            DeliveryState::Modified {
                delivery_failed,
                undeliverable_here,
                message_annotations,
            } => composite(
                MODIFIED.0,
                vec![
                    Value::Bool(*delivery_failed),
                    Value::Bool(*undeliverable_here),
                    match message_annotations.is_empty() {
                        true => Value::Null,
                        false => Value::Map(message_annotations.clone()),
                    },
                ],
            ),
            DeliveryState::Declared(id) => composite(DECLARED.0, vec![Value::Binary(id.clone())]),
            DeliveryState::Transactional { txn_id, outcome } => composite(
                TRANSACTIONAL.0,
                vec![
                    Value::Binary(txn_id.clone()),
                    opt(outcome.as_deref(), DeliveryState::to_value),
                ],
            ),
        }
    }
}

fn required_binary(f: &Fields, i: usize, field: &str) -> Result<Bytes, AmqpError> {
    f.binary(i, field)?
        .ok_or_else(|| AmqpError::Invalid(format!("{field} is mandatory")))
}

/// What a sender sends the coordinator, as an `amqp-value` body.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnControl {
    /// Begin a transaction (the answer is [`DeliveryState::Declared`]).
    Declare,
    /// End one: commit it, or roll it back (`fail`).
    Discharge {
        /// The transaction.
        txn_id: Bytes,
        /// Roll back rather than commit.
        fail: bool,
    },
}

impl TxnControl {
    /// The control an `amqp-value` holds.
    pub fn from_value(value: Value) -> Result<TxnControl, AmqpError> {
        match descriptor_code(&value, &[DECLARE, DISCHARGE]) {
            Some(0x31) => {
                let f = Fields::of(value, DECLARE, "declare")?;
                if f.value(0) != Value::Null {
                    return Err(AmqpError::Invalid(
                        "declare.global-id: distributed transactions are not supported".into(),
                    ));
                }
                Ok(TxnControl::Declare)
            }
            Some(0x32) => {
                let f = Fields::of(value, DISCHARGE, "discharge")?;
                Ok(TxnControl::Discharge {
                    txn_id: required_binary(&f, 0, "discharge.txn-id")?,
                    fail: f.bool(1, "fail")?.unwrap_or(false),
                })
            }
            _ => Err(AmqpError::Invalid(format!(
                "the coordinator takes declare and discharge, not {value:?}"
            ))),
        }
    }

    /// As a described list.
    pub fn to_value(&self) -> Value {
        match self {
            TxnControl::Declare => composite(DECLARE.0, vec![]),
            TxnControl::Discharge { txn_id, fail } => composite(
                DISCHARGE.0,
                vec![Value::Binary(txn_id.clone()), Value::Bool(*fail)],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fields::through_wire as wire;

    #[test]
    fn states_round_trip() {
        let id = Bytes::from_static(b"txn-1");
        let states = [
            DeliveryState::Received {
                section_number: 2,
                section_offset: 9,
            },
            DeliveryState::Accepted,
            DeliveryState::Rejected(Some(AmqpCondition {
                condition: "amqp:decode-error".into(),
                description: Some("bad body".into()),
            })),
            DeliveryState::Rejected(None),
            DeliveryState::Released,
            DeliveryState::Modified {
                delivery_failed: true,
                undeliverable_here: false,
                message_annotations: vec![(Value::Symbol("x-opt-a".into()), Value::Int(1))],
            },
            DeliveryState::Declared(id.clone()),
            DeliveryState::Transactional {
                txn_id: id.clone(),
                outcome: Some(Box::new(DeliveryState::Accepted)),
            },
            DeliveryState::Transactional {
                txn_id: id.clone(),
                outcome: None,
            },
        ];
        for s in states {
            assert_eq!(
                DeliveryState::from_value(wire(&s.to_value())).unwrap(),
                Some(s)
            );
        }
        assert_eq!(DeliveryState::from_value(Value::Null).unwrap(), None);
        // By symbolic name too.
        let named = Value::Described(
            Box::new(Value::Symbol("amqp:released:list".into())),
            Box::new(Value::List(vec![])),
        );
        assert_eq!(
            DeliveryState::from_value(named).unwrap(),
            Some(DeliveryState::Released)
        );
    }

    #[test]
    fn controls_round_trip_and_garbage_is_refused() {
        for c in [
            TxnControl::Declare,
            TxnControl::Discharge {
                txn_id: Bytes::from_static(b"\x00\x01"),
                fail: true,
            },
        ] {
            assert_eq!(TxnControl::from_value(wire(&c.to_value())).unwrap(), c);
        }
        let bad = [
            composite(0x31, vec![Value::String("global".into())]),
            composite(0x32, vec![]),
            composite(0x32, vec![Value::String("not binary".into())]),
            Value::String("declare".into()),
        ];
        for v in bad {
            assert!(TxnControl::from_value(v.clone()).is_err(), "{v:?}");
        }
        let bad_states = [
            composite(0x23, vec![]),
            composite(0x27, vec![Value::Int(1)]),
            composite(0x27, vec![Value::Null, Value::Null, Value::Int(1)]),
            composite(0x33, vec![]),
            composite(
                0x34,
                vec![
                    Value::Binary(Bytes::new()),
                    composite(0x33, vec![Value::Binary(Bytes::new())]),
                ],
            ),
            composite(0x99, vec![]),
            Value::Int(3),
        ];
        for v in bad_states {
            assert!(DeliveryState::from_value(v.clone()).is_err(), "{v:?}");
        }
    }
}
