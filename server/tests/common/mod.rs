//! Helpers for the tests that run the `herald-server` binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh path, unique to this process and call.
    pub fn new(label: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("herald-bin-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary on data directory `data` with these arguments; its output
/// is captured.
pub fn command(data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_herald-server"));
    // Ephemeral STOMP and MQTT ports: tests run side by side.
    c.arg("--data-dir")
        .arg(data)
        .args([
            "--stomp-listen",
            "127.0.0.1:0",
            "--stomp-ws-listen",
            "127.0.0.1:0",
            "--mqtt-listen",
            "127.0.0.1:0",
            "--mqtt-ws-listen",
            "127.0.0.1:0",
            "--amqp-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A running `herald-server`, killed when dropped: a test that fails
/// half way leaves no server behind.
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Already gone, if the test killed or stopped it.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary and returns it with the address it reports. Its log
/// is discarded, so a long run cannot fill an unread pipe.
pub fn spawn(data: &Path, args: &[&str]) -> (Running, String) {
    let (child, mut addrs) = spawn_announcing(data, args, &[]);
    (child, addrs.remove(0))
}

/// [`spawn`], with the addresses of the listeners announced on the lines
/// that start with `others` after the native one's, in that order.
pub fn spawn_announcing(data: &Path, args: &[&str], others: &[&str]) -> (Running, Vec<String>) {
    let mut child = command(data, args)
        .stderr(Stdio::null())
        .spawn()
        .expect("herald-server starts");
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdout.read_line(&mut line).expect("a first line");
    let native = line
        .trim()
        .strip_prefix("herald-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let mut addrs = vec![native];
    for prefix in others {
        loop {
            line.clear();
            assert!(
                stdout.read_line(&mut line).expect("a line") > 0,
                "no {prefix:?}"
            );
            if let Some(addr) = line.trim().strip_prefix(prefix) {
                addrs.push(addr.to_owned());
                break;
            }
        }
    }
    // Whatever else it prints is drained, not left to a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (Running(child), addrs)
}
