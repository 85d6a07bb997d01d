//! Every program in `client/examples/` runs against a real server and says
//! what it should. `cargo test` builds the examples before it runs the
//! tests; they are found beside this test's binary.

use std::path::PathBuf;
use std::process::Command;

use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_tests::*;

/// Runs example `name` with `env`; returns what it printed, failing the
/// test if it failed.
fn run(name: &str, env: &[(&str, String)]) -> String {
    // target/<profile>/deps/examples-<hash> → target/<profile>/examples/
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().parent().unwrap().join("examples");
    let out = Command::new(dir.join(name))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("example {name} in {}: {e}", dir.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn url(server: &TestServer) -> Vec<(&'static str, String)> {
    vec![("HERALD_URL", format!("herald://{}", server.local_addr()))]
}

#[test]
fn the_basic_examples_run() {
    let server = start();
    let env = url(&server);
    let expect = [
        ("publisher", "published 3 sales and 1 persistent invoice"),
        ("listener", "heard: 5 laptops in EU"),
        ("worker", "job 2: done (delivery 2, redelivered true)"),
        ("transaction", "committed: Some(\"shipment for order 7\")"),
        ("request_reply", "laptop: 999"),
        (
            "durable_subscriber",
            "kept while away: Some(\"disk 91 % full\")",
        ),
    ];
    for (name, said) in expect {
        let out = run(name, &env);
        assert!(out.contains(said), "{name}: {out}");
    }
    let listener = run("listener", &env);
    assert!(listener.contains("heard: 3 laptops in EU"), "{listener}");
    assert!(!listener.contains("UK"), "the selector: {listener}");
}

#[test]
fn the_failover_example_moves_to_the_other_server() {
    let (a, b) = (start(), start());
    let both = format!("herald://{},{}", a.local_addr(), b.local_addr());
    let example = std::thread::spawn(move || {
        run("failover", &[("HERALD_URL", both), ("ROUNDS", "12".into())])
    });
    std::thread::sleep(std::time::Duration::from_millis(800));
    a.stop_keeping_data();
    let out = example.join().unwrap();
    assert!(out.contains("resumed with"), "{out}");
    assert!(out.contains("beat 11"), "{out}");
}

#[test]
fn the_tls_example_logs_in_over_tls() {
    let mut config = test_config();
    let (ca, cert, key) = tls_files(&config.data_dir.join("tls"), &["localhost"]);
    config.tls.enabled = true;
    config.tls.listen = "127.0.0.1:0".parse().unwrap();
    config.tls.cert = cert;
    config.tls.key = key;
    config.auth.required = true;
    config.auth.roles.insert(
        "writer".into(),
        RoleEntry {
            publish: vec!["queue:examples.#".into()],
            ..RoleEntry::default()
        },
    );
    config.auth.users = vec![UserEntry {
        name: "alice".into(),
        password: hash_password("secret").unwrap(),
        roles: vec!["writer".into()],
    }];
    let server = start_with(config);
    let port = server.tls_addr().unwrap().port();
    let out = run(
        "tls",
        &[
            ("HERALD_TLS_URL", format!("herald+tls://localhost:{port}")),
            ("HERALD_TLS_CA", ca.display().to_string()),
            ("HERALD_USER", "alice".into()),
            ("HERALD_PASSWORD", "secret".into()),
        ],
    );
    assert!(out.contains("sent a persistent message over TLS"), "{out}");
}
