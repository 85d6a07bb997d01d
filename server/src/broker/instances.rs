//! Keyed topics (DDS instances): a topic whose `[[addresses]]` entry names
//! a `key` has one instance per value of those message properties, each
//! alive, disposed or without writers, and keeps the history its
//! `history` and `durability` say for readers that join later: the last
//! `history_depth` samples of each live instance, or all of them up to
//! `max_samples_per_instance`; in memory (`transient_local`) or in the
//! journal too (`persistent`). A topic without a key with a durability
//! other than `volatile` is one instance: today's retained last N, with
//! its limits.
//!
//! A message with the property [`INSTANCE_PROPERTY`] = `dispose` or
//! `unregister` ends its instance's samples (disposed; without writers)
//! and reaches the topic's subscribers like any other message: that is
//! how a reader sees the change. The next sample makes the instance
//! alive again.
//!
//! A sample is refused, naming the reason, when a keyed topic's message
//! lacks a key property, its instance would be one past `max_instances`
//! (and none that is not alive can make room), or its instance keeps all
//! its samples and holds `max_samples_per_instance` already.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use herald_protocol::message::each_property;
use herald_protocol::value::ValueRef;

use crate::addresses::{AddressBook, Durability, History, InstanceSettings};
use crate::collections::FastMap;
use crate::sync::lock;
use herald_protocol::DestinationKind;

/// The property that disposes of an instance or unregisters its writer.
pub const INSTANCE_PROPERTY: &str = "HeraldInstance";

/// The longest an instance's key may be, its values written out.
const MAX_KEY_BYTES: usize = 4096;

/// Properties a key names at most (`crate::addresses` refuses more).
const MAX_KEY: usize = crate::addresses::MAX_KEY;

/// An instance's state, as DDS names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Written to, and neither disposed nor unregistered since.
    Alive,
    /// Disposed by a writer.
    Disposed,
    /// Every writer unregistered.
    NoWriters,
}

impl State {
    /// As the management interface says it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Alive => "alive",
            State::Disposed => "disposed",
            State::NoWriters => "no_writers",
        }
    }
}

/// Why a sample was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A keyed topic's message without a key property.
    #[error("topic '{topic}' is keyed by {key}: the message has no property '{missing}'")]
    NoKey {
        /// The topic.
        topic: String,
        /// Its key's properties.
        key: String,
        /// The one the message lacks.
        missing: String,
    },
    /// A key too long, or of a kind a key cannot be.
    #[error("topic '{topic}': {why}")]
    BadKey {
        /// The topic.
        topic: String,
        /// What is wrong with the key.
        why: String,
    },
    /// One instance more than the topic may hold.
    #[error("topic '{topic}' holds max_instances ({max}) instances, all alive: instance {key} is refused")]
    TooManyInstances {
        /// The topic.
        topic: String,
        /// The instance refused.
        key: String,
        /// Its `max_instances`.
        max: usize,
    },
    /// A sample more than an instance that keeps all may hold.
    #[error("instance {key} of topic '{topic}' keeps all its samples and holds max_samples_per_instance ({max}): the sample is refused")]
    TooManySamples {
        /// The topic.
        topic: String,
        /// The instance.
        key: String,
        /// Its `max_samples_per_instance`.
        max: usize,
    },
    /// An `HeraldInstance` property of another value.
    #[error("property {INSTANCE_PROPERTY} must be 'dispose' or 'unregister', not {value}")]
    BadAction {
        /// The value it had.
        value: String,
    },
}

/// What keeping a sample changed in the journal.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Change {
    /// The topic keeps its instances: retained messages do not apply.
    pub(super) tracked: bool,
    /// The id of the record to write for the sample.
    pub(super) new: Option<u64>,
    /// The records of the samples it replaced or ended, to end.
    pub(super) ended: Vec<u64>,
}

/// One kept sample.
struct Sample {
    /// Its place in the order of everything kept.
    seq: u64,
    block: Bytes,
    /// Its journal record, under `persistent`.
    record: Option<u64>,
}

struct Instance {
    state: State,
    samples: VecDeque<Sample>,
    /// In its topic's `not_alive`.
    queued: bool,
}

/// One topic's instances, with the settings they were kept under.
struct Topic {
    settings: Arc<InstanceSettings>,
    instances: FastMap<String, Instance>,
    /// Instances that stopped being alive, oldest first (some may be
    /// alive again): those that make room for new ones.
    not_alive: VecDeque<String>,
}

impl Topic {
    /// See [`Instances::keep`]; `key` is a buffer to write the instance's
    /// key in (a sample of a known instance allocates nothing for it),
    /// `seq` the last sample's place in the order.
    fn keep(
        &mut self,
        (topic, block): (&str, &Bytes),
        key: &mut String,
        seq: &mut u64,
        record: impl FnOnce() -> Option<u64>,
    ) -> Result<Change, Refused> {
        let settings = self.settings.clone();
        let action = instance_key(topic, &settings.key, block, key)?;
        let mut change = Change {
            tracked: true,
            ..Change::default()
        };
        if !self.instances.contains_key(key.as_str()) {
            if self.instances.len() >= settings.max_instances && !self.make_room() {
                return Err(Refused::TooManyInstances {
                    topic: topic.to_owned(),
                    key: key.clone(),
                    max: settings.max_instances,
                });
            }
            let fresh = Instance {
                state: State::Alive,
                samples: VecDeque::with_capacity(settings.depth().min(4)),
                queued: false,
            };
            self.instances.insert(key.clone(), fresh);
        }
        let instance = self.instances.get_mut(key.as_str()).expect("made above");
        match action {
            Action::Dispose => instance.state = State::Disposed,
            Action::Unregister => instance.state = State::NoWriters,
            Action::Write => instance.state = State::Alive,
        }
        if instance.state != State::Alive {
            change
                .ended
                .extend(instance.samples.drain(..).filter_map(|s| s.record));
            if !instance.queued {
                instance.queued = true;
                self.not_alive.push_back(key.clone());
            }
            return Ok(change);
        }
        if settings.durability == Durability::Volatile {
            return Ok(change);
        }
        let depth = settings.depth();
        if settings.history == History::KeepAll && instance.samples.len() >= depth {
            return Err(Refused::TooManySamples {
                topic: topic.to_owned(),
                key: key.clone(),
                max: depth,
            });
        }
        while instance.samples.len() >= depth {
            let old = instance.samples.pop_front().expect("not empty");
            change.ended.extend(old.record);
        }
        change.new = match settings.durability {
            Durability::Persistent => record(),
            _ => None,
        };
        *seq += 1;
        instance.samples.push_back(Sample {
            seq: *seq,
            // A copy: the block may be a slice of a connection's read
            // buffer, which a sample kept for long would hold whole.
            block: Bytes::copy_from_slice(block),
            record: change.new,
        });
        Ok(change)
    }
}

/// The keyed topics and what they keep.
#[derive(Default)]
pub(super) struct Instances {
    /// Whether an `[[addresses]]` entry sets a topic's instances: when
    /// none does, a publish costs this one load.
    any: AtomicBool,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    topics: FastMap<String, Topic>,
    /// The buffer a sample's instance key is written in.
    key: String,
    /// Topics whose settings keep nothing, as last resolved: a publish on
    /// one resolves nothing again. Emptied when it reaches
    /// [`PLAIN_CACHE`] names, so that topics named per entity do not grow
    /// it without bound.
    plain: crate::collections::FastSet<String>,
    /// The next sample's place in the order.
    seq: u64,
}

/// Topics remembered as keeping nothing, at most.
const PLAIN_CACHE: usize = 65_536;

/// What a message does to its instance.
enum Action {
    Write,
    Dispose,
    Unregister,
}

/// What a message's [`INSTANCE_PROPERTY`] says it does.
fn action(value: Option<ValueRef<'_>>) -> Result<Action, Refused> {
    Ok(match value {
        None => Action::Write,
        Some(ValueRef::String("dispose")) => Action::Dispose,
        Some(ValueRef::String("unregister")) => Action::Unregister,
        Some(other) => {
            return Err(Refused::BadAction {
                value: format!("{other:?}"),
            })
        }
    })
}

/// Writes in `text` the instance a message of `topic` belongs to:
/// `name=value` for each key property, joined by commas; "" for a topic
/// without a key. Returns what the message does to it: the key and
/// [`INSTANCE_PROPERTY`] read in one pass over the properties.
fn instance_key(
    topic: &str,
    key: &[String],
    block: &[u8],
    text: &mut String,
) -> Result<Action, Refused> {
    use std::fmt::Write;
    let mut values: [Option<ValueRef<'_>>; MAX_KEY] = [None; MAX_KEY];
    let mut told = None;
    each_property(block, |name, value| {
        if name == INSTANCE_PROPERTY {
            told = Some(value);
        } else if let Some(i) = key.iter().position(|k| k == name) {
            values[i] = Some(value);
        }
        true
    });
    text.clear();
    for (name, value) in key.iter().zip(values) {
        let Some(value) = value else {
            return Err(Refused::NoKey {
                topic: topic.to_owned(),
                key: key.join(", "),
                missing: name.clone(),
            });
        };
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(name);
        text.push('=');
        let _ = match value {
            ValueRef::String(s) => {
                text.push_str(s);
                Ok(())
            }
            ValueRef::I8(n) => write!(text, "{n}"),
            ValueRef::I16(n) => write!(text, "{n}"),
            ValueRef::I32(n) => write!(text, "{n}"),
            ValueRef::I64(n) => write!(text, "{n}"),
            ValueRef::Bool(b) => write!(text, "{b}"),
            // A float is no key: 0.1 + 0.2 would be another instance than 0.3.
            ValueRef::F32(_) | ValueRef::F64(_) => {
                return Err(Refused::BadKey {
                    topic: topic.to_owned(),
                    why: format!("key property '{name}' is a float, which names no instance"),
                })
            }
        };
        if text.len() > MAX_KEY_BYTES {
            return Err(Refused::BadKey {
                topic: topic.to_owned(),
                why: format!("the key is longer than {MAX_KEY_BYTES} bytes"),
            });
        }
    }
    action(told)
}

/// A topic's instances, for the management interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    /// `name=value`, comma separated ("" for a topic without a key).
    pub key: String,
    /// Alive, disposed or without writers.
    pub state: State,
    /// Samples kept.
    pub samples: usize,
}

impl Instances {
    /// Takes the settings of `book`: what is kept stays, trimmed to the
    /// new settings at its instance's next sample.
    pub(super) fn set_book(&self, book: &AddressBook) {
        let any = book.entries().iter().any(|r| {
            r.key.is_some()
                || r.durability.is_some()
                || r.history.is_some()
                || r.history_depth.is_some()
                || r.max_instances.is_some()
                || r.max_samples_per_instance.is_some()
        });
        self.any.store(any, Ordering::Relaxed);
        let mut kept = lock(&self.kept);
        kept.plain.clear();
        for (name, topic) in kept.topics.iter_mut() {
            topic.settings = Arc::new(book.resolve(DestinationKind::Topic, name).instances);
        }
    }

    /// Keeps a sample published on `topic` under the settings `resolve`
    /// gives it (asked once per topic): refused if its instance cannot
    /// take it. A kept sample of a `persistent` topic gets a journal
    /// record if `record` gives it an id, whatever its delivery mode: the
    /// topic's durability is the contract.
    pub(super) fn keep(
        &self,
        topic: &str,
        block: &Bytes,
        resolve: impl FnOnce() -> InstanceSettings,
        record: impl FnOnce() -> Option<u64>,
    ) -> Result<Change, Refused> {
        if !self.any.load(Ordering::Relaxed) {
            return Ok(Change::default());
        }
        let mut kept = lock(&self.kept);
        let Kept {
            topics,
            plain,
            key,
            seq,
        } = &mut *kept;
        if let Some(t) = topics.get_mut(topic) {
            if t.settings.tracked() {
                return t.keep((topic, block), key, seq, record);
            }
            // Settings reloaded: the topic keeps nothing now.
            topics.remove(topic);
            return Ok(Change::default());
        }
        if plain.contains(topic) {
            return Ok(Change::default());
        }
        let settings = resolve();
        if !settings.tracked() {
            if plain.len() >= PLAIN_CACHE {
                plain.clear();
            }
            plain.insert(topic.to_owned());
            return Ok(Change::default());
        }
        let mut t = Topic {
            settings: Arc::new(settings),
            instances: FastMap::default(),
            not_alive: VecDeque::new(),
        };
        let change = t.keep((topic, block), key, seq, record);
        topics.insert(topic.to_owned(), t);
        change
    }

    /// Takes back a sample of `topic` kept in journal record `id` before
    /// a restart, if the topic keeps its instances (`None`: it is a
    /// retained message). Returns the records to end: those it replaced,
    /// and its own if the topic keeps it no longer.
    pub(super) fn restore(
        &self,
        topic: &str,
        block: &Bytes,
        id: u64,
        resolve: impl FnOnce() -> InstanceSettings,
    ) -> Option<Vec<u64>> {
        match self.keep(topic, block, resolve, || Some(id)) {
            Ok(change) if !change.tracked => None,
            Ok(mut change) => {
                if change.new != Some(id) {
                    change.ended.push(id);
                }
                Some(change.ended)
            }
            Err(why) => {
                log::warn!("a kept sample of topic '{topic}' is not kept now: {why}");
                Some(vec![id])
            }
        }
    }

    /// The samples kept of the live instances of the topics `matches`
    /// takes, in the order they came; with a `history` above 0, the last
    /// that many of each instance.
    pub(super) fn kept_for(&self, matches: impl Fn(&str) -> bool, history: u64) -> Vec<Bytes> {
        if !self.any.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let kept = lock(&self.kept);
        let mut samples: Vec<(u64, Bytes)> = kept
            .topics
            .iter()
            .filter(|(name, _)| matches(name))
            .flat_map(|(_, t)| t.instances.values())
            .filter(|i| i.state == State::Alive)
            .flat_map(|i| {
                let skip = match history {
                    0 => 0,
                    n => i.samples.len().saturating_sub(n as usize),
                };
                i.samples
                    .iter()
                    .skip(skip)
                    .map(|s| (s.seq, s.block.clone()))
            })
            .collect();
        samples.sort_unstable_by_key(|(seq, _)| *seq);
        samples.into_iter().map(|(_, b)| b).collect()
    }

    /// What a reader's policies tell a sample of `topic` apart by: the
    /// topic, and its instance's key if the topic is keyed.
    pub(super) fn reader_key(&self, topic: &str, block: &[u8]) -> String {
        let mut key = topic.to_owned();
        if !self.any.load(Ordering::Relaxed) {
            return key;
        }
        let kept = lock(&self.kept);
        if let Some(t) = kept
            .topics
            .get(topic)
            .filter(|t| !t.settings.key.is_empty())
        {
            let mut instance = String::new();
            if instance_key(topic, &t.settings.key, block, &mut instance).is_ok() {
                key.push('\u{1f}');
                key.push_str(&instance);
            }
        }
        key
    }

    /// The instances of `topic`, by key (`None`: it keeps none).
    pub(super) fn instances_of(&self, topic: &str) -> Option<Vec<InstanceView>> {
        let kept = lock(&self.kept);
        let t = kept.topics.get(topic)?;
        let mut views: Vec<InstanceView> = t
            .instances
            .iter()
            .map(|(key, i)| InstanceView {
                key: key.clone(),
                state: i.state,
                samples: i.samples.len(),
            })
            .collect();
        views.sort_by(|a, b| a.key.cmp(&b.key));
        Some(views)
    }
}

impl Topic {
    /// Forgets the instance that stopped being alive longest ago, to make
    /// room for a new one: whether there was one. Its samples went when
    /// it stopped being alive.
    fn make_room(&mut self) -> bool {
        while let Some(key) = self.not_alive.pop_front() {
            let Some(instance) = self.instances.get_mut(&key) else {
                continue;
            };
            instance.queued = false;
            if instance.state != State::Alive {
                self.instances.remove(&key);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addresses::{AddressRule, QueuesConfig};
    use herald_protocol::{Destination, Message};

    /// Instances under one `[[addresses]]` entry for `topic://s.#`.
    fn instances(rule: AddressRule) -> (Instances, AddressBook) {
        let rule = AddressRule {
            pattern: "topic://s.#".into(),
            ..rule
        };
        let book = AddressBook::new(&[rule], &QueuesConfig::default()).unwrap();
        let instances = Instances::default();
        instances.set_book(&book);
        (instances, book)
    }

    fn sample(topic: &str, props: &[(&str, &str)], body: &str) -> Bytes {
        let mut m = Message::text(body);
        for (k, v) in props {
            m = m.with_property(*k, *v);
        }
        m.set_destination(Some(Destination::topic(topic)));
        let mut b = bytes::BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    fn keep(
        i: &Instances,
        book: &AddressBook,
        topic: &str,
        block: &Bytes,
    ) -> Result<Change, Refused> {
        let resolve = || book.resolve(DestinationKind::Topic, topic).instances;
        i.keep(topic, block, resolve, || None)
    }

    fn bodies(kept: Vec<Bytes>) -> Vec<String> {
        kept.iter()
            .map(|b| {
                Message::decode(b, 1)
                    .unwrap()
                    .body_text()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn keyed(depth: usize) -> AddressRule {
        AddressRule {
            key: Some(vec!["id".into()]),
            history_depth: Some(depth),
            durability: Some(Durability::TransientLocal),
            ..Default::default()
        }
    }

    #[test]
    fn each_instance_keeps_its_last_samples_and_a_disposed_one_none() {
        let (i, book) = instances(keyed(2));
        for (id, body) in [
            ("1", "a1"),
            ("2", "b1"),
            ("1", "a2"),
            ("1", "a3"),
            ("2", "b2"),
        ] {
            keep(&i, &book, "s.x", &sample("s.x", &[("id", id)], body)).unwrap();
        }
        assert_eq!(bodies(i.kept_for(|_| true, 0)), ["b1", "a2", "a3", "b2"]);
        let dispose = sample("s.x", &[("id", "1"), (INSTANCE_PROPERTY, "dispose")], "");
        keep(&i, &book, "s.x", &dispose).unwrap();
        assert_eq!(bodies(i.kept_for(|_| true, 0)), ["b1", "b2"]);
        let views = i.instances_of("s.x").unwrap();
        assert_eq!(views[0].key, "id=1");
        assert_eq!((views[0].state, views[0].samples), (State::Disposed, 0));
        assert_eq!((views[1].state, views[1].samples), (State::Alive, 2));
        // Written again: alive.
        keep(&i, &book, "s.x", &sample("s.x", &[("id", "1")], "a4")).unwrap();
        assert_eq!(bodies(i.kept_for(|_| true, 0)), ["b1", "b2", "a4"]);
        let unregister = sample("s.x", &[("id", "2"), (INSTANCE_PROPERTY, "unregister")], "");
        keep(&i, &book, "s.x", &unregister).unwrap();
        assert_eq!(i.instances_of("s.x").unwrap()[1].state, State::NoWriters);
        assert_eq!(bodies(i.kept_for(|t| t == "s.y", 0)), Vec::<String>::new());
    }

    #[test]
    fn a_sample_without_its_key_or_past_a_limit_is_refused_naming_why() {
        let (i, book) = instances(AddressRule {
            max_instances: Some(2),
            ..keyed(1)
        });
        let no_key = keep(&i, &book, "s.x", &sample("s.x", &[], "x")).unwrap_err();
        assert!(no_key.to_string().contains("no property 'id'"), "{no_key}");
        let bad = sample("s.x", &[("id", "1"), (INSTANCE_PROPERTY, "explode")], "");
        assert!(matches!(
            keep(&i, &book, "s.x", &bad),
            Err(Refused::BadAction { .. })
        ));
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let too_long = keep(&i, &book, "s.x", &sample("s.x", &[("id", &long)], "x"));
        assert!(matches!(too_long, Err(Refused::BadKey { .. })));
        keep(&i, &book, "s.x", &sample("s.x", &[("id", "1")], "x")).unwrap();
        keep(&i, &book, "s.x", &sample("s.x", &[("id", "2")], "x")).unwrap();
        let third = keep(&i, &book, "s.x", &sample("s.x", &[("id", "3")], "x"));
        assert!(matches!(
            third,
            Err(Refused::TooManyInstances { max: 2, .. })
        ));
        // One that is not alive makes room.
        let dispose = sample("s.x", &[("id", "1"), (INSTANCE_PROPERTY, "dispose")], "");
        keep(&i, &book, "s.x", &dispose).unwrap();
        keep(&i, &book, "s.x", &sample("s.x", &[("id", "3")], "x")).unwrap();
        assert_eq!(i.instances_of("s.x").unwrap().len(), 2);

        let (all, book) = instances(AddressRule {
            history: Some(History::KeepAll),
            max_samples_per_instance: Some(2),
            ..keyed(1)
        });
        for _ in 0..2 {
            keep(&all, &book, "s.x", &sample("s.x", &[("id", "1")], "x")).unwrap();
        }
        let full = keep(&all, &book, "s.x", &sample("s.x", &[("id", "1")], "x"));
        assert!(matches!(full, Err(Refused::TooManySamples { max: 2, .. })));
    }

    #[test]
    fn persistent_samples_have_records_ended_as_they_go_and_come_back() {
        let (i, book) = instances(AddressRule {
            durability: Some(Durability::Persistent),
            ..keyed(1)
        });
        let resolve = || book.resolve(DestinationKind::Topic, "s.x").instances;
        let one = sample("s.x", &[("id", "1")], "one");
        let first = i.keep("s.x", &one, resolve, || Some(7)).unwrap();
        assert_eq!((first.new, first.ended.clone()), (Some(7), vec![]));
        let two = sample("s.x", &[("id", "1")], "two");
        let second = i.keep("s.x", &two, resolve, || Some(8)).unwrap();
        assert_eq!((second.new, second.ended), (Some(8), vec![7]));
        // A non-persistent message is kept without a record.
        let live = i.keep("s.x", &one, resolve, || None).unwrap();
        assert_eq!((live.new, live.ended), (None, vec![8]));

        // After a restart: the records, a crash having left two of one
        // instance; the later stays.
        let (again, book) = instances(AddressRule {
            durability: Some(Durability::Persistent),
            ..keyed(1)
        });
        let resolve = || book.resolve(DestinationKind::Topic, "s.x").instances;
        assert_eq!(again.restore("s.x", &one, 7, resolve), Some(vec![]));
        assert_eq!(again.restore("s.x", &two, 8, resolve), Some(vec![7]));
        assert_eq!(bodies(again.kept_for(|_| true, 0)), ["two"]);
        // A topic that keeps nothing: a retained message's record.
        let elsewhere = || book.resolve(DestinationKind::Topic, "other").instances;
        assert_eq!(again.restore("other", &one, 9, elsewhere), None);
    }

    #[test]
    fn a_topic_no_entry_keys_costs_nothing_and_keeps_nothing() {
        let (i, book) = instances(AddressRule {
            max_deliveries: Some(3),
            ..Default::default()
        });
        assert!(!i.any.load(Ordering::Relaxed));
        let change = keep(&i, &book, "s.x", &sample("s.x", &[], "x")).unwrap();
        assert_eq!(change, Change::default());
        // Volatile and keyed: instances tracked, nothing kept.
        let (v, book) = instances(AddressRule {
            key: Some(vec!["id".into()]),
            ..Default::default()
        });
        assert!(
            keep(&v, &book, "s.x", &sample("s.x", &[("id", "1")], "x"))
                .unwrap()
                .tracked
        );
        assert!(v.kept_for(|_| true, 0).is_empty());
        assert_eq!(v.instances_of("s.x").unwrap().len(), 1);
        // A topic no entry keys, beside one: resolved once, remembered.
        let other = keep(&v, &book, "other", &sample("other", &[], "x")).unwrap();
        assert_eq!(other, Change::default());
        assert!(lock(&v.kept).plain.contains("other"));
        v.set_book(&book);
        assert!(lock(&v.kept).plain.is_empty(), "forgotten at a reload");
    }
}
