//! Idle connections: what N connected clients that send nothing cost the
//! server, in resident memory and threads, read through the management
//! API before and after. The connections are plain sockets that send one
//! CONNECT (no client threads), so that N can be tens of thousands.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::BytesMut;
use herald_client::{Error, Result};
use herald_protocol::frame::Connect;
use herald_protocol::{Decoder, Frame};

use super::progress::Progress;
use crate::target::Target;

/// The server's resident bytes and threads, from `GET /api/server`.
pub fn footprint(target: &Target) -> Result<(u64, u64)> {
    let server = crate::admin::call(target, "GET", "/api/server")?;
    let process = &server["process"];
    match (process["rss_bytes"].as_u64(), process["threads"].as_u64()) {
        (Some(rss), Some(threads)) => Ok((rss, threads)),
        _ => Err(Error::InvalidArgument(
            "the server does not report its memory (it reads /proc/self/status, on Linux)".into(),
        )),
    }
}

/// Opens a socket and sends CONNECT; the answer is read later.
fn open(addr: SocketAddr, connect: &[u8]) -> Result<TcpStream> {
    let io = |source| Error::Io {
        context: format!("connection to {addr}"),
        source,
    };
    let mut stream = TcpStream::connect(addr).map_err(io)?;
    stream.write_all(connect).map_err(io)?;
    Ok(stream)
}

/// Reads frames until CONNECTED.
fn await_connected(stream: &mut TcpStream, decoder: &Decoder) -> Result<()> {
    let bad = |why: String| Error::InvalidArgument(format!("idle connection: {why}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| bad(e.to_string()))?;
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 512];
    loop {
        if let Some(raw) = decoder
            .decode(&mut buf)
            .map_err(|e| bad(e.error.to_string()))?
        {
            return match Frame::decode(raw).map_err(|e| bad(e.to_string()))? {
                Frame::Connected(_) => Ok(()),
                other => Err(bad(format!("{:?} instead of CONNECTED", other.kind()))),
            };
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(bad("the server closed it".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(bad(e.to_string())),
        }
    }
}

pub fn run(target: &Target, server: &str, count: usize) -> Result<()> {
    let addr = server
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::InvalidArgument(format!("cannot resolve {server}")))?;
    let mut connect = BytesMut::new();
    let frame = Frame::Connect(Connect {
        client_id: String::new(),
        user: target.user.clone().unwrap_or_default(),
        password: target.password.clone().unwrap_or_default(),
        // Idle for a minute at most without being closed as silent.
        heartbeat_ms: 60_000,
    });
    frame
        .encode(1, &mut connect)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let (rss_before, threads_before) = footprint(target)?;
    let mut progress = Progress::new("connecting", count as u64);
    let mut streams = Vec::with_capacity(count);
    for i in 0..count {
        streams.push(open(addr, &connect)?);
        if i % 1024 == 0 {
            progress.update(i as u64);
        }
    }
    let decoder = Decoder::new(1 << 20);
    for stream in &mut streams {
        await_connected(stream, &decoder)?;
    }
    progress.finish();
    // Let the server's allocator settle after the burst of accepts.
    std::thread::sleep(Duration::from_millis(500));
    let (rss_after, threads_after) = footprint(target)?;
    let per_connection = rss_after.saturating_sub(rss_before) as f64 / count as f64;
    println!(
        "idle connections: {count}, server resident {:.1} MB -> {:.1} MB, {per_connection:.0} bytes each; \
         threads {threads_before} -> {threads_after}",
        rss_before as f64 / 1e6,
        rss_after as f64 / 1e6,
    );
    println!(
        "{{\"scenario\":\"connections\",\"connections\":{count},\"rss_before\":{rss_before},\
         \"rss_after\":{rss_after},\"bytes_per_connection\":{per_connection:.0},\
         \"threads_before\":{threads_before},\"threads_after\":{threads_after}}}"
    );
    Ok(())
}
