//! Publishes property-tagged messages to a topic, and one persistent
//! message to a queue (which returns once the server has it on disk).
//!
//! `cargo run --release -p herald-client --example publisher` with a server on
//! `herald://127.0.0.1:7777` (or set `HERALD_URL`).

use herald_client::{AckMode, ConnectionFactory, DeliveryMode, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let connection = ConnectionFactory::new(&url)?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;

    let mut sales = session.create_producer(&Destination::topic("sales.europe.smartphone"))?;
    // A producer sends persistent messages unless told otherwise, as in
    // JMS; these events need no disk.
    sales.set_delivery_mode(DeliveryMode::NonPersistent);
    for (region, units) in [("EU", 3), ("UK", 1), ("EU", 7)] {
        let sale = Message::text(format!("sold {units}"))
            .with_property("region", region)
            .with_property("units", units);
        // Non-persistent: queued for the connection's writer, returns at once.
        sales.send(sale)?;
    }

    // Persistent: returns once the server has written it to its journal.
    let invoices = Destination::queue("examples.invoices");
    session.send(&invoices, Message::text("invoice 42").persistent())?;
    println!("published 3 sales and 1 persistent invoice");

    connection.close()
}
