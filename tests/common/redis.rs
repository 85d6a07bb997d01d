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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
