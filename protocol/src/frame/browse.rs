//! BROWSE: client → server, look at a queue without consuming.
//!
//! `u32 subscription id | str16 queue | str16 selector`
//!
//! The server answers with one MESSAGE per message waiting in the queue
//! that the selector matches, in queue order, carrying this subscription
//! id, then a RECEIPT for the request id (which must not be 0). Browsed
//! messages stay in the queue and need no ACK.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::error::Error;

/// A snapshot request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Browse {
    /// The id the MESSAGE frames of this snapshot carry.
    pub subscription_id: u32,
    /// The queue's name.
    pub queue: String,
    /// A message selector; empty = every message.
    pub selector: String,
}

impl Browse {
    pub(super) fn decode(body: &[u8]) -> Result<Browse, Error> {
        let mut c = Cursor::new(body);
        let f = Browse {
            subscription_id: c.u32("subscription id")?,
            queue: c.str16("queue")?.to_owned(),
            selector: c.str16("selector")?.to_owned(),
        };
        c.finish()?;
        Ok(f)
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.subscription_id);
        put_str16(d, &self.queue, "queue")?;
        put_str16(d, &self.selector, "selector")
    }
}
