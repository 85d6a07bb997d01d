//! Request/reply: a `Requestor` sends with a temporary reply queue and
//! waits for the answer with the matching correlation id; the service
//! answers with `reply`.
//!
//! `cargo run --release -p herald-client --example request_reply` with a server on
//! `herald://127.0.0.1:7777` (or set `HERALD_URL`).

use std::sync::Arc;
use std::time::Duration;

use herald_client::{reply, AckMode, ConnectionFactory, Destination, Message, Requestor};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let factory = ConnectionFactory::new(&url)?;
    let service = Destination::queue("examples.prices");

    // The service, on a connection of its own.
    let server_side = factory.create_connection()?;
    // The listener answers with the session: it shares it.
    let session = Arc::new(server_side.create_session(AckMode::Auto)?);
    let requests = session.create_consumer(&service)?;
    let answering = session.clone();
    requests.set_message_listener(move |request| {
        let item = request.body_text().unwrap_or_default();
        let price = if item == "laptop" { 999 } else { 10 };
        if let Err(e) = reply(&answering, &request, Message::text(price.to_string())) {
            eprintln!("reply failed: {e}");
        }
    })?;

    // The client.
    let client = factory.create_connection()?;
    let requestor = Requestor::new(&client.create_session(AckMode::Auto)?, &service)?;
    for item in ["laptop", "pen"] {
        let answer = requestor.request(Message::text(item), Duration::from_secs(5))?;
        println!("{item}: {}", answer.body_text().unwrap_or_default());
    }
    client.close()?;
    server_side.close()
}
