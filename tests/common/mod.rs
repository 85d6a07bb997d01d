//! Shared helpers for the end-to-end tests: start a server on an ephemeral
//! port, connect real clients, and speak raw frames for protocol tests.

mod amqp;
mod groups;
mod mqtt;
mod redis;

pub use amqp::{durable_source, open as amqp_open, text as amqp_text, AmqpClient, Got};
pub use groups::{assert_groups_held, grouped, log_grouped, GroupLog, TwoNodes};
pub use mqtt::MqttClient;
pub use redis::{Redis, RedisCluster, Sentinel, Stopped};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_client::{
    AckMode, Connection, ConnectionFactory, Consumer, Destination, Message, Producer, Session,
};
use herald_protocol::frame::{Connect, ErrorFrame, Subscribe};
use herald_protocol::{Decoder, DestinationKind, ErrorCode, Frame, RawFrame};
use herald_server::{Config, Server, ServerHandle};

/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A fresh, empty directory under the system's temporary directory, named
/// for this process; [`TestServer`] removes it.
pub fn temp_dir(label: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("herald-test-{}-{label}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A config for tests: loopback, an ephemeral port, two workers, a data
/// directory of its own.
pub fn test_config() -> Config {
    let mut config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        workers: 2,
        data_dir: temp_dir("data"),
        ..Config::default()
    };
    config.stomp.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.stomp.websocket_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.mqtt.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.mqtt.tls_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.mqtt.websocket_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.admin.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.amqp.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.amqp.tls_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.amqp.websocket_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    // A small reserve file: each test server writes one.
    config.journal.min_free_bytes = 1 << 20;
    config
}

/// Sends `probe()` through `producer` until one of `consumers` (on other
/// nodes of a cluster) receives it, then drains the probes that followed:
/// what subscribes there has reached the publishing node.
pub fn until_heard(producer: &Producer, probe: impl Fn() -> Message, consumers: &[&Consumer]) {
    let deadline = Instant::now() + PATIENCE;
    'heard: loop {
        producer.send_with_receipt(probe()).expect("a probe sent");
        for c in consumers {
            if c.receive(Duration::from_millis(50))
                .expect("receives")
                .is_some()
            {
                break 'heard;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the probes never reached the other node"
        );
    }
    for c in consumers {
        while c
            .receive(Duration::from_millis(300))
            .expect("receives")
            .is_some()
        {}
    }
}

/// [`test_config`] for node `node_id` of a cluster on `redis`.
pub fn cluster_config(redis: &Redis, node_id: &str) -> Config {
    let mut config = test_config();
    config.cluster.redis = redis.url();
    config.cluster.node_id = node_id.into();
    config
}

/// A cluster node whose claims of dead nodes' messages come after a
/// second.
pub fn claiming_node(redis: &Redis, id: &str) -> TestServer {
    let mut config = cluster_config(redis, id);
    config.cluster.claim_idle_ms = 1000;
    start_with(config)
}

/// A test message's number: its `n` property.
pub fn number(m: &Message) -> i64 {
    m.property("n")
        .and_then(|v| v.as_i64())
        .expect("an n property")
}

/// A running server that removes its data directory when dropped.
pub struct TestServer {
    handle: Option<ServerHandle>,
    data_dir: PathBuf,
}

impl TestServer {
    /// Shuts the server down and removes its data directory.
    pub fn shutdown(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }

    /// Its data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// Shuts the server down and keeps its data directory, for a server
    /// started next on the same one.
    pub fn stop_keeping_data(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
        self.data_dir = PathBuf::new();
    }
}

impl Deref for TestServer {
    type Target = ServerHandle;

    fn deref(&self) -> &ServerHandle {
        self.handle.as_ref().expect("running")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        drop(self.handle.take());
        if !self.data_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// Starts a server with [`test_config`].
pub fn start() -> TestServer {
    start_with(test_config())
}

/// Starts a server with this config.
pub fn start_with(config: Config) -> TestServer {
    start_on(
        config,
        std::sync::Arc::new(herald_server::store::disk::RealDisk),
    )
}

/// Starts a server with this config, its journal on `disk`.
pub fn start_on(
    config: Config,
    disk: std::sync::Arc<dyn herald_server::store::disk::Disk>,
) -> TestServer {
    let data_dir = config.data_dir.clone();
    TestServer {
        handle: Some(Server::start_on(config, disk).expect("server starts")),
        data_dir,
    }
}

/// A factory for the server.
pub fn factory(server: &ServerHandle) -> ConnectionFactory {
    ConnectionFactory::new(&format!("herald://{}", server.local_addr())).expect("valid URL")
}

/// A connected client and an auto-ack session on it.
pub fn connect(server: &ServerHandle) -> (Connection, Session) {
    let c = factory(server).create_connection().expect("connects");
    let s = c.create_session(AckMode::Auto).expect("session");
    (c, s)
}

/// A connected client with this client id, and an auto-ack session.
pub fn as_client(server: &ServerHandle, id: &str) -> (Connection, Session) {
    let c = factory(server)
        .with_client_id(id)
        .create_connection()
        .expect("connects");
    let s = c.create_session(AckMode::Auto).expect("session");
    (c, s)
}

/// A consumer of a topic pattern.
pub fn subscribe(session: &Session, pattern: &str) -> Consumer {
    session
        .create_consumer(&Destination::topic(pattern))
        .expect("subscribes")
}

/// Sends a non-persistent text message to a topic and waits for its
/// receipt.
pub fn publish(session: &Session, topic: &str, text: &str) {
    session
        .create_producer(&Destination::topic(topic))
        .expect("producer")
        .send_with_receipt(Message::text(text).non_persistent())
        .expect("published");
}

/// The next message, failing the test if none comes within [`PATIENCE`].
pub fn next(consumer: &Consumer) -> Message {
    consumer
        .receive(PATIENCE)
        .expect("consumer open")
        .expect("a message within the patience window")
}

/// Why a message read from a dead-letter queue died.
pub fn dead_letter_reason(dead: &Message) -> String {
    dead.property("HeraldDeadLetterReason")
        .and_then(|v| v.as_str())
        .expect("a dead letter says why")
        .to_owned()
}

/// Asserts that nothing arrives for a short while.
pub fn assert_nothing(consumer: &Consumer) {
    if let Some(m) = consumer.receive(Duration::from_millis(200)).expect("open") {
        panic!("unexpected message {m:?}");
    }
}

/// Polls `cond` until it holds, failing after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client that speaks raw frames, for protocol tests.
pub struct RawClient {
    /// The socket.
    pub stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
}

impl RawClient {
    /// Opens a TCP connection without sending anything.
    pub fn open(server: &ServerHandle) -> RawClient {
        let stream = TcpStream::connect(server.local_addr()).expect("tcp connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        RawClient {
            stream,
            buf: BytesMut::new(),
            decoder: Decoder::new(u32::MAX),
        }
    }

    /// Opens and completes CONNECT/CONNECTED, asking for `heartbeat_ms`.
    pub fn connected(server: &ServerHandle, heartbeat_ms: u32) -> RawClient {
        let mut c = RawClient::open(server);
        c.send(
            &Frame::Connect(Connect {
                heartbeat_ms,
                ..Connect::default()
            }),
            0,
        );
        match c.read_frame() {
            Some((Frame::Connected(_), _)) => c,
            other => panic!("expected CONNECTED, got {other:?}"),
        }
    }

    /// Writes raw bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Writes one frame.
    pub fn send(&mut self, frame: &Frame, request_id: u32) {
        let mut b = BytesMut::new();
        frame.encode(request_id, &mut b).expect("encodes");
        self.write(&b);
    }

    /// Sends SUBSCRIBE to a topic pattern with `request_id`; does not
    /// wait for the answer.
    pub fn subscribe(&mut self, subscription_id: u32, pattern: &str, request_id: u32) {
        let frame = Frame::Subscribe(Subscribe::new(
            subscription_id,
            DestinationKind::Topic,
            pattern,
        ));
        self.send(&frame, request_id);
    }

    /// The next frame and its request id, or `None` at end of stream.
    pub fn read_frame(&mut self) -> Option<(Frame, u32)> {
        loop {
            if let Some(RawFrame { header, body }) = self
                .decoder
                .decode(&mut self.buf)
                .expect("server frames decode")
            {
                let frame = Frame::decode(RawFrame { header, body }).expect("server bodies decode");
                return Some((frame, header.request_id));
            }
            if !read_more(&mut self.stream, &mut self.buf) {
                return None;
            }
        }
    }

    /// Reads until an ERROR frame, which it returns with its request id.
    pub fn expect_error(&mut self) -> (ErrorFrame, u32) {
        loop {
            match self.read_frame() {
                Some((Frame::Error(e), id)) => return (e, id),
                Some(_) => {}
                None => panic!("connection closed without an ERROR"),
            }
        }
    }

    /// Asserts that the next thing is an ERROR with `code`, marked fatal,
    /// and then the end of the stream.
    pub fn expect_fatal(&mut self, code: ErrorCode) -> ErrorFrame {
        let (e, _) = self.expect_error();
        assert_eq!(e.error_code(), Some(code), "{e:?}");
        assert!(e.fatal, "{e:?}");
        assert!(
            self.read_frame().is_none(),
            "connection closed after a fatal ERROR"
        );
        e
    }
}

/// Appends one read's bytes to `buf`; false at end of stream.
fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> bool {
    let mut chunk = [0u8; 65536];
    match stream.read(&mut chunk) {
        Ok(0) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => false,
        Err(e) => panic!("read failed: {e}"),
    }
}

/// Threads in this process now, from `/proc/self/status`.
pub fn thread_count() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// A STOMP client over a raw socket, for the STOMP listener's tests.
pub struct StompClient {
    stream: TcpStream,
    buf: BytesMut,
    decoder: herald_protocol::stomp::StompDecoder,
}

impl StompClient {
    /// Opens a TCP connection to the STOMP listener without sending
    /// anything.
    pub fn open(server: &ServerHandle) -> StompClient {
        let stream =
            TcpStream::connect(server.stomp_addr().expect("STOMP listener")).expect("tcp connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        StompClient {
            stream,
            buf: BytesMut::new(),
            decoder: herald_protocol::stomp::StompDecoder::new(
                herald_protocol::stomp::StompLimits {
                    max_frame_size: 1 << 24,
                    max_headers: 1000,
                },
            ),
        }
    }

    /// Opens and connects with STOMP 1.2 (and these extra CONNECT
    /// headers), checking for CONNECTED.
    pub fn connected(server: &ServerHandle, headers: &[(&str, &str)]) -> StompClient {
        let mut c = StompClient::open(server);
        let mut connect = herald_protocol::stomp::StompFrame::new("CONNECT")
            .header("accept-version", "1.2")
            .header("host", "localhost");
        for (k, v) in headers {
            connect = connect.header(*k, *v);
        }
        c.send(&connect);
        let reply = c.read().expect("an answer to CONNECT");
        assert_eq!(reply.command, "CONNECTED", "{reply:?}");
        c
    }

    /// Writes a frame.
    pub fn send(&mut self, frame: &herald_protocol::stomp::StompFrame) {
        let mut b = BytesMut::new();
        frame.encode(true, &mut b);
        self.stream.write_all(&b).expect("write");
    }

    /// Writes raw bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// The socket, to read raw bytes (heart-beats) from.
    pub fn raw_stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The next frame, or `None` at end of stream.
    pub fn read(&mut self) -> Option<herald_protocol::stomp::StompFrame> {
        loop {
            if let Some(f) = self
                .decoder
                .decode(&mut self.buf)
                .expect("server frames decode")
            {
                return Some(f);
            }
            if !read_more(&mut self.stream, &mut self.buf) {
                return None;
            }
        }
    }

    /// The next frame, which must have this command.
    pub fn expect(&mut self, command: &str) -> herald_protocol::stomp::StompFrame {
        let f = self
            .read()
            .unwrap_or_else(|| panic!("connection closed; expected {command}"));
        assert_eq!(f.command, command, "{f:?}");
        f
    }

    /// An ERROR frame whose message has `words`, then the end of the
    /// stream; returns the ERROR.
    pub fn expect_error_saying(&mut self, words: &str) -> herald_protocol::stomp::StompFrame {
        let e = self.expect_error();
        let message = e.get("message").unwrap_or_default();
        assert!(message.contains(words), "{words:?} not in {e:?}");
        e
    }

    /// An ERROR frame, then the end of the stream; returns the ERROR.
    pub fn expect_error(&mut self) -> herald_protocol::stomp::StompFrame {
        let f = self.expect("ERROR");
        assert!(
            self.read().is_none(),
            "the connection closes after an ERROR"
        );
        f
    }
}

/// A certificate authority and a server certificate it signed for these
/// names (host names or IP addresses), written as PEM files into `dir`:
/// returns (CA, certificate, key) paths. Another call makes another,
/// unrelated CA.
pub fn tls_files(dir: &std::path::Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let made = herald_server::net::tls::dev_certificates(&names).expect("test certificates");
    std::fs::create_dir_all(dir).expect("tls dir");
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, made.ca).expect("write CA");
    std::fs::write(&paths.1, made.cert).expect("write certificate");
    std::fs::write(&paths.2, made.key).expect("write key");
    paths
}

/// An HTTP answer: status and JSON (or text) body.
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `error` of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// Closes every connection of `server` through the management
/// interface, as an administrator would.
pub fn close_all_connections(server: &TestServer) {
    let list = call(server, "GET", "/api/connections", None, None).json();
    for c in list.as_array().expect("a list") {
        let id = c["id"].as_u64().expect("an id");
        call(
            server,
            "DELETE",
            &format!("/api/connections/{id}"),
            None,
            None,
        );
    }
}

/// Calls the management interface of `server`, with basic auth if
/// given.
pub fn call(
    server: &TestServer,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    auth: Option<(&str, &str)>,
) -> Answer {
    let url = format!("http://{}{path}", server.admin_addr().expect("admin runs"));
    let mut request = ureq::request(method, &url)
        .timeout(PATIENCE)
        .set("X-Herald", "test");
    if let Some((user, password)) = auth {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.set("Authorization", &format!("Basic {token}"));
    }
    let result = match body {
        Some(b) => request.send_json(b),
        None => request.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    Answer {
        status: response.status(),
        body: response.into_string().unwrap(),
    }
}
