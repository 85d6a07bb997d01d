"""Large messages sent by the native client reach clients this project did
not write, whatever their size: python-qpid-proton gets the body streamed
in multi-frame transfers, stomp.py in a MESSAGE whose body follows its
head from the body's file, paho-mqtt in a PUBLISH whose payload does."""

import os
import tempfile

import pytest
from proton import Message
from proton.utils import BlockingConnection

from conftest import PATIENCE, Server, connect
from test_mqtt import Client as MqttClient


@pytest.fixture
def small_frames():
    s = Server(config="max_frame_size = 4194304\n")
    yield s
    s.stop()


def amqp_receiver(server, address):
    """A proton receiver on `address`, and what closes its connection."""
    host, port = server.amqp
    c = BlockingConnection(f"amqp://{host}:{port}", timeout=PATIENCE)
    return c.create_receiver(address), c.close


def streamed_file(size):
    """A file of `size` bytes that no two offsets of a mebibyte repeat."""
    f = tempfile.NamedTemporaryFile(delete=False)
    f.write(bytes((i * 7 + (i >> 20)) % 251 for i in range(size)))
    f.close()
    return f.name


def subscribers(server, stomp_destination, amqp_address):
    """A stomp.py subscription (bodies as bytes) and a proton receiver."""
    conn, inbox = connect(server, auto_decode=False)
    conn.subscribe(stomp_destination, id="s", ack="auto", receipt="s")
    assert inbox.receipt() == "s"
    receiver, close = amqp_receiver(server, amqp_address)
    return conn, inbox, receiver, close


def test_a_streamed_body_reaches_proton_and_stomp_whole_within_max_frame_size(small_frames):
    server = small_frames
    conn, inbox, receiver, close = subscribers(server, "/topic/files", "topic://files")
    path = streamed_file(3_000_000)
    try:
        server.herald("pub", "topic://files", "--file", path, "-P", "name=a.bin")
        with open(path, "rb") as f:
            sent = f.read()
        got = receiver.receive(timeout=PATIENCE)
        receiver.accept()
        assert got.properties["name"] == "a.bin"
        assert bytes(got.body) == sent
        frame = inbox.next()
        assert frame.headers["name"] == "a.bin"
        assert frame.body == sent
    finally:
        os.unlink(path)
        close()
        conn.disconnect()


def test_past_max_frame_size_proton_and_stomp_get_the_body_streamed(small_frames):
    server = small_frames
    conn, inbox, receiver, close = subscribers(server, "/queue/films", "topic://films")
    paho = MqttClient(server, "5.0")
    paho.subscribe("films", qos=1)
    path = streamed_file(20_000_000)
    try:
        server.herald("pub", "topic://films", "--file", path)
        server.herald("pub", "topic://films", "after it")
        server.herald("pub", "queue://films", "--file", path)
        with open(path, "rb") as f:
            sent = f.read()
        got = receiver.receive(timeout=PATIENCE)
        receiver.accept()
        assert "HeraldBodyNotCarried" not in (got.properties or {})
        assert bytes(got.body) == sent
        after = receiver.receive(timeout=PATIENCE)
        receiver.accept()
        assert after.body == "after it"
        assert paho.next().payload == sent
        assert paho.next().payload == b"after it"
        frame = inbox.next()
        assert "HeraldBodyNotCarried" not in frame.headers
        assert frame.body == sent
    finally:
        os.unlink(path)
        close()
        paho.close()
        conn.disconnect()


def test_proton_and_stomp_senders_large_bodies_past_max_frame_size_go_through(small_frames):
    """Sent by clients this project did not write (proton, stomp.py,
    paho-mqtt), past the server's max_frame_size: each body goes to a file
    as it arrives and reaches another protocol's client byte for byte."""
    server = small_frames
    conn, inbox, receiver, close = subscribers(server, "/queue/from-amqp", "queue://from-stomp")
    body = bytes((i * 7 + (i >> 20)) % 251 for i in range(12_000_000))
    try:
        host, port = server.amqp
        c = BlockingConnection(f"amqp://{host}:{port}", timeout=PATIENCE)
        c.create_sender("queue://from-amqp").send(Message(body=body, properties={"name": "b.bin"}))
        c.close()
        frame = inbox.next()
        assert frame.headers["name"] == "b.bin"
        assert frame.body == body
        conn.send("/queue/from-stomp", body, headers={"name": "c.bin"},
                  content_type="application/octet-stream")
        got = receiver.receive(timeout=PATIENCE)
        receiver.accept()
        assert got.properties["name"] == "c.bin"
        assert bytes(got.body) == body
        # paho-mqtt, told it may send packets that large, at QoS 1.
        paho = MqttClient(server, "5.0")
        paho.publish("$queue/from-stomp", body, qos=1)
        paho.close()
        got = receiver.receive(timeout=PATIENCE)
        receiver.accept()
        assert bytes(got.body) == body
    finally:
        close()
        conn.disconnect()
