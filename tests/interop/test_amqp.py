"""The AMQP 1.0 listener with a client this project did not write:
python-qpid-proton (its blocking API). What is built so far: sending to
queues and topics, pre-settled and not, persistent messages, the
anonymous relay; receiving from queues and topics (and topic patterns)
with selectors, under the client's credit, and every outcome (accepted,
released, modified, rejected), and the no-local filter; what the broker's
open says of it; messages crossing between AMQP,
stomp.py and the herald CLI with their properties; bad input refused by
name."""

import json
import os
import urllib.request

import pytest
from proton import Data, Delivery, Described, Message, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container, Copy, DurableSubscription, Filter, Selector
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


class NoLocal(Filter):
    """The no-local filter, as Qpid JMS sends it."""

    def __init__(self):
        super().__init__({symbol("no-local"): Described(symbol("apache.org:no-local-filter:list"), [])})


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


def test_a_no_local_receiver_gets_others_messages_not_its_connections(server):
    c, other = amqp(server), amqp(server)
    mine = c.create_receiver("topic://nl", options=NoLocal())
    theirs = other.create_receiver("topic://nl")
    # Each send waits for its outcome: "mine" is routed before "theirs".
    c.create_sender("topic://nl").send(Message(body="mine"))
    other.create_sender("topic://nl").send(Message(body="theirs"))
    assert [theirs.receive(timeout=PATIENCE).body for _ in range(2)] == ["mine", "theirs"]
    assert mine.receive(timeout=PATIENCE).body == "theirs"
    c.close()
    other.close()


def test_bad_addresses_and_unbuilt_links_are_refused_by_name(server):
    c = amqp(server)
    with pytest.raises(LinkDetached, match="invalid"):
        c.create_sender("queue://bad..name")
    # A durable subscription outlives its connection: no-local is not
    # applied there, and says so.
    with pytest.raises(LinkDetached, match="no-local"):
        c.create_receiver("topic://orders", name="kept", options=[DurableSubscription(), NoLocal()])
    with pytest.raises(LinkDetached, match="selector"):
        c.create_receiver("queue://orders", options=Selector("units >"))
    # The connection goes on.
    c.create_sender("queue://fine").send(Message(body="ok"))
    c.close()
    assert [m["body"] for m in received(server, "queue://fine", 1)] == ["ok"]


def test_the_python_examples_in_the_docs_run_as_written(server):
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "amqp.md")
    with open(docs) as f:
        blocks = [b.split("```", 1)[0] for b in f.read().split("```python\n")[1:]]
    host, port = server.amqp
    send, receive = (compile(b.replace("127.0.0.1:5672", f"{host}:{port}"), "docs/amqp.md", "exec") for b in blocks)
    exec(send, {})
    out = server.herald("sub", "queue://orders", "--count", "1", "--timeout", "5s")
    assert "orders [region=EU] 2 laptops" in out, out
    names = {}
    exec(send, names)
    exec(receive, names)
    assert names["message"].body == "2 laptops"


def test_a_queue_is_received_under_credit_and_every_outcome_does_what_it_says(server):
    c = amqp(server)
    sender = c.create_sender("queue://work")
    for i in range(6):
        sender.send(Message(body=f"job {i}", properties={"n": i}))
    receiver = c.create_receiver("queue://work", credit=2)
    for i in range(6):
        m = receiver.receive(timeout=PATIENCE)
        assert (m.body, m.properties["n"], m.delivery_count) == (f"job {i}", i, 0)
        receiver.accept()
    # One message through every outcome.
    sender.send(Message(body="once more"))
    receiver.receive(timeout=PATIENCE)
    # Released, and modified without delivery-failed: back untried, not
    # counted; modified with delivery-failed: back, counted.
    receiver.release(delivered=False)
    assert receiver.receive(timeout=PATIENCE).delivery_count == 0
    receiver.release(delivered=True)
    assert receiver.receive(timeout=PATIENCE).delivery_count == 0
    failed = receiver.fetcher.unsettled.popleft()
    failed.local.failed = True
    failed.update(Delivery.MODIFIED)
    failed.settle()
    assert receiver.receive(timeout=PATIENCE).delivery_count == 1
    # Rejected: to the dead-letter queue, with why.
    receiver.reject()
    c.close()
    dead = received(server, "queue://DLQ.work", 1)
    assert [m["body"] for m in dead] == ["once more"]
    assert "rejected" in dead[0]["properties"]["HeraldDeadLetterReason"], dead[0]


def test_topic_subscribers_get_what_their_selector_takes_from_every_protocol(server):
    c = amqp(server)
    cheap = c.create_receiver("topic://sales.eu", name="cheap", options=Selector("units > 2"))
    everything = c.create_receiver("topic://sales.eu", name="everything")
    # Subscribed once a probe from another protocol comes back.
    conn, inbox = connect(server)
    probe = c.create_receiver("topic://probe")
    conn.send("/topic/probe", "x")
    assert probe.receive(timeout=PATIENCE).body == "x"
    conn.send("/topic/sales.eu", "one", headers={"units": "1"})
    conn.send("/topic/sales.eu", "five", headers={"units": "5"}, receipt="sent")
    inbox.receipt()
    server.herald("pub", "topic://sales.eu", "ten", "--property", "units=10")
    got = [everything.receive(timeout=PATIENCE) for _ in range(3)]
    assert [m.body for m in got] == ["one", "five", "ten"]
    assert got[2].properties["units"] == 10
    assert got[0].address == "topic://sales.eu"
    # A STOMP header is a string: only the typed 10 is > 2.
    assert cheap.receive(timeout=PATIENCE).body == "ten"
    for r in (cheap, everything):
        r.accept()
    c.close()
    conn.disconnect()


def test_amqp_receivers_get_text_bytes_and_map_bodies_with_jms_headers(server):
    c = amqp(server)
    receiver = c.create_receiver("queue://bodies")
    server.herald("pub", "queue://bodies", "plain text", "--persistent")
    sender = c.create_sender("queue://bodies")
    sender.send(Message(body=b"\x00\xff", reply_to="topic://answers", correlation_id="c-1"))
    sender.send(Message(body={"k": 1, "name": "x"}, priority=9, ttl=60))
    first, second, third = (receiver.receive(timeout=PATIENCE) for _ in range(3))
    receiver.accept()
    assert first.body == "plain text" and first.durable
    assert second.body == b"\x00\xff"
    assert second.reply_to == "topic://answers" and second.correlation_id == "c-1"
    assert third.body == {"k": 1, "name": "x"} and third.priority == 9
    assert 0 < third.ttl <= 60
    c.close()


class SourceCapabilities:
    """A receiver option: capabilities of the source (Qpid JMS's
    `shared`, `global`)."""

    def __init__(self, *capabilities):
        self.capabilities = capabilities

    def apply(self, link):
        caps = link.source.capabilities
        caps.put_array(False, Data.SYMBOL)
        caps.enter()
        for c in self.capabilities:
            caps.put_symbol(symbol(c))
        caps.exit()

    def test(self, link):
        return link.is_receiver


def test_request_reply_through_a_dynamic_receivers_temporary_queue(server):
    client = amqp(server)
    replies = client.create_receiver(None, dynamic=True)
    address = replies.link.remote_source.address
    assert address.startswith("queue://temp."), address
    client.create_sender("queue://requests").send(Message(body="ping", reply_to=address))
    service = amqp(server)
    request = service.create_receiver("queue://requests").receive(timeout=PATIENCE)
    assert request.reply_to == address
    service.create_sender(None).send(Message(address=request.reply_to, body="pong"))
    assert replies.receive(timeout=PATIENCE).body == "pong"
    # Only the connection that made it may consume from it.
    with pytest.raises(LinkDetached):
        service.create_receiver(address)
    client.close()
    service.close()


def test_a_durable_subscription_keeps_messages_while_its_client_is_away(server):
    def subscriber():
        c = amqp(server, container_id="reports")
        return c, c.create_receiver("topic://news", name="daily", options=DurableSubscription())

    c, daily = subscriber()
    # Detached without closing: the subscription stays, and keeps.
    daily.link.detach()
    c.close()
    server.herald("pub", "topic://news", "while away", "--persistent")
    c, daily = subscriber()
    assert daily.receive(timeout=PATIENCE).body == "while away"
    daily.accept()
    # Closed for good: the subscription ends.
    daily.close()
    subs = json.loads(urllib.request.urlopen(f"{server.admin}/api/subscriptions").read())
    assert not [s for s in subs if s.get("name") == "daily"], subs
    c.close()


def test_a_shared_subscription_splits_a_topic_between_its_consumers(server):
    one, two = amqp(server), amqp(server)
    shared = SourceCapabilities("topic", "shared", "global")
    first = one.create_receiver("topic://jobs", name="workers", options=shared)
    second = two.create_receiver("topic://jobs", name="workers|2", options=shared)
    sender = one.create_sender("topic://jobs", options=TopicTarget())
    for i in range(10):
        sender.send(Message(body=f"{i}"))
    got = []
    for r in (first, second):
        try:
            while True:
                got.append(r.receive(timeout=1).body)
                r.accept()
        except Exception:
            pass
    assert sorted(got, key=int) == [str(i) for i in range(10)], got
    one.close()
    two.close()


def test_a_browser_sees_what_a_queue_holds_and_leaves_it_there(server):
    c = amqp(server)
    sender = c.create_sender("queue://stock")
    for i in range(3):
        sender.send(Message(body=f"item {i}", properties={"n": i}))
    browser = c.create_receiver("queue://stock", name="look", options=[Copy(), Selector("n > 0")])
    assert [browser.receive(timeout=PATIENCE).body for _ in range(2)] == ["item 1", "item 2"]
    browser.close()
    consumer = c.create_receiver("queue://stock")
    assert [consumer.receive(timeout=PATIENCE).body for _ in range(3)] == ["item 0", "item 1", "item 2"]
    consumer.accept()
    c.close()


class TransactedSend(MessagingHandler, TransactionHandler):
    """Proton's transactions: three messages sent in one, then committed
    or aborted."""

    def __init__(self, url, commit):
        super().__init__()
        self.url, self.commit, self.result = url, commit, None

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, "queue://txq")
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        for i in range(3):
            event.transaction.send(self.sender, Message(body=f"{self.commit} {i}", durable=True))
        if self.commit:
            event.transaction.commit()
        else:
            event.transaction.abort()

    def on_transaction_committed(self, event):
        self.result = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event):
        self.result = "aborted"
        self.conn.close()


def test_a_transaction_routes_its_messages_when_committed_and_none_when_aborted(server):
    host, port = server.amqp
    for commit in (False, True):
        handler = TransactedSend(f"amqp://{host}:{port}", commit)
        Container(handler).run()
        assert handler.result == ("committed" if commit else "aborted")
    got = received(server, "queue://txq", 3)
    assert [m["body"] for m in got] == ["True 0", "True 1", "True 2"]
    # And nothing of the aborted one.
    assert server.herald("sub", "queue://txq", "--count", "1", "--timeout", "300ms") == ""


def test_the_broker_names_itself_and_its_capabilities_and_takes_an_empty_array(server):
    from proton import Array, UNDESCRIBED
    c = amqp(server)
    props = c.conn.remote_properties
    assert props[symbol("product")] == "herald", props
    assert props[symbol("version")], props
    # Qpid JMS prefixes queue and topic names with these, and strips them.
    assert props[symbol("queue-prefix")] == "queue://", props
    assert props[symbol("topic-prefix")] == "topic://", props
    caps = c.conn.remote_offered_capabilities
    names = {str(x) for x in getattr(caps, "elements", caps)}
    assert {"ANONYMOUS-RELAY", "DELAYED_DELIVERY", "SHARED-SUBS", "sole-connection-for-container"} <= names, names
    # Proton writes an empty array with its element constructor (null):
    # a valid encoding, accepted (not rejected as a decode error).
    sender = c.create_sender("queue://arrays")
    sender.send(Message(body=Array(UNDESCRIBED, Data.NULL)))
    c.close()


def test_receivers_take_wildcards_plain_durable_and_shared(server):
    plain = amqp(server)
    everything = plain.create_receiver("topic://sales.#")
    regions = plain.create_receiver("topic://sales.*.phones")
    kept = amqp(server, container_id="wild")
    durable = kept.create_receiver("topic://sales.#", name="all-sales", options=DurableSubscription())
    shared = kept.create_receiver("topic://sales.eu.#", name="eu",
                                  options=SourceCapabilities("topic", "shared", "global"))
    sender = plain.create_sender("topic://sales.eu.phones", options=TopicTarget())
    sender.send(Message(body="sold"))
    for r in (everything, regions, durable, shared):
        m = r.receive(timeout=PATIENCE)
        assert m.body == "sold"
        r.accept()
    # A queue is a name, not a pattern.
    with pytest.raises(LinkDetached) as refused:
        plain.create_receiver("queue://sales.#")
    assert "wildcard" in str(refused.value), refused.value
    durable.close()
    kept.close()
    plain.close()
