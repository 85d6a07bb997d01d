//! The server's configuration: `config/herald.toml`, embedded as the
//! defaults, and any file given with `--config`.
//!
//! Every key has a default (missing keys take it); unknown keys and bad
//! values are refused with an error naming the key and the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

// `[auth]` is defined with the users and roles it configures.
// `[queues]` is the defaults of the settings per address.
pub use crate::addresses::{AddressRule, FullPolicy, QueuesConfig};
pub use crate::auth::{AuthSection, RoleEntry, UserEntry};
pub use crate::diverts::DivertRule;
use crate::store::FsyncPolicy;
use herald_protocol::selector::SelectorLimits;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The embedded default configuration file.
pub const DEFAULT_TOML: &str = include_str!("../../config/herald.toml");

/// A configuration that could not be loaded.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown key or a value of the
    /// wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, which names the key and shows the line.
        message: String,
    },
    /// A key has a value of the right type but out of range.
    #[error("config file {path}: key `{key}`: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The key (`addresses[2].max_deliveries` for an entry of a list).
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
}

/// The server's settings. Field docs are in `config/herald.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the native-protocol listener.
    pub listen: SocketAddr,
    /// Worker threads; 0 = one per core.
    pub workers: usize,
    /// Largest frame body accepted.
    pub max_frame_size: u32,
    /// Largest frame accepted before CONNECT.
    pub max_connect_frame_size: u32,
    /// Connections open at once.
    pub max_connections: usize,
    /// Subscriptions per connection.
    pub max_subscriptions_per_connection: usize,
    /// Bytes waiting to be written to one connection before the slow
    /// consumer policy applies.
    pub max_pending_bytes: usize,
    /// Bytes of messages one connection may hold in open transactions.
    pub max_transaction_bytes: usize,
    /// What happens to a connection over `max_pending_bytes`.
    pub slow_consumer: SlowConsumerPolicy,
    /// How long a subscriber that falls behind may make its publishers
    /// pause, in ms, before it is left to `slow_consumer`; 0 = publishers
    /// never pause.
    pub slow_consumer_grace_ms: u32,
    /// Heart-beat interval for clients that ask for none.
    pub heartbeat_ms: u32,
    /// Shortest heart-beat interval a client may ask for.
    pub min_heartbeat_ms: u32,
    /// Longest heart-beat interval a client may ask for.
    pub max_heartbeat_ms: u32,
    /// Longest client id, durable subscription name, STOMP subscription
    /// id, transaction name or receipt id, in bytes.
    pub max_id_length: usize,
    /// Transactions one connection may have open at once.
    pub max_transactions_per_connection: usize,
    /// Largest body a large message (one streamed in CHUNK frames) may
    /// have, in bytes.
    pub max_large_message_bytes: u64,
    /// Large messages one connection may be sending at once; 0 refuses
    /// them.
    pub max_streams_per_connection: usize,
    /// Time allowed before CONNECT.
    pub connect_timeout_ms: u32,
    /// Where the journal keeps persistent messages and durable
    /// subscriptions.
    pub data_dir: PathBuf,
    /// The journal.
    pub journal: JournalSection,
    /// The topic tree.
    pub topics: TopicsConfig,
    /// Queues and acknowledged subscriptions.
    pub queues: QueuesConfig,
    /// Settings per address, over `queues`.
    pub addresses: Vec<AddressRule>,
    /// Copies of messages filed elsewhere by the broker.
    pub diverts: Vec<DivertRule>,
    /// The STOMP listener.
    pub stomp: StompSection,
    /// The MQTT listeners.
    pub mqtt: MqttSection,
    /// The AMQP 1.0 listener.
    pub amqp: AmqpSection,
    /// What one message selector may cost.
    pub selectors: SelectorsSection,
    /// Requests of one connection waiting for the journal (persistent
    /// sends and commits whose RECEIPT is not sent yet).
    pub max_pending_receipts: usize,
    /// Users, roles and their permissions.
    pub auth: AuthSection,
    /// The TLS listener.
    pub tls: TlsSection,
    /// The management interface.
    pub admin: AdminSection,
    /// Cluster mode.
    pub cluster: ClusterSection,
    /// The file this config was read from, for reloads; `None` for the
    /// embedded defaults or a config built in code.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `[selectors]`: bounds on message selectors, which clients write and the
/// server parses and evaluates (see `SelectorLimits`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectorsSection {
    /// Longest selector text, in bytes.
    pub max_length: usize,
    /// Deepest nesting of parentheses, NOT, signs and arithmetic.
    pub max_depth: usize,
    /// Most terms in one selector.
    pub max_terms: usize,
    /// Largest compiled MATCHES regular expression, in bytes.
    pub max_regex_bytes: usize,
    /// Steps one evaluation may take before the message is not selected.
    pub eval_budget: u64,
    /// Memory the selectors of one connection may hold, in bytes.
    pub max_bytes_per_connection: usize,
}

impl Default for SelectorsSection {
    fn default() -> SelectorsSection {
        let limits = SelectorLimits::default();
        SelectorsSection {
            max_length: limits.max_length,
            max_depth: limits.max_depth,
            max_terms: limits.max_nodes,
            max_regex_bytes: limits.max_regex_bytes,
            eval_budget: limits.eval_budget,
            max_bytes_per_connection: 8 << 20,
        }
    }
}

impl SelectorsSection {
    /// The limits the selector parser takes.
    pub fn limits(&self) -> SelectorLimits {
        SelectorLimits {
            max_length: self.max_length,
            max_depth: self.max_depth,
            max_nodes: self.max_terms,
            max_regex_bytes: self.max_regex_bytes,
            eval_budget: self.eval_budget,
        }
    }
}

/// `[admin]`: the management HTTP interface (JSON API, metrics, console).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// Whether it runs.
    pub enabled: bool,
    /// Its address.
    pub listen: SocketAddr,
    /// HTTPS with `[tls]`'s certificate and key.
    pub tls: bool,
    /// Host names requests may be addressed to, besides addresses and
    /// loopback names.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, or `*`) whose pages may call it,
    /// besides its own and loopback ones.
    pub allowed_origins: Vec<String>,
}

impl Default for AdminSection {
    fn default() -> AdminSection {
        AdminSection {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 8161)),
            tls: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// `[cluster]`: nodes that share topics and queues through Redis.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// `redis://host:port[/db]`, with Redis Sentinel
    /// `redis+sentinel://[:password@]host:port[,host:port...]/service`, or
    /// a Redis Cluster `redis+cluster://[:password@]host:port[,...]`;
    /// empty = a single node, no cluster.
    pub redis: String,
    /// This node's name among the nodes; empty = `herald-<process id>`.
    pub node_id: String,
    /// What every Redis key and channel of this cluster begins with:
    /// clusters with different prefixes can share one Redis. Every node of
    /// one cluster needs the same.
    pub key_prefix: String,
    /// How long a queue message read by a node that stopped renewing its
    /// hold (it died) waits before a live node claims and redelivers it.
    pub claim_idle_ms: u32,
    /// Redis replicas that must have what a receipt confirms (`WAIT`);
    /// unset = 1 with Sentinel or a Redis Cluster, 0 with one Redis.
    pub min_replicas: Option<u32>,
}

impl Default for ClusterSection {
    fn default() -> ClusterSection {
        ClusterSection {
            redis: String::new(),
            node_id: String::new(),
            key_prefix: "herald".into(),
            claim_idle_ms: 30_000,
            min_replicas: None,
        }
    }
}

impl ClusterSection {
    /// Whether this node is part of a cluster.
    pub fn enabled(&self) -> bool {
        !self.redis.is_empty()
    }

    /// The node id, or the one made up when none is set.
    pub fn node_id(&self) -> String {
        match self.node_id.as_str() {
            "" => format!("herald-{}", std::process::id()),
            id => id.to_owned(),
        }
    }
}

/// A `cluster.key_prefix` that is not 1 to 32 letters, digits, '-' and
/// '_'.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?}: 1 to 32 letters, digits, '-' and '_'")]
pub struct KeyPrefixError(pub String);

/// Checks a `cluster.key_prefix`: 1 to 32 letters, digits, '-' and '_'
/// (no character that Redis reads in a key's hash tag or a glob).
pub fn check_key_prefix(prefix: &str) -> Result<(), KeyPrefixError> {
    let fits = (1..=32).contains(&prefix.len())
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    match fits {
        true => Ok(()),
        false => Err(KeyPrefixError(prefix.to_owned())),
    }
}

/// `[tls]`: a listener for the native protocol over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// Whether the TLS listener runs.
    pub enabled: bool,
    /// Its address.
    pub listen: SocketAddr,
    /// PEM file with the server's certificate chain, its own first.
    pub cert: PathBuf,
    /// PEM file with the certificate's private key.
    pub key: PathBuf,
}

impl Default for TlsSection {
    fn default() -> TlsSection {
        TlsSection {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 7443)),
            cert: PathBuf::new(),
            key: PathBuf::new(),
        }
    }
}

/// Where `cluster.redis` says Redis is, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisUrl {
    /// `redis://[:password@]host:port[/db]`: one server.
    Direct(String),
    /// `redis+sentinel://[:password@]HOST:PORT[,HOST:PORT...]/SERVICE`:
    /// the primary that Redis Sentinel names for a service.
    Sentinel {
        /// `host:port` of each sentinel, asked in this order.
        sentinels: Vec<String>,
        /// The monitored service (Sentinel's "master name").
        service: String,
        /// The password of the Redis servers, if they need one.
        password: Option<String>,
    },
    /// `redis+cluster://[:password@]HOST:PORT[,HOST:PORT...]`: a Redis
    /// Cluster, found through any of the nodes given.
    Cluster {
        /// `host:port` of nodes to learn the cluster's slots from, asked in
        /// this order.
        seeds: Vec<String>,
        /// The password of the cluster's nodes, if they need one.
        password: Option<String>,
    },
}

/// What is wrong with a `cluster.redis` URL; each names the URL.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RedisUrlError {
    /// Not `redis://`, `redis+sentinel://` or `redis+cluster://`.
    #[error("{0:?} is not a redis://, redis+sentinel:// or redis+cluster:// URL")]
    Scheme(String),
    /// Credentials other than `:password@`.
    #[error("{0:?}: credentials are \":password@\"")]
    Credentials(String),
    /// A sentinel URL without `/SERVICE`.
    #[error("{0:?} names no service (…/SERVICE)")]
    NoService(String),
    /// An empty service name, or one with a `/`.
    #[error("{0:?}: the service name is missing or has a '/'")]
    BadService(String),
    /// A sentinel's or cluster node's address that is not `HOST:PORT`.
    #[error("{url:?}: {addr:?} is not HOST:PORT")]
    NotHostPort {
        /// The URL.
        url: String,
        /// The address in it.
        addr: String,
    },
    /// A cluster URL with a path: a Redis Cluster has no databases.
    #[error("{0:?}: a Redis Cluster URL is HOST:PORT[,HOST:PORT...], with no /path (a cluster has one database)")]
    ClusterPath(String),
    /// A `redis://` URL the Redis client does not take.
    #[error("{url:?}: {why}")]
    Redis {
        /// The URL.
        url: String,
        /// The client's reason.
        why: String,
    },
}

impl RedisUrl {
    /// Parses a `redis://`, `redis+sentinel://` or `redis+cluster://` URL,
    /// or says what is wrong with it.
    pub fn parse(url: &str) -> Result<RedisUrl, RedisUrlError> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let (password, rest) = credentials(url, rest)?;
            let (hosts, service) = rest
                .split_once('/')
                .ok_or_else(|| RedisUrlError::NoService(url.to_owned()))?;
            if service.is_empty() || service.contains('/') {
                return Err(RedisUrlError::BadService(url.to_owned()));
            }
            return Ok(RedisUrl::Sentinel {
                sentinels: host_ports(url, hosts)?,
                service: service.to_owned(),
                password,
            });
        }
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let (password, hosts) = credentials(url, rest)?;
            if hosts.contains('/') {
                return Err(RedisUrlError::ClusterPath(url.to_owned()));
            }
            return Ok(RedisUrl::Cluster {
                seeds: host_ports(url, hosts)?,
                password,
            });
        }
        if !url.starts_with("redis://") {
            return Err(RedisUrlError::Scheme(url.to_owned()));
        }
        redis::Client::open(url).map_err(|e| RedisUrlError::Redis {
            url: url.to_owned(),
            why: e.to_string(),
        })?;
        Ok(RedisUrl::Direct(url.to_owned()))
    }
}

/// Splits `[:password@]rest` off a URL's authority.
fn credentials<'a>(
    url: &str,
    authority: &'a str,
) -> Result<(Option<String>, &'a str), RedisUrlError> {
    let Some((auth, rest)) = authority.rsplit_once('@') else {
        return Ok((None, authority));
    };
    let password = auth
        .strip_prefix(':')
        .ok_or_else(|| RedisUrlError::Credentials(url.to_owned()))?;
    Ok((Some(password.to_owned()), rest))
}

/// `HOST:PORT[,HOST:PORT...]`, each checked.
fn host_ports(url: &str, list: &str) -> Result<Vec<String>, RedisUrlError> {
    let addrs: Vec<String> = list.split(',').map(str::to_owned).collect();
    for a in &addrs {
        let port = a
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
            return Err(RedisUrlError::NotHostPort {
                url: url.to_owned(),
                addr: a.clone(),
            });
        }
    }
    Ok(addrs)
}

/// `[stomp]`: the second listener, for standard STOMP clients.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StompSection {
    /// Whether the STOMP listener runs.
    pub enabled: bool,
    /// Its address.
    pub listen: SocketAddr,
    /// Header lines one STOMP frame may carry.
    pub max_headers: usize,
    /// How long a STOMP client that sends no heart-beats may send nothing
    /// before it is closed; 0 = forever.
    pub idle_timeout_ms: u32,
    /// Whether the STOMP-over-WebSocket listener runs.
    pub websocket_enabled: bool,
    /// Its address.
    pub websocket_listen: SocketAddr,
    /// Origins (`scheme://host[:port]`, or `*`) whose pages may open a
    /// WebSocket, besides loopback ones.
    pub websocket_allowed_origins: Vec<String>,
}

impl Default for StompSection {
    fn default() -> StompSection {
        StompSection {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 61613)),
            max_headers: 128,
            idle_timeout_ms: 3_600_000,
            websocket_enabled: true,
            websocket_listen: SocketAddr::from(([127, 0, 0, 1], 61614)),
            websocket_allowed_origins: Vec::new(),
        }
    }
}

/// `[mqtt]`: the listeners for MQTT 3.1.1 and 5.0 clients.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttSection {
    /// Whether the MQTT listener runs.
    pub enabled: bool,
    /// Its address.
    pub listen: SocketAddr,
    /// Whether MQTT over TLS runs (with the `[tls]` certificate).
    pub tls_enabled: bool,
    /// Its address.
    pub tls_listen: SocketAddr,
    /// Whether MQTT over WebSocket (subprotocol `mqtt`) runs.
    pub websocket_enabled: bool,
    /// Its address.
    pub websocket_listen: SocketAddr,
    /// QoS 1 and 2 messages the server sends a client before it hears
    /// back, at most (the client may ask for fewer), and takes from it.
    pub receive_maximum: u16,
    /// Topic aliases a client may set (MQTT 5.0), and that the server
    /// sets for a client at most (fewer if the client takes fewer).
    pub topic_alias_maximum: u16,
    /// The longest keep-alive a client may ask for, in seconds; 0 = any.
    /// A 5.0 client asking for more (or for none) is told this one in
    /// CONNACK; a 3.1.1 client, which cannot be told, is refused.
    pub max_keep_alive: u16,
    /// The first levels of the Response Information a 5.0 client that
    /// asks for it is given in CONNACK: this, a `/`, then its client id
    /// (`reply/sensor-7`). Empty: none is given.
    pub response_topic_prefix: String,
}

impl Default for MqttSection {
    fn default() -> MqttSection {
        MqttSection {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 1883)),
            tls_enabled: false,
            tls_listen: SocketAddr::from(([127, 0, 0, 1], 8883)),
            websocket_enabled: true,
            websocket_listen: SocketAddr::from(([127, 0, 0, 1], 8083)),
            receive_maximum: 1024,
            topic_alias_maximum: 64,
            max_keep_alive: 0,
            response_topic_prefix: "reply".into(),
        }
    }
}

/// `[amqp]`: the listener for AMQP 1.0 clients (Qpid JMS, Qpid Proton,
/// rhea, AMQP.Net Lite...).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmqpSection {
    /// Whether the AMQP listener runs.
    pub enabled: bool,
    /// Its address.
    pub listen: SocketAddr,
    /// Whether AMQP over TLS (`amqps`) runs (with the `[tls]` certificate).
    pub tls_enabled: bool,
    /// Its address.
    pub tls_listen: SocketAddr,
    /// Whether AMQP over WebSocket (subprotocol `amqp`) runs.
    pub websocket_enabled: bool,
    /// Its address.
    pub websocket_listen: SocketAddr,
    /// Sessions a connection may begin at once (`channel-max` + 1).
    pub max_sessions: u16,
    /// Links a session may attach at once (`handle-max` + 1).
    pub max_links: u32,
    /// Messages a client may send on a link before the server grants
    /// more (the link credit it is given, renewed as messages arrive).
    pub link_credit: u32,
    /// Milliseconds without a frame from the client after which the
    /// server closes the connection (`idle-time-out`, which the server
    /// asks the client to keep to); 0 = no limit.
    pub idle_timeout_ms: u32,
}

impl Default for AmqpSection {
    fn default() -> AmqpSection {
        AmqpSection {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 5672)),
            tls_enabled: false,
            tls_listen: SocketAddr::from(([127, 0, 0, 1], 5671)),
            websocket_enabled: false,
            websocket_listen: SocketAddr::from(([127, 0, 0, 1], 5673)),
            max_sessions: 256,
            max_links: 1024,
            link_credit: 1000,
            idle_timeout_ms: 60_000,
        }
    }
}

/// What happens to a connection that reads too slowly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowConsumerPolicy {
    /// An ERROR (SlowConsumer) and the connection is closed.
    Disconnect,
    /// Its oldest non-persistent topic messages are dropped (and counted);
    /// if what is left is still too much, it is disconnected.
    DropOldest,
}

/// `[journal]`: how persistent state is written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalSection {
    /// When writes are made durable.
    pub fsync: FsyncPolicy,
    /// Bytes per segment file.
    pub segment_size: u64,
    /// Segments kept before live records are moved forward.
    pub max_segments: usize,
    /// Start on a damaged journal, skipping what does not read.
    pub recover_corrupt: bool,
    /// Free bytes on the data directory's disk below which persistent
    /// messages are held or refused (by `queues.full_policy`), leaving
    /// room for acknowledgements and compaction; 0 = no floor.
    pub min_free_bytes: u64,
}

impl Default for JournalSection {
    fn default() -> JournalSection {
        JournalSection {
            fsync: FsyncPolicy::Batch,
            segment_size: 64 << 20,
            max_segments: 8,
            recover_corrupt: false,
            min_free_bytes: 64 << 20,
        }
    }
}

/// `[topics]`: strict mode and the declared topic tree.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicsConfig {
    /// Publishing only to declared topics.
    pub strict: bool,
    /// Declared topic names.
    pub declared: Vec<String>,
    /// Topics that keep their last messages for subscribers that join late.
    pub retain: Vec<RetainRule>,
}

/// `[[topics.retain]]`: topics matching `pattern` keep their last `last`
/// messages (DDS's transient-local durability, MQTT's retained messages).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetainRule {
    /// A topic pattern.
    pub pattern: String,
    /// How many of each matching topic's last messages are kept.
    pub last: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7777)),
            workers: 0,
            max_frame_size: 16 << 20,
            max_connect_frame_size: 8192,
            max_connections: 100_000,
            max_subscriptions_per_connection: 10_000,
            max_pending_bytes: 64 << 20,
            max_transaction_bytes: 64 << 20,
            slow_consumer: SlowConsumerPolicy::Disconnect,
            slow_consumer_grace_ms: 1000,
            heartbeat_ms: 30_000,
            min_heartbeat_ms: 100,
            max_heartbeat_ms: 300_000,
            max_id_length: 256,
            max_transactions_per_connection: 64,
            max_large_message_bytes: 4 << 30,
            max_streams_per_connection: 4,
            connect_timeout_ms: 10_000,
            data_dir: PathBuf::from("./data"),
            journal: JournalSection::default(),
            topics: TopicsConfig::default(),
            queues: QueuesConfig::default(),
            addresses: Vec::new(),
            diverts: Vec::new(),
            stomp: StompSection::default(),
            mqtt: MqttSection::default(),
            amqp: AmqpSection::default(),
            selectors: SelectorsSection::default(),
            max_pending_receipts: 65_536,
            auth: AuthSection::default(),
            tls: TlsSection::default(),
            admin: AdminSection::default(),
            cluster: ClusterSection::default(),
            source: None,
        }
    }
}

impl Config {
    /// Every listener's address, with its key.
    fn listeners_mut(&mut self) -> [(&'static str, &mut SocketAddr); 11] {
        [
            ("listen", &mut self.listen),
            ("tls.listen", &mut self.tls.listen),
            ("stomp.listen", &mut self.stomp.listen),
            ("stomp.websocket_listen", &mut self.stomp.websocket_listen),
            ("mqtt.listen", &mut self.mqtt.listen),
            ("mqtt.tls_listen", &mut self.mqtt.tls_listen),
            ("mqtt.websocket_listen", &mut self.mqtt.websocket_listen),
            ("amqp.listen", &mut self.amqp.listen),
            ("amqp.tls_listen", &mut self.amqp.tls_listen),
            ("amqp.websocket_listen", &mut self.amqp.websocket_listen),
            ("admin.listen", &mut self.admin.listen),
        ]
    }

    /// Moves every listener's port up by `offset` (one chosen by the
    /// system, port 0, stays so): a second server beside the first in
    /// one flag. Fails naming the listener whose port would pass 65535.
    pub fn offset_ports(&mut self, offset: u16) -> Result<(), ConfigError> {
        for (key, addr) in self.listeners_mut() {
            if addr.port() == 0 {
                continue;
            }
            let port = addr
                .port()
                .checked_add(offset)
                .ok_or_else(|| ConfigError::Invalid {
                    path: "--port-offset".into(),
                    key: key.into(),
                    reason: format!("port {} + {offset} is past 65535", addr.port()),
                })?;
            addr.set_port(port);
        }
        Ok(())
    }

    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Config::parse(&text, &path.display().to_string())?;
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// Parses and checks config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    /// The `[[addresses]]` entries over `[queues]`, or why an entry is
    /// wrong: (index, key, reason).
    pub fn address_book(
        &self,
    ) -> Result<crate::addresses::AddressBook, (usize, &'static str, String)> {
        crate::addresses::AddressBook::new(&self.addresses, &self.queues)
    }

    /// The `[[diverts]]`, parsed, or why one is wrong: (index, key,
    /// reason).
    pub fn divert_list(&self) -> Result<crate::diverts::Diverts, (usize, &'static str, String)> {
        crate::diverts::Diverts::new(&self.diverts, &self.selectors.limits())
    }

    /// [`Config::divert_list`] of a config that was validated; one built
    /// in code has none if its entries do not hold.
    pub fn diverts(&self) -> crate::diverts::Diverts {
        self.divert_list().unwrap_or_default()
    }

    /// [`Config::address_book`] of a config that was validated; one built
    /// in code keeps only `[queues]` if its entries do not hold.
    pub fn addresses(&self) -> crate::addresses::AddressBook {
        self.address_book()
            .unwrap_or_else(|_| crate::addresses::AddressBook::plain(&self.queues))
    }

    /// The worker count with 0 resolved to the number of cores.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// Checks ranges that the types alone do not.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| {
            Err(ConfigError::Invalid {
                path: origin.to_owned(),
                key: key.to_owned(),
                reason,
            })
        };
        if self.workers > 1024 {
            return invalid("workers", format!("{} is more than 1024", self.workers));
        }
        if self.max_frame_size < 1024 {
            return invalid(
                "max_frame_size",
                format!("{} is below the minimum of 1024", self.max_frame_size),
            );
        }
        if self.max_heartbeat_ms < self.min_heartbeat_ms.max(self.heartbeat_ms) {
            return invalid(
                "max_heartbeat_ms",
                format!(
                    "{} is below min_heartbeat_ms or heartbeat_ms",
                    self.max_heartbeat_ms
                ),
            );
        }
        if !(512..=self.max_frame_size).contains(&self.max_connect_frame_size) {
            return invalid(
                "max_connect_frame_size",
                format!(
                    "{} is not between 512 and max_frame_size ({})",
                    self.max_connect_frame_size, self.max_frame_size
                ),
            );
        }
        for (key, value) in [
            ("max_pending_bytes", self.max_pending_bytes),
            ("max_transaction_bytes", self.max_transaction_bytes),
        ] {
            if value < self.max_frame_size as usize {
                return invalid(
                    key,
                    format!(
                        "{value} is below max_frame_size ({}): one message would not fit",
                        self.max_frame_size
                    ),
                );
            }
        }
        for (key, value) in [
            ("queues.max_deliveries", self.queues.max_deliveries as usize),
            ("queues.max_messages", self.queues.max_messages),
            (
                "queues.default_prefetch",
                self.queues.default_prefetch as usize,
            ),
            ("max_connections", self.max_connections),
            ("max_pending_receipts", self.max_pending_receipts),
            (
                "max_subscriptions_per_connection",
                self.max_subscriptions_per_connection,
            ),
            ("heartbeat_ms", self.heartbeat_ms as usize),
            ("min_heartbeat_ms", self.min_heartbeat_ms as usize),
            ("max_id_length", self.max_id_length),
            (
                "max_transactions_per_connection",
                self.max_transactions_per_connection,
            ),
            ("connect_timeout_ms", self.connect_timeout_ms as usize),
            ("selectors.max_length", self.selectors.max_length),
            ("selectors.max_terms", self.selectors.max_terms),
            ("selectors.max_regex_bytes", self.selectors.max_regex_bytes),
            (
                "selectors.max_bytes_per_connection",
                self.selectors.max_bytes_per_connection,
            ),
        ] {
            if value == 0 {
                return invalid(key, "must be greater than 0".into());
            }
        }
        // Plain TCP only: the inbound connection is read by Herald's own
        // RESP reader (cluster::resp), which speaks no TLS.
        if self.cluster.enabled() {
            if let Err(why) = RedisUrl::parse(&self.cluster.redis) {
                return invalid("cluster.redis", why.to_string());
            }
        }
        let id = &self.cluster.node_id;
        if id.len() > 64
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return invalid(
                "cluster.node_id",
                format!("{id:?}: at most 64 letters, digits, '-', '_' and '.'"),
            );
        }
        if let Err(why) = check_key_prefix(&self.cluster.key_prefix) {
            return invalid("cluster.key_prefix", why.to_string());
        }
        if !(300..=3_600_000).contains(&self.cluster.claim_idle_ms) {
            return invalid(
                "cluster.claim_idle_ms",
                format!(
                    "{} is not between 300 and 3600000",
                    self.cluster.claim_idle_ms
                ),
            );
        }
        // Parsing recurses once per level, and a worker's stack is 2 MiB:
        // 256 levels stay far inside it.
        if !(1..=256).contains(&self.selectors.max_depth) {
            return invalid(
                "selectors.max_depth",
                format!("{} is not between 1 and 256", self.selectors.max_depth),
            );
        }
        if self.selectors.eval_budget == 0 {
            return invalid("selectors.eval_budget", "must be greater than 0".into());
        }
        if self.slow_consumer_grace_ms > 60_000 {
            return invalid(
                "slow_consumer_grace_ms",
                format!("{} is more than 60000", self.slow_consumer_grace_ms),
            );
        }
        if self.heartbeat_ms < self.min_heartbeat_ms {
            return invalid(
                "heartbeat_ms",
                format!(
                    "{} is below min_heartbeat_ms ({})",
                    self.heartbeat_ms, self.min_heartbeat_ms
                ),
            );
        }
        if self.journal.segment_size < 4096 {
            return invalid(
                "journal.segment_size",
                format!("{} is below the minimum of 4096", self.journal.segment_size),
            );
        }
        if self.journal.max_segments < 2 {
            return invalid(
                "journal.max_segments",
                format!("{} is below 2", self.journal.max_segments),
            );
        }
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty".into());
        }
        let expiry = &self.queues.expiry_queue;
        if !expiry.is_empty() {
            if let Err(e) = herald_protocol::destination::validate_name(expiry) {
                return invalid("queues.expiry_queue", e.to_string());
            }
        }
        let prefix = &self.queues.dead_letter_prefix;
        if let Err(e) = herald_protocol::destination::validate_name(&format!("{prefix}x")) {
            return invalid("queues.dead_letter_prefix", e.to_string());
        }
        if let Err((i, key, why)) = self.address_book() {
            return invalid(&format!("addresses[{i}].{key}"), why);
        }
        if let Err((i, key, why)) = self.divert_list() {
            return invalid(&format!("diverts[{i}].{key}"), why);
        }
        if self.mqtt.receive_maximum == 0 {
            return invalid(
                "mqtt.receive_maximum",
                "0: a client could never be sent a QoS 1 or 2 message (1 to 65535)".into(),
            );
        }
        let prefix = &self.mqtt.response_topic_prefix;
        if prefix.starts_with('$') || prefix.contains(['+', '#', '\0']) {
            return invalid(
                "mqtt.response_topic_prefix",
                format!(
                    "'{prefix}': a response topic may hold no wildcard (+, #) \
                     nor start with $ (a topic of the server's own)"
                ),
            );
        }
        if self.amqp.max_sessions == 0 || self.amqp.max_links == 0 || self.amqp.link_credit == 0 {
            let key = match (self.amqp.max_sessions, self.amqp.max_links) {
                (0, _) => "amqp.max_sessions",
                (_, 0) => "amqp.max_links",
                _ => "amqp.link_credit",
            };
            return invalid(key, "0: a client could do nothing (1 or more)".into());
        }
        let needs_cert = self.tls.enabled
            || self.mqtt.tls_enabled
            || self.amqp.tls_enabled
            || (self.admin.enabled && self.admin.tls);
        if needs_cert && self.tls.cert.as_os_str().is_empty() {
            return invalid(
                "tls.cert",
                "the TLS listener needs a certificate file".into(),
            );
        }
        if needs_cert && self.tls.key.as_os_str().is_empty() {
            return invalid("tls.key", "the TLS listener needs a key file".into());
        }
        if self.admin.enabled && !self.admin.listen.ip().is_loopback() && self.auth.users.is_empty()
        {
            return invalid(
                "admin.listen",
                format!(
                    "{} is reachable beyond this machine: the management interface needs [[auth.users]] there",
                    self.admin.listen
                ),
            );
        }
        if let Err(e) = crate::auth::Users::from_config(&self.auth) {
            return invalid(e.key, e.why);
        }
        for rule in &self.topics.retain {
            if let Err(e) = herald_protocol::Pattern::parse(&rule.pattern) {
                return invalid("topics.retain.pattern", e.to_string());
            }
            if rule.last == 0 {
                return invalid("topics.retain.last", "must be greater than 0".into());
            }
        }
        for name in &self.topics.declared {
            if let Err(e) = herald_protocol::destination::validate_name(name) {
                return invalid("topics.declared", e.to_string());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_offset_moves_every_listener_but_those_the_system_picks() {
        let mut config = Config::parse(DEFAULT_TOML, "embedded").unwrap();
        config.stomp.listen.set_port(0);
        let before: Vec<u16> = config.listeners_mut().map(|(_, a)| a.port()).to_vec();
        config.offset_ports(10).unwrap();
        let after: Vec<u16> = config.listeners_mut().map(|(_, a)| a.port()).to_vec();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(*a, if *b == 0 { 0 } else { b + 10 });
        }
        assert_eq!(config.listen.port(), 7787);
        let e = config.offset_ports(u16::MAX).unwrap_err().to_string();
        assert!(e.contains("listen") && e.contains("65535"), "{e}");
    }

    /// docs/operations.md links every key of the embedded config to the
    /// line that documents it: none is missing, and no link points at a
    /// line that has moved.
    #[test]
    fn the_operations_guide_links_every_key_to_its_line() {
        let guide = include_str!("../../docs/operations.md");
        let lines: Vec<&str> = DEFAULT_TOML.lines().collect();
        let mut linked = 0;
        for (at, _) in guide.match_indices("](../config/herald.toml#L") {
            let key = guide[..at]
                .rsplit("[`")
                .next()
                .unwrap()
                .trim_end_matches('`');
            let rest = &guide[at + "](../config/herald.toml#L".len()..];
            let line: usize = rest[..rest.find(')').unwrap()].parse().unwrap();
            assert!(
                lines[line - 1].starts_with(&format!("{key} =")),
                "docs/operations.md links {key} to line {line}, which is {:?}",
                lines[line - 1]
            );
            linked += 1;
        }
        let keys = lines
            .iter()
            .filter(|l| {
                l.split_once(" =")
                    .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            })
            .count();
        assert_eq!(
            linked, keys,
            "every key of config/herald.toml is in docs/operations.md"
        );
    }
    use proptest::prelude::*;

    /// A key of the config, at the top or in a section.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("max_frame_size"),
            Just("max_connect_frame_size"),
            Just("max_heartbeat_ms"),
            Just("workers"),
            Just("queues.max_memory_bytes"),
            Just("selectors.max_depth"),
            Just("auth.anonymous_role"),
            Just("admin.allowed_hosts"),
            Just("stomp.idle_timeout_ms"),
            Just("nonsense"),
        ]
        .prop_map(str::to_owned)
    }

    /// A TOML value of some type, in or out of range.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "\\PC{0,10}".prop_map(|s| format!("{s:?}")),
            Just("[]".to_owned()),
            Just("true".to_owned()),
            Just("1.5".to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn any_config_text_is_taken_or_refused_by_key(text in "\\PC{0,200}") {
            let _ = Config::parse(&text, "random");
        }

        #[test]
        fn any_value_for_a_key_is_taken_or_refused_by_name(key in key(), value in value()) {
            let (section, name) = match key.split_once('.') {
                Some((section, name)) => (format!("[{section}]\n"), name.to_owned()),
                None => (String::new(), key.clone()),
            };
            let text = format!("{section}{name} = {value}\n");
            if let Err(e) = Config::parse(&text, "random") {
                let said = e.to_string();
                prop_assert!(said.contains(&name) || said.contains("random"), "{}", said);
            }
        }
    }

    #[test]
    fn embedded_file_documents_exactly_the_defaults() {
        assert_eq!(
            Config::parse(DEFAULT_TOML, "herald.toml").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = Config::parse("listen = \"127.0.0.1:1\"\nworkerz = 3\n", "x.toml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("x.toml") && msg.contains("workerz"), "{msg}");
        let e = Config::parse("[topics]\nstrickt = true\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("strickt"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        for (text, key) in [
            ("workers = \"many\"", "workers"),
            ("listen = \"nowhere\"", "listen"),
            ("max_frame_size = 10", "max_frame_size"),
            ("max_frame_size = -1", "max_frame_size"),
            ("heartbeat_ms = 0", "heartbeat_ms"),
            ("heartbeat_ms = 50", "heartbeat_ms"),
            ("max_pending_bytes = 2048", "max_pending_bytes"),
            ("max_transaction_bytes = 2048", "max_transaction_bytes"),
            ("[tls]\nenabled = true", "tls.cert"),
            ("[tls]\nenabled = true\ncert = \"c.pem\"", "tls.key"),
            ("max_pending_receipts = 0", "max_pending_receipts"),
            ("max_connect_frame_size = 100", "max_connect_frame_size"),
            (
                "max_connect_frame_size = 20000000",
                "max_connect_frame_size",
            ),
            ("max_heartbeat_ms = 50", "max_heartbeat_ms"),
            ("max_id_length = 0", "max_id_length"),
            (
                "max_transactions_per_connection = 0",
                "max_transactions_per_connection",
            ),
            ("[selectors]\nmax_depth = 0", "selectors.max_depth"),
            ("[selectors]\nmax_depth = 100000", "selectors.max_depth"),
            ("[selectors]\nmax_length = 0", "selectors.max_length"),
            ("[selectors]\neval_budget = 0", "selectors.eval_budget"),
            ("[selectors]\nregex = 1", "regex"),
            ("[auth]\nanonymous_role = \"nobody\"", "auth.anonymous_role"),
            ("[auth]\nmax_failed_logins = -1", "max_failed_logins"),
            ("[stomp]\nidle_timeout_ms = \"soon\"", "idle_timeout_ms"),
            ("[mqtt]\nreceive_maximum = 0", "mqtt.receive_maximum"),
            ("[amqp]\nmax_sessions = 0", "amqp.max_sessions"),
            ("[amqp]\nmax_links = 0", "amqp.max_links"),
            ("[amqp]\nlink_credit = 0", "amqp.link_credit"),
            ("[amqp]\nmax_sessions = 70000", "max_sessions"),
            ("[amqp]\nchannel_max = 3", "channel_max"),
            ("[mqtt]\nreceive_maximum = 70000", "receive_maximum"),
            ("[mqtt]\ntopic_alias_maximum = -1", "topic_alias_maximum"),
            ("[mqtt]\nmax_keep_alive = 65536", "max_keep_alive"),
            (
                "[mqtt]\nresponse_topic_prefix = \"reply/#\"",
                "mqtt.response_topic_prefix",
            ),
            (
                "[mqtt]\nresponse_topic_prefix = \"$SYS\"",
                "mqtt.response_topic_prefix",
            ),
            ("[mqtt]\nresponse_topic_prefix = 7", "response_topic_prefix"),
            ("[mqtt]\nlisten = \"nowhere\"", "listen"),
            ("[mqtt]\ntls_enabled = true", "tls.cert"),
            ("[mqtt]\nretain = true", "retain"),
            ("[admin]\nallowed_hosts = \"x\"", "allowed_hosts"),
            ("[journal]\nrecover_corrupt = 3", "recover_corrupt"),
            ("[journal]\nmin_free_bytes = -1", "min_free_bytes"),
            ("[cluster]\nmin_replicas = -1", "min_replicas"),
            ("slow_consumer_grace_ms = 60001", "slow_consumer_grace_ms"),
            ("[cluster]\nredis = \"localhost:6379\"", "cluster.redis"),
            ("[cluster]\nnode_id = \"a b\"", "cluster.node_id"),
            ("[cluster]\nkey_prefix = \"\"", "cluster.key_prefix"),
            ("[cluster]\nkey_prefix = \"a:{b}\"", "cluster.key_prefix"),
            ("[cluster]\nkey_prefix = \"h*\"", "cluster.key_prefix"),
            ("[cluster]\nclaim_idle_ms = 10", "cluster.claim_idle_ms"),
            ("[cluster]\nclaim_idle_ms = -5", "claim_idle_ms"),
            ("[cluster]\nnodes = 3", "nodes"),
            ("slow_consumer_grace_ms = -1", "slow_consumer_grace_ms"),
            ("[admin]\nlisten = \"0.0.0.0:8161\"", "admin.listen"),
            ("[admin]\ntls = true", "tls.cert"),
            ("[topics]\ndeclared = [\"a..b\"]", "topics.declared"),
            ("[journal]\nfsync = \"sometimes\"", "fsync"),
            ("[journal]\nsegment_size = 10", "journal.segment_size"),
            ("[queues]\nmax_deliveries = 0", "queues.max_deliveries"),
            ("[queues]\nfull_policy = \"wait\"", "full_policy"),
            (
                "[[topics.retain]]\npattern = \"a..b\"\nlast = 1",
                "topics.retain.pattern",
            ),
            (
                "[[topics.retain]]\npattern = \"a.#\"\nlast = 0",
                "topics.retain.last",
            ),
            ("[[topics.retain]]\npattern = \"a.#\"\nkeep = 1", "keep"),
            (
                "[queues]\ndead_letter_prefix = \"a b\"",
                "queues.dead_letter_prefix",
            ),
            (
                "[queues]\nlarge_message_threshold = -1",
                "large_message_threshold",
            ),
            (
                "[[addresses]]\nmatch = \"queue://a\"\nlarge_message_threshold = \"big\"",
                "large_message_threshold",
            ),
        ] {
            let msg = Config::parse(text, "x.toml").unwrap_err().to_string();
            assert!(msg.contains(key) && msg.contains("x.toml"), "{text}: {msg}");
        }
    }

    #[test]
    fn partial_files_take_defaults() {
        let c = Config::parse("workers = 3\n[topics]\nstrict = true\n", "x.toml").unwrap();
        assert_eq!(c.workers, 3);
        assert!(c.topics.strict);
        assert_eq!(c.max_frame_size, Config::default().max_frame_size);
    }
}
