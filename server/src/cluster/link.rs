//! How a node reaches Redis: one server (`redis://`), or the primary that
//! Redis Sentinel names (`redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE`).
//!
//! With Sentinel, every (re)connection of the cluster's threads asks the
//! sentinels, in the order given, which server is the primary of the
//! service (`SENTINEL get-master-addr-by-name`), and checks with `ROLE`
//! that it says so itself (a sentinel can lag behind a failover). A thread
//! whose connection breaks, or whose primary was demoted (its writes fail
//! with READONLY), reconnects, and so follows a failover. The primary in
//! use and when it last changed are kept for the log and `/api/health`.

use crate::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use redis::{Client, Connection, ErrorKind, RedisError, RedisResult, Value};

use crate::config::{RedisUrl, RedisUrlError};

/// How long one sentinel or primary may take to answer, when asked who
/// the primary is.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// How long a connection to Redis may take to be made.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How long a command on a cluster connection may wait for its answer
/// before the connection counts as lost: longer than the longest command
/// a node sends (a `WAIT` of up to 2 s). A Redis that stops answering
/// without closing its connections (a frozen process, a network
/// partition, a machine gone) is then left, and the node asks the
/// sentinels again, instead of waiting on it for ever.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The primary a node writes to, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    /// `host:port`.
    pub addr: String,
    /// When this node first used it.
    pub since: SystemTime,
    /// How many times this node has followed the primary to another
    /// server (failovers, as this node saw them).
    pub changes: u64,
}

/// Where the cluster's Redis is.
pub enum Link {
    /// One Redis server.
    Direct(Client),
    /// The primary of a Sentinel-monitored service.
    Sentinel {
        /// `host:port` of each sentinel, asked in this order.
        sentinels: Vec<String>,
        /// The monitored service (Sentinel's "master name").
        service: String,
        /// The password of the Redis servers, if they need one.
        password: Option<String>,
        /// The primary in use.
        primary: Mutex<Option<Primary>>,
    },
}

fn error(what: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, what, detail))
}

impl Link {
    /// Parses `redis://...` or `redis+sentinel://[:password@]HOST:PORT[,HOST:PORT...]/SERVICE`
    /// (see [`RedisUrl`]).
    pub fn parse(url: &str) -> Result<Link, RedisUrlError> {
        let refused = |why: redis::RedisError| RedisUrlError::Redis {
            url: url.to_owned(),
            why: why.to_string(),
        };
        Ok(match RedisUrl::parse(url)? {
            RedisUrl::Direct(url) => Link::Direct(Client::open(url).map_err(refused)?),
            RedisUrl::Sentinel {
                sentinels,
                service,
                password,
            } => Link::Sentinel {
                sentinels,
                service,
                password,
                primary: Mutex::new(None),
            },
        })
    }

    /// A client for the server to use now: the one server, or the primary
    /// the sentinels name.
    pub fn client(&self) -> RedisResult<Client> {
        match self {
            Link::Direct(client) => Ok(client.clone()),
            Link::Sentinel {
                sentinels,
                service,
                password,
                primary,
            } => {
                let mut why = Vec::new();
                for sentinel in sentinels {
                    match ask(sentinel, service, password.as_deref()) {
                        Ok((addr, client)) => {
                            let mut current = lock(primary);
                            if current.as_ref().is_none_or(|p| p.addr != addr) {
                                match current.as_ref() {
                                    Some(old) => log::warn!(
                                        "cluster: the primary of '{service}' is now {addr} (was {})",
                                        old.addr
                                    ),
                                    None => log::info!("cluster: the primary of '{service}' is {addr}"),
                                }
                                let changes = current.as_ref().map_or(0, |p| p.changes + 1);
                                *current = Some(Primary {
                                    addr,
                                    since: SystemTime::now(),
                                    changes,
                                });
                            }
                            return Ok(client);
                        }
                        Err(e) => why.push(format!("{sentinel}: {e}")),
                    }
                }
                Err(error("no primary", why.join("; ")))
            }
        }
    }

    /// A connection to the server to use now, whose commands give up
    /// after [`ANSWER_TIMEOUT`].
    pub fn connection(&self) -> RedisResult<Connection> {
        let con = self.client()?.get_connection_with_timeout(CONNECT_WITHIN)?;
        con.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        con.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        Ok(con)
    }

    /// The primary in use, with Sentinel.
    pub fn primary(&self) -> Option<Primary> {
        match self {
            Link::Direct(_) => None,
            Link::Sentinel { primary, .. } => lock(primary).clone(),
        }
    }
}

/// Asks one sentinel for the primary of `service`, and checks that the
/// server it names is a primary.
fn ask(sentinel: &str, service: &str, password: Option<&str>) -> RedisResult<(String, Client)> {
    let mut con =
        Client::open(format!("redis://{sentinel}"))?.get_connection_with_timeout(ANSWER_WITHIN)?;
    // The timeout above covers the connection's setup only.
    con.set_read_timeout(Some(ANSWER_WITHIN))?;
    let named: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(service)
        .query(&mut con)?;
    let (host, port) = named.ok_or_else(|| {
        error(
            "unknown service",
            format!("the sentinel monitors no service named '{service}'"),
        )
    })?;
    let addr = format!("{host}:{port}");
    let url = match password {
        Some(p) => format!("redis://:{p}@{addr}"),
        None => format!("redis://{addr}"),
    };
    let client = Client::open(url)?;
    let mut primary = client.get_connection_with_timeout(ANSWER_WITHIN)?;
    primary.set_read_timeout(Some(ANSWER_WITHIN))?;
    let role: Value = redis::cmd("ROLE").query(&mut primary)?;
    let is_primary = matches!(&role, Value::Array(items)
        if matches!(items.first(), Some(Value::BulkString(r)) if r == b"master"));
    if !is_primary {
        return Err(error(
            "not a primary",
            format!("{addr}, which the sentinel names, is not a primary (yet)"),
        ));
    }
    Ok((addr, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        assert!(matches!(
            Link::parse("redis://127.0.0.1:6379"),
            Ok(Link::Direct(_))
        ));
        match Link::parse("redis+sentinel://:pw@a:26379,b:26380/herald") {
            Ok(Link::Sentinel {
                sentinels,
                service,
                password,
                ..
            }) => {
                assert_eq!(sentinels, ["a:26379", "b:26380"]);
                assert_eq!(service, "herald");
                assert_eq!(password.as_deref(), Some("pw"));
            }
            _ => panic!("a sentinel URL"),
        }
        for (bad, says) in [
            ("localhost:6379", "not a redis://"),
            ("redis+sentinel://a:26379", "no service"),
            ("redis+sentinel://a:26379/", "service name"),
            ("redis+sentinel://a/herald", "not HOST:PORT"),
            ("redis+sentinel://a:x/herald", "not HOST:PORT"),
            ("redis+sentinel://,a:1/herald", "not HOST:PORT"),
            ("redis+sentinel://user@a:1/herald", ":password@"),
        ] {
            let e = Link::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} parsed"));
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn no_sentinel_answering_is_an_error_naming_each() {
        let link = Link::parse("redis+sentinel://127.0.0.1:1,127.0.0.1:2/herald").unwrap();
        let e = link.client().expect_err("nobody answers").to_string();
        assert!(
            e.contains("127.0.0.1:1") && e.contains("127.0.0.1:2"),
            "{e}"
        );
        assert!(link.primary().is_none());
    }
}
