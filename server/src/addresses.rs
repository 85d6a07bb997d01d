//! Settings per address (`[[addresses]]`), as Artemis's address-settings:
//! each entry names destinations with Herald's wildcards and sets some
//! keys; a destination takes every entry that matches it, the more
//! specific overriding the less, and `[queues]` for what none sets.
//!
//! Settings are resolved when a queue is made and again on reload, never
//! per message: a queue holds its [`AddressSettings`] behind an `Arc`.

use std::fmt;
use std::sync::Arc;

use herald_protocol::destination::{Pattern, PatternWord};
use herald_protocol::{Destination, DestinationKind};
use serde::{Deserialize, Serialize};

/// `[queues]`: limits and dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueuesConfig {
    /// Deliveries after which a message goes to the dead-letter queue.
    pub max_deliveries: u32,
    /// Messages one queue holds (waiting and unacknowledged).
    pub max_messages: usize,
    /// Bytes of messages all queues together hold before publishers are
    /// held or refused; 0 = no limit.
    pub max_memory_bytes: usize,
    /// The dead-letter queue of destination D is this prefix + D.
    pub dead_letter_prefix: String,
    /// Where expired messages go; empty = they are dropped.
    pub expiry_queue: String,
    /// Unacknowledged deliveries a consumer may hold when it asks for 0.
    pub default_prefetch: u32,
    /// What a send to a full queue does.
    pub full_policy: FullPolicy,
    /// How long a blocked send waits for room before it fails.
    pub block_timeout_ms: u32,
    /// A body larger than this is kept in a file of its own on disk, not
    /// in memory, however it was sent.
    pub large_message_threshold: usize,
}

/// What a send to a full queue does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FullPolicy {
    /// The producer waits: the server stops reading its connection until
    /// the queue has room (or `block_timeout_ms` passes).
    Block,
    /// The send is refused with an ERROR at once.
    Fail,
    /// The message is accepted and dropped, and counted.
    Drop,
    /// The message goes to the queue's page files on disk, in order, and
    /// comes back as consumers drain the queue.
    Page,
}

impl FullPolicy {
    /// As the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            FullPolicy::Block => "block",
            FullPolicy::Fail => "fail",
            FullPolicy::Drop => "drop",
            FullPolicy::Page => "page",
        }
    }
}

/// What a keyed topic keeps of each instance (DDS's HISTORY kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// The last `history_depth` samples.
    KeepLast,
    /// Every sample, up to `max_samples_per_instance`: one more is
    /// refused.
    KeepAll,
}

/// Whether a topic keeps samples for readers that come later, and where
/// (DDS's DURABILITY kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Nothing kept: a reader gets what is published while it reads.
    Volatile,
    /// Each live instance's history kept in memory, given to a reader
    /// that joins.
    TransientLocal,
    /// The same, kept in the journal too: it survives a restart.
    Persistent,
}

impl History {
    /// As the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            History::KeepLast => "keep_last",
            History::KeepAll => "keep_all",
        }
    }
}

impl Durability {
    /// As the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Volatile => "volatile",
            Durability::TransientLocal => "transient_local",
            Durability::Persistent => "persistent",
        }
    }
}

/// A topic's instances (DDS): how its messages are keyed, what it keeps
/// of each and how many it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSettings {
    /// The properties whose values name a message's instance; empty:
    /// the topic is one instance.
    pub key: Vec<String>,
    /// See [`History`].
    pub history: History,
    /// Samples kept per instance under [`History::KeepLast`].
    pub history_depth: usize,
    /// See [`Durability`].
    pub durability: Durability,
    /// Instances a topic holds at most, alive or not; a new one past it
    /// takes the place of one that is not alive, or is refused.
    pub max_instances: usize,
    /// Samples an instance keeps at most.
    pub max_samples_per_instance: usize,
}

impl InstanceSettings {
    /// Whether the topic keeps anything of its instances: it is keyed,
    /// or keeps samples for later readers.
    pub fn tracked(&self) -> bool {
        !self.key.is_empty() || self.durability != Durability::Volatile
    }

    /// How many samples an instance keeps.
    pub fn depth(&self) -> usize {
        match self.history {
            History::KeepLast => self.history_depth,
            History::KeepAll => self.max_samples_per_instance,
        }
    }
}

impl Default for InstanceSettings {
    fn default() -> InstanceSettings {
        InstanceSettings {
            key: Vec::new(),
            history: History::KeepLast,
            history_depth: 1,
            durability: Durability::Volatile,
            max_instances: 100_000,
            max_samples_per_instance: 1000,
        }
    }
}

impl Default for QueuesConfig {
    fn default() -> QueuesConfig {
        QueuesConfig {
            max_deliveries: 10,
            max_messages: 100_000,
            max_memory_bytes: 1 << 30,
            dead_letter_prefix: "DLQ.".into(),
            expiry_queue: "ExpiryQueue".into(),
            default_prefetch: 1000,
            full_policy: FullPolicy::Page,
            block_timeout_ms: 30_000,
            large_message_threshold: 1 << 20,
        }
    }
}

/// A length of time in a config file: `"1s"`, `"250ms"`, `"2m"`, `"1h"`,
/// a number of milliseconds, or `""` for none (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(try_from = "DurationText", into = "DurationText")]
pub struct Millis(pub u64);

/// How a [`Millis`] is written.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum DurationText {
    Number(u64),
    Text(String),
}

impl TryFrom<DurationText> for Millis {
    type Error = String;

    fn try_from(text: DurationText) -> Result<Millis, String> {
        match text {
            DurationText::Number(ms) => Ok(Millis(ms)),
            DurationText::Text(s) => parse_duration(&s).map(Millis),
        }
    }
}

impl From<Millis> for DurationText {
    fn from(m: Millis) -> DurationText {
        DurationText::Text(m.to_string())
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            ms if ms % 3_600_000 == 0 => write!(f, "{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 => write!(f, "{}m", ms / 60_000),
            ms if ms % 1000 == 0 => write!(f, "{}s", ms / 1000),
            ms => write!(f, "{ms}ms"),
        }
    }
}

/// Milliseconds in `text`: digits and a unit (ms, s, m, h); empty is 0.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let scale = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("'{text}' has no unit (ms, s, m or h)")),
        _ => return Err(format!("'{text}': unknown unit '{unit}' (ms, s, m or h)")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{text}' is not a number of {unit}"))
}

/// One `[[addresses]]` entry: the keys it sets for the destinations its
/// `match` names. Keys it leaves out come from less specific entries, then
/// from `[queues]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddressRule {
    /// `queue://P`, `topic://P` or `P` (both kinds), P a pattern.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Bytes of messages the address may hold before `full_policy` acts;
    /// 0 = no limit of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size_bytes: Option<usize>,
    /// What a send to the address does when it is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_policy: Option<FullPolicy>,
    /// Messages the address holds at most (waiting and in flight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<usize>,
    /// Deliveries after which a message is dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_deliveries: Option<u32>,
    /// How long a message that came back waits before it is delivered
    /// again, the first time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redelivery_delay: Option<Millis>,
    /// Each further redelivery waits this many times longer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redelivery_multiplier: Option<f64>,
    /// The longest a redelivery waits; "" = ten times `redelivery_delay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_redelivery_delay: Option<Millis>,
    /// Where dead messages go (a queue); "" = `[queues]`'s prefix and
    /// the destination's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<String>,
    /// Where expired messages go (a queue); "" = dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiry: Option<String>,
    /// A property name: a message replaces the waiting one with the same
    /// value of it. "" = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_value_key: Option<String>,
    /// One consumer at a time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
    /// The priority of a message sent with the default one (4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_priority: Option<u8>,
    /// The time to live of a message sent without one; "" = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_ttl: Option<Millis>,
    /// Whether a first send or subscription makes a queue that does not
    /// exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_create: Option<bool>,
    /// A body larger than this is kept on disk, not in memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub large_message_threshold: Option<usize>,
    /// A topic's key: the properties that name a message's instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Vec<String>>,
    /// What a topic keeps of each instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// Samples kept per instance under `keep_last`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_depth: Option<usize>,
    /// Whether a topic keeps samples for readers that join later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// Instances a topic holds at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<usize>,
    /// Samples an instance keeps at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_samples_per_instance: Option<usize>,
}

/// The settings in force for one destination.
#[derive(Debug, Clone, PartialEq)]
pub struct AddressSettings {
    /// The destination they were resolved for (a topic subscription's
    /// queue: its topic pattern).
    pub destination: Destination,
    /// See [`AddressRule::max_size_bytes`]; 0 = none.
    pub max_size_bytes: usize,
    /// See [`AddressRule::full_policy`].
    pub full_policy: FullPolicy,
    /// See [`AddressRule::max_messages`].
    pub max_messages: usize,
    /// See [`AddressRule::max_deliveries`].
    pub max_deliveries: u32,
    /// See [`AddressRule::redelivery_delay`], in ms.
    pub redelivery_delay: u64,
    /// See [`AddressRule::redelivery_multiplier`].
    pub redelivery_multiplier: f64,
    /// See [`AddressRule::max_redelivery_delay`], in ms, resolved.
    pub max_redelivery_delay: u64,
    /// The dead-letter queue's name.
    pub dead_letter: String,
    /// The expiry queue's name; empty = expired messages are dropped.
    pub expiry: String,
    /// See [`AddressRule::last_value_key`]; empty = none.
    pub last_value_key: String,
    /// See [`AddressRule::exclusive`].
    pub exclusive: bool,
    /// See [`AddressRule::default_priority`]; `None` = as sent.
    pub default_priority: Option<u8>,
    /// See [`AddressRule::default_ttl`], in ms; 0 = none.
    pub default_ttl: u64,
    /// See [`AddressRule::auto_create`].
    pub auto_create: bool,
    /// See [`AddressRule::large_message_threshold`].
    pub large_message_threshold: usize,
    /// A topic's instances.
    pub instances: InstanceSettings,
    /// The `match` of every entry that applies, least specific first.
    pub matched: Vec<String>,
}

impl AddressSettings {
    /// The settings of a destination that no entry matches.
    pub fn defaults(queues: &QueuesConfig, to: &Destination) -> AddressSettings {
        let name = &to.name;
        AddressSettings {
            destination: to.clone(),
            max_size_bytes: 0,
            full_policy: queues.full_policy,
            max_messages: queues.max_messages,
            max_deliveries: queues.max_deliveries,
            redelivery_delay: 0,
            redelivery_multiplier: 1.0,
            max_redelivery_delay: 0,
            dead_letter: format!("{}{name}", queues.dead_letter_prefix),
            expiry: queues.expiry_queue.clone(),
            last_value_key: String::new(),
            exclusive: false,
            default_priority: None,
            default_ttl: 0,
            auto_create: true,
            large_message_threshold: queues.large_message_threshold,
            instances: InstanceSettings::default(),
            matched: Vec::new(),
        }
    }

    /// How long a message that has been delivered `deliveries` times
    /// waits before the next delivery, in ms.
    pub fn redelivery_wait(&self, deliveries: u32) -> u64 {
        if self.redelivery_delay == 0 || deliveries == 0 {
            return 0;
        }
        let grown = self.redelivery_delay as f64
            * self
                .redelivery_multiplier
                .powi(deliveries.saturating_sub(1).min(64) as i32);
        (grown.min(self.max_redelivery_delay as f64)) as u64
    }

    fn apply(&mut self, rule: &AddressRule) {
        let r = rule;
        set(&mut self.max_size_bytes, r.max_size_bytes);
        set(&mut self.full_policy, r.full_policy);
        set(&mut self.max_messages, r.max_messages);
        set(&mut self.max_deliveries, r.max_deliveries);
        set(&mut self.redelivery_delay, r.redelivery_delay.map(|m| m.0));
        set(&mut self.redelivery_multiplier, r.redelivery_multiplier);
        set(
            &mut self.max_redelivery_delay,
            r.max_redelivery_delay.map(|m| m.0),
        );
        if let Some(to) = r.dead_letter.as_deref().filter(|t| !t.is_empty()) {
            self.dead_letter = queue_name(to).unwrap_or(to).to_owned();
        }
        if let Some(to) = &r.expiry {
            self.expiry = queue_name(to).unwrap_or(to).to_owned();
        }
        set(&mut self.last_value_key, r.last_value_key.clone());
        set(&mut self.exclusive, r.exclusive);
        if r.default_priority.is_some() {
            self.default_priority = r.default_priority;
        }
        set(&mut self.default_ttl, r.default_ttl.map(|m| m.0));
        set(&mut self.auto_create, r.auto_create);
        set(&mut self.large_message_threshold, r.large_message_threshold);
        let i = &mut self.instances;
        set(&mut i.key, r.key.clone());
        set(&mut i.history, r.history);
        set(&mut i.history_depth, r.history_depth);
        set(&mut i.durability, r.durability);
        set(&mut i.max_instances, r.max_instances);
        set(&mut i.max_samples_per_instance, r.max_samples_per_instance);
        self.matched.push(r.pattern.clone());
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// The queue named by `queue://NAME`, or `None` if `to` has no scheme.
fn queue_name(to: &str) -> Option<&str> {
    to.strip_prefix("queue://")
}

/// An entry's `match`, parsed.
#[derive(Debug, Clone)]
struct Match {
    kind: Option<DestinationKind>,
    pattern: Pattern,
}

impl Match {
    fn parse(text: &str) -> Result<Match, String> {
        let (kind, pattern) = match text.split_once("://") {
            Some(("queue", p)) => (Some(DestinationKind::Queue), p),
            Some(("topic", p)) => (Some(DestinationKind::Topic), p),
            Some((scheme, _)) => {
                return Err(format!(
                    "'{text}': unknown scheme '{scheme}' (queue:// or topic://, or none for both)"
                ))
            }
            None => (None, text),
        };
        let pattern = Pattern::parse(pattern).map_err(|e| format!("'{text}': {e}"))?;
        Ok(Match { kind, pattern })
    }

    fn matches(&self, kind: DestinationKind, name: &str) -> bool {
        self.kind.is_none_or(|k| k == kind) && self.pattern.matches(name)
    }

    /// Orders entries by how specific they are: word by word, a literal
    /// above `*` above `#`; then the longer; then one that names its kind.
    fn specificity(&self) -> (Vec<u8>, bool) {
        let words = self
            .pattern
            .words()
            .iter()
            .map(|w| match w {
                PatternWord::Literal(_) => 2,
                PatternWord::Star => 1,
                PatternWord::Hash => 0,
            })
            .collect();
        (words, self.kind.is_some())
    }
}

/// Every `[[addresses]]` entry, parsed and ordered least specific first,
/// with the `[queues]` defaults: what resolves a destination's settings.
#[derive(Debug, Clone)]
pub struct AddressBook {
    rules: Vec<(Match, AddressRule)>,
    defaults: QueuesConfig,
}

impl AddressBook {
    /// The book of `rules` over `defaults`, or why an entry is wrong:
    /// (index, key, reason).
    pub fn new(
        rules: &[AddressRule],
        defaults: &QueuesConfig,
    ) -> Result<AddressBook, (usize, &'static str, String)> {
        let mut parsed = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let m = Match::parse(&rule.pattern).map_err(|why| (i, "match", why))?;
            check(rule).map_err(|(key, why)| (i, key, why))?;
            if let Some((_, other)) = parsed
                .iter()
                .find(|(o, _): &&(Match, AddressRule)| o.kind == m.kind && o.pattern == m.pattern)
            {
                return Err((
                    i,
                    "match",
                    format!("'{}' is matched by an earlier entry already", other.pattern),
                ));
            }
            parsed.push((m, rule.clone()));
        }
        parsed.sort_by_key(|(m, _)| m.specificity());
        let book = AddressBook {
            rules: parsed,
            defaults: defaults.clone(),
        };
        // What only the merged settings can show: each entry against
        // what it inherits where it is most specific.
        for (i, rule) in rules.iter().enumerate() {
            let m = Match::parse(&rule.pattern).map_err(|why| (i, "match", why))?;
            let name = m.pattern.to_string();
            let kind = m.kind.unwrap_or(DestinationKind::Queue);
            let s = book.resolve(kind, &name);
            if s.redelivery_delay > 0
                && s.max_redelivery_delay > 0
                && s.max_redelivery_delay < s.redelivery_delay
            {
                return Err((
                    i,
                    "max_redelivery_delay",
                    format!(
                        "{} is shorter than redelivery_delay ({})",
                        Millis(s.max_redelivery_delay),
                        Millis(s.redelivery_delay)
                    ),
                ));
            }
            if !s.expiry.is_empty() && s.expiry == name && kind == DestinationKind::Queue {
                return Err((i, "expiry", format!("'{name}' would expire into itself")));
            }
            let t = book.resolve(DestinationKind::Topic, &name).instances;
            if t.history == History::KeepLast && t.history_depth > t.max_samples_per_instance {
                return Err((
                    i,
                    "history_depth",
                    format!(
                        "{} is more than max_samples_per_instance ({})",
                        t.history_depth, t.max_samples_per_instance
                    ),
                ));
            }
        }
        Ok(book)
    }

    /// The settings in force for destination `name` of `kind`.
    pub fn resolve(&self, kind: DestinationKind, name: &str) -> AddressSettings {
        let to = Destination {
            kind,
            name: name.to_owned(),
        };
        let mut s = AddressSettings::defaults(&self.defaults, &to);
        for (m, rule) in &self.rules {
            if m.matches(kind, name) {
                s.apply(rule);
            }
        }
        if s.max_redelivery_delay == 0 {
            s.max_redelivery_delay = s.redelivery_delay.saturating_mul(10);
        }
        s
    }

    /// The smallest `large_message_threshold` of any destination: a body
    /// no larger stays in memory wherever it goes.
    pub fn least_large_threshold(&self) -> usize {
        self.rules
            .iter()
            .filter_map(|(_, r)| r.large_message_threshold)
            .fold(self.defaults.large_message_threshold, usize::min)
    }

    /// The `[queues]` values that are every destination's defaults.
    pub fn defaults(&self) -> &QueuesConfig {
        &self.defaults
    }

    /// The entries, least specific first.
    pub fn entries(&self) -> Vec<&AddressRule> {
        self.rules.iter().map(|(_, rule)| rule).collect()
    }

    /// The book without entries: `[queues]` for every destination.
    pub fn plain(defaults: &QueuesConfig) -> AddressBook {
        AddressBook {
            rules: Vec::new(),
            defaults: defaults.clone(),
        }
    }

    /// Whether `name` is a queue that dead or expired messages are moved
    /// to: one with `[queues]`'s dead-letter prefix, the expiry queue, or
    /// an entry's `dead_letter` or `expiry`.
    pub fn is_dead_letter_queue(&self, name: &str) -> bool {
        let d = &self.defaults;
        name.starts_with(&d.dead_letter_prefix)
            || (!d.expiry_queue.is_empty() && name == d.expiry_queue)
            || self.rules.iter().any(|(_, r)| {
                [&r.dead_letter, &r.expiry]
                    .into_iter()
                    .flatten()
                    .any(|to| queue_name(to).unwrap_or(to) == name)
            })
    }

    /// [`AddressBook::resolve`] for a destination, shared.
    pub fn settings(&self, to: &Destination) -> Arc<AddressSettings> {
        Arc::new(self.resolve(to.kind, &to.name))
    }
}

/// Checks what one entry says on its own: (key, reason) if wrong.
fn check(rule: &AddressRule) -> Result<(), (&'static str, String)> {
    if rule.max_deliveries == Some(0) {
        return Err(("max_deliveries", "must be greater than 0".into()));
    }
    if rule.max_messages == Some(0) {
        return Err(("max_messages", "must be greater than 0".into()));
    }
    if let Some(m) = rule.redelivery_multiplier {
        if !(1.0..=100.0).contains(&m) {
            return Err((
                "redelivery_multiplier",
                format!("{m} is not between 1 and 100"),
            ));
        }
    }
    if let Some(p) = rule.default_priority {
        if p > herald_protocol::message::MAX_PRIORITY {
            return Err((
                "default_priority",
                format!("{p} is above {}", herald_protocol::message::MAX_PRIORITY),
            ));
        }
    }
    for (key, to) in [("dead_letter", &rule.dead_letter), ("expiry", &rule.expiry)] {
        let Some(to) = to.as_deref().filter(|t| !t.is_empty()) else {
            continue;
        };
        if to.starts_with("topic://") {
            return Err((key, format!("'{to}': must be a queue")));
        }
        let name = queue_name(to).unwrap_or(to);
        herald_protocol::destination::validate_name(name)
            .map_err(|e| (key, format!("'{to}': {e}")))?;
        if herald_protocol::destination::is_temporary(name) {
            return Err((key, format!("'{to}': a temporary queue")));
        }
    }
    if let Some(key) = rule.last_value_key.as_deref().filter(|k| !k.is_empty()) {
        property_name("last_value_key", key)?;
    }
    check_instances(rule)
}

/// A property name a setting names: at most 256 bytes, no spaces.
fn property_name(key: &'static str, name: &str) -> Result<(), (&'static str, String)> {
    if name.is_empty()
        || name.len() > 256
        || name.contains(|c: char| c.is_whitespace() || c.is_control())
    {
        return Err((
            key,
            format!("'{name}': a property name, at most 256 bytes, no spaces"),
        ));
    }
    Ok(())
}

/// Properties a topic's key names at most.
pub const MAX_KEY: usize = 8;

/// Checks an entry's settings of topic instances.
fn check_instances(rule: &AddressRule) -> Result<(), (&'static str, String)> {
    let topic_only = [
        ("key", rule.key.is_some()),
        ("history", rule.history.is_some()),
        ("history_depth", rule.history_depth.is_some()),
        ("durability", rule.durability.is_some()),
        ("max_instances", rule.max_instances.is_some()),
        (
            "max_samples_per_instance",
            rule.max_samples_per_instance.is_some(),
        ),
    ];
    if rule.pattern.starts_with("queue://") {
        if let Some((key, _)) = topic_only.iter().find(|(_, set)| *set) {
            return Err((key, "a topic's setting, on a queue:// entry".into()));
        }
    }
    if let Some(names) = &rule.key {
        if names.len() > MAX_KEY {
            return Err((
                "key",
                format!("{} properties: at most {MAX_KEY}", names.len()),
            ));
        }
        for (i, name) in names.iter().enumerate() {
            property_name("key", name)?;
            if names[..i].contains(name) {
                return Err(("key", format!("'{name}' is named twice")));
            }
        }
    }
    for (key, value) in [
        ("history_depth", rule.history_depth),
        ("max_instances", rule.max_instances),
        ("max_samples_per_instance", rule.max_samples_per_instance),
    ] {
        if value == Some(0) {
            return Err((key, "must be greater than 0".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        addresses: Vec<AddressRule>,
    }

    fn book(toml_text: &str) -> Result<AddressBook, (usize, &'static str, String)> {
        let file: File = toml::from_str(toml_text).unwrap();
        AddressBook::new(&file.addresses, &QueuesConfig::default())
    }

    #[test]
    fn durations_read_with_their_units() {
        assert_eq!(parse_duration(""), Ok(0));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("1s"), Ok(1000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_duration("5d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
        assert_eq!(Millis(60_000).to_string(), "1m");
        assert_eq!(Millis(1500).to_string(), "1500ms");
    }

    #[test]
    fn the_most_specific_entry_wins_and_the_rest_fill_in() {
        let b = book(
            r##"
            [[addresses]]
            match = "#"
            max_deliveries = 3
            redelivery_delay = "1s"
            [[addresses]]
            match = "queue://orders.#"
            max_deliveries = 5
            exclusive = true
            [[addresses]]
            match = "queue://orders.eu"
            max_deliveries = 7
            dead_letter = "queue://DLQ.orders"
            "##,
        )
        .unwrap();
        let s = b.resolve(DestinationKind::Queue, "orders.eu");
        assert_eq!(s.max_deliveries, 7);
        assert!(s.exclusive);
        assert_eq!(s.redelivery_delay, 1000);
        assert_eq!(s.max_redelivery_delay, 10_000);
        assert_eq!(s.dead_letter, "DLQ.orders");
        assert_eq!(s.matched, ["#", "queue://orders.#", "queue://orders.eu"]);
        let s = b.resolve(DestinationKind::Queue, "orders.us");
        assert_eq!(
            (s.max_deliveries, s.dead_letter.as_str()),
            (5, "DLQ.orders.us")
        );
        let s = b.resolve(DestinationKind::Topic, "orders.eu");
        assert_eq!((s.max_deliveries, s.exclusive), (3, false));
        let s = b.resolve(DestinationKind::Queue, "other");
        assert_eq!(s.expiry, "ExpiryQueue");
    }

    #[test]
    fn a_literal_beats_a_star_beats_a_hash() {
        let b = book(
            r##"
            [[addresses]]
            match = "a.*"
            max_messages = 2
            [[addresses]]
            match = "a.#"
            max_messages = 1
            [[addresses]]
            match = "*.b"
            max_messages = 3
            "##,
        )
        .unwrap();
        assert_eq!(b.resolve(DestinationKind::Queue, "a.b").max_messages, 2);
        assert_eq!(b.resolve(DestinationKind::Queue, "a.c.d").max_messages, 1);
        assert_eq!(b.resolve(DestinationKind::Queue, "x.b").max_messages, 3);
    }

    #[test]
    fn redelivery_backs_off_up_to_its_cap() {
        let b = book(
            r##"
            [[addresses]]
            match = "q"
            redelivery_delay = "100ms"
            redelivery_multiplier = 2.0
            max_redelivery_delay = "1s"
            "##,
        )
        .unwrap();
        let s = b.resolve(DestinationKind::Queue, "q");
        let waits: Vec<u64> = (0..7).map(|n| s.redelivery_wait(n)).collect();
        assert_eq!(waits, [0, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(s.redelivery_wait(u32::MAX), 1000);
        assert_eq!(b.resolve(DestinationKind::Queue, "r").redelivery_wait(3), 0);
    }

    #[test]
    fn wrong_entries_are_refused_naming_the_key() {
        let refused = |text: &str| book(text).unwrap_err();
        let (i, key, why) = refused("[[addresses]]\nmatch = \"a.b*\"");
        assert_eq!((i, key), (0, "match"));
        assert!(why.contains("whole words"), "{why}");
        assert_eq!(refused("[[addresses]]\nmatch = \"amqp://a\"").1, "match");
        let (i, key, _) = refused("[[addresses]]\nmatch = \"a\"\n[[addresses]]\nmatch = \"a\"");
        assert_eq!((i, key), (1, "match"));
        for (entry, key) in [
            ("max_deliveries = 0", "max_deliveries"),
            ("max_messages = 0", "max_messages"),
            ("redelivery_multiplier = 0.5", "redelivery_multiplier"),
            ("redelivery_multiplier = nan", "redelivery_multiplier"),
            ("default_priority = 10", "default_priority"),
            ("dead_letter = \"topic://x\"", "dead_letter"),
            ("dead_letter = \"a b\"", "dead_letter"),
            ("expiry = \"queue://\"", "expiry"),
            ("last_value_key = \"a b\"", "last_value_key"),
            (
                "redelivery_delay = \"10s\"\nmax_redelivery_delay = \"1s\"",
                "max_redelivery_delay",
            ),
            ("expiry = \"q\"", "expiry"),
            ("key = [\"a b\"]", "key"),
            ("key = [\"\"]", "key"),
            ("key = [\"a\", \"a\"]", "key"),
            (
                "key = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\"]",
                "key",
            ),
            ("history_depth = 0", "history_depth"),
            ("max_instances = 0", "max_instances"),
            ("max_samples_per_instance = 0", "max_samples_per_instance"),
            (
                "history_depth = 5\nmax_samples_per_instance = 4",
                "history_depth",
            ),
        ] {
            let text = format!("[[addresses]]\nmatch = \"q\"\n{entry}");
            assert_eq!(refused(&text).1, key, "{entry}");
        }
        for entry in ["durability = \"forever\"", "history = \"keep_some\""] {
            let text = format!("[[addresses]]\nmatch = \"q\"\n{entry}");
            assert!(toml::from_str::<File>(&text).is_err(), "{entry}");
        }
        let on_queue = "[[addresses]]\nmatch = \"queue://q\"\ndurability = \"persistent\"";
        assert_eq!(refused(on_queue).1, "durability");
    }
}
