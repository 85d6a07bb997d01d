//! A CLIENT-acknowledgement worker: a job is acknowledged only once it is
//! done. One that fails is recovered and comes again, marked redelivered,
//! with its delivery count raised; after `queues.max_deliveries` it would
//! go to the dead-letter queue `DLQ.<queue>`.
//!
//! `cargo run --release -p herald-client --example worker` with a server on
//! `herald://127.0.0.1:7777` (or set `HERALD_URL`).

use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url = std::env::var("HERALD_URL").unwrap_or_else(|_| "herald://127.0.0.1:7777".into());
    let connection = ConnectionFactory::new(&url)?.create_connection()?;
    let jobs = Destination::queue("examples.jobs");

    let producer_session = connection.create_session(AckMode::Auto)?;
    for n in 1..=3 {
        producer_session.send(&jobs, Message::text(format!("job {n}")).persistent())?;
    }

    let session = connection.create_session(AckMode::Client)?;
    let consumer = session.create_consumer(&jobs)?;
    let mut failed_once = false;
    let mut done = 0;
    while done < 3 {
        let Some(job) = consumer.receive(Duration::from_secs(5))? else {
            break;
        };
        let text = job.body_text().unwrap_or_default().to_owned();
        if text == "job 2" && !failed_once {
            failed_once = true;
            println!("{text}: failed, giving it back");
            // Everything not yet acknowledged in this session comes again.
            session.recover()?;
            continue;
        }
        println!(
            "{text}: done (delivery {}, redelivered {})",
            job.delivery_count, job.redelivered
        );
        // CLIENT mode: acknowledges every message this session handed out.
        session.acknowledge()?;
        done += 1;
    }
    connection.close()
}
