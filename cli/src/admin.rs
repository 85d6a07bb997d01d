//! Admin commands: `herald topics`, `queues`, `connections`, `purge QUEUE`
//! and `stats`, through the management API (`--admin URL`, with `--user`
//! and `--password` where the server has users).

use std::time::Duration;

use herald_client::{Error, Result};
use serde_json::Value;

use crate::target::Target;

/// Arguments of `herald stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Samples to print before exiting; 0 = until interrupted.
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Milliseconds between samples.
    #[arg(long, default_value_t = 1000)]
    interval: u64,
}

/// Calls the management API and returns the JSON it answers.
pub(crate) fn call(target: &Target, method: &str, path: &str) -> Result<Value> {
    call_with(target, method, path, None)
}

/// Calls the management API with a JSON body, if any, and returns the
/// JSON it answers.
pub(crate) fn call_with(
    target: &Target,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let base = target.admin.trim_end_matches('/');
    if !base.contains("://") {
        return Err(Error::InvalidArgument(format!(
            "--admin {base}: a URL needs its scheme, as in http://{base}"
        )));
    }
    let url = format!("{base}{path}");
    let mut agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10));
    if base.starts_with("https://") {
        let ca = target.tls_ca.as_deref().map(std::path::Path::new);
        agent = agent.tls_config(herald_client::tls_client_config(ca)?);
    }
    // X-Herald: the server takes changes only with it (or as JSON).
    let mut request = agent.build().request(method, &url).set("X-Herald", "cli");
    if let Some(user) = &target.user {
        use base64::Engine;
        let password = target.password.clone().unwrap_or_default();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.set("Authorization", &format!("Basic {token}"));
    }
    let fail = |why: String| Error::InvalidArgument(format!("management API {base}: {why}"));
    let sent = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    let response = match sent {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            let body: Value = r.into_json().unwrap_or_default();
            let why = body["error"].as_str().unwrap_or("no reason given");
            return Err(fail(format!("{code}: {why}")));
        }
        Err(ureq::Error::Transport(t)) => {
            let why = match sniff(base) {
                Some("TLS") if base.starts_with("http://") => format!(
                    "that port speaks TLS: use --admin {} (and --tls-ca FILE if the system \
                     does not trust its certificate's CA)",
                    base.replacen("http://", "https://", 1)
                ),
                Some(other) if !base.starts_with("https://") => format!(
                    "that port speaks {other}, not HTTP: the management API listens on \
                     127.0.0.1:8161 unless [admin] listen says otherwise"
                ),
                _ => transport_failure(&t),
            };
            return Err(fail(why));
        }
    };
    response.into_json().map_err(|e| fail(e.to_string()))
}

/// What protocol the address of `base` (`http://HOST:PORT`) speaks, when
/// it answers an HTTP request as another of Herald's listeners would.
fn sniff(base: &str) -> Option<&'static str> {
    use std::io::{Read, Write};
    let authority = base.split_once("://")?.1.split('/').next()?;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .ok()?
        .next()?;
    let mut socket = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    socket.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = [0u8; 16];
    let n = socket.read(&mut answer).ok()?;
    match &answer[..n] {
        [b'H', b'R', ..] => Some("Herald's native protocol"),
        a if a.starts_with(b"ERROR\n") => Some("STOMP"),
        [0x15 | 0x16, 0x03, ..] => Some("TLS"),
        _ => None,
    }
}

/// Why the management API could not be asked, in one line that says what
/// to do.
fn transport_failure(t: &ureq::Transport) -> String {
    use ureq::ErrorKind;
    let text = format!("{t} {:?}", std::error::Error::source(t));
    if text.contains("certificate") || text.contains("UnknownIssuer") {
        return format!(
            "the server's certificate is not trusted ({}): name the CA that signed it with \
             --tls-ca FILE",
            t.message().unwrap_or("TLS handshake failed")
        );
    }
    match t.kind() {
        ErrorKind::ConnectionFailed => {
            "nothing answers there (connection refused): is the server running with its \
             [admin] listener on? --admin URL names another address"
                .into()
        }
        ErrorKind::Dns => "the host name does not resolve".into(),
        ErrorKind::BadStatus | ErrorKind::BadHeader => {
            "that port does not answer HTTP: is it the native protocol's or STOMP's? \
             The management API listens on 127.0.0.1:8161 unless [admin] listen says otherwise"
                .into()
        }
        ErrorKind::InvalidUrl | ErrorKind::UnknownScheme => {
            "not a URL the CLI can use: it reaches the management API at http://HOST:PORT \
             or https://HOST:PORT"
                .into()
        }

        _ => match t.message() {
            Some(m) => format!("{}: {m}", t.kind()),
            None => t.kind().to_string(),
        },
    }
}

/// Prints rows under a header, columns aligned.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn rows(list: &Value, keys: &[&str]) -> Vec<Vec<String>> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| keys.iter().map(|k| text(&item[*k])).collect())
                .collect()
        })
        .unwrap_or_default()
}

/// `herald topic ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TopicVerb {
    /// A topic's traffic, the subscriptions that take it, its retained
    /// messages and, for a keyed topic, its instances.
    Show {
        /// The topic: NAME or topic://NAME.
        name: String,
        /// Print the API's JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `herald topic` verb.
pub fn topic(target: &Target, verb: TopicVerb) -> Result<()> {
    let TopicVerb::Show { name, json } = verb;
    let name = name.strip_prefix("topic://").unwrap_or(&name);
    let path = format!("/api/topics/{}", urlencode(name));
    let topic = call(target, "GET", &path)?;
    let instances = call(target, "GET", &format!("{path}/instances"))?;
    if json {
        println!(
            "{}",
            serde_json::json!({"topic": topic, "instances": instances})
        );
        return Ok(());
    }
    println!(
        "{name}: {} published ({} bytes), {} deliveries, {} retained",
        text(&topic["messages_in"]),
        text(&topic["bytes_in"]),
        text(&topic["deliveries"]),
        topic["retained"].as_array().map_or(0, Vec::len),
    );
    println!();
    table(
        &[
            "PATTERN",
            "SELECTOR",
            "NAME",
            "DURABLE",
            "SHARED",
            "CONNECTION",
        ],
        rows(
            &topic["subscriptions"],
            &[
                "pattern",
                "selector",
                "name",
                "durable",
                "shared",
                "connection",
            ],
        ),
    );
    let key = instances["key"].as_array().cloned().unwrap_or_default();
    if key.is_empty() && instances["durability"] == "volatile" {
        return Ok(());
    }
    let key: Vec<String> = key.iter().map(text).collect();
    println!(
        "\nkey [{}], history {} (depth {}), durability {}, max_instances {}, max_samples_per_instance {}",
        key.join(", "),
        text(&instances["history"]),
        text(&instances["history_depth"]),
        text(&instances["durability"]),
        text(&instances["max_instances"]),
        text(&instances["max_samples_per_instance"]),
    );
    table(
        &["INSTANCE", "STATE", "SAMPLES"],
        rows(&instances["instances"], &["key", "state", "samples"]),
    );
    Ok(())
}

/// `herald topics`.
pub fn topics(target: &Target) -> Result<()> {
    let t = call(target, "GET", "/api/topics")?;
    table(
        &["TOPIC", "PUBLISHED", "BYTES", "DELIVERIES", "MSGS/S"],
        rows(
            &t["topics"],
            &["name", "messages_in", "bytes_in", "deliveries", "rate"],
        ),
    );
    println!();
    table(
        &["PATTERN", "SUBSCRIBERS"],
        rows(&t["patterns"], &["pattern", "subscribers"]),
    );
    if t["diverts"].as_array().is_some_and(|d| !d.is_empty()) {
        println!();
        table(
            &["DIVERT", "FROM", "TO", "SELECTOR", "EXCLUSIVE"],
            rows(
                &t["diverts"],
                &["name", "from", "to", "selector", "exclusive"],
            ),
        );
    }
    if t["strict"] == Value::Bool(true) {
        let declared = t["declared"].as_array().cloned().unwrap_or_default();
        println!("\ndeclared (strict mode): {}", declared.len());
        for name in &declared {
            println!("  {}", text(name));
        }
    }
    Ok(())
}

/// `herald queues`.
pub fn queues(target: &Target) -> Result<()> {
    let q = call(target, "GET", "/api/queues")?;
    let keys = [
        "name",
        "depth",
        "in_flight",
        "consumers",
        "enqueued",
        "acknowledged",
        "enqueue_rate",
        "dequeue_rate",
    ];
    table(
        &[
            "QUEUE",
            "DEPTH",
            "IN FLIGHT",
            "CONSUMERS",
            "ENQUEUED",
            "ACKED",
            "IN/S",
            "OUT/S",
        ],
        rows(&q, &keys),
    );
    Ok(())
}

/// `herald connections`.
pub fn connections(target: &Target) -> Result<()> {
    let c = call(target, "GET", "/api/connections")?;
    let keys = [
        "id",
        "client_id",
        "user",
        "peer",
        "protocol",
        "subscriptions",
        "bytes_in",
        "bytes_out",
    ];
    table(
        &[
            "ID",
            "CLIENT ID",
            "USER",
            "PEER",
            "PROTOCOL",
            "SUBS",
            "BYTES IN",
            "BYTES OUT",
        ],
        rows(&c, &keys),
    );
    Ok(())
}

/// `herald purge QUEUE`.
pub fn purge(target: &Target, queue: &str) -> Result<()> {
    let queue = crate::destination::queue(queue)?.name;
    let path = format!("/api/queues/{}/purge", urlencode(&queue));
    let a = call(target, "POST", &path)?;
    println!("purged {} message(s) from {queue}", text(&a["purged"]));
    Ok(())
}

/// Queue names are destination names: letters, digits and `._-` need no
/// escaping, anything else is percent-encoded.
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `herald reload`: the server re-reads its config file.
pub fn reload(target: &Target) -> Result<()> {
    let a = call(target, "POST", "/api/reload")?;
    println!("reloaded {}", text(&a["reloaded"]));
    Ok(())
}

/// Scheduled (delayed) messages in a queue, which browsing does not show
/// before they are due.
pub fn scheduled(target: &Target, queue: &str) -> Result<u64> {
    let list = call(target, "GET", "/api/queues")?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .find(|q| q["name"] == queue)
        .and_then(|q| q["scheduled"].as_u64())
        .unwrap_or(0))
}

/// `herald stats`: one line per interval, rates from the server's samples.
pub fn stats(target: &Target, args: StatsArgs) -> Result<()> {
    let mut printed = 0;
    loop {
        let server = call(target, "GET", "/api/server")?;
        let history = call(target, "GET", "/api/history")?;
        let queues = call(target, "GET", "/api/queues")?;
        if printed == 0 {
            // Once the server answered: an error alone, without a header.
            println!(
                "{:>10} {:>10} {:>12} {:>12} {:>8}",
                "IN/S", "OUT/S", "CONNECTIONS", "QUEUED", "DROPPED"
            );
        }
        let last = history
            .as_array()
            .and_then(|h| h.last())
            .cloned()
            .unwrap_or_default();
        let queued: u64 = queues
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q["depth"].as_u64())
            .sum();
        println!(
            "{:>10.1} {:>10.1} {:>12} {:>12} {:>8}",
            last["in_rate"].as_f64().unwrap_or(0.0),
            last["out_rate"].as_f64().unwrap_or(0.0),
            text(&server["connections"]),
            queued,
            text(&server["dropped"]),
        );
        printed += 1;
        if args.count != 0 && printed >= args.count {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(args.interval));
    }
}
