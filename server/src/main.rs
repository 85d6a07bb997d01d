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

/// The Herald event notification server.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Configuration file; without it the embedded defaults
    /// (config/herald.toml) apply.
    #[arg(long)]
    config: Option<PathBuf>,
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
    /// Cluster mode through this Redis (`redis://host:port`, or with
    /// Sentinel `redis+sentinel://host:port[,host:port...]/service`),
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
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
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
    for signal in signals.forever() {
        if signal != SIGHUP {
            log::info!("signal {signal}: shutting down");
            break;
        }
        match server.reload() {
            Ok(file) => log::info!("SIGHUP: reloaded {file}"),
            Err(why) => log::error!("SIGHUP: reload refused, the old config stays: {why}"),
        }
    }
    server.shutdown();
    if let Some(path) = &args.pid_file {
        let _ = std::fs::remove_file(path);
    }
    ExitCode::SUCCESS
}
