//! Users and roles through the management interface. In a cluster they
//! are the shared settings (see `super::shared`); on a single node with
//! a config file, the file's `[auth]` is edited in place and reloaded
//! (see `crate::auth_file`). A node without a config file has nowhere to
//! keep them, and says so.

use std::path::PathBuf;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::shared::checked;
use super::state::{reload, ApiError, AppState};
use crate::auth::{AuthSection, RoleEntry, UserEntry};
use crate::auth_file::{self, EditError};
use crate::cluster::settings::Change;
use crate::sync::lock;

type ApiResult = Result<Json<Value>, ApiError>;

/// The users in force, where each comes from, and the roles.
pub(crate) async fn users(State(state): State<AppState>) -> ApiResult {
    let shared = state.cluster.as_deref().map(|c| c.settings());
    let auth = state.shared.auth.section();
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
    Ok(Json(json!({
        "users": users,
        "roles": auth.roles,
        "editable": state.cluster.is_some() || state.shared.config.source.is_some(),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserBody {
    /// The password, hashed with Argon2 here, or an Argon2 hash in PHC
    /// form as `herald passwd` prints; none keeps a user's password.
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
}

pub(crate) async fn put_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Json<UserBody>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("a user name must be printable"));
    }
    let password = match body.password {
        Some(p) if p.is_empty() => return Err(ApiError::bad_request("the password is empty")),
        Some(p) => hash(p).await?,
        None => current(&state)
            .users
            .into_iter()
            .find(|u| u.name == name)
            .map(|u| u.password)
            .ok_or_else(|| {
                ApiError::bad_request(format!("'{name}' is a new user: give a password"))
            })?,
    };
    let user = UserEntry {
        name: name.clone(),
        password,
        roles: body.roles,
    };
    match config_file(&state)? {
        None => checked(&state, Change::PutUser(user)).await?,
        Some(path) => edited(&state, auth_file::put_user(&path, &user))?,
    }
    Ok(Json(json!({ "user": name })))
}

pub(crate) async fn delete_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    remove(&state, Entry::User, name).await
}

pub(crate) async fn put_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Json<RoleEntry>, JsonRejection>,
) -> ApiResult {
    let Json(role) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("a role name must be printable"));
    }
    match config_file(&state)? {
        None => checked(&state, Change::PutRole(name.clone(), role)).await?,
        Some(path) => edited(&state, auth_file::put_role(&path, &name, &role))?,
    }
    Ok(Json(json!({ "role": name })))
}

pub(crate) async fn delete_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult {
    remove(&state, Entry::Role, name).await
}

/// What a removal removes.
#[derive(Debug, Clone, Copy)]
enum Entry {
    User,
    Role,
}

/// Removes a user or role: from the config file, or in a cluster one the
/// cluster shares (a node's config file's are changed there).
async fn remove(state: &AppState, entry: Entry, name: String) -> ApiResult {
    match config_file(state)? {
        Some(path) => edited(
            state,
            match entry {
                Entry::User => auth_file::remove_user(&path, &name),
                Entry::Role => auth_file::remove_role(&path, &name),
            },
        )?,
        None => {
            let (kind, present, change) = {
                let shared = state.cluster.as_deref().map(|c| c.settings());
                let shared = shared.as_ref();
                match entry {
                    Entry::User => (
                        "user",
                        shared.is_some_and(|s| s.users.contains_key(&name)),
                        Change::DeleteUser(name.clone()),
                    ),
                    Entry::Role => (
                        "role",
                        shared.is_some_and(|s| s.roles.contains_key(&name)),
                        Change::DeleteRole(name.clone()),
                    ),
                }
            };
            if !present {
                return Err(ApiError::not_found(format!(
                    "no {kind} '{name}' among the cluster's (a config file's are changed there)"
                )));
            }
            checked(state, change).await?;
        }
    }
    Ok(Json(json!({ "removed": name })))
}

/// The users and roles in force.
fn current(state: &AppState) -> AuthSection {
    match state.cluster.as_deref() {
        Some(c) => c.auth(),
        None => state.shared.auth.section(),
    }
}

/// On a single node, the config file to edit; `None` in a cluster, whose
/// users and roles are shared ones.
fn config_file(state: &AppState) -> Result<Option<PathBuf>, ApiError> {
    if state.cluster.is_some() {
        return Ok(None);
    }
    match &state.shared.config.source {
        Some(path) => Ok(Some(path.clone())),
        None => Err(ApiError::conflict(
            "this server runs on its embedded defaults, with no config file to keep users in: start it with --config FILE",
        )),
    }
}

/// After an edit of the config file: reloads it, so that the change is in
/// force once the request is answered.
pub(super) fn edited<T>(state: &AppState, edit: Result<T, EditError>) -> Result<(), ApiError> {
    edit.map_err(|e| match e {
        EditError::Missing(..) => ApiError::not_found(e.to_string()),
        EditError::Invalid(_) => ApiError::bad_request(e.to_string()),
        EditError::Io { .. } | EditError::Shape(_) => ApiError::conflict(e.to_string()),
    })?;
    reload(&state.shared, state.cluster.as_deref())
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    lock(&state.logins).clear();
    Ok(())
}

/// Hashes a password with Argon2 (tens of milliseconds) off the
/// interface's thread.
async fn hash(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || crate::auth::password_hash(&password))
        .await
        .map_err(|e| ApiError::conflict(e.to_string()))?
        .map_err(|e| ApiError::conflict(e.to_string()))
}
