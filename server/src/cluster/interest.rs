//! Interest: which topics a node wants from the others. Each node keeps
//! a Redis set of the globs its subscriptions need (renewed, so that a dead
//! node's interest fades) and announces changes; a node sends a topic's
//! message to each other node one of whose globs covers the topic, on
//! that node's inbox channel, and to nobody if none does.
//!
//! A node hears its inbox alone (`SUBSCRIBE`, or on a Redis Cluster
//! `SSUBSCRIBE`: sharded pub/sub, which has no patterns), so a message
//! crosses Redis once per node that wants it, and on a Redis Cluster only
//! the shard of that node's inbox carries it: the inboxes of many nodes
//! spread over the shards, as the queues do.

use std::sync::Arc;
use std::time::Duration;

use herald_protocol::destination::{Pattern, PatternWord};

/// The prefix of the globs that describe a node's interest, before the
/// topic: globs are matched against `herald:t:<topic>`.
pub(super) const CHANNEL: &str = "herald:t:";

/// A node's set expires unless renewed, so a dead node's interest fades.
pub(super) const INTEREST_TTL_S: u64 = 60;

/// How often a node renews its set and reads the others' again.
pub(super) const INTEREST_REFRESH: Duration = Duration::from_secs(20);

/// Topics whose answer (which other nodes want them?) is remembered.
pub(super) const WANTED_CACHE: usize = 65_536;

/// The inboxes a topic's message goes to (none, most often, for a topic
/// no other node wants).
pub(super) type Inboxes = Arc<[Arc<str>]>;

/// The globs other nodes subscribe to, and which topics they cover.
#[derive(Default)]
pub(super) struct Others {
    /// Each other node's inbox and globs.
    pub(super) nodes: Vec<(Arc<str>, Vec<String>)>,
    /// Topic → the inboxes of the nodes a glob of whose covers it.
    pub(super) wanted: crate::collections::FastMap<String, Inboxes>,
}

impl Others {
    /// The inboxes of the nodes that want `topic`, worked out.
    pub(super) fn wanting(&self, topic: &str) -> Inboxes {
        let channel = format!("{CHANNEL}{topic}");
        self.nodes
            .iter()
            .filter(|(_, globs)| {
                globs
                    .iter()
                    .any(|g| glob_matches(g.as_bytes(), channel.as_bytes()))
            })
            .map(|(inbox, _)| inbox.clone())
            .collect()
    }
}

/// The Redis glob for a topic pattern's channel: a superset of the
/// topics it matches (Redis's `*` also spans dots), which the topic tree
/// then matches exactly. Glob characters in literal words are escaped.
pub fn redis_glob(pattern: &Pattern) -> String {
    let mut glob = String::from(CHANNEL);
    for (i, word) in pattern.words().iter().enumerate() {
        match word {
            // `#` matches any number of words, none included: everything
            // from here on, without the dot before it.
            PatternWord::Hash => {
                if i > 0 {
                    glob.pop();
                }
                glob.push('*');
                return glob;
            }
            PatternWord::Star => glob.push('*'),
            PatternWord::Literal(w) => {
                for c in w.chars() {
                    if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                        glob.push('\\');
                    }
                    glob.push(c);
                }
            }
        }
        glob.push('.');
    }
    glob.pop();
    glob
}

/// Whether `text` matches a Redis glob made by [`redis_glob`]: `*`, `?`
/// and `\`-escaped characters (no `[` sets, which it never makes).
pub(super) fn glob_matches(glob: &[u8], text: &[u8]) -> bool {
    // Where the last `*` was, and the text position it has swallowed to.
    let (mut g, mut t, mut star) = (0, 0, None);
    while t < text.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, t));
                g += 1;
                continue;
            }
            Some(b'?') => {
                g += 1;
                t += 1;
                continue;
            }
            Some(b'\\') if glob.get(g + 1) == Some(&text[t]) => {
                g += 2;
                t += 1;
                continue;
            }
            Some(&c) if c != b'\\' && c == text[t] => {
                g += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sg, st)) => {
                g = sg + 1;
                t = st + 1;
                star = Some((sg, st + 1));
            }
            None => return false,
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> String {
        redis_glob(&Pattern::parse(p).unwrap())
    }

    #[test]
    fn globs_cover_what_patterns_match() {
        assert_eq!(glob("sales.eu"), "herald:t:sales.eu");
        assert_eq!(glob("sales.*.phones"), "herald:t:sales.*.phones");
        assert_eq!(glob("sales.#"), "herald:t:sales*");
        assert_eq!(glob("#"), "herald:t:*");
        assert_eq!(glob("a.#.z"), "herald:t:a*");
    }

    #[test]
    fn globs_match_as_redis_matches_them() {
        let m = |g: &str, t: &str| glob_matches(g.as_bytes(), t.as_bytes());
        assert!(m("herald:t:a.b", "herald:t:a.b"));
        assert!(!m("herald:t:a.b", "herald:t:a.bc"));
        assert!(m("herald:t:a.*.c", "herald:t:a.x.y.c"));
        assert!(m("herald:t:a*", "herald:t:a"));
        assert!(m("herald:t:*", "herald:t:"));
        assert!(m("herald:t:a?c", "herald:t:abc"));
        assert!(!m("herald:t:a*c", "herald:t:abd"));
        assert!(m("herald:t:a\\*", "herald:t:a*"));
        assert!(!m("herald:t:a\\*", "herald:t:ab"));
        // Every pattern's glob covers every topic the pattern matches.
        for (pattern, topic) in [
            ("a.#.z", "a.z"),
            ("a.#", "a"),
            ("*.b", "x.b"),
            ("#", "q.r.s"),
        ] {
            let glob = redis_glob(&Pattern::parse(pattern).unwrap());
            assert!(m(&glob, &format!("{CHANNEL}{topic}")), "{pattern} {topic}");
        }
    }
}
