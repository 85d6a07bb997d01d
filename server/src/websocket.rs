//! WebSocket (RFC 6455), for browser clients (stomp.js, mqtt.js): the HTTP
//! upgrade, then a protocol's frames carried in WebSocket messages.
//!
//! Inbound, the WebSocket framing is taken off and the payloads are joined
//! into one byte stream for the protocol's decoder (neither STOMP nor MQTT
//! cares where WebSocket messages begin and end). Outbound, each frame or
//! packet goes in one WebSocket message.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};

use crate::config::Config;
use crate::frontend::outbound::Outbound;
use crate::frontend::{Context, Flow};
use crate::session::{Phase, Session};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest HTTP upgrade request accepted.
const MAX_REQUEST: usize = 16 * 1024;

/// Why an upgrade request is refused, or an inbound frame is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebSocketError {
    /// An upgrade request longer than `MAX_REQUEST`.
    #[error("upgrade request too large")]
    RequestTooLarge,
    /// An upgrade request that is not UTF-8.
    #[error("upgrade request is not UTF-8")]
    NotUtf8,
    /// A request line other than GET.
    #[error("expected a GET upgrade request, got '{0}'")]
    NotGet(String),
    /// No `Upgrade: websocket`.
    #[error("not a WebSocket upgrade (no 'Upgrade: websocket')")]
    NotUpgrade,
    /// No `Sec-WebSocket-Key`.
    #[error("no Sec-WebSocket-Key")]
    NoKey,
    /// A page of a site not in `stomp.websocket_allowed_origins`.
    #[error("pages of '{0}' may not open a WebSocket here (stomp.websocket_allowed_origins)")]
    Origin(String),
    /// Subprotocols offered, none of them one this listener speaks.
    #[error("none of the subprotocols {0:?} is one spoken here ({1:?})")]
    Subprotocols(Vec<String>, &'static [&'static str]),
    /// Reserved bits set in a frame.
    #[error("reserved WebSocket bits set")]
    ReservedBits,
    /// An unmasked frame from the client.
    #[error("client frames must be masked")]
    Unmasked,
    /// A frame longer than the frame size allowed.
    #[error("WebSocket frame of {len} bytes exceeds {max}")]
    FrameTooLarge {
        /// Its length.
        len: u64,
        /// The most allowed.
        max: usize,
    },
    /// More STOMP bytes waiting than a frame may hold.
    #[error("more than {0} bytes of unread payload")]
    Unread(usize),
    /// An opcode RFC 6455 does not define.
    #[error("unknown WebSocket opcode {0}")]
    Opcode(u8),
}

/// One WebSocket connection's state.
#[derive(Debug)]
pub struct WebSocket {
    /// The upgrade is done.
    pub open: bool,
    /// Payload bytes taken out of WebSocket frames, for the protocol's
    /// decoder.
    pub payload: BytesMut,
    /// The subprotocols it speaks, most preferred first.
    subprotocols: &'static [&'static str],
}

impl WebSocket {
    /// A connection before its upgrade, for a protocol that these
    /// subprotocols name.
    pub fn new(subprotocols: &'static [&'static str]) -> WebSocket {
        WebSocket {
            open: false,
            payload: BytesMut::new(),
            subprotocols,
        }
    }
}

/// What the inbound bytes held besides payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Control {
    /// Nothing else; carry on.
    None,
    /// The peer sent a close frame.
    Close,
}

/// Answers the HTTP upgrade request at the front of `buf`, if it is all
/// there: `Ok(None)` to wait for more, the 101 response to send, or why
/// the request is refused (the caller answers 400 and closes).
pub fn handshake(
    buf: &mut BytesMut,
    allowed_origins: &[String],
    subprotocols: &'static [&'static str],
) -> Result<Option<Bytes>, WebSocketError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_REQUEST {
            Err(WebSocketError::RequestTooLarge)
        } else {
            Ok(None)
        };
    };
    let request = buf.split_to(end + 4);
    let text = std::str::from_utf8(&request).map_err(|_| WebSocketError::NotUtf8)?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    if !first.starts_with("GET ") {
        return Err(WebSocketError::NotGet(first.to_owned()));
    }
    let mut key = None;
    let mut upgrade = false;
    let mut offered = Vec::new();
    let (mut origin, mut host) = (None, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "upgrade" => upgrade = value.eq_ignore_ascii_case("websocket"),
            "sec-websocket-key" => key = Some(value.to_owned()),
            "origin" => origin = Some(value),
            "host" => host = Some(value),
            "sec-websocket-protocol" => {
                offered.extend(value.split(',').map(|p| p.trim().to_owned()))
            }
            _ => {}
        }
    }
    if !upgrade {
        return Err(WebSocketError::NotUpgrade);
    }
    let key = key.ok_or(WebSocketError::NoKey)?;
    // A browser names the page that opens the socket: a page of another
    // site may not reach the broker through the user's browser.
    if let Some(origin) = origin {
        if !crate::origins::origin_allowed(origin, host, allowed_origins) {
            return Err(WebSocketError::Origin(origin.to_owned()));
        }
    }
    let accept = base64::engine::general_purpose::STANDARD.encode(
        sha1_smol::Sha1::from(format!("{key}{GUID}"))
            .digest()
            .bytes(),
    );
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(p) = subprotocols
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
    {
        response.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
    } else if !offered.is_empty() {
        return Err(WebSocketError::Subprotocols(offered, subprotocols));
    }
    response.push_str("\r\n");
    Ok(Some(Bytes::from(response)))
}

/// Takes every whole WebSocket frame off `buf`: payloads go to
/// `ws.payload`, a ping is answered on `replies`, a close is reported.
pub fn unwrap_frames(
    ws: &mut WebSocket,
    buf: &mut BytesMut,
    max: usize,
    replies: &mut Vec<Bytes>,
) -> Result<Control, WebSocketError> {
    loop {
        if buf.len() < 2 {
            return Ok(Control::None);
        }
        let (b0, b1) = (buf[0], buf[1]);
        if b0 & 0x70 != 0 {
            return Err(WebSocketError::ReservedBits);
        }
        let opcode = b0 & 0x0f;
        if b1 & 0x80 == 0 {
            return Err(WebSocketError::Unmasked);
        }
        let (len, mut at) = match b1 & 0x7f {
            126 if buf.len() >= 4 => (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
            127 if buf.len() >= 10 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&buf[2..10]);
                (u64::from_be_bytes(b), 10)
            }
            126 | 127 => return Ok(Control::None),
            n => (u64::from(n), 2),
        };
        if len > max as u64 {
            return Err(WebSocketError::FrameTooLarge { len, max });
        }
        let len = len as usize;
        if buf.len() < at + 4 + len {
            return Ok(Control::None);
        }
        let mask = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        at += 4;
        let mut frame = buf.split_to(at + len);
        let payload = &mut frame[at..];
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        match opcode {
            0x0..=0x2 => {
                if ws.payload.len() + payload.len() > max {
                    return Err(WebSocketError::Unread(max));
                }
                ws.payload.extend_from_slice(payload);
            }
            0x8 => {
                replies.push(wrap(0x8, &[]));
                return Ok(Control::Close);
            }
            0x9 => replies.push(wrap(0xA, payload)),
            0xA => {}
            other => return Err(WebSocketError::Opcode(other)),
        }
    }
}

/// One outgoing WebSocket message with this payload.
pub fn wrap(opcode: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 10);
    out.put_u8(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.put_u8(n as u8),
        n if n <= u16::MAX as usize => {
            out.put_u8(126);
            out.put_u16(n as u16);
        }
        n => {
            out.put_u8(127);
            out.put_u64(n as u64);
        }
    }
    out.put_slice(payload);
    out.freeze()
}

/// The largest frame (and unread payload) a connection may send: until
/// it has logged in, one the size of a CONNECT.
pub fn frame_limit(config: &Config, phase: Phase) -> usize {
    match phase {
        Phase::AwaitingConnect => config.max_connect_frame_size as usize,
        Phase::Connected => config.max_frame_size as usize,
    }
}

/// What the bytes a WebSocket connection received came to.
pub enum Received {
    /// Payload bytes (perhaps none yet) for the protocol's decoder.
    Payload,
    /// The upgrade was refused (answered), or the peer closed: close.
    Close,
    /// A frame that breaks the rules: the protocol says so, and closes.
    Bad(WebSocketError),
}

/// Takes what arrived in `buf` on a WebSocket connection: answers the
/// upgrade (101, or 400 and close), then moves the payload of every whole
/// frame to `ws.payload`, answering pings and closes; `max` bounds a frame
/// and the payload waiting.
pub fn receive(
    ws: &mut WebSocket,
    buf: &mut BytesMut,
    allowed_origins: &[String],
    max: usize,
    out: &mut Outbound,
    serial: u64,
) -> Received {
    if !ws.open {
        match handshake(buf, allowed_origins, ws.subprotocols) {
            Ok(None) => return Received::Payload,
            Ok(Some(response)) => {
                out.push_raw(response);
                ws.open = true;
            }
            Err(why) => {
                log::info!("connection {serial}: WebSocket upgrade refused: {why}");
                let body = format!("{why}\n");
                let response = format!(
                    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                out.push_raw(Bytes::from(response));
                return Received::Close;
            }
        }
    }
    let mut replies = Vec::new();
    let control = unwrap_frames(ws, buf, max, &mut replies);
    for r in replies {
        out.push_raw(r);
    }
    match control {
        Ok(Control::None) => Received::Payload,
        Ok(Control::Close) => Received::Close,
        Err(why) => Received::Bad(why),
    }
}

/// A protocol's per-connection state, which may ride in WebSocket
/// messages (STOMP, MQTT and AMQP each have a listener for that).
pub trait Carried {
    /// Its WebSocket, if it rides in one.
    fn websocket(&mut self) -> Option<&mut WebSocket>;
    /// Says, in the protocol, that a frame broke WebSocket's rules, and
    /// closes.
    fn bad_frame(&mut self, out: &mut Outbound, phase: Phase, why: String, serial: u64) -> Flow;
}

/// The protocol's decoder: it takes the bytes of its frames.
pub type Decode<S> =
    fn(&mut S, &mut BytesMut, &mut Session, &mut Outbound, &mut Context<'_>) -> Flow;

/// Handles what arrived in `buf` for protocol state `s`: on a WebSocket
/// connection the upgrade and framing first, then `decode` on the
/// payload; on any other, `decode` on `buf`.
pub fn receive_carried<S: Carried>(
    s: &mut S,
    buf: &mut BytesMut,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
    decode: Decode<S>,
) -> Flow {
    let Some(ws) = s.websocket() else {
        return decode(s, buf, session, out, ctx);
    };
    let max = frame_limit(&ctx.shared.config, session.phase);
    let origins = &ctx.shared.config.stomp.websocket_allowed_origins;
    match receive(ws, buf, origins, max, out, ctx.me.serial) {
        Received::Payload => {}
        Received::Close => return Flow::Close,
        Received::Bad(why) => {
            let why = format!("bad WebSocket frame: {why}");
            return s.bad_frame(out, session.phase, why, ctx.me.serial);
        }
    }
    // The payload buffer belongs to the state the decoder works on: take
    // it out for the call.
    let mut payload = std::mem::take(&mut ws.payload);
    let flow = decode(s, &mut payload, session, out, ctx);
    if let Some(ws) = s.websocket() {
        ws.payload = payload;
    }
    flow
}

/// A frame's bytes as one WebSocket message: text if it is UTF-8, binary
/// otherwise (STOMP's way).
pub fn wrap_text_or_binary(frame: &[u8]) -> Bytes {
    let opcode = if std::str::from_utf8(frame).is_ok() {
        0x1
    } else {
        0x2
    };
    wrap(opcode, frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STOMP: &[&str] = &["v12.stomp", "v11.stomp", "v10.stomp"];

    fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1, 2, 3, 4];
        let mut v = vec![0x80 | opcode];
        if payload.len() < 126 {
            v.push(0x80 | payload.len() as u8);
        } else {
            v.push(0x80 | 126);
            v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(&mask);
        v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        v
    }

    /// The handshake with no extra origins allowed.
    fn shake(request: &[u8]) -> Result<Option<Bytes>, WebSocketError> {
        handshake(&mut BytesMut::from(request), &[], STOMP)
    }

    #[test]
    fn the_rfc_example_handshake() {
        let mut buf = BytesMut::from(
            &b"GET /stomp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v10.stomp, v12.stomp\r\n\r\n"[..],
        );
        let response =
            String::from_utf8(handshake(&mut buf, &[], STOMP).unwrap().unwrap().to_vec()).unwrap();
        assert!(
            response.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            "{response}"
        );
        assert!(response.contains("Sec-WebSocket-Protocol: v12.stomp"));
        assert!(buf.is_empty());
        assert_eq!(shake(b"GET / HTTP/1.1\r\n"), Ok(None));
        assert!(shake(b"GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(shake(b"POST / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").is_err());
    }

    #[test]
    fn a_page_of_another_site_may_not_open_a_socket() {
        let request = |origin: &str| {
            format!(
                "GET / HTTP/1.1\r\nHost: 127.0.0.1:61614\r\nUpgrade: websocket\r\nSec-WebSocket-Key: a2V5\r\nOrigin: {origin}\r\n\r\n"
            )
        };
        let evil = request("https://evil.example");
        let err = shake(evil.as_bytes()).unwrap_err();
        assert_eq!(err, WebSocketError::Origin("https://evil.example".into()));
        assert!(
            err.to_string().contains("websocket_allowed_origins"),
            "{err}"
        );
        assert!(shake(request("http://localhost:8161").as_bytes()).is_ok());
        let allowed = ["https://evil.example".to_owned()];
        assert!(handshake(&mut BytesMut::from(evil.as_bytes()), &allowed, STOMP).is_ok());
    }

    #[test]
    fn frames_unwrap_split_or_whole_and_controls_are_answered() {
        let mut ws = WebSocket::new(STOMP);
        let mut wire = masked(0x1, b"CONNECT\n\n\0");
        wire.extend(masked(0x9, b"hi"));
        wire.extend(masked(0x2, &[b'x'; 300]));
        let mut replies = Vec::new();
        let mut buf = BytesMut::new();
        for &b in &wire {
            buf.put_u8(b);
            assert_eq!(
                unwrap_frames(&mut ws, &mut buf, 4096, &mut replies),
                Ok(Control::None)
            );
        }
        assert_eq!(ws.payload.len(), 10 + 300);
        assert_eq!(replies, vec![wrap(0xA, b"hi")]);
        let mut close = BytesMut::from(&masked(0x8, &[])[..]);
        assert_eq!(
            unwrap_frames(&mut ws, &mut close, 4096, &mut replies),
            Ok(Control::Close)
        );
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut ws = WebSocket::new(STOMP);
        let mut r = Vec::new();
        assert!(
            unwrap_frames(
                &mut ws,
                &mut BytesMut::from(&[0x81u8, 0x01, b'x'][..]),
                64,
                &mut r
            )
            .is_err(),
            "unmasked"
        );
        assert!(
            unwrap_frames(
                &mut ws,
                &mut BytesMut::from(&masked(0x1, &[0; 100])[..]),
                64,
                &mut r
            )
            .is_err(),
            "too big"
        );
        assert!(
            unwrap_frames(
                &mut ws,
                &mut BytesMut::from(&masked(0x3, b"")[..]),
                64,
                &mut r
            )
            .is_err(),
            "opcode"
        );
        let mut rsv = masked(0x1, b"x");
        rsv[0] |= 0x40;
        assert!(
            unwrap_frames(&mut ws, &mut BytesMut::from(&rsv[..]), 64, &mut r).is_err(),
            "reserved bits"
        );
    }
}
