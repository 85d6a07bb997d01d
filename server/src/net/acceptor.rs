//! The acceptor thread: one `mio::Poll` watching every listener (native and
//! STOMP), handing each new connection, with its protocol, to a worker,
//! round-robin; between accepts, about once a second, it runs the workers'
//! watchdog.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use herald_protocol::frame::ErrorFrame;
use herald_protocol::stomp::StompFrame;
use herald_protocol::{ErrorCode, Frame};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::watchdog::Watchdog;
use super::{Command, WorkerHandle, WAKER};
use crate::frontend::{Protocol, Shared};

/// Runs until the waker fires; `poll` must have the waker registered.
/// Listener `i` is registered under token `i`.
pub fn run(
    mut poll: Poll,
    mut listeners: Vec<(TcpListener, Protocol)>,
    shared: Arc<Shared>,
    workers: Arc<[WorkerHandle]>,
) -> io::Result<()> {
    for (i, (listener, _)) in listeners.iter_mut().enumerate() {
        poll.registry()
            .register(listener, Token(i), Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(64);
    let mut next_worker = 0;
    // After an accept error (out of file descriptors, say) a listener may
    // still hold connections but will not signal again: retry on a timer.
    let mut retry = None;
    let mut watchdog = Watchdog::default();
    loop {
        let wait = retry.map_or(watchdog.due_in(), |r: Duration| r.min(watchdog.due_in()));
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if events.iter().any(|e| e.token() == WAKER) {
            return Ok(());
        }
        watchdog.look(&shared.stats);
        // Woken for the watchdog only: no listener to retry.
        if events.is_empty() && retry.is_none() {
            continue;
        }
        retry = None;
        for (listener, protocol) in &listeners {
            if let Err(e) = accept_all(listener, *protocol, &shared, &workers, &mut next_worker) {
                log::error!("accept failed: {e}; retrying in 100 ms");
                retry = Some(Duration::from_millis(100));
            }
        }
    }
}

/// Accepts until the listener would block.
fn accept_all(
    listener: &TcpListener,
    protocol: Protocol,
    shared: &Shared,
    workers: &[WorkerHandle],
    next_worker: &mut usize,
) -> io::Result<()> {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = stream.set_nodelay(true) {
                    log::warn!("cannot set TCP_NODELAY for {peer}: {e}");
                }
                let max = shared.limits.get(&shared.limits.max_connections);
                if shared.open_connections.load(Ordering::Acquire) >= max {
                    log::warn!("refusing {peer}: {max} connections are open, the most allowed");
                    refuse(stream, protocol, max);
                    continue;
                }
                shared.open_connections.fetch_add(1, Ordering::AcqRel);
                log::debug!("accepted {peer} ({protocol:?}) for worker {next_worker}");
                if !workers[*next_worker].send(Command::Adopt(stream, protocol)) {
                    shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                }
                *next_worker = (*next_worker + 1) % workers.len();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Tells an over-limit client why before closing, in its protocol: one
/// small write to a fresh socket, which its empty send buffer takes at once.
fn refuse(mut stream: TcpStream, protocol: Protocol, max: usize) {
    let why = format!("the server has {max} connections open, the most it allows");
    let mut buf = BytesMut::new();
    match protocol {
        // No TLS session yet, or (MQTT) no version known to answer in:
        // nothing can be said.
        Protocol::NativeTls | Protocol::Mqtt | Protocol::MqttTls | Protocol::AmqpTls => return,
        // The server's protocol header, the one way to refuse before a
        // frame: the client sees a mismatch and closes.
        Protocol::Amqp => {
            buf.extend_from_slice(&herald_protocol::amqp::ProtocolHeader::Sasl.bytes())
        }
        Protocol::Native => {
            let error = ErrorFrame::new(ErrorCode::LimitExceeded, true, why);
            if Frame::Error(error).encode(0, &mut buf).is_err() {
                return;
            }
        }
        Protocol::Stomp => StompFrame::new("ERROR")
            .header("message", why)
            .encode(false, &mut buf),
        // Before the WebSocket upgrade only HTTP can be said.
        Protocol::StompWebSocket | Protocol::MqttWebSocket | Protocol::AmqpWebSocket => buf
            .extend_from_slice(
                format!(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\r\n{why}",
                    why.len()
                )
                .as_bytes(),
            ),
    }
    let _ = stream.write(&buf);
}
