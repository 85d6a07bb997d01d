//! Publishing through diverts (see [`crate::diverts`]): the message where
//! it was sent (unless an exclusive divert takes it), and a copy to each
//! divert's target, addressed there and saying where it was diverted
//! from. A persistent message and its copies are kept in one journal
//! record, so that a crash keeps all of them or none.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use herald_protocol::{DeliveryMode, Message, MessageView};

use super::address::ConnectionRef;
use super::delivery::Deliveries;
use super::request::{Room, RouteError, Routed};
use super::Broker;
use crate::diverts::{Divert, Diverts};
use crate::store::large::{keep, LargeStore};
use crate::sync::{read, write};

/// The property a diverted copy carries: the destination it was sent to,
/// as a URI.
pub const DIVERTED_FROM_PROPERTY: &str = "HeraldDivertedFrom";

impl Broker {
    /// The diverts in force.
    pub fn diverts(&self) -> Arc<Diverts> {
        read(&self.diverts).clone()
    }

    /// Puts new diverts in force (a reload).
    pub fn set_diverts(&self, diverts: Diverts) {
        self.diverting.store(!diverts.is_empty(), Ordering::Relaxed);
        *write(&self.diverts) = Arc::new(diverts);
    }

    /// Routes `message`, sent to `name`, and its copies for `taking`.
    pub(super) fn publish_diverted(
        &self,
        message: &MessageView,
        name: &str,
        taking: &[&Divert],
        (room, from): (Room, Option<ConnectionRef>),
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        // One record for the message and its copies, unless a transaction
        // already makes one.
        let atomic = (message.delivery_mode == DeliveryMode::Persistent && out.commit.is_none())
            .then(|| self.begin_atomic(out));
        let routed = self.route_with_copies(message, name, taking, (room, from), out);
        let Some(atomic) = atomic else {
            return routed;
        };
        let written = self.end_atomic(atomic, from, out);
        routed.map(|routed| Routed {
            journaled: true,
            written,
            ..routed
        })
    }

    fn route_with_copies(
        &self,
        message: &MessageView,
        name: &str,
        taking: &[&Divert],
        (room, from): (Room, Option<ConnectionRef>),
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        let mut routed = match taking.iter().any(|d| d.rule.exclusive) {
            true => Routed::default(),
            false => self.route(message, name, room, from, out)?,
        };
        let original = format!("{}://{name}", message.destination_kind.as_str());
        for divert in taking {
            let Some(copy) = copy_to(message, divert, &original, self.large()) else {
                continue;
            };
            // A full target does not refuse the publish: the message went
            // where it was sent, and the divert's copy is what is lost.
            match self.publish_to(&copy, &divert.to.name, room, from, out) {
                Ok(more) => {
                    routed.delivered += more.delivered;
                    routed.journaled |= more.journaled;
                    routed.backlog = routed.backlog.or(more.backlog);
                }
                Err(e) if divert.rule.exclusive => return Err(e),
                Err(e) => log::warn!(
                    "divert '{}': a message on {original} was not copied: {e}",
                    divert.rule.name
                ),
            }
        }
        Ok(routed)
    }
}

/// `message` addressed to `divert`'s target, with where it was sent in
/// [`DIVERTED_FROM_PROPERTY`]; `None` if it does not re-encode (it was
/// validated on the way in, so it does).
fn copy_to(
    message: &MessageView,
    divert: &Divert,
    original: &str,
    large: Option<&Arc<LargeStore>>,
) -> Option<MessageView> {
    let mut copy = Message::decode(message.block(), 0).ok()?;
    copy.set_destination(Some(divert.to.clone()));
    copy.set_property(DIVERTED_FROM_PROPERTY, original);
    let mut block = BytesMut::with_capacity(message.block().len() + 64);
    copy.encode(&mut block).ok()?;
    MessageView::parse(keep(large, block.freeze())).ok()
}
