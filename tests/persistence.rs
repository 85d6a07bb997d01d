//! Persistent messages and durable subscriptions across a restart of an
//! in-process server on the same data directory.

use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, Destination, Message};
use herald_tests::*;

fn restart(server: TestServer, dir: &std::path::Path) -> TestServer {
    let mut config = test_config();
    config.data_dir = dir.to_owned();
    server.stop_keeping_data();
    start_with(config)
}

fn numbered(i: i32) -> Message {
    Message::text(i.to_string()).with_property("n", i)
}

#[test]
fn persistent_queue_messages_survive_a_restart_and_non_persistent_ones_do_not() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("orders")).unwrap();
        for i in 0..100 {
            p.send(numbered(i).persistent()).unwrap();
            p.send(Message::text("volatile")).unwrap();
        }
        // Consume and acknowledge the first ten persistent ones.
        let (_c2, s2) = {
            let c = factory(&server).create_connection().unwrap();
            let s = c.create_session(AckMode::Client).unwrap();
            (c, s)
        };
        let consumer = s2.create_consumer(&Destination::queue("orders")).unwrap();
        let mut persistent_seen = 0;
        while persistent_seen < 10 {
            if next(&consumer).body_text() != Some("volatile") {
                persistent_seen += 1;
            }
        }
        s2.acknowledge().unwrap();
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("orders")).unwrap();
    for i in 10..100 {
        let m = next(&consumer);
        assert_eq!(
            m.property("n").and_then(|v| v.as_i64()),
            Some(i.into()),
            "{m:?}"
        );
    }
    assert_nothing(&consumer);
}

#[test]
fn a_durable_subscription_and_its_persistent_messages_survive_a_restart() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = as_client(&server, "app");
        let sub = s
            .create_durable_subscriber(&Destination::topic("sales.#"), "d")
            .unwrap();
        sub.close().unwrap();
        let (_pc, ps) = connect(&server);
        let p = ps.create_producer(&Destination::topic("sales.eu")).unwrap();
        for i in 0..5 {
            p.send(numbered(i).persistent()).unwrap();
        }
        p.send(Message::text("volatile")).unwrap();
        ps.create_producer(&Destination::topic("sales.eu"))
            .unwrap()
            .send_with_receipt(Message::text("sync"))
            .unwrap();
    }
    let server = restart(server, &dir);
    let (c, s) = as_client(&server, "app");
    let sub = s
        .create_durable_subscriber(&Destination::topic("sales.#"), "d")
        .unwrap();
    for i in 0..5 {
        assert_eq!(next(&sub).property("n").and_then(|v| v.as_i64()), Some(i));
    }
    assert_nothing(&sub);
    // Deleted, it stays deleted across a restart.
    sub.close().unwrap();
    s.unsubscribe("d").unwrap();
    drop(c);
    let server = restart(server, &dir);
    assert_eq!(server.stats().subscriptions, 0);
}

#[test]
fn dead_letters_and_redelivered_messages_are_kept_too() {
    let mut config = test_config();
    config.queues.max_deliveries = 1;
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        s.create_producer(&Destination::queue("q"))
            .unwrap()
            .send(numbered(1).persistent())
            .unwrap();
        let c2 = factory(&server).create_connection().unwrap();
        let s2 = c2.create_session(AckMode::Client).unwrap();
        let consumer = s2.create_consumer(&Destination::queue("q")).unwrap();
        next(&consumer);
        s2.recover().unwrap();
        wait_until("moved to the DLQ", || {
            s.create_browser(&Destination::queue("DLQ.q"), "")
                .unwrap()
                .messages()
                .unwrap()
                .len()
                == 1
        });
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    assert!(s
        .create_browser(&Destination::queue("q"), "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
    let dead = s
        .create_browser(&Destination::queue("DLQ.q"), "")
        .unwrap()
        .messages()
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0]
            .property("HeraldOriginalDestination")
            .and_then(|v| v.as_str()),
        Some("queue://q")
    );
}

/// Set in the child process of `a_killed_server_loses_no_receipted_message`:
/// the data directory it serves.
const CHILD_DIR: &str = "HERALD_TEST_CRASH_DIR";

/// A child server process, killed when dropped (a failed test leaves
/// none behind; nor does a parent that dies: the child ends when its
/// stdin closes).
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// In the child: serves `dir` on a free port, prints the port, and runs
/// until it is killed. In the parent: starts such a child.
fn crashable_server(dir: &std::path::Path) -> (Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_killed_server_loses_no_receipted_message"])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD_DIR, dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let addr = out
        .lines()
        .map_while(Result::ok)
        // After the harness's "test ... " on the same line.
        .find_map(|l| l.split_once("listening on ").map(|(_, a)| a.to_owned()))
        .expect("the child server says where it listens");
    (Child(child), addr)
}

/// A server process killed (SIGKILL) while persistent messages stream in
/// with receipts, restarted on the same data directory, three times:
/// every receipted message is there, once, in order; no message is there
/// twice. The journal's segment ends in the zeros reserved ahead of its
/// records, as a crash leaves it.
#[test]
fn a_killed_server_loses_no_receipted_message() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let mut config = test_config();
        config.data_dir = dir.into();
        let server = start_with(config);
        println!("listening on {}", server.local_addr());
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(0);
    }
    let dir = temp_dir("crash");
    let mut receipted = Vec::new();
    let mut sent = 0i64;
    for round in 0..3u64 {
        let (mut child, addr) = crashable_server(&dir);
        let factory = ConnectionFactory::new(&format!("herald://{addr}")).unwrap();
        let c = factory.create_connection().unwrap();
        let s = c.create_session(AckMode::Auto).unwrap();
        let p = s.create_producer(&Destination::queue("kept")).unwrap();
        // SIGKILLed after a while, mid-stream.
        std::thread::scope(|scope| {
            let sending = scope.spawn(|| loop {
                let m = Message::text("job").with_property("n", sent).persistent();
                sent += 1;
                match p.send_with_receipt(m) {
                    Ok(()) => receipted.push(sent - 1),
                    Err(_) => break,
                }
            });
            std::thread::sleep(Duration::from_millis(150 + 70 * round));
            child.0.kill().unwrap();
            sending.join().unwrap();
        });
        child.0.wait().unwrap();
    }
    let (child, addr) = crashable_server(&dir);
    let factory = ConnectionFactory::new(&format!("herald://{addr}")).unwrap();
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let consumer = s.create_consumer(&Destination::queue("kept")).unwrap();
    let mut got = Vec::new();
    while let Some(m) = consumer.receive(Duration::from_millis(1000)).unwrap() {
        got.push(m.property("n").and_then(|v| v.as_i64()).unwrap());
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    let lost: Vec<_> = receipted.iter().filter(|k| !got.contains(k)).collect();
    let mut unique = got.clone();
    unique.dedup();
    eprintln!(
        "sent {sent}, receipted {}, delivered {}, lost {}",
        receipted.len(),
        got.len(),
        lost.len()
    );
    assert!(
        receipted.len() > 100,
        "enough was receipted to mean something"
    );
    assert!(lost.is_empty(), "receipted and lost: {lost:?}");
    assert_eq!(unique.len(), got.len(), "none twice");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
}
