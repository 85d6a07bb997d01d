//! The settings per address as the management interface shows them (one
//! queue with the settings in force for it, the `[[addresses]]` entries,
//! and what they resolve to for any destination), and the diverts, which
//! it lists and changes in the config file.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use herald_protocol::Destination;
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::state::{ApiError, AppState};
use super::users::edited;
use crate::addresses::{AddressSettings, Millis};
use crate::auth_file;
use crate::broker::QueueStats;
use crate::config::DivertRule;
use crate::sync::lock;

type ApiResult = Result<Json<Json_>, ApiError>;

/// Settings in force, under their config key names.
pub(super) fn settings_json(s: &AddressSettings) -> Json_ {
    json!({
        "destination": s.destination.to_string(),
        "matched": s.matched,
        "max_size_bytes": s.max_size_bytes,
        "full_policy": s.full_policy.as_str(),
        "max_messages": s.max_messages,
        "max_deliveries": s.max_deliveries,
        "redelivery_delay": Millis(s.redelivery_delay).to_string(),
        "redelivery_multiplier": s.redelivery_multiplier,
        "max_redelivery_delay": Millis(s.max_redelivery_delay).to_string(),
        "dead_letter": format!("queue://{}", s.dead_letter),
        "expiry": match s.expiry.as_str() {
            "" => String::new(),
            name => format!("queue://{name}"),
        },
        "last_value_key": s.last_value_key,
        "exclusive": s.exclusive,
        "default_priority": s.default_priority,
        "default_ttl": Millis(s.default_ttl).to_string(),
        "auto_create": s.auto_create,
        "large_message_threshold": s.large_message_threshold,
    })
}

/// A queue's figures as a row of `GET /api/queues`.
pub(super) fn queue_row(q: &QueueStats, dead_letter: bool) -> Json_ {
    json!({
        "name": q.name,
        "depth": q.depth,
        "scheduled": q.scheduled,
        "dead_letter": dead_letter,
        "in_flight": q.in_flight,
        "consumers": q.consumers,
        "enqueued": q.enqueued,
        "acknowledged": q.acknowledged,
        "bytes": q.bytes,
        "full": q.over.map(|limit| limit.to_string()),
        "dropped": q.dropped,
        "paged": q.paged,
        "paged_bytes": q.paged_bytes,
        "paging_stopped": q.paging_stopped,
    })
}

/// `GET /api/queues/{name}`: the queue's figures and its settings.
pub(super) async fn queue(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let broker = &state.shared.broker;
    let queue = broker
        .find_queue(&name)
        .ok_or_else(|| ApiError::not_found(format!("no queue '{name}'")))?;
    let settings = lock(&queue).settings().clone();
    let stats = broker
        .queue_stats()
        .into_iter()
        .find(|q| q.name == name)
        .unwrap_or_else(|| QueueStats::empty(&name));
    let mut row = queue_row(&stats, broker.is_dead_letter_queue(&name));
    row["settings"] = settings_json(&settings);
    Ok(Json(row))
}

/// The query of `GET /api/addresses`.
#[derive(Deserialize)]
pub(super) struct Resolve {
    /// `queue://NAME` or `topic://NAME`: show what applies to it.
    destination: Option<String>,
}

/// `GET /api/addresses`: the `[[addresses]]` entries in force, least
/// specific first, and with `?destination=` the settings they give it.
pub(super) async fn addresses(
    State(state): State<AppState>,
    query: Result<Query<Resolve>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let book = state.shared.broker.address_book();
    let entries =
        serde_json::to_value(book.entries()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut answer = json!({ "entries": entries });
    if let Some(uri) = query.destination {
        let to = Destination::from_uri(&uri)
            .map_err(|e| ApiError::bad_request(format!("destination '{uri}': {e}")))?;
        answer["settings"] = settings_json(&book.resolve(to.kind, &to.name));
    }
    Ok(Json(answer))
}

/// `GET /api/diverts`: the diverts in force.
pub(super) async fn diverts(State(state): State<AppState>) -> ApiResult {
    let diverts = state.shared.broker.diverts();
    let list: Vec<&DivertRule> = diverts.rules().collect();
    let list = serde_json::to_value(list).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(json!({
        "diverts": list,
        "editable": state.shared.config.source.is_some(),
    })))
}

/// The body of `PUT /api/diverts/{name}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DivertBody {
    from: String,
    to: String,
    #[serde(default)]
    selector: String,
    #[serde(default)]
    exclusive: bool,
}

/// `PUT /api/diverts/{name}`: adds or replaces a divert in the config
/// file, and reloads it.
pub(super) async fn put_divert(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Json<DivertBody>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let rule = DivertRule {
        name: name.clone(),
        from: body.from,
        to: body.to,
        selector: body.selector,
        exclusive: body.exclusive,
    };
    let path = config_file(&state)?;
    edited(&state, auth_file::put_divert(&path, &rule))?;
    Ok(Json(json!({ "divert": name })))
}

/// `DELETE /api/diverts/{name}`.
pub(super) async fn delete_divert(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    let path = config_file(&state)?;
    edited(&state, auth_file::remove_divert(&path, &name))?;
    Ok(Json(json!({ "removed": name })))
}

/// The config file diverts are kept in: each node's own, cluster or not.
fn config_file(state: &AppState) -> Result<std::path::PathBuf, ApiError> {
    state.shared.config.source.clone().ok_or_else(|| {
        ApiError::conflict(
            "this server runs on its embedded defaults, with no config file to keep diverts in: start it with --config FILE",
        )
    })
}
