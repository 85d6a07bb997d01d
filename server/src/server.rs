//! Starting and stopping a server: [`Server::start`] binds, spawns the
//! acceptor and the workers, and returns a [`ServerHandle`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Poll, Waker};
use thiserror::Error;

use crate::admin::{Addresses, Admin, MqttListeners};
use crate::auth::Authenticator;
use crate::broker::Broker;
use crate::config::Config;
use crate::frontend::{Places, Protocol, Shared, WorkerStats};
use crate::net::worker::Worker;
use crate::net::{acceptor, Command, WorkerHandle, WAKER};
use crate::store::{Journal, JournalConfig, JournalError};

/// Why a server could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A poll, waker or thread could not be created.
    #[error("cannot start the server's threads: {0}")]
    Threads(#[from] io::Error),
    /// The journal could not be opened or replayed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The TLS certificate or key cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsError),
    /// The config has a bad value.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// How long a shutdown waits for the acceptor and the workers to stop.
const THREADS_STOP: Duration = Duration::from_secs(5);

/// The entry point.
pub struct Server;

impl Server {
    /// Binds `config.listen` and starts 1 acceptor and `config.workers`
    /// worker threads. The server runs until the handle is shut down or
    /// dropped.
    pub fn start(config: Config) -> Result<ServerHandle, StartError> {
        Server::start_on(config, Arc::new(crate::store::disk::RealDisk))
    }

    /// [`Server::start`], with the journal writing its segments through
    /// `disk`: tests put one there that fills up or fails.
    pub fn start_on(
        config: Config,
        disk: Arc<dyn crate::store::disk::Disk>,
    ) -> Result<ServerHandle, StartError> {
        config.validate("the server's config")?;
        let listener = TcpListener::bind(config.listen).map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let local_addr = listener.local_addr()?;
        let mut listeners = vec![(listener, Protocol::Native)];
        let mut bind =
            |enabled: bool, addr: SocketAddr, protocol| -> Result<Option<SocketAddr>, StartError> {
                if !enabled {
                    return Ok(None);
                }
                let l =
                    TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
                let bound = l.local_addr()?;
                listeners.push((l, protocol));
                Ok(Some(bound))
            };
        let stomp_addr = bind(config.stomp.enabled, config.stomp.listen, Protocol::Stomp)?;
        let stomp_ws_addr = bind(
            config.stomp.websocket_enabled,
            config.stomp.websocket_listen,
            Protocol::StompWebSocket,
        )?;
        let tls_addr = bind(config.tls.enabled, config.tls.listen, Protocol::NativeTls)?;
        let mqtt = MqttListeners {
            tcp: bind(config.mqtt.enabled, config.mqtt.listen, Protocol::Mqtt)?,
            tls: bind(
                config.mqtt.tls_enabled,
                config.mqtt.tls_listen,
                Protocol::MqttTls,
            )?,
            websocket: bind(
                config.mqtt.websocket_enabled,
                config.mqtt.websocket_listen,
                Protocol::MqttWebSocket,
            )?,
        };
        let amqp_addr = bind(config.amqp.enabled, config.amqp.listen, Protocol::Amqp)?;
        let amqp_tls_addr = bind(
            config.amqp.tls_enabled,
            config.amqp.tls_listen,
            Protocol::AmqpTls,
        )?;
        let amqp_ws_addr = bind(
            config.amqp.websocket_enabled,
            config.amqp.websocket_listen,
            Protocol::AmqpWebSocket,
        )?;
        let tls = match config.tls.enabled
            || config.mqtt.tls_enabled
            || config.amqp.tls_enabled
            || (config.admin.enabled && config.admin.tls)
        {
            true => Some(crate::net::tls::server_config(
                &config.tls.cert,
                &config.tls.key,
            )?),
            false => None,
        };
        let n = config.worker_count();
        let paging = crate::store::page::PagingRoot::new(
            &config.data_dir,
            disk.clone(),
            config.journal.min_free_bytes,
        );
        let large = crate::store::large::LargeStore::open(
            &config.data_dir,
            disk.clone(),
            config.journal.min_free_bytes,
            u64::from(config.max_frame_size),
        );
        let (journal, recovered) = Journal::open(JournalConfig {
            recover_corrupt: config.journal.recover_corrupt,
            min_free_bytes: config.journal.min_free_bytes,
            disk,
            ..JournalConfig::new(
                config.data_dir.clone(),
                config.journal.fsync,
                config.journal.segment_size,
                config.journal.max_segments,
            )
        })?;
        log::info!(
            "journal {}: {} records in {} segments replayed, {} live",
            config.data_dir.display(),
            recovered.records_read,
            recovered.segments,
            recovered.records.len()
        );
        let delivered = crate::store::shutdown::take(&config.data_dir, journal.next_record_id());
        if delivered.is_none() && !recovered.records.is_empty() {
            log::info!(
                "no clean-shutdown note: the kept messages may have been delivered, and are marked redelivered"
            );
        }
        let journal = Arc::new(journal);
        let broker = Broker::new(&config, journal.clone());
        broker.set_paging(paging);
        broker.set_large(large.clone());
        broker.restore(recovered, delivered);
        large.sweep();

        let mut worker_parts = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let poll = Poll::new()?;
            let waker = Waker::new(poll.registry(), WAKER)?;
            let (tx, rx) = mpsc::channel();
            let notified = Arc::new(AtomicBool::new(false));
            handles.push(WorkerHandle::new(tx, waker, notified.clone()));
            worker_parts.push((poll, rx, notified));
        }
        let auth = Authenticator::start(&config.auth)?;
        let handles: Arc<[WorkerHandle]> = handles.into();
        let shared = Arc::new(Shared {
            limits: crate::frontend::Limits::new(&config),
            auth,
            broker,
            config,
            workers: handles
                .iter()
                .map(|h| Box::new(h.clone()) as Box<dyn crate::frontend::Mailbox>)
                .collect(),
            stats: (0..n).map(|_| WorkerStats::default()).collect(),
            spares: (0..n).map(|_| Default::default()).collect(),
            open_connections: AtomicUsize::new(0),
            next_serial: AtomicU64::new(1),
            places: Places::default(),
            client_ids: std::sync::Mutex::new(std::collections::HashMap::new()),
            heirs: std::sync::Mutex::new(std::collections::HashMap::new()),
            away: Default::default(),
            started: std::time::Instant::now(),
        });
        let sink = crate::frontend::WorkerSink::new(Arc::downgrade(&shared));
        shared.broker.set_sink(Arc::new(sink));
        // Before any connection is accepted: no subscription goes untold.
        let cluster = match shared.config.cluster.enabled() {
            true => {
                let handle = crate::cluster::threads::start(&shared.config.cluster, &shared)?;
                Some(handle)
            }
            false => None,
        };

        let mut threads = Vec::with_capacity(n + 1);
        for (index, (poll, rx, notified)) in worker_parts.into_iter().enumerate() {
            let worker = Worker::new(
                index,
                poll,
                rx,
                notified,
                shared.clone(),
                (handles.clone(), tls.clone()),
            );
            threads.push(spawn(format!("herald-worker-{index}"), move || {
                worker.run()
            })?);
        }
        let acceptor_poll = Poll::new()?;
        let acceptor_waker = Waker::new(acceptor_poll.registry(), WAKER)?;
        let (acceptor_shared, acceptor_workers) = (shared.clone(), handles.clone());
        threads.push(spawn("herald-acceptor".into(), move || {
            acceptor::run(acceptor_poll, listeners, acceptor_shared, acceptor_workers)
        })?);
        // The binary announces every listener on stdout; an embedding
        // program sees them here with RUST_LOG=debug.
        log::info!(
            "herald {} started with {n} workers",
            env!("CARGO_PKG_VERSION")
        );
        log::info!("{}", shared.auth.describe_anonymous(&shared.config.auth));
        log::debug!("listening on {local_addr}");
        for (what, addr) in [
            ("STOMP", stomp_addr),
            ("STOMP over WebSocket", stomp_ws_addr),
            ("TLS", tls_addr),
            ("MQTT", mqtt.tcp),
            ("MQTT over TLS", mqtt.tls),
            ("MQTT over WebSocket", mqtt.websocket),
            ("AMQP", amqp_addr),
            ("AMQP over TLS", amqp_tls_addr),
            ("AMQP over WebSocket", amqp_ws_addr),
        ] {
            if let Some(addr) = addr {
                log::debug!("{what} listening on {addr}");
            }
        }
        if let Some(c) = &cluster {
            let listeners = [
                ("native", Some(local_addr)),
                ("stomp", stomp_addr),
                ("mqtt", mqtt.tcp),
            ];
            c.cluster().advertise(
                listeners
                    .into_iter()
                    .filter_map(|(what, addr)| Some((what.to_owned(), addr?.to_string()))),
            );
        }
        let admin = match shared.config.admin.enabled {
            true => {
                let addresses = Addresses {
                    native: Some(local_addr),
                    stomp: stomp_addr,
                    stomp_ws: stomp_ws_addr,
                    tls: tls_addr,
                    mqtt,
                    amqp: amqp_addr,
                    amqp_tls: amqp_tls_addr,
                    amqp_ws: amqp_ws_addr,
                    admin: None,
                };
                let listen = shared.config.admin.listen;
                let metrics = Some(journal.metrics().clone());
                let https = shared.config.admin.tls.then(|| tls.clone()).flatten();
                let scheme = if https.is_some() { "https" } else { "http" };
                let cluster_link = cluster.as_ref().map(|c| c.cluster().clone());
                let admin = Admin::start(
                    shared.clone(),
                    cluster_link,
                    listen,
                    addresses,
                    metrics,
                    https,
                )
                .map_err(|source| StartError::Bind {
                    addr: listen,
                    source,
                })?;
                log::debug!("management interface on {scheme}://{}/", admin.addr());
                if let Some(c) = &cluster {
                    c.cluster()
                        .advertise([("admin".into(), format!("{scheme}://{}/", admin.addr()))]);
                }
                Some(admin)
            }
            false => None,
        };
        Ok(ServerHandle {
            admin,
            local_addr,
            tls_addr,
            amqp_addr,
            amqp_tls_addr,
            amqp_ws_addr,
            stomp_addr,
            stomp_ws_addr,
            mqtt,
            journal,
            shared,
            workers: handles,
            acceptor_waker,
            threads,
            cluster,
            stopped: AtomicBool::new(false),
        })
    }
}

fn spawn(
    name: String,
    f: impl FnOnce() -> io::Result<()> + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            if let Err(e) = f() {
                log::error!("{name} stopped: {e}");
            }
        })
}

/// A point-in-time view of a server's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Open connections per worker, by worker index.
    pub connections_per_worker: Vec<usize>,
    /// Messages accepted from publishers.
    pub messages_in: u64,
    /// Messages delivered to subscribers.
    pub messages_out: u64,
    /// Messages dropped for slow consumers.
    pub dropped: u64,
    /// Times a publisher paused while a subscriber drained a backlog.
    pub publisher_pauses: u64,
    /// Publishers moved to the worker of the connections they publish to.
    pub connections_moved: u64,
    /// Topic subscriptions.
    pub subscriptions: usize,
    /// Named queues: (name, messages waiting, deliveries unacknowledged),
    /// sorted by name.
    pub queues: Vec<(String, usize, usize)>,
    /// Time each worker spent working rather than waiting for events,
    /// in nanoseconds, by worker index.
    pub worker_busy_ns: Vec<u64>,
}

/// A running server.
pub struct ServerHandle {
    local_addr: SocketAddr,
    stomp_addr: Option<SocketAddr>,
    amqp_addr: Option<SocketAddr>,
    amqp_tls_addr: Option<SocketAddr>,
    amqp_ws_addr: Option<SocketAddr>,
    stomp_ws_addr: Option<SocketAddr>,
    tls_addr: Option<SocketAddr>,
    mqtt: MqttListeners,
    admin: Option<Admin>,
    journal: Arc<Journal>,
    shared: Arc<Shared>,
    /// Every worker's inbox, to stop them.
    workers: Arc<[WorkerHandle]>,
    acceptor_waker: Waker,
    threads: Vec<JoinHandle<()>>,
    cluster: Option<crate::cluster::threads::ClusterHandle>,
    stopped: AtomicBool,
}

impl ServerHandle {
    /// The link to the other nodes, in cluster mode.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.cluster.as_ref().map(|c| c.cluster())
    }

    /// The address the listener is bound to (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The STOMP listener's address, if it runs.
    pub fn stomp_addr(&self) -> Option<SocketAddr> {
        self.stomp_addr
    }

    /// The STOMP-over-WebSocket listener's address, if it runs.
    pub fn stomp_ws_addr(&self) -> Option<SocketAddr> {
        self.stomp_ws_addr
    }

    /// The AMQP listener's address, if it runs.
    pub fn amqp_addr(&self) -> Option<SocketAddr> {
        self.amqp_addr
    }

    /// The AMQP-over-TLS listener's address, if it runs.
    pub fn amqp_tls_addr(&self) -> Option<SocketAddr> {
        self.amqp_tls_addr
    }

    /// The AMQP-over-WebSocket listener's address, if it runs.
    pub fn amqp_ws_addr(&self) -> Option<SocketAddr> {
        self.amqp_ws_addr
    }

    /// The TLS listener's address, if it runs.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// The MQTT listeners' addresses, those that run.
    pub fn mqtt(&self) -> MqttListeners {
        self.mqtt
    }

    /// The management interface's address, if it runs.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(Admin::addr)
    }

    /// The management interface's URL (`https://` with `[admin] tls`).
    pub fn admin_url(&self) -> Option<String> {
        let scheme = if self.shared.config.admin.tls {
            "https"
        } else {
            "http"
        };
        self.admin_addr().map(|a| format!("{scheme}://{a}/"))
    }

    /// Re-reads users, permissions and limits from the config file (see
    /// [`crate::admin::reload`]); returns the file read.
    pub fn reload(&self) -> Result<String, crate::admin::ReloadError> {
        crate::admin::reload(&self.shared, self.cluster().map(|c| &**c))
    }

    /// Messages accepted and delivered since the start, summed: what a
    /// watcher of the traffic reads without the queues' locks that
    /// [`ServerHandle::stats`] takes.
    pub fn messages_moved(&self) -> u64 {
        self.shared
            .stats
            .iter()
            .map(|w| w.messages_in.load(Ordering::Relaxed) + w.messages_out.load(Ordering::Relaxed))
            .sum()
    }

    /// The server's counters now.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        Stats {
            connections_per_worker: s
                .stats
                .iter()
                .map(|w| w.connections.load(Ordering::Relaxed))
                .collect(),
            messages_in: s
                .stats
                .iter()
                .map(|w| w.messages_in.load(Ordering::Relaxed))
                .sum(),
            dropped: s
                .stats
                .iter()
                .map(|w| w.dropped.load(Ordering::Relaxed))
                .sum(),
            publisher_pauses: s
                .stats
                .iter()
                .map(|w| w.publisher_pauses.load(Ordering::Relaxed))
                .sum(),
            connections_moved: s
                .stats
                .iter()
                .map(|w| w.moved_in.load(Ordering::Relaxed))
                .sum(),
            messages_out: s
                .stats
                .iter()
                .map(|w| w.messages_out.load(Ordering::Relaxed))
                .sum(),
            subscriptions: s.broker.subscription_count(),
            queues: s
                .broker
                .queue_stats()
                .into_iter()
                .map(|q| (q.name, q.depth, q.in_flight))
                .collect(),
            worker_busy_ns: s
                .stats
                .iter()
                .map(|w| w.busy_ns.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// Stops accepting, tells every client the server is shutting down,
    /// closes every connection and waits for the threads to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        // Messages are dropped from memory now, not done with.
        if let Some(large) = self.shared.broker.large() {
            large.stop();
        }
        if let Some(admin) = &mut self.admin {
            admin.shutdown();
        }
        if let Err(e) = self.acceptor_waker.wake() {
            log::error!("cannot wake the acceptor: {e}");
        }
        for w in self.workers.iter() {
            w.send(Command::Shutdown);
        }
        // Whatever a thread is doing, shutdown ends: one that has not
        // stopped in time is left behind (its process exits after this).
        let deadline = Instant::now() + THREADS_STOP;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut clean = true;
        for t in self.threads.drain(..) {
            let name = t.thread().name().unwrap_or("a server thread").to_owned();
            if !t.is_finished() {
                log::error!(
                    "{name} did not stop within {} s of the shutdown; left running",
                    THREADS_STOP.as_secs()
                );
                clean = false;
            } else if t.join().is_err() {
                log::error!("{name} panicked");
                clean = false;
            }
        }
        if let Some(cluster) = self.cluster.take() {
            cluster.stop();
        }
        // Last: what the workers appended is written before the journal
        // thread ends.
        self.journal.shutdown();
        // Then how often each kept message was delivered, if every part
        // stopped as it should: the next start marks redelivered only
        // those that were.
        let stopped = self.journal.metrics().stopped.load(Ordering::Relaxed);
        if clean && !stopped {
            let next_id = self.journal.next_record_id();
            let delivered = self.shared.broker.kept_deliveries();
            if let Err(e) =
                crate::store::shutdown::write(&self.shared.config.data_dir, next_id, &delivered)
            {
                log::warn!(
                    "the clean-shutdown note was not written ({e}): the next start marks every \
                     kept message redelivered"
                );
            }
        }
        log::info!("server on {} stopped", self.local_addr);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
