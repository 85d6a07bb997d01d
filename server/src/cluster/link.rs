//! How a node reaches Redis: one server (`redis://`), the primary that
//! Redis Sentinel names (`redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE`),
//! or the primaries of a Redis Cluster
//! (`redis+cluster://HOST:PORT[,HOST:PORT...]`, see [`super::shards`]).
//!
//! With Sentinel, every (re)connection of the cluster's threads asks the
//! sentinels, in the order given, which server is the primary of the
//! service (`SENTINEL get-master-addr-by-name`), and checks with `ROLE`
//! that it says so itself (a sentinel can lag behind a failover). A thread
//! whose connection breaks, or whose primary was demoted (its writes fail
//! with READONLY), reconnects, and so follows a failover. The primary in
//! use and when it last changed are kept for the log and `/api/health`.

use crate::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redis::{Client, Connection, ErrorKind, RedisError, RedisResult, Value};

use super::slots::SlotMap;
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
    /// The primaries of a Redis Cluster.
    Cluster {
        /// `host:port` of the nodes first asked for the slots.
        seeds: Vec<String>,
        /// The password of the cluster's nodes, if they need one.
        password: Option<String>,
        /// The slots as last read by any of the node's threads.
        slots: Mutex<Option<Arc<SlotMap>>>,
        /// Raised at each read of the slots, so that a thread sees that
        /// another read them anew.
        generation: AtomicU64,
    },
}

/// Why a node cannot work with a Redis Cluster URL's nodes: a mistake in
/// the deployment, reported at start rather than waited out.
pub const NOT_A_CLUSTER: &str = "not a Redis Cluster";

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
            RedisUrl::Cluster { seeds, password } => Link::Cluster {
                seeds,
                password,
                slots: Mutex::new(None),
                generation: AtomicU64::new(0),
            },
        })
    }

    /// A connection to the cluster node at `addr` (`host:port`), with the
    /// URL's password, whose commands give up after [`ANSWER_TIMEOUT`].
    pub fn connect_to(&self, addr: &str) -> RedisResult<Connection> {
        let client = Client::open(self.url_for(addr))?;
        timed(client.get_connection_with_timeout(CONNECT_WITHIN)?)
    }

    /// `redis://[:password@]addr`.
    pub fn url_for(&self, addr: &str) -> String {
        let password = match self {
            Link::Sentinel { password, .. } | Link::Cluster { password, .. } => password.as_deref(),
            Link::Direct(_) => None,
        };
        match password {
            Some(p) => format!("redis://:{p}@{addr}"),
            None => format!("redis://{addr}"),
        }
    }

    /// The slots as last read (read now if never), with the generation
    /// they were read at; `None` but for a Redis Cluster.
    pub fn slots(&self) -> RedisResult<Option<(Arc<SlotMap>, u64)>> {
        let Link::Cluster {
            slots, generation, ..
        } = self
        else {
            return Ok(None);
        };
        if let Some(map) = lock(slots).clone() {
            return Ok(Some((map, generation.load(Ordering::Acquire))));
        }
        self.read_slots().map(Some)
    }

    /// The slots' generation now (see [`Link::slots`]).
    pub fn slots_generation(&self) -> u64 {
        match self {
            Link::Cluster { generation, .. } => generation.load(Ordering::Acquire),
            _ => 0,
        }
    }

    /// Reads the slots anew from the first node that answers: the
    /// primaries last known, then the URL's nodes. A node that is not in
    /// cluster mode is an error at once ([`NOT_A_CLUSTER`]): the URL is
    /// wrong, and no other node will make it right.
    pub fn read_slots(&self) -> RedisResult<(Arc<SlotMap>, u64)> {
        let Link::Cluster {
            seeds,
            slots,
            generation,
            ..
        } = self
        else {
            return Err(error("not a cluster", "one Redis has no slots".into()));
        };
        let known = lock(slots).clone();
        let asked = known
            .iter()
            .flat_map(|m| m.primaries.iter())
            .chain(seeds)
            .fold(Vec::<&String>::new(), |mut all, a| {
                if !all.contains(&a) {
                    all.push(a);
                }
                all
            });
        let mut why = Vec::new();
        for addr in asked {
            match self.ask_slots(addr) {
                Ok(map) => {
                    let map = Arc::new(map);
                    *lock(slots) = Some(map.clone());
                    let now = generation.fetch_add(1, Ordering::AcqRel) + 1;
                    return Ok((map, now));
                }
                Err(e) if e.detail() == Some(NOT_A_CLUSTER) => return Err(e),
                Err(e) => why.push(format!("{addr}: {e}")),
            }
        }
        Err(error("no cluster node answers", why.join("; ")))
    }

    fn ask_slots(&self, addr: &str) -> RedisResult<SlotMap> {
        let client = Client::open(self.url_for(addr))?;
        let mut con = client.get_connection_with_timeout(ANSWER_WITHIN)?;
        con.set_read_timeout(Some(ANSWER_WITHIN))?;
        let reply = match redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(&mut con) {
            Err(e) if e.to_string().contains("cluster support disabled") => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "cluster support is disabled on that Redis (cluster-enabled no)",
                    NOT_A_CLUSTER.to_owned(),
                )))
            }
            reply => reply?,
        };
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        SlotMap::parse(&reply, host).map_err(|e| error("unreadable CLUSTER SLOTS", e.to_string()))
    }

    /// A client for the server to use now: the one server, or the primary
    /// the sentinels name.
    pub fn client(&self) -> RedisResult<Client> {
        match self {
            Link::Direct(client) => Ok(client.clone()),
            Link::Cluster { .. } => Err(error(
                "a cluster has no one server",
                "its threads reach each primary".into(),
            )),
            Link::Sentinel {
                sentinels,
                service,
                primary,
                ..
            } => {
                let mut why = Vec::new();
                for sentinel in sentinels {
                    match ask(self, sentinel, service) {
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
        timed(self.client()?.get_connection_with_timeout(CONNECT_WITHIN)?)
    }

    /// The primary in use, with Sentinel.
    pub fn primary(&self) -> Option<Primary> {
        match self {
            Link::Direct(_) | Link::Cluster { .. } => None,
            Link::Sentinel { primary, .. } => lock(primary).clone(),
        }
    }
}

/// `con`, its commands given up after [`ANSWER_TIMEOUT`].
fn timed(con: Connection) -> RedisResult<Connection> {
    con.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    con.set_write_timeout(Some(ANSWER_TIMEOUT))?;
    Ok(con)
}

/// Asks one sentinel for the primary of `service`, and checks that the
/// server it names is a primary.
fn ask(link: &Link, sentinel: &str, service: &str) -> RedisResult<(String, Client)> {
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
    let client = Client::open(link.url_for(&addr))?;
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
        match Link::parse("redis+cluster://:pw@a:7000,b:7001") {
            Ok(Link::Cluster {
                seeds, password, ..
            }) => {
                assert_eq!(seeds, ["a:7000", "b:7001"]);
                assert_eq!(password.as_deref(), Some("pw"));
            }
            _ => panic!("a cluster URL"),
        }
        for (bad, says) in [
            ("redis+cluster://a:7000/0", "no /path"),
            ("redis+cluster://a", "not HOST:PORT"),
            ("redis+cluster://a:1,", "not HOST:PORT"),
            ("redis+cluster://user@a:1", ":password@"),
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
