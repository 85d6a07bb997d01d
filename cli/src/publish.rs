//! `herald pub DEST [BODY | -] [--file PATH] [--lines] [-P key=value]...`,
//! or `herald pub --queue NAME [BODY] ...`.

use std::io::{BufRead, Read};
use std::sync::mpsc;
use std::time::Duration;

use herald_client::{
    AckMode, Body, DeliveryMode, DestinationKind, Error, Message, Producer, Result, Value,
};

use crate::destination;
use crate::duration;

/// Arguments of `herald pub`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to publish: a topic name (sales.europe.smartphone),
    /// topic://NAME or queue://NAME. With --queue, the only positional
    /// argument is the body.
    #[arg(required_unless_present = "queue", value_name = "DEST")]
    destination: Option<String>,
    /// Text body; `-` reads it from standard input; none gives an empty
    /// body (or, with --lines, reads standard input).
    body: Option<String>,
    /// Send to this queue (NAME or queue://NAME) instead.
    #[arg(long)]
    queue: Option<String>,
    /// Read the body from this file (sent as text if it is UTF-8, as
    /// bytes if not). A file of more than 1 MiB is streamed as a large
    /// message's body, byte for byte, never read whole into memory.
    #[arg(long, value_name = "PATH", conflicts_with = "body")]
    file: Option<String>,
    /// One message per line of the input (standard input, `-` or --file),
    /// each sent as it is read, as `mosquitto_pub -l` does.
    #[arg(long, conflicts_with = "count")]
    lines: bool,
    /// A property, key=value; the value's type is inferred (true/false,
    /// integer, decimal, else string). Repeatable.
    #[arg(short = 'P', long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// The body's content type (application/json, ...), handed on to
    /// STOMP, MQTT 5 and native subscribers alike.
    #[arg(long, value_name = "TYPE")]
    content_type: Option<String>,
    /// Keep it as its topic's retained message, for subscribers to come
    /// (MQTT's retain); an empty body deletes the topic's.
    #[arg(long)]
    retain: bool,
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
    /// Time to live: not delivered after that (60s, 500ms; a bare
    /// number is milliseconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::millis)]
    ttl: Option<Duration>,
    /// Delivery delay: not delivered before that (5s; a bare number is
    /// milliseconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::millis)]
    delay: Option<Duration>,
    /// Where replies should go: a topic name, topic://NAME or
    /// queue://NAME.
    #[arg(long, value_name = "DEST")]
    reply_to: Option<String>,
    /// The correlation id.
    #[arg(long, value_name = "ID")]
    correlation_id: Option<String>,
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

/// Where the body comes from.
enum Source {
    /// The text given on the command line (or none).
    Given(Option<String>),
    /// Standard input.
    Stdin,
    /// A file.
    File(String),
}

/// What is sent: one body (`--count` times), a file streamed as a large
/// message's body (`--count` times), or a message per line.
enum Input {
    Whole(Body),
    Streamed(String, u64),
    Lines(Box<dyn BufRead>),
}

/// Files larger than this are streamed.
const STREAM_FROM: u64 = 1 << 20;

impl Source {
    /// All of it, as one body.
    fn read_all(self) -> Result<Body> {
        let bytes = match self {
            Source::Given(None) => return Ok(Body::Empty),
            Source::Given(Some(text)) => return Ok(Body::Text(text)),
            Source::Stdin => {
                let mut v = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut v)
                    .map_err(|e| Error::io("cannot read standard input", e))?;
                v
            }
            Source::File(path) => std::fs::read(&path)
                .map_err(|e| Error::io(format!("--file {path}: cannot read it"), e))?,
        };
        Ok(match String::from_utf8(bytes) {
            Ok(text) => Body::Text(text),
            Err(e) => Body::Bytes(e.into_bytes().into()),
        })
    }

    /// A reader of its lines.
    fn lines(self) -> Result<Box<dyn BufRead>> {
        Ok(match self {
            Source::Given(Some(text)) => Box::new(std::io::Cursor::new(text.into_bytes())),
            Source::Given(None) | Source::Stdin => Box::new(std::io::stdin().lock()),
            Source::File(path) => Box::new(std::io::BufReader::new(
                std::fs::File::open(&path)
                    .map_err(|e| Error::io(format!("--file {path}: cannot open it"), e))?,
            )),
        })
    }
}

pub fn run(target: &crate::target::Target, args: Args) -> Result<()> {
    let (destination, body) = match &args.queue {
        Some(queue) => {
            if args.body.is_some() {
                return Err(Error::InvalidArgument(
                    "with --queue, give only the body".into(),
                ));
            }
            (destination::queue(queue)?, args.destination.clone())
        }
        None => {
            let text = args.destination.as_deref().unwrap_or_default();
            (
                destination::parse(text, DestinationKind::Topic)?,
                args.body.clone(),
            )
        }
    };
    let source = match (&args.file, body) {
        (Some(path), _) => Source::File(path.clone()),
        (None, Some(dash)) if dash == "-" => Source::Stdin,
        (None, given) => Source::Given(given),
    };
    let mut template = Message::new(Body::Empty);
    for p in &args.properties {
        let (k, v) = parse_property(p)?;
        template.set_property(k, v);
    }
    if let Some(ct) = &args.content_type {
        template = template.with_content_type(ct.clone());
    }
    template.retain = args.retain;
    template.set_reply_to(match &args.reply_to {
        Some(r) => Some(destination::parse(r, DestinationKind::Topic)?),
        None => None,
    });
    template.set_correlation_id(args.correlation_id.clone());
    // A whole body is read before connecting: a file that cannot be read
    // costs the server nothing. Lines are sent as they are read.
    let input = match (args.lines, &source) {
        (true, _) => Input::Lines(source.lines()?),
        (false, Source::File(path)) => match std::fs::metadata(path) {
            Ok(m) if m.len() > STREAM_FROM => Input::Streamed(path.clone(), m.len()),
            _ => Input::Whole(source.read_all()?),
        },
        (false, _) => Input::Whole(source.read_all()?),
    };
    let connection = target.connect()?;
    let session = connection.create_session(AckMode::Auto)?;
    // The CLI's default is not JMS's: a message is persistent only when
    // asked to be.
    let mut producer = session.create_producer(&destination)?;
    producer.set_delivery_mode(match args.persistent {
        true => DeliveryMode::Persistent,
        false => DeliveryMode::NonPersistent,
    });
    if let Some(priority) = args.priority {
        producer.set_priority(priority)?;
    }
    producer.set_time_to_live(args.ttl.unwrap_or_default());
    producer.set_delivery_delay(args.delay.unwrap_or_default());
    let mut sender = Sender::new(producer);
    let sending = match input {
        Input::Whole(body) => {
            template.body = body;
            (0..args.count).try_for_each(|_| sender.send(template.clone()))
        }
        Input::Streamed(path, len) => (0..args.count).try_for_each(|_| {
            let file = std::fs::File::open(&path)
                .map_err(|e| Error::io(format!("--file {path}: cannot open it"), e))?;
            sender.stream(template.clone(), len, file)
        }),
        Input::Lines(lines) => lines.lines().try_for_each(|line| {
            let line = line.map_err(|e| Error::io("cannot read a line of input", e))?;
            let mut m = template.clone();
            m.body = Body::Text(line);
            sender.send(m)
        }),
    };
    let sent = sender.sent;
    let answered = sender.finish();
    connection.close()?;
    sending.and(answered)?;
    eprintln!("published {sent} message(s) to {destination}");
    Ok(())
}

/// Sends with a receipt each, so that a refusal (a forbidden or full
/// destination) is reported, not lost; collects the answers.
struct Sender {
    producer: Producer,
    answers: mpsc::Sender<Result<()>>,
    answered: mpsc::Receiver<Result<()>>,
    sent: u64,
}

impl Sender {
    fn new(producer: Producer) -> Sender {
        let (answers, answered) = mpsc::channel();
        Sender {
            producer,
            answers,
            answered,
            sent: 0,
        }
    }

    fn send(&mut self, m: Message) -> Result<()> {
        let answers = self.answers.clone();
        self.producer
            .send_async(m, move |result| drop(answers.send(result)))?;
        self.sent += 1;
        Ok(())
    }

    /// Streams a large message's body from `body`, and waits for its
    /// answer.
    fn stream(&mut self, m: Message, len: u64, body: impl Read) -> Result<()> {
        self.producer.send_stream(m, len, body)?;
        self.sent += 1;
        let _ = self.answers.send(Ok(()));
        Ok(())
    }

    /// Waits for every answer; the first refusal, if any. Every send is
    /// answered, if only by the end of the connection.
    fn finish(self) -> Result<()> {
        drop(self.answers);
        let mut first_error = None;
        for _ in 0..self.sent {
            match self.answered.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => break,
            }
        }
        first_error.map_or(Ok(()), Err)
    }
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
