//! UNSUBSCRIBE_DURABLE: client → server, delete a durable subscription of
//! this connection's client id, and every message it kept.
//!
//! `str16 durable name`

use bytes::BytesMut;

use crate::cursor::{put_str16, Cursor};
use crate::error::Error;

/// Deletes a durable subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubscribeDurable {
    /// The name given when it was created.
    pub name: String,
}

impl UnsubscribeDurable {
    pub(super) fn decode(body: &[u8]) -> Result<UnsubscribeDurable, Error> {
        let mut c = Cursor::new(body);
        let name = c.str16("durable name")?.to_owned();
        c.finish()?;
        Ok(UnsubscribeDurable { name })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        put_str16(d, &self.name, "durable name")
    }
}
