//! A listener with a selector: only messages whose properties match reach
//! the callback, which runs on the connection's reader thread.
//!
//! `cargo run --release -p herald-client --example listener` with a server on
//! `herald://127.0.0.1:7777` (or set `HERALD_URL`). It publishes its own
//! sales so that it has something to hear, and ends after the big ones.

use std::sync::mpsc;
use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, ConsumerOptions, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let connection = ConnectionFactory::new(&url)?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;

    // Every sale in Europe of more than 2 units, on any product topic.
    let options = ConsumerOptions::default().selector("region = 'EU' AND units > 2");
    let big_sales = session.create_consumer_with(&Destination::topic("sales.europe.#"), options)?;
    let (heard, wait) = mpsc::channel();
    big_sales.set_message_listener(move |sale| {
        // The reader thread: do little here, hand the work on.
        let _ = heard.send(sale.body_text().unwrap_or_default().to_owned());
    })?;

    let producer = session.create_producer(&Destination::topic("sales.europe.laptop"))?;
    for (region, units) in [("EU", 3), ("EU", 1), ("UK", 9), ("EU", 5)] {
        let sale = Message::text(format!("{units} laptops in {region}"))
            .with_property("region", region)
            .with_property("units", units);
        producer.send(sale)?;
    }
    for _ in 0..2 {
        match wait.recv_timeout(Duration::from_secs(5)) {
            Ok(text) => println!("heard: {text}"),
            Err(_) => {
                return Err(herald_client::Error::InvalidArgument(
                    "nothing heard".into(),
                ))
            }
        }
    }
    connection.close()
}
