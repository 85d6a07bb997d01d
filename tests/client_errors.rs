//! Errors an application can match on: the server's code kept with fatal
//! and asynchronous errors, client-side validation with its own kinds, a
//! message too large refused before it costs the connection, and a wrong
//! port named as such.

use herald_client::{AckMode, ConsumerOptions, Destination, Error, ErrorCode, Message};
use herald_tests::*;

#[test]
fn bad_destinations_and_selectors_are_refused_with_their_own_kinds() {
    let server = start();
    let (_c, s) = connect(&server);
    let e = s.create_producer(&Destination::topic("a.*")).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidDestination { name, .. } if name == "a.*"),
        "{e:?}"
    );
    let e = s.create_consumer(&Destination::topic("a..b")).unwrap_err();
    assert!(matches!(e, Error::InvalidDestination { .. }), "{e:?}");
    let e = s.create_consumer(&Destination::queue("")).unwrap_err();
    assert!(matches!(e, Error::InvalidDestination { .. }), "{e:?}");
    let options = ConsumerOptions::default().selector("price >");
    let e = s
        .create_consumer_with(&Destination::queue("q"), options)
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSelector { selector, .. } if selector == "price >"),
        "{e:?}"
    );
    let e = s.create_browser(&Destination::topic("t"), "").unwrap_err();
    assert!(matches!(e, Error::InvalidDestination { .. }), "{e:?}");
    let e = s
        .create_browser(&Destination::queue("q"), "a = ")
        .unwrap_err();
    assert!(matches!(e, Error::InvalidSelector { .. }), "{e:?}");
}

#[test]
fn a_message_larger_than_the_server_takes_is_refused_and_the_connection_goes_on() {
    let mut config = test_config();
    config.max_frame_size = 4096;
    config.max_connect_frame_size = 1024;
    let server = start_with(config);
    for reconnect in [0, 3] {
        let mut fc = factory(&server).config().clone();
        fc.reconnect_attempts = reconnect;
        let factory = herald_client::ConnectionFactory::from_config(fc).unwrap();
        let c = factory.create_connection().unwrap();
        let s = c.create_session(AckMode::Auto).unwrap();
        let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
        let p = s.create_producer(&Destination::queue("big")).unwrap();
        let big = Message::text("x".repeat(5000));
        for e in [
            p.send(big.clone()).unwrap_err(),
            p.send_with_receipt(big.clone()).unwrap_err(),
            p.send_async(big.clone(), |_| {}).unwrap_err(),
        ] {
            assert!(
                matches!(e, Error::TooLarge { size, max: 4096 } if size > 5000),
                "{e:?}"
            );
        }
        p.send_with_receipt(Message::text("small")).unwrap();
        let got = consumer.receive(PATIENCE).unwrap().expect("delivered");
        assert_eq!(got.body_text(), Some("small"));
        assert!(!c.is_closed());
    }
}

#[test]
fn dialling_another_listener_says_so() {
    let server = start();
    let stomp = server.stomp_addr().unwrap();
    let admin = server.admin_addr().unwrap();
    for (addr, seems) in [(stomp, "STOMP"), (admin, "HTTP")] {
        let url = format!("herald://{addr}");
        let factory = herald_client::ConnectionFactory::new(&url).unwrap();
        let e = factory.create_connection().unwrap_err();
        assert!(
            matches!(&e, Error::NotHerald { seems: s, .. } if s.contains(seems)),
            "{addr}: {e:?}"
        );
        assert!(
            e.to_string().contains("not a Herald native listener"),
            "{e}"
        );
    }
}

#[test]
fn a_refusal_keeps_its_code() {
    let server = start();
    let (_c, s) = connect(&server);
    let e = s
        .create_producer(&Destination::queue("temp.nobody"))
        .unwrap()
        .send_with_receipt(Message::text("m"))
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
    assert!(matches!(e, Error::Server { fatal: false, .. }));
}

#[test]
fn a_refused_fire_and_forget_send_names_its_message_and_producer() {
    let mut config = test_config();
    config.queues.max_messages = 1;
    config.queues.full_policy = herald_server::config::FullPolicy::Fail;
    let server = start_with(config);
    let (c, s) = connect(&server);
    let (tx, rx) = std::sync::mpsc::channel();
    c.set_exception_listener(move |e| {
        let _ = tx.send(e);
    });
    let _other = s.create_producer(&Destination::queue("elsewhere")).unwrap();
    let p = s.create_producer(&Destination::queue("tiny")).unwrap();
    p.send(Message::text("fits").non_persistent()).unwrap();
    p.send(Message::text("refused").non_persistent()).unwrap();
    let told = rx.recv_timeout(PATIENCE).expect("told");
    match &told {
        Error::SendRefused {
            destination,
            message_id,
            producer,
            ..
        } => {
            assert_eq!(destination, &Destination::queue("tiny"));
            assert!(message_id.starts_with("ID:"), "{message_id}");
            assert_eq!(*producer, Some(p.number()), "{told}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(told.server_code(), Some(ErrorCode::QueueFull));
    assert!(told.to_string().contains("tiny"), "{told}");
    // The connection goes on.
    assert!(!c.is_closed());
}
