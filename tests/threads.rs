//! Fixed threads: connections cost sockets, not threads. Alone in its own
//! test binary so that no other test's threads come and go meanwhile.

use herald_protocol::Frame;
use herald_tests::*;

#[test]
fn a_thousand_connections_do_not_add_threads() {
    let server = start();
    let before = thread_count();
    let mut raw: Vec<RawClient> = (0..1000)
        .map(|_| RawClient::connected(&server, 0))
        .collect();
    for (i, c) in raw.iter_mut().enumerate() {
        c.subscribe(1, &format!("idle.{i}"), 1);
        assert!(matches!(c.read_frame(), Some((Frame::Receipt, 1))));
    }
    assert_eq!(
        server.stats().connections_per_worker.iter().sum::<usize>(),
        1000
    );
    assert_eq!(server.stats().subscriptions, 1000);
    assert_eq!(
        thread_count(),
        before,
        "the server's threads did not grow with its connections"
    );
    drop(raw);
    wait_until("every connection is cleaned up", || {
        let s = server.stats();
        s.subscriptions == 0 && s.connections_per_worker.iter().sum::<usize>() == 0
    });
}
