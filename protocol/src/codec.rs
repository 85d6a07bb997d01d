//! Bytes ↔ frames.
//!
//! Decoding is two-phase (as mini-redis does it): peek at the 12-byte
//! header, wait until the whole body is buffered, then split it off as a
//! `Bytes` without copying. Many frames per read and frames split across
//! reads both work; the caller just keeps appending to the same buffer.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::Error;
use crate::header::{FrameKind, Header, HEADER_LEN, MAGIC, VERSION};

/// A frame whose header is checked and whose body is whole but not yet
/// decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The checked header.
    pub header: Header,
    /// The body, `header.len` bytes.
    pub body: Bytes,
}

/// A decode failure and the request id of the frame it concerns (0 when the
/// header itself was unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The request id from the header, if the header got that far.
    pub request_id: u32,
    /// What was wrong.
    pub error: Error,
}

/// The incremental decoder for one connection.
#[derive(Debug, Clone)]
pub struct Decoder {
    max_frame_size: u32,
}

impl Decoder {
    /// A decoder that refuses bodies larger than `max_frame_size` bytes.
    pub fn new(max_frame_size: u32) -> Decoder {
        Decoder { max_frame_size }
    }

    /// Takes one whole frame off the front of `buf`, or returns `Ok(None)`
    /// if more bytes are needed. After an error the buffer's contents are
    /// meaningless and the connection should be closed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<RawFrame>, DecodeError> {
        let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
            // Fail fast on a bad start rather than waiting for 12 bytes.
            return match check_prefix(buf) {
                Ok(()) => Ok(None),
                Err(error) => Err(DecodeError {
                    request_id: 0,
                    error,
                }),
            };
        };
        let header = Header::decode(head, self.max_frame_size).map_err(|error| {
            let request_id = match error {
                Error::FrameTooLarge { .. } | Error::UnknownKind(_) => {
                    u32::from_be_bytes([head[4], head[5], head[6], head[7]])
                }
                _ => 0,
            };
            DecodeError { request_id, error }
        })?;
        let total = HEADER_LEN + header.len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        // One reference count for the frame; skipping the header moves a
        // pointer and takes none.
        let mut frame = buf.split_to(total);
        frame.advance(HEADER_LEN);
        Ok(Some(RawFrame {
            header,
            body: frame.freeze(),
        }))
    }
}

fn check_prefix(b: &[u8]) -> Result<(), Error> {
    let magic_len = b.len().min(2);
    if b[..magic_len] != MAGIC[..magic_len] {
        let mut m = [0u8; 2];
        m[..magic_len].copy_from_slice(&b[..magic_len]);
        return Err(Error::BadMagic(u16::from_be_bytes(m)));
    }
    match b.get(2) {
        Some(&v) if v != VERSION => Err(Error::UnsupportedVersion(v)),
        _ => Ok(()),
    }
}

/// Appends one frame: the header, then whatever `body` writes. The length
/// is patched in afterwards; if `body` fails, `dst` is left as it was.
pub fn encode_frame<F>(
    dst: &mut BytesMut,
    kind: FrameKind,
    request_id: u32,
    body: F,
) -> Result<(), Error>
where
    F: FnOnce(&mut BytesMut) -> Result<(), Error>,
{
    let start = dst.len();
    dst.put_slice(&[0u8; HEADER_LEN]);
    if let Err(e) = body(dst) {
        dst.truncate(start);
        return Err(e);
    }
    let len = dst.len() - start - HEADER_LEN;
    let Ok(len) = u32::try_from(len) else {
        dst.truncate(start);
        return Err(Error::FrameTooLarge {
            len: u32::MAX,
            max: u32::MAX,
        });
    };
    let header = Header {
        kind,
        request_id,
        len,
    };
    dst[start..start + HEADER_LEN].copy_from_slice(&header.encode());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(request_id: u32) -> Vec<u8> {
        Header {
            kind: FrameKind::Ping,
            request_id,
            len: 0,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn decodes_many_frames_from_one_buffer_and_split_frames() {
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, FrameKind::Send, 1, |d| {
            d.put_slice(b"hello");
            Ok(())
        })
        .unwrap();
        wire.put_slice(&ping(2));
        let all = wire.clone();
        let d = Decoder::new(1024);
        let a = d.decode(&mut wire).unwrap().unwrap();
        assert_eq!(
            (a.header.kind, &a.body[..]),
            (FrameKind::Send, &b"hello"[..])
        );
        let b = d.decode(&mut wire).unwrap().unwrap();
        assert_eq!(b.header.request_id, 2);
        assert_eq!(d.decode(&mut wire).unwrap(), None);

        // Byte by byte gives the same two frames.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in all.iter() {
            buf.put_u8(byte);
            while let Some(f) = d.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, vec![a, b]);
    }

    #[test]
    fn oversized_frame_reports_its_request_id() {
        let mut buf = BytesMut::from(
            &Header {
                kind: FrameKind::Send,
                request_id: 7,
                len: 2048,
            }
            .encode()[..],
        );
        let e = Decoder::new(1024).decode(&mut buf).unwrap_err();
        assert_eq!(e.request_id, 7);
        assert_eq!(
            e.error,
            Error::FrameTooLarge {
                len: 2048,
                max: 1024
            }
        );
    }

    #[test]
    fn bad_prefix_fails_before_a_whole_header() {
        let d = Decoder::new(1024);
        assert!(d.decode(&mut BytesMut::from(&b"GE"[..])).is_err());
        assert!(d.decode(&mut BytesMut::from(&b"HR\x02"[..])).is_err());
        assert_eq!(d.decode(&mut BytesMut::from(&b"HR\x01"[..])), Ok(None));
        assert_eq!(d.decode(&mut BytesMut::new()), Ok(None));
    }

    #[test]
    fn failed_body_leaves_buffer_untouched() {
        let mut buf = BytesMut::from(&b"xy"[..]);
        let r = encode_frame(&mut buf, FrameKind::Send, 0, |d| {
            d.put_slice(b"partial");
            Err(Error::Truncated("test"))
        });
        assert!(r.is_err());
        assert_eq!(&buf[..], b"xy");
    }
}
