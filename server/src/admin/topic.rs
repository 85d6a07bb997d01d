//! One topic as the management interface shows it: its traffic, the
//! subscriptions whose patterns take it (plain, shared and durable, each
//! with its selector, backlog and consumer), and its retained messages;
//! a keyed topic's instances.

use axum::extract::{Path, State};
use axum::Json;
use herald_protocol::{DestinationKind, Pattern};
use serde_json::{json, Value as Json_};

use super::messages::message_view;
use super::state::{ApiError, AppState};

/// A topic name from a path, checked.
fn checked(name: &str) -> Result<(), ApiError> {
    herald_protocol::destination::validate_name(name)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `GET /api/topics/{name}`.
pub(super) async fn topic(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Json_>, ApiError> {
    checked(&name)?;
    let broker = &state.shared.broker;
    let counts = state
        .destination_counts()
        .remove(&(DestinationKind::Topic, name.clone()))
        .unwrap_or_default();
    let subscriptions: Vec<Json_> = broker
        .subscriptions()
        .iter()
        .filter(|s| s.kind == DestinationKind::Topic)
        .filter(|s| Pattern::parse(&s.pattern).is_ok_and(|p| p.matches(&name)))
        .map(subscription)
        .collect();
    let exact = Pattern::parse(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let retained: Vec<Json_> = broker
        .retained_messages(&exact)
        .iter()
        .map(|block| message_view(block, 0, None))
        .collect();
    Ok(Json(json!({
        "name": name,
        "messages_in": counts.messages_in,
        "bytes_in": counts.bytes_in,
        "deliveries": counts.deliveries,
        "bytes_out": counts.bytes_out,
        "subscriptions": subscriptions,
        "retained": retained,
        "instances": instances_of(broker, &name),
    })))
}

/// `GET /api/topics/{name}/instances`: a keyed topic's settings of
/// instances and each instance it holds, by key, with its state and the
/// samples it keeps.
pub(super) async fn instances(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Json_>, ApiError> {
    checked(&name)?;
    Ok(Json(instances_of(&state.shared.broker, &name)))
}

/// What `GET /api/topics/{name}/instances` answers.
fn instances_of(broker: &crate::broker::Broker, name: &str) -> Json_ {
    let settings = broker.settings(DestinationKind::Topic, name);
    let s = &settings.instances;
    let instances: Vec<Json_> = broker
        .instances_of(name)
        .unwrap_or_default()
        .iter()
        .map(|i| json!({"key": i.key, "state": i.state.as_str(), "samples": i.samples}))
        .collect();
    json!({
        "name": name,
        "key": s.key,
        "history": s.history.as_str(),
        "history_depth": s.history_depth,
        "durability": s.durability.as_str(),
        "max_instances": s.max_instances,
        "max_samples_per_instance": s.max_samples_per_instance,
        "instances": instances,
    })
}

/// A subscription as the API shows it (a named one that is not durable is
/// shared).
pub(super) fn subscription(s: &crate::broker::SubscriptionView) -> Json_ {
    json!({
        "kind": s.kind.as_str(),
        "pattern": s.pattern,
        "selector": s.selector,
        "name": s.name,
        "client_id": s.client_id,
        "durable": s.durable,
        "shared": !s.durable && !s.name.is_empty(),
        "connection": s.connection,
        "subscription_id": s.subscription_id,
        "backlog": s.backlog,
        "dropped": s.dropped,
    })
}
