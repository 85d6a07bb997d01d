//! MQTT's primitive types: variable byte integers, two-byte lengths,
//! UTF-8 strings and binary data (MQTT 5.0 §1.5), read from a packet's
//! bytes and written to a buffer.

use bytes::{BufMut, Bytes};

use super::MqttError;

/// The largest value a variable byte integer holds (four bytes).
pub const MAX_VARINT: u32 = 268_435_455;

/// Reads the fields of one packet's remaining bytes, front to back.
pub struct Reader<'a> {
    /// The packet's bytes, shared by binary fields without copying.
    whole: &'a Bytes,
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `whole`.
    pub fn new(whole: &'a Bytes) -> Reader<'a> {
        Reader { whole, at: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.whole.len() - self.at
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], MqttError> {
        if self.remaining() < n {
            return Err(MqttError::Malformed(format!(
                "{what} runs past the packet's end"
            )));
        }
        let whole: &'a [u8] = self.whole;
        let taken = &whole[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, MqttError> {
        Ok(self.take(1, what)?[0])
    }

    /// A big-endian two-byte integer.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, MqttError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian four-byte integer.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, MqttError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A variable byte integer.
    pub fn varint(&mut self, what: &'static str) -> Result<u32, MqttError> {
        let mut value = 0u32;
        for i in 0..4 {
            let b = self.u8(what)?;
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(MqttError::Malformed(format!(
            "{what}: a variable byte integer longer than 4 bytes"
        )))
    }

    /// Binary data: a two-byte length and that many bytes.
    pub fn binary(&mut self, what: &'static str) -> Result<Bytes, MqttError> {
        let n = usize::from(self.u16(what)?);
        let start = self.at;
        self.take(n, what)?;
        Ok(self.whole.slice(start..start + n))
    }

    /// A UTF-8 string: well-formed, and without U+0000 (§1.5.4).
    pub fn string(&mut self, what: &'static str) -> Result<String, MqttError> {
        let n = usize::from(self.u16(what)?);
        let bytes = self.take(n, what)?;
        let text = std::str::from_utf8(bytes)
            .map_err(|_| MqttError::Malformed(format!("{what} is not UTF-8")))?;
        if text.contains('\0') {
            return Err(MqttError::Malformed(format!("{what} contains U+0000")));
        }
        Ok(text.to_owned())
    }

    /// Everything left.
    pub fn rest(&mut self) -> Bytes {
        let rest = self.whole.slice(self.at..);
        self.at = self.whole.len();
        rest
    }
}

/// Writes a variable byte integer; `value` must be at most [`MAX_VARINT`].
pub fn put_varint(dst: &mut impl BufMut, mut value: u32) {
    loop {
        let mut b = (value % 128) as u8;
        value /= 128;
        if value > 0 {
            b |= 0x80;
        }
        dst.put_u8(b);
        if value == 0 {
            return;
        }
    }
}

/// How many bytes [`put_varint`] writes for `value`.
pub fn varint_len(value: u32) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a two-byte length and the bytes: a string or binary data of at
/// most 65,535 bytes (longer ones are cut, which the encoder's callers
/// prevent by checking lengths where they come from).
pub fn put_binary(dst: &mut impl BufMut, bytes: &[u8]) {
    let n = bytes.len().min(usize::from(u16::MAX));
    dst.put_u16(n as u16);
    dst.put_slice(&bytes[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_byte_integers_round_trip_at_their_edges() {
        for value in [
            0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, MAX_VARINT,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, value);
            assert_eq!(buf.len(), varint_len(value), "{value}");
            let bytes = Bytes::from(buf);
            assert_eq!(Reader::new(&bytes).varint("v").unwrap(), value);
        }
        let five = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(matches!(
            Reader::new(&five).varint("v"),
            Err(MqttError::Malformed(_))
        ));
    }

    #[test]
    fn strings_must_be_utf8_without_nul() {
        let bad = |b: &'static [u8]| Reader::new(&Bytes::from_static(b)).string("s").is_err();
        assert!(bad(&[0, 2, 0xc3, 0x28]));
        assert!(bad(&[0, 1, 0]));
        assert!(bad(&[0, 5, b'a']));
        let ok = Bytes::from_static(&[0, 3, b'a', b'/', b'b']);
        assert_eq!(Reader::new(&ok).string("s").unwrap(), "a/b");
    }
}
