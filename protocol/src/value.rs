//! Typed values: JMS's property types, also used for map bodies.
//!
//! On the wire a value is a one-byte tag and its payload:
//!
//! | tag | type | payload |
//! |---|---|---|
//! | 1 | bool | u8, 0 or 1 |
//! | 2 | i8 | 1 byte |
//! | 3 | i16 | 2 bytes |
//! | 4 | i32 | 4 bytes |
//! | 5 | i64 | 8 bytes |
//! | 6 | f32 | 4 bytes, IEEE 754 |
//! | 7 | f64 | 8 bytes, IEEE 754 |
//! | 8 | string | str32 |

use std::fmt;

use bytes::BufMut;

use crate::cursor::{put_str32, Cursor};
use crate::error::Error;

/// An owned typed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// A signed byte.
    I8(i8),
    /// A short.
    I16(i16),
    /// An int.
    I32(i32),
    /// A long.
    I64(i64),
    /// A float.
    F32(f32),
    /// A double.
    F64(f64),
    /// A string.
    String(String),
}

/// A value borrowed from an encoded message: what the server reads without
/// allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// A boolean.
    Bool(bool),
    /// A signed byte.
    I8(i8),
    /// A short.
    I16(i16),
    /// An int.
    I32(i32),
    /// A long.
    I64(i64),
    /// A float.
    F32(f32),
    /// A double.
    F64(f64),
    /// A string.
    String(&'a str),
}

impl<'a> ValueRef<'a> {
    /// Reads a tagged value.
    pub fn decode(c: &mut Cursor<'a>) -> Result<ValueRef<'a>, Error> {
        const F: &str = "property value";
        Ok(match c.u8("value tag")? {
            1 => match c.u8(F)? {
                0 => ValueRef::Bool(false),
                1 => ValueRef::Bool(true),
                b => return Err(Error::invalid("bool value", format!("{b} is not 0 or 1"))),
            },
            2 => ValueRef::I8(c.u8(F)? as i8),
            3 => ValueRef::I16(c.u16(F)? as i16),
            4 => ValueRef::I32(c.u32(F)? as i32),
            5 => ValueRef::I64(c.i64(F)?),
            6 => ValueRef::F32(f32::from_bits(c.u32(F)?)),
            7 => ValueRef::F64(f64::from_bits(c.u64(F)?)),
            8 => ValueRef::String(c.str32(F)?),
            t => return Err(Error::invalid("value tag", format!("unknown tag {t}"))),
        })
    }

    /// An owned copy.
    pub fn to_owned(self) -> Value {
        match self {
            ValueRef::Bool(v) => Value::Bool(v),
            ValueRef::I8(v) => Value::I8(v),
            ValueRef::I16(v) => Value::I16(v),
            ValueRef::I32(v) => Value::I32(v),
            ValueRef::I64(v) => Value::I64(v),
            ValueRef::F32(v) => Value::F32(v),
            ValueRef::F64(v) => Value::F64(v),
            ValueRef::String(v) => Value::String(v.to_owned()),
        }
    }
}

impl Value {
    /// Writes the tagged value.
    pub fn encode(&self, dst: &mut impl BufMut) -> Result<(), Error> {
        match self {
            Value::Bool(v) => {
                dst.put_u8(1);
                dst.put_u8(u8::from(*v));
            }
            Value::I8(v) => {
                dst.put_u8(2);
                dst.put_i8(*v);
            }
            Value::I16(v) => {
                dst.put_u8(3);
                dst.put_i16(*v);
            }
            Value::I32(v) => {
                dst.put_u8(4);
                dst.put_i32(*v);
            }
            Value::I64(v) => {
                dst.put_u8(5);
                dst.put_i64(*v);
            }
            Value::F32(v) => {
                dst.put_u8(6);
                dst.put_u32(v.to_bits());
            }
            Value::F64(v) => {
                dst.put_u8(7);
                dst.put_u64(v.to_bits());
            }
            Value::String(v) => {
                dst.put_u8(8);
                put_str32(dst, v, "string value")?;
            }
        }
        Ok(())
    }

    /// The JMS name of this value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "boolean",
            Value::I8(_) => "byte",
            Value::I16(_) => "short",
            Value::I32(_) => "int",
            Value::I64(_) => "long",
            Value::F32(_) => "float",
            Value::F64(_) => "double",
            Value::String(_) => "string",
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an i64, if it is an integer type.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an f64, if it is a float or a double (as JMS converts
    /// property values: integers are not read as floating point).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// Parses `text` as the most specific value it spells: `true`/`false`,
    /// an integer (i32 if it fits, else i64), a float, else a string. This is
    /// what the command line does with `-P key=value`.
    pub fn infer(text: &str) -> Value {
        match text {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => {}
        }
        if let Ok(v) = text.parse::<i32>() {
            Value::I32(v)
        } else if let Ok(v) = text.parse::<i64>() {
            Value::I64(v)
        } else if let (true, Ok(v)) = (text.contains(['.', 'e', 'E']), text.parse::<f64>()) {
            Value::F64(v)
        } else {
            Value::String(text.to_owned())
        }
    }
}

/// A value as what it is (`true`, `3`, `2.5`, `"EU"`), its JMS type left
/// behind: what JSON can say of it.
impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Bool(v) => s.serialize_bool(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::F32(v) => s.serialize_f32(*v),
            Value::F64(v) => s.serialize_f64(*v),
            Value::String(v) => s.serialize_str(v),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v}"),
        }
    }
}

macro_rules! from_impls {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(v.into())
            }
        })*
    };
}

from_impls!(bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64, f32 => F32, f64 => F64,
    String => String, &str => String, u8 => I16, u16 => I32, u32 => I64);

/// An `isize` is at most 64 bits wide on every target Rust supports.
impl From<isize> for Value {
    fn from(v: isize) -> Value {
        Value::I64(v as i64)
    }
}

/// JMS has no unsigned 64-bit type: a `u64` above `i64::MAX` does not fit.
impl TryFrom<u64> for Value {
    type Error = std::num::TryFromIntError;

    fn try_from(v: u64) -> Result<Value, Self::Error> {
        i64::try_from(v).map(Value::I64)
    }
}

/// As for `u64`.
impl TryFrom<usize> for Value {
    type Error = std::num::TryFromIntError;

    fn try_from(v: usize) -> Result<Value, Self::Error> {
        i64::try_from(v).map(Value::I64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> Vec<Value> {
        vec![
            Value::Bool(true),
            Value::Bool(false),
            Value::I8(-8),
            Value::I16(-16_000),
            Value::I32(i32::MIN),
            Value::I64(i64::MAX),
            Value::F32(1.5),
            Value::F64(-2.25e100),
            Value::String("ünïcode".into()),
            Value::String(String::new()),
        ]
    }

    #[test]
    fn round_trips_every_type() {
        for v in every_type() {
            let mut buf = Vec::new();
            v.encode(&mut buf).unwrap();
            let mut c = Cursor::new(&buf);
            assert_eq!(ValueRef::decode(&mut c).unwrap().to_owned(), v);
            c.finish().unwrap();
        }
    }

    #[test]
    fn rejects_unknown_tags_and_bad_bools() {
        assert!(ValueRef::decode(&mut Cursor::new(&[9, 0])).is_err());
        assert!(ValueRef::decode(&mut Cursor::new(&[1, 2])).is_err());
        assert!(ValueRef::decode(&mut Cursor::new(&[5, 0, 0])).is_err());
    }

    #[test]
    fn infers_types_from_text() {
        assert_eq!(Value::infer("3"), Value::I32(3));
        assert_eq!(Value::infer("10000000000"), Value::I64(10_000_000_000));
        assert_eq!(Value::infer("2.5"), Value::F64(2.5));
        assert_eq!(Value::infer("true"), Value::Bool(true));
        assert_eq!(Value::infer("EU"), Value::String("EU".into()));
        assert_eq!(Value::infer("inf"), Value::String("inf".into()));
    }
}
