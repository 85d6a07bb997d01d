//! Message selectors: the JMS selector language over headers and
//! properties, plus `ident MATCHES 'regex'` for content-based routing.
//!
//! A selector is parsed once, when its consumer is created; a syntax error
//! names the byte position where it was found. It is then evaluated on the
//! server for every candidate message, with SQL's three-valued logic:
//! a missing property is NULL, any comparison with NULL is UNKNOWN, and
//! only TRUE selects. Numeric types promote as JMS says (integers compare
//! exactly; with a float on either side both compare as doubles); strings
//! and booleans compare only with `=` and `<>`; a type mismatch is UNKNOWN.
//!
//! Header identifiers: `JMSDeliveryMode` ('PERSISTENT' or
//! 'NON_PERSISTENT'), `JMSPriority`, `JMSMessageID`, `JMSTimestamp`,
//! `JMSExpiration`, `JMSCorrelationID`, `JMSType`, and the JMS-defined
//! `JMSXDeliveryCount` (the delivery the message would be: 1 for the
//! first; see [`Selector::matches_delivery`]). Any other identifier names
//! a property (`JMSXGroupID`, `JMSXGroupSeq` and `JMSXUserID` are
//! properties a message carries).

mod eval;
mod lexer;
mod like;
mod parser;

use std::fmt;

use crate::message::{DeliveryMode, MessageRef};
use crate::value::ValueRef;

use eval::Budget;
use parser::Expr;

/// A selector that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector at position {position}: {message}")]
pub struct SelectorError {
    /// Byte offset in the selector text.
    pub position: usize,
    /// What was wrong.
    pub message: String,
}

impl SelectorError {
    fn new(position: usize, message: impl Into<String>) -> SelectorError {
        SelectorError {
            position,
            message: message.into(),
        }
    }
}

/// Bounds on what one selector may cost, so that a hostile one is refused
/// when it is parsed and can never stall the thread that evaluates it.
///
/// Parsing is recursive descent and evaluation walks the tree, so depth
/// is bounded first; the rest bounds time and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorLimits {
    /// Longest selector text, in bytes.
    pub max_length: usize,
    /// Deepest nesting: parentheses, NOT, unary signs and arithmetic
    /// chains each count one level.
    pub max_depth: usize,
    /// Most nodes in the parsed tree (an IN list's strings count too).
    pub max_nodes: usize,
    /// Largest compiled `MATCHES` regular expression, in bytes.
    pub max_regex_bytes: usize,
    /// Work one evaluation may do, in steps: a node is one step, a string
    /// scanned by LIKE, IN or MATCHES costs about a step per byte. A
    /// message that would cost more is not selected.
    pub eval_budget: u64,
}

impl Default for SelectorLimits {
    fn default() -> SelectorLimits {
        SelectorLimits {
            max_length: 8192,
            max_depth: 64,
            max_nodes: 4096,
            max_regex_bytes: 1 << 20,
            eval_budget: 4 << 20,
        }
    }
}

/// A value a selector can see.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'a> {
    /// Absent, or UNKNOWN.
    Null,
    /// A boolean.
    Bool(bool),
    /// Any integer type.
    Long(i64),
    /// Any floating-point type.
    Double(f64),
    /// A string.
    Str(&'a str),
}

/// A JMS header a selector names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    DeliveryMode,
    Priority,
    MessageId,
    Timestamp,
    Expiration,
    CorrelationId,
    Type,
    DeliveryCount,
}

impl Header {
    fn named(name: &str) -> Option<Header> {
        Some(match name {
            "JMSDeliveryMode" => Header::DeliveryMode,
            "JMSPriority" => Header::Priority,
            "JMSMessageID" => Header::MessageId,
            "JMSTimestamp" => Header::Timestamp,
            "JMSExpiration" => Header::Expiration,
            "JMSCorrelationID" => Header::CorrelationId,
            "JMSType" => Header::Type,
            "JMSXDeliveryCount" => Header::DeliveryCount,
            _ => return None,
        })
    }

    fn value<'a>(self, m: &MessageRef<'a>, delivery_count: u32) -> FieldValue<'a> {
        let opt = |s: Option<&'a str>| s.map_or(FieldValue::Null, FieldValue::Str);
        match self {
            Header::DeliveryMode => FieldValue::Str(match m.delivery_mode() {
                DeliveryMode::Persistent => "PERSISTENT",
                DeliveryMode::NonPersistent => "NON_PERSISTENT",
            }),
            Header::Priority => FieldValue::Long(m.priority.into()),
            Header::MessageId => FieldValue::Str(m.message_id),
            Header::Timestamp => FieldValue::Long(m.timestamp),
            Header::Expiration => FieldValue::Long(m.expiration),
            Header::CorrelationId => opt(m.correlation_id),
            Header::Type => opt(m.message_type),
            Header::DeliveryCount => FieldValue::Long(delivery_count.into()),
        }
    }
}

/// Identifiers a selector reads, by the slot each one's value goes in
/// before evaluation.
#[derive(Debug, Default)]
struct Slots {
    count: usize,
    headers: Vec<(usize, Header)>,
    /// Property names, sorted for binary search, so that filling the
    /// slots is one pass over the message's properties: O(p log k), not
    /// O(p k) lookups.
    properties: Vec<(String, usize)>,
}

impl Slots {
    fn new(names: Vec<String>) -> Slots {
        let mut slots = Slots {
            count: names.len(),
            ..Slots::default()
        };
        for (slot, name) in names.into_iter().enumerate() {
            match Header::named(&name) {
                Some(h) => slots.headers.push((slot, h)),
                None => slots.properties.push((name, slot)),
            }
        }
        slots.properties.sort_unstable();
        slots
    }

    /// Puts each identifier's value in its slot; a property that appears
    /// twice takes its first value.
    fn fill<'a>(&self, m: &MessageRef<'a>, delivery_count: u32, values: &mut [FieldValue<'a>]) {
        for &(slot, h) in &self.headers {
            values[slot] = h.value(m, delivery_count);
        }
        let mut missing = self.properties.len();
        if missing == 0 {
            return;
        }
        for (name, value) in m.properties.clone() {
            let Ok(i) = self
                .properties
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
            else {
                continue;
            };
            let slot = self.properties[i].1;
            if values[slot] != FieldValue::Null {
                continue;
            }
            values[slot] = field_value(value);
            missing -= 1;
            if missing == 0 {
                return;
            }
        }
    }
}

fn field_value(v: ValueRef<'_>) -> FieldValue<'_> {
    match v {
        ValueRef::Bool(b) => FieldValue::Bool(b),
        ValueRef::I8(v) => FieldValue::Long(v.into()),
        ValueRef::I16(v) => FieldValue::Long(v.into()),
        ValueRef::I32(v) => FieldValue::Long(v.into()),
        ValueRef::I64(v) => FieldValue::Long(v),
        ValueRef::F32(v) => FieldValue::Double(v.into()),
        ValueRef::F64(v) => FieldValue::Double(v),
        ValueRef::String(s) => FieldValue::Str(s),
    }
}

/// Largest integer whose every neighbour is a distinct `f64`: a literal
/// within it equals a double property exactly when the double is that
/// integer, so both can be looked up under one key.
const EXACT_IN_F64: i64 = 1 << 53;

/// A constant that a selector requires a property to equal, as a key for
/// indexing subscriptions: a message's property value gives the one key
/// that any such subscription can match ([`IndexKey::of_property`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexKey {
    /// An integer (also a double property with an integral value).
    Long(i64),
    /// A string.
    Str(Box<str>),
}

impl IndexKey {
    /// The key under which the subscriptions that may select a message
    /// with property `name` are indexed, if it has one: its first value
    /// of that name, as [`Selector::matches`] reads it.
    pub fn of_property(m: &MessageRef<'_>, name: &str) -> Option<IndexKey> {
        let value = m.properties.clone().find(|(n, _)| *n == name)?.1;
        match field_value(value) {
            FieldValue::Long(v) => Some(IndexKey::Long(v)),
            FieldValue::Double(d) if d.fract() == 0.0 && d.abs() <= EXACT_IN_F64 as f64 => {
                Some(IndexKey::Long(d as i64))
            }
            FieldValue::Str(s) => Some(IndexKey::Str(s.into())),
            _ => None,
        }
    }
}

/// Slots kept on the stack; a selector naming more identifiers allocates.
const INLINE_SLOTS: usize = 8;

/// A parsed selector.
pub struct Selector {
    source: String,
    expr: Expr,
    slots: Slots,
    eval_budget: u64,
    memory: usize,
}

impl Selector {
    /// Parses a selector within the default [`SelectorLimits`]; it must be
    /// a condition, not a bare value.
    pub fn parse(source: &str) -> Result<Selector, SelectorError> {
        Selector::parse_within(source, &SelectorLimits::default())
    }

    /// Parses a selector, refusing one that exceeds `limits`.
    pub fn parse_within(source: &str, limits: &SelectorLimits) -> Result<Selector, SelectorError> {
        if source.len() > limits.max_length {
            return Err(SelectorError::new(
                limits.max_length,
                format!(
                    "the selector is {} bytes long, more than the {} allowed",
                    source.len(),
                    limits.max_length
                ),
            ));
        }
        let tokens = lexer::tokenize(source)?;
        let parsed = parser::Parser::new(tokens, limits).parse()?;
        if !parsed.expr.is_condition() {
            return Err(SelectorError::new(
                0,
                "the selector is a value, not a condition",
            ));
        }
        Ok(Selector {
            memory: source.len() + parsed.memory,
            source: source.to_owned(),
            expr: parsed.expr,
            slots: Slots::new(parsed.names),
            eval_budget: limits.eval_budget,
        })
    }

    /// The text it was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// About how many bytes of memory it holds: its text, its tree and
    /// its compiled regular expressions with their search caches.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// A property and a constant that it must equal for this selector to
    /// select a message: `name = 'x'` or `name = 7`, alone or as a term of
    /// the top-level `AND`. A message whose property has another value (or
    /// none) is never selected, so subscriptions can be indexed by it.
    pub fn required_equality(&self) -> Option<(&str, IndexKey)> {
        let terms = match &self.expr {
            Expr::And(terms) => terms.as_slice(),
            one => std::slice::from_ref(one),
        };
        terms.iter().find_map(|term| {
            let Expr::Cmp("=", l, r) = term else {
                return None;
            };
            let (slot, constant) = match (l.as_ref(), r.as_ref()) {
                (Expr::Ident(slot), c) | (c, Expr::Ident(slot)) => (*slot, c),
                _ => return None,
            };
            let key = match constant {
                Expr::Long(v) if v.abs() <= EXACT_IN_F64 => IndexKey::Long(*v),
                Expr::Str(s) => IndexKey::Str(s.as_str().into()),
                _ => return None,
            };
            let (name, _) = self.slots.properties.iter().find(|(_, s)| *s == slot)?;
            Some((name.as_str(), key))
        })
    }

    /// Whether it selects this message for its first delivery. A message
    /// whose evaluation would exceed the selector's evaluation budget is
    /// not selected.
    pub fn matches(&self, m: &MessageRef<'_>) -> bool {
        self.matches_delivery(m, 1)
    }

    /// Whether it selects this message for its `delivery_count`th
    /// delivery (`JMSXDeliveryCount`).
    pub fn matches_delivery(&self, m: &MessageRef<'_>, delivery_count: u32) -> bool {
        let mut inline = [FieldValue::Null; INLINE_SLOTS];
        let mut heap = Vec::new();
        let values = if self.slots.count <= INLINE_SLOTS {
            &mut inline[..self.slots.count]
        } else {
            heap.resize(self.slots.count, FieldValue::Null);
            &mut heap[..]
        };
        self.slots.fill(m, delivery_count, values);
        let mut budget = Budget::new(self.eval_budget);
        let result = eval::eval(&self.expr, values, &mut budget);
        result == FieldValue::Bool(true) && !budget.exhausted()
    }
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Selector({:?})", self.source)
    }
}

#[cfg(test)]
mod tests;
