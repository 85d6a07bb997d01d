//! A durable subscriber: messages published to its topic while it is away
//! are kept (persistent ones on disk) until it comes back. It needs a
//! client id, which names it together with the subscription's name.
//!
//! `cargo run --release -p herald-client --example durable_subscriber` with a server
//! on `herald://127.0.0.1:7777` (or set `HERALD_URL`).

use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let factory = ConnectionFactory::new(&url)?.with_client_id("examples-audit");
    let alerts = Destination::topic("examples.alerts.#");

    // Subscribe once, then go away.
    let connection = factory.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    session
        .create_durable_subscriber(&alerts, "audit")?
        .close()?;
    connection.close()?;

    // Published while nobody listens.
    let publisher = ConnectionFactory::new(&url)?.create_connection()?;
    publisher.create_session(AckMode::Auto)?.send(
        &Destination::topic("examples.alerts.disk"),
        Message::text("disk 91 % full").persistent(),
    )?;
    publisher.close()?;

    // Back: what was published meanwhile is waiting.
    let connection = factory.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let audit = session.create_durable_subscriber(&alerts, "audit")?;
    let kept = audit.receive(Duration::from_secs(5))?;
    println!(
        "kept while away: {:?}",
        kept.as_ref().and_then(|m| m.body_text())
    );
    // Done for good: delete the subscription and what it keeps.
    audit.close()?;
    session.unsubscribe("audit")?;
    connection.close()
}
