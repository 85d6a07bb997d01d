"""The AMQP 1.0 listener with a client this project did not write:
python-qpid-proton (its blocking API). What is built so far: sending to
queues and topics, pre-settled and not, persistent messages, the
anonymous relay, and messages read by stomp.py and the herald CLI with
their properties; bad input refused by name."""

import json
import os

import pytest
from proton import Data, Message, symbol
from proton.utils import BlockingConnection, LinkDetached, SendException

from conftest import PATIENCE, connect


def amqp(server, **kwargs):
    host, port = server.amqp
    return BlockingConnection(f"amqp://{host}:{port}", timeout=PATIENCE, **kwargs)


def received(server, destination, count):
    """The messages the herald CLI takes from `destination`, as JSON."""
    out = server.herald("sub", destination, "--count", str(count), "--timeout", "5s", "--format", "json")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_messages_sent_over_amqp_reach_a_queue_with_their_properties(server):
    c = amqp(server)
    sender = c.create_sender("queue://orders")
    sender.send(Message(body="two laptops", properties={"units": 2, "region": "EU"}, durable=True,
                        priority=7, subject="order", correlation_id="req-1"))
    sender.send(Message(body=b"\x00\x01binary", content_type="application/octet-stream"))
    sender.send(Message(body={"sku": "x1", "qty": 3}))
    c.close()
    got = received(server, "queue://orders", 3)
    assert len(got) == 3, got
    first = got[0]
    assert first["body"] == "two laptops"
    assert first["properties"]["units"] == 2
    assert first["properties"]["region"] == "EU"
    assert first["headers"]["persistent"] is True
    assert first["headers"]["priority"] == 7
    assert first["headers"]["type"] == "order"
    assert first["headers"]["correlation_id"] == "req-1"
    assert got[1]["headers"]["content_type"] == "application/octet-stream"
    assert got[1]["body"] == "\x00\x01binary"
    assert got[2]["body"] == {"sku": "x1", "qty": 3}


def test_a_bare_address_is_a_queue_unless_the_target_says_topic(server):
    conn, inbox = connect(server)
    conn.subscribe("/topic/news.eu", id="1")
    conn.subscribe("/queue/plain", id="2")
    # stomp.py's subscriptions are in place once a receipt comes back.
    conn.send("/topic/probe", "x", receipt="r1")
    inbox.receipt()
    c = amqp(server)
    c.create_sender("plain").send(Message(body="to the queue"))
    topic = c.create_sender("news.eu", options=TopicTarget())
    topic.send(Message(body="to the topic"))
    c.close()
    bodies = sorted(inbox.next().body for _ in range(2))
    assert bodies == ["to the queue", "to the topic"]
    conn.disconnect()


class TopicTarget:
    """A link option: the target is a topic (Qpid JMS's capability)."""

    def apply(self, link):
        link.target.capabilities.put_array(False, Data.SYMBOL)
        link.target.capabilities.enter()
        link.target.capabilities.put_symbol(symbol("topic"))
        link.target.capabilities.exit()

    def test(self, link):
        return link.is_sender


def test_the_anonymous_relay_sends_each_message_where_its_address_says(server):
    conn, inbox = connect(server)
    conn.subscribe("/topic/alerts", id="1")
    conn.send("/topic/probe", "x", receipt="r1")
    inbox.receipt()
    c = amqp(server)
    relay = c.create_sender(None)
    relay.send(Message(address="topic://alerts", body="fire"))
    relay.send(Message(address="queue://later", body="kept", durable=True))
    # No address: rejected; the link goes on.
    with pytest.raises(SendException):
        relay.send(Message(body="nowhere"))
    relay.send(Message(address="topic://alerts", body="again"))
    c.close()
    assert [inbox.next().body for _ in range(2)] == ["fire", "again"]
    assert [m["body"] for m in received(server, "queue://later", 1)] == ["kept"]
    conn.disconnect()


def test_bad_addresses_and_unbuilt_links_are_refused_by_name(server):
    c = amqp(server)
    with pytest.raises(LinkDetached, match="invalid"):
        c.create_sender("queue://bad..name")
    with pytest.raises(LinkDetached, match="not built yet"):
        c.create_receiver("queue://orders")
    # The connection goes on.
    c.create_sender("queue://fine").send(Message(body="ok"))
    c.close()
    assert [m["body"] for m in received(server, "queue://fine", 1)] == ["ok"]


def test_the_python_example_in_the_docs_runs_as_written(server):
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "amqp.md")
    with open(docs) as f:
        code = f.read().split("```python\n", 1)[1].split("```", 1)[0]
    host, port = server.amqp
    exec(compile(code.replace("127.0.0.1:5672", f"{host}:{port}"), "docs/amqp.md", "exec"), {})
    out = server.herald("sub", "queue://orders", "--count", "1", "--timeout", "5s")
    assert "orders [region=EU] 2 laptops" in out, out
