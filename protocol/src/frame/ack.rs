//! ACK and NACK: client → server, settle deliveries by id.
//!
//! `u32 count | count × u64 delivery id`
//!
//! ACK: the deliveries were processed; the server forgets them. NACK: they
//! were not; the server redelivers them at once (delivery count + 1).

use bytes::{BufMut, BytesMut};

use crate::cursor::Cursor;
use crate::error::Error;

/// Delivery ids being settled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settle {
    /// The delivery ids, as MESSAGE frames gave them.
    pub delivery_ids: Vec<u64>,
}

impl Settle {
    pub(super) fn decode(body: &[u8]) -> Result<Settle, Error> {
        let mut c = Cursor::new(body);
        let n = c.u32("count")? as usize;
        // The count is checked against the body before anything is
        // allocated for it.
        if n.checked_mul(8) != Some(c.remaining()) {
            return Err(Error::invalid(
                "count",
                format!(
                    "{n} delivery ids do not fit the {} bytes that follow",
                    c.remaining()
                ),
            ));
        }
        let delivery_ids = (0..n)
            .map(|_| c.u64("delivery id"))
            .collect::<Result<_, _>>()?;
        Ok(Settle { delivery_ids })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        let n = u32::try_from(self.delivery_ids.len())
            .map_err(|_| Error::invalid("count", "too many delivery ids"))?;
        d.put_u32(n);
        for id in &self.delivery_ids {
            d.put_u64(*id);
        }
        Ok(())
    }
}
