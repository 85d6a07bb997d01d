//! Retained messages: topics that a `[[topics.retain]]` rule covers keep
//! their last messages, and a new subscriber gets them first.
//!
//! Called with the broker's topic tree locked (read by publishers, written
//! by subscribers), so that a new subscriber gets each message once: kept,
//! or live.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use herald_protocol::selector::Selector;
use herald_protocol::Pattern;

use super::queue;
use crate::config::RetainRule;
use crate::sync::lock;

/// Whether a message block's body is empty (of any kind).
fn is_empty(block: &[u8]) -> bool {
    use herald_protocol::message::{BodyRef, MessageRef};
    match MessageRef::read(block).map(|r| r.body) {
        Ok(BodyRef::Empty) => true,
        Ok(BodyRef::Bytes(range)) => range.is_empty(),
        Ok(BodyRef::Text(text)) => text.is_empty(),
        Ok(BodyRef::Map(_)) | Err(_) => false,
    }
}

/// The rules and what they keep.
pub(super) struct Retained {
    /// Topic patterns whose topics keep their last messages, and how many.
    rules: Vec<(Pattern, usize)>,
    /// The kept messages, by topic name, oldest first.
    kept: Mutex<HashMap<String, VecDeque<Bytes>>>,
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
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps a message published on `topic` if it asks to be retained
    /// (it becomes the topic's one kept message; one with an empty body
    /// deletes it) or a rule covers the topic.
    pub(super) fn keep(&self, topic: &str, block: &Bytes) {
        if herald_protocol::message::asks_retain(block) {
            let mut retained = lock(&self.kept);
            if is_empty(block) {
                retained.remove(topic);
            } else {
                retained.insert(topic.to_owned(), VecDeque::from([block.clone()]));
            }
            return;
        }
        let Some(last) = self
            .rules
            .iter()
            .filter(|(p, _)| p.matches(topic))
            .map(|(_, n)| *n)
            .max()
        else {
            return;
        };
        let mut retained = lock(&self.kept);
        let kept = retained.entry(topic.to_owned()).or_default();
        kept.push_back(block.clone());
        while kept.len() > last {
            kept.pop_front();
        }
    }

    /// The kept messages of every topic `pattern` matches that `selector`
    /// selects, topics in name order, oldest first within a topic,
    /// unexpired.
    pub(super) fn kept_for(&self, pattern: &Pattern, selector: Option<&Selector>) -> Vec<Bytes> {
        let now = queue::now_ms();
        let retained = lock(&self.kept);
        let mut topics: Vec<&String> = retained.keys().filter(|t| pattern.matches(t)).collect();
        topics.sort();
        topics
            .into_iter()
            .flat_map(|t| retained[t].iter())
            .filter(|b| {
                let expiration =
                    herald_protocol::message::priority_and_expiration(b).map_or(0, |(_, e)| e);
                (expiration == 0 || expiration > now) && queue::selects(selector, b)
            })
            .map(|b| herald_protocol::message::mark_kept(b))
            .collect()
    }
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
        m.destination = Some(Destination::topic(topic));
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
            retained.keep(topic, &block(topic, body, false));
        }
        retained.keep("other", &block("other", "not kept", false));
        let all = Pattern::parse("#").unwrap();
        // The larger of the covering rules' counts applies to a.b.
        assert_eq!(bodies(retained.kept_for(&all, None)), ["b2", "b3", "z1"]);
        let one = Pattern::parse("a.z").unwrap();
        assert_eq!(bodies(retained.kept_for(&one, None)), ["z1"]);
        assert!(Retained::new(&[]).kept_for(&all, None).is_empty());
    }

    #[test]
    fn a_message_that_asks_is_its_topics_one_retained_message_and_an_empty_one_deletes_it() {
        let retained = Retained::new(&[]);
        let all = Pattern::parse("#").unwrap();
        retained.keep("t", &block("t", "one", true));
        retained.keep("t", &block("t", "live only", false));
        retained.keep("t", &block("t", "two", true));
        retained.keep("u", &block("u", "three", true));
        assert_eq!(bodies(retained.kept_for(&all, None)), ["two", "three"]);
        retained.keep("t", &block("t", "", true));
        assert_eq!(bodies(retained.kept_for(&all, None)), ["three"]);
    }
}
