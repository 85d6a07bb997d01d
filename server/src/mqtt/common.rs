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
        ErrorCode::SampleRejected => 0x83,
        _ => 0x80,
    }
}

/// The SUBACK reason code for a refused subscription: only the failures
/// that Table 3-8 lists may go in a SUBACK.
pub(super) fn suback_reason(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::NotAuthorized => 0x87,
        // "Correctly formed but not allowed for this Client": a topic
        // strict mode has not declared, or a filter Herald cannot take.
        ErrorCode::InvalidDestination | ErrorCode::UndeclaredTopic => 0x8F,
        ErrorCode::QueueFull | ErrorCode::LimitExceeded => 0x97,
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
