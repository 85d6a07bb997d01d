//! The management interface: a JSON API under `/api`, Prometheus metrics
//! at `/metrics`, the OpenAPI document at `/openapi.json` and the web
//! console at `/`.
//!
//! It runs on a thread of its own (`herald-admin`) with a single-threaded
//! tokio runtime and axum, so the broker's workers never wait on it. It
//! reads the broker's state through the same shared structures the workers
//! use, and asks workers to act (deliver, close a connection) through
//! their inboxes.
//!
//! With `[admin] tls = true` it speaks HTTPS with the `[tls]` listener's
//! certificate.
//!
//! With users configured, every request needs HTTP basic auth with a
//! user's credentials. Any user may load the console and ask for health
//! and readiness; reading anything else (connections with their peers,
//! users, subscriptions, queues, metrics) needs a role with `monitor` or
//! `admin`, and changing anything `admin`. Without users, the interface
//! only runs on loopback (the config refuses anything else) and is open.

mod addresses;
mod api;
mod console;
mod history;
mod messages;
mod metrics;
mod openapi;
mod samples;
mod shared;
mod state;
mod tls;
mod topic;
mod users;

pub use state::{process_footprint, reload, Addresses, MqttListeners, ReloadError};
use state::{ApiError, AppState, PeerAddr};

use std::hash::RandomState;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Router;
use base64::Engine;

use crate::config::AdminSection;
use crate::origins;

use crate::cluster::Cluster;
use crate::frontend::Shared;

/// The running interface.
pub struct Admin {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Admin {
    /// Binds `listen` and serves on a thread of its own.
    pub fn start(
        shared: Arc<Shared>,
        cluster: Option<Arc<Cluster>>,
        listen: SocketAddr,
        mut addresses: Addresses,
        journal: Option<crate::store::JournalMetrics>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<Admin> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        addresses.admin = Some(addr);
        let state = AppState {
            shared,
            cluster,
            addresses,
            history: Arc::default(),
            hour: Arc::default(),
            logins: Arc::default(),
            hasher: RandomState::new(),
            journal,
            openapi: Arc::new(openapi::describe(&api::routes())),
            message_ids: Arc::default(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("herald-admin".into())
            .spawn(move || {
                // What this thread routes is inserted by worker 0, in the
                // order it asked (see AppState::settled).
                crate::broker::set_worker_thread(0);
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            log::error!("management interface: {e}");
                            return;
                        }
                    };
                    tokio::spawn(history::sample(state.clone()));
                    let app = router(state);
                    let stop = async move {
                        let _ = stopped.await;
                    };
                    // Peers' addresses, for the login throttle.
                    let app = app.into_make_service_with_connect_info::<PeerAddr>();
                    let served = match tls {
                        None => {
                            axum::serve(listener, app)
                                .with_graceful_shutdown(stop)
                                .await
                        }
                        Some(config) => match tls::TlsListener::new(listener, config) {
                            Ok(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
                            Err(e) => Err(e),
                        },
                    };
                    if let Err(e) = served {
                        log::error!("management interface stopped: {e}");
                    }
                });
            })?;
        Ok(Admin {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the thread.
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The router, built from the same table as the OpenAPI document.
fn router(state: AppState) -> Router {
    let mut by_path: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
    for route in api::routes() {
        match by_path.iter_mut().find(|(p, _)| *p == route.path) {
            Some((_, m)) => *m = std::mem::take(m).merge(route.handler),
            None => by_path.push((route.path, route.handler)),
        }
    }
    let mut router = Router::new();
    for (path, handler) in by_path {
        router = router.route(path, handler);
    }
    // A published message may be as large as any client's (a JSON string
    // escapes some bytes: twice that, and room for the rest).
    let max_frame = state.shared.config.max_frame_size as usize;
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(axum::extract::DefaultBodyLimit::max(
            2 * max_frame + (1 << 20),
        ))
        .with_state(state)
}

/// The console's page and script: they hold no data, so anyone may load
/// them, and the page asks for a login itself.
const CONSOLE_FILES: [&str; 2] = ["/", "/console.js"];

/// Pages any user may read: they say nothing about other clients.
const OPEN_TO_USERS: [&str; 3] = ["/openapi.json", "/api/health", "/api/ready"];

/// A 401 that asks the browser for basic auth, unless the request comes
/// from the console (an `X-Herald` header), which asks with a form of its
/// own rather than have the browser prompt.
fn unauthorized(request: &Request, why: String) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, why).into_response();
    if request.headers().contains_key("x-herald") {
        response.headers_mut().remove(header::WWW_AUTHENTICATE);
    }
    response
}

/// Turns away what a web page on another site, or one reached through DNS
/// rebinding, could send (see `crate::origins`): a Host that is not this
/// server's, an Origin of another site, and a change that is not JSON and
/// carries no `X-Herald` header (a plain cross-site form post).
fn cross_site(config: &AdminSection, request: &Request) -> Option<String> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("\u{fffd}"))
    };
    let host = header("host");
    if let Some(h) = host {
        if !origins::host_allowed(&origins::host_of(h), &config.allowed_hosts) {
            return Some(format!(
                "host '{h}' is not this server's (add it to admin.allowed_hosts)"
            ));
        }
    }
    if let Some(origin) = header("origin") {
        if !origins::origin_allowed(origin, host, &config.allowed_origins) {
            return Some(format!(
                "requests from pages of '{origin}' are refused (admin.allowed_origins)"
            ));
        }
    }
    let reading = matches!(*request.method(), Method::GET | Method::HEAD);
    let json =
        header("content-type").is_some_and(|t| t.trim_start().starts_with("application/json"));
    if !reading && !json && header("x-herald").is_none() {
        return Some(
            "a change must be sent as JSON (Content-Type: application/json) or with an X-Herald header"
                .into(),
        );
    }
    None
}

/// Checks HTTP basic auth where users are configured: see the module doc
/// for who may do what.
async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(why) = cross_site(&state.shared.config.admin, &request) {
        return ApiError::new(StatusCode::FORBIDDEN, why).into_response();
    }
    let reading = matches!(*request.method(), Method::GET | Method::HEAD);
    if !state.shared.auth.has_users() || (reading && CONSOLE_FILES.contains(&request.uri().path()))
    {
        return next.run(request).await;
    }
    let credentials = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let Some((user, password)) = credentials
        .as_deref()
        .and_then(|c| c.split_once(':'))
        .map(|(u, p)| (u.to_owned(), p.to_owned()))
    else {
        return unauthorized(&request, "HTTP basic auth with a user is required".into());
    };
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<PeerAddr>>()
        .map(|c| c.0 .0.ip());
    let principal = match state.login(&user, &password, peer).await {
        Ok(p) => p,
        Err(why) => return unauthorized(&request, why.to_string()),
    };
    let open = reading && OPEN_TO_USERS.contains(&request.uri().path());
    let refusal = match (reading, open) {
        (false, _) if !principal.permissions.is_admin() => Some(format!(
            "user '{user}' lacks the 'admin' permission: it may not change anything"
        )),
        (true, false) if !principal.permissions.is_monitor() => Some(format!(
            "user '{user}' lacks the 'monitor' permission: it may not read the management views"
        )),
        _ => None,
    };
    if let Some(why) = refusal {
        return ApiError::new(StatusCode::FORBIDDEN, why).into_response();
    }
    // For the routes that check what the user may do to a destination.
    let mut request = request;
    request.extensions_mut().insert(principal);
    next.run(request).await
}
