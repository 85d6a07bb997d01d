//! MQTT topics ↔ Herald destination names, faithfully both ways.
//!
//! An MQTT level becomes a Herald word: `a/b/c` ↔ `a.b.c`, and in filters
//! `+` ↔ `*` and `#` ↔ `#`. What a level may hold and a Herald word may
//! not is percent-escaped, byte by byte of its UTF-8: `.`, `%`, `*`, `#`,
//! whitespace and control characters (so `a.b/c` is `a%2Eb.c`), and an
//! empty level (`/a`, `a//b`) is the word `%`. A Herald word decodes the
//! other way; one that holds a `/` (which no MQTT level can) reaches MQTT
//! clients as more than one level.

use std::fmt::Write;

use super::MqttError;
use crate::destination::DestinationKind;

/// The prefix of a shared subscription's filter: `$share/GROUP/FILTER`.
pub const SHARE_PREFIX: &str = "$share/";

/// The prefix of the MQTT topics that name queues: a PUBLISH to
/// `$queue/a/b` goes to the queue `a.b`, and a JMS reply-to queue reaches
/// an MQTT client as a Response Topic of this form, so that an MQTT
/// responder can answer a JMS requester's temporary queue.
pub const QUEUE_PREFIX: &str = "$queue/";

/// The destination a PUBLISH topic names: a queue under
/// [`QUEUE_PREFIX`], a topic otherwise.
pub fn to_destination(topic: &str) -> (DestinationKind, String) {
    match topic.strip_prefix(QUEUE_PREFIX) {
        Some(queue) => (DestinationKind::Queue, to_herald(queue)),
        None => (DestinationKind::Topic, to_herald(topic)),
    }
}

/// The MQTT topic of a destination: [`to_destination`] the other way.
pub fn from_destination(kind: DestinationKind, name: &str) -> String {
    match kind {
        DestinationKind::Topic => from_herald(name),
        DestinationKind::Queue => format!("{QUEUE_PREFIX}{}", from_herald(name)),
    }
}

/// Whether a topic name holds a wildcard, which only filters may.
pub fn has_wildcard(topic: &str) -> bool {
    topic.contains(['+', '#'])
}

/// A PUBLISH topic's Herald name (one allocation: every message has one).
pub fn to_herald(topic: &str) -> String {
    let mut name = String::with_capacity(topic.len() + 4);
    for (i, level) in topic.split('/').enumerate() {
        if i > 0 {
            name.push('.');
        }
        escape_into(level, &mut name);
    }
    name
}

/// A Herald topic's MQTT name (one allocation: every delivery has one).
pub fn from_herald(name: &str) -> String {
    let mut topic = String::with_capacity(name.len());
    for (i, word) in name.split('.').enumerate() {
        if i > 0 {
            topic.push('/');
        }
        unescape_into(word, &mut topic);
    }
    topic
}

/// A subscription filter's Herald pattern; refuses a wildcard that is not
/// a whole level, and a `#` that is not the last.
pub fn filter_to_pattern(filter: &str) -> Result<String, MqttError> {
    if filter.is_empty() {
        return Err(MqttError::Protocol("an empty topic filter".into()));
    }
    let levels: Vec<&str> = filter.split('/').collect();
    let mut words = Vec::with_capacity(levels.len());
    for (i, level) in levels.iter().enumerate() {
        let word = match *level {
            "+" => "*".to_owned(),
            "#" if i + 1 == levels.len() => "#".to_owned(),
            "#" => {
                return Err(MqttError::Protocol(format!(
                    "'{filter}': '#' must be the last level"
                )))
            }
            l if l.contains(['+', '#']) => {
                return Err(MqttError::Protocol(format!(
                    "'{filter}': a wildcard must be a whole level"
                )))
            }
            l => escape(l),
        };
        words.push(word);
    }
    Ok(words.join("."))
}

/// Whether a message on MQTT topic `topic` reaches a subscription to
/// `filter` as far as MQTT's one extra rule goes: a filter that starts
/// with a wildcard does not match topics that start with `$` (§4.7.2).
pub fn dollar_allows(filter: &str, topic: &str) -> bool {
    !(topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')))
}

/// A shared subscription's group and filter, if `filter` is one.
pub fn shared(filter: &str) -> Result<Option<(&str, &str)>, MqttError> {
    let Some(rest) = filter.strip_prefix(SHARE_PREFIX) else {
        return Ok(None);
    };
    match rest.split_once('/') {
        Some((group, filter))
            if !group.is_empty() && !group.contains(['+', '#']) && !filter.is_empty() =>
        {
            Ok(Some((group, filter)))
        }
        _ => Err(MqttError::Protocol(format!(
            "'$share/{rest}' is not $share/GROUP/FILTER"
        ))),
    }
}

/// One level as a Herald word.
fn escape(level: &str) -> String {
    let mut word = String::with_capacity(level.len());
    escape_into(level, &mut word);
    word
}

/// Appends `level` as a Herald word.
fn escape_into(level: &str, word: &mut String) {
    if level.is_empty() {
        word.push('%');
        return;
    }
    for c in level.chars() {
        if matches!(c, '.' | '%' | '*' | '#') || c.is_whitespace() || c.is_control() {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                let _ = write!(word, "%{b:02X}");
            }
        } else {
            word.push(c);
        }
    }
}

/// Appends one Herald word as a level: `%` is the empty level, `%XX` a
/// byte; anything else (a `%` not followed by two hex digits) stays as it
/// is.
fn unescape_into(word: &str, level: &mut String) {
    if word == "%" {
        return;
    }
    if !word.contains('%') {
        level.push_str(word);
        return;
    }
    let b = word.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    match String::from_utf8(out) {
        Ok(text) => level.push_str(&text),
        Err(_) => level.push_str(word),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::destination::{validate_name, Pattern};

    #[test]
    fn topics_map_both_ways_and_make_valid_names() {
        for (mqtt, herald) in [
            ("a/b/c", "a.b.c"),
            ("sensors/room 1/temp", "sensors.room%201.temp"),
            ("v1.2/x", "v1%2E2.x"),
            ("/a", "%.a"),
            ("a//b", "a.%.b"),
            ("a/", "a.%"),
            ("100%/*/#x", "100%25.%2A.%23x"),
            ("$SYS/uptime", "$SYS.uptime"),
            ("température/été", "température.été"),
            ("tab\there", "tab%09here"),
        ] {
            assert_eq!(to_herald(mqtt), herald, "{mqtt}");
            assert_eq!(from_herald(herald), mqtt, "{herald}");
            validate_name(herald).unwrap_or_else(|e| panic!("{herald}: {e}"));
        }
        // A native name with a '/' shows as more levels; a stray '%' stays.
        assert_eq!(from_herald("a/b.c"), "a/b/c");
        assert_eq!(from_herald("50%off.x%zz"), "50%off/x%zz");
    }

    #[test]
    fn queue_topics_name_queues_both_ways() {
        for (mqtt, kind, name) in [
            ("$queue/replies", DestinationKind::Queue, "replies"),
            ("$queue/temp/c7/1", DestinationKind::Queue, "temp.c7.1"),
            ("$queue/a.b/c", DestinationKind::Queue, "a%2Eb.c"),
            ("queue/x", DestinationKind::Topic, "queue.x"),
            ("$queues/x", DestinationKind::Topic, "$queues.x"),
        ] {
            assert_eq!(to_destination(mqtt), (kind, name.to_owned()), "{mqtt}");
            assert_eq!(from_destination(kind, name), mqtt, "{name}");
        }
    }

    #[test]
    fn filters_become_patterns_and_bad_ones_are_refused() {
        for (filter, pattern) in [
            ("a/+/c", "a.*.c"),
            ("a/#", "a.#"),
            ("#", "#"),
            ("+/+", "*.*"),
            ("/+", "%.*"),
            ("a.b/+", "a%2Eb.*"),
        ] {
            assert_eq!(filter_to_pattern(filter).unwrap(), pattern, "{filter}");
            Pattern::parse(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        }
        for bad in ["a/#/c", "a+/b", "a/b#", "", "sport/tennis#"] {
            assert!(filter_to_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcards_at_the_first_level_skip_dollar_topics() {
        assert!(!dollar_allows("#", "$SYS/x"));
        assert!(!dollar_allows("+/x", "$SYS/x"));
        assert!(dollar_allows("$SYS/#", "$SYS/x"));
        assert!(dollar_allows("#", "a/x"));
    }

    #[test]
    fn shared_subscriptions_name_a_group_and_a_filter() {
        assert_eq!(shared("$share/g1/a/+").unwrap(), Some(("g1", "a/+")));
        assert_eq!(shared("a/b").unwrap(), None);
        for bad in [
            "$share/",
            "$share/g",
            "$share//a",
            "$share/g+/a",
            "$share/g/",
        ] {
            assert!(shared(bad).is_err(), "{bad}");
        }
    }
}
