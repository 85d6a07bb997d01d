//! `herald request DEST BODY` and `herald reply DEST BODY`: request/reply
//! from two terminals.

use std::time::Duration;

use herald_client::{AckMode, DestinationKind, Message, Requestor, Result};

use crate::show::{self, Format};
use crate::{destination, duration};

/// Arguments of `herald request`.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// Where requests go: a topic name, topic://NAME or queue://NAME.
    destination: String,
    /// The request's text.
    body: String,
    /// How long to wait for the reply (5s, 500ms; a bare number is
    /// seconds).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::seconds)]
    timeout: Duration,
    /// How the reply prints [default: its body alone; with --verbose,
    /// the text line with its destination and properties].
    #[arg(long, value_enum)]
    format: Option<Format>,
}

/// Arguments of `herald reply`.
#[derive(Debug, clap::Args)]
pub struct ReplyArgs {
    /// Where requests arrive: a topic pattern, topic://PATTERN or
    /// queue://NAME.
    destination: String,
    /// The text of every reply.
    body: String,
    /// Exit after answering this many requests.
    #[arg(long)]
    count: Option<u64>,
    /// How each request prints.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Sends one request and prints its reply.
pub fn request(target: &crate::target::Target, args: RequestArgs) -> Result<()> {
    let to = destination::parse(&args.destination, DestinationKind::Topic)?;
    let connection = target.connect()?;
    let session = connection.create_session(AckMode::Auto)?;
    let requestor = Requestor::new(&session, &to)?;
    let reply = requestor.request(Message::text(args.body), args.timeout)?;
    let format = match (args.format, target.verbose) {
        (Some(f), _) => f,
        (None, true) => Format::Text,
        (None, false) => Format::Raw,
    };
    show::print(&reply, format);
    connection.close()
}

/// Answers each request that arrives, printing it.
pub fn reply(target: &crate::target::Target, args: ReplyArgs) -> Result<()> {
    let from = destination::parse(&args.destination, DestinationKind::Topic)?;
    let connection = target.connect()?;
    let session = connection.create_session(AckMode::Auto)?;
    let consumer = session.create_consumer(&from)?;
    eprintln!("answering requests on {from}");
    let mut answered = 0;
    while args.count.is_none_or(|n| answered < n) {
        let Some(request) = consumer.receive(Duration::from_millis(200))? else {
            continue;
        };
        show::print(&request, args.format);
        match herald_client::reply(&session, &request, Message::text(args.body.clone())) {
            Ok(()) => answered += 1,
            Err(e) => eprintln!("herald: cannot answer {}: {e}", request.message_id()),
        }
    }
    connection.close()
}
