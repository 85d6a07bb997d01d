//! A link's ends (part 3.5): the `source` and `target` termini, and the
//! transaction `coordinator` a sender may attach to instead of a target.

use super::fields::{composite, descriptor_code, opt, symbols, Fields};
use super::types::Value;
use super::AmqpError;

const SOURCE: (u64, &str) = (0x28, "amqp:source:list");
const TARGET: (u64, &str) = (0x29, "amqp:target:list");
const COORDINATOR: (u64, &str) = (0x30, "amqp:coordinator:list");

/// The descriptor of a JMS selector in a source's filter set, as Qpid JMS
/// and ActiveMQ send it; its value is the selector's text.
pub const SELECTOR_FILTER: (u64, &str) =
    (0x0000_468C_0000_0004, "apache.org:selector-filter:string");
/// The descriptor of the no-local filter: messages this connection
/// published are not delivered to it.
pub const NO_LOCAL_FILTER: (u64, &str) = (0x0000_468C_0000_0003, "apache.org:no-local-filter:list");

/// What of a terminus outlives its link (`terminus-durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Nothing (the default).
    #[default]
    None,
    /// The terminus itself: a durable subscription.
    Configuration,
    /// It and the state of its unsettled deliveries.
    UnsettledState,
}

impl Durability {
    fn from_uint(n: Option<u32>) -> Result<Durability, AmqpError> {
        match n.unwrap_or(0) {
            0 => Ok(Durability::None),
            1 => Ok(Durability::Configuration),
            2 => Ok(Durability::UnsettledState),
            n => Err(AmqpError::Invalid(format!(
                "terminus durability {n} is not 0, 1 or 2"
            ))),
        }
    }

    fn to_value(self) -> Value {
        match self {
            Durability::None => Value::Null,
            Durability::Configuration => Value::Uint(1),
            Durability::UnsettledState => Value::Uint(2),
        }
    }
}

/// What a `source` and a `target` have in common: the node and how long
/// the terminus lives. A target is this alone.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Terminus {
    /// The node's address; none for the anonymous relay (a target whose
    /// messages each say where they go) or a dynamic node not yet made.
    pub address: Option<String>,
    /// What outlives the link.
    pub durable: Durability,
    /// When the terminus goes: `link-detach`, `session-end` (the default),
    /// `connection-close` or `never`.
    pub expiry_policy: Option<String>,
    /// Seconds it stays after that (0: none).
    pub timeout: u32,
    /// Asks the receiving side to make a node (a temporary queue).
    pub dynamic: bool,
    /// Capabilities of the node (`queue`, `topic`, `shared`, `global`...).
    pub capabilities: Vec<String>,
}

/// A `target`: where a link's messages go.
pub type Target = Terminus;

/// A `source`: where a link's messages come from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Source {
    /// The node, and how long the terminus lives.
    pub node: Terminus,
    /// `move` (a queue's consumers share its messages) or `copy` (a
    /// browser, or a topic's subscriber).
    pub distribution_mode: Option<String>,
    /// The filter set: name → described filter.
    pub filter: Vec<(Value, Value)>,
    /// The outcome of deliveries settled without one.
    pub default_outcome: Value,
    /// Outcomes the sender of the attach supports.
    pub outcomes: Vec<String>,
}

/// What a link's target field holds.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkTarget {
    /// A node.
    Target(Target),
    /// The transaction coordinator, with the transaction capabilities
    /// asked for (`amqp:local-transactions`, ...).
    Coordinator(Vec<String>),
}

/// An address field: a string (a symbol is taken too, as some clients
/// send one).
fn address(f: &Fields, i: usize) -> Result<Option<String>, AmqpError> {
    match f.value(i) {
        Value::Null => Ok(None),
        Value::String(s) | Value::Symbol(s) => Ok(Some(s)),
        v => Err(AmqpError::Invalid(format!(
            "a terminus address is {v:?}, not a string"
        ))),
    }
}

fn address_value(a: &Option<String>) -> Value {
    opt(a.clone(), Value::String)
}

impl Source {
    /// The source in an attach's source field; `None` if null.
    pub fn from_value(value: Value) -> Result<Option<Source>, AmqpError> {
        if value == Value::Null {
            return Ok(None);
        }
        let f = Fields::of(value, SOURCE, "source")?;
        let filter = match f.value(7) {
            Value::Null => Vec::new(),
            Value::Map(pairs) => pairs,
            v => {
                return Err(AmqpError::Invalid(format!(
                    "source.filter is {v:?}, not a map"
                )))
            }
        };
        Ok(Some(Source {
            node: Terminus::from_fields(&f, 10)?,
            distribution_mode: f.symbol(6, "distribution-mode")?,
            filter,
            default_outcome: f.value(8),
            outcomes: f.symbols(9, "outcomes")?,
        }))
    }

    /// As a described list.
    pub fn to_value(&self) -> Value {
        let mut fields = self.node.common_fields();
        fields.extend([
            Value::Null,
            opt(self.distribution_mode.clone(), Value::Symbol),
            match self.filter.is_empty() {
                true => Value::Null,
                false => Value::Map(self.filter.clone()),
            },
            self.default_outcome.clone(),
            symbols(&self.outcomes),
            symbols(&self.node.capabilities),
        ]);
        composite(SOURCE.0, fields)
    }

    /// The JMS selector among its filters, if there is one: a
    /// described value named by [`SELECTOR_FILTER`] holding a string.
    pub fn selector(&self) -> Result<Option<&str>, AmqpError> {
        for (_, filter) in &self.filter {
            if descriptor_code(filter, &[SELECTOR_FILTER]) == Some(SELECTOR_FILTER.0) {
                return match filter {
                    Value::Described(_, v) => match &**v {
                        Value::String(s) => Ok(Some(s)),
                        v => Err(AmqpError::Invalid(format!(
                            "the selector filter holds {v:?}, not a string"
                        ))),
                    },
                    _ => Ok(None),
                };
            }
        }
        Ok(None)
    }

    /// Whether its filters ask for no-local.
    pub fn no_local(&self) -> bool {
        self.filter
            .iter()
            .any(|(_, f)| descriptor_code(f, &[NO_LOCAL_FILTER]) == Some(NO_LOCAL_FILTER.0))
    }

    /// The filters it asks for that are not the selector or no-local,
    /// by key: a broker that does not apply them must not claim to.
    pub fn unknown_filters(&self) -> Vec<&Value> {
        let known = [SELECTOR_FILTER, NO_LOCAL_FILTER];
        self.filter
            .iter()
            .filter(|(_, f)| {
                descriptor_code(f, &known).is_none_or(|c| !known.iter().any(|k| k.0 == c))
            })
            .map(|(k, _)| k)
            .collect()
    }
}

impl Terminus {
    /// Reads the fields both kinds have; their capabilities are field
    /// `capabilities`.
    fn from_fields(f: &Fields, capabilities: usize) -> Result<Terminus, AmqpError> {
        Ok(Terminus {
            address: address(f, 0)?,
            durable: Durability::from_uint(f.uint(1, "durable")?)?,
            expiry_policy: f.symbol(2, "expiry-policy")?,
            timeout: f.uint(3, "timeout")?.unwrap_or(0),
            dynamic: f.bool(4, "dynamic")?.unwrap_or(false),
            capabilities: f.symbols(capabilities, "capabilities")?,
        })
    }

    /// The first five fields, which both kinds have.
    fn common_fields(&self) -> Vec<Value> {
        vec![
            address_value(&self.address),
            self.durable.to_value(),
            opt(self.expiry_policy.clone(), Value::Symbol),
            opt(Some(self.timeout).filter(|t| *t != 0), Value::Uint),
            opt(Some(true).filter(|_| self.dynamic), Value::Bool),
        ]
    }

    /// As a described `target`.
    pub fn to_value(&self) -> Value {
        let mut fields = self.common_fields();
        fields.extend([Value::Null, symbols(&self.capabilities)]);
        composite(TARGET.0, fields)
    }
}

impl LinkTarget {
    /// What an attach's target field holds; `None` if null.
    pub fn from_value(value: Value) -> Result<Option<LinkTarget>, AmqpError> {
        match descriptor_code(&value, &[TARGET, COORDINATOR]) {
            _ if value == Value::Null => Ok(None),
            Some(0x29) => {
                let f = Fields::of(value, TARGET, "target")?;
                Ok(Some(LinkTarget::Target(Terminus::from_fields(&f, 6)?)))
            }
            Some(0x30) => {
                let f = Fields::of(value, COORDINATOR, "coordinator")?;
                Ok(Some(LinkTarget::Coordinator(f.symbols(0, "capabilities")?)))
            }
            _ => Err(AmqpError::Invalid(format!(
                "a link's target is {value:?}, neither a target nor a coordinator"
            ))),
        }
    }

    /// As a described list.
    pub fn to_value(&self) -> Value {
        match self {
            LinkTarget::Target(t) => t.to_value(),
            LinkTarget::Coordinator(caps) => composite(COORDINATOR.0, vec![symbols(caps)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fields::through_wire as wire;

    #[test]
    fn a_source_round_trips_with_its_selector() {
        let selector = Value::Described(
            Box::new(Value::Symbol(SELECTOR_FILTER.1.into())),
            Box::new(Value::String("color = 'red'".into())),
        );
        let no_local = Value::Described(
            Box::new(Value::Ulong(NO_LOCAL_FILTER.0)),
            Box::new(Value::List(vec![])),
        );
        let odd = Value::Described(
            Box::new(Value::Symbol("x-odd".into())),
            Box::new(Value::Null),
        );
        let s = Source {
            node: Terminus {
                address: Some("orders".into()),
                durable: Durability::UnsettledState,
                expiry_policy: Some("never".into()),
                timeout: 0,
                dynamic: false,
                capabilities: vec!["topic".into(), "shared".into()],
            },
            distribution_mode: Some("copy".into()),
            filter: vec![
                (Value::Symbol("jms-selector".into()), selector),
                (Value::Symbol("no-local".into()), no_local),
                (Value::Symbol("odd".into()), odd),
            ],
            default_outcome: Value::Null,
            outcomes: vec!["amqp:accepted:list".into()],
        };
        let back = Source::from_value(wire(&s.to_value())).unwrap().unwrap();
        assert_eq!(back, s);
        assert_eq!(back.selector().unwrap(), Some("color = 'red'"));
        assert!(back.no_local());
        assert_eq!(back.unknown_filters(), vec![&Value::Symbol("odd".into())]);
        assert_eq!(Source::from_value(Value::Null).unwrap(), None);
    }

    #[test]
    fn targets_and_coordinators_round_trip() {
        let t = LinkTarget::Target(Target {
            address: Some("topic://news".into()),
            dynamic: true,
            capabilities: vec!["temporary-queue".into()],
            ..Target::default()
        });
        assert_eq!(
            LinkTarget::from_value(wire(&t.to_value())).unwrap(),
            Some(t)
        );
        let c = LinkTarget::Coordinator(vec!["amqp:local-transactions".into()]);
        assert_eq!(
            LinkTarget::from_value(wire(&c.to_value())).unwrap(),
            Some(c)
        );
        assert_eq!(LinkTarget::from_value(Value::Null).unwrap(), None);
    }

    #[test]
    fn bad_termini_are_refused_with_a_reason() {
        let bad = [
            composite(0x28, vec![Value::Int(3)]),
            composite(0x28, vec![Value::Null, Value::Uint(7)]),
            composite(
                0x28,
                vec![Value::Null; 7]
                    .into_iter()
                    .chain([Value::Int(1)])
                    .collect(),
            ),
            composite(0x29, vec![Value::Null, Value::Null, Value::Int(1)]),
        ];
        for v in bad {
            let source = Source::from_value(v.clone());
            let target = LinkTarget::from_value(v.clone());
            assert!(source.is_err() || target.is_err(), "{v:?}");
        }
        assert!(LinkTarget::from_value(composite(0x77, vec![])).is_err());
        let selector = Source {
            filter: vec![(
                Value::Symbol("s".into()),
                Value::Described(
                    Box::new(Value::Ulong(SELECTOR_FILTER.0)),
                    Box::new(Value::Int(1)),
                ),
            )],
            ..Source::default()
        };
        assert!(selector.selector().is_err());
    }
}
