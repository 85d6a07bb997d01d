//! `herald-server`: runs a Herald broker until interrupted.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use herald_server::config::DEFAULT_TOML;
use herald_server::{Config, Server};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Messages routed since the last trim that make a burst worth trimming
/// after.
const BURST: u64 = 100_000;
/// Messages a second under which a burst is over.
const QUIET: u64 = 1_000;

/// Watches the server's message counts, once a second, to give the
/// memory a burst freed back to the system when the burst is over (see
/// [`glibc`]).
#[derive(Default)]
struct Bursts {
    last: u64,
    since_trim: u64,
}

impl Bursts {
    /// Counts what moved in the last second; trims if a burst just ended.
    fn watch(&mut self, server: &herald_server::ServerHandle) {
        let total = server.messages_moved();
        let moved = total.saturating_sub(self.last);
        self.last = total;
        self.since_trim += moved;
        if self.since_trim >= BURST && moved < QUIET {
            self.since_trim = 0;
            let released = glibc::give_back_free_memory();
            log::debug!("a burst is over: free memory given back ({released})");
        }
    }
}

/// The largest block glibc's malloc serves from its heaps (32 MiB, the
/// top of the range its own dynamic threshold moves in); larger ones get
/// mappings of their own, unmapped when freed.
const MMAP_THRESHOLD: i32 = 32 << 20;

/// How glibc is told to give back what a burst used.
///
/// By default glibc raises its mmap threshold to the size of each large
/// block freed, and its trim threshold with it: after a burst, its large
/// buffers sat in the heaps, free but resident. Measured ten seconds
/// after a 1 -> 10 burst of 10,000,000 deliveries (docs/performance.md,
/// "Memory after a burst"), against 10 MB idle: 100 to 113 MB as it was;
/// 58 MB with the workers' delivery buckets given back; 32 MB with
/// `malloc_trim` once the burst is over; 11 to 12 MB with the threshold
/// fixed at 32 MiB as well. Fixing it at glibc's default of 128 KiB gave
/// the memory back too but cost 8 % of the throughput (every buffer over
/// 128 KiB a mapping of its own); at 32 MiB the throughput is unchanged.
/// The trim threshold goes to 32 MiB too: at its 128 KiB default, every
/// tick that gave a burst's delivery buckets back shrank the heap, and the
/// next read faulted the pages in again, zeroed (7 % of a 1 -> 1 run's
/// samples in `clear_page`); the explicit trim after the burst gives the
/// memory back instead.
/// And one arena: `malloc_trim` gives back the free pages inside every
/// arena but the free top of the main one only, and glibc shrinks a
/// thread's arena only when its top passes the trim threshold, so a
/// worker's arena kept up to 32 MiB resident after a burst (25 to 64 MB
/// ten seconds after, one arena's top most of it). With a single arena
/// 11.4 to 12 MB, and the throughput within the noise of many (the
/// workers allocate little per message, and glibc's per-thread cache
/// serves most of that without the arena's lock).
/// glibc takes these settings only through its C API (or the environment
/// at start-up), hence the server's `unsafe` blocks, both here.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    /// Fixes the mmap and trim thresholds at [`super::MMAP_THRESHOLD`]
    /// and the arenas at one; whether glibc took all three.
    pub fn tune() -> bool {
        // SAFETY: mallopt takes two integers and only changes the
        // allocator's settings; it runs first in `main`, before any other
        // thread exists, with parameters and values in the range glibc
        // documents (mallopt(3)). It returns 1 when it took the setting.
        #[allow(unsafe_code)]
        let took = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, super::MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, super::MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_ARENA_MAX, 1) == 1
        };
        took
    }

    /// Hands the free memory of glibc's heaps back to the system; whether
    /// there was any.
    pub fn give_back_free_memory() -> bool {
        // SAFETY: malloc_trim takes an integer (the room to leave at the
        // top of the main heap) and returns whether it released memory;
        // it locks each arena it walks, as malloc does, so other threads
        // go on allocating meanwhile (malloc_trim(3)).
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
}

/// Other allocators keep no such thresholds.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod glibc {
    pub fn tune() -> bool {
        true
    }

    pub fn give_back_free_memory() -> bool {
        false
    }
}

/// The Herald event notification server: one process, on its embedded
/// defaults without a config file.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Configuration file; without it the embedded defaults
    /// (config/herald.toml) apply.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Moves every listener's port (those of the config, before the
    /// flags below) up by this much: `--port-offset 1 --data-dir d2` runs a
    /// second server beside one on the defaults.
    #[arg(long, value_name = "N")]
    port_offset: Option<u16>,
    /// Address to listen on, overriding the config.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Worker threads, overriding the config (0 = one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Data directory for the journal, overriding the config.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Start even if the journal is damaged (not just torn at its end):
    /// skip what does not read and set the damaged segments aside, as
    /// `journal.recover_corrupt = true`.
    #[arg(long)]
    recover_corrupt: bool,
    /// Address of the STOMP listener, overriding the config.
    #[arg(long)]
    stomp_listen: Option<SocketAddr>,
    /// Address of the STOMP-over-WebSocket listener, overriding the config.
    #[arg(long)]
    stomp_ws_listen: Option<SocketAddr>,
    /// Address of the MQTT listener, overriding the config.
    #[arg(long)]
    mqtt_listen: Option<SocketAddr>,
    /// Address of the MQTT-over-TLS listener (it needs tls.cert and
    /// tls.key), overriding the config.
    #[arg(long)]
    mqtt_tls_listen: Option<SocketAddr>,
    /// Address of the MQTT-over-WebSocket listener, overriding the config.
    #[arg(long)]
    mqtt_ws_listen: Option<SocketAddr>,
    /// Address of the AMQP 1.0 listener, overriding the config.
    #[arg(long)]
    amqp_listen: Option<SocketAddr>,
    /// Address of the AMQP-over-TLS listener (it needs tls.cert and
    /// tls.key), overriding the config.
    #[arg(long)]
    amqp_tls_listen: Option<SocketAddr>,
    /// Address of the AMQP-over-WebSocket listener, overriding the config.
    #[arg(long)]
    amqp_ws_listen: Option<SocketAddr>,
    /// Address of the TLS listener (it needs tls.cert and tls.key),
    /// overriding the config.
    #[arg(long)]
    tls_listen: Option<SocketAddr>,
    /// PEM certificate chain for the TLS listeners, overriding tls.cert.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert, overriding tls.key.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Address of the management interface, overriding the config.
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Cluster mode through this Redis (`redis://host:port`, with
    /// Sentinel `redis+sentinel://host:port[,host:port...]/service`, or a
    /// Redis Cluster `redis+cluster://host:port[,host:port...]`),
    /// overriding the config.
    #[arg(long)]
    cluster_redis: Option<String>,
    /// This node's id in the cluster, overriding the config.
    #[arg(long)]
    node_id: Option<String>,
    /// Write the server's process id to this file once it listens (for
    /// `kill -HUP $(cat FILE)`); removed when it stops.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let tuned = glibc::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    if !tuned {
        log::warn!("the allocator did not take its settings: a burst's memory may stay");
    }
    let args = Args::parse();
    let config = match &args.config {
        Some(path) => Config::load(path),
        None => Config::parse(DEFAULT_TOML, "embedded herald.toml"),
    };
    let mut config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("herald-server: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(offset) = args.port_offset {
        if let Err(e) = config.offset_ports(offset) {
            eprintln!("herald-server: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(workers) = args.workers {
        config.workers = workers;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    config.journal.recover_corrupt |= args.recover_corrupt;
    if let Some(addr) = args.stomp_listen {
        config.stomp.listen = addr;
        config.stomp.enabled = true;
    }
    if let Some(addr) = args.stomp_ws_listen {
        config.stomp.websocket_listen = addr;
        config.stomp.websocket_enabled = true;
    }
    if let Some(addr) = args.mqtt_listen {
        config.mqtt.listen = addr;
        config.mqtt.enabled = true;
    }
    if let Some(addr) = args.mqtt_tls_listen {
        config.mqtt.tls_listen = addr;
        config.mqtt.tls_enabled = true;
    }
    if let Some(addr) = args.mqtt_ws_listen {
        config.mqtt.websocket_listen = addr;
        config.mqtt.websocket_enabled = true;
    }
    if let Some(addr) = args.amqp_listen {
        config.amqp.listen = addr;
        config.amqp.enabled = true;
    }
    if let Some(addr) = args.amqp_tls_listen {
        config.amqp.tls_listen = addr;
        config.amqp.tls_enabled = true;
    }
    if let Some(addr) = args.amqp_ws_listen {
        config.amqp.websocket_listen = addr;
        config.amqp.websocket_enabled = true;
    }
    if let Some(addr) = args.admin_listen {
        config.admin.listen = addr;
        config.admin.enabled = true;
    }
    if let Some(addr) = args.tls_listen {
        config.tls.listen = addr;
        config.tls.enabled = true;
    }
    if let Some(cert) = args.tls_cert {
        config.tls.cert = cert;
    }
    if let Some(key) = args.tls_key {
        config.tls.key = key;
    }
    if let Some(url) = args.cluster_redis {
        config.cluster.redis = url;
    }
    if let Some(id) = args.node_id {
        config.cluster.node_id = id;
    }
    if let Err(e) = config.validate("command line") {
        eprintln!("herald-server: {e}");
        return ExitCode::from(2);
    }
    // Registered before anything is announced, so that a signal sent as
    // soon as the address is printed is handled rather than fatal.
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("herald-server: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = match Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("herald-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Announced on stdout for scripts; a closed stdout is no reason to
    // stop serving.
    let mut announce = format!("herald-server listening on {}\n", server.local_addr());
    if let Some(addr) = server.stomp_addr() {
        announce.push_str(&format!("herald-server STOMP listening on {addr}\n"));
    }
    if let Some(addr) = server.stomp_ws_addr() {
        announce.push_str(&format!(
            "herald-server STOMP over WebSocket listening on {addr}\n"
        ));
    }
    if let Some(addr) = server.tls_addr() {
        announce.push_str(&format!("herald-server TLS listening on {addr}\n"));
    }
    let mqtt = server.mqtt();
    for (what, addr) in [
        ("MQTT", mqtt.tcp),
        ("MQTT over TLS", mqtt.tls),
        ("MQTT over WebSocket", mqtt.websocket),
    ] {
        if let Some(addr) = addr {
            announce.push_str(&format!("herald-server {what} listening on {addr}\n"));
        }
    }
    if let Some(addr) = server.amqp_addr() {
        announce.push_str(&format!("herald-server AMQP listening on {addr}\n"));
    }
    if let Some(addr) = server.amqp_tls_addr() {
        announce.push_str(&format!(
            "herald-server AMQP over TLS listening on {addr}\n"
        ));
    }
    if let Some(addr) = server.amqp_ws_addr() {
        announce.push_str(&format!(
            "herald-server AMQP over WebSocket listening on {addr}\n"
        ));
    }
    if let Some(url) = server.admin_url() {
        announce.push_str(&format!("herald-server admin listening on {url}\n"));
    }
    if let Some(path) = &args.pid_file {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            eprintln!("herald-server: --pid-file {}: {e}", path.display());
            server.shutdown();
            return ExitCode::FAILURE;
        }
    }
    let mut stdout = std::io::stdout();
    let _ = stdout
        .write_all(announce.as_bytes())
        .and_then(|()| stdout.flush());
    // The server's threads do the work; this one waits for SIGINT or
    // SIGTERM and then shuts down gracefully: every client is told why.
    // SIGHUP re-reads users, permissions and limits.
    // Signals are looked at every 100 ms; the message counts every second.
    let mut bursts = Bursts::default();
    'serve: for turn in 0u64.. {
        for signal in signals.pending() {
            if signal != SIGHUP {
                log::info!("signal {signal}: shutting down");
                break 'serve;
            }
            match server.reload() {
                Ok(file) => log::info!("SIGHUP: reloaded {file}"),
                Err(why) => log::error!("SIGHUP: reload refused, the old config stays: {why}"),
            }
        }
        if turn % 10 == 0 {
            bursts.watch(&server);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.shutdown();
    if let Some(path) = &args.pid_file {
        let _ = std::fs::remove_file(path);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_allocator_takes_its_settings_and_gives_back_what_is_free() {
        assert!(super::glibc::tune());
        // A large block freed, then everything free handed back: neither
        // call may fail or disturb the allocator.
        let burst = vec![vec![1u8; 1 << 20]; 64];
        assert_eq!(burst.iter().map(|b| b[0] as usize).sum::<usize>(), 64);
        drop(burst);
        super::glibc::give_back_free_memory();
        let again = vec![2u8; 1 << 20];
        assert_eq!(again[again.len() - 1], 2);
    }
}
