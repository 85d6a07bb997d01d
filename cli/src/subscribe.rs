//! `herald sub PATTERN` (or `--queue NAME`): one line per message; and
//! `herald browse QUEUE`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use herald_client::{AckMode, Body, ConsumerOptions, DestinationKind, Error, Result};

use crate::show::{self, Format};
use crate::{destination, duration};

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
    /// Topic pattern (* matches one word, # zero or more), topic://PATTERN
    /// or queue://NAME.
    #[arg(required_unless_present = "queue", conflicts_with = "queue")]
    pattern: Option<String>,
    /// Consume from this queue (NAME or queue://NAME) instead.
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
    /// This consumer's priority among those of its queue: while a higher
    /// one has credit, lower ones are not given messages.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// While this consumer is attached, its queue delivers to one
    /// consumer at a time (an exclusive consumer).
    #[arg(long)]
    exclusive: bool,
    /// DDS's time-based filter: at most one message per instance (of a
    /// keyed topic; else per topic) per this long, the newest held back
    /// delivered when it ends (500ms, 1s; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::seconds)]
    time_filter: Option<Duration>,
    /// DDS's history depth: of a keyed topic's kept messages, at most
    /// this many per instance when subscribing.
    #[arg(long)]
    history: Option<u32>,
    /// DDS's destination order by source timestamp: drop a message older
    /// than the newest taken of its instance.
    #[arg(long)]
    source_order: bool,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Exit when nothing arrived for this long (5s, 500ms; a bare number
    /// is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::seconds)]
    timeout: Option<Duration>,
    /// How each message prints.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Exit when the connection is lost, instead of reconnecting (and
    /// subscribing again) until the server is back.
    #[arg(long)]
    no_reconnect: bool,
}

pub fn run(target: &crate::target::Target, args: Args) -> Result<()> {
    let mode = match args.ack {
        Ack::Auto => AckMode::Auto,
        Ack::Client => AckMode::Client,
        Ack::Individual => AckMode::Individual,
        Ack::DupsOk => AckMode::DupsOk,
    };
    let destination = match (&args.queue, &args.pattern) {
        (Some(q), _) => destination::queue(q)?,
        (None, p) => destination::parse(p.as_deref().unwrap_or_default(), DestinationKind::Topic)?,
    };
    let mut factory = target.factory()?;
    if args.durable.is_some() && factory.config().client_id.is_empty() {
        return Err(Error::InvalidArgument(
            "--durable needs a client id to keep the subscription under: add --client-id ID".into(),
        ));
    }
    if !args.no_reconnect {
        factory = factory.with_reconnect(u32::MAX, Duration::from_millis(100));
    }
    let connection = crate::target::open(factory)?;
    let session = connection.create_session(mode)?;
    let options = ConsumerOptions {
        selector: args.selector,
        prefetch: args.prefetch,
        durable_name: args.durable,
        priority: args.priority,
        exclusive: args.exclusive,
        ..ConsumerOptions::default()
    };
    let mut options = match args.time_filter {
        Some(period) => options.time_filter(period),
        None => options,
    };
    if let Some(depth) = args.history {
        options = options.history(depth);
    }
    if args.source_order {
        options = options.order_by_source_timestamp();
    }
    let consumer = session.create_consumer_with(&destination, options)?;
    let (lost_tx, lost_rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = lost_tx.send(e);
    });
    eprintln!("subscribed to {destination}");
    let mut seen = 0;
    let mut last = Instant::now();
    let mut dropped = Dropped::default();
    while args.count.is_none_or(|n| seen < n) {
        dropped.report(consumer.dropped(), false);
        // What ends a connection that fails over (a shutdown, an
        // administrator, a failover) is news: it goes on, until it is
        // closed for good.
        let rides_out = |e: &Error| {
            !args.no_reconnect && !connection.is_closed() && !matches!(e, Error::Closed)
        };
        while let Ok(e) = lost_rx.try_recv() {
            match e {
                e if rides_out(&e) => eprintln!("herald: {e}"),
                e => return Err(e),
            }
        }
        match consumer.receive(Duration::from_millis(100))? {
            Some(m) => {
                match &m.body {
                    Body::Stream(_) => show::print_streamed(&m, &consumer, args.format)?,
                    _ => show::print(&m, args.format),
                }
                let acked = match mode {
                    AckMode::Client => session.acknowledge(),
                    AckMode::Individual => session.acknowledge_message(&m),
                    _ => Ok(()),
                };
                match acked {
                    Ok(()) => {}
                    // Its delivery ended with the connection: the server
                    // delivers the message again, marked redelivered,
                    // unless the acknowledgement reached it.
                    Err(e) if rides_out(&e) => eprintln!(
                        "herald: the acknowledgement of {} may not have reached the server ({e}): \
                         it may come again, marked redelivered",
                        m.message_id()
                    ),
                    Err(e) => return Err(e),
                }
                seen += 1;
                last = Instant::now();
            }
            None if args.timeout.is_some_and(|d| last.elapsed() >= d) => break,
            None => {}
        }
    }
    dropped.report(consumer.dropped(), true);
    session.close()?;
    connection.close()
}

/// Says on stderr, at most once a second and once more at the end, how
/// many messages the client dropped because they came faster than this
/// printed them: a silent gap would look like the server's loss.
#[derive(Default)]
struct Dropped {
    told: u64,
    at: Option<Instant>,
}

impl Dropped {
    fn report(&mut self, dropped: u64, last: bool) {
        let due = last
            || self
                .at
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if dropped > self.told && due {
            eprintln!(
                "herald: {dropped} message(s) dropped so far: they came faster than this printed \
                 them and the client holds at most pending_messages of them, and pending_bytes of \
                 their bodies (config/client.toml); a topic's are lost to this subscriber, a \
                 queue's come again"
            );
            self.told = dropped;
            self.at = Some(Instant::now());
        }
    }
}

/// `herald browse QUEUE [--selector EXPR]`.
#[derive(Debug, clap::Args)]
pub struct BrowseArgs {
    /// The queue: NAME or queue://NAME.
    queue: String,
    /// Only messages this JMS selector selects.
    #[arg(long, default_value = "")]
    selector: String,
    /// How each message prints.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Prints the messages waiting in a queue without consuming them.
pub fn browse(target: &crate::target::Target, args: BrowseArgs) -> Result<()> {
    let queue = destination::queue(&args.queue)?;
    let connection = target.connect()?;
    let session = connection.create_session(AckMode::Auto)?;
    let messages = session.create_browser(&queue, &args.selector)?.messages()?;
    connection.close()?;
    for m in &messages {
        show::print(m, args.format);
    }
    let shown = messages.len();
    let mut summary = match args.selector.as_str() {
        "" => format!("{shown} message(s) waiting in {}", queue.name),
        s => format!("{shown} message(s) in {} match {s:?}", queue.name),
    };
    // Scheduled (delayed) messages are not browsed before they are due:
    // the management API says how many there are, where it can be reached.
    if let Ok(scheduled) = crate::admin::scheduled(target, &queue.name) {
        if scheduled > 0 {
            summary.push_str(&format!(
                "; {scheduled} more scheduled for later delivery, not shown"
            ));
        }
    }
    eprintln!("{summary}");
    Ok(())
}
