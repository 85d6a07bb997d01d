//! A transacted session: sends and acknowledgements take effect together
//! at `commit`, or not at all at `rollback`.
//!
//! `cargo run --release -p herald-client --example transaction` with a server on
//! `herald://127.0.0.1:7777` (or set `HERALD_URL`).

use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let connection = ConnectionFactory::new(&url)?.create_connection()?;
    let (orders, shipments) = (
        Destination::queue("examples.orders"),
        Destination::queue("examples.shipments"),
    );
    connection
        .create_session(AckMode::Auto)?
        .send(&orders, Message::text("order 7").persistent())?;

    // Take an order and ship it, in one transaction.
    let tx = connection.create_session(AckMode::Transacted)?;
    let incoming = tx.create_consumer(&orders)?;
    let outgoing = tx.create_producer(&shipments)?;
    let order = incoming
        .receive(Duration::from_secs(5))?
        .ok_or_else(|| herald_client::Error::InvalidArgument("no order".into()))?;
    outgoing.send(Message::text("shipment for order 7").persistent())?;
    // Changed our mind: the shipment is dropped and the order comes again.
    tx.rollback()?;
    let again = incoming
        .receive(Duration::from_secs(5))?
        .ok_or_else(|| herald_client::Error::InvalidArgument("no order".into()))?;
    println!(
        "{:?} came again after the rollback (redelivered {})",
        order.body_text(),
        again.redelivered
    );
    outgoing.send(Message::text("shipment for order 7").persistent())?;
    // Both at once: the order is consumed and the shipment sent.
    tx.commit()?;

    let check = connection.create_session(AckMode::Auto)?;
    let shipped = check.create_consumer(&shipments)?;
    let shipment = shipped.receive(Duration::from_secs(5))?;
    println!(
        "committed: {:?}",
        shipment.as_ref().and_then(|m| m.body_text())
    );
    connection.close()
}
