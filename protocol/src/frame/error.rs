//! ERROR: something went wrong with the frame whose request id the header
//! carries (0 = the connection as a whole).
//!
//! `u32 code | u8 fatal | str16 message [| u8 kind | str16 destination |
//! str16 message id]`
//!
//! The optional part names the message of a refused SEND that asked for no
//! RECEIPT (request id 0), so that the client can say which send it was.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::destination::{Destination, DestinationKind};
use crate::error::{Error, ErrorCode};

/// The message a refused SEND carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedSend {
    /// Where it was sent.
    pub destination: Destination,
    /// Its message id.
    pub message_id: String,
}

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
    /// For a refused SEND without a request id: which message it was.
    pub refused: Option<RefusedSend>,
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
            refused: None,
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
        let refused = match c.remaining() {
            0 => None,
            _ => {
                let kind = DestinationKind::from_u8(c.u8("destination kind")?)?;
                let name = c.str16("destination")?.to_owned();
                let message_id = c.str16("message id")?.to_owned();
                Some(RefusedSend {
                    destination: Destination { kind, name },
                    message_id,
                })
            }
        };
        c.finish()?;
        Ok(ErrorFrame {
            code,
            fatal,
            message,
            refused,
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.code);
        d.put_u8(u8::from(self.fatal));
        put_str16(d, &self.message, "message")?;
        if let Some(r) = &self.refused {
            d.put_u8(r.destination.kind as u8);
            put_str16(d, &r.destination.name, "destination")?;
            put_str16(d, &r.message_id, "message id")?;
        }
        Ok(())
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
