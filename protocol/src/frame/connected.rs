//! CONNECTED: server → client, the answer to CONNECT.
//!
//! `str16 server version | str16 connection id | u32 heart-beat ms |
//! u32 max frame size [| str16 notice]`

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::error::Error;

/// The session is open, on these terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    /// The server's version.
    pub server_version: String,
    /// The server's name for this connection (for logs and management).
    pub connection_id: String,
    /// The negotiated heart-beat interval: the client must send something
    /// at least this often or be disconnected.
    pub heartbeat_ms: u32,
    /// The largest frame body the server accepts.
    pub max_frame_size: u32,
    /// Something the client's user should know of this session, such as
    /// credentials that were not checked; empty (and absent on the wire)
    /// when there is nothing to say.
    pub notice: String,
}

impl Connected {
    pub(super) fn decode(body: &[u8]) -> Result<Connected, Error> {
        let mut c = Cursor::new(body);
        let f = Connected {
            server_version: c.str16("server version")?.to_owned(),
            connection_id: c.str16("connection id")?.to_owned(),
            heartbeat_ms: c.u32("heart-beat")?,
            max_frame_size: c.u32("max frame size")?,
            notice: match c.remaining() {
                0 => String::new(),
                _ => c.str16("notice")?.to_owned(),
            },
        };
        c.finish()?;
        Ok(f)
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        put_str16(d, &self.server_version, "server version")?;
        put_str16(d, &self.connection_id, "connection id")?;
        d.put_u32(self.heartbeat_ms);
        d.put_u32(self.max_frame_size);
        if !self.notice.is_empty() {
            put_str16(d, &self.notice, "notice")?;
        }
        Ok(())
    }
}
