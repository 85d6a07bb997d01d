//! The `herald-server` binary: flags, config files, signals.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use herald_client::{ConnectionFactory, Error};

mod common;

use common::TempDir;

/// The binary with these arguments and a data directory of its own.
fn server(args: &[&str]) -> (Command, TempDir) {
    let data = TempDir::new("data");
    (common::command(&data.0, args), data)
}

/// Starts the binary and reads the address it reports.
fn start(args: &[&str]) -> (Child, String, TempDir) {
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
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        Error::ConnectionLost(why) => assert!(why.contains("shutting down"), "{why}"),
        other => panic!("{other:?}"),
    }
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
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = server(&["--listen", &addr]).0.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&addr));
}
