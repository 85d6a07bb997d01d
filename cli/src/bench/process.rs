//! Servers the comparisons start as processes of their own: Herald from
//! beside this binary, and the peer they are compared with.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use herald_client::{Error, Result};

/// An error of `context` with its cause.
pub fn io(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::InvalidArgument(format!("{context}: {e}"))
}

/// A server process the bench started, killed when dropped.
pub struct Process {
    pub name: &'static str,
    pub child: Child,
    pub addr: SocketAddr,
    pub dir: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Process {
    /// Its resident memory, in bytes.
    pub fn rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .map_err(io("reading the server's /proc status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| Error::InvalidArgument("no VmRSS in /proc status".into()))
    }
}

/// A private directory for one server of this run.
pub fn scratch(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("herald-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io("a scratch directory"))?;
    Ok(dir)
}

/// Waits until `process` takes connections.
pub fn wait_listening(process: &Process, patience: Duration) -> Result<()> {
    let deadline = Instant::now() + patience;
    while TcpStream::connect(process.addr).is_err() {
        if Instant::now() > deadline {
            return Err(Error::InvalidArgument(format!(
                "{} never listened on {}",
                process.name, process.addr
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `herald-server` from beside this binary, every listener on an
/// ephemeral port, in scratch directory `name`; the addresses it announces
/// on the lines that start with `listeners`, in that order (the process's
/// own address is the first).
pub fn start_herald(name: &str, listeners: &[&str]) -> Result<(Process, Vec<SocketAddr>)> {
    let exe = std::env::current_exe().map_err(io("finding herald-server"))?;
    let bin = exe.with_file_name("herald-server");
    let dir = scratch(name)?;
    let any = "127.0.0.1:0";
    let mut child = Command::new(&bin)
        .args([
            "--listen",
            any,
            "--stomp-listen",
            any,
            "--stomp-ws-listen",
            any,
        ])
        .args(["--mqtt-listen", any, "--mqtt-ws-listen", any])
        .args(["--amqp-listen", any, "--admin-listen", any])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            Error::InvalidArgument(format!("{}: {e} (cargo build --bins)", bin.display()))
        })?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::InvalidArgument("no stdout".into()))?;
    let mut found: Vec<Option<SocketAddr>> = vec![None; listeners.len()];
    for line in BufReader::new(stdout)
        .lines()
        .map_while(std::result::Result::ok)
    {
        for (i, prefix) in listeners.iter().enumerate() {
            if let Some(addr) = line
                .strip_prefix(prefix)
                .and_then(|a| a.trim().parse().ok())
            {
                found[i] = Some(addr);
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    match found.into_iter().collect::<Option<Vec<SocketAddr>>>() {
        Some(addrs) => Ok((
            Process {
                name: "herald",
                child,
                addr: addrs[0],
                dir,
            },
            addrs,
        )),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            Err(Error::InvalidArgument(format!(
                "herald-server did not announce {listeners:?}"
            )))
        }
    }
}
