//! A redis-server of a test's own (Debian's package), on a free port.
//! Standard library only: the server crate's binary tests include this
//! file too.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server, killed when dropped.
pub struct Redis {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Where it keeps its append-only file, if it keeps one.
    dir: Option<PathBuf>,
}

impl Redis {
    /// A Redis that keeps nothing, on a free port.
    pub fn start() -> Redis {
        Redis::on(free_port(), None)
    }

    /// A Redis that keeps nothing and wants `password`, on a free port.
    pub fn with_password(password: &str) -> Redis {
        let port = free_port();
        let mut command = server_command(port, None);
        command.args(["--requirepass", password]);
        Redis::spawn(command, port, None)
    }

    /// A replica of `primary`, keeping nothing, on a free port.
    pub fn replica_of(primary: &Redis) -> Redis {
        let port = free_port();
        let mut command = server_command(port, None);
        command.args(["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        Redis::spawn(command, port, None)
    }

    /// A Redis that writes every command to its append-only file in `dir`
    /// and syncs it before answering (`appendfsync always`).
    pub fn durable(dir: &Path) -> Redis {
        Redis::on(free_port(), Some(dir.to_owned()))
    }

    /// Kills it (SIGKILL: what it answered must be in its file already).
    pub fn stop(self) -> Stopped {
        let stopped = Stopped {
            port: self.port,
            dir: self.dir.clone(),
        };
        drop(self);
        stopped
    }

    fn on(port: u16, dir: Option<PathBuf>) -> Redis {
        let command = server_command(port, dir.as_deref());
        Redis::spawn(command, port, dir)
    }

    fn spawn(mut command: Command, port: u16, dir: Option<PathBuf>) -> Redis {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (Debian's package; scripts/test.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis { child, port, dir }
    }

    /// Sends one command straight to Redis, as a rogue or broken client
    /// would, and returns the first line of the answer.
    pub fn command(&self, args: &[&[u8]]) -> String {
        use std::io::{BufRead, BufReader, Write};
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("Redis answers");
        let mut cmd = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            cmd.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            cmd.extend_from_slice(arg);
            cmd.extend_from_slice(b"\r\n");
        }
        s.write_all(&cmd).expect("a command sent");
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).expect("an answer");
        line.trim_end().to_owned()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes the process (SIGSTOP): its connections stay open and
    /// nothing answers, as with a partition or a machine gone. It is
    /// killed when dropped all the same.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Lets a frozen process go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIG{name} to redis-server");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.dir.is_none() {
            let _ = std::fs::remove_dir_all(scratch_dir(self.port));
        }
    }
}

/// A [`Redis`] that was stopped, to start again as it was.
pub struct Stopped {
    port: u16,
    dir: Option<PathBuf>,
}

impl Stopped {
    /// Starts it again on the same port, with the same file if it keeps
    /// one.
    pub fn start(self) -> Redis {
        Redis::on(self.port, self.dir)
    }
}

/// redis-server on `port`, keeping its append-only file in `dir` if any.
fn server_command(port: u16, dir: Option<&Path>) -> Command {
    let mut command = Command::new("redis-server");
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", ""])
        // A replica syncs at once rather than after 5 s.
        .args(["--repl-diskless-sync-delay", "0"]);
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).expect("a directory for Redis");
            command
                .args(["--appendonly", "yes", "--appendfsync", "always"])
                .arg("--dir")
                .arg(dir);
        }
        None => {
            // A replica writes what it is sent here: not in the tests'
            // working directory.
            let scratch = scratch_dir(port);
            std::fs::create_dir_all(&scratch).expect("a directory for Redis");
            command
                .args(["--appendonly", "no"])
                .arg("--dir")
                .arg(scratch);
        }
    }
    command
}

/// Where a Redis that keeps nothing on `port` may write all the same.
fn scratch_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("herald-redis-{}-{port}", std::process::id()))
}

/// A Redis Sentinel (redis-server in sentinel mode) watching the primary
/// of the service `herald`, with a quorum of 2 and a 1 s down-after, so
/// that a test's failover takes seconds. Killed when dropped.
pub struct Sentinel {
    redis: Redis,
    _config: PathBuf,
}

impl Sentinel {
    /// A sentinel for `primary`, whose config file goes in `dir`.
    pub fn watching(primary: &Redis, dir: &Path) -> Sentinel {
        let port = free_port();
        std::fs::create_dir_all(dir).expect("a directory for the sentinel");
        let config = dir.join(format!("sentinel-{port}.conf"));
        let text = format!(
            "bind 127.0.0.1\nport {port}\n\
             sentinel monitor herald 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds herald 1000\n\
             sentinel failover-timeout herald 5000\n\
             sentinel parallel-syncs herald 1\n",
            primary.port
        );
        std::fs::write(&config, text).expect("the sentinel's config");
        let mut command = Command::new("redis-server");
        command.arg(&config).arg("--sentinel");
        Sentinel {
            redis: Redis::spawn(command, port, None),
            _config: config,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.redis.port)
    }
}

/// A Redis Cluster of redis-servers of the test's own, on free ports,
/// its slots spread over the primaries by `redis-cli --cluster create`.
/// Its servers are killed when dropped.
pub struct RedisCluster {
    /// The primaries, then the replicas (`None` once killed).
    pub nodes: Vec<Option<Redis>>,
}

impl RedisCluster {
    /// `primaries` primaries with `replicas` replicas each, every slot
    /// served; a node that stops answering is failed over after a second.
    pub fn start(primaries: usize, replicas: usize) -> RedisCluster {
        let cluster = RedisCluster::nodes(primaries * (1 + replicas));
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for port in cluster.ports() {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let made = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli is installed (Debian's redis-tools)");
        assert!(made.success(), "redis-cli --cluster create");
        cluster.wait_until_ok();
        cluster
    }

    /// `n` nodes in cluster mode that serve no slots yet.
    pub fn nodes(n: usize) -> RedisCluster {
        let nodes = (0..n)
            .map(|_| {
                let (port, bus) = (free_port(), free_port());
                let mut command = server_command(port, None);
                command
                    .args(["--cluster-enabled", "yes"])
                    .args(["--cluster-port", &bus.to_string()])
                    .args(["--cluster-config-file", "nodes.conf"])
                    .args(["--cluster-node-timeout", "1000"])
                    // The other shards go on while one fails over.
                    .args(["--cluster-require-full-coverage", "no"]);
                Some(Redis::spawn(command, port, None))
            })
            .collect();
        RedisCluster { nodes }
    }

    /// Every live node's port.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().flatten().map(|r| r.port).collect()
    }

    /// `redis+cluster://` and two of its nodes.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .ports()
            .iter()
            .take(2)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// What `redis-cli -p <port> <args>` prints.
    pub fn cli(port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until every live node says the cluster is fine.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in self.ports() {
            while !RedisCluster::cli(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster never came up");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The port of the primary that serves `key` now.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot: u16 = RedisCluster::cli(self.ports()[0], &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot");
        let shards = RedisCluster::cli(self.ports()[0], &["CLUSTER", "SLOTS"]);
        // Lines: start, end, primary's host, port, id, then replicas'.
        let lines: Vec<&str> = shards.lines().map(str::trim).collect();
        let mut i = 0;
        while i + 3 < lines.len() {
            if let (Ok(start), Ok(end)) = (lines[i].parse::<u16>(), lines[i + 1].parse::<u16>()) {
                if lines[i + 2].starts_with("127.0.0.1") && (start..=end).contains(&slot) {
                    return lines[i + 3].parse().expect("a port");
                }
            }
            i += 1;
        }
        panic!("no primary serves slot {slot}: {shards}")
    }

    /// Waits until the replicas of the primary on `port` have every write
    /// it took: a primary killed before that loses what they lack, when
    /// nothing waited for them (`cluster.min_replicas = 0`).
    pub fn wait_replicated(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info = RedisCluster::cli(port, &["INFO", "replication"]);
            let field = |line: &str, key: &str| -> Option<u64> {
                line.split(',')
                    .find_map(|kv| kv.trim().strip_prefix(key))
                    .and_then(|v| v.trim().parse().ok())
            };
            let primary = info.lines().find_map(|l| field(l, "master_repl_offset:"));
            let replicas: Vec<u64> = info
                .lines()
                .filter(|l| l.starts_with("slave"))
                .filter_map(|l| field(l.split_once(':').map_or(l, |(_, v)| v), "offset="))
                .collect();
            if let Some(primary) = primary {
                if !replicas.is_empty() && replicas.iter().all(|&r| r >= primary) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the replicas never caught up: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        for node in &mut self.nodes {
            if node.as_ref().is_some_and(|n| n.port == port) {
                *node = None;
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
