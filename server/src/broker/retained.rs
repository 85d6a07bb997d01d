//! Retained messages: topics that a `[[topics.retain]]` rule covers keep
//! their last messages, and a new subscriber gets them first.
//!
//! Called with the broker's topic tree locked (read by publishers, written
//! by subscribers), so that a new subscriber gets each message once: kept,
//! or live.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use herald_protocol::selector::Selector;
use herald_protocol::Pattern;

use super::queue;
use crate::config::RetainRule;
use crate::store::large::{keep, LargeStore};
use crate::sync::lock;

/// Whether a message block's body is empty (of any kind).
fn is_empty(block: &[u8]) -> bool {
    use herald_protocol::message::{BodyRef, MessageRef};
    match MessageRef::read(block).map(|r| r.body) {
        Ok(BodyRef::Empty) => true,
        Ok(BodyRef::Bytes(range)) => range.is_empty(),
        Ok(BodyRef::Text(text)) => text.is_empty(),
        Ok(BodyRef::Stream(s)) => s.len == 0,
        Ok(BodyRef::Map(_)) | Err(_) => false,
    }
}

/// The rules and what they keep.
pub(super) struct Retained {
    /// Topic patterns whose topics keep their last messages, and how many.
    rules: Vec<(Pattern, usize)>,
    kept: Mutex<Kept>,
}

/// What is kept, under one lock.
#[derive(Default)]
struct Kept {
    /// The kept messages, by topic name, oldest first.
    messages: HashMap<String, VecDeque<Bytes>>,
    /// The journal record of a topic's retained message, if it is
    /// persistent: it comes back after a restart.
    records: HashMap<String, u64>,
}

/// What keeping a message changed in the journal.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Change {
    /// The id of the record to write for it.
    pub(super) new: Option<u64>,
    /// The record of the message it replaced or deleted, to end.
    pub(super) ended: Option<u64>,
}

impl Retained {
    /// Keeping what `rules` say (those whose pattern does not parse were
    /// refused with the config).
    pub(super) fn new(rules: &[RetainRule]) -> Retained {
        Retained {
            rules: rules
                .iter()
                .filter_map(|r| Pattern::parse(&r.pattern).ok().map(|p| (p, r.last)))
                .collect(),
            kept: Mutex::default(),
        }
    }

    /// Keeps a message published on `topic` if it asks to be retained
    /// (it becomes the topic's one kept message; one with an empty body
    /// deletes it) or a rule covers the topic. A retained message gets a
    /// journal record if `record` gives it an id (it is persistent).
    pub(super) fn keep(
        &self,
        topic: &str,
        block: &Bytes,
        record: impl FnOnce() -> Option<u64>,
    ) -> Change {
        if herald_protocol::message::asks_retain(block) {
            let mut kept = lock(&self.kept);
            let ended = kept.records.remove(topic);
            if is_empty(block) {
                kept.messages.remove(topic);
                return Change { new: None, ended };
            }
            kept.messages
                .insert(topic.to_owned(), VecDeque::from([block.clone()]));
            let new = record();
            if let Some(id) = new {
                kept.records.insert(topic.to_owned(), id);
            }
            return Change { new, ended };
        }
        let Some(last) = self
            .rules
            .iter()
            .filter(|(p, _)| p.matches(topic))
            .map(|(_, n)| *n)
            .max()
        else {
            return Change::default();
        };
        let mut kept = lock(&self.kept);
        // The rule's messages take over the topic: a retained one that was
        // journaled is not brought back by a restart either.
        let ended = kept.records.remove(topic);
        let messages = kept.messages.entry(topic.to_owned()).or_default();
        messages.push_back(block.clone());
        while messages.len() > last {
            messages.pop_front();
        }
        Change { new: None, ended }
    }

    /// Takes back a retained message kept in journal record `id` before a
    /// restart; returns the record of one it replaces (a crash between
    /// writing a new one and ending the old leaves both), to end.
    pub(super) fn restore(&self, topic: &str, block: Bytes, id: u64) -> Option<u64> {
        let mut kept = lock(&self.kept);
        kept.messages
            .insert(topic.to_owned(), VecDeque::from([block]));
        kept.records.insert(topic.to_owned(), id)
    }

    /// The kept messages of every topic `pattern` matches, topics in name
    /// order, oldest first within a topic.
    pub(super) fn kept(&self, pattern: &Pattern) -> Vec<Bytes> {
        let kept = lock(&self.kept);
        let retained = &kept.messages;
        let mut topics: Vec<&String> = retained.keys().filter(|t| pattern.matches(t)).collect();
        topics.sort();
        topics
            .into_iter()
            .flat_map(|t| retained[t].iter().cloned())
            .collect()
    }
}

/// Of kept messages, those unexpired that `selector` selects, marked as
/// coming from the store, as a new subscriber gets them.
pub(super) fn offered(
    kept: Vec<Bytes>,
    selector: Option<&Selector>,
    large: Option<&Arc<LargeStore>>,
) -> Vec<Bytes> {
    let now = queue::now_ms();
    kept.into_iter()
        .filter(|b| {
            let expiration =
                herald_protocol::message::priority_and_expiration(b).map_or(0, |(_, e)| e);
            (expiration == 0 || expiration > now) && queue::selects(selector, b)
        })
        .map(|b| keep(large, herald_protocol::message::mark_kept(&b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::{Destination, Message};

    fn rule(pattern: &str, last: usize) -> RetainRule {
        RetainRule {
            pattern: pattern.into(),
            last,
        }
    }

    fn block(topic: &str, body: &str, retain: bool) -> Bytes {
        let mut m = Message::text(body);
        m.set_destination(Some(Destination::topic(topic)));
        m.retain = retain;
        let mut b = bytes::BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    fn bodies(kept: Vec<Bytes>) -> Vec<String> {
        kept.iter()
            .map(|b| {
                let m = Message::decode(b, 1).unwrap();
                assert!(m.kept, "marked as coming from the store");
                m.body_text().unwrap_or_default().to_owned()
            })
            .collect()
    }

    #[test]
    fn covered_topics_keep_their_last_messages_and_a_pattern_gets_them_in_topic_order() {
        let retained = Retained::new(&[rule("a.*", 2), rule("a.b", 1)]);
        for (topic, body) in [("a.z", "z1"), ("a.b", "b1"), ("a.b", "b2"), ("a.b", "b3")] {
            retained.keep(topic, &block(topic, body, false), || None);
        }
        retained.keep("other", &block("other", "not kept", false), || None);
        let all = Pattern::parse("#").unwrap();
        // The larger of the covering rules' counts applies to a.b.
        assert_eq!(
            bodies(offered(retained.kept(&all), None, None)),
            ["b2", "b3", "z1"]
        );
        let one = Pattern::parse("a.z").unwrap();
        assert_eq!(bodies(offered(retained.kept(&one), None, None)), ["z1"]);
        assert!(offered(Retained::new(&[]).kept(&all), None, None).is_empty());
    }

    #[test]
    fn a_message_that_asks_is_its_topics_one_retained_message_and_an_empty_one_deletes_it() {
        let retained = Retained::new(&[]);
        let all = Pattern::parse("#").unwrap();
        retained.keep("t", &block("t", "one", true), || None);
        retained.keep("t", &block("t", "live only", false), || None);
        retained.keep("t", &block("t", "two", true), || None);
        retained.keep("u", &block("u", "three", true), || None);
        assert_eq!(
            bodies(offered(retained.kept(&all), None, None)),
            ["two", "three"]
        );
        retained.keep("t", &block("t", "", true), || None);
        assert_eq!(bodies(offered(retained.kept(&all), None, None)), ["three"]);
    }

    #[test]
    fn a_persistent_retained_message_has_one_live_record_per_topic() {
        let retained = Retained::new(&[]);
        let mut ids = 0..;
        let mut next = || ids.next();
        let one = retained.keep("t", &block("t", "one", true), &mut next);
        assert_eq!(
            one,
            Change {
                new: Some(0),
                ended: None
            }
        );
        let two = retained.keep("t", &block("t", "two", true), &mut next);
        assert_eq!(
            two,
            Change {
                new: Some(1),
                ended: Some(0)
            }
        );
        // A live message asks for nothing; a non-persistent one has no record.
        assert_eq!(
            retained.keep("t", &block("t", "live", false), &mut next),
            Change::default()
        );
        let plain = retained.keep("t", &block("t", "plain", true), || None);
        assert_eq!(
            plain,
            Change {
                new: None,
                ended: Some(1)
            }
        );
        let gone = retained.keep("u", &block("u", "", true), &mut next);
        assert_eq!(gone, Change::default());

        // After a restart: both of a topic's records, if a crash left
        // both; the later one stays.
        let again = Retained::new(&[]);
        assert_eq!(again.restore("t", block("t", "old", true), 4), None);
        assert_eq!(again.restore("t", block("t", "new", true), 5), Some(4));
        let all = Pattern::parse("#").unwrap();
        assert_eq!(bodies(offered(again.kept(&all), None, None)), ["new"]);
        let deleted = again.keep("t", &block("t", "", true), || None);
        assert_eq!(
            deleted,
            Change {
                new: None,
                ended: Some(5)
            }
        );
    }
}
