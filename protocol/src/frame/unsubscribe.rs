//! UNSUBSCRIBE: client → server, stop a subscription.
//!
//! `u32 subscription id`

use bytes::{BufMut, BytesMut};

use crate::cursor::Cursor;
use crate::error::Error;

/// Stops a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsubscribe {
    /// The id given in SUBSCRIBE.
    pub subscription_id: u32,
}

impl Unsubscribe {
    pub(super) fn decode(body: &[u8]) -> Result<Unsubscribe, Error> {
        let mut c = Cursor::new(body);
        let subscription_id = c.u32("subscription id")?;
        c.finish()?;
        Ok(Unsubscribe { subscription_id })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) {
        d.put_u32(self.subscription_id);
    }
}
