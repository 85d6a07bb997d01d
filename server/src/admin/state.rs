//! What every request handler of the management interface shares: its
//! state, its routes' table entry, its error answer, and the config
//! reload it offers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Json;
use herald_protocol::DestinationKind;
use thiserror::Error;

use super::samples::{Hour, Sample};
use crate::auth::{AuthConfigError, LoginError, Principal};
use crate::broker::delivery::Deliveries;
use crate::cluster::Cluster;
use crate::config::ConfigError;
use crate::frontend::Shared;
use crate::sync::lock;

/// The listeners' addresses, for `/api/server`.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// Native protocol.
    pub native: Option<SocketAddr>,
    /// STOMP.
    pub stomp: Option<SocketAddr>,
    /// STOMP over WebSocket.
    pub stomp_ws: Option<SocketAddr>,
    /// Native over TLS.
    pub tls: Option<SocketAddr>,
    /// MQTT's.
    pub mqtt: MqttListeners,
    /// AMQP 1.0.
    pub amqp: Option<SocketAddr>,
    /// AMQP 1.0 over TLS.
    pub amqp_tls: Option<SocketAddr>,
    /// AMQP 1.0 over WebSocket.
    pub amqp_ws: Option<SocketAddr>,
    /// This interface.
    pub admin: Option<SocketAddr>,
}

/// The MQTT listeners' addresses, those that run.
#[derive(Debug, Clone, Copy, Default)]
pub struct MqttListeners {
    /// MQTT over TCP.
    pub tcp: Option<SocketAddr>,
    /// MQTT over TLS.
    pub tls: Option<SocketAddr>,
    /// MQTT over WebSocket.
    pub websocket: Option<SocketAddr>,
}

/// What every request handler sees.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(super) shared: Arc<Shared>,
    /// The link to the other nodes, in cluster mode.
    pub(super) cluster: Option<Arc<Cluster>>,
    pub(super) addresses: Addresses,
    /// The last five minutes, a sample a second.
    pub(super) history: Arc<Mutex<VecDeque<Sample>>>,
    /// The last hour, a sample every ten seconds.
    pub(super) hour: Arc<Mutex<Hour>>,
    /// Verified (user, password hash, auth generation) → principal:
    /// Argon2 costs tens of milliseconds, too much for every request; a
    /// reload makes earlier entries miss.
    pub(super) logins: Arc<Mutex<Logins>>,
    pub(super) hasher: RandomState,
    /// The journal's latency histograms, for `/metrics`.
    pub(super) journal: Option<crate::store::JournalMetrics>,
    /// `/openapi.json`, made from the route table at start.
    pub(super) openapi: Arc<serde_json::Value>,
    /// Numbers the messages this interface makes (publishes, copies).
    pub(super) message_ids: Arc<std::sync::atomic::AtomicU64>,
}

/// One route: its path, method, what it does, and its handler.
pub(crate) struct Route {
    pub(crate) path: &'static str,
    pub(crate) method: Method,
    pub(crate) summary: &'static str,
    /// It reads a JSON request body.
    pub(crate) takes_body: bool,
    pub(crate) handler: MethodRouter<AppState>,
}

/// Verified logins: (user, password hash, auth generation) → principal.
type Logins = HashMap<(String, u64, u64), Principal>;

/// An error answer: its status and a JSON body saying why.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// Why, as the body says it.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(serde_json::json!({
            "status": self.status.as_u16(),
            "error": self.message,
        }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"herald\""),
            );
        }
        response
    }
}

/// The address a request came from, over plain TCP or TLS.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) SocketAddr);

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> PeerAddr {
        PeerAddr(*stream.remote_addr())
    }
}

/// Seconds since the epoch.
pub(super) fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl AppState {
    /// Messages in, out and dropped, summed across workers.
    pub(super) fn totals(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.shared.stats.iter().fold((0, 0, 0), |(i, o, d), s| {
            (
                i + s.messages_in.load(Relaxed),
                o + s.messages_out.load(Relaxed),
                d + s.dropped.load(Relaxed),
            )
        })
    }

    /// A new message id for a message this interface makes: `what` says
    /// how (`publish`, `copy`).
    pub(super) fn admin_message_id(&self, what: &str) -> String {
        let n = self
            .message_ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("ID:admin-{what}-{now}-{n}")
    }

    /// Per-destination counters summed across workers.
    pub(crate) fn destination_counts(
        &self,
    ) -> BTreeMap<(DestinationKind, String), crate::frontend::DestinationCounts> {
        let mut all: BTreeMap<(DestinationKind, String), crate::frontend::DestinationCounts> =
            BTreeMap::new();
        for s in &self.shared.stats {
            for (key, c) in lock(&s.destinations).iter() {
                let sum = all.entry(key.clone()).or_default();
                sum.messages_in += c.messages_in;
                sum.bytes_in += c.bytes_in;
                sum.deliveries += c.deliveries;
                sum.bytes_out += c.bytes_out;
            }
        }
        all
    }

    /// Verifies credentials, from the cache if they were verified before,
    /// else on the auth thread like any login (one check at a time, the
    /// same throttling and delays).
    pub(super) async fn login(
        &self,
        user: &str,
        password: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, LoginError> {
        let mut h = self.hasher.build_hasher();
        h.write(password.as_bytes());
        let key = (user.to_owned(), h.finish(), self.shared.auth.generation());
        if let Some(p) = lock(&self.logins).get(&key) {
            return Ok(p.clone());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let done = Box::new(move |result| {
            let _ = tx.send(result);
        });
        self.shared.auth.check(user, password, peer, done);
        let verified = rx.await.map_err(|_| LoginError::Stopping)??;
        lock(&self.logins).insert(key, verified.clone());
        Ok(verified)
    }

    /// Hands routed messages to the workers that own their connections.
    pub(super) fn route(&self, mut deliveries: Deliveries) {
        crate::frontend::hand_out(&self.shared, &mut deliveries);
    }

    /// An empty set of deliveries, one slot per worker, to route into.
    pub(super) fn deliveries(&self) -> Deliveries {
        Deliveries::new(self.shared.workers.len())
    }

    /// Waits until what was routed so far is as safe as a client's receipt
    /// says (in the journal; in a cluster, accepted by Redis), and so in
    /// its queue: an answer that says a message moved is true when it
    /// comes.
    pub(super) async fn settled(&self) -> Result<(), ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared.broker.barrier(
            None,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await
            .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the journal stopped"))?
            .map_err(|why| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, why.to_string()))?;
        // Durable, and then put in its queue by the worker: wait for that.
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared.broker.after_inserts(Box::new(move || {
            let _ = tx.send(());
        }));
        rx.await
            .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the server is stopping"))
    }
}

/// Why a reload was refused; the old config stays.
#[derive(Debug, Error)]
pub enum ReloadError {
    /// The server was started without a config file.
    #[error("the server runs on its embedded config: there is no file to reload")]
    NoFile,
    /// The file does not load.
    #[error(transparent)]
    Load(#[from] ConfigError),
    /// Its users and roles (with the cluster's shared ones, in a
    /// cluster) do not make sense.
    #[error(transparent)]
    Auth(#[from] AuthConfigError),
}

/// Re-reads the config file the server was started with and applies what
/// can change without a restart: users, roles and permissions, the
/// limits, the settings per address (with the `[queues]` values they
/// fall back on) and the diverts. A file that does not load is refused with the reason, and the
/// old config stays. Returns the file read.
pub fn reload(shared: &Shared, cluster: Option<&Cluster>) -> Result<String, ReloadError> {
    let Some(path) = &shared.config.source else {
        return Err(ReloadError::NoFile);
    };
    let config = crate::config::Config::load(path)?;
    match cluster {
        // Under the users and roles the cluster shares.
        Some(cluster) => cluster.reload_auth(shared, config.auth.clone())?,
        None => shared.auth.reload(&config.auth)?,
    }
    shared.limits.set(&config);
    shared.broker.set_address_book(config.addresses());
    shared.broker.set_diverts(config.diverts());
    log::info!(
        "reloaded users, permissions, limits, settings per address and diverts from {}",
        path.display()
    );
    Ok(path.display().to_string())
}

/// This process's resident memory in bytes and its thread count, from
/// `/proc/self/status`; `None` where there is no such file.
pub fn process_footprint() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        line.trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some((field("VmRSS:")? * 1024, field("Threads:")?))
}
