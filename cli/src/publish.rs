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
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let producer = session.create_producer(&destination)?;
    for _ in 0..args.count {
        producer.send(message.clone())?;
    }
    // DISCONNECT's receipt comes after the server has handled every frame
    // sent before it, so this returns once all were routed.
    connection.close()?;
    eprintln!("published {} message(s) to {destination}", args.count);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
