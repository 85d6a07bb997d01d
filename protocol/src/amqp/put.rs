//! Writing AMQP values straight into a buffer, without building a
//! [`Value`](super::Value) tree first: what the paths taken once per
//! message use (a transfer's performative, the sections of every
//! delivery). Each function writes the smallest form of its value, as
//! [`Value::encode`](super::Value::encode) does, which is built on them.

use bytes::{BufMut, BytesMut};

use super::types::code;

/// `null`.
pub fn null(out: &mut impl BufMut) {
    out.put_u8(code::NULL);
}

/// A `boolean`, in its one-byte form.
pub fn boolean(out: &mut impl BufMut, v: bool) {
    out.put_u8(if v { code::TRUE } else { code::FALSE });
}

/// A `ubyte`.
pub fn ubyte(out: &mut impl BufMut, v: u8) {
    out.put_u8(code::UBYTE);
    out.put_u8(v);
}

/// A `uint`.
pub fn uint(out: &mut impl BufMut, v: u32) {
    match v {
        0 => out.put_u8(code::UINT0),
        1..=255 => {
            out.put_u8(code::SMALLUINT);
            out.put_u8(v as u8);
        }
        _ => {
            out.put_u8(code::UINT);
            out.put_u32(v);
        }
    }
}

/// A `ulong`.
pub fn ulong(out: &mut impl BufMut, v: u64) {
    match v {
        0 => out.put_u8(code::ULONG0),
        1..=255 => {
            out.put_u8(code::SMALLULONG);
            out.put_u8(v as u8);
        }
        _ => {
            out.put_u8(code::ULONG);
            out.put_u64(v);
        }
    }
}

/// A `byte`.
pub fn byte(out: &mut impl BufMut, v: i8) {
    out.put_u8(code::BYTE);
    out.put_i8(v);
}

/// A `short`.
pub fn short(out: &mut impl BufMut, v: i16) {
    out.put_u8(code::SHORT);
    out.put_i16(v);
}

/// An `int`.
pub fn int(out: &mut impl BufMut, v: i32) {
    match i8::try_from(v) {
        Ok(small) => {
            out.put_u8(code::SMALLINT);
            out.put_i8(small);
        }
        Err(_) => {
            out.put_u8(code::INT);
            out.put_i32(v);
        }
    }
}

/// A `long`.
pub fn long(out: &mut impl BufMut, v: i64) {
    match i8::try_from(v) {
        Ok(small) => {
            out.put_u8(code::SMALLLONG);
            out.put_i8(small);
        }
        Err(_) => {
            out.put_u8(code::LONG);
            out.put_i64(v);
        }
    }
}

/// A `float`.
pub fn float(out: &mut impl BufMut, v: f32) {
    out.put_u8(code::FLOAT);
    out.put_f32(v);
}

/// A `double`.
pub fn double(out: &mut impl BufMut, v: f64) {
    out.put_u8(code::DOUBLE);
    out.put_f64(v);
}

/// A `timestamp` (ms since the epoch).
pub fn timestamp(out: &mut impl BufMut, v: i64) {
    out.put_u8(code::TIMESTAMP);
    out.put_i64(v);
}

/// A variable-width value made of `parts`, one after the other: the
/// 8-bit size form (`small`) where it fits, else the 32-bit one (`wide`).
fn variable<'a>(
    out: &mut impl BufMut,
    (small, wide): (u8, u8),
    parts: impl Iterator<Item = &'a [u8]> + Clone,
) {
    let len: usize = parts.clone().map(<[u8]>::len).sum();
    match u8::try_from(len) {
        Ok(n) => {
            out.put_u8(small);
            out.put_u8(n);
        }
        Err(_) => {
            out.put_u8(wide);
            out.put_u32(len as u32);
        }
    }
    parts.for_each(|p| out.put_slice(p));
}

/// A `binary`.
pub fn binary(out: &mut impl BufMut, v: &[u8]) {
    variable(out, (code::VBIN8, code::VBIN32), std::iter::once(v));
}

/// A `string`.
pub fn string(out: &mut impl BufMut, v: &str) {
    variable(
        out,
        (code::STR8, code::STR32),
        std::iter::once(v.as_bytes()),
    );
}

/// A `string` made of `parts` one after the other (`queue`, `://`,
/// a name), without joining them first.
pub fn string_of(out: &mut impl BufMut, parts: &[&str]) {
    let bytes = parts.iter().map(|p| p.as_bytes());
    variable(out, (code::STR8, code::STR32), bytes);
}

/// A `symbol` (the caller's text is ASCII).
pub fn symbol(out: &mut impl BufMut, v: &str) {
    variable(
        out,
        (code::SYM8, code::SYM32),
        std::iter::once(v.as_bytes()),
    );
}

/// The constructor of a value described by the ulong `code`: what a
/// performative or a message section starts with.
pub fn described(out: &mut impl BufMut, descriptor: u64) {
    out.put_u8(code::DESCRIBED);
    ulong(out, descriptor);
}

/// A list or map being written: opened with its 32-bit form, its size
/// and count filled in (and the 8-bit form taken where they fit) when it
/// is closed.
#[derive(Debug)]
pub struct Compound {
    /// Where its format code is.
    at: usize,
    /// Elements written.
    count: usize,
    /// Elements, and bytes of the buffer, up to the last that was not a
    /// null: a composite's trailing nulls are left out.
    kept: (usize, usize),
    map: bool,
}

impl Compound {
    fn open(out: &mut BytesMut, code: u8, map: bool) -> Compound {
        let at = out.len();
        out.put_u8(code);
        out.put_u64(0);
        Compound {
            at,
            count: 0,
            kept: (0, out.len()),
            map,
        }
    }

    /// Opens a list.
    pub fn list(out: &mut BytesMut) -> Compound {
        Compound::open(out, code::LIST32, false)
    }

    /// Opens a map: its keys and values are elements, one after the
    /// other.
    pub fn map(out: &mut BytesMut) -> Compound {
        Compound::open(out, code::MAP32, true)
    }

    /// Counts an element the caller has written after the last.
    pub fn wrote(&mut self, out: &BytesMut) {
        self.count += 1;
        self.kept = (self.count, out.len());
    }

    /// Writes and counts an element.
    pub fn put(&mut self, out: &mut BytesMut, write: impl FnOnce(&mut BytesMut)) {
        write(out);
        self.wrote(out);
    }

    /// Writes a null element: left out if nothing else follows it.
    pub fn skip(&mut self, out: &mut BytesMut) {
        null(out);
        self.count += 1;
    }

    /// Elements written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Fills in the size and count. A list drops its trailing nulls (a
    /// composite's fields), and is `list0` if nothing is left.
    pub fn close(self, out: &mut BytesMut) {
        let (count, end) = match self.map {
            true => (self.count, out.len()),
            false => self.kept,
        };
        out.truncate(end);
        let body = end - self.at - 9;
        if count == 0 && !self.map {
            out.truncate(self.at);
            out.put_u8(code::LIST0);
        } else if body < 255 && count < 256 {
            out[self.at] = if self.map { code::MAP8 } else { code::LIST8 };
            out[self.at + 1] = (body + 1) as u8;
            out[self.at + 2] = count as u8;
            out.copy_within(self.at + 9..end, self.at + 3);
            out.truncate(end - 6);
        } else {
            out[self.at + 1..self.at + 5].copy_from_slice(&((body + 4) as u32).to_be_bytes());
            out[self.at + 5..self.at + 9].copy_from_slice(&(count as u32).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::Value;

    fn same(write: impl FnOnce(&mut BytesMut), v: Value) {
        let mut direct = BytesMut::new();
        write(&mut direct);
        let mut built = Vec::new();
        v.encode(&mut built);
        assert_eq!(&direct[..], &built[..], "{v:?}");
    }

    #[test]
    fn compounds_take_the_form_values_take() {
        same(
            |out| {
                let mut l = Compound::list(out);
                l.put(out, |o| uint(o, 7));
                l.skip(out);
                l.put(out, |o| string_of(o, &["queue", "://", "a"]));
                l.skip(out);
                l.skip(out);
                l.close(out);
            },
            Value::List(vec![
                Value::Uint(7),
                Value::Null,
                Value::String("queue://a".into()),
            ]),
        );
        same(|out| Compound::list(out).close(out), Value::List(vec![]));
        let long = "x".repeat(300);
        same(
            |out| {
                let mut m = Compound::map(out);
                m.put(out, |o| symbol(o, "k"));
                m.put(out, |o| string(o, &long));
                m.put(out, |o| symbol(o, "n"));
                m.skip(out);
                m.close(out);
            },
            Value::Map(vec![
                (Value::Symbol("k".into()), Value::String(long.clone())),
                (Value::Symbol("n".into()), Value::Null),
            ]),
        );
        same(|out| Compound::map(out).close(out), Value::Map(vec![]));
        // Many small elements: the count fits a byte only to 255.
        same(
            |out| {
                let mut l = Compound::list(out);
                (0..300).for_each(|_| l.put(out, |o| boolean(o, true)));
                l.close(out);
            },
            Value::List(vec![Value::Bool(true); 300]),
        );
    }
}
