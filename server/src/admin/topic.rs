//! One topic as the management interface shows it: its traffic, the
//! subscriptions whose patterns take it (plain, shared and durable, each
//! with its selector, backlog and consumer), and its retained messages.

use axum::extract::{Path, State};
use axum::Json;
use herald_protocol::{DestinationKind, Pattern};
use serde_json::{json, Value as Json_};

use super::messages::message_view;
use super::state::{ApiError, AppState};

/// `GET /api/topics/{name}`.
pub(super) async fn topic(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Json_>, ApiError> {
    herald_protocol::destination::validate_name(&name)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
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
    })))
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
    })
}
