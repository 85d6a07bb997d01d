//! The STOMP frame codec: bytes ↔ [`StompFrame`].

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// A STOMP frame that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StompError {
    /// The frame is larger than allowed.
    #[error("frame of {}{size} bytes exceeds the limit of {max}", if *.partial { "at least " } else { "" })]
    TooLarge {
        /// Its size, or what has arrived of it when `partial`.
        size: usize,
        /// Only part of it has arrived: it is at least `size` bytes.
        partial: bool,
        /// The limit.
        max: usize,
    },
    /// Too many header lines.
    #[error("more than {max} headers")]
    TooManyHeaders {
        /// The limit.
        max: usize,
    },
    /// A line that should be a header has no colon.
    #[error("header line {line:?} has no ':'")]
    NoColon {
        /// The line.
        line: String,
    },
    /// An escape sequence STOMP does not define.
    #[error("undefined escape sequence '\\{0}' in a header")]
    BadEscape(char),
    /// Not UTF-8 where text is required.
    #[error("the {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// `content-length` is not a number.
    #[error("content-length {0:?} is not a number")]
    BadContentLength(String),
    /// The byte after a `content-length` body is not NUL.
    #[error("the body is not followed by NUL where content-length says it ends")]
    MissingNul,
    /// An empty command line.
    #[error("empty command")]
    EmptyCommand,
    /// A NUL byte in the command or a header, where it would end the
    /// frame for some readers.
    #[error("a NUL byte in the {0}")]
    Nul(&'static str),
}

/// Bounds on what a peer may send.
#[derive(Debug, Clone, Copy)]
pub struct StompLimits {
    /// Bytes in one frame, headers and body together.
    pub max_frame_size: usize,
    /// Header lines in one frame.
    pub max_headers: usize,
}

/// One STOMP frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StompFrame {
    /// The command, as sent (`SEND`, `MESSAGE`, ...).
    pub command: String,
    /// Headers in order, unescaped; repeats kept (the first counts).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl StompFrame {
    /// A frame with no headers and no body.
    pub fn new(command: impl Into<String>) -> StompFrame {
        StompFrame {
            command: command.into(),
            ..StompFrame::default()
        }
    }

    /// Builder: adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> StompFrame {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Builder: sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> StompFrame {
        self.body = body.into();
        self
    }

    /// The first value of a header.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Appends the frame. `escape` applies 1.1/1.2 header escaping (never
    /// for CONNECT and CONNECTED). A non-empty body gets a `content-length`
    /// of its true length; one among the headers is never written, since
    /// a wrong one would let the body's bytes be read as further frames.
    pub fn encode(&self, escape: bool, dst: &mut BytesMut) {
        self.encode_head(escape, self.body.len() as u64, dst);
        dst.put_slice(&self.body);
        dst.put_u8(0);
    }

    /// Appends the command and headers, with a `content-length` of
    /// `body_len` (none for 0), and the blank line: what comes before a
    /// body of `body_len` bytes written apart, then the NUL.
    pub fn encode_head(&self, escape: bool, body_len: u64, dst: &mut BytesMut) {
        let escape = escape && self.command != "CONNECT" && self.command != "CONNECTED";
        dst.put_slice(self.command.as_bytes());
        dst.put_u8(b'\n');
        // A header this encoding cannot carry is left out: written raw, its
        // line breaks would let a property forge headers or whole frames.
        let representable = |name: &str, value: &str| {
            let bad_name = if escape { "\0" } else { "\0\r\n:" };
            let bad_value = if escape { "\0" } else { "\0\r\n" };
            !name.contains(|c| bad_name.contains(c)) && !value.contains(|c| bad_value.contains(c))
        };
        for (name, value) in &self.headers {
            if !representable(name, value) || name == "content-length" {
                continue;
            }
            put_header_text(dst, name, escape);
            dst.put_u8(b':');
            put_header_text(dst, value, escape);
            dst.put_u8(b'\n');
        }
        if body_len > 0 {
            dst.put_slice(format!("content-length:{body_len}\n").as_bytes());
        }
        dst.put_u8(b'\n');
    }
}

fn put_header_text(dst: &mut BytesMut, text: &str, escape: bool) {
    if !escape {
        dst.put_slice(text.as_bytes());
        return;
    }
    for b in text.bytes() {
        match b {
            b'\r' => dst.put_slice(b"\\r"),
            b'\n' => dst.put_slice(b"\\n"),
            b':' => dst.put_slice(b"\\c"),
            b'\\' => dst.put_slice(b"\\\\"),
            b => dst.put_u8(b),
        }
    }
}

fn unescape(raw: &str, escape: bool) -> Result<String, StompError> {
    if !escape || !raw.contains('\\') {
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some('c') => out.push(':'),
            Some('\\') => out.push('\\'),
            Some(other) => return Err(StompError::BadEscape(other)),
            None => return Err(StompError::BadEscape(' ')),
        }
    }
    Ok(out)
}

/// The incremental STOMP decoder of one connection.
#[derive(Debug, Clone)]
pub struct StompDecoder {
    limits: StompLimits,
    /// Header escaping, on from version 1.1.
    escape: bool,
}

/// Where one line ends: the index of its LF, and the line without CR.
fn line_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let lf = from + buf[from..].iter().position(|&b| b == b'\n')?;
    let end = if lf > from && buf[lf - 1] == b'\r' {
        lf - 1
    } else {
        lf
    };
    Some((lf, end))
}

impl StompDecoder {
    /// Takes frames of up to `max` bytes from now on (larger once the
    /// peer has connected).
    pub fn set_max_frame_size(&mut self, max: usize) {
        self.limits.max_frame_size = max;
    }

    /// A decoder with these limits; escaping is on (1.1 and later) until
    /// [`StompDecoder::set_escape`] says otherwise.
    pub fn new(limits: StompLimits) -> StompDecoder {
        StompDecoder {
            limits,
            escape: true,
        }
    }

    /// Turns header escaping on (1.1, 1.2) or off (1.0).
    pub fn set_escape(&mut self, escape: bool) {
        self.escape = escape;
    }

    /// Takes heart-beat EOLs off the front of `buf`; returns how many.
    pub fn skip_heartbeats(buf: &mut BytesMut) -> usize {
        let n = buf
            .iter()
            .take_while(|&&b| b == b'\n' || b == b'\r')
            .count();
        let _ = buf.split_to(n);
        n
    }

    /// Takes one whole frame off `buf` (after any heart-beat EOLs), or
    /// `Ok(None)` if more bytes are needed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<StompFrame>, StompError> {
        match self.decode_or_head(buf, usize::MAX)? {
            Some(Decoded::Frame(frame)) => Ok(Some(frame)),
            // No body is longer than usize::MAX.
            Some(Decoded::Head { body_len, .. }) => Err(StompError::TooLarge {
                size: body_len,
                partial: true,
                max: self.limits.max_frame_size,
            }),
            None => Ok(None),
        }
    }

    /// [`StompDecoder::decode`], but of a SEND whose `content-length`
    /// says more than `large` bytes only the head is taken, and its body
    /// is left in `buf` (it follows, then its NUL): a large message's,
    /// which may be longer than a frame may be.
    pub fn decode_or_head(
        &self,
        buf: &mut BytesMut,
        large: usize,
    ) -> Result<Option<Decoded>, StompError> {
        StompDecoder::skip_heartbeats(buf);
        let max = self.limits.max_frame_size;
        let too_large = |size, partial| StompError::TooLarge { size, partial, max };
        // The command line.
        let Some((lf, end)) = line_end(buf, 0) else {
            return if buf.len() > max {
                Err(too_large(buf.len(), true))
            } else {
                Ok(None)
            };
        };
        let command =
            std::str::from_utf8(&buf[..end]).map_err(|_| StompError::NotUtf8("command"))?;
        if command.contains('\0') {
            return Err(StompError::Nul("command"));
        }
        if command.is_empty() {
            return Err(StompError::EmptyCommand);
        }
        // Headers, up to the blank line.
        let mut at = lf + 1;
        let mut headers = Vec::new();
        let escape = self.escape && command != "CONNECT" && command != "CONNECTED";
        loop {
            let Some((lf, end)) = line_end(buf, at) else {
                return if buf.len() > max {
                    Err(too_large(buf.len(), true))
                } else {
                    Ok(None)
                };
            };
            if end == at {
                at = lf + 1;
                break;
            }
            if headers.len() == self.limits.max_headers {
                return Err(StompError::TooManyHeaders {
                    max: self.limits.max_headers,
                });
            }
            let line =
                std::str::from_utf8(&buf[at..end]).map_err(|_| StompError::NotUtf8("header"))?;
            if line.contains('\0') {
                return Err(StompError::Nul("header"));
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(StompError::NoColon {
                    line: line.to_owned(),
                });
            };
            headers.push((unescape(name, escape)?, unescape(value, escape)?));
            at = lf + 1;
        }
        if at > max {
            return Err(too_large(at, true));
        }
        // The body: content-length bytes then NUL, or up to the first NUL.
        let content_length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.trim());
        let (body_end, frame_end) = match content_length {
            Some(text) => {
                let n: usize = text
                    .parse()
                    .map_err(|_| StompError::BadContentLength(text.to_owned()))?;
                if n > large && command == "SEND" {
                    let command = command.to_owned();
                    let _ = buf.split_to(at);
                    return Ok(Some(Decoded::Head {
                        frame: StompFrame {
                            command,
                            headers,
                            body: Bytes::new(),
                        },
                        body_len: n,
                    }));
                }
                if at.saturating_add(n) >= max {
                    return Err(too_large(at.saturating_add(n).saturating_add(1), false));
                }
                if buf.len() < at + n + 1 {
                    return Ok(None);
                }
                if buf[at + n] != 0 {
                    return Err(StompError::MissingNul);
                }
                (at + n, at + n + 1)
            }
            None => match buf[at..].iter().position(|&b| b == 0) {
                Some(i) => (at + i, at + i + 1),
                None if buf.len() > max => return Err(too_large(buf.len(), true)),
                None => return Ok(None),
            },
        };
        let command = command.to_owned();
        let mut frame = buf.split_to(frame_end);
        let body = frame.split_off(at).freeze().slice(..body_end - at);
        Ok(Some(Decoded::Frame(StompFrame {
            command,
            headers,
            body,
        })))
    }
}

/// What [`StompDecoder::decode_or_head`] took.
#[derive(Debug)]
pub enum Decoded {
    /// A whole frame.
    Frame(StompFrame),
    /// The head of a SEND whose body of `body_len` bytes, then its NUL,
    /// follow in the buffer.
    Head {
        /// The frame, its body empty.
        frame: StompFrame,
        /// Bytes of body to come.
        body_len: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> StompDecoder {
        StompDecoder::new(StompLimits {
            max_frame_size: 4096,
            max_headers: 16,
        })
    }

    #[test]
    fn a_large_send_gives_its_head_and_leaves_its_body() {
        let d = decoder();
        let mut buf =
            BytesMut::from(&b"SEND\ndestination:/queue/q\ncontent-length:10000\n\n0123"[..]);
        let Some(Decoded::Head { frame, body_len }) = d.decode_or_head(&mut buf, 100).unwrap()
        else {
            panic!("a head");
        };
        assert_eq!((frame.command.as_str(), body_len), ("SEND", 10000));
        assert_eq!(frame.get("destination"), Some("/queue/q"));
        assert!(frame.body.is_empty());
        assert_eq!(&buf[..], b"0123", "the body stays");
        // At or under `large`, another command, or without content-length:
        // whole frames (or too large for decode).
        for (wire, large) in [
            (&b"SEND\ncontent-length:3\n\nabc\0"[..], 3),
            (&b"MESSAGE\ncontent-length:3\n\nabc\0"[..], 0),
            (&b"SEND\n\nabc\0"[..], 0),
        ] {
            let mut buf = BytesMut::from(wire);
            assert!(matches!(
                d.decode_or_head(&mut buf, large).unwrap(),
                Some(Decoded::Frame(_))
            ));
        }
        let mut buf = BytesMut::from(&b"SEND\ncontent-length:10000\n\n"[..]);
        assert!(matches!(
            d.decode(&mut buf),
            Err(StompError::TooLarge { .. })
        ));
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<StompFrame>, StompError> {
        let d = decoder();
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = d.decode(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn decodes_frames_with_and_without_content_length_and_crlf() {
        let frames = decode_all(
            b"\n\nSEND\r\ndestination:/queue/a\r\n\r\nhello\0\nSEND\ndestination:/topic/b\ncontent-length:5\n\na\0b\0c\0",
        )
        .unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].get("destination"), Some("/queue/a"));
        assert_eq!(&frames[0].body[..], b"hello");
        assert_eq!(&frames[1].body[..], b"a\0b\0c");
    }

    #[test]
    fn a_header_that_cannot_be_written_safely_is_left_out() {
        let forged = "x\n\n\0MESSAGE\ndestination:/topic/bank\n\nFAKE";
        let frame = StompFrame::new("MESSAGE")
            .header("destination", "/topic/t")
            .header("note", forged)
            .header("bad:name", "v")
            .header("nul", "a\0b")
            .header("lines", "a\r\nb")
            .body(&b"real"[..]);
        for escape in [false, true] {
            let mut b = BytesMut::new();
            frame.encode(escape, &mut b);
            let frames = decode_all(&b).unwrap();
            assert_eq!(
                frames.len(),
                1,
                "escape {escape}: {:?}",
                String::from_utf8_lossy(&b)
            );
            assert_eq!(&frames[0].body[..], b"real");
            assert!(frames[0].get("nul").is_none());
            assert!(frames[0].get("note").is_none(), "it holds a NUL");
            assert_eq!(frames[0].get("lines").is_some(), escape);
            assert_eq!(frames[0].get("bad:name").is_some(), escape);
        }
        assert!(matches!(
            decode_all(b"SEND\ndestination:/queue/a\nx:a\0b\n\n\0"),
            Err(StompError::Nul("header"))
        ));
    }

    #[test]
    fn a_content_length_header_cannot_lie_about_the_body() {
        // Found by fuzzing: a content-length 1.0 could not carry was left
        // out, and with it the body's length. A wrong one would split the
        // body into forged frames.
        let body = &b"x\0\nMESSAGE\ndestination:/topic/bank\n\nforged\0"[..];
        for length in ["2", "\r2\r", "999"] {
            let frame = StompFrame::new("MESSAGE")
                .header("content-length", length)
                .body(body);
            for escape in [false, true] {
                let mut b = BytesMut::new();
                frame.encode(escape, &mut b);
                let frames = decode_all(&b).unwrap();
                assert_eq!(frames.len(), 1, "{length:?}, escape {escape}");
                assert_eq!(&frames[0].body[..], body);
            }
        }
    }

    #[test]
    fn escapes_round_trip_and_first_header_wins() {
        let f = StompFrame::new("MESSAGE")
            .header("key:with\\odd\nchars", "value\r:\\")
            .header("dup", "first")
            .header("dup", "second")
            .body(&b"\0binary\0"[..]);
        let mut buf = BytesMut::new();
        f.encode(true, &mut buf);
        let back = decode_all(&buf).unwrap();
        assert_eq!(
            back[0].headers[0],
            ("key:with\\odd\nchars".into(), "value\r:\\".into())
        );
        assert_eq!(back[0].get("dup"), Some("first"));
        assert_eq!(&back[0].body[..], b"\0binary\0");
    }

    #[test]
    fn connect_frames_are_never_escaped() {
        let frames = decode_all(b"CONNECT\nlogin:a\\b\n\n\0").unwrap();
        assert_eq!(frames[0].get("login"), Some("a\\b"));
    }

    #[test]
    fn partial_input_waits_and_byte_by_byte_gives_the_same_frames() {
        let wire = b"SUBSCRIBE\nid:1\ndestination:/topic/x\n\n\0SEND\ncontent-length:3\n\nabc\0";
        let whole = decode_all(wire).unwrap();
        let d = decoder();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in wire.iter() {
            buf.put_u8(b);
            while let Some(f) = d.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, whole);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(
            decode_all(b"SEND\nno colon here\n\n\0"),
            Err(StompError::NoColon {
                line: "no colon here".into()
            })
        );
        assert_eq!(
            decode_all(b"SEND\na:\\t\n\n\0"),
            Err(StompError::BadEscape('t'))
        );
        assert!(matches!(
            decode_all(b"SEND\ncontent-length:x\n\n\0"),
            Err(StompError::BadContentLength(_))
        ));
        assert_eq!(
            decode_all(b"SEND\ncontent-length:1\n\nab\0"),
            Err(StompError::MissingNul)
        );
        assert!(matches!(
            decode_all(b"SEND\ncontent-length:99999\n\n"),
            Err(StompError::TooLarge { .. })
        ));
        let endless = [b"SEND\n\n".as_slice(), &[b'x'; 5000]].concat();
        assert!(matches!(
            decode_all(&endless),
            Err(StompError::TooLarge { .. })
        ));
        let many: String = (0..20).map(|i| format!("h{i}:v\n")).collect();
        assert!(matches!(
            decode_all(format!("SEND\n{many}\n\0").as_bytes()),
            Err(StompError::TooManyHeaders { .. })
        ));
        assert_eq!(
            decode_all(b"\xff\xfe\n\n\0"),
            Err(StompError::NotUtf8("command"))
        );
        // Random bytes never panic.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let len = (state % 64) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    b"SEND\n:\\c0\rxa"[(state % 12) as usize]
                })
                .collect();
            let _ = decode_all(&bytes);
        }
    }
}
