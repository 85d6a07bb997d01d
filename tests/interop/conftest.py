"""Fixtures for the interoperability tests: a real herald-server binary on
ephemeral ports, and helpers around stomp.py and the herald CLI.

The binaries come from HERALD_BIN_DIR (scripts/test.sh builds them there).
"""

import os
import queue
import shutil
import subprocess
import tempfile

import pytest
import stomp

BIN_DIR = os.environ.get(
    "HERALD_BIN_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "target", "debug"),
)
PATIENCE = 10.0


class Server:
    """A running herald-server with its native and STOMP addresses; `config`
    is the text of a configuration file, if the defaults will not do."""

    def __init__(self, config=None):
        self.data = tempfile.mkdtemp(prefix="herald-interop-")
        extra = []
        if config is not None:
            path = os.path.join(self.data, "herald.toml")
            with open(path, "w") as f:
                f.write(config)
            extra = ["--config", path]
        self.proc = subprocess.Popen(
            [
                os.path.join(BIN_DIR, "herald-server"),
                *extra,
                "--listen", "127.0.0.1:0",
                "--stomp-listen", "127.0.0.1:0",
                "--stomp-ws-listen", "127.0.0.1:0",
                "--mqtt-listen", "127.0.0.1:0",
                "--mqtt-ws-listen", "127.0.0.1:0",
                "--amqp-listen", "127.0.0.1:0",
                "--amqp-ws-listen", "127.0.0.1:0",
                "--admin-listen", "127.0.0.1:0",
                "--data-dir", self.data,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        native = self.proc.stdout.readline().strip()
        stomp_line = self.proc.stdout.readline().strip()
        ws_line = self.proc.stdout.readline().strip()
        assert native.startswith("herald-server listening on "), native
        assert stomp_line.startswith("herald-server STOMP listening on "), stomp_line
        assert ws_line.startswith("herald-server STOMP over WebSocket listening on "), ws_line
        self.native = native.rsplit(" ", 1)[1]
        host, port = stomp_line.rsplit(" ", 1)[1].rsplit(":", 1)
        self.stomp = (host, int(port))
        host, port = ws_line.rsplit(" ", 1)[1].rsplit(":", 1)
        self.stomp_ws = (host, int(port))
        self.mqtt = self.address("herald-server MQTT listening on ")
        self.mqtt_ws = self.address("herald-server MQTT over WebSocket listening on ")
        self.amqp = self.address("herald-server AMQP listening on ")
        self.amqp_ws = self.address("herald-server AMQP over WebSocket listening on ")
        admin_line = self.proc.stdout.readline().strip()
        assert admin_line.startswith("herald-server admin listening on "), admin_line
        self.admin = admin_line.rsplit(" ", 1)[1].rstrip("/")

    def address(self, prefix):
        """The (host, port) of the next announcement line, which must start
        with `prefix`."""
        line = self.proc.stdout.readline().strip()
        assert line.startswith(prefix), line
        host, port = line[len(prefix):].rsplit(":", 1)
        return (host, int(port))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=PATIENCE)
        shutil.rmtree(self.data, ignore_errors=True)

    def herald(self, *args, timeout=PATIENCE):
        """Runs the herald CLI against this server; returns stdout."""
        out = subprocess.run(
            [os.path.join(BIN_DIR, "herald"), "--server", f"herald://{self.native}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return out.stdout


class Inbox(stomp.ConnectionListener):
    """Collects MESSAGE, RECEIPT and ERROR frames into queues."""

    def __init__(self):
        self.messages = queue.Queue()
        self.receipts = queue.Queue()
        self.errors = queue.Queue()
        self.disconnected = queue.Queue()

    def on_message(self, frame):
        self.messages.put(frame)

    def on_receipt(self, frame):
        self.receipts.put(frame.headers.get("receipt-id"))

    def on_error(self, frame):
        self.errors.put(frame)

    def on_disconnected(self):
        self.disconnected.put(True)

    def next(self, timeout=PATIENCE):
        return self.messages.get(timeout=timeout)

    def nothing(self, wait=0.3):
        try:
            frame = self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message {frame.headers} {frame.body!r}")

    def receipt(self, timeout=PATIENCE):
        return self.receipts.get(timeout=timeout)


def connect(server, version="1.2", client_id=None, auto_decode=True, websocket=False):
    """A connected stomp.py connection and its inbox; over WebSocket (with
    the v12.stomp subprotocol) if asked."""
    if websocket:
        conn = stomp.WSStompConnection(
            [server.stomp_ws], heartbeats=(0, 0), header={"Sec-WebSocket-Protocol": "v12.stomp"}
        )
    else:
        cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
        kwargs = {} if version == "1.0" else {"heartbeats": (0, 0)}
        conn = cls([server.stomp], auto_decode=auto_decode, **kwargs)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    headers = {"client-id": client_id} if client_id else {}
    conn.connect(wait=True, headers=headers)
    return conn, inbox


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


class Mosquitto:
    """Debian's mosquitto on an ephemeral port, for the MQTT tests that say
    how it behaves beside Herald (its `mqtt` address, as a Server's)."""

    def __init__(self, conf=""):
        import socket
        import time

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
        self.conf.write(f"listener {port} 127.0.0.1\nallow_anonymous true\n{conf}")
        self.conf.close()
        self.proc = subprocess.Popen(
            [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", self.conf.name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.mqtt = ("127.0.0.1", port)
        deadline = time.time() + PATIENCE
        while time.time() < deadline:
            try:
                socket.create_connection(self.mqtt, timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("mosquitto did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=PATIENCE)
        os.unlink(self.conf.name)


@pytest.fixture
def mosquitto():
    m = Mosquitto()
    yield m
    m.stop()

