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

from conftest import PATIENCE, Mosquitto, Server, connect

VERSIONS = {"3.1.1": mqtt.MQTTv311, "5.0": mqtt.MQTTv5}


class Client:
    """A connected paho client, its messages in a queue."""

    def __init__(self, server, version, client_id=None, persistent=False, will=None, loop=True,
                 connect_props=None, keepalive=60, will_props=None):
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
        self.client.on_connect = lambda c, u, flags, reason, props: self.connected.put(
            (flags, reason, props))
        if will:
            topic, payload = will
            self.client.will_set(topic, payload, qos=1, properties=will_props)
        host, port = server.mqtt
        if self.version == mqtt.MQTTv5:
            props = connect_props or Properties(PacketTypes.CONNECT)
            if persistent and not hasattr(props, "SessionExpiryInterval"):
                props.SessionExpiryInterval = 3600
            self.client.connect(host, port, keepalive=keepalive, clean_start=not persistent,
                                properties=props)
        else:
            self.client.connect(host, port, keepalive=keepalive)
        self.client.loop_start()
        self.flags, self.reason, self.connack = self.connected.get(timeout=PATIENCE)
        assert not self.reason.is_failure, self.reason

    def subscribe(self, topic, qos=1, properties=None):
        self.client.subscribe(topic, qos=qos, properties=properties)
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


def subscription_identifiers(broker):
    """The Subscription Identifiers on each copy of one message that
    matches three subscriptions of one session: two with identifiers, one
    without."""
    sub = Client(broker, "5.0")
    for topic, sid in (("paho/sid/#", 7), ("paho/sid/+", 9), ("paho/sid/x", None)):
        props = None
        if sid is not None:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = sid
        sub.subscribe(topic, properties=props)
    pub = Client(broker, "5.0")
    pub.publish("paho/sid/x", b"x", qos=1)
    copies = sorted(getattr(sub.next().properties, "SubscriptionIdentifier", []) for _ in range(3))
    sub.nothing()
    available = getattr(sub.connack, "SubscriptionIdentifierAvailable", 1)
    sub.close()
    pub.close()
    return available, copies


def test_subscription_identifiers_go_with_each_copy(server, mosquitto):
    """[MQTT-3.3.4-3] and [MQTT-3.3.4-5]: one copy per matching
    subscription, each with its subscription's identifier, none on the copy
    for the subscription that has none. Mosquitto does the same."""
    expected = (1, [[], [7], [9]])
    assert subscription_identifiers(server) == expected
    assert subscription_identifiers(mosquitto) == expected


def topic_aliases(broker):
    """What a 5.0 subscriber with a Topic Alias Maximum of 2 sees on the
    wire (paho 2.1 does not resolve aliases itself): each PUBLISH's topic
    and alias, for four topics published to twice."""
    props = Properties(PacketTypes.CONNECT)
    props.TopicAliasMaximum = 2
    sub = Client(broker, "5.0", connect_props=props)
    sub.subscribe("paho/al/#", qos=0)
    pub = Client(broker, "5.0")
    for topic in ["paho/al/a", "paho/al/b", "paho/al/c", "paho/al/a", "paho/al/b"]:
        pub.publish(topic, b"x", qos=1)
    seen = []
    for _ in range(5):
        msg = sub.next()
        seen.append((msg.topic, getattr(msg.properties, "TopicAlias", None)))
    sub.close()
    pub.close()
    return seen


def test_the_server_sets_topic_aliases_within_the_clients_maximum(server, mosquitto):
    """[MQTT-3.3.2-11]: never above the client's Topic Alias Maximum; the
    topic with a new alias, then the alias alone. Mosquitto 2.0 sends no
    aliases to clients at all (allowed: aliases are the sender's choice)."""
    assert topic_aliases(server) == [
        ("paho/al/a", 1), ("paho/al/b", 2), ("paho/al/c", None), ("", 1), ("", 2),
    ]
    assert topic_aliases(mosquitto) == [
        ("paho/al/a", None), ("paho/al/b", None), ("paho/al/c", None),
        ("paho/al/a", None), ("paho/al/b", None),
    ]


def keep_alive(broker):
    """The Server Keep Alive a 5.0 client asking for 60 s is told, and
    whether a 3.1.1 client asking for 60 s is let in."""
    told = getattr(Client(broker, "5.0", keepalive=60).connack, "ServerKeepAlive", None)
    try:
        Client(broker, "3.1.1", keepalive=60)
        refused = None
    except AssertionError as refusal:
        refused = str(refusal)
    return told, refused


def test_a_server_keep_alive_caps_the_clients(request):
    """[MQTT-3.2.2-21]: a 5.0 client asking for more than the maximum is
    told the maximum in CONNACK; a 3.1.1 client, which cannot be told, is
    refused (CONNACK 2), as Mosquitto's documentation of max_keepalive says
    since 2.0.12. Debian's Mosquitto 2.0.11, measured here, tells the 5.0
    client too but lets the 3.1.1 client in with the keep-alive it asked
    for."""
    herald = Server(config="[mqtt]\nmax_keep_alive = 10\n")
    request.addfinalizer(herald.stop)
    mosquitto = Mosquitto(conf="max_keepalive 10\n")
    request.addfinalizer(mosquitto.stop)
    told, refused = keep_alive(herald)
    assert told == 10
    assert refused is not None and "Client identifier not valid" in refused, refused
    assert keep_alive(mosquitto) == (10, None)


def receive_maximum(broker):
    """What a 5.0 subscriber with a Receive Maximum of 2 gets of five QoS 1
    messages while it acknowledges none, and then as it acknowledges each;
    and the server's own Receive Maximum from CONNACK."""
    props = Properties(PacketTypes.CONNECT)
    props.ReceiveMaximum = 2
    sub = Client(broker, "5.0", connect_props=props)
    sub.client.manual_ack_set(True)
    sub.subscribe("paho/rm", qos=1)
    pub = Client(broker, "5.0")
    for i in range(5):
        pub.publish("paho/rm", str(i).encode(), qos=1)
    held = [sub.next(), sub.next()]
    sub.nothing(wait=0.5)
    got = [m.payload for m in held]
    while len(got) < 5:
        sub.client.ack(held.pop(0).mid, 1)
        held.append(sub.next())
        got.append(held[-1].payload)
    for m in held:
        sub.client.ack(m.mid, 1)
    server_max = getattr(sub.connack, "ReceiveMaximum", 65535)
    sub.close()
    pub.close()
    return server_max, got


def test_no_more_in_flight_than_the_clients_receive_maximum(server, mosquitto):
    """[MQTT-3.3.4-9]: two unacknowledged at most, the rest in order as
    acknowledgements come. Mosquitto holds to it too; each announces its
    own Receive Maximum (Herald's mqtt.receive_maximum, 1024; Mosquitto's
    max_inflight_messages default, 20)."""
    order = [b"0", b"1", b"2", b"3", b"4"]
    assert receive_maximum(server) == (1024, order)
    assert receive_maximum(mosquitto) == (20, order)


def will_after(broker, will_delay, session_expiry, back_after=None, patience=4):
    """Seconds from a 5.0 client's abnormal disconnect to its will, with
    that will delay and session expiry; None if none came within
    `patience` seconds. `back_after`: the client reconnects (resuming its
    session) that many seconds after it went."""
    import time

    topic = f"paho/will/{uuid.uuid4().hex[:8]}"
    watcher = Client(broker, "5.0")
    watcher.subscribe(topic)
    connect_props = Properties(PacketTypes.CONNECT)
    connect_props.SessionExpiryInterval = session_expiry
    will_props = Properties(PacketTypes.WILLMESSAGE)
    will_props.WillDelayInterval = will_delay
    client_id = f"py-will-{uuid.uuid4().hex[:8]}"
    gone = Client(broker, "5.0", client_id=client_id, will=(topic, b"gone"),
                  connect_props=connect_props, will_props=will_props)
    gone.drop()
    left = time.monotonic()
    if back_after is not None:
        time.sleep(back_after)
        back_props = Properties(PacketTypes.CONNECT)
        back_props.SessionExpiryInterval = session_expiry
        back = Client(broker, "5.0", client_id=client_id, persistent=True,
                      connect_props=back_props)
    try:
        msg = watcher.messages.get(timeout=patience)
        assert msg.payload == b"gone"
        after = time.monotonic() - left
    except queue.Empty:
        after = None
    if back_after is not None:
        back.close()
    watcher.close()
    return after


def test_a_will_waits_for_its_delay_or_the_sessions_end(server, mosquitto):
    """3.1.3.2.2: the will is published when the Will Delay Interval has
    passed or the session ends, whichever is first [MQTT-3.1.3-9], and a
    connection that resumes the session before then cancels it. Timed with
    wide margins (the point is which of the two clocks wins, one second
    against ten). Mosquitto, measured beside Herald, does the same."""
    for broker in (server, mosquitto):
        delayed = will_after(broker, will_delay=1, session_expiry=10)
        assert delayed is not None and 0.8 <= delayed < 2.8, delayed
        ended = will_after(broker, will_delay=10, session_expiry=1)
        assert ended is not None and 0.8 <= ended < 2.8, ended
        back = will_after(broker, will_delay=2, session_expiry=10, back_after=0.3, patience=3)
        assert back is None, back


def refused_codes(broker):
    """SUBACK codes for filters a broker must refuse, each in its own
    SUBSCRIBE, in 5.0 and 3.1.1; and whether the session then goes on."""
    got = {}
    for version in ("5.0", "3.1.1"):
        c = Client(broker, version)
        codes = []
        for topic in ("$share/g", "$share//x"):
            c.client.subscribe(topic, qos=1)
            codes.append(c.acks.get(timeout=PATIENCE)[0].value)
        c.subscribe("paho/after", qos=1)
        c.publish("paho/after", b"still here", qos=1)
        assert c.next().payload == b"still here"
        c.close()
        got[version] = codes
    return got


def test_a_refused_subscription_is_a_failure_code_and_the_session_goes_on(server, mosquitto):
    """Shared-subscription filters that are not well formed (4.8.2: no
    filter after the share name, an empty share name): 0x8F (Topic Filter
    invalid) in 5.0, 0x80 in 3.1.1, and the session goes on. Mosquitto
    2.0.11, measured beside Herald, grants both as if they were plain
    filters. The denied-by-permission case (0x87, 3.1.1's 0x80) is in
    tests/mqtt.rs, with users."""
    assert refused_codes(server) == {"5.0": [0x8F] * 2, "3.1.1": [0x80] * 2}
    assert refused_codes(mosquitto) == {"5.0": [1, 1], "3.1.1": [1, 1]}


def response_information(broker, asked):
    """The Response Information a broker's CONNACK gives a 5.0 client that
    sets Request Response Information to `asked` (None: leaves it out)."""
    props = Properties(PacketTypes.CONNECT)
    if asked is not None:
        props.RequestResponseInformation = asked
    c = Client(broker, "5.0", client_id="paho-asker", connect_props=props)
    got = getattr(c.connack, "ResponseInformation", None)
    c.close()
    return got


def test_response_information_only_when_asked_for(server, mosquitto):
    """[MQTT-3.1.2-28]: 0 (or none) means the server MUST NOT return
    Response Information; with 1 Herald returns `reply/<client id>`.
    Mosquitto 2.0.11, measured beside it, returns none either way (which
    the MAY of 3.1.2.11.7 allows)."""
    assert [response_information(server, a) for a in (1, 0, None)] == [
        "reply/paho-asker", None, None]
    assert [response_information(mosquitto, a) for a in (1, 0, None)] == [None] * 3


def test_an_mqtt_requester_and_a_jms_responder(server):
    """The Response Topic is the JMS reply-to and UTF-8 Correlation Data the
    correlation id [MQTT-3.3.2-15] [MQTT-3.3.2-16]: `herald reply` answers
    a paho request sent to a queue (`$queue/...`), and the answer reaches
    the paho requester with its Correlation Data."""
    asker = Client(server, "5.0")
    asker.subscribe("paho/answers")
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "paho/answers"
    props.CorrelationData = b"q-7"
    asker.publish("$queue/svc/time", b"what time?", qos=1, properties=props)
    server.herald("reply", "queue://svc.time", "noon", "--count", "1")
    got = asker.next()
    assert (got.topic, got.payload) == ("paho/answers", b"noon")
    assert got.properties.CorrelationData == b"q-7"
    asker.close()


def test_a_jms_requester_and_an_mqtt_responder(server):
    """`herald request` sends with a temporary queue as its reply-to, which
    reaches paho as a `$queue/temp/...` Response Topic; paho's answer to it,
    with the Correlation Data it was given, is the reply the CLI prints."""
    import os
    import subprocess

    from conftest import BIN_DIR

    responder = Client(server, "5.0")
    responder.subscribe("paho/clock")
    asking = subprocess.Popen(
        [os.path.join(BIN_DIR, "herald"), "--server", f"herald://{server.native}",
         "request", "topic://paho.clock", "what time?", "--timeout", "10s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        request = responder.next()
        assert request.payload == b"what time?"
        assert request.properties.ResponseTopic.startswith("$queue/temp/")
        props = Properties(PacketTypes.PUBLISH)
        props.CorrelationData = request.properties.CorrelationData
        responder.publish(request.properties.ResponseTopic, b"tea time", qos=1, properties=props)
        out, err = asking.communicate(timeout=PATIENCE)
    finally:
        asking.kill()
    assert asking.returncode == 0, err
    assert out.strip() == "tea time"
    responder.close()
