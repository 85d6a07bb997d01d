//! Failover: a factory with several servers and reconnection. When the
//! server goes away, the connection dials the list again (with back-off),
//! subscribes its consumers again and lets sends go on; the exception
//! listener hears of each step.
//!
//! `HERALD_URL=herald://127.0.0.1:7777,127.0.0.1:7778 cargo run --release -p herald-client --example failover`
//! with a server on either address. Stop the one it is on while it runs to
//! see it move.

use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, Destination, Error, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL")
        .unwrap_or_else(|_| "herald://127.0.0.1:7777,127.0.0.1:7778".into());
    let factory = ConnectionFactory::new(&url)?
        .with_reconnect(20, Duration::from_millis(100))
        .with_send_timeout(Duration::from_secs(10));
    let connection = factory.create_connection()?;
    connection.set_exception_listener(|event| match event {
        Error::Interrupted(why) => println!("lost the server ({why}); reconnecting"),
        Error::Resumed(server) => println!("resumed with {server}"),
        other => println!("connection error: {other}"),
    });
    println!("connected to {}", connection.connection_id());

    let session = connection.create_session(AckMode::Auto)?;
    let heartbeats = Destination::queue("examples.heartbeats");
    let consumer = session.create_consumer(&heartbeats)?;
    let producer = session.create_producer(&heartbeats)?;
    let rounds: u32 = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    for n in 0..rounds {
        // Persistent sends wait for the journal; during an outage they wait
        // for the connection to come back (up to the send timeout). One
        // cut off before its receipt has an unknown outcome: send it again
        // (a consumer may then see it twice).
        loop {
            match producer.send(Message::text(format!("beat {n}")).persistent()) {
                Ok(()) => break,
                Err(Error::ConnectionLost(why)) if !connection.is_closed() => {
                    println!("beat {n} interrupted ({why}); sending it again")
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(m) = consumer.receive(Duration::from_secs(10))? {
            println!("{}", m.body_text().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    connection.close()
}
