//! `herald pub TOPIC [BODY] [-P key=value]... [--count N]`, or
//! `herald pub --queue NAME [BODY] ...`.

use herald_client::{AckMode, Destination, Error, Message, Result, Value};

/// Arguments of `herald pub`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Topic to publish to, e.g. sales.europe.smartphone. With --queue, the
    /// only positional argument is the body.
    #[arg(required_unless_present = "queue")]
    topic: Option<String>,
    /// Text body; none gives an empty body.
    body: Option<String>,
    /// Send to this queue instead of a topic.
    #[arg(long)]
    queue: Option<String>,
    /// A property, key=value; the value's type is inferred (true/false,
    /// integer, decimal, else string). Repeatable.
    #[arg(short = 'P', long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// How many copies to send.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Persistent delivery: each send returns once the server has it in its
    /// journal.
    #[arg(long)]
    persistent: bool,
    /// JMS priority, 0 (lowest) to 9.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
    priority: Option<u8>,
    /// Time to live in milliseconds: not delivered after that.
    #[arg(long, value_name = "MS")]
    ttl: Option<u64>,
    /// Delivery delay in milliseconds: not delivered before that.
    #[arg(long, value_name = "MS")]
    delay: Option<u64>,
    /// Where replies should go: topic://NAME, queue://NAME, or a topic name.
    #[arg(long, value_name = "DEST")]
    reply_to: Option<String>,
    /// The correlation id.
    #[arg(long, value_name = "ID")]
    correlation_id: Option<String>,
}

/// `queue://a.b`, `topic://a.b` or a bare topic name.
pub fn parse_destination(text: &str) -> Destination {
    Destination::from_uri(text)
}

/// Parses `key=value`.
pub fn parse_property(text: &str) -> Result<(String, Value)> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), Value::infer(v))),
        _ => Err(Error::InvalidArgument(format!(
            "property '{text}' is not key=value"
        ))),
    }
}

pub fn run(target: &crate::target::Target, args: Args) -> Result<()> {
    let (destination, body) = match args.queue {
        Some(queue) => {
            if args.body.is_some() {
                return Err(Error::InvalidArgument(
                    "with --queue, give only the body".into(),
                ));
            }
            (Destination::queue(queue), args.topic)
        }
        None => (
            Destination::topic(args.topic.unwrap_or_default()),
            args.body,
        ),
    };
    let mut message = match body {
        Some(text) => Message::text(text),
        None => Message::new(herald_client::Body::Empty),
    };
    for p in &args.properties {
        let (k, v) = parse_property(p)?;
        message.set_property(k, v);
    }
    if args.persistent {
        message = message.persistent();
    }
    if let Some(priority) = args.priority {
        message.priority = priority;
    }
    message.reply_to = args.reply_to.as_deref().map(parse_destination);
    message.correlation_id = args.correlation_id;
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let mut producer = session.create_producer(&destination)?;
    if let Some(ms) = args.delay {
        producer.set_delivery_delay(std::time::Duration::from_millis(ms));
    }
    let (answers, answered) = std::sync::mpsc::channel();
    for _ in 0..args.count {
        let mut m = message.clone();
        if let Some(ttl) = args.ttl {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            m.expiration = now.saturating_add(ttl.min(i64::MAX as u64) as i64);
        }
        // Every send asks for a receipt, so a refusal (a forbidden or
        // full destination) is reported, not lost.
        let answers = answers.clone();
        producer.send_async(m, move |result| drop(answers.send(result)))?;
    }
    // Every send is answered, if only by the end of the connection.
    let mut first_error = None;
    for _ in 0..args.count {
        match answered.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => break,
        }
    }
    connection.close()?;
    if let Some(e) = first_error {
        return Err(e);
    }
    eprintln!("published {} message(s) to {destination}", args.count);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_their_kind() {
        assert_eq!(parse_destination("queue://a.b"), Destination::queue("a.b"));
        assert_eq!(parse_destination("topic://a"), Destination::topic("a"));
        assert_eq!(parse_destination("a.b"), Destination::topic("a.b"));
    }

    #[test]
    fn properties_parse_with_inferred_types() {
        assert_eq!(
            parse_property("units=3").unwrap(),
            ("units".into(), Value::I32(3))
        );
        assert_eq!(
            parse_property("a=b=c").unwrap(),
            ("a".into(), Value::String("b=c".into()))
        );
        assert_eq!(
            parse_property("empty=").unwrap(),
            ("empty".into(), Value::String(String::new()))
        );
        assert!(parse_property("novalue").is_err());
        assert!(parse_property("=x").is_err());
    }
}
