//! `herald request DEST BODY` and `herald reply DEST BODY`: request/reply
//! from two terminals.

use std::time::Duration;

use herald_client::{AckMode, Message, Requestor, Result};

use crate::publish::parse_destination;
use crate::subscribe::format_message;

/// Arguments of `herald request`.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// Where requests go: queue://NAME, topic://NAME or a topic name.
    destination: String,
    /// The request's text.
    body: String,
    /// How long to wait for the reply, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout: u64,
}

/// Arguments of `herald reply`.
#[derive(Debug, clap::Args)]
pub struct ReplyArgs {
    /// Where requests arrive: queue://NAME, topic://NAME or a topic pattern.
    destination: String,
    /// The text of every reply.
    body: String,
    /// Exit after answering this many requests.
    #[arg(long)]
    count: Option<u64>,
}

/// Sends one request and prints its reply.
pub fn request(target: &crate::target::Target, args: RequestArgs) -> Result<()> {
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let requestor = Requestor::new(&session, &parse_destination(&args.destination))?;
    let reply = requestor.request(
        Message::text(args.body),
        Duration::from_millis(args.timeout),
    )?;
    println!("{}", format_message(&reply));
    connection.close()
}

/// Answers each request that arrives, printing it.
pub fn reply(target: &crate::target::Target, args: ReplyArgs) -> Result<()> {
    let connection = target.factory()?.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let consumer = session.create_consumer(&parse_destination(&args.destination))?;
    eprintln!("answering requests on {}", args.destination);
    let mut answered = 0;
    while args.count.is_none_or(|n| answered < n) {
        let Some(request) = consumer.receive(Duration::from_millis(200))? else {
            continue;
        };
        println!("{}", format_message(&request));
        match herald_client::reply(&session, &request, Message::text(args.body.clone())) {
            Ok(()) => answered += 1,
            Err(e) => eprintln!("herald: cannot answer {}: {e}", request.message_id),
        }
    }
    connection.close()
}
