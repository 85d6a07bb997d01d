//! `/openapi.json`: the OpenAPI 3 document, made once at start from the
//! same route table as the router, so the two cannot drift apart.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::state::{AppState, Route};

/// Serves the document made at start.
pub(crate) async fn document(State(state): State<AppState>) -> Json<Value> {
    Json(state.openapi.as_ref().clone())
}

/// The document that describes `routes`.
pub(crate) fn describe(routes: &[Route]) -> Value {
    let mut paths: BTreeMap<&str, serde_json::Map<String, Value>> = BTreeMap::new();
    for route in routes {
        let parameters: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let json_body = route.path.starts_with("/api");
        let ok = if json_body {
            json!({"description": "OK", "content": {"application/json": {"schema": {}}}})
        } else {
            json!({"description": "OK"})
        };
        let error = json!({
            "description": "An error: its status and why",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        });
        let mut operation = json!({
            "summary": route.summary,
            "parameters": parameters,
            "responses": {"200": ok, "400": error, "401": error, "403": error, "404": error, "409": error},
        });
        if route.takes_body {
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": {"type": "object"}}}
            });
        }
        paths
            .entry(route.path)
            .or_default()
            .insert(route.method.as_str().to_lowercase(), operation);
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Herald management API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "See and change what a Herald server is doing. With users configured, every request needs HTTP basic auth; changes need the admin permission."
        },
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["status", "error"],
                "properties": {"status": {"type": "integer"}, "error": {"type": "string"}}
            }}
        },
        "security": [{"basic": []}],
        "paths": paths,
    })
}
