//! Operating queues from a script, through the management API:
//! `herald queue show|create|delete`, `herald msg delete|move|copy` and
//! `herald dlq replay`.

use herald_client::{Error, Result};
use serde_json::{json, Value};

use crate::admin::{call, call_with, table, text, urlencode};
use crate::target::Target;

/// `herald queue ...`.
#[derive(Debug, clap::Subcommand)]
pub enum QueueVerb {
    /// A queue's figures and its messages (waiting, scheduled, in flight),
    /// without consuming them.
    Show {
        /// The queue: NAME or queue://NAME.
        name: String,
        /// Only messages this JMS selector selects.
        #[arg(long, default_value = "")]
        selector: String,
        /// Skip this many messages.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Show at most this many (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a queue, empty, before anything is sent to it.
    Create {
        /// The queue: NAME or queue://NAME.
        name: String,
    },
    /// Delete a queue that has no consumers, and every message it holds.
    Delete {
        /// The queue: NAME or queue://NAME.
        name: String,
    },
}

/// `herald msg ...`: one waiting message of a queue, named by its id.
#[derive(Debug, clap::Args)]
pub struct MsgArgs {
    /// What to do with it.
    #[arg(value_enum)]
    action: MsgAction,
    /// The queue it is in: NAME or queue://NAME.
    #[arg(long)]
    queue: String,
    /// Its message id (`herald queue show` lists them).
    #[arg(long)]
    id: String,
    /// For move and copy: where to, queue://NAME or topic://NAME (a bare
    /// name is a queue).
    #[arg(long, value_name = "DEST", required_if_eq_any = [("action", "move"), ("action", "copy")])]
    to: Option<String>,
}

/// What `herald msg` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MsgAction {
    /// Delete it.
    Delete,
    /// Move it to --to, as it is.
    Move,
    /// Copy it to --to, as a new message with an id of its own.
    Copy,
}

/// `herald dlq ...`.
#[derive(Debug, clap::Subcommand)]
pub enum DlqVerb {
    /// Send a dead-letter queue's messages back where each came from: all
    /// of them, or those named with --id.
    Replay {
        /// The dead-letter queue: DLQ.NAME, or the expiry queue.
        name: String,
        /// One message to replay. Repeatable.
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
    },
}

/// The queue a person named: `NAME` or `queue://NAME`, percent-encoded
/// for a path.
fn queue_path(name: &str) -> Result<(String, String)> {
    let queue = crate::destination::queue(name)?.name;
    let path = format!("/api/queues/{}", urlencode(&queue));
    Ok((queue, path))
}

/// `herald queue VERB`.
pub fn queue(target: &Target, verb: QueueVerb) -> Result<()> {
    match verb {
        QueueVerb::Show {
            name,
            selector,
            offset,
            limit,
            json,
        } => show(target, &name, &selector, (offset, limit), json),
        QueueVerb::Create { name } => {
            let (queue, _) = queue_path(&name)?;
            let a = call_with(target, "POST", "/api/queues", Some(json!({"name": queue})))?;
            match a["created"].as_bool() {
                Some(true) => println!("created queue {queue}"),
                _ => println!("queue {queue} exists already"),
            }
            Ok(())
        }
        QueueVerb::Delete { name } => {
            let (queue, path) = queue_path(&name)?;
            let a = call(target, "DELETE", &path)?;
            println!(
                "deleted queue {queue} and {} message(s)",
                text(&a["messages"])
            );
            Ok(())
        }
    }
}

/// `herald queue show`: the queue's row of `herald queues`, then a table
/// of its messages.
fn show(
    target: &Target,
    name: &str,
    selector: &str,
    (offset, limit): (usize, usize),
    as_json: bool,
) -> Result<()> {
    let (queue, path) = queue_path(name)?;
    let query = format!(
        "{path}/messages?offset={offset}&limit={limit}&selector={}",
        urlencode(selector)
    );
    let page = call(target, "GET", &query)?;
    if as_json {
        println!("{page}");
        return Ok(());
    }
    let queues = call(target, "GET", "/api/queues")?;
    if let Some(q) = queues
        .as_array()
        .into_iter()
        .flatten()
        .find(|q| q["name"] == queue.as_str())
    {
        println!(
            "{queue}: {} waiting, {} scheduled, {} in flight, {} consumer(s), {} enqueued, {} acknowledged",
            text(&q["depth"]),
            text(&q["scheduled"]),
            text(&q["in_flight"]),
            text(&q["consumers"]),
            text(&q["enqueued"]),
            text(&q["acknowledged"]),
        );
    }
    // The settings of its address in force (a queue only Redis holds, in
    // a cluster, has none here).
    if let Ok(detail) = call(target, "GET", &path) {
        if let Some(full) = detail["full"].as_str() {
            println!("full: it {full}");
        }
        if let Some(settings) = detail["settings"].as_object() {
            let shown: Vec<String> = settings
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "destination" | "matched"))
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect();
            println!("settings: {}", shown.join(" "));
            if let Some(matched) = settings["matched"].as_array().filter(|m| !m.is_empty()) {
                let names: Vec<String> = matched.iter().map(text).collect();
                println!("from [[addresses]]: {}", names.join(", "));
            }
        }
    }
    let messages = page["messages"].as_array().cloned().unwrap_or_default();
    let rows = messages.iter().map(message_row).collect();
    table(
        &[
            "ID",
            "STATE",
            "PRI",
            "DELIVERIES",
            "TIMESTAMP",
            "PROPERTIES",
            "BODY",
        ],
        rows,
    );
    let total = page["total"].as_u64().unwrap_or(0);
    let shown = messages.len() as u64;
    match selector {
        "" => eprintln!("{shown} of {total} message(s) shown"),
        s => eprintln!("{shown} of {total} message(s) that match {s:?} shown"),
    }
    Ok(())
}

/// One message of a page, as a table row.
fn message_row(m: &Value) -> Vec<String> {
    let properties = m["properties"]
        .as_object()
        .map(|p| {
            p.iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let body = &m["body"];
    let shown = match (body["text"].as_str(), body["hex"].as_str()) {
        (Some(t), _) => t
            .chars()
            .take(40)
            .collect::<String>()
            .escape_debug()
            .to_string(),
        (None, Some(h)) => format!("{} bytes: {}", text(&body["length"]), &h[..h.len().min(32)]),
        (None, None) => format!("{} ({})", text(&body["kind"]), text(&body["length"])),
    };
    vec![
        text(&m["id"]),
        text(&m["state"]),
        text(&m["priority"]),
        text(&m["deliveries"]),
        text(&m["timestamp"]),
        properties,
        shown,
    ]
}

/// `herald msg ACTION --queue NAME --id ID [--to DEST]`.
pub fn msg(target: &Target, args: MsgArgs) -> Result<()> {
    let (queue, path) = queue_path(&args.queue)?;
    let path = format!("{path}/messages/{}", urlencode(&args.id));
    let to = || {
        args.to
            .clone()
            .ok_or_else(|| Error::InvalidArgument("move and copy need --to DEST".into()))
    };
    match args.action {
        MsgAction::Delete => {
            call(target, "DELETE", &path)?;
            println!("deleted {} from {queue}", args.id);
        }
        MsgAction::Move => {
            let a = call_with(
                target,
                "POST",
                &format!("{path}/move"),
                Some(json!({"to": to()?})),
            )?;
            println!("moved {} from {queue} to {}", args.id, text(&a["to"]));
        }
        MsgAction::Copy => {
            let a = call_with(
                target,
                "POST",
                &format!("{path}/copy"),
                Some(json!({"to": to()?})),
            )?;
            println!(
                "copied {} from {queue} to {} as {}",
                args.id,
                text(&a["to"]),
                text(&a["copy"])
            );
        }
    }
    Ok(())
}

/// `herald dlq replay NAME [--id ID]...`.
pub fn dlq(target: &Target, verb: DlqVerb) -> Result<()> {
    let DlqVerb::Replay { name, ids } = verb;
    let (queue, path) = queue_path(&name)?;
    let body = (!ids.is_empty()).then(|| json!({"ids": ids}));
    let a = call_with(target, "POST", &format!("{path}/replay"), body)?;
    println!("replayed {} message(s) from {queue}", text(&a["moved"]));
    let failed = a["failed"].as_array().cloned().unwrap_or_default();
    for f in &failed {
        eprintln!("herald: {} stays: {}", text(&f["id"]), text(&f["error"]));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{} message(s) could not be replayed",
            failed.len()
        )))
    }
}
