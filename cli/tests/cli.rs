//! The `herald` binary against a real server: pub, sub, bench.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use herald_tests::*;

mod common;

use common::{bench_with_admin, fails, herald, run_ok, summary};

#[test]
fn pub_reaches_sub_with_its_properties() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let mut sub = herald()
        .args(["--server", &url, "sub", "sales.europe.#", "--count", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `sub` says so on stderr once its subscription is confirmed.
    let mut err = BufReader::new(sub.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("subscribed"), "{line}");
    let status = herald()
        .args([
            "--server",
            &url,
            "pub",
            "sales.europe.smartphone",
            "sold 3",
            "-P",
            "region=EU",
            "-P",
            "units=3",
            "--count",
            "2",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let out = sub.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["sales.europe.smartphone [region=EU units=3] sold 3"; 2]
    );
}

#[test]
fn bad_arguments_fail_clearly() {
    let out = fails(herald().args(["--server", "nats://x", "pub", "a", "b"]));
    assert!(out.contains("herald://"), "{out}");
    let out = fails(herald().args([
        "--server",
        "herald://127.0.0.1:1",
        "pub",
        "a",
        "-P",
        "novalue",
    ]));
    assert!(out.contains("key=value"), "{out}");
    fails(herald().args(["bench", "--embedded", "--size", "3"]));
}

#[test]
fn bench_reports_figures_and_no_loss() {
    let out = herald()
        .args([
            "bench",
            "--embedded",
            "--count",
            "20000",
            "--subscribers",
            "2",
            "--publishers",
            "3",
            "--rate",
            "5000",
            "--latency-count",
            "2000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("machine: "), "{stdout}");
    let summaries: Vec<_> = stdout
        .lines()
        .filter(|l| l.starts_with("{\"scenario\""))
        .collect();
    assert_eq!(summaries.len(), 2, "{stdout}");
    for s in summaries {
        assert!(s.contains("\"lost\":0"), "{s}");
    }
    // Three publishers' 20,000 each reach both subscribers, each
    // publisher's in order.
    let throughput = summary(&stdout, "throughput");
    assert!(throughput.contains("\"publishers\":3,"), "{throughput}");
    assert!(throughput.contains("\"received\":120000,"), "{throughput}");
    assert!(throughput.contains("\"out_of_order\":0,"), "{throughput}");
}

#[test]
fn queues_persistence_browse_and_selectors_from_the_command_line() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    for (body, region) in [("one", "EU"), ("two", "NA"), ("three", "EU")] {
        let p = format!("region={region}");
        run_ok(&[
            "--server",
            &url,
            "pub",
            "--queue",
            "orders",
            body,
            "-P",
            &p,
            "--persistent",
            "--priority",
            "7",
        ]);
    }
    let browsed = run_ok(&[
        "--server",
        &url,
        "browse",
        "orders",
        "--selector",
        "region = 'EU'",
    ]);
    assert_eq!(browsed.lines().count(), 2, "{browsed}");
    let eu = run_ok(&[
        "--server",
        &url,
        "sub",
        "--queue",
        "orders",
        "--selector",
        "region = 'EU'",
        "--ack",
        "client",
        "--timeout",
        "0.5",
    ]);
    assert_eq!(eu, "orders [region=EU] one\norders [region=EU] three\n");
    let rest = run_ok(&[
        "--server",
        &url,
        "sub",
        "--queue",
        "orders",
        "--ack",
        "individual",
        "--count",
        "1",
    ]);
    assert_eq!(rest, "orders [region=NA] two\n");
    fails(herald().args(["--server", &url, "pub", "t", "--priority", "10"]));
}

#[test]
fn a_durable_subscription_from_the_command_line_keeps_messages_while_away() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let durable = [
        "--server",
        &url,
        "--client-id",
        "cli",
        "sub",
        "news.#",
        "--durable",
        "d",
        "--timeout",
        "0.3",
    ];
    assert_eq!(run_ok(&durable), "");
    run_ok(&["--server", &url, "pub", "news.sport", "goal"]);
    assert_eq!(run_ok(&durable), "news.sport [] goal\n");
    fails(herald().args(["--server", &url, "sub", "t", "--durable", "d"]));
}

#[test]
fn ttl_delay_reply_to_and_correlation_id_from_the_command_line() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    run_ok(&[
        "--server", &url, "pub", "--queue", "q", "expires", "--ttl", "1",
    ]);
    let before = std::time::Instant::now();
    run_ok(&[
        "--server",
        &url,
        "pub",
        "--queue",
        "q",
        "later",
        "--delay",
        "300",
        "--reply-to",
        "queue://answers",
        "--correlation-id",
        "c7",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (_c, session) = connect(&server);
    let consumer = session
        .create_consumer(&herald_client::Destination::queue("q"))
        .unwrap();
    let m = next(&consumer);
    assert_eq!(m.body_text(), Some("later"), "the expired one never comes");
    assert!(
        before.elapsed() >= std::time::Duration::from_millis(300),
        "not before its delay"
    );
    assert_eq!(
        m.reply_to,
        Some(herald_client::Destination::queue("answers"))
    );
    assert_eq!(m.correlation_id.as_deref(), Some("c7"));
}

#[test]
fn request_and_reply_from_two_commands() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let mut replier = herald()
        .args([
            "--server",
            &url,
            "reply",
            "queue://service",
            "pong",
            "--count",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(replier.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("answering"), "{line}");
    let answer = run_ok(&["--server", &url, "request", "queue://service", "ping"]);
    assert_eq!(
        answer,
        "temp.".to_owned()
            + answer
                .trim_start_matches("temp.")
                .split(' ')
                .next()
                .unwrap()
            + " [] pong\n"
    );
    assert!(replier.wait().unwrap().success());
}

#[test]
fn passwd_prints_a_hash_the_server_accepts_for_user_and_password() {
    let mut child = herald()
        .arg("passwd")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(hash.starts_with("$argon2id$"), "{hash}");

    let mut config = test_config();
    config.auth.failed_login_delay_ms = 10;
    config.auth.roles.insert(
        "writer".into(),
        herald_server::config::RoleEntry {
            publish: vec!["queue:inbox".into()],
            ..Default::default()
        },
    );
    config.auth.users.push(herald_server::config::UserEntry {
        name: "ann".into(),
        password: hash,
        roles: vec!["writer".into()],
    });
    let server = start_with(config);
    let url = format!("herald://{}", server.local_addr());
    run_ok(&[
        "--server",
        &url,
        "--user",
        "ann",
        "--password",
        "s3cret",
        "pub",
        "--queue",
        "inbox",
        "hello",
    ]);
    // The password from the environment: a wrong one, then a forbidden
    // destination.
    for (password, queue, complaint) in [
        ("wrong", "inbox", "invalid user name or password"),
        ("s3cret", "other", "'publish'"),
    ] {
        let out = fails(
            herald()
                .args([
                    "--server", &url, "--user", "ann", "pub", "--queue", queue, "x",
                ])
                .env("HERALD_PASSWORD", password),
        );
        assert!(out.contains(complaint), "{out}");
    }
}

#[test]
fn admin_commands_go_through_the_management_api() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let admin = format!("http://{}", server.admin_addr().unwrap());
    run_ok(&[
        "--server", &url, "pub", "--queue", "backlog", "x", "--count", "2",
    ]);
    run_ok(&["--server", &url, "pub", "news.today", "y"]);
    let queues = run_ok(&["--admin", &admin, "queues"]);
    let row = queues
        .lines()
        .find(|l| l.starts_with("backlog"))
        .unwrap_or_else(|| panic!("{queues}"));
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "{queues}");
    let topics = run_ok(&["--admin", &admin, "topics"]);
    assert!(topics.contains("news.today"), "{topics}");
    let connections = run_ok(&["--admin", &admin, "connections"]);
    assert!(connections.starts_with("ID"), "{connections}");
    let purged = run_ok(&["--admin", &admin, "purge", "backlog"]);
    assert!(purged.contains("purged 2"), "{purged}");
    let stats = run_ok(&[
        "--admin",
        &admin,
        "stats",
        "--count",
        "2",
        "--interval",
        "10",
    ]);
    assert_eq!(stats.lines().count(), 3, "{stats}");
    let missing = fails(herald().args(["--admin", &admin, "purge", "nothing"]));
    assert!(
        missing.contains("404") && missing.contains("nothing"),
        "{missing}"
    );
}

#[test]
fn bench_compares_with_a_nats_server_in_one_run() {
    // Debian's nats-server (scripts/test.sh installs it), on a free port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut nats = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server is installed (Debian's package; scripts/test.sh installs it)");
    let addr = format!("127.0.0.1:{port}");
    wait_until("nats-server listens", || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let out = run_ok(&[
        "--server",
        &url,
        "bench",
        "--compare-nats",
        &addr,
        "--count",
        "20000",
        "--fanout",
        "2",
        "--latency-count",
        "2000",
        "--rate",
        "5000",
        "--rounds",
        "2",
    ]);
    let _ = nats.kill();
    let _ = nats.wait();
    let comparison = summary(&out, "comparison");
    assert_eq!(comparison.matches("\"ratio\"").count(), 5, "{comparison}");
    let nats_runs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('{') && l.contains("\"system\":\"nats\""))
        .collect();
    // Two rounds of 1 -> 1, 1 -> 2 and latency.
    assert_eq!(nats_runs.len(), 6, "{out}");
    for run in nats_runs {
        assert!(run.contains("\"lost\":0"), "{run}");
    }
}

#[test]
fn bench_compares_mqtt_with_a_mosquitto_it_starts() {
    // Debian's mosquitto (scripts/test.sh installs it) and herald-server,
    // both started by the bench on free ports.
    let out = run_ok(&[
        "bench",
        "--compare-mosquitto",
        "--count",
        "20000",
        "--fanout",
        "2",
        "--latency-count",
        "2000",
        "--rate",
        "5000",
        "--rounds",
        "1",
        "--mqtt-connections",
        "200",
    ]);
    let comparison = summary(&out, "mqtt_comparison");
    // Idle memory (quiet from the start, and after one publish), QoS 0
    // 1 -> 1 and 1 -> 2, QoS 1 1 -> 1, p50, p99.
    assert_eq!(comparison.matches("\"ratio\"").count(), 7, "{comparison}");
    assert!(
        comparison.contains("that published once (200)"),
        "{comparison}"
    );
    let runs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('{') && l.contains("\"system\":"))
        .collect();
    // Three throughput runs and one latency run on each server.
    assert_eq!(runs.len(), 8, "{out}");
    for run in runs {
        assert!(run.contains("\"lost\":0"), "{run}");
    }
}

#[test]
fn bench_measures_throughput_beside_many_subscriptions() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let out = run_ok(&[
        "--server",
        &url,
        "bench",
        "--mode",
        "subscriptions",
        "--subscriptions",
        "300",
        "--count",
        "20000",
    ]);
    let line = summary(&out, "subscriptions");
    assert!(line.contains("\"subscriptions\":300"), "{line}");
    assert_eq!(
        out.matches("\"lost\":0").count(),
        2,
        "both runs lose nothing: {out}"
    );
}

#[test]
fn bench_measures_topics_and_queues_across_two_nodes_of_a_cluster() {
    let redis = Redis::start();
    let (a, b) = (
        start_with(cluster_config(&redis, "a")),
        start_with(cluster_config(&redis, "b")),
    );
    let url = |s: &TestServer| format!("herald://{}", s.local_addr());
    let out = run_ok(&[
        "--server",
        &url(&a),
        "bench",
        "--mode",
        "throughput",
        "--count",
        "20000",
        "--subscriber-server",
        &url(&b),
    ]);
    let across = summary(&out, "across_nodes");
    assert!(across.contains("\"ratio\":"), "{across}");
    assert_eq!(out.matches("\"lost\":0").count(), 2, "{out}");
    let out = run_ok(&[
        "--server",
        &url(&a),
        "bench",
        "--mode",
        "queue",
        "--count",
        "5000",
        "--persistent",
        "--subscriber-server",
        &url(&b),
    ]);
    let queue = summary(&out, "queue");
    assert!(queue.contains("\"consumed\":5000,"), "{queue}");
    assert!(queue.contains("\"receipted\":5000,"), "{queue}");
    // The consumer was on b: b read every message from Redis.
    let read = b
        .cluster()
        .unwrap()
        .stats
        .read
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(read, 5000);
}

#[test]
fn a_soak_counts_every_message_and_samples_the_servers_memory() {
    let server = start();
    let args = ["--mode", "soak", "--duration", "4s", "--rate", "600"];
    let out = bench_with_admin(&server, &args);
    let line = summary(&out, "soak");
    assert_eq!(line.matches("\"lost\":0,").count(), 4, "{line}");
    assert_eq!(
        line.matches("\"unmarked_duplicates\":0,").count(),
        4,
        "{line}"
    );
    assert!(!line.contains("\"expected\":0,"), "{line}");
    // One sample a second, each with the server's resident memory.
    let samples = line
        .split("\"rss\":[")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    assert!(samples.matches('[').count() >= 3, "{line}");
    assert!(!samples.contains(",0]"), "{line}");
    let refused = fails(herald().args(["bench", "--mode", "soak", "--duration", "10x"]));
    assert!(refused.contains("unit"), "{refused}");
}

#[test]
fn bench_compares_standalone_and_clustered_nodes_side_by_side() {
    let redis = Redis::start();
    let out = run_ok(&[
        "bench",
        "--mode",
        "cluster",
        "--cluster-redis",
        &redis.url(),
        "--count",
        "20000",
    ]);
    let line = summary(&out, "cluster");
    for setup in ["standalone", "1 clustered node", "2 clustered nodes"] {
        assert!(line.contains(&format!("\"setup\":\"{setup}\"")), "{line}");
    }
    assert!(!line.contains("\":0,") && !line.contains("\":0}"), "{line}");
    // Every queue run consumed and receipted all it sent.
    assert_eq!(out.matches("\"lost\":0").count(), 6, "{out}");
    let refused = fails(herald().args(["bench", "--mode", "cluster"]));
    assert!(refused.contains("--cluster-redis"), "{refused}");
}
