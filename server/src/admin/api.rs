//! The JSON API's routes and handlers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post, put};
use axum::Json;
use bytes::BytesMut;
use herald_protocol::{DeliveryMode, Destination, DestinationKind, Message, MessageView, Value};
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::messages;
use super::state::{now_s, process_footprint, reload as reload_config, ApiError, AppState, Route};
use super::users;
use crate::broker::{Room, RouteError};
use crate::cluster::settings::Change;
use crate::frontend::{peer_name, Closing, ConnView, Notice, Protocol};
use crate::sync::lock;

type ApiResult = Result<Json<Json_>, ApiError>;

/// How long the connection list waits for the workers to describe theirs.
const DESCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Messages a replay by id may name in one request.
const MAX_REPLAY_IDS: usize = 1000;

/// Every route of the interface, the OpenAPI document's source.
pub(crate) fn routes() -> Vec<Route> {
    let r = |method: Method, path, summary, handler| Route {
        path,
        takes_body: false,
        method,
        summary,
        handler,
    };
    let with_body = |route: Route| Route {
        takes_body: true,
        ..route
    };
    vec![
        r(Method::GET, "/", "The web console", get(super::console::page)),
        r(Method::GET, "/console.js", "The web console's script", get(super::console::script)),
        r(Method::GET, "/openapi.json", "This document", get(super::openapi::document)),
        r(Method::GET, "/metrics", "Prometheus metrics, text exposition format", get(super::metrics::metrics)),
        r(Method::GET, "/api/server", "Version, uptime, listeners, totals", get(server)),
        r(Method::GET, "/api/health", "Liveness", get(health)),
        r(Method::GET, "/api/ready", "Readiness: accepting connections", get(ready)),
        r(Method::GET, "/api/history", "Messages a second in and out: a sample a second for five minutes (?window=5m), or every ten seconds for an hour (?window=1h); ?queue=NAME adds a queue's depth and rates, ?topic=NAME a topic's rate (in either window; an hour for the first 1,000 queues and topics)", get(super::history::history)),
        r(Method::GET, "/api/topics", "Topics with traffic, subscription patterns, declared topics", get(topics)),
        with_body(r(Method::POST, "/api/topics", "Declare a topic (strict mode): {\"name\": ...}", post(declare_topic))),
        r(Method::GET, "/api/topics/{name}", "A topic: its traffic, the subscriptions that take it, its retained messages", get(super::topic::topic)),
        r(Method::GET, "/api/topics/{name}/instances", "A keyed topic's instances: key, state, samples kept", get(super::topic::instances)),
        r(Method::DELETE, "/api/topics/{name}", "Remove a declared topic and its subtree (strict mode)", delete(undeclare_topic)),
        r(Method::GET, "/api/subscriptions", "Every subscription, live and durable", get(subscriptions)),
        r(Method::DELETE, "/api/subscriptions/{client_id}/{name}", "Delete a durable subscription without a consumer", delete(delete_subscription)),
        r(Method::GET, "/api/queues", "Queues with depth, in flight, consumers, rates", get(queues)),
        with_body(r(Method::POST, "/api/queues", "Create a queue: {\"name\": ...}", post(messages::create_queue))),
        r(Method::GET, "/api/queues/{name}", "A queue: its figures, the memory bound it is at if any, and the settings of its address in force", get(super::addresses::queue)),
        r(Method::DELETE, "/api/queues/{name}", "Delete a queue without consumers, and the messages it holds", delete(messages::delete_queue)),
        r(Method::POST, "/api/queues/{name}/purge", "Drop the waiting messages of a queue", post(purge)),
        with_body(r(Method::POST, "/api/queues/{name}/replay", "Move a dead-letter queue's messages back where they came from: all, or {\"ids\": [...]}", post(replay))),
        r(Method::GET, "/api/queues/{name}/messages", "Browse a queue without consuming: ?offset=&limit=&selector=", get(messages::browse)),
        r(Method::DELETE, "/api/queues/{name}/messages/{id}", "Delete one waiting message", delete(messages::delete_message)),
        with_body(r(Method::POST, "/api/queues/{name}/messages/{id}/move", "Move one waiting message: {\"to\": \"queue://NAME\" or \"topic://NAME\"}", post(messages::move_message))),
        with_body(r(Method::POST, "/api/queues/{name}/messages/{id}/copy", "Copy one waiting message, as a new message: {\"to\": ...}", post(messages::copy_message))),
        r(Method::GET, "/api/addresses", "The [[addresses]] entries in force, least specific first; ?destination=queue://NAME or topic://NAME adds the settings they give it", get(super::addresses::addresses)),
        r(Method::GET, "/api/diverts", "The diverts in force: a copy of each message a divert's from matches (and its selector selects) filed into its to by the broker", get(super::addresses::diverts)),
        with_body(r(Method::PUT, "/api/diverts/{name}", "Add or replace a divert: {\"from\": \"topic://PATTERN\", \"to\": \"queue://NAME\", \"selector\", \"exclusive\"}; written to the config file and reloaded", put(super::addresses::put_divert))),
        r(Method::DELETE, "/api/diverts/{name}", "Remove a divert from the config file", delete(super::addresses::delete_divert)),
        r(Method::GET, "/api/connections", "Open connections", get(connections)),
        r(Method::DELETE, "/api/connections/{id}", "Close a connection", delete(close_connection)),
        with_body(r(Method::POST, "/api/publish", "Publish a message: {\"destination\", \"body\", \"properties\", \"persistent\", \"priority\", \"ttl_ms\"}; answers how many subscriptions and queues it was routed to", post(publish))),
        r(Method::POST, "/api/reload", "Re-read users, permissions, limits and settings per address from the config file", post(reload)),
        r(Method::GET, "/api/users", "Users (no password hashes) and roles in force, and whether this interface may change them", get(users::users)),
        with_body(r(Method::PUT, "/api/users/{name}", "Add or replace a user: {\"password\": the password (hashed with Argon2 here) or an Argon2 PHC hash, none to keep it; \"roles\": [...]}; written to the config file and reloaded, or in a cluster made on every node", put(users::put_user))),
        r(Method::DELETE, "/api/users/{name}", "Remove a user: from the config file, or in a cluster one added through this interface", delete(users::delete_user)),
        with_body(r(Method::PUT, "/api/roles/{name}", "Add or replace a role: {\"publish\", \"consume\", \"browse\", \"durable\": [patterns], \"monitor\", \"admin\": bool}; as a user is", put(users::put_role))),
        r(Method::DELETE, "/api/roles/{name}", "Remove a role no user has: from the config file, or in a cluster one added through this interface", delete(users::delete_role)),
    ]
}

async fn server(State(state): State<AppState>) -> ApiResult {
    let s = &state.shared;
    let (messages_in, messages_out, dropped) = state.totals();
    let a = &state.addresses;
    let addr = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string());
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": s.started.elapsed().as_secs(),
        "workers": s.workers.len(),
        "connections": s.open_connections.load(Ordering::Relaxed),
        "subscriptions": s.broker.subscription_count(),
        "messages_in": messages_in,
        "messages_out": messages_out,
        "dropped": dropped,
        "cluster": state.cluster.as_deref().map(|c| {
            let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            let st = &c.stats;
            let neighbours: Vec<Json_> = lock(&c.neighbours)
                .iter()
                .map(|(prefix, ids)| json!({"key_prefix": prefix, "nodes": ids}))
                .collect();
            json!({
                "node_id": c.node_id,
                "key_prefix": c.keys.prefix(),
                "other_clusters": neighbours,
                "connected": st.connected(),
                "primary": primary(c),
                "nodes": nodes(c),
                "published": load(&st.published),
                "received": load(&st.received),
                "dropped": load(&st.dropped),
                "queue_appended": load(&st.appended),
                "queue_read": load(&st.read),
                "queue_claimed": load(&st.claimed),
                "redirected": load(&st.redirected),
            })
        }),
        "process": process_footprint().map(|(rss_bytes, threads)| json!({
            "rss_bytes": rss_bytes,
            "threads": threads,
        })),
        "listeners": {
            "native": addr(a.native),
            "stomp": addr(a.stomp),
            "stomp_ws": addr(a.stomp_ws),
            "tls": addr(a.tls),
            "mqtt": addr(a.mqtt.tcp),
            "mqtt_tls": addr(a.mqtt.tls),
            "mqtt_ws": addr(a.mqtt.websocket),
            "amqp": addr(a.amqp),
            "amqp_tls": addr(a.amqp_tls),
            "amqp_ws": addr(a.amqp_ws),
            "admin": addr(a.admin),
        },
        "config": {
            "strict": s.config.topics.strict,
            "auth_required": s.config.auth.required,
            "journal_fsync": format!("{:?}", s.config.journal.fsync).to_lowercase(),
            "max_connections": s.limits.get(&s.limits.max_connections),
            "max_pending_bytes": s.limits.get(&s.limits.max_pending_bytes),
            "max_messages_per_queue": s.config.queues.max_messages,
        },
        "started": herald_protocol::utc::format_ms(
            (now_s() * 1000.0) as i64 - s.started.elapsed().as_millis() as i64
        ),
        "config_file": s.config.source.as_ref().map(|p| p.display().to_string()),
        "settings": settings(&s.config),
        "journal": journal(&state),
        "health": "ok",
    })))
}

/// The configuration in effect, as JSON, its secrets hidden: users'
/// password hashes and a password in the Redis URL.
fn settings(config: &crate::config::Config) -> Json_ {
    let mut all = serde_json::to_value(config).unwrap_or_default();
    if let Some(users) = all["auth"]["users"].as_array_mut() {
        for user in users {
            user["password"] = json!("(hidden)");
        }
    }
    if let Some(url) = all["cluster"]["redis"].as_str() {
        all["cluster"]["redis"] = json!(hide_password(url));
    }
    all
}

/// `scheme://user:password@rest` with the password replaced.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:(hidden)@{host}")
        }
        None => url.to_owned(),
    }
}

/// The journal's directory, its segments and their size, and the disk.
fn journal(state: &AppState) -> Json_ {
    let dir = &state.shared.config.data_dir;
    let (segments, bytes) = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "hlog"))
                .filter_map(|e| e.metadata().ok())
                .fold((0u64, 0u64), |(n, b), m| (n + 1, b + m.len()))
        })
        .unwrap_or_default();
    let space = state.journal.as_ref().map(|j| {
        json!({
            "free_bytes": j.space.free.load(Ordering::Relaxed),
            "min_free_bytes": j.space.floor,
            "low": j.space.low.load(Ordering::Relaxed),
        })
    });
    json!({
        "dir": dir.display().to_string(),
        "segments": segments,
        "size_bytes": bytes,
        "fsync": format!("{:?}", state.shared.config.journal.fsync).to_lowercase(),
        "disk": space,
    })
}

/// With Sentinel, the primary a node uses and since when (ms since the
/// epoch).
fn primary(c: &crate::cluster::Cluster) -> serde_json::Value {
    match c.link.primary() {
        Some(p) => json!({
            "addr": p.addr,
            "since_ms": p.since.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            "changes": p.changes,
        }),
        None => serde_json::Value::Null,
    }
}

/// Every node of the cluster as last read: what it announces of itself,
/// when it started, and how long ago it last renewed its entry (every 20
/// seconds while its link to Redis is up; gone a minute after it stops).
fn nodes(c: &crate::cluster::Cluster) -> serde_json::Value {
    let now = (now_s() * 1000.0) as u64;
    let list: Vec<Json_> = c
        .nodes()
        .into_iter()
        .map(|n| {
            let mut view = json!({
                "id": n.id,
                "this": n.id == c.node_id,
                "started": n.ms("started").map(|ms| herald_protocol::utc::format_ms(ms as i64)),
                "last_seen_s": n.ms("seen").map(|ms| now.saturating_sub(ms) / 1000),
            });
            for (fact, value) in &n.facts {
                if !matches!(fact.as_str(), "started" | "seen") {
                    view[fact] = json!(value);
                }
            }
            view
        })
        .collect();
    json!(list)
}

/// What keeps the server from doing its whole job now, each as a word
/// and what it means: health says `degraded` with them, and readiness is
/// false while any is there.
fn problems(state: &AppState) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for (index, w) in state.shared.stats.iter().enumerate() {
        if w.stalled.load(Ordering::Relaxed) {
            let why = format!(
                "herald-worker-{index} has made no progress for over {} s",
                crate::net::watchdog::STALL.as_secs()
            );
            found.push(("worker_stalled", why));
        }
    }
    if let Some(j) = &state.journal {
        if j.stopped.load(Ordering::Relaxed) {
            let why = "a journal sync failed: persistent messages are refused";
            found.push(("journal_stopped", why.to_owned()));
        } else if j.space.low.load(Ordering::Relaxed) {
            let why = "the journal's disk is below journal.min_free_bytes: persistent messages are refused";
            found.push(("disk_low", why.to_owned()));
        }
    }
    if let Some(c) = state.cluster.as_deref() {
        if !c.stats.connected() {
            let why =
                "a link to Redis is down: shared queues, topics across nodes and receipts wait";
            found.push(("redis_unreachable", why.to_owned()));
        }
        if c.stats.replicas_short.load(Ordering::Relaxed) {
            let why = format!(
                "Redis confirms fewer replicas than cluster.min_replicas ({}): persistent sends are refused",
                c.min_replicas()
            );
            found.push(("replicas_short", why));
        }
    }
    for q in state.shared.broker.queue_stats() {
        if q.paging_stopped {
            let why = format!(
                "queue {} cannot page (a page file write failed, or the disk is at journal.min_free_bytes): its publishers wait or are refused until consumers drain it",
                q.name
            );
            found.push(("paging_stopped", why));
        }
    }
    if let Some(why) = state.shared.broker.large().and_then(|l| l.failing()) {
        let why = format!(
            "large messages' bodies cannot be written under data_dir/large ({why}): large messages are refused until one can"
        );
        found.push(("large_messages_failing", why));
    }
    let memory = state.shared.broker.memory();
    if memory.over() {
        let why = format!(
            "queues hold {} bytes, more than queues.max_memory_bytes ({})",
            memory.used(),
            memory.limit()
        );
        found.push(("memory_limit", why));
    }
    found
}

/// Liveness, and what an operator must know: `ok`, or `degraded` (503)
/// with the reasons; what the journal's replay skipped past damage.
async fn health(State(state): State<AppState>) -> (StatusCode, Json<Json_>) {
    let memory = state.shared.broker.memory();
    let damage = state.journal.as_ref().map(|j| j.damage).unwrap_or_default();
    let stopped = state
        .journal
        .as_ref()
        .is_some_and(|j| j.stopped.load(Ordering::Relaxed));
    let space = state
        .journal
        .as_ref()
        .map(|j| j.space.clone())
        .unwrap_or_default();
    let problems = problems(&state);
    let (code, status) = match problems.is_empty() {
        true => (StatusCode::OK, "ok"),
        false => (StatusCode::SERVICE_UNAVAILABLE, "degraded"),
    };
    let warnings: Vec<&str> = (damage.segments > 0)
        .then_some("recovered_damage")
        .into_iter()
        .collect();
    let body = json!({
        "status": status,
        "reasons": problems.iter().map(|(reason, detail)| json!({
            "reason": reason,
            "detail": detail,
        })).collect::<Vec<_>>(),
        "warnings": warnings,
        "workers": state.shared.stats.iter().map(|w| json!({
            "stalled": w.stalled.load(Ordering::Relaxed),
            "stalls": w.stalls.load(Ordering::Relaxed),
        })).collect::<Vec<_>>(),
        "cluster": state.cluster.as_deref().map(|c| json!({
            "connected": c.stats.connected(),
            "primary": primary(c),
        })),
        "memory": {
            "queued_bytes": memory.used(),
            "max_memory_bytes": memory.limit(),
            "publishers_blocked": memory.over(),
        },
        "journal": {
            "stopped": stopped,
            "low_space": space.low.load(Ordering::Relaxed),
            "free_bytes": space.free.load(Ordering::Relaxed),
            "min_free_bytes": space.floor,
            "reserve_released": space.reserve_released.load(Ordering::Relaxed),
            "damaged_segments": damage.segments,
            "damaged_bytes_skipped": damage.bytes,
            "damaged_records_skipped": damage.records,
        },
    });
    (code, Json(body))
}

/// Whether a load balancer should send this server new connections: not
/// at the connection limit, and nothing in [`problems`] but the memory
/// limit, a queue that cannot page and large messages that cannot be
/// written (which hold some sends back, not connections) and too few
/// replicas. That one is learned from the receipts' `WAIT`s: a node
/// taken out of rotation for it would get no persistent send to learn
/// that the replicas came back, and in a cluster every node would be out
/// at once; health says it.
async fn ready(State(state): State<AppState>) -> ApiResult {
    let s = &state.shared;
    let open = s.open_connections.load(Ordering::Relaxed);
    let max = s.limits.get(&s.limits.max_connections);
    if open >= max {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{open} connections open, the most allowed"),
        ));
    }
    let problems = problems(&state);
    if let Some((_, why)) = problems.iter().find(|(reason, _)| {
        !matches!(
            *reason,
            "memory_limit" | "paging_stopped" | "replicas_short" | "large_messages_failing"
        )
    }) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why.clone()));
    }
    Ok(Json(json!({"ready": true})))
}

async fn topics(State(state): State<AppState>) -> ApiResult {
    let mut patterns: BTreeMap<String, usize> = BTreeMap::new();
    for s in state.shared.broker.subscriptions() {
        if s.kind == DestinationKind::Topic {
            *patterns.entry(s.pattern).or_default() += 1;
        }
    }
    let rates: HashMap<String, f64> = lock(&state.history)
        .back()
        .map(|s| s.topics.iter().map(|(n, t)| (n.clone(), t.1)).collect())
        .unwrap_or_default();
    let topics: Vec<Json_> = state
        .destination_counts()
        .into_iter()
        .filter(|((kind, _), _)| *kind == DestinationKind::Topic)
        .map(|((_, name), c)| {
            json!({
                "name": name,
                "messages_in": c.messages_in,
                "bytes_in": c.bytes_in,
                "deliveries": c.deliveries,
                "bytes_out": c.bytes_out,
                "rate": rates.get(&name).copied().unwrap_or_default(),
            })
        })
        .collect();
    let patterns: Vec<Json_> = patterns
        .into_iter()
        .map(|(pattern, subscribers)| json!({"pattern": pattern, "subscribers": subscribers}))
        .collect();
    let declared = state.shared.broker.declared_topics();
    let diverts = state.shared.broker.diverts();
    let diverts: Vec<&crate::config::DivertRule> = diverts.rules().collect();
    Ok(Json(json!({
        "strict": declared.is_some(),
        "declared": declared.unwrap_or_default(),
        "topics": topics,
        "patterns": patterns,
        "diverts": diverts,
    })))
}

#[derive(Deserialize)]
struct TopicBody {
    name: String,
}

async fn declare_topic(
    State(state): State<AppState>,
    body: Result<Json<TopicBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    state
        .shared
        .broker
        .declare_topic(&body.name)
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    super::shared::share(&state, Change::Declare(body.name.clone())).await?;
    Ok(Json(json!({"declared": body.name})))
}

async fn undeclare_topic(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult {
    match state.shared.broker.undeclare_topic(&name) {
        Ok(true) => {
            super::shared::share(&state, Change::Undeclare(name.clone())).await?;
            Ok(Json(json!({"removed": name})))
        }
        Ok(false) => Err(ApiError::not_found(format!(
            "topic '{name}' is not declared"
        ))),
        Err(why) => Err(ApiError::conflict(why.to_string())),
    }
}

async fn subscriptions(State(state): State<AppState>) -> ApiResult {
    let list: Vec<Json_> = state
        .shared
        .broker
        .subscriptions()
        .iter()
        .map(super::topic::subscription)
        .collect();
    Ok(Json(json!(list)))
}

async fn delete_subscription(
    State(state): State<AppState>,
    Path((client_id, name)): Path<(String, String)>,
) -> ApiResult {
    use crate::broker::SubscribeError;
    match state.shared.broker.unsubscribe_durable(&client_id, &name) {
        Ok(()) => Ok(Json(
            json!({"deleted": {"client_id": client_id, "name": name}}),
        )),
        Err(e @ SubscribeError::UnknownDurable(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e) => Err(ApiError::conflict(e.to_string())),
    }
}

async fn queues(State(state): State<AppState>) -> ApiResult {
    let rates: HashMap<String, (f64, f64)> = lock(&state.history)
        .back()
        .map(|s| {
            s.queues
                .iter()
                .map(|(n, q)| (n.clone(), (q.3, q.4)))
                .collect()
        })
        .unwrap_or_default();
    let mut stats = state.shared.broker.queue_stats();
    // In a cluster, a shared queue's stream: how many messages it holds
    // for every node, and how many of them nodes have read and not had
    // acknowledged. A queue known only to Redis is listed too.
    let mut streams: HashMap<String, (u64, u64)> = HashMap::new();
    if let Some(cluster) = &state.cluster {
        let found = super::shared::from_cluster(|done| cluster.streams(done)).await?;
        for (name, length, unacknowledged) in found {
            if !stats.iter().any(|q| q.name == name) {
                stats.push(crate::broker::QueueStats::empty(&name));
            }
            streams.insert(name, (length, unacknowledged));
        }
    }
    let list: Vec<Json_> = stats
        .into_iter()
        .map(|q| {
            let (enqueue_rate, dequeue_rate) = rates.get(&q.name).copied().unwrap_or_default();
            let dead_letter = state.shared.broker.is_dead_letter_queue(&q.name);
            let mut row = super::addresses::queue_row(&q, dead_letter);
            row["enqueue_rate"] = json!(enqueue_rate);
            row["dequeue_rate"] = json!(dequeue_rate);
            if let Some((length, unacknowledged)) = streams.get(&q.name) {
                row["cluster"] = json!({
                    "stream_length": length,
                    "unacknowledged": unacknowledged,
                });
            }
            row
        })
        .collect();
    Ok(Json(json!(list)))
}

async fn purge(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let mut out = state.deliveries();
    let mut purged = state.shared.broker.purge(&name, &mut out);
    state.route(out);
    // A shared queue's waiting messages are in its stream too.
    if let Some(cluster) = messages::shared_queue(&state, &name) {
        while let Some(taken) = take(cluster, &name).await? {
            let n = purged.get_or_insert(0);
            if taken.is_empty() {
                break;
            }
            for m in &taken {
                crate::broker::Peers::settle(cluster, &name, m.entry);
            }
            *n += taken.len();
        }
    }
    match purged {
        Some(n) => Ok(Json(json!({"queue": name, "purged": n}))),
        None => Err(ApiError::not_found(format!("no queue '{name}'"))),
    }
}

/// Which messages of a dead-letter queue to replay; without it, all.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    ids: Vec<String>,
}

async fn replay(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Option<Json<ReplayBody>>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    if !state.shared.broker.is_dead_letter_queue(&name) {
        let queues = &state.shared.config.queues;
        return Err(ApiError::bad_request(format!(
            "'{name}' is not a dead-letter queue (those are named {}NAME, and the expiry queue {}): \
             only their messages say where they came from",
            queues.dead_letter_prefix, queues.expiry_queue
        )));
    }
    let body = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(Json(ReplayBody { ids })) = body {
        // Each id is looked for through the queue: a bound on the work.
        if ids.len() > MAX_REPLAY_IDS {
            return Err(ApiError::bad_request(format!(
                "{} ids: at most {MAX_REPLAY_IDS} a request (without ids, all are replayed)",
                ids.len()
            )));
        }
        let (moved, failed) = match messages::shared_queue(&state, &name) {
            Some(cluster) => messages::replay_shared(&state, cluster, &name, &ids).await,
            None => {
                let mut out = state.deliveries();
                let replayed = state.shared.broker.replay_messages(&name, &ids, &mut out);
                state.route(out);
                replayed.map_err(messages::refused)?
            }
        };
        state.settled().await?;
        let failed: Vec<Json_> = failed
            .into_iter()
            .map(|(id, why)| json!({"id": id, "error": why}))
            .collect();
        return Ok(Json(
            json!({"queue": name, "moved": moved, "failed": failed}),
        ));
    }
    let mut out = state.deliveries();
    let mut moved = state.shared.broker.replay(&name, &mut out);
    state.route(out);
    if let Some(cluster) = messages::shared_queue(&state, &name) {
        // Those that cannot go back are given back at the end, so that
        // no round takes them again.
        let mut stay = Vec::new();
        while let Some(taken) = take(cluster, &name).await? {
            let n = moved.get_or_insert(0);
            if taken.is_empty() {
                break;
            }
            let mut out = state.deliveries();
            for m in taken {
                match state.shared.broker.republish(&m.block, &mut out) {
                    Ok(()) => {
                        crate::broker::Peers::settle(cluster, &name, m.entry);
                        *n += 1;
                    }
                    Err(why) => {
                        log::warn!("message in {name} stays: {why}");
                        stay.push(m);
                    }
                }
            }
            state.route(out);
        }
        cluster.give_back(&name, stay);
    }
    state.settled().await?;
    match moved {
        Some(n) => Ok(Json(json!({"queue": name, "moved": n}))),
        None => Err(ApiError::not_found(format!("no queue '{name}'"))),
    }
}

/// Takes a round of a shared queue's waiting messages from Redis
/// (`None`: no such queue there).
async fn take(
    cluster: &crate::cluster::Cluster,
    name: &str,
) -> Result<Option<Vec<crate::cluster::requests::Held>>, ApiError> {
    const ROUND: usize = 1000;
    super::shared::from_cluster(|done| cluster.take(name, ROUND, done)).await
}

/// What every worker says of its connections.
async fn describe_all(state: &AppState) -> Vec<ConnView> {
    let mut answers = Vec::new();
    for worker in &state.shared.workers {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let answer = Box::new(move |views| {
            let _ = tx.send(views);
        });
        if worker.post(Notice::Describe(answer)) {
            answers.push(rx);
        }
    }
    let mut list = Vec::new();
    let deadline = tokio::time::Instant::now() + DESCRIBE_WAIT;
    for rx in answers {
        // A worker that stops meanwhile drops the question: its
        // connections are closing. One that does not answer in time is
        // stuck (the watchdog says so): the others' connections are shown.
        if let Ok(Ok(views)) = tokio::time::timeout_at(deadline, rx).await {
            list.extend(views);
        }
    }
    list
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Native => "herald",
        Protocol::NativeTls => "herald+tls",
        Protocol::Stomp => "stomp",
        Protocol::StompWebSocket => "stomp+ws",
        Protocol::Mqtt => "mqtt",
        Protocol::MqttTls => "mqtt+tls",
        Protocol::MqttWebSocket => "mqtt+ws",
        Protocol::Amqp => "amqp",
        Protocol::AmqpTls => "amqp+tls",
        Protocol::AmqpWebSocket => "amqp+ws",
    }
}

/// Every connection, as the workers that own them describe them (what a
/// connection costs stays with its worker).
async fn connections(State(state): State<AppState>) -> ApiResult {
    let mut list = describe_all(&state).await;
    // A connection moving between workers as they answered was described
    // by neither: ask again, a few times at most.
    for _ in 0..3 {
        let listed: HashSet<u64> = list.iter().map(|c| c.serial).collect();
        if !state.shared.places.missing_from(&listed) {
            break;
        }
        list = describe_all(&state).await;
    }
    list.sort_by_key(|c| c.serial);
    let list: Vec<Json_> = list
        .into_iter()
        .map(|c| {
            json!({
                "id": c.serial,
                "client_id": &*c.client_id,
                "user": c.user,
                "peer": peer_name(c.peer),
                "protocol": protocol_name(c.protocol),
                "tls": c.protocol.tls(),
                "since": herald_protocol::utc::format_ms(
                    (now_s() * 1000.0) as i64 - c.age.as_millis() as i64
                ),
                "subscriptions": c.subscriptions,
                "bytes_in": c.bytes_in,
                "bytes_out": c.bytes_out,
                "messages_in": c.messages_in,
                "messages_out": c.messages_out,
                "connected_s": c.age.as_secs(),
            })
        })
        .collect();
    Ok(Json(json!(list)))
}

async fn close_connection(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("'{id}' is not a connection id")))?;
    let conn = state.shared.places.home(id).map(|(home, _)| home);
    let Some(conn) = conn else {
        return Err(ApiError::not_found(format!("no connection {id}")));
    };
    // If it is moving, the worker it left sends the command on.
    state.shared.workers[conn.worker].post(Notice::Close(conn, Closing::ByAdmin));
    Ok(Json(json!({"closed": id})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBody {
    /// `queue://name`, `topic://name`, or a topic name.
    destination: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    properties: BTreeMap<String, Json_>,
    #[serde(default)]
    persistent: bool,
    priority: Option<u8>,
    ttl_ms: Option<u64>,
}

fn property(name: &str, v: &Json_) -> Result<Value, ApiError> {
    Ok(match v {
        Json_::Bool(b) => Value::Bool(*b),
        Json_::String(s) => Value::String(s.clone()),
        Json_::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => match i32::try_from(i) {
                Ok(i) => Value::I32(i),
                Err(_) => Value::I64(i),
            },
            (None, Some(f)) => Value::F64(f),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "property '{name}': {n} is out of range"
                )))
            }
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "property '{name}': {other} is not a string, number or boolean"
            )))
        }
    })
}

async fn publish(
    State(state): State<AppState>,
    body: Result<Json<PublishBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let destination = Destination::from_uri(&body.destination)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    herald_protocol::destination::validate_name(&destination.name)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut message = Message::text(body.body);
    for (name, value) in &body.properties {
        message.set_property(name.clone(), property(name, value)?);
    }
    if body.persistent {
        message.delivery_mode = DeliveryMode::Persistent;
    }
    if let Some(p) = body.priority {
        if p > 9 {
            return Err(ApiError::bad_request(format!("priority {p} is not 0 to 9")));
        }
        message.priority = p;
    }
    let now = (now_s() * 1000.0) as i64;
    message.timestamp = now;
    if let Some(ttl) = body.ttl_ms {
        message.expiration = now.saturating_add(ttl.min(i64::MAX as u64) as i64);
    }
    message.set_message_id(state.admin_message_id("publish"));
    message.set_destination(Some(destination.clone()));
    let mut block = BytesMut::new();
    message
        .encode(&mut block)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // The same limit as every protocol's frames.
    let max = state.shared.config.max_frame_size;
    if block.len() > max as usize {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a message of {} bytes exceeds max_frame_size ({max})",
                block.len()
            ),
        ));
    }
    let view =
        MessageView::parse(block.freeze()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut out = state.deliveries();
    let routed = state
        .shared
        .broker
        .publish(&view, Room::Refuse, None, &mut out);
    state.route(out);
    let routed = routed.map_err(|e| match e {
        RouteError::Undeclared(why) => ApiError::conflict(why.to_string()),
        missing @ RouteError::NoQueue(_) => ApiError::not_found(missing.to_string()),
        full @ RouteError::QueueFull { .. } => ApiError::conflict(full.to_string()),
        RouteError::Sample(why) => ApiError::conflict(why.to_string()),
    })?;
    // Counted like a message from a client, with the first worker's (the
    // totals, the per-destination metrics and the topics table add up the
    // workers' counts).
    let counts = &state.shared.stats[0];
    counts.messages_in.fetch_add(1, Ordering::Relaxed);
    let mut tally = crate::frontend::DestinationCounts::default();
    tally.add(view.block().len() as u64, routed.delivered as u64);
    counts.add((destination.kind, destination.name.clone()), tally);
    if routed.journaled {
        // Answered once the journal has it, as a native persistent send.
        let (tx, rx) = tokio::sync::oneshot::channel();
        state.shared.broker.barrier(
            None,
            routed.written.clone().guard(Box::new(move |r| {
                let _ = tx.send(r);
            })),
        );
        rx.await
            .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the journal stopped"))?
            .map_err(|why| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, why.to_string()))?;
    }
    // Routed, not delivered: a queue takes it with or without a consumer.
    Ok(Json(json!({
        "destination": destination.to_string(),
        "routed": routed.delivered,
        "persistent": routed.journaled,
    })))
}

async fn reload(State(state): State<AppState>) -> ApiResult {
    let file = reload_config(&state.shared, state.cluster.as_deref())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    lock(&state.logins).clear();
    Ok(Json(json!({"reloaded": file})))
}

#[cfg(test)]
mod tests {
    use super::hide_password;

    #[test]
    fn a_password_in_a_url_is_hidden() {
        assert_eq!(
            hide_password("redis+sentinel://:s3cret@a:26379,b:26379/herald"),
            "redis+sentinel://:(hidden)@a:26379,b:26379/herald"
        );
        assert_eq!(
            hide_password("redis://u:p@host:6379"),
            "redis://u:(hidden)@host:6379"
        );
        assert_eq!(hide_password("redis://host:6379"), "redis://host:6379");
        assert_eq!(hide_password(""), "");
    }
}
