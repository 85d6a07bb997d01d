"""AMQP 1.0 to AMQP 1.0 through Herald, exactly: python-qpid-proton and
rhea (tests/browser/amqp_peer.mjs) senders × proton and rhea receivers.
Every AMQP primitive type as a body (`amqp-value`) and as an application
property; lists, maps and arrays of each, empty ones too; message and
correlation ids of each id type; data and sequence bodies; the five JMS
message types as Qpid JMS writes them, with every JMS header. Each
message is described with the type of every value, and what arrives
must be what was sent: the bare message is immutable (AMQP 1.0 part 3,
section 3.2), and nothing is added to it."""

import json
import os
import subprocess
import uuid

import pytest
from proton import (Array, Data, Message, byte, char, decimal32, decimal64, decimal128,
                    float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort)
from proton.utils import BlockingConnection

from conftest import PATIENCE

PEER = os.path.join(os.path.dirname(__file__), "..", "browser", "amqp_peer.mjs")


def v(t, value):
    return {"t": t, "v": value}


UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"

# One value of every primitive type, described.
PRIMITIVES = [
    v("null", None),
    v("bool", True),
    v("bool", False),
    v("ubyte", 255),
    v("ushort", 65535),
    v("uint", 4294967295),
    v("uint", 0),
    v("ulong", "18446744073709551615"),
    v("ulong", "7"),
    v("byte", -128),
    v("short", -32768),
    v("int", -2147483648),
    v("int", 1),
    v("long", "-9223372036854775808"),
    v("long", "3"),
    v("float", 1.5),
    v("double", -2.25),
    v("decimal32", "3040000a"),
    v("decimal64", "30c0000000000064"),
    v("decimal128", "30400000000000000000000000000001"),
    v("char", "é"),
    v("timestamp", 1700000000123),
    v("uuid", UUID),
    v("binary", "00ff10"),
    v("binary", ""),
    v("string", "héllo"),
    v("string", ""),
    v("symbol", "sym"),
]

# Arrays of each element kind proton and rhea both write, and empty ones.
ARRAYS = [
    {"t": "array", "e": e, "v": items}
    for e, items in [
        ("int", [v("int", 1), v("int", -2)]),
        ("long", [v("long", "5"), v("long", "-6")]),
        ("ulong", [v("ulong", "9")]),
        ("uint", [v("uint", 3)]),
        ("ushort", [v("ushort", 4)]),
        ("ubyte", [v("ubyte", 5)]),
        ("byte", [v("byte", -5)]),
        ("short", [v("short", -4)]),
        ("double", [v("double", 0.5)]),
        ("float", [v("float", 0.25)]),
        ("bool", [v("bool", True), v("bool", False)]),
        ("char", [v("char", "x")]),
        ("timestamp", [v("timestamp", 1)]),
        ("uuid", [v("uuid", UUID)]),
        ("binary", [v("binary", "01")]),
        ("string", [v("string", "a"), v("string", "b")]),
        ("symbol", [v("symbol", "s")]),
        ("int", []),
        ("string", []),
        ("null", []),
    ]
]

COMPOUNDS = [
    v("list", []),
    v("list", PRIMITIVES[:8]),
    v("list", [v("list", [v("int", 1)]), v("map", [])]),
    v("map", []),
    v("map", [[v("string", "k"), v("int", 1)], [v("string", ""), v("char", "c")]]),
    v("map", [[v("ulong", "1"), v("binary", "00")], [v("symbol", "s"), v("list", [])]]),
    *ARRAYS,
]

IDS = [v("ulong", "1"), v("uuid", UUID), v("binary", "00ff"), v("string", "ID:m-1")]


def bare(**fields):
    """A described message: no header fields but the defaults, no
    properties but those given."""
    m = {
        "durable": False, "priority": 4, "id": None, "correlation_id": None, "user_id": None,
        "to": None, "subject": None, "reply_to": None, "content_type": None,
        "content_encoding": None, "absolute_expiry_time": None, "creation_time": None,
        "group_id": None, "group_sequence": None, "annotations": [], "properties": [],
        "body": {"section": "value", "v": v("null", None)},
    }
    m.update(fields)
    return m


def cases():
    """The messages every sender sends, in order."""
    out = []
    for i, p in enumerate(PRIMITIVES):
        out.append(bare(
            id=IDS[i % 4], correlation_id=IDS[(i + 1) % 4],
            properties=[["p", p], ["n", v("int", i)]],
            body={"section": "value", "v": p}))
    for c in COMPOUNDS:
        out.append(bare(body={"section": "value", "v": c}))
    out.append(bare(body={"section": "data", "v": ["0102", ""]}))
    out.append(bare(body={"section": "sequence", "v": [[v("int", 1), v("string", "a")], []]}))
    # A map with a binary value, typed as a JMS MapMessage, and a list as
    # a StreamMessage: the annotation stays (issue 49, item 5).
    out.append(bare(annotations=[["x-opt-jms-msg-type", v("byte", 2)]],
                    body={"section": "value", "v": v("map", [[v("string", "b"), v("binary", "00")]])}))
    out.append(bare(annotations=[["x-opt-jms-msg-type", v("byte", 4)]],
                    body={"section": "value", "v": v("list", [v("int", 1)])}))
    # The five JMS message types and the plain Message, as Qpid JMS writes
    # them, with every JMS header.
    jms = dict(
        durable=True, priority=7, id=v("string", "ID:qpid-1:1:1:1-1"),
        correlation_id=v("string", "ID:qpid-1:1:1:1-0"), to="orders", subject="order",
        reply_to="t_aaa", absolute_expiry_time=1900000000000, creation_time=1700000000000,
        group_id="g1", group_sequence=3,
        properties=[["region", v("string", "EU")], ["units", v("int", 2)],
                    ["ok", v("bool", True)], ["price", v("double", 9.5)]],
    )
    dest = [["x-opt-jms-dest", v("byte", 0)], ["x-opt-jms-reply-to", v("byte", 0)]]
    for kind, content_type, body in [
        (5, None, {"section": "value", "v": v("string", "text")}),
        (3, "application/octet-stream", {"section": "data", "v": ["0001"]}),
        (2, None, {"section": "value", "v": v("map", [[v("string", "k"), v("long", "1")]])}),
        (4, None, {"section": "sequence", "v": [[v("int", 1), v("string", "s")]]}),
        (1, "application/x-java-serialized-object", {"section": "data", "v": ["aced0005"]}),
        (0, None, {"section": "value", "v": v("null", None)}),
    ]:
        out.append(bare(**jms, content_type=content_type, body=body,
                        annotations=[["x-opt-jms-msg-type", v("byte", kind)], *dest]))
    return out


ELEMENT_TYPES = {
    "null": Data.NULL, "bool": Data.BOOL, "ubyte": Data.UBYTE, "ushort": Data.USHORT,
    "uint": Data.UINT, "ulong": Data.ULONG, "byte": Data.BYTE, "short": Data.SHORT,
    "int": Data.INT, "long": Data.LONG, "float": Data.FLOAT, "double": Data.DOUBLE,
    "char": Data.CHAR, "timestamp": Data.TIMESTAMP, "uuid": Data.UUID,
    "binary": Data.BINARY, "string": Data.STRING, "symbol": Data.SYMBOL,
}


def to_proton(d):
    """A described value as proton's typed value."""
    t, x = d["t"], d["v"]
    make = {
        "null": lambda: None, "bool": lambda: x, "ubyte": lambda: ubyte(x),
        "ushort": lambda: ushort(x), "uint": lambda: uint(x), "ulong": lambda: ulong(int(x)),
        "byte": lambda: byte(x), "short": lambda: short(x), "int": lambda: int32(x),
        "long": lambda: int(x), "float": lambda: float32(x), "double": lambda: float(x),
        "decimal32": lambda: decimal32(int(x, 16)), "decimal64": lambda: decimal64(int(x, 16)),
        "decimal128": lambda: decimal128(bytes.fromhex(x)), "char": lambda: char(x),
        "timestamp": lambda: timestamp(x), "uuid": lambda: uuid.UUID(x),
        "binary": lambda: bytes.fromhex(x), "string": lambda: x, "symbol": lambda: symbol(x),
        "list": lambda: [to_proton(i) for i in x],
        "map": lambda: {to_proton(k): to_proton(i) for k, i in x},
        "array": lambda: Array(None, ELEMENT_TYPES[d.get("e")], *[to_proton(i) for i in x]),
    }
    return make[t]()


def describe(x):
    """A value proton decoded, described (subclasses before their bases)."""
    for cls, t, f in [
        (type(None), "null", lambda: None), (bool, "bool", lambda: x),
        (ubyte, "ubyte", lambda: int(x)), (ushort, "ushort", lambda: int(x)),
        (uint, "uint", lambda: int(x)), (ulong, "ulong", lambda: str(int(x))),
        (byte, "byte", lambda: int(x)), (short, "short", lambda: int(x)),
        (int32, "int", lambda: int(x)), (timestamp, "timestamp", lambda: int(x)),
        (decimal32, "decimal32", lambda: "%08x" % x),
        (decimal64, "decimal64", lambda: "%016x" % x),
        (int, "long", lambda: str(x)), (float32, "float", lambda: float(x)),
        (float, "double", lambda: x), (decimal128, "decimal128", lambda: bytes(x).hex()),
        (bytes, "binary", lambda: x.hex()), (memoryview, "binary", lambda: x.hex()),
        (char, "char", lambda: str(x)),
        (symbol, "symbol", lambda: str(x)), (str, "string", lambda: x),
        (uuid.UUID, "uuid", lambda: str(x)), (list, "list", lambda: [describe(i) for i in x]),
        (dict, "map", lambda: [[describe(k), describe(i)] for k, i in x.items()]),
    ]:
        if isinstance(x, cls):
            return v(t, f())
    if isinstance(x, Array):
        name = next(n for n, code in ELEMENT_TYPES.items() if code == x.type)
        return {"t": "array", "e": name, "v": [describe(i) for i in x.elements]}
    raise AssertionError(f"no description for {x!r}")


def to_message(d):
    """A described message as proton sends it."""
    m = Message(durable=d["durable"], priority=d["priority"])
    if d["id"]:
        m.id = to_proton(d["id"])
    if d["correlation_id"]:
        m.correlation_id = to_proton(d["correlation_id"])
    for f in ["subject", "reply_to", "group_id"]:
        if d[f] is not None:
            setattr(m, f, d[f])
    if d["to"] is not None:
        m.address = d["to"]
    if d["content_type"] is not None:
        m.content_type = symbol(d["content_type"])
    if d["group_sequence"] is not None:
        m.group_sequence = d["group_sequence"]
    for f in ["absolute_expiry_time", "creation_time"]:
        if d[f] is not None:
            setattr(m, "expiry_time" if f.startswith("absolute") else f, d[f] / 1000)
    m.annotations = {symbol(k): to_proton(x) for k, x in d["annotations"]} or None
    m.properties = {k: to_proton(x) for k, x in d["properties"]} or None
    body = d["body"]
    if body["section"] == "data":
        assert len(body["v"]) == 1, "proton sends one data section"
        m.body, m.inferred = bytes.fromhex(body["v"][0]), True
    elif body["section"] == "sequence":
        assert len(body["v"]) == 1, "proton sends one sequence section"
        m.body, m.inferred = [to_proton(i) for i in body["v"][0]], True
    elif body["section"] == "value":
        m.body = to_proton(body["v"])
    return m


def describe_id(x):
    """A message or correlation id proton decoded: its API gives a ulong
    id as a plain int (the only integer an id may be)."""
    if x is None:
        return None
    return v("ulong", str(x)) if type(x) is int else describe(x)


def from_message(m):
    """A message proton received, described."""
    ms = lambda t: None if not t else round(t * 1000)  # noqa: E731
    # proton 0.40 gives an absent symbol as symbol(None), which is "None".
    text = lambda s: None if s in (None, "None") else str(s)  # noqa: E731
    if m.inferred and isinstance(m.body, (bytes, memoryview)):
        body = {"section": "data", "v": [bytes(m.body).hex()]}
    elif m.inferred:
        body = {"section": "sequence", "v": [[describe(i) for i in m.body]]}
    else:
        body = {"section": "value", "v": describe(m.body)}
    return {
        "durable": m.durable, "priority": m.priority,
        "id": describe_id(m.id), "correlation_id": describe_id(m.correlation_id),
        "user_id": m.user_id.hex() if m.user_id else None,
        "to": m.address, "subject": m.subject, "reply_to": m.reply_to,
        "content_type": text(m.content_type), "content_encoding": text(m.content_encoding),
        "absolute_expiry_time": ms(m.expiry_time), "creation_time": ms(m.creation_time),
        "group_id": m.group_id, "group_sequence": m.group_sequence or None,
        "annotations": [[str(k), describe(x)] for k, x in (m.annotations or {}).items()],
        "properties": [[k, describe(x)] for k, x in (m.properties or {}).items()],
        "body": body,
    }


def proton_send(server, address, messages):
    c = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    sender = c.create_sender(address)
    for d in messages:
        sender.send(to_message(d))
    c.close()


def proton_receive(server, address, count):
    c = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    receiver = c.create_receiver(address, credit=count)
    out = []
    for _ in range(count):
        m = receiver.receive(timeout=PATIENCE)
        out.append(from_message(m))
        receiver.accept()
    c.close()
    return out


def peer(server, *args, stdin=None):
    host, port = server.amqp
    done = subprocess.run(["node", PEER, args[0], f"{host}:{port}", *args[1:]],
                          input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rhea_send(server, address, messages):
    peer(server, "send", address, stdin=json.dumps(messages))


def rhea_receive(server, address, count):
    return json.loads(peer(server, "receive", address, str(count)))


SENDERS = {"proton": proton_send, "rhea": rhea_send}
RECEIVERS = {"proton": proton_receive, "rhea": rhea_receive}


NO_BODY = {"section": "none"}
NULL_BODY = {"section": "value", "v": v("null", None)}


def sendable(sender, receiver, messages):
    """What `sender` sends of `messages` for `receiver`: proton's message
    sends and reads one data or sequence section at most, and sends no
    body section for a null body."""
    if "proton" in (sender, receiver):
        messages = [m for m in messages
                    if m["body"]["section"] == "value" or len(m["body"]["v"]) == 1]
    if sender == "proton":
        messages = [{**m, "body": NO_BODY} if m["body"] == NULL_BODY else m for m in messages]
    return messages


def as_seen_by(receiver, m):
    """What `receiver` can tell of `m`: proton gives no body and a null
    one alike."""
    if receiver == "proton" and m["body"] == NO_BODY:
        return {**m, "body": NULL_BODY}
    return m


@pytest.mark.parametrize("sender", SENDERS)
@pytest.mark.parametrize("receiver", RECEIVERS)
def test_what_one_client_sends_the_other_receives_exactly(server, sender, receiver):
    sent = sendable(sender, receiver, cases())
    address = f"queue://matrix.{sender}.{receiver}"
    SENDERS[sender](server, address, sent)
    got = RECEIVERS[receiver](server, address, len(sent))
    # A queue delivers higher priorities first, in order within one.
    sent = sorted(sent, key=lambda m: -m["priority"])
    for i, (s, g) in enumerate(zip(sent, got)):
        s = as_seen_by(receiver, s)
        assert g == s, f"message {i}: sent {json.dumps(s)}\nreceived {json.dumps(g)}"
    assert len(got) == len(sent)


def test_binary_correlation_ids_stay_bytes_between_amqp_and_mqtt_5(server):
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    from test_mqtt import Client

    sub = Client(server, "5.0")
    sub.subscribe("ids/from-amqp")
    c = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    receiver = c.create_receiver("topic://ids.from-mqtt")
    sender = c.create_sender("topic://ids.from-amqp")
    for correlation in [b"\x00\xff", b"text"]:
        sender.send(Message(id=ulong(5), correlation_id=correlation, body="x"))
        assert sub.next().properties.CorrelationData == correlation
    pub = Client(server, "5.0")
    props = Properties(PacketTypes.PUBLISH)
    props.CorrelationData = b"\x01\xfe"
    pub.publish("ids/from-mqtt", b"y", properties=props)
    got = receiver.receive(timeout=PATIENCE)
    assert bytes(got.correlation_id) == b"\x01\xfe"
    assert isinstance(got.correlation_id, (bytes, memoryview))
    c.close()
    sub.close()
    pub.close()


def test_bodies_of_1_and_10_mib_pass_on_the_default_config(server):
    bodies = [bytes(i % 251 for i in range(n)) for n in (1 << 20, 10 << 20)]
    proton_send(server, "queue://large", [
        bare(body={"section": "data", "v": [b.hex()]}) for b in bodies])
    c = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    r = c.create_receiver("queue://large", credit=2)
    for b in bodies:
        m = r.receive(timeout=PATIENCE)
        assert bytes(m.body) == b
        r.accept()
    c.close()
    # rhea, both ends, 1 MiB.
    rhea_send(server, "queue://large.rhea", [bare(body={"section": "data", "v": [bodies[0].hex()]})])
    got = rhea_receive(server, "queue://large.rhea", 1)
    assert got[0]["body"] == {"section": "data", "v": [bodies[0].hex()]}
