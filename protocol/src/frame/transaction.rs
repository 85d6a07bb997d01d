//! Transactions: client → server, for JMS transacted sessions.
//!
//! A transaction is named by a `u32` the client picks (one per transacted
//! session); it opens with its first TX_SEND and ends with COMMIT or
//! ROLLBACK, after which the id may be used again.
//!
//! - TX_SEND: `u32 transaction id | message block`. The server holds the
//!   message until COMMIT.
//! - COMMIT: `u32 transaction id | u32 count | count × u64 delivery id`.
//!   The held messages are routed and the listed deliveries ACKed, all at
//!   once: persistent ones are journalled as one record, so after a crash
//!   the whole transaction is there or none of it. If the server cannot
//!   commit, its ERROR (`TransactionRolledBack`) says why and the
//!   transaction was rolled back instead.
//! - ROLLBACK: `u32 transaction id | u32 count | count × u32 subscription
//!   id`. The held messages are dropped and every unsettled delivery of
//!   the listed subscriptions is redelivered, as for RECOVER.

use bytes::{BufMut, BytesMut};

use super::{Recover, Settle};
use crate::cursor::Cursor;
use crate::error::Error;
use crate::message::MessageView;

/// A message held in a transaction.
#[derive(Debug, Clone)]
pub struct TxSend {
    /// The transaction.
    pub transaction_id: u32,
    /// The message.
    pub message: MessageView,
}

/// Makes a transaction's work happen.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Commit {
    /// The transaction.
    pub transaction_id: u32,
    /// Deliveries consumed in the transaction, acknowledged by the commit.
    pub consumed: Settle,
}

/// Undoes a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rollback {
    /// The transaction.
    pub transaction_id: u32,
    /// The transacted session's subscriptions, whose unsettled deliveries
    /// come again.
    pub subscriptions: Recover,
}

/// Splits the transaction id off a body.
fn transaction_id(body: &[u8]) -> Result<(u32, &[u8]), Error> {
    let mut c = Cursor::new(body);
    let id = c.u32("transaction id")?;
    Ok((id, c.rest()))
}

impl TxSend {
    pub(super) fn decode(body: bytes::Bytes) -> Result<TxSend, Error> {
        let (transaction_id, _) = transaction_id(&body)?;
        Ok(TxSend {
            transaction_id,
            message: MessageView::parse(body.slice(4..))?,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) {
        d.put_u32(self.transaction_id);
        d.put_slice(self.message.block());
    }
}

impl Commit {
    pub(super) fn decode(body: &[u8]) -> Result<Commit, Error> {
        let (transaction_id, rest) = transaction_id(body)?;
        Ok(Commit {
            transaction_id,
            consumed: Settle::decode(rest)?,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.transaction_id);
        self.consumed.encode(d)
    }
}

impl Rollback {
    pub(super) fn decode(body: &[u8]) -> Result<Rollback, Error> {
        let (transaction_id, rest) = transaction_id(body)?;
        Ok(Rollback {
            transaction_id,
            subscriptions: Recover::decode(rest)?,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.transaction_id);
        self.subscriptions.encode(d)
    }
}
