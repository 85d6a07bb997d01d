//! The JSON API's routes for queues and their messages: browse a queue
//! without consuming, delete, move or copy one message, create and delete
//! queues. The broker does the work (`broker::messages`); this turns it
//! into HTTP: paging, a body preview, status codes with reasons.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use herald_protocol::message::CONTENT_TYPE_PROPERTY;
use herald_protocol::{Body, DeliveryMode, Destination, DestinationKind, Message, Value};
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::shared::from_cluster;
use super::state::{ApiError, AppState};
use crate::auth::{Permission, Principal};
use crate::broker::messages::{readdressed, HeldMessage, MessageError};
use crate::broker::QueueError;
use crate::cluster::requests::{Dropped, Held, Picked};
use crate::cluster::Cluster;

type ApiResult = Result<Json<Json_>, ApiError>;

/// Messages a page holds unless `limit` says otherwise, and at most.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 1000;
/// How much of a body a preview shows: characters of text, bytes of
/// anything else (as hexadecimal).
const PREVIEW_CHARS: usize = 2048;
const PREVIEW_BYTES: usize = 256;

/// `?offset=&limit=&selector=` of a browse.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BrowseParams {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
    #[serde(default)]
    selector: String,
}

/// `GET /api/queues/{name}/messages`: a page of the messages a queue
/// holds (waiting, scheduled, in flight), those the selector selects,
/// without consuming them.
pub(super) async fn browse(
    State(state): State<AppState>,
    Path(name): Path<String>,
    params: Result<Query<BrowseParams>, QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = params.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is not 1 to {MAX_PAGE}"
        )));
    }
    let broker = &state.shared.broker;
    let selector = broker
        .parse_selector(&params.selector)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(cluster) = shared_queue(&state, &name) {
        // Its messages are in its stream, whichever node holds them.
        let page = (params.offset, limit);
        let found = from_cluster(|done| cluster.page(&name, selector, page, done))
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no queue '{name}'")))?;
        let page: Vec<Json_> = found
            .messages
            .iter()
            .map(|m| {
                let state = match m.holder {
                    Some(_) => "in flight",
                    None => "ready",
                };
                let mut row = message_view(&m.block, m.deliveries, Some(state));
                row["holder"] = json!(m.holder);
                row
            })
            .collect();
        return Ok(Json(json!({
            "queue": name,
            "total": found.total,
            "offset": params.offset,
            "limit": limit,
            "messages": page,
        })));
    }
    let selects = |m: &crate::broker::queue::QueuedMessage| {
        crate::broker::queue::selects_queued(selector.as_deref(), m)
    };
    let (total, held) = broker
        .queue_messages(&name, selects, (params.offset, limit))
        .ok_or_else(|| ApiError::not_found(format!("no queue '{name}'")))?;
    let page: Vec<Json_> = held.iter().map(view).collect();
    Ok(Json(json!({
        "queue": name,
        "total": total,
        "offset": params.offset,
        "limit": limit,
        "messages": page,
    })))
}

/// One message of a queue as the API shows it (see [`message_view`]).
fn view(held: &HeldMessage) -> Json_ {
    let m = &held.message;
    // As its consumer will count them: one kept over a crash may have
    // been delivered before.
    let deliveries = m.deliveries + u32::from(m.restored);
    message_view(&m.block, deliveries, Some(held.held.as_str()))
}

/// One message as the API shows it: headers, properties, a preview of its
/// body, and where a dead letter came from and why; `state` says where it
/// is in its queue.
pub(super) fn message_view(block: &bytes::Bytes, deliveries: u32, state: Option<&str>) -> Json_ {
    let Ok(message) = Message::decode(block, deliveries) else {
        return json!({"state": state, "size": block.len(), "error": "does not decode"});
    };
    // The content type is a header here, not a property.
    let properties: serde_json::Map<String, Json_> = message
        .properties()
        .iter()
        .filter(|(k, _)| k != CONTENT_TYPE_PROPERTY)
        .map(|(k, v)| (k.clone(), value(v)))
        .collect();
    let text = |name: &str| message.property(name).and_then(Value::as_str);
    let dead_letter = match (
        text("HeraldOriginalDestination"),
        text("HeraldDeadLetterReason"),
    ) {
        (Some(from), reason) => json!({"from": from, "reason": reason}),
        _ => Json_::Null,
    };
    let time = |ms: i64| (ms != 0).then(|| herald_protocol::utc::format_ms(ms));
    json!({
        "id": message.message_id(),
        "state": state,
        "size": block.len(),
        "destination": message.destination().map(ToString::to_string),
        "persistent": message.delivery_mode == DeliveryMode::Persistent,
        "priority": message.priority,
        "timestamp": time(message.timestamp),
        "expiration": time(message.expiration),
        "delivery_time": time(message.delivery_time),
        "deliveries": deliveries,
        "correlation_id": message.correlation_id(),
        "reply_to": message.reply_to().map(ToString::to_string),
        "type": message.message_type(),
        "content_type": message.content_type(),
        "properties": properties,
        "dead_letter": dead_letter,
        "body": preview(&message.body),
    })
}

fn value(v: &Value) -> Json_ {
    serde_json::to_value(v).unwrap_or(Json_::Null)
}

/// A body's kind, length and beginning: text as text (bytes that are
/// UTF-8 too), anything else as hexadecimal.
fn preview(body: &Body) -> Json_ {
    let text = |kind: &str, t: &str| {
        let shown: String = t.chars().take(PREVIEW_CHARS).collect();
        json!({"kind": kind, "length": t.len(), "text": shown, "truncated": shown.len() < t.len()})
    };
    match body {
        Body::Empty => json!({"kind": "empty", "length": 0}),
        Body::Text(t) => text("text", t),
        Body::Bytes(b) => match std::str::from_utf8(b) {
            Ok(t) => text("bytes", t),
            Err(_) => {
                let hex: String = b
                    .iter()
                    .take(PREVIEW_BYTES)
                    .map(|x| format!("{x:02x}"))
                    .collect();
                json!({"kind": "bytes", "length": b.len(), "hex": hex, "truncated": b.len() > PREVIEW_BYTES})
            }
        },
        Body::Stream(s) => json!({"kind": "stream", "length": s.len}),
        Body::Map(entries) => {
            let map: serde_json::Map<String, Json_> =
                entries.iter().map(|(k, v)| (k.clone(), value(v))).collect();
            json!({"kind": "map", "length": entries.len(), "map": map})
        }
    }
}

/// The status a message operation's refusal gets.
pub(super) fn refused(e: MessageError) -> ApiError {
    let status = match &e {
        MessageError::NoQueue(_)
        | MessageError::NoMessage {
            in_flight: false, ..
        } => StatusCode::NOT_FOUND,
        MessageError::Message(_) => StatusCode::BAD_REQUEST,
        MessageError::NoMessage { .. }
        | MessageError::Shared(_)
        | MessageError::Route(_)
        | MessageError::Republish(_) => StatusCode::CONFLICT,
    };
    ApiError::new(status, e.to_string())
}

/// The cluster, if `name` is a queue it shares (any but a temporary one).
pub(super) fn shared_queue<'a>(state: &'a AppState, name: &str) -> Option<&'a Cluster> {
    let shared = herald_protocol::destination::temporary_owner(name).is_none();
    state.cluster.as_deref().filter(|_| shared)
}

/// A shared queue's message `id`, from its stream (taken out of it if
/// `take`), or the refusal a single node's queue would give.
async fn pick_shared(
    cluster: &Cluster,
    name: &str,
    id: &str,
    take: bool,
) -> Result<Held, ApiError> {
    let missing = |in_flight| MessageError::NoMessage {
        queue: name.to_owned(),
        id: id.to_owned(),
        in_flight,
    };
    match from_cluster(|done| cluster.pick(name, id, take, done)).await? {
        Picked::Found(held) => Ok(held),
        Picked::NoQueue => Err(refused(MessageError::NoQueue(name.to_owned()))),
        Picked::NoMessage => Err(refused(missing(false))),
        Picked::InFlight(member) => {
            log::info!("message {id} of shared queue {name} is held by {member}");
            Err(refused(missing(true)))
        }
    }
}

/// Moves `held`, message `id` of shared queue `name`, to the shared queue
/// `to` as `block`, in one step in Redis: never lost, never in both.
async fn move_shared(
    cluster: &Cluster,
    (name, id): (&str, &str),
    held: Held,
    (to, block): (&str, &bytes::Bytes),
) -> Result<(), ApiError> {
    let block = block.clone();
    let moved = from_cluster(|done| cluster.move_entry(name, held, (to, block), done)).await?;
    let missing = |in_flight| MessageError::NoMessage {
        queue: name.to_owned(),
        id: id.to_owned(),
        in_flight,
    };
    match moved {
        Picked::Found(_) => Ok(()),
        Picked::NoQueue | Picked::NoMessage => Err(refused(missing(false))),
        Picked::InFlight(_) => Err(refused(missing(true))),
    }
}

/// `DELETE /api/queues/{name}/messages/{id}`.
pub(super) async fn delete_message(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult {
    match shared_queue(&state, &name) {
        Some(cluster) => drop(pick_shared(cluster, &name, &id, true).await?),
        None => state
            .shared
            .broker
            .delete_message(&name, &id)
            .map_err(refused)?,
    }
    Ok(Json(json!({"queue": name, "deleted": id})))
}

/// Replays the dead letters `ids` of a shared queue to where each came
/// from: taken out of the stream one by one, and given back if it cannot
/// go. How many went, and for each that did not, its id and why.
pub(super) async fn replay_shared(
    state: &AppState,
    cluster: &Cluster,
    name: &str,
    ids: &[String],
) -> (usize, Vec<(String, String)>) {
    let (mut moved, mut failed) = (0, Vec::new());
    for id in ids {
        match replay_one(state, cluster, name, id).await {
            Ok(()) => moved += 1,
            Err(why) => failed.push((id.clone(), why.to_string())),
        }
    }
    (moved, failed)
}

/// Replays dead letter `id` of shared queue `name`: to a shared queue in
/// one step in Redis, elsewhere (a topic) taken out, sent, and given back
/// if it cannot go.
/// Why one dead letter of a shared queue was not replayed.
#[derive(Debug, thiserror::Error)]
enum ReplayError {
    /// Taking it from its queue, or moving it in Redis, failed.
    #[error("{}", .0.message())]
    Api(ApiError),
    /// It cannot go back where it came from.
    #[error(transparent)]
    Republish(#[from] crate::broker::RepublishError),
}

async fn replay_one(
    state: &AppState,
    cluster: &Cluster,
    name: &str,
    id: &str,
) -> Result<(), ReplayError> {
    let held = pick_shared(cluster, name, id, false)
        .await
        .map_err(ReplayError::Api)?;
    let view = state.shared.broker.replayed(&held.block)?;
    let to = view.destination();
    if view.destination_kind == DestinationKind::Queue && shared_queue(state, to).is_some() {
        return move_shared(cluster, (name, id), held, (to, view.block()))
            .await
            .map_err(ReplayError::Api);
    }
    let held = pick_shared(cluster, name, id, true)
        .await
        .map_err(ReplayError::Api)?;
    let mut out = state.deliveries();
    let room = crate::broker::Room::Refuse;
    let sent = state.shared.broker.publish(&view, room, None, &mut out);
    state.route(out);
    sent.map(drop).map_err(|why| {
        cluster.give_back(name, vec![held]);
        crate::broker::RepublishError::from(why).into()
    })
}

/// The body of a move or a copy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MoveBody {
    to: String,
}

/// `POST /api/queues/{name}/messages/{id}/move`.
pub(super) async fn move_message(
    state: State<AppState>,
    path: Path<(String, String)>,
    principal: Option<Extension<Principal>>,
    body: Result<Json<MoveBody>, JsonRejection>,
) -> ApiResult {
    relocate(state, path, principal, body, false).await
}

/// `POST /api/queues/{name}/messages/{id}/copy`.
pub(super) async fn copy_message(
    state: State<AppState>,
    path: Path<(String, String)>,
    principal: Option<Extension<Principal>>,
    body: Result<Json<MoveBody>, JsonRejection>,
) -> ApiResult {
    relocate(state, path, principal, body, true).await
}

/// A move or a copy of one message to the destination the body names,
/// which the user (where there are users) must be allowed to publish to.
async fn relocate(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    principal: Option<Extension<Principal>>,
    body: Result<Json<MoveBody>, JsonRejection>,
    copy: bool,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let to = Destination::from_uri_or(&body.to, DestinationKind::Queue)
        .and_then(|to| herald_protocol::destination::validate_name(&to.name).map(|()| to))
        .map_err(|e| ApiError::bad_request(format!("to: {e}")))?;
    if let Some(Extension(principal)) = principal {
        principal
            .check(Permission::Publish, to.kind, &to.name)
            .map_err(|denied| ApiError::new(StatusCode::FORBIDDEN, denied.to_string()))?;
    }
    let copy_id = copy.then(|| state.admin_message_id("copy"));
    if let Some(cluster) = shared_queue(&state, &name) {
        let onto_shared =
            to.kind == DestinationKind::Queue && shared_queue(&state, &to.name).is_some();
        if !copy && onto_shared {
            let held = pick_shared(cluster, &name, &id, false).await?;
            // Shared queues carry no large messages.
            let view = readdressed(&held.block, &to, None, None).map_err(refused)?;
            move_shared(cluster, (&name, &id), held, (&to.name, view.block())).await?;
        } else {
            // A copy only reads it; a move to a topic or a temporary queue
            // takes it out of the stream, sends it, and gives it back if
            // it could not go.
            let held = pick_shared(cluster, &name, &id, !copy).await?;
            let mut out = state.deliveries();
            let sent = state
                .shared
                .broker
                .send_as(&held.block, &to, copy_id.clone(), &mut out);
            state.route(out);
            if let Err(e) = sent {
                if !copy {
                    cluster.give_back(&name, vec![held]);
                }
                return Err(refused(e));
            }
        }
    } else {
        let mut out = state.deliveries();
        let moved = state
            .shared
            .broker
            .move_message((&name, &id), &to, copy_id.clone(), &mut out);
        state.route(out);
        moved.map_err(refused)?;
    }
    state.settled().await?;
    Ok(Json(json!({
        "queue": name,
        "id": id,
        "to": to.to_string(),
        "copy": copy_id,
    })))
}

/// The body of `POST /api/queues`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewQueue {
    name: String,
}

/// `POST /api/queues`: a queue that exists before anything is sent to it.
pub(super) async fn create_queue(
    State(state): State<AppState>,
    body: Result<Json<NewQueue>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let name = Destination::from_uri_or(&body.name, DestinationKind::Queue)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if name.kind != DestinationKind::Queue {
        return Err(ApiError::bad_request(format!(
            "'{}' names a topic: topics need no creating",
            body.name
        )));
    }
    let mut created = state
        .shared
        .broker
        .create_queue(&name.name)
        .map_err(queue_refused)?;
    if let Some(cluster) = shared_queue(&state, &name.name) {
        // Its stream, so that every node has it: new if that is new.
        created = from_cluster(|done| cluster.create_queue(&name.name, done)).await?;
    }
    Ok(Json(json!({"queue": name.name, "created": created})))
}

/// `DELETE /api/queues/{name}`: the queue and every message it holds.
pub(super) async fn delete_queue(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    if let Some(cluster) = shared_queue(&state, &name) {
        // This node's side first: with consumers here it stays whole. A
        // node without consumers holds none of its messages (they are
        // given back as the last consumer leaves).
        let here = match state.shared.broker.delete_named_queue(&name) {
            Ok(_) => true,
            Err(QueueError::NoQueue(_)) => false,
            Err(e) => return Err(queue_refused(e)),
        };
        return match from_cluster(|done| cluster.drop_queue(&name, done)).await? {
            Dropped::NoQueue if !here => Err(ApiError::not_found(format!("no queue '{name}'"))),
            Dropped::NoQueue => Ok(Json(json!({"queue": name, "deleted": true, "messages": 0}))),
            Dropped::InUse(member, held) => Err(ApiError::conflict(format!(
                "queue '{name}' has consumers on node {member} ({held} messages held \
                 there): close them first"
            ))),
            Dropped::Dropped(n) => Ok(Json(json!({"queue": name, "deleted": true, "messages": n}))),
        };
    }
    let dropped = state
        .shared
        .broker
        .delete_named_queue(&name)
        .map_err(queue_refused)?;
    Ok(Json(
        json!({"queue": name, "deleted": true, "messages": dropped}),
    ))
}

fn queue_refused(e: QueueError) -> ApiError {
    let status = match &e {
        QueueError::Name(_) | QueueError::Temporary(_) => StatusCode::BAD_REQUEST,
        QueueError::NoQueue(_) => StatusCode::NOT_FOUND,
        QueueError::InUse { .. } => StatusCode::CONFLICT,
    };
    ApiError::new(status, e.to_string())
}
