//! Users and roles that a cluster's nodes share through Redis (see
//! `cluster::settings`), managed through any node: each change is
//! checked against this node's config, applied here, written to Redis and
//! announced, and answered once Redis has it. A single node keeps its
//! users and roles in its config file (`POST /api/reload`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::state::{ApiError, AppState};
use crate::cluster::settings::Change;
use crate::cluster::Cluster;
use crate::config::{RoleEntry, UserEntry};

type ApiResult = Result<Json<Value>, ApiError>;

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
async fn checked(state: &AppState, change: Change) -> Result<(), ApiError> {
    cluster(state)?
        .check(&change)
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    share(state, change).await
}

/// The users this node knows, where each comes from, and their roles.
pub(crate) async fn users(State(state): State<AppState>) -> ApiResult {
    let shared = state.cluster.as_deref().map(|c| c.settings());
    let auth = match state.cluster.as_deref() {
        Some(c) => c.auth(),
        None => state.shared.config.auth.clone(),
    };
    let users: Vec<Value> = auth
        .users
        .iter()
        .map(|u| {
            let from_cluster = shared
                .as_ref()
                .is_some_and(|s| s.users.contains_key(&u.name));
            json!({
                "name": u.name,
                "roles": u.roles,
                "source": if from_cluster { "cluster" } else { "config" },
            })
        })
        .collect();
    Ok(Json(json!({ "users": users, "roles": auth.roles })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserBody {
    /// An Argon2 hash in PHC form, as `herald passwd` prints.
    password: String,
    #[serde(default)]
    roles: Vec<String>,
}

pub(crate) async fn put_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Json<UserBody>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let user = UserEntry {
        name: name.clone(),
        password: body.password,
        roles: body.roles,
    };
    checked(&state, Change::PutUser(user)).await?;
    Ok(Json(json!({ "user": name })))
}

pub(crate) async fn delete_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    let present = cluster(&state)?.settings().users.contains_key(&name);
    remove(
        &state,
        ("user", &name),
        present,
        Change::DeleteUser(name.clone()),
    )
    .await
}

/// Removes the user or role (`what`: kind and name) the cluster shares,
/// if it has it (`present`).
async fn remove(state: &AppState, what: (&str, &str), present: bool, change: Change) -> ApiResult {
    let (kind, name) = what;
    if !present {
        return Err(ApiError::not_found(format!(
            "no {kind} '{name}' among the cluster's (a config file's are changed there)"
        )));
    }
    checked(state, change).await?;
    Ok(Json(json!({ "removed": name })))
}

pub(crate) async fn put_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Json<RoleEntry>, JsonRejection>,
) -> ApiResult {
    let Json(role) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    checked(&state, Change::PutRole(name.clone(), role)).await?;
    Ok(Json(json!({ "role": name })))
}

pub(crate) async fn delete_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    let present = cluster(&state)?.settings().roles.contains_key(&name);
    remove(
        &state,
        ("role", &name),
        present,
        Change::DeleteRole(name.clone()),
    )
    .await
}
