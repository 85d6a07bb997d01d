"""The MQTT listener with a client this project did not write: paho-mqtt,
for MQTT 3.1.1 and 5.0: QoS 0, 1 and 2, retained messages, wills,
persistent sessions, shared subscriptions, user properties, and MQTT
clients and stomp.py sharing a topic."""

import queue
import uuid

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conftest import PATIENCE, connect

VERSIONS = {"3.1.1": mqtt.MQTTv311, "5.0": mqtt.MQTTv5}


class Client:
    """A connected paho client, its messages in a queue."""

    def __init__(self, server, version, client_id=None, persistent=False, will=None, loop=True):
        self.version = VERSIONS[version]
        self.client_id = client_id or f"py-{uuid.uuid4().hex[:8]}"
        kwargs = {"clean_session": not persistent} if self.version == mqtt.MQTTv311 else {}
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=self.version, **kwargs
        )
        self.messages = queue.Queue()
        self.acks = queue.Queue()
        self.connected = queue.Queue()
        self.client.on_message = lambda c, u, msg: self.messages.put(msg)
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.acks.put(codes)
        self.client.on_connect = lambda c, u, flags, reason, props: self.connected.put((flags, reason))
        if will:
            topic, payload = will
            self.client.will_set(topic, payload, qos=1)
        host, port = server.mqtt
        if self.version == mqtt.MQTTv5:
            props = Properties(PacketTypes.CONNECT)
            if persistent:
                props.SessionExpiryInterval = 3600
            self.client.connect(host, port, clean_start=not persistent, properties=props)
        else:
            self.client.connect(host, port)
        self.client.loop_start()
        self.flags, reason = self.connected.get(timeout=PATIENCE)
        assert not reason.is_failure, reason

    def subscribe(self, topic, qos=1):
        self.client.subscribe(topic, qos=qos)
        codes = self.acks.get(timeout=PATIENCE)
        assert not codes[0].is_failure, codes
        return codes

    def publish(self, topic, payload, qos=1, retain=False, properties=None):
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        info.wait_for_publish(timeout=PATIENCE)
        assert info.is_published()

    def next(self):
        return self.messages.get(timeout=PATIENCE)

    def nothing(self, wait=0.3):
        try:
            msg = self.messages.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {msg.topic}: {msg.payload!r}")

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()

    def drop(self):
        """Ends the connection without DISCONNECT, as a crash would."""
        self.client.loop_stop()
        self.client.socket().close()


@pytest.mark.parametrize("version", VERSIONS)
def test_qos_0_1_and_2_round_trip(server, version):
    sub = Client(server, version)
    sub.subscribe("paho/+/reading", qos=2)
    pub = Client(server, version)
    for qos in (0, 1, 2):
        pub.publish(f"paho/{qos}/reading", f"value {qos}".encode(), qos=qos)
        msg = sub.next()
        assert (msg.topic, msg.payload, msg.qos) == (f"paho/{qos}/reading", f"value {qos}".encode(), qos)
    # Many, in order, at QoS 1.
    for i in range(500):
        pub.client.publish("paho/bulk/reading", str(i), qos=1)
    for i in range(500):
        assert sub.next().payload == str(i).encode()
    sub.close()
    pub.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_messages(server, version):
    pub = Client(server, version)
    pub.publish("paho/retained", b"kept", qos=1, retain=True)
    late = Client(server, version)
    late.subscribe("paho/#")
    msg = late.next()
    assert (msg.payload, msg.retain) == (b"kept", True)
    pub.publish("paho/retained", b"", qos=1, retain=True)
    assert late.next().payload == b""
    later = Client(server, version)
    later.subscribe("paho/#")
    later.nothing()
    for c in (pub, late, later):
        c.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_will_goes_out_when_the_client_vanishes(server, version):
    watcher = Client(server, version)
    watcher.subscribe("paho/wills/#")
    doomed = Client(server, version, will=("paho/wills/doomed", b"gone"))
    doomed.drop()
    msg = watcher.next()
    assert (msg.topic, msg.payload) == ("paho/wills/doomed", b"gone")
    polite = Client(server, version, will=("paho/wills/polite", b"never"))
    polite.close()
    watcher.nothing()
    watcher.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_persistent_session_gets_what_it_missed(server, version):
    client_id = f"keeper-{version}"
    c = Client(server, version, client_id=client_id, persistent=True)
    c.subscribe("paho/persistent/#", qos=1)
    c.close()
    pub = Client(server, version)
    for i in range(10):
        pub.publish("paho/persistent/x", str(i).encode(), qos=1)
    back = Client(server, version, client_id=client_id, persistent=True)
    assert back.flags.session_present
    assert [back.next().payload for _ in range(10)] == [str(i).encode() for i in range(10)]
    back.nothing()
    back.close()
    pub.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_shared_subscription_splits_the_work(server, version):
    members = [Client(server, version) for _ in range(2)]
    for m in members:
        m.subscribe("$share/pool/paho/jobs")
    pub = Client(server, version)
    for i in range(40):
        pub.publish("paho/jobs", str(i).encode(), qos=1)
    got = []
    counts = []
    for m in members:
        mine = []
        while True:
            try:
                mine.append(int(m.messages.get(timeout=0.5).payload))
            except queue.Empty:
                break
        counts.append(len(mine))
        got.extend(mine)
    assert sorted(got) == list(range(40)), "each message once between them"
    assert all(counts), f"both members got work: {counts}"
    for c in members + [pub]:
        c.close()


def test_user_properties_content_type_and_correlation_in_5(server):
    sub = Client(server, "5.0")
    sub.subscribe("paho/props")
    pub = Client(server, "5.0")
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("region", "EU"), ("units", "3")]
    props.ContentType = "application/json"
    props.CorrelationData = b"req-42"
    props.ResponseTopic = "paho/replies"
    props.MessageExpiryInterval = 600
    pub.publish("paho/props", b'{"a": 1}', qos=1, properties=props)
    msg = sub.next()
    got = msg.properties
    assert sorted(got.UserProperty) == [("region", "EU"), ("units", "3")]
    assert got.ContentType == "application/json"
    assert got.CorrelationData == b"req-42"
    assert got.ResponseTopic == "paho/replies"
    assert 590 <= got.MessageExpiryInterval <= 600
    sub.close()
    pub.close()


def format_and_content_type_of_empty_payloads(broker):
    """What a 5.0 subscriber gets of empty payloads published at each QoS
    with the payload format indicator (1) and a content type, and without
    either."""
    sub = Client(broker, "5.0")
    sub.subscribe("paho/empty", qos=2)
    pub = Client(broker, "5.0")
    got = []
    for qos in (0, 1, 2):
        props = Properties(PacketTypes.PUBLISH)
        props.PayloadFormatIndicator = 1
        props.ContentType = "text/plain"
        pub.publish("paho/empty", b"", qos=qos, properties=props)
        said = sub.next()
        pub.publish("paho/empty", b"", qos=qos)
        silent = sub.next()
        got.append((
            said.payload,
            getattr(said.properties, "PayloadFormatIndicator", None),
            getattr(said.properties, "ContentType", None),
            silent.payload,
            getattr(silent.properties, "PayloadFormatIndicator", None),
        ))
    sub.close()
    pub.close()
    return got


def test_an_empty_payloads_format_indicator_and_content_type_go_on(server, mosquitto):
    """[MQTT-3.3.2-4] (and 3.3.2-20 for the content type): forwarded
    unaltered, at every QoS, an empty payload's too. Mosquitto does the
    same, measured here beside Herald."""
    expected = [(b"", 1, "text/plain", b"", None)] * 3
    assert format_and_content_type_of_empty_payloads(server) == expected
    assert format_and_content_type_of_empty_payloads(mosquitto) == expected


def test_a_stomp_client_and_an_mqtt_client_share_a_topic(server):
    conn, inbox = connect(server)
    conn.subscribe("/topic/shared.news", id="1")
    m = Client(server, "5.0")
    m.subscribe("shared/news")
    m.publish("shared/news", b"from mqtt", qos=1)
    assert inbox.next().body == "from mqtt"
    assert m.next().payload == b"from mqtt"
    conn.send("/topic/shared.news", "from stomp")
    assert m.next().payload == b"from stomp"
    conn.disconnect()
    m.close()
