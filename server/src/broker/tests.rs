//! The broker on its own: no socket, no disk. A store in memory that keeps
//! every record and confirms at once, a sink that runs the broker's
//! deferred work when the test says, and deliveries read straight from the
//! buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use herald_protocol::{DeliveryMode, Destination, DestinationKind, Message, MessageView};

use super::delivery::Spare;
use super::*;
use crate::config::{Config, FullPolicy, RetainRule};
use crate::store::{Completion, Record, Store};

/// Keeps records in memory and confirms each at once.
#[derive(Default)]
struct MemoryStore {
    next: AtomicU64,
    records: Mutex<Vec<Record>>,
}

impl Store for MemoryStore {
    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn append(&self, record: Record, done: Option<Completion>) {
        lock(&self.records).push(record);
        if let Some(done) = done {
            done(Ok(()));
        }
    }

    fn barrier(&self, done: Completion) {
        done(Ok(()));
    }
}

/// Holds the work the broker hands its workers, until [`Harness::settle`].
#[derive(Default)]
struct HeldWork(Mutex<Vec<SinkWork>>);

impl Sink for Arc<HeldWork> {
    fn run(&self, _on: Option<usize>, work: SinkWork) {
        lock(&self.0).push(work);
    }
}

/// A broker with a memory store and a held-work sink.
struct Harness {
    broker: Broker,
    store: Arc<MemoryStore>,
    work: Arc<HeldWork>,
    out: Deliveries,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(|_| {})
    }

    fn with(configure: impl FnOnce(&mut Config)) -> Harness {
        let mut config = Config::default();
        configure(&mut config);
        let store = Arc::new(MemoryStore::default());
        let broker = Broker::new(&config, store.clone());
        let work = Arc::new(HeldWork::default());
        broker.set_sink(Arc::new(work.clone()));
        Harness {
            broker,
            store,
            work,
            out: Deliveries::new(1),
        }
    }

    /// Runs the work handed to the workers (persistent messages entering
    /// their queues once stored), until none is left.
    fn settle(&mut self) {
        loop {
            let work: Vec<SinkWork> = std::mem::take(&mut *lock(&self.work.0));
            if work.is_empty() {
                return;
            }
            for w in work {
                w(&self.broker, &mut self.out);
            }
        }
    }

    fn subscribe(&mut self, id: u32, kind: DestinationKind, pattern: &str) -> SubscriptionHandle {
        self.subscribe_with(id, kind, pattern, |_| {})
    }

    fn subscribe_with(
        &mut self,
        id: u32,
        kind: DestinationKind,
        pattern: &str,
        adjust: impl FnOnce(&mut SubscribeRequest<'_>),
    ) -> SubscriptionHandle {
        let mut req = request(kind, pattern);
        adjust(&mut req);
        self.broker
            .subscribe(req, sub(id), &mut self.out)
            .expect("subscribed")
    }

    fn publish(&mut self, m: Message) -> Result<Routed, RouteError> {
        let view = view(m);
        let routed = self
            .broker
            .publish(&view, Room::Refuse, Some(conn()), &mut self.out);
        self.settle();
        routed
    }

    /// What was delivered since the last call: (subscription, body, count,
    /// ack).
    fn delivered(&mut self) -> Vec<Got> {
        self.settle();
        let mut got = Vec::new();
        for (_, batch) in self.out.drain(None, &[Spare::default()]) {
            for d in batch {
                let m = Message::decode(&d.message, 0).expect("a message");
                got.push(Got {
                    to: d.to.subscription_id,
                    text: m.body_text().unwrap_or_default().to_owned(),
                    count: d.delivery_count,
                    ack: d.ack,
                });
            }
        }
        got
    }

    fn texts_to(&mut self, id: u32) -> Vec<String> {
        self.delivered()
            .into_iter()
            .filter(|g| g.to == id)
            .map(|g| g.text)
            .collect()
    }
}

struct Got {
    to: u32,
    text: String,
    count: u32,
    ack: Option<AckRef>,
}

/// A subscription of client `client` to `pattern`: acknowledged on a
/// queue, a prefetch of 100.
fn request(kind: DestinationKind, pattern: &str) -> SubscribeRequest<'_> {
    SubscribeRequest {
        kind,
        destination: pattern,
        selector: None,
        acknowledged: kind == DestinationKind::Queue,
        prefetch: 100,
        durable_name: "",
        client_id: "client",
        user: "",
        temporary: false,
        shared: false,
        durable: false,
        backlog: None,
        kept: true,
        no_local: false,
        priority: 0,
        exclusive: false,
        reader: Default::default(),
    }
}

fn conn() -> ConnectionRef {
    ConnectionRef {
        worker: 0,
        slot: 1,
        serial: 1,
    }
}

fn sub(id: u32) -> Subscriber {
    Subscriber {
        conn: conn(),
        subscription_id: id,
    }
}

fn view(m: Message) -> MessageView {
    let mut b = BytesMut::new();
    m.encode(&mut b).expect("encodes");
    MessageView::parse(b.freeze()).expect("parses")
}

fn to_topic(name: &str, text: &str) -> Message {
    let mut m = Message::text(text);
    m.set_destination(Some(Destination::topic(name)));
    m
}

fn to_queue(name: &str, text: &str) -> Message {
    let mut m = Message::text(text);
    m.set_destination(Some(Destination::queue(name)));
    m
}

use DestinationKind::{Queue as Q, Topic as T};

/// Sleeps until the clock the broker reads reaches `due`.
fn wait_for(due: i64) {
    while queue::now_ms() < due {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// Topic routing.

#[test]
fn a_topic_message_reaches_exact_and_wildcard_subscribers_once_each() {
    let mut h = Harness::new();
    h.subscribe(1, T, "sales.eu.fr");
    h.subscribe(2, T, "sales.*.fr");
    h.subscribe(3, T, "sales.#");
    h.subscribe(4, T, "sales.us.*");
    h.publish(to_topic("sales.eu.fr", "m")).unwrap();
    let mut to: Vec<u32> = h.delivered().iter().map(|g| g.to).collect();
    to.sort();
    assert_eq!(to, [1, 2, 3]);
}

#[test]
fn hash_matches_the_topic_itself_and_any_depth_below() {
    let mut h = Harness::new();
    h.subscribe(1, T, "a.#");
    for topic in ["a", "a.b", "a.b.c.d"] {
        h.publish(to_topic(topic, topic)).unwrap();
    }
    h.publish(to_topic("b.a", "no")).unwrap();
    assert_eq!(h.texts_to(1), ["a", "a.b", "a.b.c.d"]);
}

#[test]
fn a_star_matches_exactly_one_word() {
    let mut h = Harness::new();
    h.subscribe(1, T, "a.*");
    for topic in ["a", "a.b", "a.b.c"] {
        h.publish(to_topic(topic, topic)).unwrap();
    }
    assert_eq!(h.texts_to(1), ["a.b"]);
}

#[test]
fn an_unsubscribed_pattern_gets_nothing_more() {
    let mut h = Harness::new();
    let handle = h.subscribe(1, T, "news");
    h.publish(to_topic("news", "one")).unwrap();
    assert_eq!(h.texts_to(1), ["one"]);
    h.broker.unsubscribe(handle, &sub(1), &[], &mut h.out);
    h.publish(to_topic("news", "two")).unwrap();
    assert!(h.delivered().is_empty());
    assert_eq!(h.broker.subscription_count(), 0);
}

#[test]
fn a_message_with_no_subscriber_goes_nowhere() {
    let mut h = Harness::new();
    let routed = h.publish(to_topic("quiet", "m")).unwrap();
    assert_eq!(routed.delivered, 0);
    assert!(h.delivered().is_empty());
}

// Selectors.

#[test]
fn a_selector_takes_only_what_it_selects() {
    let mut h = Harness::new();
    let selector = h
        .broker
        .parse_selector("units > 10 AND region = 'eu'")
        .unwrap();
    h.subscribe_with(1, T, "orders", |r| r.selector = selector.clone());
    h.subscribe(2, T, "orders");
    for (units, region) in [(5, "eu"), (20, "eu"), (20, "us")] {
        let m = to_topic("orders", &format!("{units}{region}"))
            .with_property("units", units as i64)
            .with_property("region", region);
        h.publish(m).unwrap();
    }
    let got = h.delivered();
    let to = |id| -> Vec<&str> {
        got.iter()
            .filter(|g| g.to == id)
            .map(|g| g.text.as_str())
            .collect()
    };
    assert_eq!(to(1), ["20eu"]);
    assert_eq!(to(2), ["5eu", "20eu", "20us"]);
}

#[test]
fn a_bad_selector_is_refused_with_a_reason() {
    let h = Harness::new();
    let e = h.broker.parse_selector("units >").unwrap_err();
    assert!(matches!(e, SubscribeError::Selector(_)), "{e}");
}

#[test]
fn a_selector_on_a_queue_consumer_leaves_the_rest_for_others() {
    let mut h = Harness::new();
    let red = h.broker.parse_selector("color = 'red'").unwrap();
    h.subscribe_with(1, Q, "paint", |r| r.selector = red.clone());
    for color in ["red", "blue", "red"] {
        h.publish(to_queue("paint", color).with_property("color", color))
            .unwrap();
    }
    assert_eq!(h.texts_to(1), ["red", "red"]);
    h.subscribe(2, Q, "paint");
    assert_eq!(h.texts_to(2), ["blue"]);
}

// Queues.

#[test]
fn queue_consumers_compete_and_each_message_goes_to_one() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "jobs");
    h.subscribe(2, Q, "jobs");
    for i in 0..10 {
        h.publish(to_queue("jobs", &i.to_string())).unwrap();
    }
    let got = h.delivered();
    assert_eq!(got.len(), 10);
    let mut texts: Vec<u32> = got.iter().map(|g| g.text.parse().unwrap()).collect();
    texts.sort();
    assert_eq!(texts, (0..10).collect::<Vec<_>>());
    assert!(got.iter().any(|g| g.to == 1) && got.iter().any(|g| g.to == 2));
}

#[test]
fn a_queue_keeps_messages_until_a_consumer_comes() {
    let mut h = Harness::new();
    h.publish(to_queue("later", "kept")).unwrap();
    assert!(h.delivered().is_empty());
    h.subscribe(1, Q, "later");
    assert_eq!(h.texts_to(1), ["kept"]);
}

#[test]
fn higher_priority_goes_first_and_equal_priority_in_order() {
    let mut h = Harness::new();
    for (text, priority) in [("low1", 1), ("high", 9), ("low2", 1), ("mid", 5)] {
        let mut m = to_queue("prio", text);
        m.priority = priority;
        h.publish(m).unwrap();
    }
    h.subscribe(1, Q, "prio");
    assert_eq!(h.texts_to(1), ["high", "mid", "low1", "low2"]);
}

#[test]
fn prefetch_bounds_what_a_consumer_holds_unacknowledged() {
    let mut h = Harness::new();
    for i in 0..5 {
        h.publish(to_queue("bounded", &i.to_string())).unwrap();
    }
    h.subscribe_with(1, Q, "bounded", |r| r.prefetch = 2);
    let first = h.delivered();
    assert_eq!(first.len(), 2);
    let ack = first[0].ack.clone().unwrap();
    assert!(h.broker.ack(&ack, &sub(1), &mut h.out));
    assert_eq!(h.texts_to(1), ["2"]);
}

#[test]
fn a_nacked_message_comes_again_with_its_delivery_count_raised() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "retry");
    h.publish(to_queue("retry", "m")).unwrap();
    let first = h.delivered();
    assert_eq!(first[0].count, 1);
    assert!(h
        .broker
        .nack(first[0].ack.as_ref().unwrap(), &sub(1), &mut h.out));
    let again = h.delivered();
    assert_eq!((again[0].text.as_str(), again[0].count), ("m", 2));
}

#[test]
fn a_message_delivered_too_often_goes_to_the_dead_letter_queue() {
    let mut h = Harness::with(|c| c.queues.max_deliveries = 2);
    h.subscribe(1, Q, "fragile");
    h.publish(to_queue("fragile", "poison")).unwrap();
    for _ in 0..2 {
        let got = h.delivered();
        assert_eq!(got.len(), 1);
        h.broker
            .nack(got[0].ack.as_ref().unwrap(), &sub(1), &mut h.out);
    }
    assert!(h.delivered().is_empty(), "not delivered a third time");
    h.subscribe(2, Q, "DLQ.fragile");
    assert_eq!(h.texts_to(2), ["poison"]);
}

#[test]
fn a_consumer_that_leaves_gives_its_unacknowledged_messages_to_the_next() {
    let mut h = Harness::new();
    let handle = h.subscribe(1, Q, "handover");
    h.publish(to_queue("handover", "m")).unwrap();
    assert_eq!(h.delivered().len(), 1);
    h.subscribe(2, Q, "handover");
    h.broker.unsubscribe(handle, &sub(1), &[], &mut h.out);
    let got = h.delivered();
    assert_eq!((got[0].to, got[0].count), (2, 2));
}

#[test]
fn a_full_queue_refuses_with_its_limit() {
    let mut h = Harness::with(|c| {
        c.queues.max_messages = 2;
        c.queues.full_policy = FullPolicy::Fail;
    });
    h.publish(to_queue("small", "1")).unwrap();
    h.publish(to_queue("small", "2")).unwrap();
    let e = h.publish(to_queue("small", "3")).unwrap_err();
    assert!(
        matches!(e, RouteError::QueueFull { ref queue, .. } if queue == "small"),
        "{e}"
    );
    assert!(h.broker.has_room("small", 1).is_err());
}

// Time: expiry and delivery delay.

#[test]
fn an_expired_message_is_not_delivered_and_goes_to_the_expiry_queue() {
    let mut h = Harness::new();
    let mut m = to_queue("perishable", "old");
    m.expiration = 1;
    h.publish(m).unwrap();
    h.subscribe(1, Q, "perishable");
    assert!(h.texts_to(1).is_empty());
    h.subscribe(2, Q, "ExpiryQueue");
    assert_eq!(h.texts_to(2), ["old"]);
}

#[test]
fn a_delayed_topic_message_arrives_once_its_time_comes() {
    let mut h = Harness::new();
    h.subscribe(1, T, "later");
    let mut m = to_topic("later", "soon");
    let due = queue::now_ms() + 100;
    m.delivery_time = due;
    h.publish(m).unwrap();
    h.broker.tick(&mut h.out);
    let early = h.delivered();
    // (Unless this machine stalled past the delivery time meanwhile.)
    assert!(
        early.is_empty() || queue::now_ms() >= due,
        "not before its time"
    );
    wait_for(due);
    h.broker.tick(&mut h.out);
    assert_eq!(h.texts_to(1), ["soon"]);
}

#[test]
fn a_delayed_queue_message_waits_in_its_queue() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "scheduled");
    let mut m = to_queue("scheduled", "due");
    let due = queue::now_ms() + 100;
    m.delivery_time = due;
    h.publish(m).unwrap();
    h.publish(to_queue("scheduled", "now")).unwrap();
    let early = h.texts_to(1);
    assert!(early == ["now"] || queue::now_ms() >= due, "{early:?}");
    wait_for(due);
    h.broker.tick(&mut h.out);
    let mut all = early;
    all.extend(h.texts_to(1));
    assert_eq!(all, ["now", "due"]);
}

// Persistence.

#[test]
fn a_persistent_message_enters_its_queue_once_stored() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "durable.q");
    let view = view(to_queue("durable.q", "kept").persistent());
    let routed = h
        .broker
        .publish(&view, Room::Refuse, Some(conn()), &mut h.out)
        .unwrap();
    assert!(routed.journaled);
    // Stored at once here; it enters the queue through the workers' sink.
    assert!(h.out.is_empty(), "not before the store confirmed it");
    assert_eq!(h.texts_to(1), ["kept"]);
    let records = lock(&h.store.records);
    assert!(
        matches!(records[0], Record::Enqueue { .. }),
        "{:?}",
        records[0]
    );
}

#[test]
fn an_acknowledged_persistent_message_is_ended_in_the_store() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "ended");
    h.publish(to_queue("ended", "m").persistent()).unwrap();
    let got = h.delivered();
    h.broker
        .ack(got[0].ack.as_ref().unwrap(), &sub(1), &mut h.out);
    let records = lock(&h.store.records);
    assert!(
        records.iter().any(|r| matches!(r, Record::End { .. })),
        "{records:?}"
    );
}

#[test]
fn a_non_persistent_message_is_not_stored() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "light");
    let mut m = to_queue("light", "m");
    m.delivery_mode = DeliveryMode::NonPersistent;
    h.publish(m).unwrap();
    assert_eq!(h.texts_to(1), ["m"]);
    assert!(lock(&h.store.records).is_empty());
}

// Transactions.

#[test]
fn a_commit_stores_its_messages_as_one_record_and_delivers_them_after() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "tx");
    let atomic = h.broker.begin_atomic(&mut h.out);
    for text in ["a", "b"] {
        let v = view(to_queue("tx", text).persistent());
        h.broker
            .publish(&v, Room::Overfill, Some(conn()), &mut h.out)
            .unwrap();
    }
    assert!(lock(&h.store.records).is_empty(), "nothing before the end");
    let _written = h.broker.end_atomic(atomic, Some(conn()), &mut h.out);
    let records = lock(&h.store.records).len();
    assert_eq!(records, 1, "one batch record");
    assert_eq!(h.texts_to(1), ["a", "b"]);
}

#[test]
fn a_commit_dropped_halfway_leaves_nothing_behind() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "tx");
    let _atomic = h.broker.begin_atomic(&mut h.out);
    let v = view(to_queue("tx", "lost").persistent());
    h.broker
        .publish(&v, Room::Overfill, Some(conn()), &mut h.out)
        .unwrap();
    // Never ended: a panic mid-commit ends the worker's thread, and its
    // routing context, which holds the commit, with it.
    h.out = Deliveries::new(1);
    assert!(lock(&h.store.records).is_empty());
    assert!(h.delivered().is_empty());
    // Routing in another context is not part of that commit.
    h.publish(to_queue("tx", "after").persistent()).unwrap();
    assert_eq!(h.texts_to(1), ["after"]);
}

#[test]
fn a_commit_belongs_to_its_routing_context_only() {
    let mut h = Harness::new();
    h.subscribe(1, Q, "tx");
    let mut elsewhere = Deliveries::new(1);
    let atomic = h.broker.begin_atomic(&mut elsewhere);
    // Routed through another context meanwhile: stored and queued at once.
    h.publish(to_queue("tx", "outside").persistent()).unwrap();
    assert_eq!(lock(&h.store.records).len(), 1);
    let v = view(to_queue("tx", "inside").persistent());
    h.broker
        .publish(&v, Room::Overfill, Some(conn()), &mut elsewhere)
        .unwrap();
    assert_eq!(lock(&h.store.records).len(), 1, "held by the commit");
    let _written = h.broker.end_atomic(atomic, Some(conn()), &mut elsewhere);
    assert_eq!(lock(&h.store.records).len(), 2, "the commit's one record");
    assert_eq!(h.texts_to(1), ["outside", "inside"]);
}

// Durable subscriptions.

#[test]
fn a_durable_subscription_keeps_messages_while_its_subscriber_is_away() {
    let mut h = Harness::new();
    let durable = |r: &mut SubscribeRequest<'_>| r.durable_name = "audit";
    let handle = h.subscribe_with(1, T, "events.#", durable);
    h.publish(to_topic("events.a", "first")).unwrap();
    let first = h.delivered();
    assert_eq!(first[0].text, "first");
    // A durable subscription's deliveries are acknowledged.
    h.broker
        .ack(first[0].ack.as_ref().unwrap(), &sub(1), &mut h.out);
    h.broker.unsubscribe(handle, &sub(1), &[], &mut h.out);
    h.publish(to_topic("events.b", "while away")).unwrap();
    assert!(h.delivered().is_empty());
    h.subscribe_with(2, T, "events.#", durable);
    assert_eq!(h.texts_to(2), ["while away"]);
    assert!(h.broker.durable_owner("client", "audit").is_some());
}

#[test]
fn a_durable_subscription_is_journalled_and_deleted_with_its_messages() {
    let mut h = Harness::new();
    let durable = |r: &mut SubscribeRequest<'_>| r.durable_name = "gone";
    let handle = h.subscribe_with(1, T, "t", durable);
    assert!(lock(&h.store.records)
        .iter()
        .any(|r| matches!(r, Record::Durable { .. })));
    h.broker.unsubscribe(handle, &sub(1), &[], &mut h.out);
    h.publish(to_topic("t", "kept")).unwrap();
    h.broker.unsubscribe_durable("client", "gone").unwrap();
    assert!(h.broker.durable_owner("client", "gone").is_none());
    h.subscribe_with(2, T, "t", durable);
    assert!(h.delivered().is_empty(), "a new subscription starts empty");
}

#[test]
fn a_durable_subscription_in_use_cannot_be_taken_again() {
    let mut h = Harness::new();
    let durable = |r: &mut SubscribeRequest<'_>| r.durable_name = "one";
    h.subscribe_with(1, T, "t", durable);
    let mut req = request(T, "t");
    req.durable_name = "one";
    let refused = h.broker.subscribe(req, sub(2), &mut h.out);
    assert!(
        matches!(refused, Err(SubscribeError::InUse(_))),
        "a second subscriber"
    );
}

// Retained messages.

#[test]
fn a_late_subscriber_gets_the_retained_messages_first() {
    let mut h = Harness::with(|c| {
        c.topics.retain = vec![RetainRule {
            pattern: "status.*".into(),
            last: 1,
        }]
    });
    h.publish(to_topic("status.a", "a1")).unwrap();
    h.publish(to_topic("status.a", "a2")).unwrap();
    h.publish(to_topic("status.b", "b1")).unwrap();
    h.subscribe(1, T, "status.*");
    assert_eq!(h.texts_to(1), ["a2", "b1"]);
    h.publish(to_topic("status.b", "b2")).unwrap();
    assert_eq!(h.texts_to(1), ["b2"]);
}

// Temporary queues.

#[test]
fn only_its_owner_may_consume_a_temporary_queue() {
    let mut h = Harness::new();
    let name = format!("{}replies", h.broker.temporary_prefix(1));
    h.broker.temporary_queue(&name, 1).unwrap();
    assert!(h.broker.temporary_queue(&name, 2).is_err(), "not another's");
    let stranger = Subscriber {
        conn: ConnectionRef {
            worker: 0,
            slot: 2,
            serial: 2,
        },
        subscription_id: 9,
    };
    let req = request(Q, &name);
    assert!(h.broker.subscribe(req, stranger, &mut h.out).is_err());
    h.broker.delete_queue(&name);
    assert!(h.broker.find_queue(&name).is_none());
}

#[test]
fn bytes_of_a_message_reach_every_subscriber_shared_not_copied() {
    let mut h = Harness::new();
    h.subscribe(1, T, "fan");
    h.subscribe(2, T, "fan");
    h.publish(to_topic("fan", "x")).unwrap();
    let blocks: Vec<Bytes> = h
        .out
        .drain(None, &[Spare::default()])
        .flat_map(|(_, b)| b.into_iter().map(|d| d.message))
        .collect();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].as_ptr(), blocks[1].as_ptr());
}
