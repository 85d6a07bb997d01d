//! Connection factories: the settings for making connections, from a
//! `herald://` URL or by name from a client config file
//! (`config/client.toml` documents every key).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::connection::Connection;
use crate::dial::Dialer;
use crate::error::{Error, Result};

/// The default port of the native protocol.
pub const DEFAULT_PORT: u16 = 7777;
/// The default port of the native protocol over TLS.
pub const DEFAULT_TLS_PORT: u16 = 7443;

/// One factory's settings; see `config/client.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactoryConfig {
    /// `herald://host:port`, or `herald+tls://host:port`; several
    /// `host:port` separated by commas are tried in order.
    pub url: String,
    /// For `herald+tls://`: a PEM file with the certificate authorities
    /// whose server certificates are trusted; empty = the system's trust
    /// store.
    #[serde(default)]
    pub tls_ca: String,
    /// Client id sent in CONNECT.
    #[serde(default)]
    pub client_id: String,
    /// User name sent in CONNECT.
    #[serde(default)]
    pub user: String,
    /// Password sent in CONNECT.
    #[serde(default)]
    pub password: String,
    /// Time to connect and be answered.
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Heart-beat interval asked of the server; 0 = its default.
    #[serde(default = "defaults::heartbeat_ms")]
    pub heartbeat_ms: u32,
    /// Time to wait for a RECEIPT.
    #[serde(default = "defaults::request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Messages a consumer without a listener buffers.
    #[serde(default = "defaults::pending_messages")]
    pub pending_messages: usize,
    /// Bytes of message bodies a consumer without a listener buffers; it
    /// always takes one message, however large.
    #[serde(default = "defaults::pending_bytes")]
    pub pending_bytes: usize,
    /// Failover: times a lost connection is dialled again (every server,
    /// in order, each time) before it is given up; 0 = never.
    #[serde(default)]
    pub reconnect_attempts: u32,
    /// Failover: the wait before the first attempt; it doubles after each.
    #[serde(default = "defaults::reconnect_delay_ms")]
    pub reconnect_delay_ms: u64,
    /// Failover: the longest wait between attempts.
    #[serde(default = "defaults::reconnect_max_delay_ms")]
    pub reconnect_max_delay_ms: u64,
    /// Failover: how long a send waits for an interrupted connection to
    /// come back before it fails.
    #[serde(default = "defaults::send_timeout_ms")]
    pub send_timeout_ms: u64,
}

/// Every setting at its default, for the server at
/// `herald://127.0.0.1:7777`.
impl Default for FactoryConfig {
    fn default() -> FactoryConfig {
        FactoryConfig {
            url: "herald://127.0.0.1:7777".into(),
            tls_ca: String::new(),
            client_id: String::new(),
            user: String::new(),
            password: String::new(),
            connect_timeout_ms: defaults::connect_timeout_ms(),
            heartbeat_ms: defaults::heartbeat_ms(),
            request_timeout_ms: defaults::request_timeout_ms(),
            pending_messages: defaults::pending_messages(),
            pending_bytes: defaults::pending_bytes(),
            reconnect_attempts: 0,
            reconnect_delay_ms: defaults::reconnect_delay_ms(),
            reconnect_max_delay_ms: defaults::reconnect_max_delay_ms(),
            send_timeout_ms: defaults::send_timeout_ms(),
        }
    }
}

mod defaults {
    pub fn connect_timeout_ms() -> u64 {
        5000
    }
    pub fn heartbeat_ms() -> u32 {
        30_000
    }
    pub fn request_timeout_ms() -> u64 {
        10_000
    }
    pub fn pending_messages() -> usize {
        65_536
    }
    pub fn pending_bytes() -> usize {
        64 << 20
    }
    pub fn reconnect_delay_ms() -> u64 {
        100
    }
    pub fn reconnect_max_delay_ms() -> u64 {
        5000
    }
    pub fn send_timeout_ms() -> u64 {
        10_000
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    factories: HashMap<String, FactoryConfig>,
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

/// Makes connections with one set of settings: from a URL, from a named
/// entry of a client config file ([`ConnectionFactory::lookup`]), or from
/// a [`FactoryConfig`].
///
/// ```
/// use std::time::Duration;
/// use herald_client::ConnectionFactory;
///
/// let factory = ConnectionFactory::new("herald://alice:secret@broker-1:7777,broker-2:7777")?
///     .with_client_id("billing")
///     .with_reconnect(10, Duration::from_millis(200))
///     .with_request_timeout(Duration::from_secs(5));
/// assert_eq!(factory.address(), "broker-1:7777");
/// assert_eq!(factory.config().user, "alice");
/// assert_eq!(factory.config().request_timeout_ms, 5000);
/// # Ok::<(), herald_client::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConnectionFactory {
    config: FactoryConfig,
    tls: bool,
    servers: Vec<(String, u16)>,
}

impl ConnectionFactory {
    /// A factory for `herald[+tls]://[user[:password]@]host[:port]`
    /// (several `host[:port]` may follow, separated by commas), other
    /// settings at their defaults.
    pub fn new(url: &str) -> Result<ConnectionFactory> {
        ConnectionFactory::from_config(FactoryConfig {
            url: url.to_owned(),
            ..FactoryConfig::default()
        })
    }

    /// The factory named `name` in a client config file.
    pub fn lookup(path: impl AsRef<Path>, name: &str) -> Result<ConnectionFactory> {
        let path = path.as_ref();
        let config_error = |reason: String| Error::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| config_error(e.to_string()))?;
        let file: ClientFile = toml::from_str(&text).map_err(|e| config_error(e.to_string()))?;
        let mut factories = file.factories;
        let Some(config) = factories.remove(name) else {
            let mut known: Vec<_> = factories.keys().cloned().collect();
            known.sort();
            return Err(config_error(format!(
                "no factory named '{name}' (defined: {})",
                known.join(", ")
            )));
        };
        ConnectionFactory::from_config(config)
            .map_err(|e| config_error(format!("factory '{name}': {e}")))
    }

    /// A factory from explicit settings.
    pub fn from_config(mut config: FactoryConfig) -> Result<ConnectionFactory> {
        let url = parse_url(&config.url)?;
        if config.user.is_empty() {
            config.user = url.user;
        }
        if config.password.is_empty() {
            config.password = url.password;
        }
        for (key, value) in [
            ("connect_timeout_ms", config.connect_timeout_ms),
            ("request_timeout_ms", config.request_timeout_ms),
            ("pending_messages", config.pending_messages as u64),
            ("pending_bytes", config.pending_bytes as u64),
            ("reconnect_delay_ms", config.reconnect_delay_ms),
            ("reconnect_max_delay_ms", config.reconnect_max_delay_ms),
            ("send_timeout_ms", config.send_timeout_ms),
        ] {
            if value == 0 {
                return Err(Error::InvalidArgument(format!(
                    "{key} must be greater than 0"
                )));
            }
        }
        Ok(ConnectionFactory {
            config,
            tls: url.tls,
            servers: url.servers,
        })
    }

    /// Sets the client id of connections made from now on.
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> ConnectionFactory {
        self.config.client_id = client_id.into();
        self
    }

    /// Sets the user name and password connections log in with.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> ConnectionFactory {
        self.config.user = user.into();
        self.config.password = password.into();
        self
    }

    /// Fails over: a lost connection (the server gone, shut down, silent,
    /// or an administrator's close) is dialled again up to `attempts`
    /// times, waiting `delay` before the first and twice as long before
    /// each next (at most `reconnect_max_delay_ms`).
    pub fn with_reconnect(mut self, attempts: u32, delay: Duration) -> ConnectionFactory {
        self.config.reconnect_attempts = attempts;
        self.config.reconnect_delay_ms = (delay.as_millis() as u64).max(1);
        self
    }

    /// Trusts the certificate authorities in this PEM file for
    /// `herald+tls://`.
    pub fn with_tls_ca(mut self, path: impl Into<String>) -> ConnectionFactory {
        self.config.tls_ca = path.into();
        self
    }

    /// Sets the heart-beat interval asked for.
    pub fn with_heartbeat(mut self, interval: Duration) -> ConnectionFactory {
        self.config.heartbeat_ms = interval.as_millis().min(u32::MAX as u128) as u32;
        self
    }

    /// How long to wait for a server to accept the connection and answer
    /// CONNECT.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> ConnectionFactory {
        self.config.connect_timeout_ms = millis(timeout);
        self
    }

    /// How long to wait for a RECEIPT (a persistent send, a commit, an
    /// acknowledgement, a subscription) before the call fails with
    /// [`Error::Timeout`].
    pub fn with_request_timeout(mut self, timeout: Duration) -> ConnectionFactory {
        self.config.request_timeout_ms = millis(timeout);
        self
    }

    /// Failover: how long a send waits for an interrupted connection to
    /// come back before it fails.
    pub fn with_send_timeout(mut self, timeout: Duration) -> ConnectionFactory {
        self.config.send_timeout_ms = millis(timeout);
        self
    }

    /// The settings.
    pub fn config(&self) -> &FactoryConfig {
        &self.config
    }

    /// `host:port` of the first server.
    pub fn address(&self) -> String {
        let (host, port) = &self.servers[0];
        format!("{host}:{port}")
    }

    /// Opens a connection: TCP (and TLS), CONNECT, CONNECTED. With several
    /// servers, the first that answers.
    pub fn create_connection(&self) -> Result<Connection> {
        // Without a CA file, the system's trust store.
        let tls = match (self.tls, self.config.tls_ca.as_str()) {
            (false, _) => None,
            (true, "") => Some(crate::transport::client_config(None)?),
            (true, ca) => Some(crate::transport::client_config(Some(Path::new(ca)))?),
        };
        Connection::open(Dialer {
            servers: self.servers.clone(),
            tls,
            config: self.config.clone(),
        })
    }
}

/// What a URL says.
#[derive(Debug, PartialEq, Eq)]
struct Url {
    tls: bool,
    user: String,
    password: String,
    /// (host, port), in the order to try them.
    servers: Vec<(String, u16)>,
}

/// `herald[+tls]://[user[:password]@]host[:port][,host[:port]...]`.
fn parse_url(url: &str) -> Result<Url> {
    let bad = |reason: &str| Error::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let (tls, rest) = match (
        url.strip_prefix("herald://"),
        url.strip_prefix("herald+tls://"),
    ) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err(bad("must start with herald:// or herald+tls://")),
    };
    let default_port = if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') {
        return Err(bad(
            "only herald[+tls]://[user[:password]@]host[:port][,host[:port]...] is understood",
        ));
    }
    let (credentials, hosts) = match rest.rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, rest),
    };
    let (user, password) = match credentials {
        Some(c) => match c.split_once(':') {
            Some((u, p)) => (u.to_owned(), p.to_owned()),
            None => (c.to_owned(), String::new()),
        },
        None => (String::new(), String::new()),
    };
    let servers = hosts
        .split(',')
        .map(|hostport| parse_server(hostport, default_port).map_err(bad))
        .collect::<Result<Vec<_>>>()?;
    Ok(Url {
        tls,
        user,
        password,
        servers,
    })
}

/// `host[:port]`, `[v6]:port` or `[v6]`.
fn parse_server(
    hostport: &str,
    default_port: u16,
) -> std::result::Result<(String, u16), &'static str> {
    let port = |p: &str| {
        p.parse()
            .map_err(|_| "port is not a number from 0 to 65535")
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed [ in IPv6 address")?;
        let port = match after.strip_prefix(':') {
            Some(p) => port(p)?,
            None if after.is_empty() => default_port,
            None => return Err("junk after IPv6 address"),
        };
        (format!("[{host}]"), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), port(p)?),
            None => (hostport.to_owned(), default_port),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("no host");
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let f = ConnectionFactory::new("herald://127.0.0.1:7000").unwrap();
        assert_eq!(f.address(), "127.0.0.1:7000");
        let f = ConnectionFactory::new("herald://alice:s3cret@example.org").unwrap();
        assert_eq!(f.address(), "example.org:7777");
        assert_eq!(
            (f.config.user.as_str(), f.config.password.as_str()),
            ("alice", "s3cret")
        );
        let f = ConnectionFactory::new("herald://[::1]:9/").unwrap();
        assert_eq!(f.address(), "[::1]:9");
        let url = parse_url("herald+tls://u@a,b:8,[::1]").unwrap();
        assert!(url.tls);
        assert_eq!(url.user, "u");
        assert_eq!(
            url.servers,
            [("a".into(), 7443), ("b".into(), 8), ("[::1]".into(), 7443)]
        );
        for bad in [
            "http://x",
            "herald://",
            "herald://h:port",
            "herald://h:70000",
            "herald://h/path",
            "herald://[::1",
            "herald://[::1]x",
            "herald://a,",
            "herald+tcp://a",
        ] {
            assert!(
                matches!(ConnectionFactory::new(bad), Err(Error::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn looks_up_the_shipped_client_config() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/client.toml");
        let f = ConnectionFactory::lookup(path, "default").unwrap();
        assert_eq!(f.address(), "127.0.0.1:7777");
        assert_eq!(f.config().heartbeat_ms, 30_000);
        assert_eq!(f.config().pending_bytes, 64 << 20);
        let fast = ConnectionFactory::lookup(path, "local-fast").unwrap();
        assert_eq!(fast.config().request_timeout_ms, 2000);
        let e = ConnectionFactory::lookup(path, "nope")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("default"), "{e}");
    }

    #[test]
    fn bad_config_files_name_the_key() {
        let dir = std::env::temp_dir().join(format!("herald-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("client.toml");
        for (text, key) in [
            (
                "[factories.a]\nurl = \"herald://h\"\ntimeout = 3\n",
                "timeout",
            ),
            (
                "[factories.a]\nurl = \"herald://h\"\nheartbeat_ms = \"x\"\n",
                "heartbeat_ms",
            ),
            (
                "[factories.a]\nurl = \"herald://h\"\nrequest_timeout_ms = 0\n",
                "request_timeout_ms",
            ),
            (
                "[factories.a]\nurl = \"herald://h\"\npending_bytes = -1\n",
                "pending_bytes",
            ),
            ("[factories.a]\nurl = \"nats://h\"\n", "herald://"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = ConnectionFactory::lookup(&path, "a")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("client.toml"), "{text}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
