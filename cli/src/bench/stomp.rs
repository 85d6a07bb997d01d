//! The same 1 → 1 topic throughput over STOMP, to compare the two
//! protocols in one run: a raw-socket STOMP publisher and subscriber (the
//! crate's own codec), counted at the subscriber like the native run.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use herald_client::{Error, Result};
use herald_protocol::stomp::{StompDecoder, StompFrame, StompLimits};

use super::progress::Progress;
use super::{bench_topic, wait_for};

pub(super) fn io(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::InvalidArgument(format!("STOMP {context}: {e}"))
}

pub(super) fn connect(addr: SocketAddr) -> Result<(TcpStream, StompDecoder, BytesMut)> {
    let mut stream = TcpStream::connect(addr).map_err(io("connect"))?;
    stream.set_nodelay(true).map_err(io("connect"))?;
    let mut buf = BytesMut::new();
    StompFrame::new("CONNECT")
        .header("accept-version", "1.2")
        .header("host", "bench")
        .encode(false, &mut buf);
    stream.write_all(&buf).map_err(io("CONNECT"))?;
    let decoder = StompDecoder::new(StompLimits {
        max_frame_size: 64 << 20,
        max_headers: 1024,
    });
    let mut inbound = BytesMut::new();
    let connected = next_frame(&mut stream, &decoder, &mut inbound)?;
    if connected.command != "CONNECTED" {
        return Err(Error::InvalidArgument(format!(
            "STOMP CONNECT answered with {}",
            connected.command
        )));
    }
    Ok((stream, decoder, inbound))
}

pub(super) fn next_frame(
    stream: &mut TcpStream,
    decoder: &StompDecoder,
    buf: &mut BytesMut,
) -> Result<StompFrame> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(f) = decoder
            .decode(buf)
            .map_err(|e| Error::InvalidArgument(format!("STOMP: {e}")))?
        {
            return Ok(f);
        }
        let n = stream.read(&mut chunk).map_err(io("read"))?;
        if n == 0 {
            return Err(Error::ConnectionLost(
                "the STOMP server closed the connection".into(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads the RECEIPT of a SUBSCRIBE.
pub(super) fn expect_receipt(
    stream: &mut TcpStream,
    decoder: &StompDecoder,
    inbound: &mut BytesMut,
) -> Result<()> {
    let receipt = next_frame(stream, decoder, inbound)?;
    if receipt.command != "RECEIPT" {
        return Err(Error::InvalidArgument(format!(
            "STOMP SUBSCRIBE answered with {}",
            receipt.command
        )));
    }
    Ok(())
}

/// Messages the publisher may be ahead of the subscriber.
const WINDOW: u64 = 20_000;

/// Before sending message `i`: closed loop, the publisher stays at most
/// [`WINDOW`] messages ahead of what was `received`, so that a run
/// measures what STOMP sustains rather than how fast the server's
/// slow-consumer limit is hit.
pub(super) fn within_window(
    i: u64,
    received: &AtomicU64,
    out: &mut impl Write,
    progress: &mut Progress,
) -> Result<()> {
    if i.is_multiple_of(1024) {
        progress.update(received.load(Ordering::Relaxed));
        if i >= WINDOW {
            out.flush().map_err(io("SEND"))?;
            while received.load(Ordering::Relaxed) + WINDOW < i {
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

/// Publishes `count` messages of `size` bytes over STOMP and counts them at
/// a STOMP subscriber.
pub fn run(addr: SocketAddr, size: usize, count: u64) -> Result<()> {
    let topic = format!("/topic/{}", bench_topic("stomp"));
    let (mut sub, decoder, mut inbound) = connect(addr)?;
    let mut buf = BytesMut::new();
    StompFrame::new("SUBSCRIBE")
        .header("id", "0")
        .header("destination", topic.as_str())
        .header("receipt", "subscribed")
        .encode(true, &mut buf);
    sub.write_all(&buf).map_err(io("SUBSCRIBE"))?;
    expect_receipt(&mut sub, &decoder, &mut inbound)?;
    let received = Arc::new(AtomicU64::new(0));
    let last = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let reader = {
        let (received, last) = (received.clone(), last.clone());
        std::thread::spawn(move || {
            while received.load(Ordering::Relaxed) < count {
                match next_frame(&mut sub, &decoder, &mut inbound) {
                    Ok(f) if f.command == "MESSAGE" => {
                        received.fetch_add(1, Ordering::Relaxed);
                        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        log::warn!("STOMP subscriber stopped: {e}");
                        return;
                    }
                }
            }
        })
    };

    let (publisher, _, _) = connect(addr)?;
    let mut out = BufWriter::with_capacity(64 * 1024, publisher);
    let send = StompFrame::new("SEND")
        .header("destination", topic.as_str())
        .header("content-type", "application/octet-stream")
        .body(Bytes::from(vec![7u8; size]));
    let mut frame = BytesMut::new();
    send.encode(true, &mut frame);
    let started = Instant::now();
    let mut progress = Progress::new("stomp", count);
    for i in 0..count {
        within_window(i, &received, &mut out, &mut progress)?;
        out.write_all(&frame).map_err(io("SEND"))?;
    }
    out.flush().map_err(io("SEND"))?;
    let got = wait_for(count, &mut progress, || received.load(Ordering::Relaxed));
    progress.finish();
    let last = *last.lock().unwrap_or_else(|p| p.into_inner());
    let (seconds, rate) = super::rate(started, last, got);
    let lost = count - got.min(count);
    println!("stomp 1 -> 1, {size} B: {got} of {count} delivered in {seconds:.3} s: {rate:.0} msgs/s; lost {lost}");
    println!(
        "{{\"scenario\":\"stomp\",\"size\":{size},\"count\":{count},\"received\":{got},\"lost\":{lost},\
         \"seconds\":{seconds:.6},\"msgs_per_sec\":{rate:.0}}}"
    );
    drop(out);
    if got == count {
        let _ = reader.join();
    }
    Ok(())
}
