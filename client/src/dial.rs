//! Opening a session with a server: TCP, TLS if asked, CONNECT and
//! CONNECTED, synchronously, before the connection's threads run. Used for
//! the first connection and for every reconnection after a failure.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use herald_protocol::frame::{Connect, Connected};
use herald_protocol::{Decoder, Frame};
use rustls::ClientConfig;

use crate::error::{Error, Result};
use crate::factory::FactoryConfig;
use crate::transport::{ReadHalf, Transport, WriteHalf};

/// Frames from the server may be this large.
pub(crate) const MAX_INBOUND_FRAME: u32 = 256 << 20;

/// Where and how to connect.
#[derive(Clone)]
pub(crate) struct Dialer {
    /// (host, port) of each server, in the order they are tried.
    pub(crate) servers: Vec<(String, u16)>,
    /// TLS settings, for `herald+tls://`.
    pub(crate) tls: Option<Arc<ClientConfig>>,
    /// The factory's settings.
    pub(crate) config: FactoryConfig,
}

/// A fresh session with one server.
pub(crate) struct Link {
    /// The server's `host:port`.
    pub(crate) server: String,
    /// A handle on the socket, to shut it down with.
    pub(crate) socket: TcpStream,
    pub(crate) reader: ReadHalf,
    pub(crate) writer: WriteHalf,
    pub(crate) connected: Connected,
    /// Bytes that came after CONNECTED.
    pub(crate) leftover: BytesMut,
}

impl Dialer {
    /// A session with the first server that answers; the last error if
    /// none does.
    pub(crate) fn dial(&self) -> Result<Link> {
        let mut last = None;
        for (host, port) in &self.servers {
            match self.dial_one(host, *port) {
                Ok(link) => return Ok(link),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgument("no server to connect to".into())))
    }

    fn dial_one(&self, host: &str, port: u16) -> Result<Link> {
        let config = &self.config;
        let address = format!("{host}:{port}");
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let addrs: Vec<_> = address
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("cannot resolve {address}"), e))?
            .collect();
        let mut last_error = None;
        let mut stream = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let Some(stream) = stream else {
            let e =
                last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"));
            return Err(Error::io(format!("cannot connect to {address}"), e));
        };
        let ctx = |what: &str| format!("{what} {address}");
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(connect_timeout)))
            .map_err(|e| Error::io(ctx("cannot configure socket to"), e))?;
        let transport = Transport::new(stream, self.tls.clone().map(|config| (config, host)))
            .map_err(|e| match e {
                Error::Tls { reason, .. } => Error::Tls {
                    address: address.clone(),
                    reason,
                },
                e => e,
            })?;
        let io_error = |e| Error::io(ctx("cannot use the socket to"), e);
        let mut reader = transport.reader().map_err(io_error)?;
        let mut writer = transport.writer().map_err(io_error)?;

        let connect = Frame::Connect(Connect {
            client_id: config.client_id.clone(),
            user: config.user.clone(),
            password: config.password.clone(),
            heartbeat_ms: config.heartbeat_ms,
        });
        let mut buf = BytesMut::new();
        connect.encode(0, &mut buf)?;
        writer
            .write_all(&buf)
            .map_err(|e| Error::io(ctx("cannot send CONNECT to"), e))?;
        let decoder = Decoder::new(MAX_INBOUND_FRAME);
        let mut leftover = BytesMut::new();
        let raw = loop {
            match decoder.decode(&mut leftover) {
                Ok(Some(raw)) => break raw,
                Ok(None) => {}
                Err(e) if matches!(e.error, herald_protocol::Error::BadMagic(_)) => {
                    return Err(not_herald(&address, &leftover))
                }
                Err(e) => return Err(Error::Protocol(e.error)),
            }
            let mut chunk = [0u8; 4096];
            match reader.read(&mut chunk) {
                Ok(0) => {
                    return Err(Error::ConnectionLost(format!(
                        "{address} closed the connection during CONNECT"
                    )))
                }
                Ok(n) => leftover.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Error::Timeout {
                        what: "CONNECTED",
                        millis: connect_timeout.as_millis(),
                    })
                }
                Err(e) => return Err(Error::io(ctx("cannot read CONNECTED from"), e)),
            }
        };
        let connected = match Frame::decode(raw)? {
            Frame::Connected(c) => c,
            Frame::Error(e) => {
                return Err(Error::Server {
                    code: e.code,
                    message: e.message,
                    fatal: e.fatal,
                })
            }
            other => {
                return Err(Error::ConnectionLost(format!(
                    "expected CONNECTED, got {:?}",
                    other.kind()
                )))
            }
        };
        let socket = transport.socket_handle().map_err(io_error)?;
        Ok(Link {
            server: address,
            socket,
            reader,
            writer,
            connected,
            leftover,
        })
    }
}

/// The error for a server that answered CONNECT in another protocol: the
/// address is some other listener's.
fn not_herald(address: &str, answer: &[u8]) -> Error {
    let seems = if answer.starts_with(b"HTTP/") {
        "it answers HTTP: is that the management interface's port?".to_owned()
    } else if answer.starts_with(b"ERROR\n") || answer.starts_with(b"CONNECTED\n") {
        "it answers STOMP: is that the STOMP port?".to_owned()
    } else if matches!(answer, [0x15 | 0x16, 0x03, ..]) {
        // A TLS record (an alert or a handshake) in answer to CONNECT.
        "that port expects TLS: use herald+tls:// for it".to_owned()
    } else {
        let shown = String::from_utf8_lossy(&answer[..answer.len().min(16)]).into_owned();
        format!("it answered {shown:?}")
    };
    Error::NotHerald {
        address: address.to_owned(),
        seems,
    }
}
