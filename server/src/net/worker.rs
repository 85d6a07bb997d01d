//! A worker thread: its own `mio::Poll`, a slab of connections, an inbox.
//!
//! Each loop turn: wait for events (or the tick), read every readable
//! connection and dispatch its frames, hand the deliveries that burst
//! produced to their workers (one inbox message per worker), deliver its
//! own, then write every connection with output in as few `writev`s as it
//! can. Nothing here blocks: no lock is held across I/O and there is no
//! sleep, `fsync` or DNS.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_protocol::codec::DecodeError;
use herald_protocol::{Decoder, ErrorCode};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::connection::{Connection, Front, ReadState, ReadStatus};
use super::stamp::Stamp;
use super::{Command, WorkerHandle, WAKER};
use crate::frontend::outbound::{Droppable, WriteStatus};
use crate::frontend::{peer_name, Closing, Notice, Protocol, Shared};
use rustls::ServerConnection;

use crate::auth::{LoginError, Principal};
use crate::broker::delivery::{Deliveries, Delivery, Seen};
use crate::broker::{Backlog, ConnectionRef, PeerError, Subscriber};
use crate::collections::FastMap;
use crate::config::SlowConsumerPolicy;
use crate::frontend::{admit, publish, release_client_id, Context, Flow, Published};
use crate::handlers;
use crate::mqtt::{self, MqttSession};
use crate::session::{Phase, Session, Unacked};
use crate::stomp::{self, StompSession};
use crate::store::StoreError;
use herald_protocol::stomp::StompLimits;

/// Bytes read from one connection per loop turn before the others get a
/// turn; what is left is read on the next turn.
const READ_BUDGET: usize = 256 * 1024;
const SCRATCH_LEN: usize = 64 * 1024;
/// How often a paused publisher looks at its subscriber's backlog.
const PAUSE_CHECK: Duration = Duration::from_millis(1);
/// The most connection slots a worker reserves address space for.
const RESERVED_SLOTS: usize = 1 << 18;
/// A publisher whose messages went only to another worker's connections
/// this many reads in a row, a few at a time, moves to that worker...
const MOVE_AFTER: u16 = 64;
/// ..."a few" being this many at most: a hand-over per message costs most
/// of a message's latency, while bigger bursts share one, and a second
/// thread is then worth more than the hand-over costs...
const MOVE_BURST: u64 = 4;
/// ...if it did not move there less than this long ago (no ping-pong)...
const SETTLE: Duration = Duration::from_secs(1);
/// ...and that worker was busy less than this share of its last tick, in
/// thousandths: a busy worker keeps its work spread.
const MOVE_MAX_LOAD: u32 = 500;
/// How long a connection told to close may take to write its last words
/// (an ERROR, a RECEIPT) to a peer that reads slowly, or not at all.
const CLOSING_LINGER: Duration = Duration::from_secs(5);

/// One worker's state, owned by its thread.
pub struct Worker {
    index: usize,
    poll: Poll,
    inbox: Receiver<Command>,
    notified: Arc<AtomicBool>,
    shared: Arc<Shared>,
    /// Every worker's inbox, this one's too: a connection moves by one.
    workers: Arc<[WorkerHandle]>,
    /// The TLS listener's settings, if it runs.
    tls: Option<Arc<rustls::ServerConfig>>,
    conns: Slab<Connection>,
    decoders: Decoders,
    deliveries: Deliveries,
    /// Room for [`Worker::deliver`]'s runs, kept between batches.
    runs: FastMap<ConnectionRef, Run>,
    scratch: Vec<u8>,
    /// Connections with output queued since their last write.
    dirty: Vec<usize>,
    /// Connections whose read budget ran out with input possibly left.
    unfinished: Vec<usize>,
    /// Publishers not read while a subscriber drains its backlog.
    paused: Vec<ConnectionRef>,
    /// Connections to hand over to another worker once this turn's
    /// deliveries are out.
    moving: Vec<(ConnectionRef, usize)>,
    tick: Duration,
    running: bool,
}

impl Worker {
    /// A worker; `poll` must have its waker registered under [`WAKER`].
    pub fn new(
        index: usize,
        poll: Poll,
        inbox: Receiver<Command>,
        notified: Arc<AtomicBool>,
        shared: Arc<Shared>,
        (workers, tls): (Arc<[WorkerHandle]>, Option<Arc<rustls::ServerConfig>>),
    ) -> Worker {
        let config = &shared.config;
        // The tick bounds how late a silent connection is noticed.
        let tick = Duration::from_millis((config.min_heartbeat_ms / 2).clamp(10, 100).into());
        // Turning from now on, as far as the watchdog knows.
        shared.stats[index]
            .last_turn
            .store(Stamp::now().nanos(), Ordering::Relaxed);
        Worker {
            index,
            poll,
            inbox,
            notified,
            decoders: Decoders {
                handshake: Decoder::new(config.max_connect_frame_size),
                connected: Decoder::new(config.max_frame_size),
            },
            deliveries: Deliveries::new(shared.workers.len()),
            runs: FastMap::default(),
            // Room for every connection the server takes (any may move
            // here), reserved and not touched: pages become resident as
            // connections fill them, and the slab never grows, which would
            // copy it and leave the old copy's pages behind (past
            // `RESERVED_SLOTS` it does).
            conns: Slab::with_capacity(config.max_connections.min(RESERVED_SLOTS)),
            scratch: vec![0; SCRATCH_LEN],
            dirty: Vec::new(),
            unfinished: Vec::new(),
            paused: Vec::new(),
            moving: Vec::new(),
            tick,
            running: true,
            shared,
            workers,
            tls,
        }
    }

    /// Runs the loop until a [`Command::Shutdown`].
    pub fn run(mut self) -> io::Result<()> {
        crate::broker::set_worker_thread(self.index);
        let mut events = Events::with_capacity(1024);
        let mut last_tick = Instant::now();
        let mut busy_at_tick = 0;
        // When the loop last woke from `poll`: the busy-time clock.
        let mut awake = Instant::now();
        while self.running {
            // The watchdog's sign of progress: a loop that stops turning
            // (a worker stuck in one turn) stops renewing it.
            let turn = Stamp::at(awake).nanos();
            self.stats().last_turn.store(turn, Ordering::Relaxed);
            let timeout = if !self.unfinished.is_empty() || !self.dirty.is_empty() {
                Duration::ZERO
            } else if !self.paused.is_empty() {
                // Paused publishers look at their subscriber's backlog
                // every millisecond.
                PAUSE_CHECK.min(self.tick)
            } else {
                self.tick
            };
            let busy = awake.elapsed().as_nanos() as u64;
            self.stats().busy_ns.fetch_add(busy, Ordering::Relaxed);
            let polled = self.poll.poll(&mut events, Some(timeout));
            awake = Instant::now();
            if let Err(e) = polled {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => self.drain_inbox(),
                    Token(slot) => {
                        if event.is_writable() {
                            if let Some(c) = self.conns.get_mut(slot) {
                                c.blocked = false;
                            }
                            self.mark_dirty(slot);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.read(slot);
                        }
                    }
                }
            }
            self.unpause();
            // A connection read for an event and again as unfinished in
            // one turn was listed twice, and each listing read it again
            // and listed it again: under a steady publisher the reads
            // before routing grew by one a turn, to 17 (4 MB of input,
            // 100,000 deliveries a batch) before it caught up.
            let mut unfinished = std::mem::take(&mut self.unfinished);
            unfinished.sort_unstable();
            unfinished.dedup();
            for slot in unfinished {
                self.read(slot);
            }
            let since_tick = last_tick.elapsed();
            if since_tick >= self.tick {
                last_tick = Instant::now();
                let busy = self.stats().busy_ns.load(Ordering::Relaxed);
                let load = (busy - busy_at_tick) * 1000 / (since_tick.as_nanos() as u64).max(1);
                busy_at_tick = busy;
                self.stats().load.store(load as u32, Ordering::Relaxed);
                self.check_silence();
            }
            // Delivering and closing can route more (a queue message whose
            // consumer has gone goes to another), so go on until settled.
            loop {
                while !self.deliveries.is_empty() {
                    self.route();
                }
                self.flush_dirty();
                if self.deliveries.is_empty() {
                    break;
                }
            }
            // After the deliveries it published went out, so that the
            // worker it moves to delivers them before its next ones.
            self.hand_over();
        }
        self.close_all();
        Ok(())
    }

    fn drain_inbox(&mut self) {
        // Cleared before draining: a command sent after this point either
        // gets drained below or wakes the worker again.
        self.notified.store(false, Ordering::Release);
        loop {
            let command = match self.inbox.try_recv() {
                Ok(command) => command,
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => Command::Shutdown,
            };
            match command {
                Command::Adopt(stream, protocol) => self.adopt(stream, protocol),
                Command::Take(conn) => self.take_over(*conn),
                Command::Notice(notice) => self.notice(notice),
                Command::Shutdown => {
                    self.running = false;
                    return;
                }
            }
        }
    }

    fn notice(&mut self, notice: Notice) {
        let Some(notice) = self.here(notice) else {
            return;
        };
        match notice {
            Notice::Deliver(batch) => self.deliver(batch),
            Notice::Wake(conns) => self.wake(conns),
            Notice::Run(work) => work(&self.shared.broker, &mut self.deliveries),
            Notice::Confirm {
                conn,
                request_id,
                result,
            } => self.confirm(conn, request_id, result),
            Notice::LoggedIn { conn, result } => self.logged_in(conn, result),
            Notice::Browsed {
                conn,
                subscription_id,
                request_id,
                result,
            } => self.browsed(conn, subscription_id, request_id, result),
            Notice::Kept {
                conn,
                token,
                result,
            } => self.kept(conn, token, result),
            Notice::Close(conn, why) => self.close_by(conn, why),
            Notice::Describe(answer) => {
                answer(self.conns.iter().map(|(_, c)| c.describe()).collect())
            }
        }
    }

    /// The notice, if it is for this worker: one for a connection that
    /// moved away is sent on to where it lives now (the worker it left
    /// learns that before anyone else can send there).
    fn here(&mut self, mut notice: Notice) -> Option<Notice> {
        let Some(target) = notice.target_mut() else {
            return Some(notice);
        };
        if live(&mut self.conns, *target).is_some() {
            return Some(notice);
        }
        let home = self.shared.places.home(target.serial).map(|(home, _)| home);
        // Gone: the notice finds nothing, as for any closed connection.
        let Some(home) = home else {
            return Some(notice);
        };
        *target = home;
        if home.worker == self.index {
            return Some(notice);
        }
        self.shared.workers[home.worker].post(notice);
        None
    }

    fn adopt(&mut self, mut stream: TcpStream, protocol: Protocol) {
        let tls = match (protocol, &self.tls) {
            (p, Some(config)) if p.tls() => match ServerConnection::new(config.clone()) {
                Ok(tls) => Some(Box::new(tls)),
                Err(e) => {
                    log::error!("cannot start a TLS session: {e}");
                    self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                    return;
                }
            },
            _ => None,
        };
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(slot), interest)
        {
            log::error!("cannot register a connection: {e}");
            self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let serial = self.shared.next_serial.fetch_add(1, Ordering::Relaxed);
        let timeout = Duration::from_millis(self.shared.config.connect_timeout_ms.into());
        let config = &self.shared.config;
        // Until CONNECT, only a frame the size of a CONNECT is taken.
        let limits = StompLimits {
            max_frame_size: config.max_connect_frame_size as usize,
            max_headers: config.stomp.max_headers,
        };
        let mqtt = |websocket| {
            let window = config.mqtt.receive_maximum;
            let max = config.max_connect_frame_size as usize;
            Front::Mqtt(Box::new(MqttSession::new(max, window, websocket)))
        };
        let front = match protocol {
            Protocol::Native | Protocol::NativeTls => Front::Native,
            Protocol::Stomp => Front::Stomp(Box::new(StompSession::new(limits, false))),
            Protocol::StompWebSocket => Front::Stomp(Box::new(StompSession::new(limits, true))),
            Protocol::Mqtt | Protocol::MqttTls => mqtt(false),
            Protocol::MqttWebSocket => mqtt(true),
            Protocol::Amqp | Protocol::AmqpTls => {
                Front::Amqp(Box::new(crate::amqp::AmqpSession::new(false)))
            }
            Protocol::AmqpWebSocket => Front::Amqp(Box::new(crate::amqp::AmqpSession::new(true))),
        };
        let home = ConnectionRef {
            worker: self.index,
            slot,
            serial,
        };
        self.shared.places.set_home(home, protocol);
        let peer = stream.peer_addr().ok();
        entry.insert(Connection::new(
            serial,
            stream,
            Session::new(timeout, peer),
            front,
            tls,
            protocol,
        ));
        self.stats().connections.fetch_add(1, Ordering::Relaxed);
        // Bytes may have arrived before registration; edge-triggered polls
        // would not report them.
        self.read(slot);
    }

    fn read(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if !conn.open() {
            return;
        }
        // A reload may have changed what its user may do.
        if let Some(fresh) = self.shared.auth.refresh(&conn.session.principal) {
            conn.session.principal = fresh;
        }
        let me = ConnectionRef {
            worker: self.index,
            slot,
            serial: conn.serial,
        };
        self.deliveries.watch();
        let mut ctx = Context::new(&self.shared, me, &mut self.deliveries);
        let mut read = 0;
        let outcome = loop {
            if read >= READ_BUDGET {
                self.unfinished.push(slot);
                break Ok(Flow::Continue);
            }
            let before = conn.read_buf.len();
            match conn.read_some(&mut self.scratch) {
                Ok(ReadStatus::Data) => read += conn.read_buf.len() - before,
                Ok(ReadStatus::Drained) => break Ok(Flow::Continue),
                Ok(ReadStatus::Closed) => break Err(None),
                Err(e) => break Err(Some(e)),
            }
            match decode_all(&self.decoders, conn, &mut ctx) {
                // A subscriber it published to drains a backlog: read no
                // more from it until that is done.
                Flow::Continue if ctx.backlog.is_some() => break Ok(Flow::Continue),
                Flow::Continue => {}
                Flow::Close => break Ok(Flow::Close),
                waiting => {
                    stop(conn, waiting);
                    break Ok(Flow::Continue);
                }
            }
        };
        let published = ctx.published;
        let backlog = ctx.backlog.take();
        drop(ctx);
        if published > 0 {
            conn.messages_in += published;
            self.shared.stats[self.index]
                .messages_in
                .fetch_add(published, Ordering::Relaxed);
            let seen = if published > MOVE_BURST {
                Seen::Many
            } else {
                self.deliveries.seen()
            };
            if let Some(to) = pulled(conn, seen, self.index, &self.shared) {
                self.moving.push((me, to));
            }
        }
        conn.release_read_buffer();
        match outcome {
            Ok(Flow::Close) => conn.close_soon(),
            Ok(_) => {}
            Err(None) => {
                log::debug!("connection {} closed by peer", conn.serial);
                self.close(slot);
                return;
            }
            Err(Some(e)) => {
                log::debug!("connection {}: read failed: {e}", conn.serial);
                // A TLS session that failed has an alert to say why (a
                // plain-text client learns that the port expects TLS):
                // one try to send it, without waiting.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = conn.flush();
                }
                self.close(slot);
                return;
            }
        }
        self.carry_on(me, false, backlog);
        self.mark_dirty(slot);
    }

    /// What follows handling a connection's input: it pauses if it
    /// published to a subscriber draining a backlog, and is read again
    /// if `more` input may be waiting.
    fn carry_on(&mut self, target: ConnectionRef, more: bool, backlog: Option<Arc<Backlog>>) {
        match backlog {
            Some(backlog) => {
                let paused = live(&mut self.conns, target).is_some_and(|c| {
                    c.wait_for(ReadState::Paused(Box::new((backlog, Instant::now()))))
                });
                if paused {
                    self.paused.push(target);
                    self.stats()
                        .publisher_pauses
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            None if more => self.unfinished.push(target.slot),
            None => {}
        }
    }

    /// Reads again from paused publishers whose subscriber has drained its
    /// backlog, or that have waited twice the grace period (a bound that
    /// holds even if the subscriber's worker is slow to say so).
    fn unpause(&mut self) {
        if self.paused.is_empty() {
            return;
        }
        let now = Instant::now();
        let most = 2 * self.grace();
        let conns = &self.conns;
        let (ready, waiting): (Vec<_>, Vec<_>) = self.paused.drain(..).partition(|target| {
            let conn = conns.get(target.slot).filter(|c| c.serial == target.serial);
            match conn.map(|c| &c.read) {
                Some(ReadState::Paused(pause)) => {
                    let (backlog, since) = &**pause;
                    !backlog.is_high() || now.duration_since(*since) >= most
                }
                _ => true,
            }
        });
        self.paused = waiting;
        for target in ready {
            let Some(conn) = live(&mut self.conns, target) else {
                continue;
            };
            if !conn.unpause() {
                continue;
            }
            // Frames it sent before the pause come first; `resume` also
            // restarts its silence clock, which a pause stopped.
            self.read_on(target);
            self.mark_dirty(target.slot);
        }
    }

    /// Goes on with a connection that waited (a pause, a login): handles
    /// what it buffered meanwhile and reads it again.
    fn read_on(&mut self, target: ConnectionRef) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        let mut ctx = Context::new(&self.shared, target, &mut self.deliveries);
        let more = resume(&self.decoders, conn, &mut ctx, Flow::Continue);
        let backlog = ctx.backlog.take();
        drop(ctx);
        conn.release_read_buffer();
        self.carry_on(target, more, backlog);
    }

    /// `slow_consumer_grace_ms`.
    fn grace(&self) -> Duration {
        let limits = &self.shared.limits;
        Duration::from_millis(limits.get(&limits.slow_consumer_grace_ms) as u64)
    }

    /// Retries the blocked sends of these connections; those that go
    /// through carry on with what they had sent after it.
    fn wake(&mut self, conns: Vec<ConnectionRef>) {
        for target in conns {
            let Some(conn) = live(&mut self.conns, target) else {
                continue;
            };
            let Some(parked) = conn.take_parked() else {
                continue;
            };
            let mut ctx = Context::new(&self.shared, target, &mut self.deliveries);
            let request_id = parked.request_id;
            let retried = publish(
                parked.message,
                request_id,
                Some(parked.since),
                &mut conn.session,
                &mut conn.out,
                &mut ctx,
            );
            let flow = match retried {
                Ok(Published::Now) => {
                    conn.reply_receipt(request_id);
                    Flow::Continue
                }
                Ok(Published::Later) => Flow::Continue,
                Ok(Published::Held(again)) => Flow::Park(again),
                Err(refusal) => {
                    conn.refuse(request_id, refusal);
                    Flow::Continue
                }
            };
            let more = resume(&self.decoders, conn, &mut ctx, flow);
            let backlog = ctx.backlog.take();
            drop(ctx);
            conn.release_read_buffer();
            self.carry_on(target, more, backlog);
            self.mark_dirty(target.slot);
        }
    }

    /// Tells a connection why the server closes it, and closes it once
    /// that is written.
    fn close_by(&mut self, target: ConnectionRef, why: Closing) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        conn.close_for(why);
        self.mark_dirty(target.slot);
    }

    /// Hands the connections that publish only to another worker's
    /// connections over to that worker, so that their messages no longer
    /// cross threads (a channel send and a wake-up each time). Only a
    /// connection nothing else refers to by its place moves
    /// ([`Connection::movable`]); the deliveries it published went out
    /// before, so the new worker's come after them.
    fn hand_over(&mut self) {
        for (target, to) in std::mem::take(&mut self.moving) {
            if !live(&mut self.conns, target).is_some_and(|c| c.movable()) {
                continue;
            }
            let mut conn = self.conns.remove(target.slot);
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.stats().connections.fetch_sub(1, Ordering::Relaxed);
            let serial = conn.serial;
            log::debug!(
                "connection {}: moves from worker {} to worker {to}",
                target.serial,
                self.index
            );
            // Marked as leaving only once it is on its way, so that whoever
            // reads its new home sends behind it; commands that still come
            // here are sent on (`here`). A worker that has stopped takes
            // nothing: the server is shutting down, and the connection
            // closes with it.
            if self.workers[to].send(Command::Take(Box::new(conn))) {
                self.shared.places.set_leaving(serial, self.index, to);
            }
        }
    }

    /// Takes over a connection another worker handed over.
    fn take_over(&mut self, mut conn: Connection) {
        conn.dirty = false;
        conn.blocked = false;
        conn.pull.reset(self.index);
        conn.moved_in = Some(Stamp::now());
        let (serial, protocol) = (conn.serial, conn.protocol);
        let slot = self.conns.insert(conn);
        self.stats().connections.fetch_add(1, Ordering::Relaxed);
        self.stats().moved_in.fetch_add(1, Ordering::Relaxed);
        let home = ConnectionRef {
            worker: self.index,
            slot,
            serial,
        };
        self.shared.places.set_home(home, protocol);
        let interest = Interest::READABLE | Interest::WRITABLE;
        let stream = &mut self.conns[slot].stream;
        if let Err(e) = self.poll.registry().register(stream, Token(slot), interest) {
            log::error!("connection {serial}: cannot register it after a move: {e}");
            self.close(slot);
            return;
        }
        // What it sent meanwhile, and what it was owed.
        self.mark_dirty(slot);
        self.read(slot);
    }

    /// Welcomes a connection whose login succeeded and goes on with what
    /// it sent after CONNECT; refuses one whose login failed.
    fn logged_in(&mut self, target: ConnectionRef, result: Result<Principal, LoginError>) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        let Some(welcome) = conn.take_login() else {
            return;
        };
        let principal = match result {
            Ok(principal) => principal,
            Err(why) => {
                let code = ErrorCode::AuthenticationFailed;
                conn.reply_error(welcome.request_id, code, true, why.to_string());
                self.mark_dirty(target.slot);
                return;
            }
        };
        let admitted = match &mut conn.front {
            Front::Mqtt(m) => {
                let mut ctx = Context::new(&self.shared, target, &mut self.deliveries);
                mqtt::admitted(principal, m, &mut conn.session, &mut conn.out, &mut ctx)
            }
            // Admitted at `open`, which comes next.
            Front::Amqp(a) => {
                crate::amqp::logged_in(principal, a, &mut conn.out);
                Ok(Flow::Continue)
            }
            _ => admit(&mut conn.session, principal, &self.shared, conn.serial)
                .map(|()| {
                    conn.welcome(*welcome);
                    Flow::Continue
                })
                .map_err(|r| {
                    let (code, _, why) = r.into_parts();
                    (code, why)
                }),
        };
        match admitted {
            Ok(Flow::Login(welcome)) => {
                conn.wait_for(ReadState::LoggingIn(Box::new(welcome)));
            }
            Ok(_) => {
                self.read_on(target);
                // A resumed session's subscriptions deliver what they kept.
                self.route();
            }
            Err((code, why)) => conn.reply_error(0, code, true, why),
        }
        self.mark_dirty(target.slot);
    }

    /// Hands each other worker its bucket, delivers this worker's own.
    fn route(&mut self) {
        let wakes: Vec<_> = self.deliveries.drain_wakes().collect();
        for (worker, conns) in wakes {
            if worker == self.index {
                self.wake(conns);
            } else {
                self.shared.workers[worker].post(Notice::Wake(conns));
            }
        }
        let mut own = None;
        for (worker, batch) in self.deliveries.drain(Some(self.index), &self.shared.spares) {
            if worker == self.index {
                own = Some(batch);
            } else {
                self.shared.workers[worker].post(Notice::Deliver(batch));
            }
        }
        if let Some(batch) = own {
            self.deliver(batch);
        }
    }

    /// The batch with each queue subscription's deliveries in the order
    /// their queue dispatched them: one that came ahead of an earlier one
    /// still on its way waits in the session (`session::InOrder`).
    fn in_order(&mut self, batch: Vec<Delivery>) -> Vec<Delivery> {
        if batch.iter().all(|d| d.order == 0) {
            return batch;
        }
        let mut ready = Vec::with_capacity(batch.len());
        for d in batch {
            match live(&mut self.conns, d.to.conn) {
                Some(conn) if d.order != 0 => conn
                    .session
                    .traffic()
                    .in_order
                    .entry(d.to.subscription_id)
                    .or_default()
                    .take(d, &mut ready),
                // A topic's, or one for a connection gone (released below).
                _ => ready.push(d),
            }
        }
        ready
    }

    fn deliver(&mut self, batch: Vec<Delivery>) {
        let mut batch = self.in_order(batch);
        let max_pending = self
            .shared
            .limits
            .get(&self.shared.limits.max_pending_bytes);
        let policy = self.shared.config.slow_consumer;
        // Past this a subscriber makes its publishers pause.
        let high = (!self.grace().is_zero()).then_some(max_pending / 8);
        let mut delivered = 0;
        let mut dropped = 0;
        // The run of deliveries to one connection going on, and the runs
        // before it that a fan-out interleaves, by connection.
        let mut runs = std::mem::take(&mut self.runs);
        let mut run: Option<(ConnectionRef, Run)> = None;
        for d in batch.drain(..) {
            let target = d.to.conn;
            let subscription_id = d.to.subscription_id;
            if let Some((before, ended)) = run.take_if(|(before, _)| *before != target) {
                runs.entry(before).or_default().add(ended);
            }
            let (_, run) = run.get_or_insert((target, Run::default()));
            if d.ack.is_none() {
                // Routed to it and now here, even if not delivered.
                run.arrived += d.message.len();
            }
            // The slot may have been reused, or the subscription dropped,
            // since the message was routed.
            let conn = live(&mut self.conns, target)
                .filter(|c| !c.closing() && c.session.has_subscription(subscription_id));
            let Some(conn) = conn else {
                // A queue's message must not vanish with its consumer, and
                // goes to another: a closing one leaves its queues first.
                if live(&mut self.conns, target).is_some_and(|c| c.closing()) {
                    self.detach(target.slot);
                }
                if let Some(ack) = &d.ack {
                    self.shared.broker.release(ack, &d.to, &mut self.deliveries);
                }
                continue;
            };
            let delivery_id = conn.session.next_delivery_id();
            // Only what nobody tracks and nobody must keep may be dropped,
            // and whatever a best-effort subscriber gets.
            let best_effort = conn.session.traffic_ref().is_some_and(|t| {
                !t.best_effort.is_empty() && t.best_effort.contains(&subscription_id)
            });
            let droppable = if best_effort {
                Droppable::BestEffort
            } else if d.droppable {
                Droppable::ByPolicy
            } else {
                Droppable::Never
            };
            let server_acks = conn.push_message(
                subscription_id,
                delivery_id,
                d.delivery_count,
                d.message,
                (droppable, self.shared.broker.large().map(|l| &**l)),
            );
            if let Some(ack) = d.ack {
                if server_acks {
                    self.shared.broker.ack(&ack, &d.to, &mut self.deliveries);
                } else {
                    conn.session.traffic().unacked.insert(
                        delivery_id,
                        Unacked {
                            subscription_id,
                            ack,
                        },
                    );
                }
            }
            delivered += 1;
            run.delivered = true;
            conn.messages_out += 1;
            if conn.out.pending() > max_pending && !conn.blocked {
                // A big batch can pile up faster than one loop turn writes:
                // write now, and call the reader slow only if the socket
                // will not take it.
                if let Err(e) = conn.flush() {
                    log::debug!("connection {}: write failed: {e}", conn.serial);
                }
            }
            // Down to half the limit, so that a reader that stays slow is
            // not trimmed one message at a time: best-effort deliveries
            // first, whatever the policy, then by the policy.
            if conn.out.pending() > max_pending {
                dropped += conn.out.drop_oldest(max_pending / 2, Droppable::BestEffort);
            }
            if conn.out.pending() > max_pending && policy == SlowConsumerPolicy::DropOldest {
                dropped += conn.out.drop_oldest(max_pending / 2, Droppable::ByPolicy);
            }
            if conn.out.pending() > max_pending {
                log::warn!(
                    "connection {}: {} bytes waiting, over max_pending_bytes ({max_pending}); disconnecting the slow consumer",
                    conn.serial,
                    conn.out.pending()
                );
                conn.out.clear();
                conn.reply_error(
                    0,
                    ErrorCode::SlowConsumer,
                    true,
                    format!("more than {max_pending} bytes waiting to be written: the connection reads too slowly"),
                );
                self.stats().slow_consumers.fetch_add(1, Ordering::Relaxed);
                self.detach(target.slot);
            }
            self.mark_dirty(target.slot);
        }
        for (target, run) in run.into_iter().chain(runs.drain()) {
            self.end_run(target, run, high);
        }
        self.runs = runs;
        if dropped > 0 {
            self.stats().dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        self.stats()
            .messages_out
            .fetch_add(delivered, Ordering::Relaxed);
        // Its room serves the next burst: no allocation (nor fresh pages
        // to fault in) per burst.
        self.deliveries
            .recycle(self.index, batch, &self.shared.spares[self.index]);
    }

    /// Counts what a run of deliveries brought its connection and, if it
    /// delivered any, checks the connection's backlog against `high`.
    fn end_run(&mut self, target: ConnectionRef, run: Run, high: Option<usize>) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        if let (Some(backlog), true) = (conn.session.backlog_signal(), run.arrived > 0) {
            backlog.arrived(run.arrived);
        }
        if let (Some(high), true) = (high, run.delivered) {
            conn.check_backlog(high);
        }
    }

    /// Answers a request the store has confirmed, if its connection is
    /// still there.
    fn confirm(&mut self, target: ConnectionRef, request_id: u32, result: Result<(), StoreError>) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        conn.session.pending_receipts = conn.session.pending_receipts.saturating_sub(1);
        conn.pay_answer(request_id, result);
        self.mark_dirty(target.slot);
    }

    fn kept(&mut self, target: ConnectionRef, token: u32, result: Result<(), StoreError>) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        let mut ctx = Context::new(&self.shared, target, &mut self.deliveries);
        conn.kept(token, result, &mut ctx);
        drop(ctx);
        self.mark_dirty(target.slot);
    }

    fn browsed(
        &mut self,
        target: ConnectionRef,
        subscription_id: u32,
        request_id: u32,
        result: Result<Vec<(bytes::Bytes, u32)>, PeerError>,
    ) {
        let Some(conn) = live(&mut self.conns, target) else {
            return;
        };
        match result {
            Ok(messages) => {
                crate::handlers::browse::deliver(
                    (&mut conn.out, &mut conn.session),
                    subscription_id,
                    messages,
                    self.shared.broker.large().map(|l| &**l),
                );
                conn.reply_receipt(request_id);
            }
            Err(why) => conn.reply_error(request_id, ErrorCode::Internal, false, why.to_string()),
        }
        self.mark_dirty(target.slot);
    }

    fn mark_dirty(&mut self, slot: usize) {
        if let Some(c) = self.conns.get_mut(slot) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(slot);
            }
        }
    }

    fn flush_dirty(&mut self) {
        let max_pending = self
            .shared
            .limits
            .get(&self.shared.limits.max_pending_bytes);
        for slot in std::mem::take(&mut self.dirty) {
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            conn.dirty = false;
            if conn.blocked {
                continue;
            }
            match conn.flush() {
                // A DISCONNECT's RECEIPT comes after the answers owed for
                // the frames before it: the connection stays until then.
                Ok(WriteStatus::Drained) if conn.closing() && !conn.out.owes_answers() => {
                    self.close(slot)
                }
                Ok(status) => {
                    if conn.backlogged_since.is_some() || conn.left_behind {
                        conn.check_backlog(max_pending / 8);
                    }
                    if status == WriteStatus::Drained && conn.streaming() {
                        self.mark_dirty(slot);
                    }
                }
                Err(e) => {
                    log::debug!("connection {}: write failed: {e}", conn.serial);
                    self.close(slot);
                }
            }
        }
    }

    /// Closes connections that said nothing for longer than allowed, and
    /// retries blocked sends (those whose time is up fail).
    fn check_silence(&mut self) {
        let now = Instant::now();
        let block_timeout =
            Duration::from_millis(self.shared.config.queues.block_timeout_ms.into());
        // Sends held back while the journal's disk was below the
        // free-space floor wait for no queue in particular: they try again
        // each tick once that is over. One held for a full queue (at a
        // memory bound too) waits for its Wake.
        let server_ok = self.shared.broker.refusing_persistent().is_none();
        let expired: Vec<ConnectionRef> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(&c.read, ReadState::Parked(p)
                    if (p.for_server && server_ok) || p.since.elapsed() >= block_timeout)
            })
            .map(|(slot, c)| ConnectionRef {
                worker: self.index,
                slot,
                serial: c.serial,
            })
            .collect();
        if !expired.is_empty() {
            self.wake(expired);
        }
        self.shared.broker.tick(&mut self.deliveries);
        self.deliveries.release_room();
        self.shared.spares[self.index].release();
        // A wide fan-out's room goes with its burst.
        if self.runs.capacity() > KEPT_RUNS {
            self.runs = FastMap::default();
        }
        // One worker runs what sessions away have due.
        if self.index == 0 {
            self.shared
                .away
                .run(&self.shared.broker, &mut self.deliveries);
        }
        let grace = self.grace();
        let stamp = Stamp::at(now);
        for (_, conn) in self.conns.iter_mut() {
            conn.check_grace(stamp, grace);
            conn.release_idle(stamp, self.tick);
        }
        let owed: Vec<usize> = self
            .conns
            .iter_mut()
            .filter_map(|(slot, c)| c.heartbeat_due(now).then_some(slot))
            .collect();
        for slot in owed {
            self.mark_dirty(slot);
        }
        let lingering: Vec<usize> = self
            .conns
            .iter_mut()
            .filter_map(|(slot, c)| match &mut c.read {
                ReadState::Closing(since) => {
                    let since = *since.get_or_insert(stamp);
                    (stamp.since(since) >= CLOSING_LINGER).then_some(slot)
                }
                _ => None,
            })
            .collect();
        for slot in lingering {
            log::info!(
                "connection {}: its last words not written within {} s of closing; closed",
                self.conns[slot].serial,
                CLOSING_LINGER.as_secs()
            );
            self.close(slot);
        }
        // A blocked connection is not read, so its silence proves nothing.
        let silent: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                !matches!(c.read, ReadState::Parked(_) | ReadState::Paused(..))
                    && stamp.since(c.last_read) > c.session.silence_limit()
            })
            .map(|(slot, _)| slot)
            .collect();
        for slot in silent {
            let conn = &mut self.conns[slot];
            if conn.closing() {
                // Told to go and still not drained after a whole interval.
                self.close(slot);
                continue;
            }
            let limit = conn.session.silence_limit().as_millis();
            log::info!(
                "connection {}: silent for over {limit} ms, closing",
                conn.serial
            );
            conn.reply_error(
                0,
                ErrorCode::HeartbeatTimeout,
                true,
                format!("nothing received for over {limit} ms"),
            );
            conn.last_read = stamp;
            self.mark_dirty(slot);
        }
        // CONNECT must have arrived within the connect timeout of the
        // accept, however slowly its bytes trickle in (one that went
        // silent was told so above).
        let timeout = Duration::from_millis(self.shared.config.connect_timeout_ms.into());
        let late: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.session.phase == Phase::AwaitingConnect
                    && !c.closing()
                    && c.accepted.elapsed() > timeout
            })
            .map(|(slot, _)| slot)
            .collect();
        for slot in late {
            let conn = &mut self.conns[slot];
            let limit = self.shared.config.connect_timeout_ms;
            log::info!(
                "connection {} ({}): no CONNECT within {limit} ms, closing",
                conn.serial,
                peer_name(conn.session.peer())
            );
            let why = format!("no CONNECT within {limit} ms of connecting");
            conn.reply_error(0, ErrorCode::HeartbeatTimeout, true, why);
            self.mark_dirty(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        if !self.conns.contains(slot) {
            return;
        }
        let mut conn = self.conns.remove(slot);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        // Publishers paused for it go on.
        conn.session.lower_backlog();
        let me = ConnectionRef {
            worker: self.index,
            slot,
            serial: conn.serial,
        };
        detach_all(&mut conn, me, &self.shared, &mut self.deliveries);
        let temporary_queues = conn
            .session
            .traffic_mut()
            .map(|t| std::mem::take(&mut t.temporary_queues))
            .unwrap_or_default();
        // Its subscriptions detached: a session that ends with the
        // connection can delete its durable ones.
        if let Front::Mqtt(m) = &mut conn.front {
            let mut ctx = Context::new(&self.shared, me, &mut self.deliveries);
            mqtt::farewell(m, &conn.session, &mut ctx);
        }
        for name in temporary_queues {
            self.shared.broker.delete_queue(&name);
        }
        release_client_id(&conn.session, &self.shared, conn.serial);
        self.shared.broker.connection_closed(conn.serial);
        self.shared.places.remove(conn.serial);
        self.stats().connections.fetch_sub(1, Ordering::Relaxed);
        self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
        log::debug!("connection {} closed", conn.serial);
    }

    /// Takes a closing connection off every queue and topic at once,
    /// though its last bytes may take a while to drain: a queue that
    /// still counted it a consumer would hand it again each message it
    /// gives back, for ever.
    fn detach(&mut self, slot: usize) {
        if let Some(conn) = self.conns.get_mut(slot) {
            let me = ConnectionRef {
                worker: self.index,
                slot,
                serial: conn.serial,
            };
            detach_all(conn, me, &self.shared, &mut self.deliveries);
        }
    }

    fn close_all(&mut self) {
        let slots: Vec<usize> = self.conns.iter().map(|(slot, _)| slot).collect();
        for slot in slots {
            let conn = &mut self.conns[slot];
            conn.reply_error(
                0,
                ErrorCode::ServerShutdown,
                true,
                "the server is shutting down".into(),
            );
            // One attempt only: a shutdown does not wait for slow readers.
            let _ = conn.flush();
            self.close(slot);
        }
    }

    fn stats(&self) -> &crate::frontend::WorkerStats {
        &self.shared.stats[self.index]
    }
}

/// Connections [`Worker::runs`] keeps room for between bursts.
const KEPT_RUNS: usize = 1024;

/// A batch's deliveries to one connection: what arrived for it is
/// counted, and its backlog checked, once for them all. The counters share
/// a cache line with the one the routing worker adds to, so each update
/// moves the line between cores.
#[derive(Default)]
struct Run {
    /// Bytes routed to it, to take off its backlog's count in flight.
    arrived: usize,
    /// Whether any was queued to be written.
    delivered: bool,
}

impl Run {
    fn add(&mut self, other: Run) {
        self.arrived += other.arrived;
        self.delivered |= other.delivered;
    }
}

/// The connection `target` names, if it is still the one in its slot (a
/// slot is reused once its connection closes).
/// Ends every subscription of `conn` (which is `me`): unsettled
/// deliveries go back to their queues, counted as delivered, since the
/// client may have seen them.
fn detach_all(conn: &mut Connection, me: ConnectionRef, shared: &Shared, out: &mut Deliveries) {
    let Some(traffic) = conn.session.traffic_mut() else {
        return;
    };
    traffic.unacked.clear();
    for (subscription_id, handle) in traffic.subscriptions.drain() {
        let sub = Subscriber {
            conn: me,
            subscription_id,
        };
        shared.broker.unsubscribe(handle, &sub, &[], out);
    }
}

fn live(conns: &mut Slab<Connection>, target: ConnectionRef) -> Option<&mut Connection> {
    conns
        .get_mut(target.slot)
        .filter(|c| c.serial == target.serial)
}

/// Notes where a read's publishes went; the worker the connection should
/// move to, if it is time.
fn pulled(conn: &mut Connection, seen: Seen, me: usize, shared: &Shared) -> Option<usize> {
    let to = match seen {
        Seen::One(to) if to != me => to,
        Seen::Nowhere => return None,
        _ => {
            conn.pull.reset(me);
            return None;
        }
    };
    let streak = conn.pull.toward(to);
    let ready = streak >= MOVE_AFTER
        && conn.moved_in.is_none_or(|t| t.elapsed() >= SETTLE)
        && shared.stats[to].load.load(Ordering::Relaxed) < MOVE_MAX_LOAD
        && conn.movable();
    ready.then(|| {
        conn.pull.reset(me);
        to
    })
}

/// Records why a connection stopped reading.
fn stop(conn: &mut Connection, flow: Flow) {
    match flow {
        Flow::Continue => {}
        Flow::Close => conn.close_soon(),
        Flow::Park(parked) => {
            conn.wait_for(ReadState::Parked(Box::new(parked)));
        }
        Flow::Login(welcome) => {
            conn.wait_for(ReadState::LoggingIn(Box::new(welcome)));
        }
    }
}

/// Goes on with a connection after what it waited for: decodes what it
/// buffered meanwhile. True if its socket must be read again (edge
/// triggering will not report bytes that arrived while it waited).
fn resume(decoders: &Decoders, conn: &mut Connection, ctx: &mut Context<'_>, flow: Flow) -> bool {
    let flow = match flow {
        Flow::Continue if !conn.closing() => decode_all(decoders, conn, ctx),
        Flow::Continue => Flow::Close,
        other => other,
    };
    if let Flow::Continue = flow {
        conn.last_read = Stamp::now();
        return true;
    }
    stop(conn, flow);
    false
}

/// The native protocol's decoders: before CONNECT, a frame may be no
/// bigger than a CONNECT needs (`max_connect_frame_size`), so that no one
/// can make the server hold big buffers before logging in.
struct Decoders {
    handshake: Decoder,
    connected: Decoder,
}

/// Decodes and dispatches every whole frame in the read buffer.
fn decode_all(decoders: &Decoders, conn: &mut Connection, ctx: &mut Context<'_>) -> Flow {
    match &mut conn.front {
        Front::Native => {}
        Front::Stomp(s) => {
            return stomp::receive(s, &mut conn.read_buf, &mut conn.session, &mut conn.out, ctx)
        }
        Front::Mqtt(m) => {
            return mqtt::receive(m, &mut conn.read_buf, &mut conn.session, &mut conn.out, ctx)
        }
        Front::Amqp(a) => {
            return crate::amqp::receive(
                a,
                &mut conn.read_buf,
                &mut conn.session,
                &mut conn.out,
                ctx,
            )
        }
    }
    loop {
        let decoder = match conn.session.phase {
            Phase::AwaitingConnect => &decoders.handshake,
            Phase::Connected => &decoders.connected,
        };
        match decoder.decode(&mut conn.read_buf) {
            Ok(Some(raw)) => match handlers::dispatch(raw, &mut conn.session, &mut conn.out, ctx) {
                // The rest waits while a subscriber drains its backlog.
                Flow::Continue if ctx.backlog.is_some() => return Flow::Continue,
                Flow::Continue => {}
                stop => return stop,
            },
            Ok(None) => return Flow::Continue,
            Err(DecodeError { request_id, error }) => {
                let why = match error {
                    herald_protocol::Error::FrameTooLarge { len, max } => {
                        let (len, max) = (len as usize, max as usize);
                        crate::frontend::frame_too_large(len, false, max, conn.session.phase)
                    }
                    ref other => other.to_string(),
                };
                handlers::reply_error(&mut conn.out, request_id, error.code(), true, why);
                return Flow::Close;
            }
        }
    }
}
