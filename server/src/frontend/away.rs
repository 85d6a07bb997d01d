//! Sessions no connection holds: an MQTT client's persistent session
//! between its connections, and the will it left. Each may have a time:
//! the will goes out when its delay is over, the session (its durable
//! subscriptions and what they kept) ends when its expiry is; a client
//! that comes back in time cancels both, and finds the packet ids of its
//! QoS 2 exchanges in the middle (`PacketIds`), so that a publish it sends
//! again is not routed twice and a delivery it has is completed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use herald_protocol::MessageView;

use crate::broker::delivery::Deliveries;
use crate::broker::{Broker, Room};
use crate::sync::lock;

/// What waits for one client id.
#[derive(Default)]
struct Away {
    /// Its will, and when it goes out.
    will: Option<(Instant, MessageView)>,
    /// When the session ends, and its durable subscriptions' names.
    ends: Option<(Instant, Vec<String>)>,
    /// Its QoS 2 exchanges in the middle.
    ids: PacketIds,
}

/// The packet ids of a session's QoS 2 exchanges in the middle.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PacketIds {
    /// Publishes from the client answered with PUBREC, and not released
    /// (PUBREL) yet.
    pub received: Vec<u16>,
    /// Deliveries to it released (PUBREL sent) and not completed
    /// (PUBCOMP) yet: the PUBREL goes again when it is back.
    pub released: Vec<u16>,
}

impl PacketIds {
    fn is_empty(&self) -> bool {
        self.received.is_empty() && self.released.is_empty()
    }
}

/// What is due: wills to publish, and sessions to end (client id and the
/// names of their durable subscriptions).
#[derive(Default)]
pub struct Due {
    /// Wills whose time has come.
    pub wills: Vec<MessageView>,
    /// Sessions whose time has come.
    pub ended: Vec<(String, Vec<String>)>,
}

/// The sessions away, by client id.
#[derive(Default)]
pub struct AwaySessions(Mutex<HashMap<String, Away>>);

impl AwaySessions {
    /// A client left: its will goes out at its time, its session ends at
    /// its (either may be none), and its QoS 2 packet ids wait for its
    /// return.
    pub fn leave(
        &self,
        client_id: &str,
        will: Option<(Instant, MessageView)>,
        ends: Option<(Instant, Vec<String>)>,
        ids: PacketIds,
    ) {
        if will.is_none() && ends.is_none() && ids.is_empty() {
            return;
        }
        let away = Away { will, ends, ids };
        lock(&self.0).insert(client_id.to_owned(), away);
    }

    /// A client came back: nothing of its goes out or ends; its QoS 2
    /// packet ids.
    pub fn back(&self, client_id: &str) -> PacketIds {
        lock(&self.0)
            .remove(client_id)
            .map(|a| a.ids)
            .unwrap_or_default()
    }

    /// Publishes the wills due now and ends the sessions due now (their
    /// durable subscriptions, and what those kept, are deleted).
    pub fn run(&self, broker: &Broker, out: &mut Deliveries) {
        let due = self.due(Instant::now());
        for will in due.wills {
            let name = will.destination().to_owned();
            if let Err(e) = broker.publish_to(&will, &name, Room::Refuse, None, out) {
                log::warn!("a will on {name} is not published: {e}");
            }
        }
        for (client_id, names) in due.ended {
            log::info!("the session of client id '{client_id}' has expired");
            for name in names {
                let _ = broker.unsubscribe_durable(&client_id, &name);
            }
        }
    }

    /// Takes what is due at `now`. A session that ends takes its will with
    /// it, however long its delay.
    pub fn due(&self, now: Instant) -> Due {
        let mut due = Due::default();
        let mut away = lock(&self.0);
        if away.is_empty() {
            return due;
        }
        away.retain(|client_id, a| {
            let ends = a.ends.as_ref().is_some_and(|(at, _)| *at <= now);
            if ends || a.will.as_ref().is_some_and(|(at, _)| *at <= now) {
                due.wills.extend(a.will.take().map(|(_, will)| will));
            }
            if ends {
                due.ended
                    .extend(a.ends.take().map(|(_, names)| (client_id.clone(), names)));
                a.ids = PacketIds::default();
            }
            a.will.is_some() || a.ends.is_some() || !a.ids.is_empty()
        });
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::{Destination, Message};
    use std::time::Duration;

    fn will(body: &str) -> MessageView {
        let mut m = Message::text(body);
        m.set_destination(Some(Destination::topic("wills")));
        let mut b = bytes::BytesMut::new();
        m.encode(&mut b).unwrap();
        MessageView::parse(b.freeze()).unwrap()
    }

    #[test]
    fn wills_and_ends_come_due_in_time_and_a_return_cancels_them() {
        let away = AwaySessions::default();
        let now = Instant::now();
        let (soon, later) = (now + Duration::from_secs(1), now + Duration::from_secs(5));
        let ids = |received: Vec<u16>, released: Vec<u16>| PacketIds { received, released };
        let ends = |at, name: &str| Some((at, vec![name.to_owned()]));
        away.leave(
            "a",
            Some((soon, will("a"))),
            ends(later, "mqtt:a"),
            ids(vec![], vec![]),
        );
        away.leave(
            "b",
            Some((later, will("b"))),
            ends(soon, "mqtt:b"),
            ids(vec![7], vec![]),
        );
        away.leave("c", Some((soon, will("c"))), None, ids(vec![3], vec![4]));
        assert_eq!(away.back("c"), ids(vec![3], vec![4]), "back: its ids");
        assert!(away.due(now).wills.is_empty());
        let due = away.due(soon);
        assert_eq!(due.wills.len(), 2, "a's will on time, b's with its session");
        assert_eq!(due.ended, vec![("b".to_owned(), vec!["mqtt:b".to_owned()])]);
        let due = away.due(later);
        assert!(due.wills.is_empty());
        assert_eq!(due.ended, vec![("a".to_owned(), vec!["mqtt:a".to_owned()])]);
        assert!(
            away.0.lock().unwrap().is_empty(),
            "b's ids went with its session"
        );
        // A session that never ends keeps its ids until the client is back.
        away.leave("d", None, None, ids(vec![1, 2], vec![]));
        assert!(away.due(later + Duration::from_secs(3600)).ended.is_empty());
        assert_eq!(away.back("d"), ids(vec![1, 2], vec![]));
        assert!(away.back("d").is_empty());
    }
}
