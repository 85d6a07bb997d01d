//! Primitive field readers and writers shared by every body layout.
//!
//! Integers are big-endian. A `str16` is a u16 length and that many bytes of
//! UTF-8; a `str32` has a u32 length. Reading never panics: a short body is
//! [`Error::Truncated`] naming the field that was missing.

use bytes::BufMut;

use crate::error::Error;

/// Reads fields from a body, front to back.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), Error> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(Error::TrailingBytes(n)),
        }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], Error> {
        if self.remaining() < n {
            return Err(Error::Truncated(field));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], Error> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, field)?);
        Ok(a)
    }

    /// A u8.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, Error> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, Error> {
        self.array(field).map(u16::from_be_bytes)
    }

    /// A big-endian u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, Error> {
        self.array(field).map(u32::from_be_bytes)
    }

    /// A big-endian u64.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, Error> {
        self.array(field).map(u64::from_be_bytes)
    }

    /// A big-endian i64.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, Error> {
        self.array(field).map(i64::from_be_bytes)
    }

    /// A str16 borrowed from the body.
    pub fn str16(&mut self, field: &'static str) -> Result<&'a str, Error> {
        let n = self.u16(field)? as usize;
        utf8(self.bytes(n, field)?, field)
    }

    /// Where a str16 is in the body, checked as UTF-8 without making a
    /// `&str` of it: ASCII, which most names and ids are, at a glance.
    #[inline]
    pub fn str16_at(&mut self, field: &'static str) -> Result<std::ops::Range<usize>, Error> {
        let n = self.u16(field)? as usize;
        let start = self.pos;
        let b = self.bytes(n, field)?;
        if !b.is_ascii() {
            utf8(b, field)?;
        }
        Ok(start..start + n)
    }

    /// Steps over a str16 without checking it: for a block validated
    /// before, whose later fields are wanted.
    pub fn skip16(&mut self, field: &'static str) -> Result<(), Error> {
        let n = self.u16(field)? as usize;
        self.bytes(n, field).map(drop)
    }

    /// A str32 borrowed from the body.
    pub fn str32(&mut self, field: &'static str) -> Result<&'a str, Error> {
        let n = self.u32(field)? as usize;
        utf8(self.bytes(n, field)?, field)
    }
}

/// Checks that `b` is UTF-8.
pub fn utf8<'a>(b: &'a [u8], field: &'static str) -> Result<&'a str, Error> {
    std::str::from_utf8(b).map_err(|e| Error::invalid(field, format!("not UTF-8 ({e})")))
}

/// Writes a str16, failing if `s` is longer than 65,535 bytes.
pub fn put_str16(dst: &mut impl BufMut, s: &str, field: &'static str) -> Result<(), Error> {
    let n = u16::try_from(s.len())
        .map_err(|_| Error::invalid(field, format!("{} bytes long, at most 65535", s.len())))?;
    dst.put_u16(n);
    dst.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a str32.
pub fn put_str32(dst: &mut impl BufMut, s: &str, field: &'static str) -> Result<(), Error> {
    let n = u32::try_from(s.len())
        .map_err(|_| Error::invalid(field, format!("{} bytes long", s.len())))?;
    dst.put_u32(n);
    dst.put_slice(s.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_name_the_field() {
        let mut c = Cursor::new(&[0, 5, b'a']);
        assert_eq!(c.str16("name"), Err(Error::Truncated("name")));
        let mut c = Cursor::new(&[1]);
        assert_eq!(c.u32("count"), Err(Error::Truncated("count")));
    }

    #[test]
    fn rejects_bad_utf8_and_trailing_bytes() {
        let mut c = Cursor::new(&[0, 1, 0xff]);
        assert!(matches!(
            c.str16("name"),
            Err(Error::Invalid { field: "name", .. })
        ));
        let mut c = Cursor::new(&[0, 0, 7]);
        assert_eq!(c.str16("name"), Ok(""));
        assert_eq!(c.finish(), Err(Error::TrailingBytes(1)));
    }

    #[test]
    fn refuses_to_write_an_overlong_str16() {
        let long = "x".repeat(70_000);
        let mut v = Vec::new();
        assert!(put_str16(&mut v, &long, "name").is_err());
        assert!(v.is_empty());
    }
}
