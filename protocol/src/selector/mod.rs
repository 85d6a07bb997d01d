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
//! `JMSExpiration`, `JMSCorrelationID`, `JMSType`. Any other identifier
//! names a property.

mod eval;
mod lexer;
mod parser;

use std::fmt;

use crate::message::{DeliveryMode, MessageRef};
use crate::value::ValueRef;

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

/// Something a selector can be evaluated against.
pub trait Fields<'a> {
    /// The header or property called `name`, or [`FieldValue::Null`].
    fn field(&'a self, name: &str) -> FieldValue<'a>;
}

/// A parsed selector.
pub struct Selector {
    source: String,
    expr: parser::Expr,
}

impl Selector {
    /// Parses a selector; it must be a condition, not a bare value.
    pub fn parse(source: &str) -> Result<Selector, SelectorError> {
        let tokens = lexer::tokenize(source)?;
        let expr = parser::Parser::new(tokens).parse()?;
        if !expr.is_condition() {
            return Err(SelectorError::new(
                0,
                "the selector is a value, not a condition",
            ));
        }
        Ok(Selector {
            source: source.to_owned(),
            expr,
        })
    }

    /// The text it was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it selects the message these fields describe.
    pub fn matches<'a>(&'a self, fields: &'a dyn Fields<'a>) -> bool {
        eval::eval(&self.expr, fields) == FieldValue::Bool(true)
    }
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Selector({:?})", self.source)
    }
}

impl<'a> Fields<'a> for MessageRef<'a> {
    fn field(&'a self, name: &str) -> FieldValue<'a> {
        let opt = |s: Option<&'a str>| s.map_or(FieldValue::Null, FieldValue::Str);
        match name {
            "JMSDeliveryMode" => FieldValue::Str(match self.delivery_mode() {
                DeliveryMode::Persistent => "PERSISTENT",
                DeliveryMode::NonPersistent => "NON_PERSISTENT",
            }),
            "JMSPriority" => FieldValue::Long(self.priority.into()),
            "JMSMessageID" => FieldValue::Str(self.message_id),
            "JMSTimestamp" => FieldValue::Long(self.timestamp),
            "JMSExpiration" => FieldValue::Long(self.expiration),
            "JMSCorrelationID" => opt(self.correlation_id),
            "JMSType" => opt(self.message_type),
            _ => self.properties.clone().find(|(n, _)| *n == name).map_or(
                FieldValue::Null,
                |(_, v)| match v {
                    ValueRef::Bool(b) => FieldValue::Bool(b),
                    ValueRef::I8(v) => FieldValue::Long(v.into()),
                    ValueRef::I16(v) => FieldValue::Long(v.into()),
                    ValueRef::I32(v) => FieldValue::Long(v.into()),
                    ValueRef::I64(v) => FieldValue::Long(v),
                    ValueRef::F32(v) => FieldValue::Double(v.into()),
                    ValueRef::F64(v) => FieldValue::Double(v),
                    ValueRef::String(s) => FieldValue::Str(s),
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests;
