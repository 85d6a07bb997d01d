//! UNSUBSCRIBE: client → server, stop a subscription.
//!
//! `u32 subscription id [| u32 count | count × u64 delivery id]`
//!
//! Without the list, every unsettled delivery of the subscription returns
//! to its queue counted as delivered. With it, only the listed ones (those
//! the client handed to its application) count; the others never reached
//! the application and return as they were.

use bytes::{BufMut, BytesMut};

use super::ack::Settle;
use crate::cursor::Cursor;
use crate::error::Error;

/// Stops a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// The id given in SUBSCRIBE.
    pub subscription_id: u32,
    /// The unsettled deliveries that reached the application, if the
    /// client can tell: every other one returns uncounted. `None`: all
    /// count.
    pub seen: Option<Settle>,
}

impl Unsubscribe {
    /// Stops `subscription_id`, counting every unsettled delivery.
    pub fn new(subscription_id: u32) -> Unsubscribe {
        Unsubscribe {
            subscription_id,
            seen: None,
        }
    }

    pub(super) fn decode(body: &[u8]) -> Result<Unsubscribe, Error> {
        let mut c = Cursor::new(body);
        let subscription_id = c.u32("subscription id")?;
        let seen = match c.remaining() {
            0 => None,
            _ => Some(Settle::decode(c.rest())?),
        };
        Ok(Unsubscribe {
            subscription_id,
            seen,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.subscription_id);
        match &self.seen {
            Some(seen) => seen.encode(d),
            None => Ok(()),
        }
    }
}
