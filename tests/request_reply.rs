//! Request/reply: temporary queues, reply-to, correlation ids.

use std::time::Duration;

use herald_client::{reply, Destination, ErrorCode, Message, Requestor};
use herald_tests::*;

#[test]
fn a_requestor_gets_the_correlated_reply_over_a_temporary_queue() {
    let server = start();
    let (_sc, service_session) = connect(&server);
    let service = service_session
        .create_consumer(&Destination::queue("clock"))
        .unwrap();
    let worker = std::thread::spawn(move || {
        for _ in 0..2 {
            let request = next(&service);
            let answer = format!("answer to {}", request.body_text().unwrap());
            reply(&service_session, &request, Message::text(answer)).unwrap();
        }
    });
    let (_c, session) = connect(&server);
    let requestor = Requestor::new(&session, &Destination::queue("clock")).unwrap();
    for question in ["what time?", "what day?"] {
        let answer = requestor
            .request(Message::text(question), PATIENCE)
            .unwrap();
        assert_eq!(
            answer.body_text(),
            Some(format!("answer to {question}").as_str())
        );
    }
    worker.join().unwrap();
}

#[test]
fn a_request_nobody_answers_times_out() {
    let server = start();
    let (_c, session) = connect(&server);
    let requestor = Requestor::new(&session, &Destination::queue("nobody")).unwrap();
    let e = requestor
        .request(Message::text("hello?"), Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(e, herald_client::Error::Timeout { .. }), "{e}");
    // The request expired with its timeout: it leaves the queue, and a
    // server that comes later is not asked what nobody waits for.
    wait_until("the unanswered request expires", || {
        let queues = server.stats().queues;
        queues.iter().any(|q| q.0 == "nobody" && q.1 == 0)
            && queues.iter().any(|q| q.0 == "ExpiryQueue" && q.1 == 1)
    });
}

#[test]
fn temporary_queues_are_private_and_go_with_their_connection() {
    let server = start();
    let (c, session) = connect(&server);
    let temp = session.create_temporary_queue();
    let _consumer = session.create_consumer(&temp).unwrap();
    let (_c2, other) = connect(&server);
    let e = other.create_consumer(&temp).unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
    // Naming another connection's prefix as one's own temporary queue is
    // refused too.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Subscribe(herald_protocol::frame::Subscribe {
            temporary: true,
            ..herald_protocol::frame::Subscribe::new(
                1,
                herald_protocol::DestinationKind::Queue,
                temp.name.clone(),
            )
        }),
        4,
    );
    let (err, id) = raw.expect_error();
    assert_eq!(
        (err.error_code(), id),
        (Some(ErrorCode::InvalidDestination), 4)
    );
    assert!(server.stats().queues.iter().any(|q| q.0 == temp.name));
    c.close().unwrap();
    wait_until("the temporary queue is gone", || {
        !server.stats().queues.iter().any(|q| q.0 == temp.name)
    });
}
