"""A JMS broker's address model with clients this project did not write:
message groups, consumer priority, redelivery delay and diverts through
stomp.py and python-qpid-proton."""

import queue
import time

import pytest
from proton import Message, PropertyDict, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

from conftest import PATIENCE, Server, connect


def amqp(server):
    host, port = server.amqp
    return BlockingConnection(f"amqp://{host}:{port}", timeout=PATIENCE)


class Properties(LinkOption):
    """A receiver's link properties: its consumer priority, as Qpid JMS and
    Artemis write it, or that it wants to be the queue's only consumer."""

    def __init__(self, **properties):
        self.properties = properties

    def apply(self, link):
        link.properties = PropertyDict({symbol(k): v for k, v in self.properties.items()})


def Priority(priority):
    return Properties(priority=priority)


@pytest.fixture
def configured():
    s = Server(
        config='[[addresses]]\nmatch = "queue://slow"\nredelivery_delay = "400ms"\n\n'
        '[[diverts]]\nname = "eu"\nfrom = "topic://sales.#"\nto = "queue://eu-orders"\n'
        "selector = \"region = 'EU'\"\n"
    )
    yield s
    s.stop()


def test_stomp_groups_go_whole_to_one_subscriber_marked_first(server):
    subscribers = []
    for name in ("a", "b"):
        conn, inbox = connect(server)
        conn.subscribe("/queue/grouped", id=name, ack="auto", receipt=name)
        assert inbox.receipt() == name
        subscribers.append(inbox)
    pub, pub_inbox = connect(server)
    for i in range(8):
        pub.send("/queue/grouped", str(i), headers={"JMSXGroupID": f"g{i % 2}"})
    pub.send("/queue/grouped", "sync", headers={"JMSXGroupID": "g0"}, receipt="sent")
    assert pub_inbox.receipt() == "sent"
    got, count = {}, 0
    deadline = time.monotonic() + PATIENCE
    while count < 9:
        assert time.monotonic() < deadline, got
        for k, inbox in enumerate(subscribers):
            try:
                frame = inbox.messages.get(timeout=0.05)
            except queue.Empty:
                continue
            got.setdefault(frame.headers["JMSXGroupID"], []).append((k, frame))
            count += 1
    for group, frames in got.items():
        assert len({k for k, _ in frames}) == 1, f"{group} split: {[k for k, _ in frames]}"
        firsts = [f.headers.get("JMSXGroupFirstForConsumer") for _, f in frames]
        assert firsts[0] == "true", firsts
        assert all(x is None for x in firsts[1:]), firsts
    assert [f.body for _, f in got["g1"]] == ["1", "3", "5", "7"]


def test_stomp_priority_header_chooses_the_consumer(server):
    low, low_inbox = connect(server)
    low.subscribe("/queue/ranked", id="low", ack="auto", receipt="l")
    low_inbox.receipt()
    high, high_inbox = connect(server)
    high.subscribe("/queue/ranked", id="high", ack="auto", headers={"priority": "9"}, receipt="h")
    high_inbox.receipt()
    pub, pub_inbox = connect(server)
    for i in range(5):
        pub.send("/queue/ranked", str(i))
    pub.send("/queue/ranked", "last", receipt="sent")
    pub_inbox.receipt()
    assert [high_inbox.next().body for _ in range(6)] == ["0", "1", "2", "3", "4", "last"]
    assert low_inbox.nothing()
    bad, bad_inbox = connect(server)
    bad.subscribe("/queue/ranked", id="x", headers={"priority": "high"})
    error = bad_inbox.errors.get(timeout=PATIENCE)
    assert "priority" in error.body


def test_amqp_groups_and_receiver_priority(server):
    c = amqp(server)
    low = c.create_receiver("queue://jobs", credit=100, name="low")
    high = c.create_receiver("queue://jobs", credit=100, name="high", options=Priority(7))
    sender = c.create_sender("queue://jobs")
    for i in range(4):
        sender.send(Message(body=str(i), group_id="batch"))
    got = [high.receive(timeout=PATIENCE) for _ in range(4)]
    for m in got:
        high.accept()
    assert [m.body for m in got] == ["0", "1", "2", "3"]
    # Sent over AMQP, received as sent: the group's first-for-consumer
    # marker, a property of the delivery, is not added to it.
    assert all(not m.annotations and not m.properties for m in got)
    assert all(m.group_id == "batch" for m in got)
    with pytest.raises(Exception):
        low.receive(timeout=0.3)
    c.close()


def test_an_exclusive_amqp_receiver_takes_every_message_while_attached(server):
    c = amqp(server)
    plain = c.create_receiver("queue://solo", credit=100, name="plain")
    solo = c.create_receiver("queue://solo", credit=100, name="solo", options=Properties(exclusive=True))
    sender = c.create_sender("queue://solo")
    for i in range(4):
        sender.send(Message(body=str(i)))
    got = [solo.receive(timeout=PATIENCE) for _ in range(4)]
    solo.accept()
    assert [m.body for m in got] == ["0", "1", "2", "3"]
    with pytest.raises(Exception):
        plain.receive(timeout=0.3)
    # Not a boolean: refused, the property named; the connection goes on.
    with pytest.raises(LinkDetached, match="exclusive"):
        c.create_receiver("queue://solo", name="odd", options=Properties(exclusive="yes"))
    with pytest.raises(LinkDetached, match="priority"):
        c.create_receiver("queue://solo", name="odd2", options=Priority("high"))
    sender.send(Message(body="4"))
    assert solo.receive(timeout=PATIENCE).body == "4"
    c.close()


def test_a_released_amqp_delivery_waits_out_the_redelivery_delay(configured):
    c = amqp(configured)
    c.create_sender("queue://slow").send(Message(body="retry me"))
    receiver = c.create_receiver("queue://slow", credit=1)
    first = receiver.receive(timeout=PATIENCE)
    assert first.body == "retry me"
    released = time.monotonic()
    receiver.release()
    again = receiver.receive(timeout=PATIENCE)
    assert again.body == "retry me"
    assert time.monotonic() - released >= 0.4
    receiver.accept()
    c.close()


def test_a_divert_files_selected_stomp_messages_for_an_amqp_receiver(configured):
    pub, inbox = connect(configured)
    for region in ("EU", "US", "EU"):
        pub.send("/topic/sales.eu", region, headers={"region": region})
    pub.send("/topic/sales.eu", "done", headers={"region": "none"}, receipt="sent")
    assert inbox.receipt() == "sent"
    c = amqp(configured)
    receiver = c.create_receiver("queue://eu-orders", credit=10)
    got = [receiver.receive(timeout=PATIENCE) for _ in range(2)]
    receiver.accept()
    assert [m.body for m in got] == ["EU", "EU"]
    assert got[0].properties["HeraldDivertedFrom"] == "topic://sales.eu"  # sent over STOMP
    with pytest.raises(Exception):
        receiver.receive(timeout=0.3)
    # Sent over AMQP, the copy keeps the sender's bare message; the broker
    # says where it came from in an annotation.
    c.create_sender("topic://sales.eu").send(Message(body="amqp", properties={"region": "EU"}))
    copy = receiver.receive(timeout=PATIENCE)
    receiver.accept()
    assert copy.properties == {"region": "EU"}
    assert copy.annotations[symbol("x-opt-herald-diverted-from")] == "topic://sales.eu"
    c.close()
