//! The `herald-server` binary: flags, config files, signals.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use herald_client::{ConnectionFactory, ErrorCode};

mod common;

use common::TempDir;

/// The binary with these arguments and a data directory of its own.
fn server(args: &[&str]) -> (Command, TempDir) {
    let data = TempDir::new("data");
    (common::command(&data.0, args), data)
}

/// Starts the binary and reads the address it reports.
fn start(args: &[&str]) -> (common::Running, String, TempDir) {
    let data = TempDir::new("data");
    let (child, addr) = common::spawn(&data.0, args);
    (child, addr, data)
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args(["-s", name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn runs_with_flags_and_shuts_down_gracefully_on_sigterm() {
    let (mut child, addr, _data) = start(&["--listen", "127.0.0.1:0", "--workers", "3"]);
    let connection = ConnectionFactory::new(&format!("herald://{addr}"))
        .unwrap()
        .create_connection()
        .unwrap();
    connection.ping().unwrap();
    let (tx, rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = tx.send(e);
    });
    signal(&child, "TERM");
    let told = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        told.server_code(),
        Some(ErrorCode::ServerShutdown),
        "{told:?}"
    );
    assert!(told.to_string().contains("shutting down"), "{told}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn reads_a_config_file_and_command_line_flags_win() {
    let dir = TempDir::new("config");
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("herald.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:1\"\nheartbeat_ms = 4000\n").unwrap();
    let (mut child, addr, _data) = start(&[
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_ne!(addr, "127.0.0.1:1");
    let connection = ConnectionFactory::new(&format!("herald://{addr}"))
        .unwrap()
        .with_heartbeat(Duration::ZERO)
        .create_connection()
        .unwrap();
    assert_eq!(
        connection.heartbeat(),
        Duration::from_millis(4000),
        "the file's default heart-beat"
    );
    signal(&child, "INT");
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_configs_are_refused_naming_the_key_and_file() {
    let dir = TempDir::new("bad");
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("bad.toml");
    for (text, key) in [
        ("wrokers = 2\n", "wrokers"),
        ("max_frame_size = \"big\"\n", "max_frame_size"),
    ] {
        std::fs::write(&path, text).unwrap();
        let out = server(&["--config", path.to_str().unwrap()])
            .0
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key) && err.contains("bad.toml"), "{err}");
    }
    let out = server(&["--config", "/nonexistent/herald.toml"])
        .0
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/herald.toml"));
    let out = server(&["--workers", "5000"]).0.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("workers"));
    // A port offset that takes a default listener past 65535 names it.
    let out = Command::new(env!("CARGO_BIN_EXE_herald-server"))
        .args(["--port-offset", "65000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen") && err.contains("65535"), "{err}");
}

#[test]
fn help_says_what_the_binary_is() {
    let out = Command::new(env!("CARGO_BIN_EXE_herald-server"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.starts_with("The Herald event notification server"),
        "{help}"
    );
    assert!(help.contains("--port-offset"), "{help}");
}

/// A cluster URL that cannot work stops the start with a reason and a
/// failing exit status, never a silent wait.
#[test]
fn a_cluster_url_that_cannot_work_is_a_clear_error() {
    for (url, says) in [
        ("redis+sentinel://127.0.0.1:1/herald", "127.0.0.1:1"),
        ("redis+sentinel://127.0.0.1:1", "names no service"),
        ("memcached://127.0.0.1:1", "not a redis://"),
    ] {
        let started = std::time::Instant::now();
        let out = server(&["--listen", "127.0.0.1:0", "--cluster-redis", url])
            .0
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{url}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{url}");
    }
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = server(&["--listen", &addr]).0.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&addr));
}

#[test]
fn sighup_reloads_permissions_without_dropping_connections() {
    let dir = TempDir::new("reload");
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("herald.toml");
    let hash = herald_server::auth::hash_password("pw").unwrap();
    let config = |grants: &str| {
        format!(
            "[auth]\nfailed_login_delay_ms = 10\n[[auth.users]]\nname = \"alice\"\npassword = \"{hash}\"\nroles = [\"r\"]\n[auth.roles.r]\npublish = [{grants}]\n"
        )
    };
    std::fs::write(&path, config("\"a.#\"")).unwrap();
    let config_arg = path.display().to_string();
    let (mut child, addr, _data) = start(&["--config", &config_arg, "--listen", "127.0.0.1:0"]);
    let factory = ConnectionFactory::new(&format!("herald://alice:pw@{addr}")).unwrap();
    let send = |c: &herald_client::Connection, topic: &str| {
        c.create_session(herald_client::AckMode::Auto)
            .unwrap()
            .create_producer(&herald_client::Destination::topic(topic))
            .unwrap()
            .send_with_receipt(herald_client::Message::text("x"))
    };
    let before = factory.create_connection().unwrap();
    assert!(send(&before, "b.x").is_err(), "not yet allowed");
    std::fs::write(&path, config("\"a.#\", \"b.#\"")).unwrap();
    signal(&child, "HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let c = factory.create_connection().unwrap();
        if send(&c, "b.x").is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload took effect"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Connections are not dropped, and take the new permissions too.
    send(&before, "b.x").unwrap();
    // A bad file is refused; the server goes on with the old config.
    std::fs::write(&path, "[auth]\nrequired = 3\n").unwrap();
    signal(&child, "HUP");
    std::thread::sleep(Duration::from_millis(200));
    let c = factory.create_connection().unwrap();
    send(&c, "b.x").unwrap();
    before.ping().unwrap();
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}
