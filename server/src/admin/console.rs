//! The web console: static files from `server/console`, built into the
//! binary. It uses the JSON API like any other client.

use axum::http::header;
use axum::response::IntoResponse;

pub(crate) async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("../../console/index.html"),
    )
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../console/console.js"),
    )
}
