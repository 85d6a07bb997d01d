//! Correlation data that is not text: MQTT 5.0's correlation data and an
//! AMQP binary correlation id are bytes, a JMS correlation id is a
//! string. Bytes that are UTF-8 become the correlation id; others are
//! kept in hex in [`CORRELATION_HEX_PROPERTY`], which both front-ends
//! turn back into bytes, so that binary correlation data keeps its type
//! between MQTT 5.0 and AMQP.

use bytes::Bytes;
use herald_protocol::Message;

/// The property that holds correlation data that is not UTF-8, in hex.
pub const CORRELATION_HEX_PROPERTY: &str = "HeraldCorrelationDataHex";

/// Sets `m`'s correlation from `data`: the id if it is text, else the
/// hex property.
pub fn set_correlation_data(m: &mut Message, data: &[u8]) {
    match std::str::from_utf8(data) {
        Ok(text) => m.set_correlation_id(Some(text.to_owned())),
        Err(_) => m.set_property(CORRELATION_HEX_PROPERTY, hex(data)),
    }
}

/// Bytes in lower-case hex.
pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes `text` spells in hex; `None` if it does not.
pub fn unhex(text: &str) -> Option<Bytes> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_the_id_and_other_bytes_go_in_hex_and_back() {
        let mut m = Message::text("x");
        set_correlation_data(&mut m, b"req-1");
        assert_eq!(m.correlation_id(), Some("req-1"));
        assert!(m.property(CORRELATION_HEX_PROPERTY).is_none());
        let mut m = Message::text("x");
        set_correlation_data(&mut m, &[0x00, 0xff]);
        assert_eq!(m.correlation_id(), None);
        let h = m
            .property(CORRELATION_HEX_PROPERTY)
            .and_then(|v| v.as_str());
        assert_eq!(h, Some("00ff"));
        assert_eq!(unhex("00ff").as_deref(), Some(&[0x00, 0xff][..]));
        for bad in ["0", "zz", "0g", "é0"] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }
}
