//! Reading and writing the described lists that AMQP 1.0's composite types
//! are: performatives, SASL frames, errors. A composite is a descriptor (a
//! ulong code, or its symbolic name) and a list of fields by position;
//! fields at the end may be left out, and a `null` field takes its
//! default.

use super::types::{Raw, Value};
use super::AmqpError;

/// The fields of a composite, read by position.
pub struct Fields {
    /// What the composite is, for errors.
    name: &'static str,
    items: Vec<Value>,
}

impl Fields {
    /// The fields of `value` if it is the composite `code` (or `symbol`).
    pub fn of(
        value: Value,
        (code, symbol): (u64, &str),
        name: &'static str,
    ) -> Result<Fields, AmqpError> {
        let Value::Described(descriptor, list) = value else {
            return Err(AmqpError::Invalid(format!("{name}: not a described value")));
        };
        let matches = match *descriptor {
            Value::Ulong(c) => c == code,
            Value::Symbol(ref s) => s == symbol,
            _ => false,
        };
        if !matches {
            return Err(AmqpError::Invalid(format!(
                "expected {name}, found the descriptor {descriptor:?}"
            )));
        }
        Fields::list(*list, name)
    }

    /// The fields of a composite whose descriptor was read already: the
    /// list it describes.
    pub fn list(list: Value, name: &'static str) -> Result<Fields, AmqpError> {
        match list {
            Value::List(items) => Ok(Fields { name, items }),
            other => Err(AmqpError::Invalid(format!(
                "{name}: its fields are not a list but {other:?}"
            ))),
        }
    }

    /// Field `i`, `None` when absent or null.
    fn get(&self, i: usize) -> Option<&Value> {
        self.items.get(i).filter(|v| **v != Value::Null)
    }

    fn wrong(&self, field: &str, v: &Value, wanted: &str) -> AmqpError {
        AmqpError::Invalid(format!("{}.{field}: {v:?} is not a {wanted}", self.name))
    }

    /// A mandatory field.
    fn required<'a>(&'a self, i: usize, field: &str) -> Result<&'a Value, AmqpError> {
        self.get(i)
            .ok_or_else(|| AmqpError::Invalid(format!("{}.{field} is mandatory", self.name)))
    }

    /// A string field (`string`).
    pub fn string(&self, i: usize, field: &str) -> Result<Option<String>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(field, v, "string")),
        }
    }

    /// A mandatory string field.
    pub fn required_string(&self, i: usize, field: &str) -> Result<String, AmqpError> {
        match self.required(i, field)? {
            Value::String(s) => Ok(s.clone()),
            v => Err(self.wrong(field, v, "string")),
        }
    }

    /// A symbol field.
    pub fn symbol(&self, i: usize, field: &str) -> Result<Option<String>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Symbol(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(field, v, "symbol")),
        }
    }

    /// A field of symbols: one, or an array of them (`multiple="true"`).
    pub fn symbols(&self, i: usize, field: &str) -> Result<Vec<String>, AmqpError> {
        match self.get(i) {
            None => Ok(Vec::new()),
            Some(Value::Symbol(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Symbol(s) => Ok(s.clone()),
                    v => Err(self.wrong(field, v, "symbol")),
                })
                .collect(),
            Some(v) => Err(self.wrong(field, v, "symbol or array of symbols")),
        }
    }

    /// A `uint` field (a `ushort` or `ubyte` is taken too).
    pub fn uint(&self, i: usize, field: &str) -> Result<Option<u32>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Uint(n)) => Ok(Some(*n)),
            Some(Value::Ushort(n)) => Ok(Some((*n).into())),
            Some(Value::Ubyte(n)) => Ok(Some((*n).into())),
            Some(v) => Err(self.wrong(field, v, "uint")),
        }
    }

    /// A mandatory `uint` field.
    pub fn required_uint(&self, i: usize, field: &str) -> Result<u32, AmqpError> {
        self.required(i, field)?;
        Ok(self.uint(i, field)?.unwrap_or_default())
    }

    /// A `ulong` field (smaller unsigned kinds are taken too).
    pub fn ulong(&self, i: usize, field: &str) -> Result<Option<u64>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Ulong(n)) => Ok(Some(*n)),
            Some(_) => Ok(self.uint(i, field)?.map(u64::from)),
        }
    }

    /// A `boolean` field.
    pub fn bool(&self, i: usize, field: &str) -> Result<Option<bool>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(field, v, "boolean")),
        }
    }

    /// A mandatory `boolean` field.
    pub fn required_bool(&self, i: usize, field: &str) -> Result<bool, AmqpError> {
        self.required(i, field)?;
        Ok(self.bool(i, field)?.unwrap_or_default())
    }

    /// A `ushort` field.
    pub fn ushort(&self, i: usize, field: &str) -> Result<Option<u16>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Ushort(n)) => Ok(Some(*n)),
            Some(Value::Ubyte(n)) => Ok(Some((*n).into())),
            Some(v) => Err(self.wrong(field, v, "ushort")),
        }
    }

    /// A `ubyte` field.
    pub fn ubyte(&self, i: usize, field: &str) -> Result<Option<u8>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Ubyte(n)) => Ok(Some(*n)),
            Some(v) => Err(self.wrong(field, v, "ubyte")),
        }
    }

    /// A `binary` field.
    pub fn binary(&self, i: usize, field: &str) -> Result<Option<bytes::Bytes>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Binary(b)) => Ok(Some(b.clone())),
            Some(v) => Err(self.wrong(field, v, "binary")),
        }
    }

    /// A field of any value (null when absent).
    pub fn value(&self, i: usize) -> Value {
        self.get(i).cloned().unwrap_or(Value::Null)
    }
}

/// Fields [`RawFields`] keeps: as many as the composites read in place
/// have (properties, 13); later ones are not looked at.
const RAW_FIELDS: usize = 13;

/// The fields of a composite read in place ([`Raw`]), nothing allocated:
/// what the composites that come once per message (a transfer, a
/// message's header and properties) are read with.
pub struct RawFields<'a> {
    name: &'static str,
    items: [Raw<'a>; RAW_FIELDS],
}

impl<'a> RawFields<'a> {
    /// The composite `code` (or `symbol`) at the start of `buf`, read in
    /// one pass, and the bytes it took; `None` if `buf` holds another
    /// value.
    pub fn read(
        buf: &'a [u8],
        (code, symbol): (u64, &str),
        name: &'static str,
    ) -> Result<Option<(RawFields<'a>, usize)>, AmqpError> {
        let mut items = [Raw::Null; RAW_FIELDS];
        let wanted = |d: Raw<'_>| match d {
            Raw::Ulong(c) => c == code,
            Raw::Symbol(s) => s == symbol,
            _ => false,
        };
        Ok(Raw::read_composite(buf, wanted, &mut items)?
            .map(|used| (RawFields { name, items }, used)))
    }

    /// The fields of a composite whose descriptor was read already.
    pub fn list(list: Raw<'a>, name: &'static str) -> Result<RawFields<'a>, AmqpError> {
        let fields = list.items().filter(|_| !list.is_map()).ok_or_else(|| {
            AmqpError::Invalid(format!("{name}: its fields are not a list but {list:?}"))
        })?;
        let mut items = [Raw::Null; RAW_FIELDS];
        for (slot, field) in items.iter_mut().zip(fields) {
            *slot = field;
        }
        Ok(RawFields { name, items })
    }

    /// Field `i`, `None` when absent or null.
    fn get(&self, i: usize) -> Option<Raw<'a>> {
        self.items.get(i).copied().filter(|v| *v != Raw::Null)
    }

    fn wrong(&self, field: &str, v: Raw<'a>, wanted: &str) -> AmqpError {
        AmqpError::Invalid(format!("{}.{field}: {v:?} is not a {wanted}", self.name))
    }

    /// A `uint` field (a `ushort` or `ubyte` is taken too).
    pub fn uint(&self, i: usize, field: &str) -> Result<Option<u32>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Uint(n)) => Ok(Some(n)),
            Some(Raw::Ushort(n)) => Ok(Some(n.into())),
            Some(Raw::Ubyte(n)) => Ok(Some(n.into())),
            Some(v) => Err(self.wrong(field, v, "uint")),
        }
    }

    /// A mandatory `uint` field.
    pub fn required_uint(&self, i: usize, field: &str) -> Result<u32, AmqpError> {
        self.uint(i, field)?
            .ok_or_else(|| AmqpError::Invalid(format!("{}.{field} is mandatory", self.name)))
    }

    /// A `boolean` field.
    pub fn bool(&self, i: usize, field: &str) -> Result<Option<bool>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Bool(b)) => Ok(Some(b)),
            Some(v) => Err(self.wrong(field, v, "boolean")),
        }
    }

    /// A `ubyte` field.
    pub fn ubyte(&self, i: usize, field: &str) -> Result<Option<u8>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Ubyte(n)) => Ok(Some(n)),
            Some(v) => Err(self.wrong(field, v, "ubyte")),
        }
    }

    /// A `binary` field.
    pub fn binary(&self, i: usize, field: &str) -> Result<Option<&'a [u8]>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Binary(b)) => Ok(Some(b)),
            Some(v) => Err(self.wrong(field, v, "binary")),
        }
    }

    /// A `string` field.
    pub fn string(&self, i: usize, field: &str) -> Result<Option<&'a str>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(field, v, "string")),
        }
    }

    /// A `symbol` field.
    pub fn symbol(&self, i: usize, field: &str) -> Result<Option<&'a str>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Symbol(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(field, v, "symbol")),
        }
    }

    /// A string field that may come as a symbol (some clients send
    /// addresses so).
    pub fn address(&self, i: usize, field: &str) -> Result<Option<&'a str>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::String(s) | Raw::Symbol(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(field, v, "string")),
        }
    }

    /// A `timestamp` field.
    pub fn timestamp(&self, i: usize, field: &str) -> Result<Option<i64>, AmqpError> {
        match self.get(i) {
            None => Ok(None),
            Some(Raw::Timestamp(t)) => Ok(Some(t)),
            Some(v) => Err(self.wrong(field, v, "timestamp")),
        }
    }

    /// A field of any value (null when absent).
    pub fn value(&self, i: usize) -> Raw<'a> {
        self.get(i).unwrap_or(Raw::Null)
    }
}

/// The code of the composite `value` is, given by number or by one of the
/// symbolic names in `known`; `None` if it is not a described value or
/// names none of them.
pub fn descriptor_code(value: &Value, known: &[(u64, &str)]) -> Option<u64> {
    let Value::Described(d, _) = value else {
        return None;
    };
    match **d {
        Value::Ulong(c) => Some(c),
        Value::Symbol(ref s) => known.iter().find(|(_, name)| name == s).map(|(c, _)| *c),
        _ => None,
    }
}

/// A composite `code` with these fields, trailing nulls left out.
pub fn composite(code: u64, mut fields: Vec<Value>) -> Value {
    while fields.last() == Some(&Value::Null) {
        fields.pop();
    }
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(fields)))
}

/// An optional value, or null.
pub fn opt<T>(v: Option<T>, make: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Null, make)
}

/// Symbols as a field: null if none, one symbol, or an array.
pub fn symbols(list: &[String]) -> Value {
    match list {
        [] => Value::Null,
        [one] => Value::Symbol(one.clone()),
        many => Value::Array(many.iter().cloned().map(Value::Symbol).collect()),
    }
}

/// `v` encoded and decoded again, for tests of what is built on values.
#[cfg(test)]
pub(crate) fn through_wire(v: &Value) -> Value {
    let mut b = Vec::new();
    v.encode(&mut b);
    Value::decode(&b).unwrap().0
}
