//! One client connection as its worker sees it: the socket, its buffers and
//! the protocol session.

use std::io::{self, Read};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mio::net::TcpStream;

use bytes::Bytes;
use herald_protocol::ErrorCode;

use rustls::ServerConnection;

use super::stamp::Stamp;
use super::tls::Plaintext;
use crate::broker::Backlog;
use crate::frontend::outbound::{encode_control, Droppable, Outbound, WriteStatus};
use crate::frontend::streams;
use crate::frontend::{Closing, Flow, Parked, Refusal, Welcome};
use crate::handlers;
use crate::store::large::LargeStore;
use crate::store::StoreError;
use std::sync::Arc;

use crate::frontend::{ConnView, Protocol};
use crate::mqtt::MqttSession;
use crate::session::{Phase, Session};
use crate::stomp::StompSession;

/// What one read found.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Some bytes were appended to the read buffer.
    Data,
    /// The socket has nothing more now.
    Drained,
    /// The peer closed its side.
    Closed,
}

/// Whether a connection is read, and if not, what it waits for: one state,
/// so that a connection told to close cannot also go on with a held send
/// or a login.
pub enum ReadState {
    /// Read as input comes.
    Open,
    /// A SEND waits for room in a full queue. Boxed, as `LoggingIn`: rare,
    /// and an idle connection should be small.
    Parked(Box<Parked>),
    /// A CONNECT whose login is being checked.
    LoggingIn(Box<Welcome>),
    /// As a publisher, not read until this subscriber backlog is drained;
    /// since when. Boxed, as `Parked`.
    Paused(Box<(Arc<Backlog>, Instant)>),
    /// No more reading: close once what is queued (owed answers included)
    /// is written. What it waited for is dropped: a held send was never
    /// receipted, so its client knows it did not go. Since when its
    /// worker first saw it closing: it is closed whatever it still owes
    /// once that is `CLOSING_LINGER` ago.
    Closing(Option<Stamp>),
}

/// The other worker all of a connection's recent publishes were
/// delivered on, and for how many reads in a row (workers are at most
/// 1,024: four bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pull {
    worker: u16,
    streak: u16,
}

impl Pull {
    /// No streak: it publishes to worker `here`, its own, or nowhere yet.
    pub fn reset(&mut self, here: usize) {
        *self = Pull {
            worker: here as u16,
            streak: 0,
        };
    }

    /// One more read whose publishes all went to worker `to`; the streak
    /// of such reads.
    pub fn toward(&mut self, to: usize) -> u16 {
        let streak = match usize::from(self.worker) == to {
            true => self.streak.saturating_add(1),
            false => 1,
        };
        *self = Pull {
            worker: to as u16,
            streak,
        };
        streak
    }
}

/// A connection's protocol, with what it needs besides the session.
pub enum Front {
    /// Herald's own.
    Native,
    /// STOMP.
    Stomp(Box<StompSession>),
    /// MQTT.
    Mqtt(Box<MqttSession>),
    /// AMQP 1.0.
    Amqp(Box<crate::amqp::AmqpSession>),
}

pub struct Connection {
    pub serial: u64,
    pub stream: TcpStream,
    pub read_buf: BytesMut,
    pub out: Outbound,
    pub session: Session,
    /// When bytes last arrived: the heart-beat clock.
    pub last_read: Stamp,
    /// The last write hit `WouldBlock`; wait for a writable event.
    pub blocked: bool,
    /// Queued on the worker's list of connections to flush.
    pub dirty: bool,
    /// Something was written since the last [`Connection::release_idle`].
    wrote: bool,
    /// Whether it is read, or what it waits for.
    pub read: ReadState,
    /// What its protocol needs besides the session.
    pub front: Front,
    /// The TLS session of a connection to the TLS listener.
    pub tls: Option<Box<ServerConnection>>,
    /// Its listener's protocol.
    pub protocol: Protocol,
    /// When it was accepted.
    pub accepted: Stamp,
    /// Bytes read from it.
    pub bytes_in: u64,
    /// Bytes written to it.
    pub bytes_out: u64,
    /// Messages it published.
    pub messages_in: u64,
    /// Messages delivered to it.
    pub messages_out: u64,
    /// When it raised its backlog signal (`session.backlog`), if it has.
    pub backlogged_since: Option<Stamp>,
    /// It stayed behind past the grace period: it no longer makes
    /// publishers pause, until it has drained.
    pub left_behind: bool,
    /// Where its recent publishes were delivered.
    pub pull: Pull,
    /// When it moved to its worker, if it did.
    pub moved_in: Option<Stamp>,
}

impl Connection {
    pub fn new(
        serial: u64,
        stream: TcpStream,
        session: Session,
        front: Front,
        tls: Option<Box<ServerConnection>>,
        protocol: Protocol,
    ) -> Connection {
        let now = Stamp::now();
        Connection {
            serial,
            stream,
            read_buf: BytesMut::new(),
            out: Outbound::default(),
            session,
            last_read: now,
            blocked: false,
            dirty: false,
            wrote: false,
            read: ReadState::Open,
            front,
            tls,
            protocol,
            accepted: now,
            bytes_in: 0,
            bytes_out: 0,
            messages_in: 0,
            messages_out: 0,
            backlogged_since: None,
            left_behind: false,
            pull: Pull::default(),
            moved_in: None,
        }
    }

    /// Whether nothing outside this value refers to the connection by
    /// where it lives, so that it can move to another worker: it
    /// subscribes to nothing, holds no deliveries, waits for no receipt,
    /// login or room in a queue, and is not paused or closing.
    pub fn movable(&self) -> bool {
        self.session.phase == Phase::Connected
            && self
                .session
                .traffic_ref()
                .is_none_or(|t| t.subscriptions.is_empty() && t.unacked.is_empty())
            && self.session.pending_receipts == 0
            && matches!(self.read, ReadState::Open)
    }

    /// Gives back the read buffer once frames have emptied it. Even one
    /// with no room left may hold the allocation that the frames taken
    /// off it were cut from.
    pub fn release_read_buffer(&mut self) {
        if self.read_buf.is_empty() {
            self.read_buf = BytesMut::new();
        }
    }

    /// What the management interface shows of it.
    pub fn describe(&self) -> ConnView {
        // Who it is once its login is through.
        let logging_in = matches!(self.read, ReadState::LoggingIn(_));
        let known = self.session.phase == Phase::Connected && !logging_in;
        let (client_id, user) = if known {
            (
                self.session.client_id.clone(),
                self.session.principal.user.clone(),
            )
        } else {
            Default::default()
        };
        ConnView {
            serial: self.serial,
            client_id,
            user,
            peer: self.session.peer(),
            protocol: self.protocol,
            subscriptions: self.session.subscription_count(),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            messages_in: self.messages_in,
            messages_out: self.messages_out,
            age: self.accepted.elapsed(),
        }
    }

    /// Answers a request whose answer was owed (it waited for the
    /// journal): in its place among the answers, in this connection's
    /// protocol. A failure is an ERROR (for STOMP, which has no other
    /// kind, one that closes the connection).
    pub fn pay_answer(&mut self, request_id: u32, result: Result<(), StoreError>) {
        let answer = match (&mut self.front, result.map_err(Refusal::from)) {
            (Front::Native, Ok(())) => encode_control(&herald_protocol::Frame::Receipt, request_id),
            (Front::Native, Err(refusal)) => encode_control(
                &herald_protocol::Frame::Error(refusal.into_frame()),
                request_id,
            ),
            (Front::Stomp(stomp), Ok(())) => stomp.receipt_bytes(request_id),
            (Front::Stomp(_), Err(refusal)) => {
                let (code, _, why) = refusal.into_parts();
                self.reply_error(request_id, code, true, why);
                None
            }
            (Front::Mqtt(mqtt), result) => {
                let (answer, flow) = mqtt.answer_bytes(request_id, result);
                if let Flow::Close = flow {
                    self.close_soon();
                }
                answer
            }
            (Front::Amqp(amqp), result) => amqp.answer_bytes(request_id, result),
        };
        self.out.pay_answer(request_id, answer);
    }

    /// What wait `token` of this connection's front end waited for is
    /// kept (or not): it goes on (AMQP answers an attach).
    pub fn kept(
        &mut self,
        token: u32,
        result: Result<(), StoreError>,
        ctx: &mut crate::frontend::Context<'_>,
    ) {
        if let Front::Amqp(amqp) = &mut self.front {
            let result = result.map_err(Refusal::from);
            crate::amqp::attached(amqp, token, result, &mut self.session, &mut self.out, ctx);
        }
    }

    /// Confirms request `request_id`, in this connection's protocol.
    pub fn reply_receipt(&mut self, request_id: u32) {
        match &mut self.front {
            Front::Native => handlers::receipt(&mut self.out, request_id),
            Front::Stomp(stomp) => stomp.receipt(&mut self.out, request_id),
            Front::Mqtt(mqtt) => {
                if let Flow::Close = mqtt.settle_request(&mut self.out, request_id, Ok(())) {
                    self.close_soon();
                }
            }
            Front::Amqp(amqp) => amqp.settle_request(&mut self.out, request_id, Ok(())),
        }
    }

    /// Reports an error, in this connection's protocol. STOMP has no
    /// non-fatal errors: its connection closes after any ERROR; MQTT's
    /// errors from the server (a timeout, a shutdown) all close it.
    pub fn reply_error(&mut self, request_id: u32, code: ErrorCode, fatal: bool, message: String) {
        match &mut self.front {
            Front::Native => handlers::reply_error(&mut self.out, request_id, code, fatal, message),
            Front::Stomp(stomp) => {
                stomp.error(&mut self.out, request_id, code, &message);
                self.close_soon();
            }
            Front::Mqtt(mqtt) => {
                mqtt.error(&mut self.out, self.session.phase, code, &message);
                self.close_soon();
            }
            Front::Amqp(amqp) => {
                amqp.error(&mut self.out, code, &message, self.serial);
                self.close_soon();
            }
        }
        if fatal {
            self.close_soon();
        }
    }

    /// Says why the server closes the connection, in its protocol; it
    /// closes once that is written.
    pub fn close_for(&mut self, why: Closing) {
        match (&mut self.front, why) {
            (Front::Mqtt(mqtt), Closing::TakenOver) => {
                mqtt.taken_over(&mut self.out, self.session.phase, self.serial);
                self.close_soon();
            }
            (_, Closing::TakenOver) => {
                let why = "another connection took its client id over".to_owned();
                self.reply_error(0, ErrorCode::InvalidClientId, true, why);
            }
            (_, Closing::ByAdmin) => {
                let why = "closed by an administrator".to_owned();
                self.reply_error(0, ErrorCode::ClosedByAdmin, true, why);
            }
        }
    }

    /// Answers with a refusal, in this connection's protocol.
    pub fn refuse(&mut self, request_id: u32, refusal: Refusal) {
        let flow = match &mut self.front {
            Front::Native => handlers::refuse(refusal, &mut self.out, request_id),
            Front::Stomp(_) => {
                let (code, fatal, message) = refusal.into_parts();
                return self.reply_error(request_id, code, fatal, message);
            }
            Front::Mqtt(mqtt) => mqtt.settle_request(&mut self.out, request_id, Err(refusal)),
            Front::Amqp(amqp) => {
                amqp.settle_request(&mut self.out, request_id, Err(refusal));
                Flow::Continue
            }
        };
        if matches!(flow, Flow::Close) {
            self.close_soon();
        }
    }

    /// Answers a CONNECT whose login succeeded.
    pub fn welcome(&mut self, welcome: Welcome) {
        self.out.push_raw(welcome.answer);
    }

    /// Whether it is told to close.
    pub fn closing(&self) -> bool {
        matches!(self.read, ReadState::Closing(_))
    }

    /// Stops reading it: it closes once what is queued is written.
    pub fn close_soon(&mut self) {
        if !self.closing() {
            self.read = ReadState::Closing(None);
        }
    }

    /// Whether it is read now.
    pub fn open(&self) -> bool {
        matches!(self.read, ReadState::Open)
    }

    /// Stops reading until `state` is over; a connection told to close
    /// stays closing. Whether it now waits for `state`.
    pub fn wait_for(&mut self, state: ReadState) -> bool {
        let open = self.open();
        if open {
            self.read = state;
        }
        open
    }

    /// Its held send, if it has one: reading is open again.
    pub fn take_parked(&mut self) -> Option<Box<Parked>> {
        self.take_waiting(|state| match state {
            ReadState::Parked(parked) => Ok(parked),
            other => Err(other),
        })
    }

    /// Its CONNECT being checked, if it has one: reading is open again.
    pub fn take_login(&mut self) -> Option<Box<Welcome>> {
        self.take_waiting(|state| match state {
            ReadState::LoggingIn(welcome) => Ok(welcome),
            other => Err(other),
        })
    }

    /// What it waits for, if `pick` takes it (reading is open again);
    /// else the state stays.
    fn take_waiting<T>(&mut self, pick: fn(ReadState) -> Result<T, ReadState>) -> Option<T> {
        match pick(std::mem::replace(&mut self.read, ReadState::Open)) {
            Ok(taken) => Some(taken),
            Err(state) => {
                self.read = state;
                None
            }
        }
    }

    /// Ends its pause, if it is paused; false if it was not.
    pub fn unpause(&mut self) -> bool {
        let paused = matches!(self.read, ReadState::Paused(..));
        if paused {
            self.read = ReadState::Open;
        }
        paused
    }

    /// Raises the backlog signal once more than `high` bytes wait to be
    /// written, and lowers it once no more than half of that does.
    pub fn check_backlog(&mut self, high: usize) {
        let Some(backlog) = self.session.backlog_signal() else {
            return;
        };
        let pending = self.out.pending();
        let limit = if self.left_behind { 0 } else { high };
        backlog.set_limit(limit);
        if pending <= high / 2 {
            self.left_behind = false;
            if self.backlogged_since.take().is_some() {
                backlog.set(false);
            }
        } else if pending > high && self.backlogged_since.is_none() && !self.left_behind {
            self.backlogged_since = Some(Stamp::now());
            backlog.set(true);
        }
    }

    /// Called on each tick: gives back the frame queue's room if nothing
    /// waits in it and nothing was written since the last tick (not when
    /// a write drains it: in a burst it drains after every batch, and
    /// giving its room back each time, or on each tick that found it
    /// empty, regrew it over and over, a reallocation and a copy per
    /// doubling, 4 % of a 1 -> 10 run's samples); and what a connection
    /// that went quiet needs no more, once it has read nothing for
    /// `quiet` and has nothing to write: its queue of answers, and an
    /// MQTT or AMQP session's chunk.
    pub fn release_idle(&mut self, now: Stamp, quiet: Duration) {
        if !std::mem::take(&mut self.wrote) {
            self.out.release();
        }
        if !self.out.is_empty() || now.since(self.last_read) < quiet {
            return;
        }
        self.out.release_answers();
        match &mut self.front {
            Front::Mqtt(mqtt) => mqtt.release_chunk(),
            Front::Amqp(amqp) => amqp.release_chunk(),
            _ => {}
        }
    }

    /// Lowers the backlog signal of a connection that has been behind for
    /// `grace`: from then on it is a slow consumer like any other, and its
    /// publishers go on.
    pub fn check_grace(&mut self, now: Stamp, grace: Duration) {
        if self
            .backlogged_since
            .is_some_and(|since| now.since(since) >= grace)
        {
            self.backlogged_since = None;
            self.left_behind = true;
            self.session.lower_backlog();
        }
    }

    /// Queues one delivery; returns whether the server must acknowledge
    /// it itself (a STOMP subscription in `auto` mode on a tracked
    /// destination).
    pub fn push_message(
        &mut self,
        subscription_id: u32,
        delivery_id: u64,
        delivery_count: u32,
        message: Bytes,
        (droppable, large): (Droppable, Option<&LargeStore>),
    ) -> bool {
        match &mut self.front {
            Front::Native => {
                let ids = (subscription_id, delivery_id, delivery_count);
                streams::push_native(&mut self.out, ids, message, droppable, large);
                false
            }
            Front::Stomp(stomp) => stomp.message(
                &mut self.out,
                (subscription_id, delivery_id, delivery_count),
                &message,
                large,
            ),
            Front::Mqtt(mqtt) => mqtt.message(
                &mut self.out,
                (subscription_id, delivery_id, delivery_count),
                &message,
                (self.serial, large),
            ),
            Front::Amqp(amqp) => amqp.message(
                &mut self.out,
                (subscription_id, delivery_id, delivery_count),
                &message,
                large,
            ),
        }
    }

    /// One `read` into the worker's scratch buffer, appended to this
    /// connection's read buffer. (Reading through a scratch buffer keeps
    /// `unsafe` out and copies only the bytes that arrived.)
    pub fn read_some(&mut self, scratch: &mut [u8]) -> io::Result<ReadStatus> {
        loop {
            let read = match &mut self.tls {
                Some(tls) => super::tls::read(tls, &mut self.stream, scratch),
                None => self.stream.read(scratch),
            };
            match read {
                Ok(0) => return Ok(ReadStatus::Closed),
                Ok(n) => {
                    self.bytes_in += n as u64;
                    self.read_buf.extend_from_slice(&scratch[..n]);
                    self.last_read = Stamp::now();
                    return Ok(ReadStatus::Data);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadStatus::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether large messages' bodies are still on their way out: the
    /// worker comes back to it after the others have had their turn.
    pub fn streaming(&self) -> bool {
        self.out.has_sources()
    }

    /// Writes what is queued; remembers whether the socket blocked.
    pub fn flush(&mut self) -> io::Result<WriteStatus> {
        match (&mut self.front, self.out.is_empty()) {
            (Front::Stomp(stomp), false) => stomp.wrote(Instant::now()),
            (Front::Amqp(amqp), false) => amqp.wrote(Instant::now()),
            _ => {}
        }
        let before = self.out.pending();
        let status = self.flush_out();
        let written = before.saturating_sub(self.out.pending());
        self.bytes_out += written as u64;
        self.wrote |= written > 0;
        let status = status?;
        self.blocked = status == WriteStatus::Blocked;
        Ok(status)
    }

    fn flush_out(&mut self) -> io::Result<WriteStatus> {
        Ok(match &mut self.tls {
            None => self.out.write_to(&mut self.stream)?,
            Some(tls) => {
                let mut plain = Plaintext::new(tls, &mut self.stream);
                let taken = self.out.write_to(&mut plain)?;
                // The records for what was taken, and any of the handshake.
                match plain.send_records() {
                    Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                    _ => {}
                }
                match taken {
                    _ if plain.socket_blocked() => WriteStatus::Blocked,
                    WriteStatus::Drained => WriteStatus::Drained,
                    _ => WriteStatus::Waiting,
                }
            }
        })
    }

    /// Queues a heart-beat if the protocol owes one and nothing else went
    /// out for its interval; true if it did.
    pub fn heartbeat_due(&mut self, now: Instant) -> bool {
        match &mut self.front {
            Front::Stomp(stomp) => stomp.heartbeat_due(&mut self.out, now),
            Front::Amqp(amqp) => amqp.heartbeat_due(&mut self.out, now),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every connection holds while idle (an MQTT one adds its boxed
    /// `MqttSession`): kept to what `herald bench --compare-mosquitto`
    /// measured as less per idle connection than Mosquitto's. Grow them
    /// only knowingly: `Connection` grew from 320 to 336 bytes for its
    /// message counts, which the console's connections page shows, and to
    /// 344 for `wrote`, which keeps a burst's write queue between its
    /// batches (docs/performance.md, "One arena, and room kept between
    /// batches").
    #[test]
    fn an_idle_connection_stays_small() {
        let sizes = (
            std::mem::size_of::<Connection>(),
            std::mem::size_of::<Session>(),
            std::mem::size_of::<MqttSession>(),
        );
        // Boxed, an MqttSession of 104 bytes is in malloc's 112-byte class.
        assert!(
            sizes.0 <= 344 && sizes.1 <= 112 && sizes.2 <= 104,
            "{sizes:?}"
        );
    }
}
