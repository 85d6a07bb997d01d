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
    decoder: Decoder,
    version: Version,
    next_id: u16,
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
            decoder: Decoder::with_version(version, 1 << 24),
            version,
            next_id: 1,
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

    /// Writes raw bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
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
            if !read_more(&mut self.stream, &mut self.buf) {
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
            let mut chunk = [0u8; 65536];
            match std::io::Read::read(&mut self.stream, &mut chunk) {
                Ok(0) => break None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
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

    /// Subscribes to one filter; the SUBACK's code.
    pub fn subscribe_with(&mut self, filter: &str, options: SubscribeOptions) -> u8 {
        let packet_id = self.packet_id();
        self.send(&Packet::Subscribe(Subscribe {
            packet_id,
            properties: Properties::default(),
            filters: vec![(filter.to_owned(), options)],
        }));
        match self.read() {
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
    /// acknowledgement (0 at QoS 0).
    pub fn publish(&mut self, publish: Publish) -> u8 {
        let (qos, id) = (publish.qos, publish.packet_id);
        self.send(&Packet::Publish(publish));
        match qos {
            QoS::AtMostOnce => 0,
            QoS::AtLeastOnce => match self.read() {
                Some(Packet::PubAck(a)) if Some(a.packet_id) == id => a.reason,
                other => panic!("expected PUBACK, got {other:?}"),
            },
            QoS::ExactlyOnce => {
                let rec = match self.read() {
                    Some(Packet::PubRec(a)) if Some(a.packet_id) == id => a,
                    other => panic!("expected PUBREC, got {other:?}"),
                };
                if rec.reason >= 0x80 {
                    return rec.reason;
                }
                self.send(&Packet::PubRel(Ack::ok(rec.packet_id)));
                match self.read() {
                    Some(Packet::PubComp(a)) if a.packet_id == rec.packet_id => a.reason,
                    other => panic!("expected PUBCOMP, got {other:?}"),
                }
            }
        }
    }

    /// The next PUBLISH, acknowledged as its QoS asks.
    pub fn receive(&mut self) -> Publish {
        let p = match self.read() {
            Some(Packet::Publish(p)) => p,
            other => panic!("expected PUBLISH, got {other:?}"),
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
