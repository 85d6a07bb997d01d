//! The `herald` binary against a real server: pub, sub, bench.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use herald_tests::*;

mod common;

use common::{bench_with_admin, fails, herald, run_ok, succeeded, summary};

/// Starts `herald ARGS` (a `sub`) and waits until it says, on stderr, that
/// its subscription is confirmed; returns it and the rest of its stderr.
fn subscribed(args: &[&str]) -> (std::process::Child, BufReader<std::process::ChildStderr>) {
    let mut sub = herald()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(sub.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("subscribed"), "{line}");
    (sub, err)
}

#[test]
fn pub_reaches_sub_with_its_properties() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let (sub, _) = subscribed(&["--server", &url, "sub", "sales.europe.#", "--count", "2"]);
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
    // Throughput, latency, and the machine's latency floor.
    assert_eq!(summaries.len(), 3, "{stdout}");
    assert!(
        summaries[2].contains("\"system\":\"floor\",")
            && summaries[2].contains("\"recorded\":2000,"),
        "{stdout}"
    );
    for s in summaries {
        assert!(s.contains("\"lost\":0"), "{s}");
    }
    // Three publishers' 20,000 each reach both subscribers, each
    // publisher's in order.
    let throughput = summary(&stdout, "throughput");
    assert!(throughput.contains("\"publishers\":3,"), "{throughput}");
    assert!(throughput.contains("\"received\":120000,"), "{throughput}");
    assert!(throughput.contains("\"out_of_order\":0,"), "{throughput}");
    // Latency from the send is recorded beside latency from the due time,
    // and is never the larger.
    let latency = summary(&stdout, "latency");
    let field = |name: &str| -> f64 {
        let at = latency.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
        let end = latency[at..].find([',', '}']).unwrap() + at;
        latency[at..end].parse().unwrap()
    };
    assert!(field("p50_sent_us") > 0.0, "{latency}");
    assert!(field("p50_sent_us") <= field("p50_us"), "{latency}");
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
    assert_eq!(run_ok(&durable), "news.sport goal\n");
    let e = fails(herald().args(["--server", &url, "sub", "t", "--durable", "d"]));
    assert!(e.contains("--client-id"), "{e}");
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
        m.reply_to(),
        Some(&herald_client::Destination::queue("answers"))
    );
    assert_eq!(m.correlation_id(), Some("c7"));
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
    // The reply's body alone, byte for byte (a terminal gets a newline
    // after it); --verbose adds where it came.
    let answer = run_ok(&["--server", &url, "request", "queue://service", "ping"]);
    assert_eq!(answer, "pong");
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
fn admin_commands_reach_a_management_api_over_https() {
    let mut config = test_config();
    let (ca, cert, key) = tls_files(&config.data_dir.join("tls"), &["localhost"]);
    config.tls.cert = cert;
    config.tls.key = key;
    config.admin.tls = true;
    let server = start_with(config);
    let port = server.admin_addr().unwrap().port();
    let ca = ca.display().to_string();
    let https = format!("https://localhost:{port}");
    // A queue to list.
    let (_c, s) = connect(&server);
    publish_to_queue(&s, "secured");
    let queues = run_ok(&["--admin", &https, "--tls-ca", &ca, "queues"]);
    assert!(queues.contains("secured"), "{queues}");
    // Without the CA the certificate is not trusted, and the error says
    // what to do; plain HTTP to that port is told to use HTTPS.
    let e = fails(herald().args(["--admin", &https, "queues"]));
    assert!(e.contains("--tls-ca"), "{e}");
    let e = fails(herald().args(["--admin", &format!("http://localhost:{port}"), "queues"]));
    assert!(e.contains(&format!("--admin {https}")), "{e}");
}

fn publish_to_queue(session: &herald_client::Session, queue: &str) {
    session
        .create_producer(&herald_client::Destination::queue(queue))
        .unwrap()
        .send_with_receipt(herald_client::Message::text("x"))
        .unwrap();
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
    // An API it cannot reach: the error alone, no header above it.
    let unreachable = herald()
        .args(["--admin", "127.0.0.1:1", "stats", "--count", "1"])
        .output()
        .unwrap();
    assert!(!unreachable.status.success());
    assert!(unreachable.stdout.is_empty(), "{unreachable:?}");
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
    // Through the clients, through the same raw driver, and latency.
    assert_eq!(comparison.matches("\"ratio\"").count(), 7, "{comparison}");
    assert!(
        comparison.contains("\"scenario\":\"raw driver 1 -> 2 deliveries/s\""),
        "{comparison}"
    );
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
fn bench_measures_large_messages_against_the_loopback() {
    let out = run_ok(&[
        "bench",
        "--embedded",
        "--mode",
        "large",
        "--volume",
        "2",
        "--fanout",
        "2",
        "--rounds",
        "1",
    ]);
    let line = summary(&out, "large");
    assert!(line.contains("\"loopback_mb_per_sec\":"), "{line}");
    // 64 KiB and 1 MiB, each 1 -> 1 and 1 -> 2, every one delivered.
    assert_eq!(line.matches("\"lost\":0").count(), 4, "{line}");
    assert!(
        line.contains("\"size\":1048576,\"subscribers\":2"),
        "{line}"
    );
    // And one 2 MiB body streamed, the server's memory measured.
    assert!(line.contains("{\"streamed\":2097152,"), "{line}");
    assert!(!line.contains("\"memory_grew\":null"), "{line}");
}

#[test]
fn bench_times_persistent_sends_beside_the_disks_fdatasync() {
    let out = run_ok(&[
        "bench",
        "--embedded",
        "--mode",
        "persistent",
        "--latency-count",
        "50",
        "--count",
        "600",
        "--rounds",
        "1",
    ]);
    let line = summary(&out, "persistent");
    for key in [
        "fdatasync_p50_us",
        "send_p50_us",
        "floor_p50_us",
        "round_trip_p99_us",
    ] {
        assert!(line.contains(&format!("\"{key}\":")), "{key}: {line}");
    }
    // 1, 4 and 16 producers, windows of 1 and 100: every send receipted.
    assert_eq!(line.matches("\"window\":").count(), 6, "{line}");
    let runs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("{\"scenario\":\"queue\""))
        .collect();
    assert_eq!(runs.len(), 6, "{out}");
    for run in runs {
        assert!(run.contains("\"failed\":0,\"lost\":0"), "{run}");
    }
}

#[test]
fn bench_fans_out_to_many_connections_beside_nats() {
    // Starts herald-server and Debian's nats-server itself.
    let out = run_ok(&[
        "bench",
        "--mode",
        "fanout",
        "--connections",
        "40",
        "--count",
        "4000",
    ]);
    let line = summary(&out, "fanout");
    // Six rows for 4 and for 40 subscribers.
    assert_eq!(line.matches("\"ratio\":").count(), 12, "{line}");
    assert!(
        line.contains("\"scenario\":\"40 subs: deliveries/s\""),
        "{line}"
    );
    assert!(
        !line.contains("\"herald\":0.000,"),
        "every figure measured: {line}"
    );
}

#[test]
fn bench_scales_subscriptions_beside_nats() {
    // Starts herald-server and Debian's nats-server itself.
    let out = run_ok(&[
        "bench",
        "--mode",
        "scale",
        "--subscriptions",
        "12000",
        "--count",
        "5000",
    ]);
    let line = summary(&out, "scale");
    assert_eq!(line.matches("\"ratio\":").count(), 7, "{line}");
    assert!(
        line.contains("\"scenario\":\"12000 patterns: subscribed per s\""),
        "{line}"
    );
    assert!(line.contains("\"selectors\":{\"count\":1200,"), "{line}");
    // Six 1 -> 1 runs (alone and beside: Herald's patterns, Herald's
    // selectors, NATS's patterns), every message delivered.
    assert_eq!(out.matches("\"lost\":0,").count(), 6, "{out}");
}

#[test]
fn bench_weighs_the_client_against_a_raw_driver() {
    // Starts its own herald-server, to read its CPU time; pinned, the
    // server and the bench on a vCPU each.
    let out = run_ok(&[
        "bench", "--mode", "client", "--pin", "--count", "20000", "--rounds", "1",
    ]);
    let line = summary(&out, "client");
    assert!(line.contains("\"pinned\":true"), "{line}");
    for key in ["client_over_raw", "client_cpu_us", "raw_server_cpu_us"] {
        assert!(line.contains(&format!("\"{key}\":")), "{key}: {line}");
    }
    assert!(out.contains("\"received\":20000,\"lost\":0"), "{out}");
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
    assert!(
        !samples.contains(",0]") && !samples.contains("null"),
        "{line}"
    );
    // Without a management API to ask, it says so once and goes on.
    let url = format!("herald://{}", server.local_addr());
    let blind = herald()
        .args(["--server", &url, "--admin", "127.0.0.1:1", "bench"])
        .args(["--mode", "soak", "--duration", "1s", "--rate", "100"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&blind.stderr);
    assert!(blind.status.success(), "{said}");
    assert!(
        said.contains("memory is not measured") && said.contains("scheme"),
        "{said}"
    );
    let line = String::from_utf8_lossy(&blind.stdout).into_owned();
    assert!(summary(&line, "soak").contains(",null]"), "{line}");
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

/// Runs `herald` with `args` and `input` on its standard input; it must
/// succeed. Returns its stdout.
fn run_with_input(args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    let mut child = herald()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    succeeded(child.wait_with_output().unwrap(), &args)
}

#[test]
fn bodies_come_from_stdin_files_and_lines_and_print_as_what_they_are() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let dir = temp_dir("cli-bodies");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("body.bin");
    std::fs::write(&file, b"\x00\xffbin").unwrap();
    // Larger than any argument list a shell passes.
    let big = "x".repeat(300_000);
    run_with_input(
        &["--server", &url, "pub", "queue://in", "-"],
        big.as_bytes(),
    );
    run_ok(&[
        "--server",
        &url,
        "pub",
        "queue://in",
        "--file",
        file.to_str().unwrap(),
    ]);
    run_with_input(
        &[
            "--server",
            &url,
            "pub",
            "--queue",
            "queue://in",
            "--lines",
            "-P",
            "n=1",
        ],
        b"first\nsecond\n",
    );
    let json = run_ok(&["--server", &url, "browse", "in", "--format", "json"]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{json}");
    assert_eq!(rows[0]["body"].as_str().map(str::len), Some(300_000));
    assert_eq!(rows[1]["body_base64"], "AP9iaW4=");
    assert_eq!(
        (&rows[2]["body"], &rows[3]["body"]),
        (&"first".into(), &"second".into())
    );
    assert_eq!(rows[3]["properties"]["n"], 1);
    assert_eq!(rows[3]["destination"], "queue://in");
    // Text: bytes that are not UTF-8 escaped, no [] without properties.
    let text = run_ok(&[
        "--server",
        &url,
        "browse",
        "queue://in",
        "--selector",
        "n = 1",
    ]);
    assert_eq!(text, "in [n=1] first\nin [n=1] second\n");
    let raw = herald()
        .args(["--server", &url, "sub", "--queue", "in", "--count", "1"])
        .args(["--format", "raw"])
        .output()
        .unwrap();
    assert_eq!(raw.stdout.len(), 300_000, "the body alone, byte for byte");
    let text = run_ok(&["--server", &url, "sub", "queue://in", "--count", "1"]);
    assert_eq!(text, "in \\x00\\xffbin\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_over_a_mebibyte_goes_as_a_large_message_and_comes_back_byte_for_byte() {
    // A frame may not hold it: it comes back streamed too.
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let url = format!("herald://{}", server.local_addr());
    let dir = temp_dir("cli-large");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.bin");
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &body).unwrap();
    let path = file.to_str().unwrap();
    run_ok(&[
        "--server",
        &url,
        "pub",
        "queue://big",
        "--file",
        path,
        "-P",
        "n=1",
    ]);
    let line = run_ok(&["--server", &url, "browse", "big"]);
    assert!(
        line.contains("[n=1] (3000000 bytes streamed: --format raw writes them)"),
        "{line}"
    );
    let raw = herald()
        .args(["--server", &url, "sub", "--queue", "big", "--count", "1"])
        .args(["--format", "raw"])
        .output()
        .unwrap();
    assert!(raw.status.success(), "{raw:?}");
    assert!(raw.stdout == body, "the body alone, byte for byte");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_destination_syntax_everywhere_and_durations_with_units() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    run_ok(&["--server", &url, "pub", "queue://orders", "a"]);
    run_ok(&["--server", &url, "pub", "--queue", "queue://orders", "b"]);
    run_ok(&[
        "--server", &url, "pub", "--queue", "orders", "c", "--delay", "1m",
    ]);
    let (_c, session) = connect(&server);
    let browsed = session
        .create_browser(&herald_client::Destination::queue("orders"), "")
        .unwrap()
        .messages()
        .unwrap();
    assert_eq!(browsed.len(), 2, "both reached the queue named orders");
    // browse says what it counts, and that one waits for its time.
    let out = herald()
        .args([
            "--server",
            &url,
            "--admin",
            &format!("http://{}", server.admin_addr().unwrap()),
        ])
        .args(["browse", "orders", "--selector", "1 = 1"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("2 message(s) in orders match"), "{said}");
    assert!(said.contains("1 more scheduled"), "{said}");
    for bad in [
        vec!["pub", "qeue://orders", "x"],
        vec!["sub", "tpic://a"],
        vec!["request", "queu://a", "x"],
        vec!["pub", "--queue", "topic://orders", "x"],
        vec!["pub", "t", "x", "--reply-to", "q://a"],
    ] {
        let e = fails(herald().args(["--server", &url]).args(&bad));
        assert!(
            e.contains("queue://NAME or topic://NAME") || e.contains("names a topic"),
            "{bad:?}: {e}"
        );
    }
    // --timeout: seconds when bare, or with a unit, in every verb.
    let started = std::time::Instant::now();
    run_ok(&["--server", &url, "sub", "quiet", "--timeout", "300ms"]);
    run_ok(&["--server", &url, "sub", "quiet", "--timeout", "0.3"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let e = fails(herald().args([
        "--server",
        &url,
        "request",
        "queue://nobody",
        "x",
        "--timeout",
        "0.2",
    ]));
    assert!(e.contains("200 ms"), "{e}");
    let e = fails(herald().args(["--server", &url, "sub", "t", "--timeout", "5x"]));
    assert!(e.contains("ms, s, m or h"), "{e}");
    // HERALD_URL stands for --server.
    run_ok_env(&["pub", "queue://orders", "d"], ("HERALD_URL", &url));
    assert_eq!(
        session
            .create_browser(&herald_client::Destination::queue("orders"), "")
            .unwrap()
            .messages()
            .unwrap()
            .len(),
        3
    );
}

/// [`run_ok`] with one more variable in the environment.
fn run_ok_env(args: &[&str], (name, value): (&str, &str)) -> String {
    succeeded(
        herald().args(args).env(name, value).output().unwrap(),
        &args,
    )
}

#[test]
fn sub_outlives_a_server_restart_unless_told_not_to() {
    let server = start();
    let addr = server.local_addr();
    let url = format!("herald://{addr}");
    let (mut sub, mut err) = subscribed(&["--server", &url, "sub", "news", "--count", "2"]);
    run_ok(&["--server", &url, "pub", "news", "before"]);
    let mut once = herald()
        .args(["--server", &url, "sub", "news", "--no-reconnect"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut once_err = BufReader::new(once.stderr.take().unwrap());
    let mut first = String::new();
    once_err.read_line(&mut first).unwrap();
    server.stop_keeping_data();
    // --no-reconnect: the end of the connection ends it, with the reason.
    assert!(!once.wait().unwrap().success());
    let mut config = test_config();
    config.listen = addr;
    let again = start_with(config);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = sub.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sub did not come back"
        );
        let _ = herald()
            .args(["--server", &url, "pub", "news", "after"])
            .output();
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(sub.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(out, "news before\nnews after\n");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    assert!(said.contains("reconnecting"), "{said}");
    drop(again);
}

#[test]
fn a_busy_acknowledging_sub_rides_out_its_connection_closed_under_it() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    run_ok(&[
        "--server", &url, "pub", "--queue", "work", "job", "--count", "3000",
    ]);
    let (mut sub, mut err) = subscribed(&[
        "--server",
        &url,
        "sub",
        "--queue",
        "work",
        "--ack",
        "individual",
        "--count",
        "3000",
    ]);
    // Closed by an administrator (then by the server's restart of it,
    // as a graceful shutdown or a failover would) while acknowledgements
    // are on their way, twice.
    for _ in 0..2 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        close_all_connections(&server);
    }
    let status = sub.wait().unwrap();
    let mut said = String::new();
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    assert!(status.success(), "{said}");
    let mut out = String::new();
    std::io::Read::read_to_string(sub.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(out.lines().count(), 3000, "{said}");
}

#[test]
fn mistakes_get_one_clear_line_naming_the_flag() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let native = server.local_addr().to_string();
    for (args, words) in [
        (
            vec!["--admin", "localhost:8161", "queues"],
            "needs its scheme, as in http://localhost:8161",
        ),
        (
            vec!["--admin", "http://127.0.0.1:1", "queues"],
            "connection refused",
        ),
        (
            vec!["--admin", &format!("http://{native}"), "queues"],
            "speaks Herald's native protocol, not HTTP",
        ),
        (
            vec!["--server", &url, "sub", "t", "--durable", "d"],
            "add --client-id",
        ),
        (
            vec!["--server", "herald://127.0.0.1:1", "pub", "t", "x"],
            "is herald-server running there? --server URL",
        ),
    ] {
        let e = fails(herald().args(&args));
        assert!(e.contains(words), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
    }
}

#[test]
fn queues_and_their_messages_are_operated_from_the_command_line() {
    let mut config = test_config();
    config.queues.max_deliveries = 1;
    let server = start_with(config);
    let url = format!("herald://{}", server.local_addr());
    let admin = format!("http://{}", server.admin_addr().unwrap());
    let herald_at = |args: &[&str]| {
        let mut all = vec!["--server", &url, "--admin", &admin];
        all.extend_from_slice(args);
        run_ok(&all)
    };
    assert_eq!(
        herald_at(&["queue", "create", "jobs"]),
        "created queue jobs\n"
    );
    for n in 1..=3 {
        let p = format!("n={n}");
        herald_at(&["pub", "queue://jobs", &format!("job {n}"), "-P", &p]);
    }
    let shown = herald_at(&["queue", "show", "jobs"]);
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("jobs: 3 waiting, 0 scheduled"),
        "{shown}"
    );
    // The settings of its address in force.
    assert!(
        lines[1].starts_with("settings: ") && lines[1].contains(" max_deliveries=1 "),
        "{shown}"
    );
    assert!(lines[2].starts_with("ID"), "{shown}");
    let ids: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{shown}");
    assert!(
        lines[3].contains("n=1") && lines[3].ends_with("job 1"),
        "{shown}"
    );
    // A group id from the command line, and a consumer's priority.
    herald_at(&["pub", "queue://grouped", "g", "-P", "JMSXGroupID=g1"]);
    let got = herald_at(&[
        "sub",
        "--queue",
        "grouped",
        "--priority",
        "-3",
        "--count",
        "1",
        "--format",
        "json",
    ]);
    let got: serde_json::Value = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(got["properties"]["JMSXGroupID"], "g1", "{got}");
    assert_eq!(
        got["properties"]["JMSXGroupFirstForConsumer"], true,
        "{got}"
    );
    let json = herald_at(&["queue", "show", "jobs", "--selector", "n > 1", "--json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).unwrap()["total"],
        2
    );

    let moved = herald_at(&[
        "msg", "move", "--queue", "jobs", "--id", ids[0], "--to", "later",
    ]);
    assert_eq!(
        moved,
        format!("moved {} from jobs to queue://later\n", ids[0])
    );
    let copied = herald_at(&[
        "msg", "copy", "--queue", "jobs", "--id", ids[1], "--to", "later",
    ]);
    assert!(copied.contains(" as ID:admin-copy-"), "{copied}");
    herald_at(&["msg", "delete", "--queue", "queue://jobs", "--id", ids[2]]);
    let e = fails(herald().args([
        "--admin", &admin, "msg", "delete", "--queue", "jobs", "--id", ids[2],
    ]));
    assert!(e.contains("404") && e.contains(ids[2]), "{e}");
    let e = fails(herald().args([
        "--admin", &admin, "msg", "move", "--queue", "jobs", "--id", ids[1],
    ]));
    assert!(e.contains("--to"), "{e}");

    // A dead letter, replayed home by id.
    let c = factory(&server).create_connection().unwrap();
    let client = c.create_session(herald_client::AckMode::Client).unwrap();
    let consumer = client
        .create_consumer(&herald_client::Destination::queue("jobs"))
        .unwrap();
    next(&consumer);
    client.recover().unwrap();
    consumer.close().unwrap();
    let dead = herald_at(&["queue", "show", "DLQ.jobs", "--json"]);
    let dead: serde_json::Value = serde_json::from_str(&dead).unwrap();
    let id = dead["messages"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(dead["messages"][0]["dead_letter"]["from"], "queue://jobs");
    let replayed = herald_at(&["dlq", "replay", "DLQ.jobs", "--id", &id]);
    assert_eq!(replayed, "replayed 1 message(s) from DLQ.jobs\n");
    let e = fails(herald().args(["--admin", &admin, "dlq", "replay", "jobs"]));
    assert!(e.contains("not a dead-letter queue"), "{e}");

    let deleted = herald_at(&["queue", "delete", "later"]);
    assert_eq!(deleted, "deleted queue later and 2 message(s)\n");
    let e = fails(herald().args(["--admin", &admin, "queue", "delete", "later"]));
    assert!(e.contains("no queue 'later'"), "{e}");
}

#[test]
fn a_refusal_is_named_in_words_and_its_code_shown_with_verbose() {
    let mut config = test_config();
    config.topics.strict = true;
    config.topics.declared = vec!["sales".into()];
    let server = start_with(config);
    let url = format!("herald://{}", server.local_addr());
    let e = fails(herald().args(["--server", &url, "pub", "news.x", "y"]));
    assert!(e.starts_with("herald: undeclared topic: "), "{e}");
    assert!(!e.contains("server error"), "{e}");
    let e = fails(herald().args(["--server", &url, "-v", "pub", "news.x", "y"]));
    assert!(e.trim_end().ends_with("(server error code 10)"), "{e}");
}

#[test]
fn sub_says_how_many_messages_its_client_dropped() {
    let server = start();
    let url = format!("herald://{}", server.local_addr());
    let dir = temp_dir("sub-dropped");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("client.toml");
    std::fs::write(
        &config,
        format!("[factories.tight]\nurl = \"{url}\"\npending_messages = 1\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (sub, mut err) = subscribed(&[
        "--client-config",
        config,
        "--factory",
        "tight",
        "sub",
        "burst",
        "--timeout",
        "1s",
    ]);
    run_ok(&["--server", &url, "pub", "burst", "x", "--count", "2000"]);
    let out = sub.wait_with_output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap().lines().count() as u64;
    let mut said = String::new();
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    // The last report counts every message that did not print.
    let dropped = said
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("herald: ")?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        dropped > 0,
        "one waiting message at most, 2,000 in a burst: {said}"
    );
    assert_eq!(printed + dropped, 2000, "{said}");
    assert!(said.contains("pending_messages"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn topic_show_prints_a_keyed_topics_instances() {
    let mut config = test_config();
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "topic://sensors.#".into(),
        key: Some(vec!["sensor_id".into()]),
        durability: Some(herald_server::addresses::Durability::TransientLocal),
        ..Default::default()
    }];
    let server = start_with(config);
    let url = format!("herald://{}", server.local_addr());
    let admin = format!("http://{}", server.admin_addr().unwrap());
    for id in ["7", "7", "8"] {
        run_ok(&[
            "--server",
            &url,
            "pub",
            "sensors.hall",
            "x",
            "-P",
            &format!("sensor_id={id}"),
        ]);
    }
    let shown = run_ok(&["--admin", &admin, "topic", "show", "topic://sensors.hall"]);
    assert!(
        shown.contains("key [sensor_id], history keep_last (depth 1), durability transient_local"),
        "{shown}"
    );
    let rows: Vec<Vec<&str>> = shown
        .lines()
        .filter(|l| l.starts_with("sensor_id="))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [["sensor_id=7", "alive", "1"], ["sensor_id=8", "alive", "1"]],
        "{shown}"
    );
    let json = run_ok(&["--admin", &admin, "topic", "show", "sensors.hall", "--json"]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        v["instances"]["instances"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    assert_eq!(v["topic"]["messages_in"], 3, "{json}");
    // A reader that joins gets each instance's kept sample.
    let kept = run_ok(&[
        "--server",
        &url,
        "sub",
        "sensors.#",
        "--history",
        "1",
        "--time-filter",
        "1s",
        "--count",
        "2",
        "--timeout",
        "5s",
    ]);
    assert_eq!(kept.lines().count(), 2, "{kept}");
}
