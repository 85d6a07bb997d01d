//! What a cluster's nodes share through Redis (see `cluster::settings`):
//! users, roles and declared topics, changed through any node. Each
//! change is checked against this node's config, applied here, written to
//! Redis and announced, and answered once Redis has it.

use axum::http::StatusCode;

use super::state::{ApiError, AppState};
use crate::cluster::settings::Change;
use crate::cluster::Cluster;

const SINGLE: &str =
    "a single node keeps its users and roles in its config file's [auth] (POST /api/reload)";

/// Asks the cluster's threads for something and waits for the answer:
/// `ask` gets the callback they answer with. Their error, or no answer,
/// is a 503.
pub(crate) async fn from_cluster<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    ask: impl FnOnce(Box<dyn FnOnce(Result<T, E>) + Send>),
) -> Result<T, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    ask(Box::new(move |r| {
        let _ = tx.send(r);
    }));
    let unavailable = |why: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why);
    rx.await
        .map_err(|_| unavailable("the cluster link stopped".into()))?
        .map_err(|e| unavailable(e.to_string()))
}

/// In a cluster: makes `change` on every node, answering once Redis has
/// it; nothing on a single node.
pub(crate) async fn share(state: &AppState, change: Change) -> Result<(), ApiError> {
    let Some(cluster) = &state.cluster else {
        return Ok(());
    };
    from_cluster(|done| cluster.change(&state.shared, change, done)).await
}

/// The cluster, or why there is none to change.
fn cluster(state: &AppState) -> Result<&Cluster, ApiError> {
    state
        .cluster
        .as_deref()
        .ok_or_else(|| ApiError::conflict(SINGLE))
}

/// Checks `change` against this node's config and makes it everywhere.
pub(crate) async fn checked(state: &AppState, change: Change) -> Result<(), ApiError> {
    cluster(state)?
        .check(&change)
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    share(state, change).await
}
