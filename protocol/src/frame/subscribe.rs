//! SUBSCRIBE: client → server, start receiving from a destination.
//!
//! `u32 subscription id | u8 destination kind | str16 pattern`
//!
//! The subscription id is the client's choice, unique on its connection;
//! every MESSAGE for this subscription carries it.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::destination::DestinationKind;
use crate::error::Error;

/// Starts a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// The client's id for this subscription.
    pub subscription_id: u32,
    /// Topic or queue.
    pub kind: DestinationKind,
    /// A destination name, or for topics a pattern with `*` and `#`.
    pub pattern: String,
}

impl Subscribe {
    pub(super) fn decode(body: &[u8]) -> Result<Subscribe, Error> {
        let mut c = Cursor::new(body);
        let f = Subscribe {
            subscription_id: c.u32("subscription id")?,
            kind: DestinationKind::from_u8(c.u8("destination kind")?)?,
            pattern: c.str16("pattern")?.to_owned(),
        };
        c.finish()?;
        Ok(f)
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.subscription_id);
        d.put_u8(self.kind as u8);
        put_str16(d, &self.pattern, "pattern")
    }
}
