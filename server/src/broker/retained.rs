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

    /// Keeps a message published on `topic` if a rule covers it.
    pub(super) fn keep(&self, topic: &str, block: &Bytes) {
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
        if self.rules.is_empty() {
            return Vec::new();
        }
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
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, last: usize) -> RetainRule {
        RetainRule {
            pattern: pattern.into(),
            last,
        }
    }

    #[test]
    fn covered_topics_keep_their_last_messages_and_a_pattern_gets_them_in_topic_order() {
        let retained = Retained::new(&[rule("a.*", 2), rule("a.b", 1)]);
        for (topic, body) in [("a.z", "z1"), ("a.b", "b1"), ("a.b", "b2"), ("a.b", "b3")] {
            retained.keep(topic, &Bytes::from(body));
        }
        retained.keep("other", &Bytes::from("not kept"));
        let all = Pattern::parse("#").unwrap();
        // The larger of the covering rules' counts applies to a.b.
        assert_eq!(retained.kept_for(&all, None), ["b2", "b3", "z1"]);
        let one = Pattern::parse("a.z").unwrap();
        assert_eq!(retained.kept_for(&one, None), ["z1"]);
        assert!(Retained::new(&[]).kept_for(&all, None).is_empty());
    }
}
