//! CONNECT: client → server, the first frame of every connection.
//!
//! `str16 client id | str16 user | str16 password | u32 heart-beat ms`

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::error::Error;

/// Opens a session.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Connect {
    /// The client's chosen id; empty = none.
    pub client_id: String,
    /// User name; empty = anonymous.
    pub user: String,
    /// Password; empty = none.
    pub password: String,
    /// The heart-beat interval the client asks for; 0 = the server's default.
    pub heartbeat_ms: u32,
}

impl Connect {
    pub(super) fn decode(body: &[u8]) -> Result<Connect, Error> {
        let mut c = Cursor::new(body);
        let f = Connect {
            client_id: c.str16("client id")?.to_owned(),
            user: c.str16("user")?.to_owned(),
            password: c.str16("password")?.to_owned(),
            heartbeat_ms: c.u32("heart-beat")?,
        };
        c.finish()?;
        Ok(f)
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        put_str16(d, &self.client_id, "client id")?;
        put_str16(d, &self.user, "user")?;
        put_str16(d, &self.password, "password")?;
        d.put_u32(self.heartbeat_ms);
        Ok(())
    }
}
