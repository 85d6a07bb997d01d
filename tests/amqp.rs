//! The AMQP 1.0 listener at the frame level: the header exchange, SASL
//! against Herald's users, and what a client that breaks the rules gets
//! (a close or detach naming the problem, and nobody else disturbed).
//! Real clients are in tests/interop/test_amqp.py.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::Bytes;
use herald_protocol::amqp::delivery::{DeliveryState, TxnControl};
use herald_protocol::amqp::message::{Body, Header, Message as AmqpMessage};
use herald_protocol::amqp::performative::{Attach, Begin, Detach, Disposition, Open, Transfer};
use herald_protocol::amqp::terminus::{LinkTarget, Source};
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};
use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_server::Config;
use herald_tests::*;

#[test]
fn a_durable_message_is_accepted_once_the_journal_has_it_and_read_natively() {
    let server = start();
    let mut c = AmqpClient::opened(&server, "raw-1");
    c.sender(0, "queue://raw");
    match c.next(false) {
        Got::Amqp(0, Performative::Flow(f)) => assert_eq!(f.link_credit, Some(1000)),
        other => panic!("{other:?}"),
    }
    c.transfer(0, 0, false, &amqp_text("kept", true));
    match c.next(false) {
        Got::Amqp(0, Performative::Disposition(d)) => {
            assert_eq!((d.first, d.settled), (0, true));
            assert!(
                format!("{:?}", d.state).contains("36"),
                "accepted: {:?}",
                d.state
            );
        }
        other => panic!("{other:?}"),
    }
    // The native client reads it, persistent.
    let (_conn, s) = connect(&server);
    let consumer = s
        .create_consumer(&herald_client::Destination::queue("raw"))
        .unwrap();
    let m = next(&consumer);
    assert_eq!(m.body_text(), Some("kept"));
    assert_eq!(m.delivery_mode, herald_client::DeliveryMode::Persistent);
}

#[test]
fn the_open_names_the_broker_and_what_it_offers() {
    let server = start();
    let mut c = AmqpClient::connect(&server);
    assert_eq!(c.sasl("ANONYMOUS", b""), 0);
    c.write(&ProtocolHeader::Amqp.bytes());
    assert!(matches!(c.next(true), Got::Header(ProtocolHeader::Amqp)));
    c.perform(0, Performative::Open(amqp_open("who")));
    let Got::Amqp(0, Performative::Open(o)) = c.next(false) else {
        panic!("no open");
    };
    let Value::Map(properties) = &o.properties else {
        panic!("{:?}", o.properties);
    };
    let product = (
        Value::Symbol("product".into()),
        Value::String("herald".into()),
    );
    assert!(properties.contains(&product), "{properties:?}");
    assert!(
        properties
            .iter()
            .any(|(k, _)| *k == Value::Symbol("version".into())),
        "{properties:?}"
    );
    for cap in [
        "ANONYMOUS-RELAY",
        "DELAYED_DELIVERY",
        "SHARED-SUBS",
        "sole-connection-for-container",
    ] {
        assert!(o.offered_capabilities.iter().any(|c| c == cap), "{o:?}");
    }
}

#[test]
fn broken_rules_get_a_close_or_detach_that_names_them() {
    let mut config = test_config();
    config.amqp.link_credit = 2;
    let server = start_with(config);

    // Not AMQP at all: the server's header, then nothing.
    let mut c = AmqpClient::connect(&server);
    c.write(b"GET / HTTP/1.1\r\n\r\n");
    assert!(matches!(c.next(true), Got::Header(_)));
    assert!(matches!(c.next(false), Got::Closed));

    // A mechanism that is not offered.
    let mut c = AmqpClient::connect(&server);
    assert_eq!(c.sasl("SCRAM-SHA-1", b""), 1);

    // A frame over max_frame_size; one on a channel without a session;
    // a handle attached twice.
    let mut c = AmqpClient::opened(&server, "raw-2");
    c.write(&[0x7f, 0, 0, 0, 2, 0, 0, 0]);
    let (condition, why) = c.error();
    assert_eq!(condition, "amqp:connection:framing-error");
    assert!(why.contains("max_frame_size"), "{why}");

    let mut c = AmqpClient::opened(&server, "raw-3");
    c.perform(5, Performative::End(None));
    let (condition, why) = c.error();
    assert_eq!(condition, "amqp:connection:framing-error");
    assert!(why.contains("channel 5"), "{why}");

    let mut c = AmqpClient::opened(&server, "raw-4");
    c.attach_sender(1, "queue://x");
    c.attach_sender(1, "queue://x");
    let (condition, _) = c.error();
    assert_eq!(condition, "amqp:session:handle-in-use");

    // Credit is renewed as messages arrive: five go through a link given
    // two at a time, each half spent renewed by a flow.
    let mut c = AmqpClient::opened(&server, "raw-5");
    c.sender(0, "queue://credit");
    for id in 0..5 {
        match c.next(false) {
            Got::Amqp(0, Performative::Flow(f)) => assert_eq!(f.link_credit, Some(2)),
            other => panic!("{other:?}"),
        }
        c.transfer(0, id, true, &amqp_text("m", false));
    }
    let (_conn, s) = connect(&server);
    let consumer = s
        .create_consumer(&herald_client::Destination::queue("credit"))
        .unwrap();
    for _ in 0..5 {
        next(&consumer);
    }

    // Garbage for a message: rejected (unsettled) with a decode error.
    let mut c = AmqpClient::opened(&server, "raw-6");
    c.attach_sender(0, "queue://garbage");
    let t = Transfer {
        handle: 0,
        delivery_id: Some(0),
        delivery_tag: Some(Bytes::from_static(b"t")),
        message_format: Some(0),
        settled: false,
        more: false,
        state: Value::Null,
        aborted: false,
    };
    c.frame(
        FrameKind::Amqp,
        0,
        &Performative::Transfer(t).to_value(),
        &[0xa1, 0x05, b'x'],
    );
    loop {
        match c.next(false) {
            Got::Amqp(_, Performative::Disposition(d)) => {
                assert!(
                    format!("{:?}", d.state).contains("decode-error"),
                    "{:?}",
                    d.state
                );
                break;
            }
            Got::Closed => panic!("closed"),
            _ => {}
        }
    }

    // A second connection with a container id in use is refused if it
    // asks to be the container's only one (a JMS client id), and goes in
    // beside the first if not (a container with several connections).
    let _holder = AmqpClient::opened(&server, "taken");
    let _beside = AmqpClient::opened(&server, "taken");
    let mut c = AmqpClient::connect(&server);
    assert_eq!(c.sasl("ANONYMOUS", b""), 0);
    c.write(&ProtocolHeader::Amqp.bytes());
    assert!(matches!(c.next(true), Got::Header(_)));
    let sole = Open {
        desired_capabilities: vec!["sole-connection-for-container".into()],
        ..amqp_open("taken")
    };
    c.perform(0, Performative::Open(sole));
    let (condition, _) = c.error();
    assert_eq!(condition, "amqp:invalid-field");

    // Cut mid-frame: nobody else is disturbed.
    let mut c = AmqpClient::opened(&server, "raw-7");
    c.write(&[0, 0, 1, 0, 2, 0]);
    drop(c);
    let mut c = AmqpClient::opened(&server, "raw-8");
    c.sender(0, "queue://after");
}

#[test]
fn sasl_plain_checks_herald_users_and_anonymous_is_not_offered_when_logins_are_required() {
    let mut config: Config = test_config();
    config.auth.required = true;
    config.auth.failed_login_delay_ms = 10;
    config.auth.users.push(UserEntry {
        name: "ann".into(),
        password: hash_password("secret").unwrap(),
        roles: vec!["writer".into()],
    });
    config.auth.roles.insert(
        "writer".into(),
        RoleEntry {
            publish: vec!["queue:mine".into()],
            ..RoleEntry::default()
        },
    );
    let server = start_with(config);
    let mut c = AmqpClient::connect(&server);
    c.write(&ProtocolHeader::Sasl.bytes());
    assert!(matches!(c.next(true), Got::Header(ProtocolHeader::Sasl)));
    match c.next(false) {
        Got::Sasl(Sasl::Mechanisms(m)) => assert_eq!(m, ["PLAIN"]),
        other => panic!("{other:?}"),
    }
    let mut c = AmqpClient::connect(&server);
    assert_eq!(c.sasl("PLAIN", b"\0ann\0wrong"), 1);
    let mut c = AmqpClient::connect(&server);
    assert_eq!(c.sasl("PLAIN", b"\0ann\0secret"), 0);
    c.write(&ProtocolHeader::Amqp.bytes());
    assert!(matches!(c.next(true), Got::Header(_)));
    c.perform(0, Performative::Open(amqp_open("ann-app")));
    assert!(matches!(c.next(false), Got::Amqp(0, Performative::Open(_))));
    c.perform(
        0,
        Performative::Begin(Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            handle_max: 4,
        }),
    );
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Begin(_))
    ));
    // Her role may send to queue 'mine' only: another is refused at attach.
    c.attach_sender(0, "queue://theirs");
    let (condition, why) = c.error();
    assert_eq!(condition, "amqp:unauthorized-access");
    assert!(why.contains("theirs"), "{why}");
    c.sender(1, "queue://mine");
}

#[test]
fn a_receiver_gets_no_more_than_its_credit_in_frames_its_max_frame_size_takes() {
    let server = start();
    let (_conn, s) = connect(&server);
    let p = s
        .create_producer(&herald_client::Destination::queue("big"))
        .unwrap();
    for i in 0..3 {
        p.send_with_receipt(herald_client::Message::text(format!(
            "{i}:{}",
            "x".repeat(2000)
        )))
        .unwrap();
    }
    let mut c = AmqpClient::opened(&server, "receiver");
    c.attach_receiver(0, "queue://big");
    match c.next(false) {
        Got::Amqp(0, Performative::Attach(a)) => assert!(!a.role_receiver),
        other => panic!("{other:?}"),
    }
    c.credit(0, 0, 2);
    let mut ids = Vec::new();
    for i in 0..2 {
        let (id, m, frames) = c.delivery(512);
        assert!(frames >= 4, "2 KB in frames of 512 bytes: {frames}");
        match m.body {
            Body::Value(Value::String(text)) => assert!(text.starts_with(&format!("{i}:"))),
            other => panic!("{other:?}"),
        }
        ids.push(id);
    }
    // No credit, no third: nothing comes until more is granted.
    c.stream
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    assert!(!c.fill(), "a delivery beyond the credit");
    c.stream.set_read_timeout(Some(PATIENCE)).unwrap();
    c.credit(0, 2, 1);
    let (id, _, _) = c.delivery(512);
    ids.push(id);
    // Accepted: the queue is empty.
    c.perform(
        0,
        Performative::Disposition(Disposition {
            role_receiver: true,
            first: ids[0],
            last: Some(ids[2]),
            settled: true,
            state: DeliveryState::Accepted.to_value(),
        }),
    );
    wait_until("the queue is empty", || {
        server
            .stats()
            .queues
            .iter()
            .any(|(name, depth, in_flight)| name == "big" && *depth == 0 && *in_flight == 0)
    });
}

/// Attaches link 0 from a durable `source` and detaches it without
/// closing it: the subscription keeps what comes meanwhile.
fn subscribe_and_leave(c: &mut AmqpClient, source: Source) {
    c.attach_receiver_from(0, source);
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    c.perform(
        0,
        Performative::Detach(Detach {
            handle: 0,
            closed: false,
            error: None,
        }),
    );
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Detach(_))
    ));
}

/// A durable subscription's attach is answered once the subscription is
/// kept; what it kept while its link was away follows that answer, even
/// when the client grants credit before the answer comes (as Proton and
/// rhea do).
#[test]
fn a_resumed_durable_receiver_gets_its_attach_before_any_transfer() {
    let server = start();
    let durable = || durable_source("topic://news");
    let mut c = AmqpClient::opened(&server, "resumer");
    subscribe_and_leave(&mut c, durable());
    let (_conn, s) = connect(&server);
    publish(&s, "news", "while away");
    c.attach_receiver_from(0, durable());
    c.credit(0, 0, 10);
    match c.next(false) {
        Got::Amqp(0, Performative::Attach(a)) => assert!(!a.role_receiver),
        other => panic!("the attach first, not {other:?}"),
    }
    let (_, m, _) = c.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("while away".into())));
}

/// The flow that answers a drain: `(delivery count, credit)` it gives.
fn drained(c: &mut AmqpClient) -> (u32, u32) {
    match c.next(false) {
        Got::Amqp(0, Performative::Flow(f)) if f.drain => {
            (f.delivery_count.unwrap(), f.link_credit.unwrap())
        }
        other => panic!("the drain's answer, not {other:?}"),
    }
}

/// A drain (a JMS receive with a timeout, in Qpid JMS) is answered once
/// what waited for the link is sent: the credit left is used up and the
/// client told so, also when it comes with a durable subscription's
/// attach (tests/cluster.rs has it come before the attach is answered).
#[test]
fn a_drain_is_answered_after_what_waited() {
    let server = start();
    let (_conn, s) = connect(&server);
    let producer = s
        .create_producer(&herald_client::Destination::queue("drained"))
        .unwrap();
    producer
        .send_with_receipt(herald_client::Message::text("one"))
        .unwrap();
    let mut c = AmqpClient::opened(&server, "drainer");
    c.attach_receiver(0, "queue://drained");
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    c.flow(0, 0, 5, true);
    let (_, m, _) = c.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("one".into())));
    assert_eq!(drained(&mut c), (5, 0), "all five credits used up");

    // A durable subscription resumed: the drain comes with the attach.
    let durable = || durable_source("topic://drained-news");
    let mut d = AmqpClient::opened(&server, "durable-drainer");
    subscribe_and_leave(&mut d, durable());
    publish(&s, "drained-news", "while away");
    d.together(|d| {
        d.attach_receiver_from(0, durable());
        d.flow(0, 0, 3, true);
    });
    assert!(matches!(
        d.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    let (_, m, _) = d.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("while away".into())));
    assert_eq!(drained(&mut d), (3, 0));
}

/// A message of `size` bytes in transfers of at most `frame` bytes of
/// payload each, the last one `more` if `finish` is false.
fn send_in_pieces(c: &mut AmqpClient, delivery_id: u32, body: &[u8], frame: usize, finish: bool) {
    let message = AmqpMessage {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        body: Body::Data(vec![Bytes::copy_from_slice(body)]),
        ..AmqpMessage::default()
    };
    let mut payload = Vec::new();
    message.encode(&mut payload);
    let pieces: Vec<&[u8]> = payload.chunks(frame).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        if last && !finish {
            return;
        }
        let t = Transfer {
            handle: 0,
            delivery_id: (i == 0).then_some(delivery_id),
            delivery_tag: (i == 0).then(|| Bytes::from_static(b"big")),
            message_format: Some(0),
            settled: false,
            more: !last,
            state: Value::Null,
            aborted: false,
        };
        c.frame(
            FrameKind::Amqp,
            0,
            &Performative::Transfer(t).to_value(),
            piece,
        );
    }
}

#[test]
fn a_ten_mebibyte_message_goes_through_in_pieces_and_one_cut_off_goes_nowhere() {
    // On the default limits.
    let server = start();
    // Cut off mid-message: nothing is routed, nothing else disturbed.
    let mut c = AmqpClient::opened(&server, "cut");
    c.sender(0, "queue://big");
    send_in_pieces(&mut c, 0, &vec![7u8; 1 << 20], 60_000, false);
    drop(c);
    let body: Vec<u8> = (0..10 << 20).map(|i| (i % 251) as u8).collect();
    let mut c = AmqpClient::opened(&server, "whole");
    c.sender(0, "queue://big");
    send_in_pieces(&mut c, 0, &body, 60_000, true);
    loop {
        match c.next(false) {
            Got::Amqp(_, Performative::Disposition(d)) => {
                assert_eq!(d.first, 0);
                assert!(format!("{:?}", d.state).contains("36"), "{:?}", d.state);
                break;
            }
            Got::Closed => panic!("closed"),
            _ => {}
        }
    }
    // Read back through a receiver whose frames are 512 bytes: the same
    // bytes, and only that message (the one cut off was never routed).
    c.attach_receiver(1, "queue://big");
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    c.credit(1, 0, 10);
    let (_, m, frames) = c.delivery(512);
    assert!(frames > 20_000, "{frames}");
    assert_eq!(m.body, Body::Data(vec![Bytes::from(body)]));
    c.stream
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    assert!(!c.fill(), "a second message");
}

/// Sends `control` to the coordinator on `handle` as delivery `id`; the
/// state it is settled with.
fn coordinate(c: &mut AmqpClient, handle: u32, id: u32, control: TxnControl) -> DeliveryState {
    let message = AmqpMessage {
        body: Body::Value(control.to_value()),
        ..AmqpMessage::default()
    };
    c.transfer(handle, id, false, &message);
    loop {
        match c.next(false) {
            Got::Amqp(_, Performative::Disposition(d)) if d.first == id => {
                return DeliveryState::from_value(d.state).unwrap().unwrap();
            }
            Got::Closed => panic!("closed"),
            _ => {}
        }
    }
}

fn queue_depth(server: &TestServer, queue: &str) -> usize {
    server
        .stats()
        .queues
        .iter()
        .find(|(name, ..)| name == queue)
        .map_or(0, |(_, depth, _)| *depth)
}

#[test]
fn local_transactions_hold_sends_until_a_commit_and_drop_them_on_a_rollback() {
    let server = start();
    let mut c = AmqpClient::opened(&server, "tx");
    // The coordinator, then a sender.
    let coordinator = LinkTarget::Coordinator(vec!["amqp:local-transactions".into()]);
    c.perform(
        0,
        Performative::Attach(Box::new(Attach {
            name: "txn-ctrl".into(),
            handle: 9,
            role_receiver: false,
            snd_settle_mode: 0,
            rcv_settle_mode: 0,
            source: Source::default().to_value(),
            target: coordinator.to_value(),
            initial_delivery_count: Some(0),
            max_message_size: 0,
            offered_capabilities: vec![],
            desired_capabilities: vec![],
            properties: Value::Null,
        })),
    );
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    c.attach_sender(0, "queue://tx");
    let DeliveryState::Declared(txn) = coordinate(&mut c, 9, 0, TxnControl::Declare) else {
        panic!("not declared");
    };
    let in_txn = |c: &mut AmqpClient, id: u32, body: &str| {
        let mut payload = Vec::new();
        amqp_text(body, true).encode(&mut payload);
        let t = Transfer {
            handle: 0,
            delivery_id: Some(id),
            delivery_tag: Some(Bytes::from(id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled: false,
            more: false,
            state: DeliveryState::Transactional {
                txn_id: txn.clone(),
                outcome: None,
            }
            .to_value(),
            aborted: false,
        };
        c.frame(
            FrameKind::Amqp,
            0,
            &Performative::Transfer(t).to_value(),
            &payload,
        );
    };
    in_txn(&mut c, 0, "one");
    in_txn(&mut c, 1, "two");
    // Each is answered with the outcome it will have; none is routed yet.
    let mut answered = 0;
    while answered < 2 {
        if let Got::Amqp(_, Performative::Disposition(d)) = c.next(false) {
            let state = DeliveryState::from_value(d.state).unwrap().unwrap();
            assert!(
                matches!(state, DeliveryState::Transactional { .. }),
                "{state:?}"
            );
            answered += 1;
        }
    }
    assert_eq!(queue_depth(&server, "tx"), 0);
    let commit = TxnControl::Discharge {
        txn_id: txn.clone(),
        fail: false,
    };
    assert_eq!(coordinate(&mut c, 9, 1, commit), DeliveryState::Accepted);
    assert_eq!(queue_depth(&server, "tx"), 2);
    // Rolled back: nothing of it is routed; a discharge of a transaction
    // that is not open is rejected.
    let DeliveryState::Declared(second) = coordinate(&mut c, 9, 2, TxnControl::Declare) else {
        panic!("not declared");
    };
    assert_ne!(second, txn);
    let rollback = TxnControl::Discharge {
        txn_id: second.clone(),
        fail: true,
    };
    assert_eq!(
        coordinate(&mut c, 9, 3, rollback.clone()),
        DeliveryState::Accepted
    );
    match coordinate(&mut c, 9, 4, rollback) {
        DeliveryState::Rejected(Some(e)) => assert_eq!(e.condition, "amqp:transaction:rollback"),
        other => panic!("{other:?}"),
    }
    assert_eq!(queue_depth(&server, "tx"), 2);
    // Acknowledgements in a transaction: held until it commits.
    c.attach_receiver(1, "queue://tx");
    assert!(matches!(
        c.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    c.credit(1, 0, 2);
    let (first, _, _) = c.delivery(512);
    let (last, _, _) = c.delivery(512);
    let DeliveryState::Declared(third) = coordinate(&mut c, 9, 5, TxnControl::Declare) else {
        panic!("not declared");
    };
    c.perform(
        0,
        Performative::Disposition(Disposition {
            role_receiver: true,
            first,
            last: Some(last),
            settled: true,
            state: DeliveryState::Transactional {
                txn_id: third.clone(),
                outcome: Some(Box::new(DeliveryState::Accepted)),
            }
            .to_value(),
        }),
    );
    let in_flight = |server: &TestServer| {
        server
            .stats()
            .queues
            .iter()
            .find(|(name, ..)| name == "tx")
            .map_or(0, |(_, _, in_flight)| *in_flight)
    };
    let commit = TxnControl::Discharge {
        txn_id: third,
        fail: false,
    };
    assert_eq!(in_flight(&server), 2, "held until the commit");
    assert_eq!(coordinate(&mut c, 9, 6, commit), DeliveryState::Accepted);
    assert_eq!(in_flight(&server), 0);
}

#[test]
fn amqp_runs_over_tls_on_a_listener_of_its_own() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut config = test_config();
    let (ca, cert, key) = tls_files(&config.data_dir.join("tls"), &["localhost"]);
    config.amqp.tls_enabled = true;
    config.tls.cert = cert;
    config.tls.key = key;
    let server = start_with(config);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let session = rustls::ClientConnection::new(std::sync::Arc::new(client), name).unwrap();
    let socket = TcpStream::connect(server.amqp_tls_addr().expect("AMQP over TLS runs")).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(session, socket);
    tls.write_all(&ProtocolHeader::Sasl.bytes()).unwrap();
    let mut header = [0u8; 8];
    tls.read_exact(&mut header).unwrap();
    assert_eq!(
        ProtocolHeader::read(&header),
        Ok(Some(ProtocolHeader::Sasl))
    );
    // The mechanisms follow, in a SASL frame.
    let mut head = [0u8; 8];
    tls.read_exact(&mut head).unwrap();
    let h = FrameHeader::read(&head, u32::MAX).unwrap().unwrap();
    let mut body = vec![0u8; h.size as usize - 8];
    tls.read_exact(&mut body).unwrap();
    let (v, _) = Value::decode(&body).unwrap();
    assert!(
        matches!(Sasl::from_value(v), Ok(Sasl::Mechanisms(m)) if m.contains(&"PLAIN".to_owned()))
    );
}

/// The header of `m`, or what a message without one means.
fn header_of(m: &AmqpMessage) -> Header {
    m.header.unwrap_or_default()
}

#[test]
fn each_receiver_of_a_message_gets_its_own_header_and_the_same_sections() {
    let server = start();
    let (_conn, s) = connect(&server);
    // A message to many receivers is encoded once per worker and copied;
    // each delivery still gets a header of its own.
    let mut receivers: Vec<AmqpClient> = (0..3)
        .map(|i| {
            let mut c = AmqpClient::opened(&server, &format!("fan-{i}"));
            c.attach_receiver(0, "topic://fan");
            match c.next(false) {
                Got::Amqp(0, Performative::Attach(_)) => {}
                other => panic!("{other:?}"),
            }
            c.credit(0, 0, 100);
            c
        })
        .collect();
    wait_until("three subscribers", || server.stats().subscriptions == 3);
    let p = s
        .create_producer(&herald_client::Destination::topic("fan"))
        .unwrap();
    for i in 0..20i64 {
        let m = match i % 2 {
            0 => herald_client::Message::text(format!("text {i}")),
            _ => {
                herald_client::Message::bytes(vec![i as u8; i as usize]).with_property("odd", true)
            }
        };
        p.send_with_receipt(m.with_property("n", i)).unwrap();
    }
    for c in &mut receivers {
        for i in 0..20i64 {
            let (_, m, _) = c.delivery(1 << 20);
            let n = m.application_properties.iter().find(|(k, _)| k == "n");
            assert_eq!(n, Some(&("n".to_owned(), Value::Long(i))));
            match (i % 2, &m.body) {
                (0, Body::Value(Value::String(t))) => assert_eq!(*t, format!("text {i}")),
                (1, Body::Data(parts)) => assert_eq!(parts[0][..], vec![i as u8; i as usize][..]),
                (_, other) => panic!("message {i}: {other:?}"),
            }
            let h = header_of(&m);
            assert!(h.first_acquirer && h.delivery_count == 0, "{h:?}");
        }
    }
    // The same message again, counted: its header says so.
    let q = s
        .create_producer(&herald_client::Destination::queue("again"))
        .unwrap();
    q.send_with_receipt(herald_client::Message::text("once more"))
        .unwrap();
    let mut c = AmqpClient::opened(&server, "again");
    c.attach_receiver(0, "queue://again");
    match c.next(false) {
        Got::Amqp(0, Performative::Attach(_)) => {}
        other => panic!("{other:?}"),
    }
    c.credit(0, 0, 10);
    let (id, first, _) = c.delivery(1 << 20);
    assert!(header_of(&first).first_acquirer);
    c.perform(
        0,
        Performative::Disposition(Disposition {
            role_receiver: true,
            first: id,
            last: None,
            settled: true,
            state: DeliveryState::Modified {
                delivery_failed: true,
                undeliverable_here: false,
                message_annotations: vec![],
            }
            .to_value(),
        }),
    );
    let (_, again, _) = c.delivery(1 << 20);
    let h = header_of(&again);
    assert!(!h.first_acquirer && h.delivery_count == 1, "{h:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.properties, first.properties);
}

/// A topic source with the no-local filter as Qpid JMS sends it, durable
/// if `durable`.
fn no_local_source(address: &str, durable: bool) -> Source {
    use herald_protocol::amqp::terminus::{Durability, Target, NO_LOCAL_FILTER};
    let filter = Value::Described(
        Box::new(Value::Symbol(NO_LOCAL_FILTER.1.into())),
        Box::new(Value::List(vec![])),
    );
    Source {
        node: Target {
            address: Some(address.into()),
            durable: match durable {
                true => Durability::UnsettledState,
                false => Durability::None,
            },
            ..Target::default()
        },
        filter: vec![(Value::Symbol("no-local".into()), filter)],
        ..Source::default()
    }
}

#[test]
fn a_no_local_receiver_gets_what_others_send_and_not_what_its_connection_does() {
    let server = start();
    let (_conn, s) = connect(&server);
    let mut own = AmqpClient::opened(&server, "no-local");
    own.attach_receiver_from(0, no_local_source("topic://nl", false));
    own.attach_sender(1, "topic://nl");
    let mut other = AmqpClient::opened(&server, "plain");
    other.attach_receiver(0, "topic://nl");
    for (c, no_local) in [(&mut own, true), (&mut other, false)] {
        match c.next(false) {
            // The filter is answered: it is applied.
            Got::Amqp(0, Performative::Attach(a)) => {
                let source = Source::from_value(a.source).unwrap().unwrap();
                assert_eq!(source.no_local(), no_local);
            }
            other => panic!("{other:?}"),
        }
        c.credit(0, 0, 10);
    }
    wait_until("two subscribers", || server.stats().subscriptions == 2);
    own.transfer(1, 0, true, &amqp_text("mine", false));
    let (_, m, _) = other.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("mine".into())));
    s.create_producer(&herald_client::Destination::topic("nl"))
        .unwrap()
        .send_with_receipt(herald_client::Message::text("theirs"))
        .unwrap();
    let (_, m, _) = other.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("theirs".into())));
    // Its own message, routed before the other, never came.
    let (_, m, _) = own.delivery(1 << 20);
    assert_eq!(m.body, Body::Value(Value::String("theirs".into())));
    // A durable subscription outlives its connection: no-local is refused
    // there, by name.
    let mut durable = AmqpClient::opened(&server, "no-local-durable");
    durable.attach_receiver_from(0, no_local_source("topic://nl", true));
    let (condition, why) = durable.error();
    assert_eq!(condition, "amqp:not-implemented");
    assert!(why.contains("no-local"), "{why}");
}

#[test]
fn a_native_client_forwards_an_amqp_message_whole_and_cannot_forge_one() {
    use herald_client::{Destination, Message, Origin};
    let server = start();
    let mut c = AmqpClient::opened(&server, "fwd");
    c.sender(0, "queue://fwd.in");
    let mut sent = AmqpMessage {
        body: Body::Value(Value::Binary(Bytes::from_static(b"\x01\x02"))),
        ..AmqpMessage::default()
    };
    sent.properties = Some(herald_protocol::amqp::message::Properties {
        message_id: Some(Value::Ulong(7)),
        ..Default::default()
    });
    c.transfer(0, 0, true, &sent);
    // A native client takes it and sends it on as it came.
    let (_conn, s) = connect(&server);
    let m = next(&s.create_consumer(&Destination::queue("fwd.in")).unwrap());
    assert_eq!(m.message_id(), "7");
    assert!(m.origin().is_some());
    let out = s.create_producer(&Destination::queue("fwd.out")).unwrap();
    out.send_with_receipt(m).unwrap();
    c.attach_receiver(1, "queue://fwd.out");
    c.flow(1, 0, 10, false);
    let (_, got, _) = c.delivery(1 << 20);
    let id = got.properties.as_ref().and_then(|p| p.message_id.clone());
    assert_eq!(id, Some(Value::Ulong(7)));
    assert_eq!(got.body, sent.body);
    // One it wrote itself that does not read is refused, and the
    // connection goes on.
    let mut forged = Message::text("x");
    forged.set_origin(Some(Origin {
        protocol: Origin::AMQP,
        bytes: Bytes::from_static(&[2, 0, 0, 0, 0, 0, 0, 0, 1, 0x40]),
    }));
    let e = out.send_with_receipt(forged).unwrap_err().to_string();
    assert!(e.contains("AMQP origin"), "{e}");
    out.send_with_receipt(Message::text("after")).unwrap();
}

#[test]
fn a_persistent_amqp_message_comes_back_as_sent_after_a_restart() {
    use herald_protocol::amqp::message::Properties;
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let sent = AmqpMessage {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        properties: Some(Properties {
            message_id: Some(Value::Ulong(7)),
            correlation_id: Some(Value::Uuid([3; 16])),
            ..Default::default()
        }),
        application_properties: vec![("u".into(), Value::Ubyte(200))],
        body: Body::Value(Value::Binary(Bytes::from_static(b"\x01\x02"))),
        ..AmqpMessage::default()
    };
    let mut c = AmqpClient::opened(&server, "kept");
    c.sender(0, "queue://kept");
    c.transfer(0, 0, false, &sent);
    // Accepted once the journal has it.
    loop {
        match c.next(false) {
            Got::Amqp(_, Performative::Disposition(d)) => break assert_eq!(d.first, 0),
            Got::Closed => panic!("closed"),
            _ => {}
        }
    }
    drop(c);
    server.stop_keeping_data();
    let mut config = test_config();
    config.data_dir = dir;
    let server = start_with(config);
    let mut c = AmqpClient::opened(&server, "back");
    c.attach_receiver(0, "queue://kept");
    c.flow(0, 0, 10, false);
    let (_, got, _) = c.delivery(1 << 20);
    assert_eq!(got.properties, sent.properties);
    assert_eq!(got.application_properties, sent.application_properties);
    assert_eq!(got.body, sent.body);
    assert!(got.header.is_some_and(|h| h.durable));
}
