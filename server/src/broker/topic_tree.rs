//! The topic tree: many subscription patterns matched against one topic.
//!
//! A trie over words. Each node has literal children, at most one `*` child
//! and one `#` child, and the subscribers whose pattern ends there. Matching
//! follows the literal child for the next word, the `*` child, and from a
//! `#` child every possible number of skipped words; so the work grows with
//! the patterns that could match, not with the number of subscriptions.
//! One pattern can reach the same node by several paths (`#.b.#` on
//! `a.b.b`), so the nodes reached are de-duplicated before their
//! subscribers are visited: each subscription sees a message at most once.
//! A `#` node reached again at a later word has already tried every word
//! from there on, so it is not walked again: each `#` node is walked at
//! most once per word of the topic, which keeps patterns like
//! `#.*.#.*.#.z` polynomial instead of exponential.
//!
//! A subscription whose selector requires a property to equal a constant
//! (`device = 7`, alone or ANDed with more) is kept at its node under that
//! property and value, so a message meets only the ones waiting for its
//! own value: ten thousand such subscriptions on one topic cost a publish
//! a hash lookup, not ten thousand evaluations. Their selectors are still
//! evaluated in full on the ones found.
//!
//! A routing thread keeps the matches of the topics it published to
//! lately in a [`MatchCache`], good until the tree next changes: a topic
//! published to again costs a hash lookup instead of a walk.

use std::sync::Arc;

use crate::collections::FastMap;

use herald_protocol::destination::{Pattern, PatternWord};

use herald_protocol::selector::{IndexKey, Selector};

use super::address::Subscriber;
use super::backlog::Backlog;
use super::queue::SharedQueue;

#[derive(Debug, Default)]
struct Node {
    literal: FastMap<Box<str>, Node>,
    star: Option<Box<Node>>,
    hash: Option<Box<Node>>,
    subscribers: Vec<TopicEntry>,
    /// Boxed: most nodes have none, and a node's size is paid per
    /// subscription pattern.
    selected: Option<Box<Selected>>,
}

/// Subscribers whose selector requires a property to equal a constant
/// (`Selector::required_equality`), by that property and constant: a
/// message meets only those under its own value, however many wait for
/// others.
#[derive(Debug, Default)]
struct Selected {
    by_value: FastMap<Box<str>, FastMap<IndexKey, Vec<TopicEntry>>>,
    /// Where each entry is, by its key, for removal.
    at: FastMap<u64, (Box<str>, IndexKey)>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.literal.is_empty()
            && self.star.is_none()
            && self.hash.is_none()
            && self.subscribers.is_empty()
            && self.selected.is_none()
    }

    fn add(&mut self, entry: TopicEntry) {
        let required = entry.selector.as_ref().and_then(|s| {
            s.required_equality()
                .map(|(name, key)| (Box::<str>::from(name), key))
        });
        let entries = match required {
            None => &mut self.subscribers,
            Some((name, key)) => {
                let selected = self.selected.get_or_insert_with(Box::default);
                selected.at.insert(entry.key, (name.clone(), key.clone()));
                selected
                    .by_value
                    .entry(name)
                    .or_default()
                    .entry(key)
                    .or_default()
            }
        };
        // Most patterns have one subscriber: room for one, not the four a
        // first push makes (a node is paid per subscription pattern).
        if entries.capacity() == 0 {
            entries.reserve_exact(1);
        }
        entries.push(entry);
    }

    fn take(&mut self, key: u64) -> Option<TopicEntry> {
        if let Some(at) = self.subscribers.iter().position(|s| s.key == key) {
            return Some(self.subscribers.remove(at));
        }
        let selected = self.selected.as_mut()?;
        let (name, value) = selected.at.remove(&key)?;
        let by_value = selected.by_value.get_mut(&name)?;
        let entries = by_value.get_mut(&value)?;
        let at = entries.iter().position(|s| s.key == key)?;
        let entry = entries.remove(at);
        if entries.is_empty() {
            by_value.remove(&value);
            if by_value.is_empty() {
                selected.by_value.remove(&name);
            }
        }
        if selected.at.is_empty() {
            self.selected = None;
        }
        Some(entry)
    }

    /// Visits the subscribers that may take a message whose properties
    /// give `key_of` (for a property's name, its index key).
    fn visit(
        &self,
        key_of: &mut impl FnMut(&str) -> Option<IndexKey>,
        f: &mut impl FnMut(&TopicEntry),
    ) {
        self.subscribers.iter().for_each(&mut *f);
        let Some(selected) = &self.selected else {
            return;
        };
        for (name, by_value) in &selected.by_value {
            if let Some(entries) = key_of(name).and_then(|k| by_value.get(&k)) {
                entries.iter().for_each(&mut *f);
            }
        }
    }

    /// Pushes every node that `rest` (the words still to match, `None`
    /// when none are left) ends on.
    fn collect<'a>(&'a self, rest: Option<&str>, out: &mut Matches<'a>) {
        if let Some(hash) = &self.hash {
            // `#` swallows zero words, then one, two, ... all of them;
            // from where an earlier visit started on, they are done.
            let done = out.walked_from(hash, rest);
            let mut tail = rest;
            while out.offset(tail) < done {
                hash.collect(tail, out);
                match tail {
                    None => break,
                    Some(t) => tail = t.split_once('.').map(|(_, t)| t),
                }
            }
        }
        match rest {
            None => {
                if !self.subscribers.is_empty() || self.selected.is_some() {
                    out.push(self);
                }
            }
            Some(words) => {
                let (word, tail) = match words.split_once('.') {
                    Some((w, t)) => (w, Some(t)),
                    None => (words, None),
                };
                if let Some(child) = self.literal.get(word) {
                    child.collect(tail, out);
                }
                if let Some(star) = &self.star {
                    star.collect(tail, out);
                }
            }
        }
    }
}

/// The nodes a topic ends on: the first inline, so that the usual single
/// match allocates nothing.
struct Matches<'a> {
    first: Option<&'a Node>,
    more: Vec<&'a Node>,
    /// The topic's length: a rest of the topic is known by its offset.
    topic_len: usize,
    /// The earliest offset each `#` node walked (by address) was walked
    /// from.
    hashes: FastMap<usize, usize>,
}

impl<'a> Matches<'a> {
    fn new(topic: &str) -> Matches<'a> {
        Matches {
            first: None,
            more: Vec::new(),
            topic_len: topic.len(),
            hashes: FastMap::default(),
        }
    }

    fn push(&mut self, node: &'a Node) {
        match self.first {
            None => self.first = Some(node),
            Some(_) => self.more.push(node),
        }
    }

    /// Where `rest` starts in the topic; past its end when nothing is left.
    fn offset(&self, rest: Option<&str>) -> usize {
        rest.map_or(self.topic_len + 1, |r| self.topic_len - r.len())
    }

    /// Records that `#` node `hash` is walked from `rest` on, and returns
    /// the offset from which it has been walked already (past the end if
    /// never): the walk stops there.
    fn walked_from(&mut self, hash: &'a Node, rest: Option<&str>) -> usize {
        let start = self.offset(rest);
        let from = self
            .hashes
            .entry(hash as *const Node as usize)
            .or_insert(usize::MAX);
        std::mem::replace(from, start.min(*from))
    }
}

/// Subscription patterns and their subscribers.
#[derive(Debug, Default)]
pub struct TopicTree {
    root: Node,
    len: usize,
    /// Changes with every insertion and removal: matches cached before
    /// are stale.
    generation: u64,
}

impl TopicTree {
    /// Adds an entry under a pattern.
    pub fn insert(&mut self, pattern: &Pattern, subscriber: TopicEntry) {
        let mut node = &mut self.root;
        for word in pattern.words() {
            node = match word {
                PatternWord::Literal(w) => node.literal.entry(w.as_str().into()).or_default(),
                PatternWord::Star => node.star.get_or_insert_with(Box::default),
                PatternWord::Hash => node.hash.get_or_insert_with(Box::default),
            };
        }
        node.add(subscriber);
        self.len += 1;
        self.generation += 1;
    }

    /// Removes the entry with `key` from under a pattern and prunes the
    /// branch it leaves empty; returns it, or `None` if it was not there.
    pub fn remove(&mut self, pattern: &Pattern, key: u64) -> Option<TopicEntry> {
        let removed = remove_at(&mut self.root, pattern.words(), key);
        if removed.is_some() {
            self.len -= 1;
            self.generation += 1;
        }
        removed
    }

    /// Calls `f` for every entry whose pattern matches `topic`, once each,
    /// but of those indexed by a property's value (see `Node::selected`),
    /// only those under the value `key_of` gives for it: the others'
    /// selectors could not select the message.
    pub fn for_each_match(
        &self,
        topic: &str,
        mut key_of: impl FnMut(&str) -> Option<IndexKey>,
        mut f: impl FnMut(&TopicEntry),
    ) {
        self.for_each_node(topic, |node| node.visit(&mut key_of, &mut f));
    }

    /// Calls `f` for every node that a pattern matching `topic` ends on,
    /// once each.
    fn for_each_node<'a>(&'a self, topic: &str, mut f: impl FnMut(&'a Node)) {
        let mut matches = Matches::new(topic);
        self.root.collect(Some(topic), &mut matches);
        let Some(first) = matches.first else {
            return;
        };
        if matches.more.is_empty() {
            return f(first);
        }
        // Several patterns (wildcards) can end on one node: once each.
        let mut nodes = matches.more;
        nodes.push(first);
        nodes.sort_unstable_by_key(|n| *n as *const Node as usize);
        nodes.dedup_by(|a, b| std::ptr::eq(*a, *b));
        nodes.into_iter().for_each(f);
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Topics a cache keeps at most, and matches in all: past either it
/// starts again (a publisher to ever new topics gains nothing from it).
const CACHED_TOPICS: usize = 4096;
const CACHED_MATCHES: usize = 16_384;
/// A topic with more matches than this is walked every time: copying its
/// entries would cost about what the walk does, and delivering to them
/// far more.
const MATCHES_PER_TOPIC: usize = 64;

/// The matches of recently published topics, for one routing thread.
#[derive(Default)]
pub struct MatchCache {
    /// The tree (its address) and its generation the matches are of.
    of: (usize, u64),
    /// Each topic's matches, `None` for one with too many to keep.
    topics: FastMap<Box<str>, Option<Arc<[TopicEntry]>>>,
    matches: usize,
    /// The topic looked up last, and its matches: a stream of publishes
    /// to one topic finds them without hashing its name, and borrows them
    /// without counting a reference (two atomic operations a publish).
    last: (String, Option<Arc<[TopicEntry]>>),
}

impl MatchCache {
    /// The entries of `tree` whose patterns match `topic`, as
    /// [`TopicTree::for_each_match`] visits them; `None` if there are too
    /// many to keep, or some are indexed by a property's value (which of
    /// those match depends on the message), and the caller walks the
    /// tree.
    pub fn matches(&mut self, tree: &TopicTree, topic: &str) -> Option<&[TopicEntry]> {
        let of = (tree as *const TopicTree as usize, tree.generation);
        if self.of != of {
            self.clear();
            self.of = of;
        }
        if self.last.0 != topic {
            let found = match self.topics.get(topic) {
                Some(found) => found.clone(),
                None => self.look_up(tree, topic),
            };
            self.last.0.clear();
            self.last.0.push_str(topic);
            self.last.1 = found;
        }
        self.last.1.as_deref()
    }

    /// Walks `tree` for the matches of `topic` and keeps them.
    fn look_up(&mut self, tree: &TopicTree, topic: &str) -> Option<Arc<[TopicEntry]>> {
        let (mut entries, mut too_many) = (Vec::new(), false);
        tree.for_each_node(topic, |node| {
            // Which of the indexed ones match depends on the message.
            too_many |= node.selected.is_some();
            for e in &node.subscribers {
                if entries.len() < MATCHES_PER_TOPIC {
                    entries.push(e.clone());
                } else {
                    too_many = true;
                }
            }
        });
        let found = (!too_many).then(|| Arc::<[TopicEntry]>::from(entries));
        let kept = found.as_ref().map_or(0, |f| f.len());
        if self.topics.len() >= CACHED_TOPICS || self.matches + kept > CACHED_MATCHES {
            self.clear();
        }
        self.matches += kept;
        self.topics.insert(topic.into(), found.clone());
        found
    }

    fn clear(&mut self) {
        self.topics.clear();
        self.matches = 0;
        self.last.0.clear();
        self.last.1 = None;
    }
}

fn remove_at(node: &mut Node, words: &[PatternWord], key: u64) -> Option<TopicEntry> {
    let Some((word, rest)) = words.split_first() else {
        return node.take(key);
    };
    match word {
        PatternWord::Literal(w) => {
            let child = node.literal.get_mut(w.as_str())?;
            let removed = remove_at(child, rest, key);
            if child.is_empty() {
                node.literal.remove(w.as_str());
            }
            removed
        }
        PatternWord::Star | PatternWord::Hash => {
            let slot = if *word == PatternWord::Star {
                &mut node.star
            } else {
                &mut node.hash
            };
            let child = slot.as_mut()?;
            let removed = remove_at(child, rest, key);
            if child.is_empty() {
                *slot = None;
            }
            removed
        }
    }
}

/// Where a topic entry sends what matches.
#[derive(Clone)]
pub enum Target {
    /// Append to this shared queue's stream in Redis (a cluster durable
    /// subscription's), if the message was published on this node.
    Stream(String),
    /// Straight to a subscriber; nothing kept.
    Direct(Subscriber),
    /// Into a subscription queue.
    Queue(SharedQueue),
}

/// One subscription in the topic tree.
#[derive(Clone)]
pub struct TopicEntry {
    /// Identifies the entry for removal.
    pub key: u64,
    /// Where matching messages go.
    pub target: Target,
    /// Only messages it selects go there.
    pub selector: Option<Arc<Selector>>,
    /// The connection of a subscription that lives and dies with it;
    /// `None` for durable and shared ones. Only a temporary topic's owner
    /// receives its messages.
    pub owner: Option<u64>,
    /// The backlog signal of a direct subscription's connection; `None`
    /// where deliveries may be dropped (best effort) or are queued.
    pub backlog: Option<Arc<Backlog>>,
    /// The messages its owner publishes do not go there.
    pub no_local: bool,
    /// The DDS reader policies applied to its deliveries (a plain
    /// subscription's).
    pub reader: Option<Arc<super::reader::Reader>>,
}

impl std::fmt::Debug for TopicEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicEntry")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{ConnectionRef, Subscriber, Target};

    fn sub(id: u32) -> TopicEntry {
        TopicEntry {
            key: id.into(),
            target: Target::Direct(Subscriber {
                conn: ConnectionRef {
                    worker: 0,
                    slot: 0,
                    serial: 1,
                },
                subscription_id: id,
            }),
            selector: None,
            owner: Some(1),
            backlog: None,
            no_local: false,
            reader: None,
        }
    }

    fn tree(patterns: &[&str]) -> TopicTree {
        let mut t = TopicTree::default();
        for (i, p) in patterns.iter().enumerate() {
            t.insert(&Pattern::parse(p).unwrap(), sub(i as u32));
        }
        t
    }

    fn matched(t: &TopicTree, topic: &str) -> Vec<u32> {
        let mut v = Vec::new();
        t.for_each_match(topic, |_| None, |s| v.push(s.key as u32));
        v.sort();
        v
    }

    fn cached(cache: &mut MatchCache, t: &TopicTree, topic: &str) -> Option<Vec<u32>> {
        let mut v: Vec<u32> = cache
            .matches(t, topic)?
            .iter()
            .map(|e| e.key as u32)
            .collect();
        v.sort();
        Some(v)
    }

    #[test]
    fn the_match_cache_agrees_with_the_tree_and_follows_its_changes() {
        let mut t = tree(&["a.#", "a.*", "#.b", "a.b"]);
        let mut cache = MatchCache::default();
        for _ in 0..2 {
            // A miss, then a hit: both as the walk.
            assert_eq!(cached(&mut cache, &t, "a.b"), Some(matched(&t, "a.b")));
            assert_eq!(cached(&mut cache, &t, "x.b"), Some(vec![2]));
            assert_eq!(cached(&mut cache, &t, "nothing"), Some(vec![]));
        }
        let pattern = Pattern::parse("x.*").unwrap();
        t.insert(&pattern, sub(9));
        assert_eq!(cached(&mut cache, &t, "x.b"), Some(vec![2, 9]));
        assert!(t.remove(&pattern, 9).is_some());
        assert_eq!(cached(&mut cache, &t, "x.b"), Some(vec![2]));
        // Removing what is not there changes nothing.
        assert!(t.remove(&pattern, 9).is_none());
        assert_eq!(cached(&mut cache, &t, "x.b"), Some(vec![2]));

        // Another tree at another address is another generation's.
        let other = tree(&["x.b"]);
        assert_eq!(cached(&mut cache, &other, "x.b"), Some(vec![0]));
    }

    #[test]
    fn the_match_cache_keeps_neither_huge_fan_outs_nor_unbounded_topics() {
        let many: Vec<String> = (0..=MATCHES_PER_TOPIC).map(|_| "wide".to_owned()).collect();
        let t = tree(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let mut cache = MatchCache::default();
        assert_eq!(cached(&mut cache, &t, "wide"), None, "walked instead");
        assert_eq!(matched(&t, "wide").len(), MATCHES_PER_TOPIC + 1);
        for i in 0..CACHED_TOPICS * 2 {
            assert_eq!(cached(&mut cache, &t, &format!("t{i}")), Some(vec![]));
            assert!(cache.topics.len() <= CACHED_TOPICS);
        }
        assert!(cache.matches <= CACHED_MATCHES);
    }

    #[test]
    fn agrees_with_the_reference_matcher() {
        let patterns = [
            "sales.europe.#",
            "sales.*.smartphone",
            "sales.europe.smartphone",
            "#",
            "#.smartphone",
            "sales.#.smartphone",
            "*",
            "#.b.#",
            "a.#",
            "sales",
        ];
        let t = tree(&patterns);
        let topics = [
            "sales",
            "sales.europe",
            "sales.europe.smartphone",
            "sales.asia.smartphone",
            "sales.asia.laptop",
            "smartphone",
            "a.b.b",
            "a",
            "b",
            "x.y.z.smartphone",
        ];
        for topic in topics {
            let expected: Vec<u32> = patterns
                .iter()
                .enumerate()
                .filter(|(_, p)| Pattern::parse(p).unwrap().matches(topic))
                .map(|(i, _)| i as u32)
                .collect();
            assert_eq!(matched(&t, topic), expected, "{topic}");
        }
    }

    #[test]
    fn repeated_wildcards_cost_polynomial_time() {
        // Walked naively, each `#` multiplies the paths by the words left:
        // these took longer than anyone would wait.
        let nasty = format!("{}z", "#.*.".repeat(30));
        let t = tree(&[
            &nasty,
            "#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.z",
            "a.#.#.#.q",
        ]);
        let words = vec!["a"; 60].join(".");
        assert_eq!(matched(&t, &words), Vec::<u32>::new());
        assert_eq!(matched(&t, &format!("{words}.z")), vec![0, 1]);
        assert_eq!(matched(&t, &format!("{words}.q")), vec![2]);
    }

    #[test]
    fn removal_prunes_and_counts() {
        let mut t = tree(&["a.b.c", "a.*.c", "a.#"]);
        assert_eq!(t.len(), 3);
        assert!(t.remove(&Pattern::parse("a.*.c").unwrap(), 1).is_some());
        assert!(t.remove(&Pattern::parse("a.*.c").unwrap(), 1).is_none());
        assert!(t.remove(&Pattern::parse("x.y").unwrap(), 0).is_none());
        assert_eq!(matched(&t, "a.b.c"), vec![0, 2]);
        assert!(t.remove(&Pattern::parse("a.b.c").unwrap(), 0).is_some());
        assert!(t.remove(&Pattern::parse("a.#").unwrap(), 2).is_some());
        assert!(t.is_empty());
        assert!(t.root.is_empty(), "every branch pruned");
    }

    fn selecting(id: u32, selector: &str) -> TopicEntry {
        TopicEntry {
            selector: Some(Arc::new(Selector::parse(selector).unwrap())),
            ..sub(id)
        }
    }

    #[test]
    fn selectors_that_require_a_value_are_met_only_by_that_value() {
        let mut t = TopicTree::default();
        let p = Pattern::parse("a.*").unwrap();
        t.insert(&p, sub(0));
        t.insert(&p, selecting(1, "n = 1"));
        t.insert(&p, selecting(2, "n = 2 AND m > 0"));
        t.insert(&p, selecting(3, "n = 2"));
        t.insert(&p, selecting(4, "n > 1"));
        t.insert(&p, selecting(5, "color = 'red'"));
        t.insert(&Pattern::parse("#").unwrap(), selecting(6, "n = 1"));
        let with = |t: &TopicTree, n: Option<i64>, color: Option<&str>| {
            let mut v = Vec::new();
            let key_of = |name: &str| match name {
                "n" => n.map(IndexKey::Long),
                "color" => color.map(|c| IndexKey::Str(c.into())),
                _ => None,
            };
            t.for_each_match("a.x", key_of, |s| v.push(s.key as u32));
            v.sort();
            v
        };
        // The plain subscriber and the unindexable selector always; the
        // indexed ones under the message's own values only.
        assert_eq!(with(&t, None, None), vec![0, 4]);
        assert_eq!(with(&t, Some(1), None), vec![0, 1, 4, 6]);
        assert_eq!(with(&t, Some(2), Some("red")), vec![0, 2, 3, 4, 5]);
        let mut cache = MatchCache::default();
        assert_eq!(cached(&mut cache, &t, "a.x"), None, "walked instead");
        assert_eq!(cached(&mut cache, &t, "b"), None, "# holds one too");

        assert_eq!(t.remove(&p, 3).map(|e| e.key), Some(3));
        assert!(t.remove(&p, 3).is_none());
        assert_eq!(with(&t, Some(2), None), vec![0, 2, 4]);
        for key in [0, 1, 2, 4, 5] {
            assert!(t.remove(&p, key).is_some(), "{key}");
        }
        assert!(t.remove(&Pattern::parse("#").unwrap(), 6).is_some());
        assert!(t.is_empty());
        assert!(t.root.is_empty(), "every branch pruned");
    }

    #[test]
    fn same_pattern_twice_delivers_to_both() {
        let mut t = TopicTree::default();
        let p = Pattern::parse("a.*").unwrap();
        t.insert(&p, sub(1));
        t.insert(&p, sub(2));
        assert_eq!(matched(&t, "a.x"), vec![1, 2]);
    }
}
