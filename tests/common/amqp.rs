//! An AMQP 1.0 client over a raw socket, for the AMQP listener's tests:
//! it speaks frames as they are, so that tests can send what a real
//! client library never would, and read every frame the server sends.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{Bytes, BytesMut};
use herald_protocol::amqp::message::{Body, Header, Message as AmqpMessage};
use herald_protocol::amqp::performative::{Attach, Begin, Flow, Open, Transfer};
use herald_protocol::amqp::terminus::{LinkTarget, Source, Target};
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};
use herald_server::ServerHandle;

use super::PATIENCE;

/// A client that speaks raw AMQP frames.
pub struct AmqpClient {
    /// The socket.
    pub stream: TcpStream,
    buf: BytesMut,
    /// Frames held back by [`AmqpClient::together`].
    corked: Option<Vec<u8>>,
}

/// What the server sent.
#[derive(Debug)]
pub enum Got {
    Header(ProtocolHeader),
    Sasl(Sasl),
    Amqp(u16, Performative),
    /// The connection closed.
    Closed,
}

impl AmqpClient {
    pub fn connect(server: &ServerHandle) -> AmqpClient {
        let stream = TcpStream::connect(server.amqp_addr().expect("AMQP runs")).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        AmqpClient {
            stream,
            buf: BytesMut::new(),
            corked: None,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        match &mut self.corked {
            Some(held) => held.extend_from_slice(bytes),
            None => self.stream.write_all(bytes).unwrap(),
        }
    }

    /// Sends the frames `frames` makes in one write, so that the server
    /// reads them at once.
    pub fn together(&mut self, frames: impl FnOnce(&mut AmqpClient)) {
        self.corked = Some(Vec::new());
        frames(self);
        let held = self.corked.take().unwrap_or_default();
        self.write(&held);
    }

    pub fn frame(&mut self, kind: FrameKind, channel: u16, body: &Value, payload: &[u8]) {
        let mut encoded = Vec::new();
        body.encode(&mut encoded);
        let mut b = Vec::new();
        FrameHeader::write(kind, channel, encoded.len() + payload.len(), &mut b);
        b.extend_from_slice(&encoded);
        b.extend_from_slice(payload);
        self.write(&b);
    }

    pub fn perform(&mut self, channel: u16, p: Performative) {
        self.frame(FrameKind::Amqp, channel, &p.to_value(), &[]);
    }

    pub fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next header or frame (heart-beats skipped).
    pub fn next(&mut self, header: bool) -> Got {
        loop {
            if header {
                if let Ok(Some(h)) = ProtocolHeader::read(&self.buf) {
                    let _ = self.buf.split_to(8);
                    return Got::Header(h);
                }
            } else if let Ok(Some(h)) = FrameHeader::read(&self.buf, u32::MAX) {
                if self.buf.len() >= h.size as usize {
                    let frame = self.buf.split_to(h.size as usize);
                    let body = &frame[h.body_offset..];
                    if body.is_empty() {
                        continue;
                    }
                    let (v, _) = Value::decode(body).unwrap();
                    return match h.kind {
                        FrameKind::Sasl => Got::Sasl(Sasl::from_value(v).unwrap()),
                        FrameKind::Amqp => {
                            Got::Amqp(h.channel, Performative::from_value(v).unwrap())
                        }
                    };
                }
            }
            if !self.fill() {
                return Got::Closed;
            }
        }
    }

    /// SASL with `mechanism` and `response`; the outcome's code.
    pub fn sasl(&mut self, mechanism: &str, response: &[u8]) -> u8 {
        self.write(&ProtocolHeader::Sasl.bytes());
        assert!(matches!(self.next(true), Got::Header(ProtocolHeader::Sasl)));
        assert!(matches!(self.next(false), Got::Sasl(Sasl::Mechanisms(_))));
        let init = Sasl::Init {
            mechanism: mechanism.into(),
            initial_response: Some(Bytes::copy_from_slice(response)),
            hostname: None,
        };
        self.frame(FrameKind::Sasl, 0, &init.to_value(), &[]);
        match self.next(false) {
            Got::Sasl(Sasl::Outcome { code, .. }) => code,
            other => panic!("{other:?}"),
        }
    }

    /// Through SASL ANONYMOUS, the AMQP header and open, and a session on
    /// channel 0.
    pub fn opened(server: &ServerHandle, container: &str) -> AmqpClient {
        let mut c = AmqpClient::connect(server);
        assert_eq!(c.sasl("ANONYMOUS", b""), 0);
        c.write(&ProtocolHeader::Amqp.bytes());
        assert!(matches!(c.next(true), Got::Header(ProtocolHeader::Amqp)));
        c.perform(0, Performative::Open(open(container)));
        assert!(matches!(c.next(false), Got::Amqp(0, Performative::Open(_))));
        c.perform(
            0,
            Performative::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 0,
                incoming_window: 1000,
                outgoing_window: 1000,
                handle_max: 10,
            }),
        );
        assert!(matches!(
            c.next(false),
            Got::Amqp(0, Performative::Begin(_))
        ));
        c
    }

    /// The close or detach the server ends with: its condition and
    /// description.
    pub fn error(&mut self) -> (String, String) {
        loop {
            match self.next(false) {
                Got::Amqp(_, Performative::Close(Some(e)))
                | Got::Amqp(
                    _,
                    Performative::Detach(herald_protocol::amqp::performative::Detach {
                        error: Some(e),
                        ..
                    }),
                ) => return (e.condition, e.description.unwrap_or_default()),
                Got::Closed => panic!("closed without an error"),
                _ => {}
            }
        }
    }

    /// Attaches a sender to `address` and reads the server's attach
    /// back.
    pub fn sender(&mut self, handle: u32, address: &str) {
        self.attach_sender(handle, address);
        assert!(matches!(
            self.next(false),
            Got::Amqp(0, Performative::Attach(_))
        ));
    }

    /// Attaches a sender to `address` (the answer is the caller's to read).
    pub fn attach_sender(&mut self, handle: u32, address: &str) {
        let target = LinkTarget::Target(Target {
            address: Some(address.into()),
            ..Target::default()
        });
        self.perform(
            0,
            Performative::Attach(Box::new(Attach {
                name: format!("link-{handle}"),
                handle,
                role_receiver: false,
                snd_settle_mode: 2,
                rcv_settle_mode: 0,
                source: Value::Null,
                target: target.to_value(),
                initial_delivery_count: Some(0),
                max_message_size: 0,
                offered_capabilities: vec![],
                desired_capabilities: vec![],
                properties: Value::Null,
            })),
        );
    }

    pub fn attach_receiver(&mut self, handle: u32, address: &str) {
        let source = Source {
            node: Target {
                address: Some(address.into()),
                ..Target::default()
            },
            ..Source::default()
        };
        self.attach_receiver_from(handle, source);
    }

    /// Attaches a receiving link with this source.
    pub fn attach_receiver_from(&mut self, handle: u32, source: Source) {
        self.perform(
            0,
            Performative::Attach(Box::new(Attach {
                name: format!("in-{handle}"),
                handle,
                role_receiver: true,
                snd_settle_mode: 0,
                rcv_settle_mode: 0,
                source: source.to_value(),
                target: Value::Null,
                initial_delivery_count: None,
                max_message_size: 0,
                offered_capabilities: vec![],
                desired_capabilities: vec![],
                properties: Value::Null,
            })),
        );
    }

    /// Grants `credit` on `handle`, having received `received` so far.
    pub fn credit(&mut self, handle: u32, received: u32, credit: u32) {
        self.flow(handle, received, credit, false);
    }

    /// A flow granting `credit` on link `handle`, which asks the server
    /// to use it up and say so if `drain`.
    pub fn flow(&mut self, handle: u32, received: u32, credit: u32, drain: bool) {
        self.perform(
            0,
            Performative::Flow(Flow {
                next_incoming_id: Some(0),
                incoming_window: 1000,
                next_outgoing_id: 0,
                outgoing_window: 1000,
                handle: Some(handle),
                delivery_count: Some(received),
                link_credit: Some(credit),
                available: None,
                drain,
                echo: false,
            }),
        );
    }

    /// The next whole message sent to this client: its delivery id and
    /// message, and how many frames it came in.
    pub fn delivery(&mut self, max_frame: usize) -> (u32, AmqpMessage, usize) {
        let (mut id, mut bytes, mut frames) = (None, Vec::new(), 0);
        loop {
            // Frames are read whole to check their size.
            while FrameHeader::read(&self.buf, u32::MAX)
                .unwrap()
                .is_none_or(|h| self.buf.len() < h.size as usize)
            {
                assert!(self.fill(), "closed");
            }
            let h = FrameHeader::read(&self.buf, u32::MAX).unwrap().unwrap();
            assert!(h.size as usize <= max_frame, "a frame of {} bytes", h.size);
            let frame = self.buf.split_to(h.size as usize);
            let body = &frame[h.body_offset..];
            if body.is_empty() {
                continue;
            }
            let (v, used) = Value::decode(body).unwrap();
            let Performative::Transfer(t) = Performative::from_value(v).unwrap() else {
                continue;
            };
            frames += 1;
            id = id.or(t.delivery_id);
            bytes.extend_from_slice(&body[used..]);
            if !t.more {
                return (id.unwrap(), AmqpMessage::decode(&bytes).unwrap(), frames);
            }
        }
    }

    /// Sends `payload`, a message's bytes, as delivery `delivery_id` in
    /// transfers of at most `piece` bytes each; the last says no more
    /// follow unless `aborted`, when it aborts the delivery instead.
    pub fn transfer_pieces(
        &mut self,
        (handle, delivery_id): (u32, u32),
        payload: &[u8],
        piece: usize,
        aborted: bool,
    ) {
        let pieces: Vec<&[u8]> = payload.chunks(piece).collect();
        for (i, part) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            let t = Transfer {
                handle,
                delivery_id: (i == 0).then_some(delivery_id),
                delivery_tag: (i == 0).then(|| Bytes::from(delivery_id.to_be_bytes().to_vec())),
                message_format: (i == 0).then_some(0),
                settled: false,
                more: !last || aborted,
                state: Value::Null,
                aborted: last && aborted,
            };
            self.frame(
                FrameKind::Amqp,
                0,
                &Performative::Transfer(t).to_value(),
                part,
            );
        }
    }

    /// The outcome of the next disposition the server sends, as it
    /// prints (`36` accepted; a rejection names its condition).
    pub fn outcome(&mut self) -> String {
        loop {
            match self.next(false) {
                Got::Amqp(_, Performative::Disposition(d)) => return format!("{:?}", d.state),
                Got::Closed => panic!("closed"),
                _ => {}
            }
        }
    }

    pub fn transfer(
        &mut self,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        message: &AmqpMessage,
    ) {
        let mut payload = Vec::new();
        message.encode(&mut payload);
        let t = Transfer {
            handle,
            delivery_id: Some(delivery_id),
            delivery_tag: Some(Bytes::from(delivery_id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled,
            more: false,
            state: Value::Null,
            aborted: false,
        };
        self.frame(
            FrameKind::Amqp,
            0,
            &Performative::Transfer(t).to_value(),
            &payload,
        );
    }
}

/// A durable topic subscription's source, as Qpid JMS asks for one.
pub fn durable_source(address: &str) -> Source {
    Source {
        node: Target {
            address: Some(address.into()),
            durable: herald_protocol::amqp::terminus::Durability::UnsettledState,
            capabilities: vec!["topic".into()],
            ..Target::default()
        },
        ..Source::default()
    }
}

/// An `open` for container `container`, taking frames of 512 bytes.
pub fn open(container: &str) -> Open {
    Open {
        container_id: container.into(),
        hostname: None,
        max_frame_size: 512,
        channel_max: 8,
        idle_time_out: 0,
        offered_capabilities: vec![],
        desired_capabilities: vec![],
        properties: Value::Null,
    }
}

/// A text message, persistent or not.
pub fn text(body: &str, durable: bool) -> AmqpMessage {
    AmqpMessage {
        header: Some(Header {
            durable,
            ..Header::default()
        }),
        body: Body::Value(Value::String(body.into())),
        ..AmqpMessage::default()
    }
}
