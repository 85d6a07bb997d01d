//! The acceptor thread: one `mio::Poll` watching the listener, handing each
//! new connection to a worker, round-robin.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use herald_protocol::frame::ErrorFrame;
use herald_protocol::{ErrorCode, Frame};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::{Command, Shared, WAKER};

const LISTENER: Token = Token(0);

/// Runs until the waker fires; `poll` must have the waker registered.
pub fn run(mut poll: Poll, mut listener: TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(64);
    let mut next_worker = 0;
    // After an accept error (out of file descriptors, say) the listener may
    // still hold connections but will not signal again: retry on a timer.
    let mut retry = None;
    loop {
        if let Err(e) = poll.poll(&mut events, retry) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if events.iter().any(|e| e.token() == WAKER) {
            return Ok(());
        }
        retry = None;
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        log::warn!("cannot set TCP_NODELAY for {peer}: {e}");
                    }
                    let max = shared.config.max_connections;
                    if shared.open_connections.load(Ordering::Acquire) >= max {
                        log::warn!("refusing {peer}: {max} connections are open, the most allowed");
                        refuse(stream, max);
                        continue;
                    }
                    shared.open_connections.fetch_add(1, Ordering::AcqRel);
                    log::debug!("accepted {peer} for worker {next_worker}");
                    if !shared.workers[next_worker].send(Command::Adopt(stream)) {
                        shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                    }
                    next_worker = (next_worker + 1) % shared.workers.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::error!("accept failed: {e}; retrying in 100 ms");
                    retry = Some(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// Tells an over-limit client why before closing: one small write to a
/// fresh socket, which its empty send buffer takes at once.
fn refuse(mut stream: TcpStream, max: usize) {
    let error = ErrorFrame::new(
        ErrorCode::LimitExceeded,
        true,
        format!("the server has {max} connections open, the most it allows"),
    );
    let mut buf = BytesMut::new();
    if Frame::Error(error).encode(0, &mut buf).is_ok() {
        let _ = stream.write(&buf);
    }
}
