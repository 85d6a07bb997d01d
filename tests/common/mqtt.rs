//! An MQTT client over a raw socket, for the MQTT listener's tests: it
//! speaks packets as they are, so that tests can send what a real client
//! library never would.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use herald_protocol::mqtt::{
    self, Ack, Connect, Decoder, Packet, Properties, Property, Publish, QoS, Subscribe,
    SubscribeOptions, Version, Will,
};
use herald_server::ServerHandle;

use super::{read_more, PATIENCE};

/// One MQTT connection.
pub struct MqttClient {
    stream: TcpStream,
    buf: BytesMut,
    /// Over WebSocket: the bytes read and not yet unwrapped.
    websocket: Option<BytesMut>,
    decoder: Decoder,
    version: Version,
    next_id: u16,
    /// Messages that came while an acknowledgement was awaited.
    early: std::collections::VecDeque<Publish>,
}

impl MqttClient {
    /// Opens a TCP connection to the MQTT listener, sending nothing.
    pub fn open(server: &ServerHandle, version: Version) -> MqttClient {
        let addr = server.mqtt().tcp.expect("an MQTT listener");
        let stream = TcpStream::connect(addr).expect("tcp connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        MqttClient {
            stream,
            buf: BytesMut::new(),
            websocket: None,
            decoder: Decoder::with_version(version, 1 << 24),
            version,
            next_id: 1,
            early: Default::default(),
        }
    }

    /// Opens a WebSocket to the MQTT-over-WebSocket listener, offering
    /// `subprotocol`; the server's answer to the upgrade (the client is
    /// usable if it is 101).
    pub fn open_websocket(
        server: &ServerHandle,
        version: Version,
        subprotocol: &str,
    ) -> (MqttClient, String) {
        let addr = server.mqtt().websocket.expect("an MQTT WebSocket listener");
        let mut stream = TcpStream::connect(addr).expect("tcp connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let request = format!(
            "GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {subprotocol}\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).expect("write");
        let mut raw = BytesMut::new();
        let end = loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            assert!(
                read_more(&mut stream, &mut raw),
                "closed during the upgrade"
            );
        };
        let answer = String::from_utf8_lossy(&raw.split_to(end)).into_owned();
        let mut c = MqttClient {
            stream,
            buf: BytesMut::new(),
            websocket: Some(raw),
            decoder: Decoder::with_version(version, 1 << 24),
            version,
            next_id: 1,
            early: Default::default(),
        };
        c.unwrap_frames();
        (c, answer)
    }

    /// Moves the payload of every whole WebSocket frame read so far to the
    /// packet buffer.
    fn unwrap_frames(&mut self) {
        let Some(raw) = self.websocket.as_mut() else {
            return;
        };
        loop {
            if raw.len() < 2 {
                return;
            }
            let (len, at) = match raw[1] & 0x7f {
                126 if raw.len() >= 4 => (usize::from(u16::from_be_bytes([raw[2], raw[3]])), 4),
                127 if raw.len() >= 10 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&raw[2..10]);
                    (u64::from_be_bytes(b) as usize, 10)
                }
                126 | 127 => return,
                n => (usize::from(n), 2),
            };
            if raw.len() < at + len {
                return;
            }
            let frame = raw.split_to(at + len);
            assert_eq!(frame[0], 0x82, "MQTT goes in binary messages");
            self.buf.extend_from_slice(&frame[at..]);
        }
    }

    /// A CONNECT for `client_id`, clean, keep-alive 60 s, to change.
    pub fn connect_packet(version: Version, client_id: &str) -> Connect {
        Connect {
            version,
            clean: true,
            keep_alive: 60,
            properties: Properties::default(),
            client_id: client_id.to_owned(),
            will: None,
            username: None,
            password: None,
        }
    }

    /// Opens, sends `connect` and returns the client with the CONNACK.
    pub fn connect_with(server: &ServerHandle, connect: Connect) -> (MqttClient, mqtt::ConnAck) {
        let mut c = MqttClient::open(server, connect.version);
        c.send(&Packet::Connect(Box::new(connect)));
        match c.read() {
            Some(Packet::ConnAck(ack)) => (c, ack),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// A clean connection that must be accepted.
    pub fn connected(server: &ServerHandle, version: Version, client_id: &str) -> MqttClient {
        let (c, ack) = MqttClient::connect_with(server, Self::connect_packet(version, client_id));
        assert_eq!(ack.code, 0, "{ack:?}");
        c
    }

    /// A will for `connect_packet`.
    pub fn will(topic: &str, payload: &'static [u8], qos: QoS) -> Will {
        Will {
            topic: topic.to_owned(),
            payload: Bytes::from_static(payload),
            qos,
            retain: false,
            properties: Properties::default(),
        }
    }

    /// Writes a packet.
    pub fn send(&mut self, packet: &Packet) {
        let mut b = BytesMut::new();
        mqtt::encode(packet, self.version, &mut b);
        self.write(&b);
    }

    /// Writes raw bytes (in a masked binary message over WebSocket).
    pub fn write(&mut self, bytes: &[u8]) {
        if self.websocket.is_none() {
            return self.stream.write_all(bytes).expect("write");
        }
        let mask = [3u8, 1, 4, 1];
        let mut frame = vec![0x82];
        match bytes.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(bytes.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).expect("write");
    }

    /// Reads more bytes into the packet buffer; false at the end.
    fn fill(&mut self) -> bool {
        let more = match self.websocket.as_mut() {
            Some(raw) => read_more(&mut self.stream, raw),
            None => read_more(&mut self.stream, &mut self.buf),
        };
        self.unwrap_frames();
        more
    }

    /// The next packet, or `None` at the end of the stream.
    pub fn read(&mut self) -> Option<Packet> {
        loop {
            if let Some(p) = self
                .decoder
                .decode(&mut self.buf)
                .expect("server packets decode")
            {
                return Some(p);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next packet, if one comes within `wait`.
    pub fn read_within(&mut self, wait: Duration) -> Option<Packet> {
        self.stream.set_read_timeout(Some(wait)).expect("timeout");
        let packet = loop {
            if let Some(p) = self.decoder.decode(&mut self.buf).expect("decodes") {
                break Some(p);
            }
            let mut probe = [0u8; 1];
            match self.stream.peek(&mut probe) {
                Ok(0) => break None,
                Ok(_) => {
                    self.fill();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break None
                }
                Err(e) => panic!("read failed: {e}"),
            }
        };
        self.stream
            .set_read_timeout(Some(PATIENCE))
            .expect("timeout");
        packet
    }

    /// Asserts the server closes the connection (after whatever it sends
    /// first, returned).
    pub fn expect_closed(&mut self) -> Vec<Packet> {
        let mut before = Vec::new();
        while let Some(p) = self.read() {
            before.push(p);
        }
        before
    }

    /// A fresh packet id.
    pub fn packet_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Subscribes to one filter at `qos`, checking the SUBACK grants it.
    pub fn subscribe(&mut self, filter: &str, qos: QoS) {
        let options = SubscribeOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: 0,
        };
        let code = self.subscribe_with(filter, options);
        assert_eq!(code, qos as u8, "SUBACK for {filter}");
    }

    /// Subscribes to one filter; the SUBACK's code. Deliveries that come
    /// first (a resumed session's) are kept for [`receive`](Self::receive).
    pub fn subscribe_with(&mut self, filter: &str, options: SubscribeOptions) -> u8 {
        self.subscribe_with_properties(filter, options, Properties::default())
    }

    /// [`subscribe_with`](Self::subscribe_with) with the SUBSCRIBE's
    /// properties (5.0).
    pub fn subscribe_with_properties(
        &mut self,
        filter: &str,
        options: SubscribeOptions,
        properties: Properties,
    ) -> u8 {
        let packet_id = self.packet_id();
        self.send(&Packet::Subscribe(Subscribe {
            packet_id,
            properties,
            filters: vec![(filter.to_owned(), options)],
        }));
        match self.read_answer() {
            Some(Packet::SubAck(ack)) if ack.packet_id == packet_id => ack.codes[0],
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// A PUBLISH, its packet id set for QoS 1 and 2.
    pub fn publish_packet(&mut self, topic: &str, payload: &[u8], qos: QoS) -> Publish {
        Publish {
            dup: false,
            qos,
            retain: false,
            topic: topic.to_owned(),
            packet_id: (qos != QoS::AtMostOnce).then(|| self.packet_id()),
            properties: Properties::default(),
            payload: Bytes::copy_from_slice(payload),
        }
    }

    /// Publishes and completes the QoS handshake; the reason code of the
    /// acknowledgement (0 at QoS 0). A message that arrives meanwhile (the
    /// client's own, if it subscribes: a delivery need not wait for the
    /// journal as the PUBACK does) is kept for [`receive`](Self::receive).
    pub fn publish(&mut self, publish: Publish) -> u8 {
        let (qos, id) = (publish.qos, publish.packet_id);
        self.send(&Packet::Publish(publish));
        match qos {
            QoS::AtMostOnce => 0,
            QoS::AtLeastOnce => match self.read_answer() {
                Some(Packet::PubAck(a)) if Some(a.packet_id) == id => a.reason,
                other => panic!("expected PUBACK, got {other:?}"),
            },
            QoS::ExactlyOnce => {
                let rec = match self.read_answer() {
                    Some(Packet::PubRec(a)) if Some(a.packet_id) == id => a,
                    other => panic!("expected PUBREC, got {other:?}"),
                };
                if rec.reason >= 0x80 {
                    return rec.reason;
                }
                self.send(&Packet::PubRel(Ack::ok(rec.packet_id)));
                match self.read_answer() {
                    Some(Packet::PubComp(a)) if a.packet_id == rec.packet_id => a.reason,
                    other => panic!("expected PUBCOMP, got {other:?}"),
                }
            }
        }
    }

    /// The next packet that is not a PUBLISH; those are kept for later.
    fn read_answer(&mut self) -> Option<Packet> {
        loop {
            match self.read() {
                Some(Packet::Publish(p)) => self.early.push_back(p),
                other => return other,
            }
        }
    }

    /// The next PUBLISH, acknowledged as its QoS asks.
    pub fn receive(&mut self) -> Publish {
        let p = match self.early.pop_front() {
            Some(p) => p,
            None => match self.read() {
                Some(Packet::Publish(p)) => p,
                other => panic!("expected PUBLISH, got {other:?}"),
            },
        };
        self.acknowledge(&p);
        p
    }

    /// Acknowledges a PUBLISH received (QoS 2: PUBREC, then PUBREL's
    /// PUBCOMP).
    pub fn acknowledge(&mut self, p: &Publish) {
        let Some(id) = p.packet_id else { return };
        match p.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.send(&Packet::PubAck(Ack::ok(id))),
            QoS::ExactlyOnce => {
                self.send(&Packet::PubRec(Ack::ok(id)));
                match self.read() {
                    Some(Packet::PubRel(a)) if a.packet_id == id => {}
                    other => panic!("expected PUBREL, got {other:?}"),
                }
                self.send(&Packet::PubComp(Ack::ok(id)));
            }
        }
    }

    /// A user property of a 5.0 PUBLISH.
    pub fn user_property<'a>(p: &'a Publish, name: &str) -> Option<&'a str> {
        p.properties.0.iter().find_map(|prop| match prop {
            Property::User(n, v) if n == name => Some(v.as_str()),
            _ => None,
        })
    }

    /// Says goodbye.
    pub fn disconnect(mut self) {
        self.send(&Packet::Disconnect(mqtt::Disconnect {
            reason: 0,
            properties: Properties::default(),
        }));
        assert!(self.read().is_none(), "the server closes after DISCONNECT");
    }
}
