//! One client connection as its worker sees it: the socket, its buffers and
//! the protocol session.

use std::io::{self, Read};
use std::time::Instant;

use bytes::BytesMut;
use mio::net::TcpStream;

use super::outbound::{Outbound, WriteStatus};
use crate::handlers::Parked;
use crate::session::Session;

/// What one read found.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Some bytes were appended to the read buffer.
    Data,
    /// The socket has nothing more now.
    Drained,
    /// The peer closed its side.
    Closed,
}

pub struct Connection {
    pub serial: u64,
    pub stream: TcpStream,
    pub read_buf: BytesMut,
    pub out: Outbound,
    pub session: Session,
    /// When bytes last arrived: the heart-beat clock.
    pub last_read: Instant,
    /// The last write hit `WouldBlock`; wait for a writable event.
    pub blocked: bool,
    /// Queued on the worker's list of connections to flush.
    pub dirty: bool,
    /// No more reading; close once `out` is written.
    pub closing: bool,
    /// A SEND waiting for room in a full queue; no reading meanwhile.
    pub parked: Option<Parked>,
}

impl Connection {
    pub fn new(serial: u64, stream: TcpStream, session: Session) -> Connection {
        Connection {
            serial,
            stream,
            read_buf: BytesMut::new(),
            out: Outbound::default(),
            session,
            last_read: Instant::now(),
            blocked: false,
            dirty: false,
            closing: false,
            parked: None,
        }
    }

    /// One `read` into the worker's scratch buffer, appended to this
    /// connection's read buffer. (Reading through a scratch buffer keeps
    /// `unsafe` out and copies only the bytes that arrived.)
    pub fn read_some(&mut self, scratch: &mut [u8]) -> io::Result<ReadStatus> {
        loop {
            match self.stream.read(scratch) {
                Ok(0) => return Ok(ReadStatus::Closed),
                Ok(n) => {
                    self.read_buf.extend_from_slice(&scratch[..n]);
                    self.last_read = Instant::now();
                    return Ok(ReadStatus::Data);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadStatus::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes what is queued; remembers whether the socket blocked.
    pub fn flush(&mut self) -> io::Result<WriteStatus> {
        let status = self.out.write_to(&mut self.stream)?;
        self.blocked = status == WriteStatus::Blocked;
        Ok(status)
    }
}
