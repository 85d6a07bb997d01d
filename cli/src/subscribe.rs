//! `herald sub PATTERN` (or `--queue NAME`): one line per message; and
//! `herald browse QUEUE`.

use std::fmt::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use herald_client::{AckMode, Body, ConsumerOptions, Destination, Error, Message, Result};

/// How `herald sub` acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ack {
    /// On receipt.
    Auto,
    /// After each line is printed, everything so far.
    Client,
    /// After each line is printed, that message.
    Individual,
    /// Lazily, in batches.
    DupsOk,
}

/// Arguments of `herald sub`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Topic pattern: * matches one word, # zero or more.
    #[arg(required_unless_present = "queue", conflicts_with = "queue")]
    pattern: Option<String>,
    /// Consume from this queue instead of subscribing to a topic.
    #[arg(long)]
    queue: Option<String>,
    /// Only messages this JMS selector selects.
    #[arg(long)]
    selector: Option<String>,
    /// Acknowledgement mode.
    #[arg(long, value_enum, default_value_t = Ack::Auto)]
    ack: Ack,
    /// A durable subscription of this name (needs --client-id).
    #[arg(long, conflicts_with = "queue")]
    durable: Option<String>,
    /// Messages the server may send ahead unacknowledged (0 = its default).
    #[arg(long, default_value_t = 0)]
    prefetch: u32,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Exit when nothing arrived for this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
}

/// One line: the topic, the properties, the body.
pub fn format_message(m: &Message) -> String {
    let mut line = String::new();
    if let Some(d) = &m.destination {
        line.push_str(&d.name);
    }
    line.push_str(" [");
    for (i, (k, v)) in m.properties().iter().enumerate() {
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(line, "{sep}{k}={v}");
    }
    line.push_str("] ");
    match &m.body {
        Body::Empty => {}
        Body::Text(t) => line.push_str(t),
        Body::Bytes(b) => {
            let _ = write!(line, "<{} bytes>", b.len());
        }
        Body::Map(entries) => {
            line.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(line, "{sep}{k}: {v}");
            }
            line.push('}');
        }
    }
    line
}

pub fn run(target: &crate::target::Target, args: Args) -> Result<()> {
    let mode = match args.ack {
        Ack::Auto => AckMode::Auto,
        Ack::Client => AckMode::Client,
        Ack::Individual => AckMode::Individual,
        Ack::DupsOk => AckMode::DupsOk,
    };
    let destination = match (&args.queue, &args.pattern) {
        (Some(q), _) => Destination::queue(q.clone()),
        (None, p) => Destination::topic(p.clone().unwrap_or_default()),
    };
    let idle = match args.timeout {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(Error::InvalidArgument(format!(
                "--timeout {s} is not a positive number of seconds"
            )))
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(mode)?;
    let options = ConsumerOptions {
        selector: args.selector,
        prefetch: args.prefetch,
        durable_name: args.durable,
        ..ConsumerOptions::default()
    };
    let consumer = session.create_consumer_with(&destination, options)?;
    let (lost_tx, lost_rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = lost_tx.send(e);
    });
    eprintln!("subscribed to {destination}");
    let mut seen = 0;
    let mut last = Instant::now();
    while args.count.is_none_or(|n| seen < n) {
        if let Ok(e) = lost_rx.try_recv() {
            return Err(e);
        }
        match consumer.receive(Duration::from_millis(100))? {
            Some(m) => {
                println!("{}", format_message(&m));
                match mode {
                    AckMode::Client => session.acknowledge()?,
                    AckMode::Individual => session.acknowledge_message(&m)?,
                    _ => {}
                }
                seen += 1;
                last = Instant::now();
            }
            None if idle.is_some_and(|d| last.elapsed() >= d) => break,
            None => {}
        }
    }
    session.close()?;
    connection.close()
}

/// `herald browse QUEUE [--selector EXPR]`.
#[derive(Debug, clap::Args)]
pub struct BrowseArgs {
    /// The queue.
    queue: String,
    /// Only messages this JMS selector selects.
    #[arg(long, default_value = "")]
    selector: String,
}

/// Prints the messages waiting in a queue without consuming them.
pub fn browse(target: &crate::target::Target, args: BrowseArgs) -> Result<()> {
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let messages = session
        .create_browser(&Destination::queue(args.queue.clone()), &args.selector)?
        .messages()?;
    for m in &messages {
        println!("{}", format_message(m));
    }
    eprintln!("{} message(s) waiting in {}", messages.len(), args.queue);
    connection.close()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_show_topic_properties_and_body() {
        let mut m = Message::text("sold 3")
            .with_property("region", "EU")
            .with_property("units", 3);
        m.destination = Some(Destination::topic("sales.europe.smartphone"));
        assert_eq!(
            format_message(&m),
            "sales.europe.smartphone [region=EU units=3] sold 3"
        );
    }
}
