//! `herald sub PATTERN [--count N]`: one line per message.

use std::fmt::Write;
use std::sync::mpsc;

use herald_client::{AckMode, Body, Destination, Message, Result};

/// Arguments of `herald sub`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Topic pattern: * matches one word, # zero or more.
    pattern: String,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
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
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let consumer = session.create_consumer(&Destination::topic(args.pattern.clone()))?;
    let (lost_tx, lost_rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = lost_tx.send(e);
    });
    eprintln!("subscribed to {}", args.pattern);
    let mut seen = 0;
    while args.count.is_none_or(|n| seen < n) {
        if let Ok(e) = lost_rx.try_recv() {
            return Err(e);
        }
        if let Some(m) = consumer.receive(std::time::Duration::from_millis(200))? {
            println!("{}", format_message(&m));
            seen += 1;
        }
    }
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
