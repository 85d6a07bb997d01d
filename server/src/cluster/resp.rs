//! The pub/sub side of a Redis connection, read without the `redis`
//! crate: the inbound thread parses one `pmessage` per message routed
//! here, and a hand-written RESP2 reader over one growing buffer takes
//! each payload out as `Bytes` without copying or allocating per element
//! (the crate's general parser was a fifth of that thread's time, and a
//! subscriber that reads too slowly is cut off by Redis).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

/// One element of a pub/sub reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A bulk string (`$`); `None` for a null one.
    Bulk(Option<Bytes>),
    /// An integer (`:`).
    Int(i64),
    /// A status line (`+`).
    Status(Bytes),
}

/// A reply, or why Redis refused a command.
pub type Reply = Result<Vec<Item>, Refusal>;

/// Redis's error reply (`-ERR ...`): its refusal of a command, as it said
/// it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// An element while its reply is still being checked: a bulk string is
/// where it lies in the buffer.
enum Raw {
    Bulk(Option<Range<usize>>),
    Int(i64),
    Status(Bytes),
}

/// Largest bulk string accepted: a message block is at most the server's
/// frame size, far below this.
const MAX_BULK: usize = 512 << 20;

/// Takes one whole reply off the front of `buf`; `None` until it has
/// arrived. A malformed one is an error, which ends the connection.
pub fn parse(buf: &mut BytesMut) -> io::Result<Option<Reply>> {
    let mut at = 0;
    let Some(first) = line(buf, &mut at)? else {
        return Ok(None);
    };
    let (kind, rest) = split_kind(&first)?;
    let reply = match kind {
        b'*' => {
            let n = number(rest)?;
            let mut items = Vec::with_capacity(n.clamp(0, 8) as usize);
            for _ in 0..n.max(0) {
                let Some(item) = element(buf, &mut at)? else {
                    return Ok(None);
                };
                items.push(item);
            }
            Ok(items)
        }
        b'-' => Err(Refusal(String::from_utf8_lossy(rest).into_owned())),
        _ => {
            at = 0;
            match element(buf, &mut at)? {
                Some(item) => Ok(vec![item]),
                None => return Ok(None),
            }
        }
    };
    // Whole: consume it, and give the bulk strings their bytes (slices of
    // one buffer, no copies).
    let whole = buf.split_to(at).freeze();
    let reply = reply.map(|items| {
        items
            .into_iter()
            .map(|raw| match raw {
                Raw::Bulk(range) => Item::Bulk(range.map(|r| whole.slice(r))),
                Raw::Int(n) => Item::Int(n),
                Raw::Status(s) => Item::Status(s),
            })
            .collect()
    });
    Ok(Some(reply))
}

fn split_kind(line: &[u8]) -> io::Result<(u8, &[u8])> {
    match line.split_first() {
        Some((&kind, rest)) => Ok((kind, rest)),
        None => Err(bad("an empty line")),
    }
}

/// One element of an array, at `at`.
fn element(buf: &BytesMut, at: &mut usize) -> io::Result<Option<Raw>> {
    let Some(first) = line(buf, at)? else {
        return Ok(None);
    };
    let (kind, rest) = split_kind(&first)?;
    Ok(Some(match kind {
        b'$' => {
            let n = number(rest)?;
            if n < 0 {
                return Ok(Some(Raw::Bulk(None)));
            }
            let n = n as usize;
            if n > MAX_BULK {
                return Err(bad("a bulk string over 512 MiB"));
            }
            if buf.len() < *at + n + 2 {
                return Ok(None);
            }
            if &buf[*at + n..*at + n + 2] != b"\r\n" {
                return Err(bad("a bulk string without its CRLF"));
            }
            let range = *at..*at + n;
            *at += n + 2;
            Raw::Bulk(Some(range))
        }
        b':' => Raw::Int(number(rest)?),
        b'+' => Raw::Status(Bytes::copy_from_slice(rest)),
        k => return Err(bad(&format!("an unexpected reply type {:?}", k as char))),
    }))
}

/// The line at `at` without its CRLF, moving `at` past it.
fn line(buf: &BytesMut, at: &mut usize) -> io::Result<Option<Vec<u8>>> {
    let Some(end) = buf[*at..].windows(2).position(|w| w == b"\r\n") else {
        if buf.len() - *at > 64 {
            return Err(bad("a line over 64 bytes"));
        }
        return Ok(None);
    };
    let line = buf[*at..*at + end].to_vec();
    *at += end + 2;
    Ok(Some(line))
}

fn number(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("a bad number"))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("Redis sent {what}"))
}

/// A command as RESP: an array of bulk strings.
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A connection in subscribe mode.
pub struct Subscriber {
    stream: TcpStream,
    buf: BytesMut,
}

impl Subscriber {
    /// Connects to `info` (TCP only), logs in if it names a password, and
    /// waits at most `timeout` for each read after that.
    pub fn connect(info: &redis::ConnectionInfo, timeout: Duration) -> io::Result<Subscriber> {
        let redis::ConnectionAddr::Tcp(host, port) = &info.addr else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "cluster mode reaches Redis over plain TCP (redis://)",
            ));
        };
        let stream = connect_within((host.as_str(), *port), super::link::CONNECT_WITHIN)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(super::link::ANSWER_TIMEOUT))?;
        let mut s = Subscriber {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
        };
        if let Some(password) = &info.redis.password {
            let user = info.redis.username.as_deref().unwrap_or("default");
            s.send(&[b"AUTH", user.as_bytes(), password.as_bytes()])?;
            s.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            match s.next()? {
                Some(Ok(_)) => {}
                Some(Err(why)) => return Err(io::Error::other(format!("AUTH: {why}"))),
                None => return Err(io::Error::other("AUTH: no answer")),
            }
        }
        s.stream.set_read_timeout(Some(timeout))?;
        Ok(s)
    }

    /// Sends a command; its confirmation comes later, as a reply (a
    /// `PING`'s is `["pong", ""]`).
    pub fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        self.stream.write_all(&command(args))
    }

    /// The next reply, or `None` if nothing came within the timeout.
    pub fn next(&mut self) -> io::Result<Option<Reply>> {
        loop {
            if let Some(reply) = parse(&mut self.buf)? {
                return Ok(Some(reply));
            }
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            let len = self.buf.len();
            let room = self.buf.capacity() - len;
            self.buf.resize(len + room, 0);
            let read = self.stream.read(&mut self.buf[len..]);
            self.buf.truncate(len + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A TCP connection to the first address of `addr` that answers within
/// `timeout`.
fn connect_within(addr: impl ToSocketAddrs, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Item {
        Item::Bulk(Some(Bytes::copy_from_slice(b)))
    }

    #[test]
    fn pmessages_and_confirmations_parse_whole_and_only_whole() {
        let first: &[u8] = b"*4\r\n$8\r\npmessage\r\n$3\r\na.*\r\n$3\r\na.b\r\n$5\r\nx\r\nyz\r\n";
        let second: &[u8] = b"*3\r\n$10\r\npsubscribe\r\n$3\r\na.*\r\n:1\r\n";
        let wire = [first, second].concat();
        // Every cut short of a whole reply waits for more.
        for cut in 0..first.len() {
            let mut b = BytesMut::from(&wire[..cut]);
            assert!(parse(&mut b).unwrap().is_none(), "{cut}");
            assert_eq!(b.len(), cut);
        }
        let mut b = BytesMut::from(&wire[..]);
        let m = parse(&mut b).unwrap().unwrap().unwrap();
        assert_eq!(
            m,
            vec![
                bulk(b"pmessage"),
                bulk(b"a.*"),
                bulk(b"a.b"),
                bulk(b"x\r\nyz")
            ]
        );
        let c = parse(&mut b).unwrap().unwrap().unwrap();
        assert_eq!(c, vec![bulk(b"psubscribe"), bulk(b"a.*"), Item::Int(1)]);
        assert!(b.is_empty());
    }

    #[test]
    fn errors_and_garbage_are_told_apart() {
        let mut b = BytesMut::from(&b"-NOAUTH Authentication required.\r\n"[..]);
        assert_eq!(
            parse(&mut b).unwrap().unwrap(),
            Err(Refusal("NOAUTH Authentication required.".into()))
        );
        for garbage in [&b"?what\r\n"[..], b"*x\r\n", b"*1\r\n$5\r\nabcdefg\r\n"] {
            assert!(parse(&mut BytesMut::from(garbage)).is_err(), "{garbage:?}");
        }
        // A line that never ends is refused rather than buffered forever.
        assert!(parse(&mut BytesMut::from(&[b'$'; 100][..])).is_err());
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            command(&[b"PSUBSCRIBE", b"herald:t:a*"]),
            b"*2\r\n$10\r\nPSUBSCRIBE\r\n$11\r\nherald:t:a*\r\n"
        );
    }
}
