//! How `herald sub`, `browse`, `request` and `reply` print a message:
//! one line each, in the `--format` asked for.

use std::fmt::Write;

use base64::Engine;
use herald_client::{Body, Consumer, DeliveryMode, Error, Message, Result, Value};
use herald_protocol::message::CONTENT_TYPE_PROPERTY;
use serde_json::json;

/// What a printed message looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// The destination, the properties (and content type) in brackets,
    /// then the body: text as text, other bytes escaped.
    #[default]
    Text,
    /// The body alone, byte for byte as it came: nothing added, not even
    /// a newline, so that `herald sub --format raw > file` keeps a file
    /// (on a terminal, a body that does not end a line is followed by
    /// one).
    Raw,
    /// Like text, with the body in hexadecimal.
    Hex,
    /// One JSON object per line: destination, headers, properties, body
    /// (`body_base64` for bytes that are not UTF-8).
    Json,
}

/// Writes `m` to stdout in `format`: a line, or the raw body alone.
pub fn print(m: &Message, format: Format) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let result = match format {
        // Flushed at once: a body need not end a line.
        Format::Raw => {
            let body = raw_body(m);
            let newline = std::io::IsTerminal::is_terminal(&out) && !body.ends_with(b"\n");
            out.write_all(&body)
                .and_then(|()| match newline {
                    true => out.write_all(b"\n"),
                    false => Ok(()),
                })
                .and_then(|()| out.flush())
        }
        _ => writeln!(out, "{}", line(m, format)),
    };
    // A closed pipe (`herald sub | head`) ends the output, quietly.
    if result.is_err() {
        std::process::exit(0);
    }
}

/// One line of `m`, as text, hex or JSON (see [`Format`]).
pub fn line(m: &Message, format: Format) -> String {
    match format {
        Format::Json => json(m).to_string(),
        Format::Raw => String::from_utf8_lossy(&raw_body(m)).into_owned(),
        Format::Text | Format::Hex => {
            let mut line = String::new();
            if let Some(d) = m.destination() {
                line.push_str(&d.name);
            }
            let tags = tags(m);
            if !tags.is_empty() {
                let _ = write!(line, " [{}]", tags.join(" "));
            }
            let body = match (format, &m.body) {
                (_, Body::Empty) => String::new(),
                (Format::Hex, _) => raw_body(m).iter().fold(String::new(), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                }),
                _ => text_body(&m.body),
            };
            if !body.is_empty() {
                line.push(' ');
                line.push_str(&body);
            }
            line
        }
    }
}

/// The content type, then every other property, as `key=value`.
fn tags(m: &Message) -> Vec<String> {
    m.content_type()
        .map(|ct| format!("content-type={ct}"))
        .into_iter()
        .chain(
            m.properties()
                .iter()
                .filter(|(k, _)| k != CONTENT_TYPE_PROPERTY)
                .map(|(k, v)| format!("{k}={v}")),
        )
        .collect()
}

/// A body for a line of text: text as it is, bytes as text when they are
/// UTF-8 and escaped otherwise, a map as `{k: v, ...}`.
fn text_body(body: &Body) -> String {
    match body {
        Body::Empty => String::new(),
        Body::Text(t) => t.clone(),
        Body::Bytes(b) => match std::str::from_utf8(b) {
            Ok(t) => t.to_owned(),
            Err(_) => b.escape_ascii().to_string(),
        },
        Body::Map(entries) => {
            let items: Vec<String> = entries.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}}", items.join(", "))
        }
        Body::Stream(s) => format!("({} bytes streamed: --format raw writes them)", s.len),
    }
}

/// The body's bytes as they came (a map as its text form; a large
/// message's streamed body is written by [`print_streamed`]).
fn raw_body(m: &Message) -> Vec<u8> {
    match &m.body {
        Body::Bytes(b) => b.to_vec(),
        Body::Stream(_) => Vec::new(),
        other => text_body(other).into_bytes(),
    }
}

/// Writes a large message's body to stdout as it arrives, for `--format
/// raw`; in other formats its line says how long it was.
pub fn print_streamed(m: &Message, consumer: &Consumer, format: Format) -> Result<()> {
    use std::io::Write as _;
    if format != Format::Raw {
        print(m, format);
        return Ok(());
    }
    let mut body = consumer.body(m)?;
    let mut out = std::io::stdout().lock();
    match std::io::copy(&mut body, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe ends the output, quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Error::io("streaming a large message's body", e)),
    }
}

fn json_value(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// `m` as one JSON object.
fn json(m: &Message) -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = m
        .properties()
        .iter()
        .filter(|(k, _)| k != CONTENT_TYPE_PROPERTY)
        .map(|(k, v)| (k.clone(), json_value(v)))
        .collect();
    let mut o = json!({
        "destination": m.destination().map(|d| d.to_string()),
        "message_id": m.message_id(),
        "headers": {
            "persistent": m.delivery_mode == DeliveryMode::Persistent,
            "priority": m.priority,
            "timestamp": m.timestamp,
            "expiration": m.expiration,
            "correlation_id": m.correlation_id(),
            "reply_to": m.reply_to().map(|d| d.to_string()),
            "type": m.message_type(),
            "content_type": m.content_type(),
            "redelivered": m.redelivered,
            "delivery_count": m.delivery_count,
        },
        "properties": properties,
    });
    match &m.body {
        Body::Empty => o["body"] = json!(""),
        Body::Text(t) => o["body"] = json!(t),
        Body::Bytes(b) => match std::str::from_utf8(b) {
            Ok(t) => o["body"] = json!(t),
            Err(_) => o["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(b)),
        },
        Body::Map(entries) => {
            let map: serde_json::Map<String, serde_json::Value> = entries
                .iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect();
            o["body"] = serde_json::Value::Object(map);
        }
        // Too large for a line: --format raw writes it.
        Body::Stream(s) => o["body_streamed_bytes"] = json!(s.len),
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_client::Destination;

    fn at(mut m: Message, topic: &str) -> Message {
        m.set_destination(Some(Destination::topic(topic)));
        m
    }

    #[test]
    fn lines_show_topic_properties_and_body() {
        let m = at(
            Message::text("sold 3")
                .with_property("region", "EU")
                .with_property("units", 3),
            "sales.europe.smartphone",
        );
        assert_eq!(
            line(&m, Format::Text),
            "sales.europe.smartphone [region=EU units=3] sold 3"
        );
    }

    #[test]
    fn no_properties_no_brackets_and_utf8_bytes_print_as_text() {
        let m = at(Message::bytes(&b"21.5"[..]), "sensors.k1.temp");
        assert_eq!(line(&m, Format::Text), "sensors.k1.temp 21.5");
        assert_eq!(line(&m, Format::Hex), "sensors.k1.temp 32312e35");
        let m = at(Message::bytes(&b"\x00\xffA"[..]), "t");
        assert_eq!(line(&m, Format::Text), "t \\x00\\xffA");
        let json = line(&m, Format::Json);
        assert!(json.contains("\"body_base64\":\"AP9B\""), "{json}");
    }

    #[test]
    fn the_content_type_is_shown_as_such_not_as_a_property() {
        let m = at(
            Message::text("{}")
                .with_content_type("application/json")
                .with_property("n", 1),
            "t",
        );
        assert_eq!(
            line(&m, Format::Text),
            "t [content-type=application/json n=1] {}"
        );
        let json = line(&m, Format::Json);
        assert!(!json.contains("HeraldContentType"), "{json}");
        assert!(
            json.contains("\"content_type\":\"application/json\""),
            "{json}"
        );
        assert!(json.contains("\"properties\":{\"n\":1}"), "{json}");
    }
}
