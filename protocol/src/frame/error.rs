//! ERROR: something went wrong with the frame whose request id the header
//! carries (0 = the connection as a whole).
//!
//! `u32 code | u8 fatal | str16 message`

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::error::{Error, ErrorCode};

/// An error report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// An [`ErrorCode`] number; kept raw so that codes added later still
    /// decode.
    pub code: u32,
    /// The sender closes the connection after this frame.
    pub fatal: bool,
    /// What was wrong, for people.
    pub message: String,
}

impl ErrorFrame {
    /// An error frame for a code and a message; messages longer than a
    /// str16 are cut at a character boundary.
    pub fn new(code: ErrorCode, fatal: bool, message: impl Into<String>) -> ErrorFrame {
        let mut message = message.into();
        if message.len() > u16::MAX as usize {
            let mut end = u16::MAX as usize;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        ErrorFrame {
            code: code as u32,
            fatal,
            message,
        }
    }

    /// The code, if this side knows it.
    pub fn error_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_u32(self.code)
    }

    pub(super) fn decode(body: &[u8]) -> Result<ErrorFrame, Error> {
        let mut c = Cursor::new(body);
        let code = c.u32("code")?;
        let fatal = match c.u8("fatal")? {
            0 => false,
            1 => true,
            b => return Err(Error::invalid("fatal", format!("{b} is not 0 or 1"))),
        };
        let message = c.str16("message")?.to_owned();
        c.finish()?;
        Ok(ErrorFrame {
            code,
            fatal,
            message,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.code);
        d.put_u8(u8::from(self.fatal));
        put_str16(d, &self.message, "message")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_to_fit() {
        let f = ErrorFrame::new(ErrorCode::Internal, false, "é".repeat(40_000));
        assert!(f.message.len() <= u16::MAX as usize);
        assert_eq!(f.error_code(), Some(ErrorCode::Internal));
        let mut d = BytesMut::new();
        f.encode(&mut d).unwrap();
    }
}
