//! TLS: the native protocol over the TLS listener with certificates the
//! test makes, the server's certificate checked against the configured CA,
//! and what a TLS listener does with clients that are not.

use std::io::{Read, Write};
use std::net::TcpStream;

use herald_client::{AckMode, ConnectionFactory, Destination, Message};
use herald_tests::*;

fn tls_server() -> (TestServer, std::path::PathBuf) {
    tls_server_for(&["localhost", "127.0.0.1"])
}

fn tls_server_for(names: &[&str]) -> (TestServer, std::path::PathBuf) {
    let mut config = test_config();
    let dir = config.data_dir.join("tls");
    let (ca, cert, key) = tls_files(&dir, names);
    config.tls.enabled = true;
    config.tls.listen = "127.0.0.1:0".parse().unwrap();
    config.tls.cert = cert;
    config.tls.key = key;
    (start_with(config), ca)
}

fn tls_factory(server: &TestServer, host: &str, ca: &std::path::Path) -> ConnectionFactory {
    let port = server.tls_addr().unwrap().port();
    ConnectionFactory::new(&format!("herald+tls://{host}:{port}"))
        .unwrap()
        .with_tls_ca(ca.display().to_string())
}

#[test]
fn messages_flow_over_tls_both_ways_and_in_bulk() {
    let (server, ca) = tls_server();
    let c = tls_factory(&server, "localhost", &ca)
        .create_connection()
        .unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let consumer = subscribe(&s, "secure.#");
    // A plain subscriber sees what a TLS publisher sends, and back.
    let (_pc, plain) = connect(&server);
    let plain_sub = subscribe(&plain, "secure.#");
    let p = s
        .create_producer(&Destination::topic("secure.big"))
        .unwrap();
    let big = "x".repeat(300_000);
    for i in 0..200 {
        p.send(Message::text(format!("{i}"))).unwrap();
    }
    p.send_with_receipt(Message::text(big.clone())).unwrap();
    for i in 0..200 {
        assert_eq!(next(&consumer).body_text(), Some(&*i.to_string()));
        assert_eq!(next(&plain_sub).body_text(), Some(&*i.to_string()));
    }
    assert_eq!(next(&consumer).body_text().map(str::len), Some(big.len()));
    assert_eq!(next(&plain_sub).body_text().map(str::len), Some(big.len()));
    publish(&plain, "secure.reply", "from plain");
    assert_eq!(next(&consumer).body_text(), Some("from plain"));
    // By IP address too: the certificate names 127.0.0.1.
    tls_factory(&server, "127.0.0.1", &ca)
        .create_connection()
        .unwrap();
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let (server, _) = tls_server();
    let other = temp_dir("other-ca");
    let (wrong_ca, _, _) = tls_files(&other, &["localhost"]);
    let e = tls_factory(&server, "localhost", &wrong_ca)
        .create_connection()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("signed by a CA this client does not trust"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(other);
}

#[test]
fn a_name_the_certificate_does_not_carry_is_refused() {
    let (server, ca) = tls_server_for(&["localhost"]);
    let e = tls_factory(&server, "127.0.0.1", &ca)
        .create_connection()
        .unwrap_err();
    assert!(
        e.to_string().contains("its certificate is not accepted"),
        "{e}"
    );
}

#[test]
fn without_a_ca_the_system_store_is_asked_and_a_readable_ca_is_needed() {
    let (server, _) = tls_server();
    let port = server.tls_addr().unwrap().port();
    let url = format!("herald+tls://localhost:{port}");
    // The test CA is in no system store: the error says how to name it.
    let e = ConnectionFactory::new(&url)
        .unwrap()
        .create_connection()
        .unwrap_err();
    assert!(matches!(e, herald_client::Error::Tls { .. }), "{e:?}");
    assert!(
        e.to_string().contains("does not trust") && e.to_string().contains("--tls-ca"),
        "{e}"
    );
    let e = ConnectionFactory::new(&url)
        .unwrap()
        .with_tls_ca("/nonexistent/ca.pem")
        .create_connection()
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
}

#[test]
fn each_side_of_a_tls_mismatch_says_which_port_expects_tls() {
    let (server, ca) = tls_server();
    let plain_to_tls = ConnectionFactory::new(&format!("herald://{}", server.tls_addr().unwrap()))
        .unwrap()
        .create_connection()
        .unwrap_err();
    assert!(
        plain_to_tls.to_string().contains("that port expects TLS"),
        "{plain_to_tls}"
    );
    let tls_to_plain = ConnectionFactory::new(&format!(
        "herald+tls://localhost:{}",
        server.local_addr().port()
    ))
    .unwrap()
    .with_tls_ca(ca.display().to_string())
    .create_connection()
    .unwrap_err();
    assert!(
        tls_to_plain
            .to_string()
            .contains("that port does not speak TLS"),
        "{tls_to_plain}"
    );
}

#[test]
fn plain_bytes_to_the_tls_listener_are_dropped_and_nobody_else_notices() {
    let (server, ca) = tls_server();
    let good = tls_factory(&server, "localhost", &ca)
        .create_connection()
        .unwrap();
    let s = good.create_session(AckMode::Auto).unwrap();
    let sub = subscribe(&s, "still.#");
    // A native client that does not speak TLS, and garbage.
    for junk in [
        &b"HR\x01\x01\0\0\0\0\0\0\0\0"[..],
        &[0x16, 3, 3, 0xff, 0xff, 1, 2, 3],
    ] {
        let mut raw = TcpStream::connect(server.tls_addr().unwrap()).unwrap();
        raw.set_read_timeout(Some(PATIENCE)).unwrap();
        raw.write_all(junk).unwrap();
        let mut buf = [0u8; 256];
        // The server answers with at most a TLS alert, then closes.
        loop {
            match raw.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    // A client that connects and says nothing does not hold anyone up.
    let _idle = TcpStream::connect(server.tls_addr().unwrap()).unwrap();
    let (_pc, plain) = connect(&server);
    publish(&plain, "still.here", "fine");
    assert_eq!(next(&sub).body_text(), Some("fine"));
}

#[test]
fn unusable_certificate_files_stop_the_server_from_starting() {
    let mut config = test_config();
    config.tls.enabled = true;
    config.tls.listen = "127.0.0.1:0".parse().unwrap();
    config.tls.cert = "/nonexistent/cert.pem".into();
    config.tls.key = "/nonexistent/key.pem".into();
    let e = herald_server::Server::start(config).err().expect("refused");
    assert!(e.to_string().contains("tls.cert"), "{e}");
    let mut config = test_config();
    let dir = config.data_dir.join("tls");
    let (_, cert, _) = tls_files(&dir, &["localhost"]);
    config.tls.enabled = true;
    config.tls.listen = "127.0.0.1:0".parse().unwrap();
    config.tls.key = cert.clone();
    config.tls.cert = cert;
    let e = herald_server::Server::start(config).err().expect("refused");
    assert!(e.to_string().contains("tls.key"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// One HTTPS request over rustls, trusting `ca`; returns the raw answer.
fn https_get(addr: std::net::SocketAddr, ca: &std::path::Path, path: &str, auth: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let session = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(session, socket);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer);
    answer
}

#[test]
fn the_management_interface_speaks_https_with_basic_auth() {
    let mut config = test_config();
    let dir = config.data_dir.join("tls");
    let (ca, cert, key) = tls_files(&dir, &["localhost"]);
    config.tls.cert = cert;
    config.tls.key = key;
    config.admin.tls = true;
    config.auth.failed_login_delay_ms = 10;
    config.auth.roles.insert(
        "ops".into(),
        herald_server::config::RoleEntry {
            admin: true,
            ..Default::default()
        },
    );
    config.auth.users.push(herald_server::config::UserEntry {
        name: "ops".into(),
        password: herald_server::auth::hash_password("root").unwrap(),
        roles: vec!["ops".into()],
    });
    let server = start_with(config);
    let admin = server.admin_addr().unwrap();
    assert!(server.admin_url().unwrap().starts_with("https://"));
    // "ops:root" and "ops:nope", base64.
    let ok = https_get(admin, &ca, "/api/health", "b3BzOnJvb3Q=");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("\"status\":\"ok\""), "{ok}");
    let refused = https_get(admin, &ca, "/api/health", "b3BzOm5vcGU=");
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    // Plain HTTP to it gets no HTTP answer.
    let mut plain = TcpStream::connect(admin).unwrap();
    plain.set_read_timeout(Some(PATIENCE)).unwrap();
    plain
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
}
