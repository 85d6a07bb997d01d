//! `herald pub TOPIC [BODY] [-P key=value]... [--count N]`

use herald_client::{AckMode, Destination, Error, Message, Result, Value};

/// Arguments of `herald pub`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Topic to publish to, e.g. sales.europe.smartphone.
    topic: String,
    /// Text body; none gives an empty body.
    body: Option<String>,
    /// A property, key=value; the value's type is inferred (true/false,
    /// integer, decimal, else string). Repeatable.
    #[arg(short = 'P', long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// How many copies to send.
    #[arg(long, default_value_t = 1)]
    count: u64,
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
    let mut message = match args.body {
        Some(text) => Message::text(text),
        None => Message::new(herald_client::Body::Empty),
    };
    for p in &args.properties {
        let (k, v) = parse_property(p)?;
        message.set_property(k, v);
    }
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let producer = session.create_producer(&Destination::topic(args.topic))?;
    for _ in 0..args.count {
        producer.send(message.clone())?;
    }
    // DISCONNECT's receipt comes after the server has handled every frame
    // sent before it, so this returns once all were routed.
    connection.close()?;
    eprintln!("published {} message(s)", args.count);
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
