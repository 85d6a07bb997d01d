//! What the MQTT front-end's files share: the refusal that ends a
//! connection, reason codes, encoding.

use bytes::{Bytes, BytesMut};
use herald_protocol::mqtt::{self, MqttError, Packet, Version};
use herald_protocol::ErrorCode;

use crate::broker::Written;
use crate::frontend::{settle, Context};
use crate::session::{Outcome, Session};

/// MQTT's WebSocket subprotocols (`mqttv3.1` is what older clients say).
pub const SUBPROTOCOLS: &[&str] = &["mqtt", "mqttv3.1"];

/// The id of a message an MQTT connection publishes is this prefix, made
/// on the stack, and a number: `ID:mqtt-<connection>-<n>`.
#[derive(Default)]
pub(super) struct IdPrefix([u8; 32]);

impl IdPrefix {
    /// The prefix for connection `serial`.
    pub(super) fn of(&mut self, serial: u64) -> &str {
        use std::io::Write;
        let mut rest = &mut self.0[..];
        let _ = write!(rest, "ID:mqtt-{serial}-");
        let len = 32 - rest.len();
        std::str::from_utf8(&self.0[..len]).unwrap_or("ID:mqtt-")
    }
}

/// Small buffers cut from bigger chunks: one allocation (and one free,
/// which may happen on another worker) per chunk rather than per message.
/// Nothing is allocated until the first buffer, and that one is cut to
/// size: a connection that writes now and then (and lets go of its chunk
/// when quiet, see [`Chunks::release`]) holds no chunk.
#[derive(Default)]
pub(super) struct Chunks(BytesMut);

/// A chunk's size: some tens of messages.
const CHUNK: usize = 8 * 1024;

impl Chunks {
    /// The buffer to write the next one into, with room for `need` bytes.
    pub(super) fn room(&mut self, need: usize) -> &mut BytesMut {
        if self.0.capacity() - self.0.len() < need {
            // None held: the first since a quiet spell.
            let size = match self.0.capacity() {
                0 => need,
                _ => need.max(CHUNK),
            };
            self.0 = BytesMut::with_capacity(size);
        }
        &mut self.0
    }

    /// What was written since the last cut.
    pub(super) fn cut(&mut self) -> Bytes {
        self.0.split().freeze()
    }

    /// Lets go of the chunk: it is freed once the messages cut from it
    /// are, and the next buffer starts another.
    pub(super) fn release(&mut self) {
        self.0 = BytesMut::new();
    }
}

/// The prefix of the durable subscriptions of a persistent session.
pub(super) const DURABLE_PREFIX: &str = "mqtt:";

/// A refusal that ends the connection: the 5.0 reason code, and why.
pub(super) struct Fatal(pub(super) u8, pub(super) String);

impl From<MqttError> for Fatal {
    fn from(e: MqttError) -> Fatal {
        Fatal(e.reason(), e.to_string())
    }
}

/// The MQTT 5.0 reason code for a refusal's Herald error code.
pub(super) fn reason_for(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::NotAuthorized => 0x87,
        ErrorCode::AuthenticationFailed => 0x86,
        ErrorCode::InvalidDestination | ErrorCode::UndeclaredTopic => 0x90,
        ErrorCode::QueueFull | ErrorCode::LimitExceeded | ErrorCode::SlowConsumer => 0x97,
        ErrorCode::HeartbeatTimeout => 0x8D,
        ErrorCode::ServerShutdown => 0x8B,
        ErrorCode::ClosedByAdmin => 0x98,
        ErrorCode::InvalidClientId => 0x85,
        ErrorCode::Malformed => 0x81,
        _ => 0x80,
    }
}

/// Settles deliveries the client acknowledged.
pub(super) fn settle_deliveries(ids: Vec<u64>, session: &mut Session, ctx: &mut Context<'_>) {
    if !ids.is_empty() {
        settle(
            ids,
            Outcome::Processed,
            session,
            &mut Written::default(),
            ctx,
        );
    }
}

/// Encodes a packet in `version`.
pub(super) fn encode(packet: &Packet, version: Version) -> Bytes {
    let mut buf = BytesMut::new();
    mqtt::encode(packet, version, &mut buf);
    buf.freeze()
}

/// 3.1.1's CONNACK return code for a 5.0 reason.
pub(super) fn connack_311(reason: u8) -> u8 {
    match reason {
        0x84 => 1,
        0x85 => 2,
        0x86 => 4,
        0x87 => 5,
        _ => 3,
    }
}
