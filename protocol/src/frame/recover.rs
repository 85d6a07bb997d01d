//! RECOVER: client → server, redeliver everything unsettled on these
//! subscriptions (JMS `Session.recover()`).
//!
//! `u32 count | count × u32 subscription id`
//!
//! Every delivery of these subscriptions not yet ACKed or NACKed returns
//! to its queue as if NACKed, including deliveries still on their way to
//! the client. The RECEIPT follows every MESSAGE sent before the recovery
//! and precedes every redelivery, so a client drops what arrives for these
//! subscriptions between sending RECOVER and reading its RECEIPT.

use bytes::{BufMut, BytesMut};

use crate::cursor::Cursor;
use crate::error::Error;

/// Subscriptions to recover.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recover {
    /// Their ids.
    pub subscription_ids: Vec<u32>,
}

impl Recover {
    pub(super) fn decode(body: &[u8]) -> Result<Recover, Error> {
        let mut c = Cursor::new(body);
        let n = c.u32("count")? as usize;
        if n.checked_mul(4) != Some(c.remaining()) {
            return Err(Error::invalid(
                "count",
                format!(
                    "{n} subscription ids do not fit the {} bytes that follow",
                    c.remaining()
                ),
            ));
        }
        let subscription_ids = (0..n)
            .map(|_| c.u32("subscription id"))
            .collect::<Result<_, _>>()?;
        Ok(Recover { subscription_ids })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        let n = u32::try_from(self.subscription_ids.len())
            .map_err(|_| Error::invalid("count", "too many subscription ids"))?;
        d.put_u32(n);
        for id in &self.subscription_ids {
            d.put_u32(*id);
        }
        Ok(())
    }
}
