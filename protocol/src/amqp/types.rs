//! The AMQP 1.0 type system (OASIS AMQP 1.0, part 1): values and their
//! encodings.
//!
//! Every value starts with a constructor: a format code, or `0x00`, a
//! descriptor value and a format code (a described type, what performatives
//! and message sections are). Fixed-width codes are followed by their
//! bytes; variable-width ones by a size (1 or 4 bytes) and the bytes;
//! compound ones (list, map) by a size, a count and the elements; an array
//! by a size, a count, one element constructor and the elements' bodies.
//!
//! Decoding never trusts a size or a count: each is checked against the
//! bytes that are there, and nesting is bounded ([`MAX_DEPTH`]). Every
//! value takes at least one byte but the elements of an array of a
//! zero-width type (null, true, false, a zero uint or ulong, an empty
//! list), which could claim four billion elements in a few bytes: such an
//! array holds at most [`MAX_EMPTY_ELEMENTS`]. So no input of n bytes makes
//! more than O(n) values. Encoding picks the smallest form of each value.

use bytes::{BufMut, Bytes};

use super::{put, AmqpError};

/// How deeply lists, maps, arrays and described values may nest.
pub const MAX_DEPTH: usize = 32;

/// Elements an array of a zero-width type may hold.
pub const MAX_EMPTY_ELEMENTS: usize = 65_536;

/// An AMQP value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// `null`.
    #[default]
    Null,
    /// `boolean`.
    Bool(bool),
    /// `ubyte`.
    Ubyte(u8),
    /// `ushort`.
    Ushort(u16),
    /// `uint`.
    Uint(u32),
    /// `ulong`.
    Ulong(u64),
    /// `byte`.
    Byte(i8),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `decimal32` (IEEE 754 decimal, kept as its bytes).
    Decimal32([u8; 4]),
    /// `decimal64`.
    Decimal64([u8; 8]),
    /// `decimal128`.
    Decimal128([u8; 16]),
    /// `char`: a UTF-32 code point.
    Char(char),
    /// `timestamp`: milliseconds since the Unix epoch.
    Timestamp(i64),
    /// `uuid`.
    Uuid([u8; 16]),
    /// `binary`.
    Binary(Bytes),
    /// `string`: UTF-8.
    String(String),
    /// `symbol`: ASCII.
    Symbol(String),
    /// A described value: descriptor (a symbol or a ulong) and the value.
    Described(Box<Value>, Box<Value>),
    /// `list`.
    List(Vec<Value>),
    /// `map`: key/value pairs in order.
    Map(Vec<(Value, Value)>),
    /// `array`: values of one type.
    Array(Vec<Value>),
}

/// Format codes.
pub(crate) mod code {
    pub const DESCRIBED: u8 = 0x00;
    pub const NULL: u8 = 0x40;
    pub const TRUE: u8 = 0x41;
    pub const FALSE: u8 = 0x42;
    pub const UINT0: u8 = 0x43;
    pub const ULONG0: u8 = 0x44;
    pub const LIST0: u8 = 0x45;
    pub const UBYTE: u8 = 0x50;
    pub const BYTE: u8 = 0x51;
    pub const SMALLUINT: u8 = 0x52;
    pub const SMALLULONG: u8 = 0x53;
    pub const SMALLINT: u8 = 0x54;
    pub const SMALLLONG: u8 = 0x55;
    pub const BOOLEAN: u8 = 0x56;
    pub const USHORT: u8 = 0x60;
    pub const SHORT: u8 = 0x61;
    pub const UINT: u8 = 0x70;
    pub const INT: u8 = 0x71;
    pub const FLOAT: u8 = 0x72;
    pub const CHAR: u8 = 0x73;
    pub const DECIMAL32: u8 = 0x74;
    pub const ULONG: u8 = 0x80;
    pub const LONG: u8 = 0x81;
    pub const DOUBLE: u8 = 0x82;
    pub const TIMESTAMP: u8 = 0x83;
    pub const DECIMAL64: u8 = 0x84;
    pub const DECIMAL128: u8 = 0x94;
    pub const UUID: u8 = 0x98;
    pub const VBIN8: u8 = 0xa0;
    pub const STR8: u8 = 0xa1;
    pub const SYM8: u8 = 0xa3;
    pub const VBIN32: u8 = 0xb0;
    pub const STR32: u8 = 0xb1;
    pub const SYM32: u8 = 0xb3;
    pub const LIST8: u8 = 0xc0;
    pub const MAP8: u8 = 0xc1;
    pub const LIST32: u8 = 0xd0;
    pub const MAP32: u8 = 0xd1;
    pub const ARRAY8: u8 = 0xe0;
    pub const ARRAY32: u8 = 0xf0;
}

/// A constructor: a format code, possibly with a descriptor.
#[derive(Debug, Clone)]
enum Constructor {
    Code(u8),
    /// A descriptor, and the constructor it describes (itself possibly
    /// described: `constructor = format-code / %x00 descriptor constructor`).
    Described(Box<Value>, Box<Constructor>),
}

/// Reads values off a buffer.
#[derive(Debug, Clone)]
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], AmqpError> {
        if self.buf.len() - self.pos < n {
            return Err(AmqpError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], AmqpError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, AmqpError> {
        Ok(self.take(1, what)?[0])
    }

    /// A size or count: one byte for the 8-bit forms, four for the others.
    fn width(&mut self, wide: bool, what: &'static str) -> Result<usize, AmqpError> {
        Ok(match wide {
            false => self.u8(what)? as usize,
            true => u32::from_be_bytes(self.array(what)?) as usize,
        })
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn constructor(&mut self, depth: usize) -> Result<Constructor, AmqpError> {
        if depth > MAX_DEPTH {
            return Err(AmqpError::Invalid(format!(
                "values nested more than {MAX_DEPTH} deep"
            )));
        }
        match self.u8("constructor")? {
            code::DESCRIBED => {
                let descriptor = self.value(depth + 1)?;
                let described = self.constructor(depth + 1)?;
                Ok(Constructor::Described(
                    Box::new(descriptor),
                    Box::new(described),
                ))
            }
            c => Ok(Constructor::Code(c)),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, AmqpError> {
        if depth > MAX_DEPTH {
            return Err(AmqpError::Invalid(format!(
                "values nested more than {MAX_DEPTH} deep"
            )));
        }
        let constructor = self.constructor(depth)?;
        self.body(&constructor, depth)
    }

    fn body(&mut self, constructor: &Constructor, depth: usize) -> Result<Value, AmqpError> {
        match constructor {
            Constructor::Code(c) => self.primitive(*c, depth),
            Constructor::Described(descriptor, inner) => Ok(Value::Described(
                descriptor.clone(),
                Box::new(self.body(inner, depth + 1)?),
            )),
        }
    }

    fn primitive(&mut self, c: u8, depth: usize) -> Result<Value, AmqpError> {
        use code::*;
        Ok(match c {
            LIST0 => Value::List(Vec::new()),
            LIST8 | LIST32 | MAP8 | MAP32 => {
                let wide = matches!(c, LIST32 | MAP32);
                let (count, mut inner) = self.compound(wide, "list or map")?;
                // Each element takes a byte at least: a count past the
                // bytes is a lie, found at the first missing element.
                let mut items = Vec::with_capacity(count.min(inner.remaining()));
                for _ in 0..count {
                    items.push(inner.value(depth + 1)?);
                }
                self.end_compound(&inner)?;
                if matches!(c, LIST8 | LIST32) {
                    Value::List(items)
                } else {
                    if count % 2 != 0 {
                        return Err(AmqpError::Invalid(format!(
                            "a map of an odd number of elements ({count})"
                        )));
                    }
                    let mut pairs = Vec::with_capacity(count / 2);
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Value::Map(pairs)
                }
            }
            ARRAY8 | ARRAY32 => {
                let (count, mut inner) = self.compound(c == ARRAY32, "array")?;
                let mut items = Vec::new();
                // The element constructor is there even with no element
                // (proton writes `40`, null); an encoder may leave it out.
                if count > 0 || inner.remaining() > 0 {
                    let element = inner.constructor(depth + 1)?;
                    if zero_width(&element) && count > MAX_EMPTY_ELEMENTS {
                        return Err(AmqpError::Invalid(format!(
                            "an array of {count} empty elements (at most {MAX_EMPTY_ELEMENTS})"
                        )));
                    }
                    items.reserve(count.min(inner.remaining().max(MAX_EMPTY_ELEMENTS)));
                    for _ in 0..count {
                        items.push(inner.body(&element, depth + 1)?);
                    }
                }
                self.end_compound(&inner)?;
                Value::Array(items)
            }
            scalar => self.scalar(scalar)?.scalar_value(),
        })
    }

    /// A value that is neither compound nor described, read in place.
    fn scalar(&mut self, c: u8) -> Result<Raw<'a>, AmqpError> {
        use code::*;
        Ok(match c {
            NULL => Raw::Null,
            TRUE => Raw::Bool(true),
            FALSE => Raw::Bool(false),
            BOOLEAN => match self.u8("boolean")? {
                0 => Raw::Bool(false),
                1 => Raw::Bool(true),
                b => return Err(AmqpError::Invalid(format!("boolean byte 0x{b:02x}"))),
            },
            UBYTE => Raw::Ubyte(self.u8("ubyte")?),
            BYTE => Raw::Byte(self.u8("byte")? as i8),
            USHORT => Raw::Ushort(u16::from_be_bytes(self.array("ushort")?)),
            SHORT => Raw::Short(i16::from_be_bytes(self.array("short")?)),
            UINT0 => Raw::Uint(0),
            SMALLUINT => Raw::Uint(self.u8("uint")?.into()),
            UINT => Raw::Uint(u32::from_be_bytes(self.array("uint")?)),
            ULONG0 => Raw::Ulong(0),
            SMALLULONG => Raw::Ulong(self.u8("ulong")?.into()),
            ULONG => Raw::Ulong(u64::from_be_bytes(self.array("ulong")?)),
            SMALLINT => Raw::Int((self.u8("int")? as i8).into()),
            INT => Raw::Int(i32::from_be_bytes(self.array("int")?)),
            SMALLLONG => Raw::Long((self.u8("long")? as i8).into()),
            LONG => Raw::Long(i64::from_be_bytes(self.array("long")?)),
            FLOAT => Raw::Float(f32::from_be_bytes(self.array("float")?)),
            DOUBLE => Raw::Double(f64::from_be_bytes(self.array("double")?)),
            DECIMAL32 => Raw::Decimal32(self.array("decimal32")?),
            DECIMAL64 => Raw::Decimal64(self.array("decimal64")?),
            DECIMAL128 => Raw::Decimal128(self.array("decimal128")?),
            CHAR => {
                let point = u32::from_be_bytes(self.array("char")?);
                Raw::Char(char::from_u32(point).ok_or_else(|| {
                    AmqpError::Invalid(format!("char 0x{point:x} is not a code point"))
                })?)
            }
            TIMESTAMP => Raw::Timestamp(i64::from_be_bytes(self.array("timestamp")?)),
            UUID => Raw::Uuid(self.array("uuid")?),
            VBIN8 | VBIN32 => {
                let n = self.width(c == VBIN32, "binary size")?;
                Raw::Binary(self.take(n, "binary")?)
            }
            STR8 | STR32 => {
                let n = self.width(c == STR32, "string size")?;
                Raw::String(
                    std::str::from_utf8(self.take(n, "string")?)
                        .map_err(|_| AmqpError::Invalid("a string that is not UTF-8".into()))?,
                )
            }
            SYM8 | SYM32 => {
                let n = self.width(c == SYM32, "symbol size")?;
                let bytes = self.take(n, "symbol")?;
                if !bytes.is_ascii() {
                    return Err(AmqpError::Invalid("a symbol that is not ASCII".into()));
                }
                // ASCII is UTF-8.
                Raw::Symbol(std::str::from_utf8(bytes).unwrap_or_default())
            }
            other => {
                return Err(AmqpError::Invalid(format!(
                    "unknown format code 0x{other:02x}"
                )))
            }
        })
    }

    /// Reads a value in place: a compound or described one is checked
    /// as [`Reader::value`] would and left encoded.
    fn raw(&mut self, depth: usize) -> Result<Raw<'a>, AmqpError> {
        self.in_place(Some(depth))
    }

    /// Reads a value from bytes checked already (what [`Raw::Encoded`]
    /// holds): a scalar is read, anything else taken whole by the size
    /// its format code gives, not walked again. Bytes not checked give
    /// nonsense or an error, never a panic.
    fn trusted(&mut self) -> Result<Raw<'a>, AmqpError> {
        self.in_place(None)
    }

    /// [`Reader::raw`] at `depth`, or [`Reader::trusted`] without one.
    fn in_place(&mut self, depth: Option<usize>) -> Result<Raw<'a>, AmqpError> {
        let start = self.pos;
        let c = *self
            .buf
            .get(start)
            .ok_or(AmqpError::Truncated("constructor"))?;
        if c == code::DESCRIBED || compound_code(c) {
            match depth {
                Some(depth) => self.skip(depth)?,
                None => self.extent(0)?,
            }
            return Ok(Raw::Encoded(&self.buf[start..self.pos]));
        }
        self.pos += 1;
        self.scalar(c)
    }

    /// Steps over a value checked already: each category of format codes
    /// (the high four bits) has one width, or a size of one or four bytes
    /// before the rest.
    fn extent(&mut self, depth: usize) -> Result<(), AmqpError> {
        if depth > MAX_DEPTH {
            return Err(AmqpError::Invalid(format!(
                "values nested more than {MAX_DEPTH} deep"
            )));
        }
        let c = self.u8("constructor")?;
        if c == code::DESCRIBED {
            self.extent(depth + 1)?;
            return self.extent(depth + 1);
        }
        let n = match c >> 4 {
            0x4 => 0,
            0x5 => 1,
            0x6 => 2,
            0x7 => 4,
            0x8 => 8,
            0x9 => 16,
            0xa | 0xc | 0xe => self.width(false, "size")?,
            0xb | 0xd | 0xf => self.width(true, "size")?,
            _ => return Err(AmqpError::Invalid(format!("unknown format code 0x{c:02x}"))),
        };
        self.take(n, "value").map(drop)
    }

    /// Checks a value and steps over it, building nothing.
    fn skip(&mut self, depth: usize) -> Result<(), AmqpError> {
        let c = self.skip_constructor(depth)?;
        self.skip_body(c, depth)
    }

    /// Steps over a constructor (its descriptors checked): its format
    /// code.
    fn skip_constructor(&mut self, depth: usize) -> Result<u8, AmqpError> {
        if depth > MAX_DEPTH {
            return Err(AmqpError::Invalid(format!(
                "values nested more than {MAX_DEPTH} deep"
            )));
        }
        match self.u8("constructor")? {
            code::DESCRIBED => {
                self.skip(depth + 1)?;
                self.skip_constructor(depth + 1)
            }
            c => Ok(c),
        }
    }

    /// Checks and steps over the bytes after format code `c`.
    fn skip_body(&mut self, c: u8, depth: usize) -> Result<(), AmqpError> {
        use code::*;
        match c {
            LIST0 => {}
            LIST8 | LIST32 | MAP8 | MAP32 => {
                let (count, mut inner) =
                    self.compound(matches!(c, LIST32 | MAP32), "list or map")?;
                if matches!(c, MAP8 | MAP32) && count % 2 != 0 {
                    return Err(AmqpError::Invalid(format!(
                        "a map of an odd number of elements ({count})"
                    )));
                }
                for _ in 0..count {
                    inner.skip(depth + 1)?;
                }
                self.end_compound(&inner)?;
            }
            ARRAY8 | ARRAY32 => {
                let (count, mut inner) = self.compound(c == ARRAY32, "array")?;
                // As when decoding: a constructor even with no element.
                if count > 0 || inner.remaining() > 0 {
                    let element = inner.skip_constructor(depth + 1)?;
                    if zero_width_code(element) && count > MAX_EMPTY_ELEMENTS {
                        return Err(AmqpError::Invalid(format!(
                            "an array of {count} empty elements (at most {MAX_EMPTY_ELEMENTS})"
                        )));
                    }
                    for _ in 0..count {
                        inner.skip_body(element, depth + 1)?;
                    }
                }
                self.end_compound(&inner)?;
            }
            scalar => {
                self.scalar(scalar)?;
            }
        }
        Ok(())
    }

    /// A list's, map's or array's size and count; a reader of its bytes
    /// after the count.
    fn compound(
        &mut self,
        wide: bool,
        what: &'static str,
    ) -> Result<(usize, Reader<'a>), AmqpError> {
        let size = self.width(wide, what)?;
        let counted = if wide { 4 } else { 1 };
        if size < counted {
            return Err(AmqpError::Invalid(format!(
                "a {what} of {size} bytes has no room for its count"
            )));
        }
        let bytes = self.take(size, what)?;
        let mut inner = Reader { buf: bytes, pos: 0 };
        let count = inner.width(wide, what)?;
        Ok((count, inner))
    }

    /// Checks that a compound's elements filled its size exactly.
    fn end_compound(&self, inner: &Reader<'a>) -> Result<(), AmqpError> {
        match inner.remaining() {
            0 => Ok(()),
            n => Err(AmqpError::Invalid(format!(
                "{n} bytes after the last element"
            ))),
        }
    }
}

/// Whether a constructor's values take no bytes after it.
fn zero_width(constructor: &Constructor) -> bool {
    match constructor {
        Constructor::Code(c) => zero_width_code(*c),
        Constructor::Described(_, inner) => zero_width(inner),
    }
}

/// Whether values of format code `c` take no bytes after it.
fn zero_width_code(c: u8) -> bool {
    matches!(
        c,
        code::NULL | code::TRUE | code::FALSE | code::UINT0 | code::ULONG0 | code::LIST0
    )
}

/// Whether `c` is a list's, map's or array's format code.
fn compound_code(c: u8) -> bool {
    use code::*;
    matches!(c, LIST0 | LIST8 | LIST32 | MAP8 | MAP32 | ARRAY8 | ARRAY32)
}

/// A value read in place, nothing allocated: scalars as they are,
/// strings, symbols and binaries borrowed, and a list, map, array or
/// described value left as its encoding (checked as [`Value::decode`]
/// checks it), to be decoded, or read further with [`Raw::items`] and
/// [`Raw::described`]. What the paths taken once per message read with.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Raw<'a> {
    /// `null`.
    #[default]
    Null,
    /// `boolean`.
    Bool(bool),
    /// `ubyte`.
    Ubyte(u8),
    /// `ushort`.
    Ushort(u16),
    /// `uint`.
    Uint(u32),
    /// `ulong`.
    Ulong(u64),
    /// `byte`.
    Byte(i8),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `decimal32`.
    Decimal32([u8; 4]),
    /// `decimal64`.
    Decimal64([u8; 8]),
    /// `decimal128`.
    Decimal128([u8; 16]),
    /// `char`.
    Char(char),
    /// `timestamp`.
    Timestamp(i64),
    /// `uuid`.
    Uuid([u8; 16]),
    /// `binary`.
    Binary(&'a [u8]),
    /// `string`.
    String(&'a str),
    /// `symbol`.
    Symbol(&'a str),
    /// A list, map, array or described value: its whole encoding.
    Encoded(&'a [u8]),
}

impl<'a> Raw<'a> {
    /// Reads one value from the start of `buf`; returns it and the bytes
    /// it took.
    pub fn read(buf: &'a [u8]) -> Result<(Raw<'a>, usize), AmqpError> {
        let mut reader = Reader { buf, pos: 0 };
        let raw = reader.raw(0)?;
        Ok((raw, reader.pos))
    }

    /// The value, decoded.
    pub fn to_value(self) -> Value {
        match self {
            Raw::Encoded(bytes) => Value::decode(bytes).map_or(Value::Null, |(v, _)| v),
            scalar => scalar.scalar_value(),
        }
    }

    /// A scalar as a [`Value`] (an encoded value is null here).
    fn scalar_value(self) -> Value {
        match self {
            Raw::Null | Raw::Encoded(_) => Value::Null,
            Raw::Bool(v) => Value::Bool(v),
            Raw::Ubyte(v) => Value::Ubyte(v),
            Raw::Ushort(v) => Value::Ushort(v),
            Raw::Uint(v) => Value::Uint(v),
            Raw::Ulong(v) => Value::Ulong(v),
            Raw::Byte(v) => Value::Byte(v),
            Raw::Short(v) => Value::Short(v),
            Raw::Int(v) => Value::Int(v),
            Raw::Long(v) => Value::Long(v),
            Raw::Float(v) => Value::Float(v),
            Raw::Double(v) => Value::Double(v),
            Raw::Decimal32(v) => Value::Decimal32(v),
            Raw::Decimal64(v) => Value::Decimal64(v),
            Raw::Decimal128(v) => Value::Decimal128(v),
            Raw::Char(v) => Value::Char(v),
            Raw::Timestamp(v) => Value::Timestamp(v),
            Raw::Uuid(v) => Value::Uuid(v),
            Raw::Binary(v) => Value::Binary(Bytes::copy_from_slice(v)),
            Raw::String(v) => Value::String(v.to_owned()),
            Raw::Symbol(v) => Value::Symbol(v.to_owned()),
        }
    }

    /// A described value's descriptor and its value; `None` if this is
    /// not one.
    pub fn described(self) -> Option<(Raw<'a>, Raw<'a>)> {
        let Raw::Encoded(bytes) = self else {
            return None;
        };
        let rest = bytes.strip_prefix(&[code::DESCRIBED])?;
        let mut reader = Reader { buf: rest, pos: 0 };
        let descriptor = reader.trusted().ok()?;
        let value = reader.trusted().ok()?;
        Some((descriptor, value))
    }

    /// The elements of a list, or the keys and values of a map, one
    /// after the other; `None` if this is neither.
    pub fn items(self) -> Option<Items<'a>> {
        use code::*;
        let Raw::Encoded(bytes) = self else {
            return None;
        };
        let mut reader = Reader { buf: bytes, pos: 1 };
        let (left, inner) = match *bytes.first()? {
            LIST0 => (0, Reader { buf: &[], pos: 0 }),
            c @ (LIST8 | LIST32 | MAP8 | MAP32) => {
                reader.compound(matches!(c, LIST32 | MAP32), "list").ok()?
            }
            _ => return None,
        };
        Some(Items {
            reader: inner,
            left,
        })
    }

    /// Reads a composite at the start of `buf` in one pass, checked as
    /// [`Value::decode`] checks it: a value described by a descriptor
    /// `wanted` accepts, and a list, whose first fields go into `fields`
    /// (the others checked and stepped over). The bytes it took; `None`
    /// if `buf` holds something else (a value read another way says what).
    pub fn read_composite(
        buf: &'a [u8],
        wanted: impl Fn(Raw<'a>) -> bool,
        fields: &mut [Raw<'a>],
    ) -> Result<Option<usize>, AmqpError> {
        use code::*;
        let mut reader = Reader { buf, pos: 0 };
        if reader.u8("constructor")? != DESCRIBED || !wanted(reader.raw(1)?) {
            return Ok(None);
        }
        match reader.u8("constructor")? {
            LIST0 => {}
            c @ (LIST8 | LIST32) => {
                let (count, mut inner) = reader.compound(c == LIST32, "list")?;
                for i in 0..count {
                    let field = inner.raw(2)?;
                    if let Some(slot) = fields.get_mut(i) {
                        *slot = field;
                    }
                }
                reader.end_compound(&inner)?;
            }
            _ => return Ok(None),
        }
        Ok(Some(reader.pos))
    }

    /// Whether this is a map.
    pub fn is_map(self) -> bool {
        matches!(self, Raw::Encoded([code::MAP8 | code::MAP32, ..]))
    }
}

/// The elements of a list or map, read in place ([`Raw::items`]).
#[derive(Debug, Clone)]
pub struct Items<'a> {
    reader: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for Items<'a> {
    type Item = Raw<'a>;

    fn next(&mut self) -> Option<Raw<'a>> {
        self.left = self.left.checked_sub(1)?;
        // Checked when the compound was read.
        self.reader.trusted().ok()
    }
}

impl Value {
    /// Decodes one value from the start of `buf`; returns it and the bytes
    /// it took.
    pub fn decode(buf: &[u8]) -> Result<(Value, usize), AmqpError> {
        let mut reader = Reader { buf, pos: 0 };
        let value = reader.value(0)?;
        Ok((value, reader.pos))
    }

    /// Appends the smallest encoding of this value.
    pub fn encode(&self, out: &mut impl BufMut) {
        use code::*;
        match self {
            Value::Null => put::null(out),
            Value::Bool(v) => put::boolean(out, *v),
            Value::Ubyte(v) => put::ubyte(out, *v),
            Value::Uint(v) => put::uint(out, *v),
            Value::Ulong(v) => put::ulong(out, *v),
            Value::Byte(v) => put::byte(out, *v),
            Value::Short(v) => put::short(out, *v),
            Value::Int(v) => put::int(out, *v),
            Value::Long(v) => put::long(out, *v),
            Value::Float(v) => put::float(out, *v),
            Value::Double(v) => put::double(out, *v),
            Value::Timestamp(v) => put::timestamp(out, *v),
            Value::Binary(b) => put::binary(out, b),
            Value::String(t) => put::string(out, t),
            Value::Symbol(t) => put::symbol(out, t),
            Value::List(items) if items.is_empty() => out.put_u8(LIST0),
            Value::Described(descriptor, value) => {
                out.put_u8(DESCRIBED);
                descriptor.encode(out);
                value.encode(out);
            }
            Value::List(items) => compound(out, (LIST8, LIST32), items.len(), |b| {
                items.iter().for_each(|v| v.encode(b))
            }),
            Value::Map(pairs) => compound(out, (MAP8, MAP32), pairs.len() * 2, |b| {
                for (k, v) in pairs {
                    k.encode(b);
                    v.encode(b);
                }
            }),
            Value::Array(items) => encode_array(out, items),
            other => {
                out.put_u8(other.wide_code());
                other.encode_body(out);
            }
        }
    }

    /// The format code of this value in an array (and of any value whose
    /// smallest form is its only one): the full-width form of its type,
    /// so that every element of an array fits it.
    fn wide_code(&self) -> u8 {
        use code::*;
        match self {
            Value::Null => NULL,
            Value::Bool(_) => BOOLEAN,
            Value::Ubyte(_) => UBYTE,
            Value::Ushort(_) => USHORT,
            Value::Uint(_) => UINT,
            Value::Ulong(_) => ULONG,
            Value::Byte(_) => BYTE,
            Value::Short(_) => SHORT,
            Value::Int(_) => INT,
            Value::Long(_) => LONG,
            Value::Float(_) => FLOAT,
            Value::Double(_) => DOUBLE,
            Value::Decimal32(_) => DECIMAL32,
            Value::Decimal64(_) => DECIMAL64,
            Value::Decimal128(_) => DECIMAL128,
            Value::Char(_) => CHAR,
            Value::Timestamp(_) => TIMESTAMP,
            Value::Uuid(_) => UUID,
            Value::Binary(_) => VBIN32,
            Value::String(_) => STR32,
            Value::Symbol(_) => SYM32,
            Value::List(_) => LIST32,
            Value::Map(_) => MAP32,
            Value::Array(_) => ARRAY32,
            // An array of described values has a described constructor.
            Value::Described(_, v) => v.wide_code(),
        }
    }

    /// The bytes after [`Value::wide_code`].
    fn encode_body(&self, out: &mut impl BufMut) {
        match self {
            Value::Null => {}
            Value::Bool(v) => out.put_u8(u8::from(*v)),
            Value::Ubyte(v) => out.put_u8(*v),
            Value::Ushort(v) => out.put_u16(*v),
            Value::Uint(v) => out.put_u32(*v),
            Value::Ulong(v) => out.put_u64(*v),
            Value::Byte(v) => out.put_i8(*v),
            Value::Short(v) => out.put_i16(*v),
            Value::Int(v) => out.put_i32(*v),
            Value::Long(v) => out.put_i64(*v),
            Value::Float(v) => out.put_f32(*v),
            Value::Double(v) => out.put_f64(*v),
            Value::Decimal32(b) => out.put_slice(b),
            Value::Decimal64(b) => out.put_slice(b),
            Value::Decimal128(b) => out.put_slice(b),
            Value::Char(c) => out.put_u32(*c as u32),
            Value::Timestamp(v) => out.put_i64(*v),
            Value::Uuid(b) => out.put_slice(b),
            Value::Binary(b) => variable(out, b),
            Value::String(s) | Value::Symbol(s) => variable(out, s.as_bytes()),
            Value::List(items) => {
                wide_compound(out, items.len(), |b| items.iter().for_each(|v| v.encode(b)))
            }
            Value::Map(pairs) => wide_compound(out, pairs.len() * 2, |b| {
                for (k, v) in pairs {
                    k.encode(b);
                    v.encode(b);
                }
            }),
            Value::Array(items) => {
                let mut body = Vec::new();
                array_body(&mut body, items);
                out.put_u32((body.len() + 4) as u32);
                out.put_u32(items.len() as u32);
                out.put_slice(&body);
            }
            Value::Described(_, v) => v.encode_body(out),
        }
    }
}

/// A 32-bit size and the bytes (the wide form: what arrays use).
fn variable(out: &mut impl BufMut, bytes: &[u8]) {
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

/// A list or map: the 8-bit form where size and count fit a byte.
fn compound(
    out: &mut impl BufMut,
    (small, wide): (u8, u8),
    count: usize,
    elements: impl Fn(&mut Vec<u8>),
) {
    let mut body = Vec::new();
    elements(&mut body);
    if body.len() < 255 && count < 256 {
        out.put_u8(small);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(count as u8);
    } else {
        out.put_u8(wide);
        out.put_u32((body.len() + 4) as u32);
        out.put_u32(count as u32);
    }
    out.put_slice(&body);
}

/// A list's or map's 32-bit form, after its code.
fn wide_compound(out: &mut impl BufMut, count: usize, elements: impl Fn(&mut Vec<u8>)) {
    let mut body = Vec::new();
    elements(&mut body);
    out.put_u32((body.len() + 4) as u32);
    out.put_u32(count as u32);
    out.put_slice(&body);
}

/// An array: its constructor (the first element's type, in its wide
/// form) and every element's body. Elements of another type than the
/// first are a caller's mistake; they are written as the first's type
/// would be read only if they share it.
fn encode_array(out: &mut impl BufMut, items: &[Value]) {
    let mut body = Vec::new();
    array_body(&mut body, items);
    if body.len() < 255 && items.len() < 256 {
        out.put_u8(code::ARRAY8);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(items.len() as u8);
    } else {
        out.put_u8(code::ARRAY32);
        out.put_u32((body.len() + 4) as u32);
        out.put_u32(items.len() as u32);
    }
    out.put_slice(&body);
}

/// The element constructor and bodies of an array; an empty one has a
/// constructor too (null), as the type's layout says.
fn array_body(body: &mut Vec<u8>, items: &[Value]) {
    let Some(first) = items.first() else {
        body.put_u8(code::NULL);
        return;
    };
    if let Value::Described(descriptor, _) = first {
        body.put_u8(code::DESCRIBED);
        descriptor.encode(body);
    }
    body.put_u8(first.wide_code());
    for item in items {
        item.encode_body(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: Value) -> Vec<u8> {
        let mut wire = Vec::new();
        v.encode(&mut wire);
        let (back, used) = Value::decode(&wire).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(back, v, "{wire:02x?}");
        assert_eq!(used, wire.len());
        wire
    }

    #[test]
    fn every_type_round_trips_in_its_smallest_form() {
        assert_eq!(round_trip(Value::Null), [0x40]);
        assert_eq!(round_trip(Value::Bool(true)), [0x41]);
        assert_eq!(round_trip(Value::Uint(0)), [0x43]);
        assert_eq!(round_trip(Value::Uint(7)), [0x52, 7]);
        assert_eq!(round_trip(Value::Uint(70_000)), [0x70, 0, 1, 0x11, 0x70]);
        assert_eq!(round_trip(Value::Ulong(0x10)), [0x53, 0x10]);
        assert_eq!(round_trip(Value::Int(-1)), [0x54, 0xff]);
        assert_eq!(round_trip(Value::Long(-200))[0], 0x81);
        assert_eq!(
            round_trip(Value::Symbol("amqp:accepted:list".into()))[..2],
            [0xa3, 18]
        );
        assert_eq!(round_trip(Value::List(vec![])), [0x45]);
        for v in [
            Value::Ubyte(200),
            Value::Ushort(60_000),
            Value::Byte(-5),
            Value::Short(-300),
            Value::Int(1 << 20),
            Value::Ulong(u64::MAX),
            Value::Float(1.5),
            Value::Double(-2.25),
            Value::Decimal32([1, 2, 3, 4]),
            Value::Decimal64([8; 8]),
            Value::Decimal128([9; 16]),
            Value::Char('€'),
            Value::Timestamp(1_796_305_512_345),
            Value::Uuid([7; 16]),
            Value::Binary(Bytes::from_static(b"\x00\xff")),
            Value::String("sold 3 €".into()),
            Value::Map(vec![(Value::Symbol("k".into()), Value::Int(1))]),
            Value::Array(vec![Value::Uint(1), Value::Uint(300)]),
            Value::Array(vec![
                Value::Symbol("queue".into()),
                Value::Symbol("topic".into()),
            ]),
            Value::Array(vec![]),
            Value::Described(
                Box::new(Value::Ulong(0x10)),
                Box::new(Value::List(vec![
                    Value::String("container".into()),
                    Value::Null,
                ])),
            ),
            Value::Described(
                Box::new(Value::Symbol("outer".into())),
                Box::new(Value::Described(
                    Box::new(Value::Ulong(1)),
                    Box::new(Value::Uint(9)),
                )),
            ),
            Value::Array(vec![
                Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(vec![]))),
                Value::Described(
                    Box::new(Value::Ulong(0x24)),
                    Box::new(Value::List(vec![Value::Null])),
                ),
            ]),
        ] {
            round_trip(v);
        }
        // Large enough for the 32-bit forms.
        let long = "x".repeat(300);
        assert_eq!(round_trip(Value::String(long.clone()))[0], 0xb1);
        let many: Vec<Value> = (0..300).map(Value::Uint).collect();
        assert_eq!(round_trip(Value::List(many.clone()))[0], 0xd0);
        assert_eq!(round_trip(Value::Array(many))[0], 0xf0);
    }

    /// Bytes from hex, spaces ignored.
    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    #[test]
    fn every_format_code_of_the_spec_decodes_in_every_width() {
        let s = |t: &str| Value::String(t.into());
        let sym = |t: &str| Value::Symbol(t.into());
        // AMQP 1.0 part 1, 1.6: each code, in its wider forms too, as
        // other encoders may choose them for small values.
        let cases: Vec<(&str, Value)> = vec![
            ("40", Value::Null),
            ("56 00", Value::Bool(false)),
            ("41", Value::Bool(true)),
            ("42", Value::Bool(false)),
            ("50 ff", Value::Ubyte(255)),
            ("60 ff fe", Value::Ushort(65534)),
            ("70 00 00 00 07", Value::Uint(7)),
            ("52 07", Value::Uint(7)),
            ("43", Value::Uint(0)),
            ("80 00 00 00 00 00 00 00 07", Value::Ulong(7)),
            ("53 07", Value::Ulong(7)),
            ("44", Value::Ulong(0)),
            ("51 80", Value::Byte(-128)),
            ("61 80 00", Value::Short(-32768)),
            ("71 ff ff ff fe", Value::Int(-2)),
            ("54 fe", Value::Int(-2)),
            ("81 ff ff ff ff ff ff ff fe", Value::Long(-2)),
            ("55 fe", Value::Long(-2)),
            ("72 3f c0 00 00", Value::Float(1.5)),
            ("82 3f f8 00 00 00 00 00 00", Value::Double(1.5)),
            ("74 30 40 00 0a", Value::Decimal32([0x30, 0x40, 0, 0x0a])),
            (
                "84 30 c0 00 00 00 00 00 64",
                Value::Decimal64([0x30, 0xc0, 0, 0, 0, 0, 0, 0x64]),
            ),
            ("94 30 40 00 00 00 00 00 00 00 00 00 00 00 00 00 01", {
                let mut d = [0; 16];
                (d[0], d[1], d[15]) = (0x30, 0x40, 1);
                Value::Decimal128(d)
            }),
            ("73 00 00 00 e9", Value::Char('é')),
            ("73 00 01 f6 00", Value::Char('😀')),
            (
                "83 00 00 01 8b cf e5 68 7b",
                Value::Timestamp(1_700_000_000_123),
            ),
            (
                "98 0f 8f ad 5b d9 cb 46 9f a1 65 70 86 77 28 95 0e",
                Value::Uuid([
                    0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77,
                    0x28, 0x95, 0x0e,
                ]),
            ),
            ("a0 00", Value::Binary(Bytes::new())),
            ("b0 00 00 00 01 09", Value::Binary(Bytes::from_static(&[9]))),
            ("a1 00", s("")),
            ("b1 00 00 00 02 c3 a9", s("é")),
            ("a3 01 78", sym("x")),
            ("b3 00 00 00 01 78", sym("x")),
            ("45", Value::List(vec![])),
            ("c0 01 00", Value::List(vec![])),
            ("d0 00 00 00 04 00 00 00 00", Value::List(vec![])),
            ("c1 01 00", Value::Map(vec![])),
            ("d1 00 00 00 04 00 00 00 00", Value::Map(vec![])),
            // A map's keys may be of any type, and repeat no rule of
            // application properties: null, a list, an empty string.
            (
                "c1 08 06 40 41 45 42 a1 00 43",
                Value::Map(vec![
                    (Value::Null, Value::Bool(true)),
                    (Value::List(vec![]), Value::Bool(false)),
                    (s(""), Value::Uint(0)),
                ]),
            ),
            // Arrays of each element kind, 8 and 32 bits wide.
            (
                "e0 04 02 56 01 00",
                Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
            ),
            (
                "e0 04 02 50 01 02",
                Value::Array(vec![Value::Ubyte(1), Value::Ubyte(2)]),
            ),
            ("e0 04 01 60 00 03", Value::Array(vec![Value::Ushort(3)])),
            (
                "e0 06 01 70 00 00 00 04",
                Value::Array(vec![Value::Uint(4)]),
            ),
            ("e0 03 01 52 05", Value::Array(vec![Value::Uint(5)])),
            ("e0 02 03 43", Value::Array(vec![Value::Uint(0); 3])),
            (
                "e0 0a 01 80 00 00 00 00 00 00 00 06",
                Value::Array(vec![Value::Ulong(6)]),
            ),
            ("e0 03 01 53 06", Value::Array(vec![Value::Ulong(6)])),
            ("e0 03 01 51 ff", Value::Array(vec![Value::Byte(-1)])),
            ("e0 04 01 61 ff ff", Value::Array(vec![Value::Short(-1)])),
            (
                "e0 06 01 71 ff ff ff ff",
                Value::Array(vec![Value::Int(-1)]),
            ),
            ("e0 03 01 54 ff", Value::Array(vec![Value::Int(-1)])),
            (
                "e0 0a 01 81 ff ff ff ff ff ff ff ff",
                Value::Array(vec![Value::Long(-1)]),
            ),
            ("e0 03 01 55 ff", Value::Array(vec![Value::Long(-1)])),
            (
                "e0 06 01 72 3f c0 00 00",
                Value::Array(vec![Value::Float(1.5)]),
            ),
            (
                "e0 0a 01 82 3f f8 00 00 00 00 00 00",
                Value::Array(vec![Value::Double(1.5)]),
            ),
            (
                "e0 06 01 74 00 00 00 01",
                Value::Array(vec![Value::Decimal32([0, 0, 0, 1])]),
            ),
            (
                "e0 0a 01 84 00 00 00 00 00 00 00 01",
                Value::Array(vec![Value::Decimal64([0, 0, 0, 0, 0, 0, 0, 1])]),
            ),
            (
                "e0 12 01 94 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01",
                {
                    let mut d = [0; 16];
                    d[15] = 1;
                    Value::Array(vec![Value::Decimal128(d)])
                },
            ),
            (
                "e0 06 01 73 00 00 00 78",
                Value::Array(vec![Value::Char('x')]),
            ),
            (
                "e0 0a 01 83 00 00 00 00 00 00 00 01",
                Value::Array(vec![Value::Timestamp(1)]),
            ),
            (
                "e0 12 01 98 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02",
                Value::Array(vec![Value::Uuid({
                    let mut u = [0; 16];
                    u[15] = 2;
                    u
                })]),
            ),
            (
                "e0 05 02 a0 00 01 07",
                Value::Array(vec![
                    Value::Binary(Bytes::new()),
                    Value::Binary(Bytes::from_static(&[7])),
                ]),
            ),
            (
                "e0 07 01 b0 00 00 00 01 07",
                Value::Array(vec![Value::Binary(Bytes::from_static(&[7]))]),
            ),
            ("e0 05 02 a1 01 61 00", Value::Array(vec![s("a"), s("")])),
            ("e0 07 01 b1 00 00 00 01 61", Value::Array(vec![s("a")])),
            ("e0 04 01 a3 01 61", Value::Array(vec![sym("a")])),
            (
                "e0 06 02 c0 01 00 01 00",
                Value::Array(vec![Value::List(vec![]), Value::List(vec![])]),
            ),
            (
                "e0 06 01 c1 03 02 40 40",
                Value::Array(vec![Value::Map(vec![(Value::Null, Value::Null)])]),
            ),
            (
                "e0 05 01 e0 02 00 40",
                Value::Array(vec![Value::Array(vec![])]),
            ),
            ("e0 02 02 40", Value::Array(vec![Value::Null, Value::Null])),
            (
                "f0 00 00 00 06 00 00 00 01 52 09",
                Value::Array(vec![Value::Uint(9)]),
            ),
            // Described elements: one descriptor for all.
            (
                "e0 07 02 00 53 24 52 01 02",
                Value::Array(vec![
                    Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::Uint(1))),
                    Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::Uint(2))),
                ]),
            ),
            // Described values, by code and by name.
            (
                "00 a3 03 61 3a 62 41",
                Value::Described(Box::new(sym("a:b")), Box::new(Value::Bool(true))),
            ),
            (
                "00 80 00 00 00 00 00 00 00 77 a1 01 78",
                Value::Described(Box::new(Value::Ulong(0x77)), Box::new(s("x"))),
            ),
        ];
        for (encoded, value) in cases {
            let wire = hex(encoded);
            let (back, used) = Value::decode(&wire).unwrap_or_else(|e| panic!("{encoded}: {e}"));
            assert_eq!((back, used), (value.clone(), wire.len()), "{encoded}");
            let (raw, used) = Raw::read(&wire).unwrap_or_else(|e| panic!("{encoded}: {e}"));
            assert_eq!(
                (raw.to_value(), used),
                (value, wire.len()),
                "{encoded} in place"
            );
        }
    }

    #[test]
    fn an_empty_array_has_its_element_constructor_both_ways() {
        // As proton writes it: array32, count 0, constructor null.
        let proton = [0xf0, 0, 0, 0, 5, 0, 0, 0, 0, 0x40];
        assert_eq!(Value::decode(&proton).unwrap(), (Value::Array(vec![]), 10));
        // A symbol constructor, and none at all, read as well.
        assert_eq!(
            Value::decode(&[0xe0, 0x02, 0x00, 0xb3]).unwrap(),
            (Value::Array(vec![]), 4)
        );
        assert_eq!(
            Value::decode(&[0xe0, 0x01, 0x00]).unwrap(),
            (Value::Array(vec![]), 3)
        );
        assert_eq!(round_trip(Value::Array(vec![])), [0xe0, 0x02, 0x00, 0x40]);
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u32>().prop_map(Value::Uint),
            any::<u64>().prop_map(Value::Ulong),
            any::<i32>().prop_map(Value::Int),
            any::<i64>().prop_map(Value::Long),
            any::<i16>().prop_map(Value::Short),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
                .prop_map(Value::Double),
            any::<char>().prop_map(Value::Char),
            any::<[u8; 16]>().prop_map(Value::Uuid),
            ".{0,300}".prop_map(Value::String),
            "[a-z:]{0,20}".prop_map(Value::Symbol),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|b| Value::Binary(b.into())),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::List),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4)
                    .prop_map(Value::Map),
                (any::<u64>(), inner.clone())
                    .prop_map(|(d, v)| Value::Described(Box::new(Value::Ulong(d)), Box::new(v))),
                proptest::collection::vec(any::<i64>(), 0..40)
                    .prop_map(|v| Value::Array(v.into_iter().map(Value::Long).collect())),
                proptest::collection::vec("[a-z]{0,9}", 0..20)
                    .prop_map(|v| Value::Array(v.into_iter().map(Value::Symbol).collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_value_round_trips(v in any_value()) {
            let wire = round_trip(v.clone());
            // Read in place, it is the same value, taking the same bytes.
            let (raw, used) = Raw::read(&wire).expect("reads in place");
            proptest::prop_assert_eq!(raw.to_value(), v);
            proptest::prop_assert_eq!(used, wire.len());
        }

        #[test]
        fn what_decodes_reads_in_place_and_nothing_else(wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let decoded = Value::decode(&wire);
            let raw = Raw::read(&wire);
            proptest::prop_assert_eq!(decoded.is_ok(), raw.is_ok(), "{:02x?}", wire);
            if let (Ok((v, n)), Ok((r, m))) = (decoded, raw) {
                // Compared encoded: a NaN the bytes make is not equal to itself.
                let (mut read, mut decoded) = (Vec::new(), Vec::new());
                r.to_value().encode(&mut read);
                v.encode(&mut decoded);
                proptest::prop_assert_eq!((read, m), (decoded, n));
            }
        }

        #[test]
        fn any_bytes_decode_or_fail_and_what_decodes_encodes_again(wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            if let Ok((v, used)) = Value::decode(&wire) {
                proptest::prop_assert!(used <= wire.len());
                let mut again = Vec::new();
                v.encode(&mut again);
                let (back, _) = Value::decode(&again).expect("its own encoding decodes");
                let mut twice = Vec::new();
                back.encode(&mut twice);
                proptest::prop_assert_eq!(again, twice);
            }
        }
    }

    #[test]
    fn the_forms_other_peers_send_are_read() {
        // An open frame's performative as Qpid Proton writes it:
        // described ulong 0x10, a list8 of a str8 container id.
        let open = [
            0x00, 0x53, 0x10, 0xc0, 0x06, 0x01, 0xa1, 0x03, b'c', b'i', b'd',
        ];
        let (v, used) = Value::decode(&open).unwrap();
        assert_eq!(used, open.len());
        assert_eq!(
            v,
            Value::Described(
                Box::new(Value::Ulong(0x10)),
                Box::new(Value::List(vec![Value::String("cid".into())]))
            )
        );
        // sym8, list32, map8, vbin8, smalllong, boolean.
        for (wire, value) in [
            (&[0xa3, 0x01, b'x'][..], Value::Symbol("x".into())),
            (
                &[0xd0, 0, 0, 0, 5, 0, 0, 0, 1, 0x40][..],
                Value::List(vec![Value::Null]),
            ),
            (
                &[0xc1, 0x03, 0x02, 0x41, 0x42][..],
                Value::Map(vec![(Value::Bool(true), Value::Bool(false))]),
            ),
            (
                &[0xa0, 0x01, 0x09][..],
                Value::Binary(Bytes::from_static(&[9])),
            ),
            (&[0x55, 0xfe][..], Value::Long(-2)),
            (&[0x56, 0x01][..], Value::Bool(true)),
        ] {
            assert_eq!(Value::decode(wire).unwrap(), (value, wire.len()));
        }
    }

    #[test]
    fn bad_input_is_an_error_that_says_what() {
        for (wire, words) in [
            (&[][..], "constructor"),
            (&[0x70, 0, 0][..], "uint"),
            (&[0xa1, 0x05, b'a'][..], "string"),
            (&[0xa1, 0x01, 0xff][..], "UTF-8"),
            (&[0xa3, 0x01, 0xff][..], "ASCII"),
            (&[0x56, 0x02][..], "boolean"),
            (&[0x73, 0, 0x11, 0, 0][..], "code point"),
            (&[0xc1, 0x02, 0x01, 0x40][..], "odd"),
            (&[0xc0, 0x00][..], "no room for its count"),
            (
                &[0xc0, 0x03, 0x01, 0x40, 0x40][..],
                "after the last element",
            ),
            (&[0x99][..], "unknown format code 0x99"),
            // Four billion nulls claimed in nine bytes, or uints in five.
            (
                &[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40][..],
                "at most 65536",
            ),
            (&[0xe0, 0x02, 0xff, 0x70][..], "uint"),
        ] {
            let e = Value::decode(wire).unwrap_err().to_string();
            assert!(e.contains(words), "{wire:02x?}: {e}");
        }
        // Nesting past the limit.
        let mut deep = vec![0x40];
        for _ in 0..MAX_DEPTH + 2 {
            let mut wrapped = vec![0xc0, (deep.len() + 1) as u8, 0x01];
            wrapped.extend(deep);
            deep = wrapped;
        }
        let e = Value::decode(&deep).unwrap_err().to_string();
        assert!(e.contains("nested"), "{e}");
    }
}
