"""The python-qpid-proton examples that need a broker, against Herald.

The PyPI package does not ship its examples, so each is written here from
its documented behaviour (proton's python/examples: helloworld, simple
send and receive, client and server over a dynamic reply queue, the
synchronous client, transactional send and receive, coloured messages
with a selected receive, the queue browser), with the event-driven API the
examples use, and checked against the output proton's own
test_examples.py expects. The server example checks that the broker
offers ANONYMOUS-RELAY before it relies on it, as proton's current one
does; simple_recv's ids are compared as the ulongs they were sent as."""

import threading

import pytest
from proton import Message, Timeout, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container, Copy, Selector
from proton.utils import SyncRequestResponse, BlockingConnection

from conftest import PATIENCE

REQUESTS = ["Twas brillig, and the slithy toves",
            "Did gire and gymble in the wabe.",
            "All mimsy were the borogroves,",
            "And the mome raths outgrabe."]


def url(server):
    return "%s:%d/examples" % server.amqp


def run(*handlers):
    """Runs handlers in one container until every connection closes."""
    c = Container(*handlers)
    c.timeout = PATIENCE
    c.run()


class HelloWorld(MessagingHandler):
    def __init__(self, url, out):
        super().__init__()
        self.url, self.out = url, out

    def on_start(self, event):
        conn = event.container.connect(self.url.split("/")[0])
        event.container.create_receiver(conn, "examples")
        event.container.create_sender(conn, "examples")

    def on_sendable(self, event):
        event.sender.send(Message(body="Hello World!"))
        event.sender.close()

    def on_message(self, event):
        self.out.append(event.message.body)
        event.connection.close()


class Send(MessagingHandler):
    """simple_send: 100 messages, each id its number, confirmed."""

    def __init__(self, url, count=100):
        super().__init__()
        self.url, self.total = url, count
        self.sent = self.confirmed = 0

    def on_start(self, event):
        event.container.create_sender(self.url)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.total:
            self.sent += 1
            event.sender.send(Message(id=self.sent, body={"sequence": self.sent}))

    def on_accepted(self, event):
        self.confirmed += 1
        if self.confirmed == self.total:
            event.connection.close()


class Recv(MessagingHandler):
    """simple_recv: prints each body once, skipping ids seen, and (as
    proton 0.37's did) expects ids that order as numbers."""

    def __init__(self, url, count, out, options=None):
        super().__init__()
        self.url, self.expected, self.out, self.options = url, count, out, options
        self.seen = set()
        self.last = 0

    def on_start(self, event):
        event.container.create_receiver(self.url, options=self.options)

    def on_message(self, event):
        m = event.message
        if m.id in self.seen:
            return
        self.seen.add(m.id)
        if m.id is not None:
            assert m.id > self.last, f"id {m.id!r} after {self.last!r}"
            self.last = m.id
        self.out.append(str(m.body))
        if len(self.out) == self.expected:
            event.receiver.close()
            event.connection.close()


def test_helloworld(server):
    out = []
    run(HelloWorld(url(server), out))
    assert out == ["Hello World!"]


def test_simple_send_and_receive(server):
    out = []
    run(Send(url(server)))
    run(Recv(url(server), 100, out))
    assert out == ["{'sequence': %i}" % (i + 1) for i in range(100)]


class Server(MessagingHandler):
    """server: answers each request in upper case through an anonymous
    sender, which it uses only if the broker offers the relay."""

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.received = []

    def on_start(self, event):
        self.conn = event.container.connect(self.url.split("/")[0])
        self.receiver = event.container.create_receiver(self.conn, "examples")
        self.relay = None

    def on_connection_opened(self, event):
        if event.connection != self.conn:
            return  # the client's, in this container
        if symbol("ANONYMOUS-RELAY") in (event.connection.remote_offered_capabilities or []):
            self.relay = event.container.create_sender(self.conn, None)
        else:
            raise AssertionError("Server needs a broker which supports ANONYMOUS-RELAY")

    def on_message(self, event):
        self.received.append(event.message.body)
        self.relay.send(Message(address=event.message.reply_to, body=event.message.body.upper(),
                                correlation_id=event.message.correlation_id))
        if len(self.received) == len(REQUESTS):
            event.connection.close()


class Client(MessagingHandler):
    """client: sends each request with a dynamic receiver's address as its
    reply-to, one after the other, and prints the answers."""

    def __init__(self, url, out):
        super().__init__()
        self.url, self.out = url, out
        self.requests = list(REQUESTS)

    def on_start(self, event):
        self.sender = event.container.create_sender(self.url)
        self.receiver = event.container.create_receiver(self.sender.connection, None, dynamic=True)

    def next_request(self):
        self.sender.send(Message(reply_to=self.receiver.remote_source.address,
                                 body=self.requests[0]))

    def on_link_opened(self, event):
        if event.receiver == self.receiver:
            self.next_request()

    def on_message(self, event):
        self.out.append("%s => %s" % (self.requests.pop(0), event.message.body))
        if self.requests:
            self.next_request()
        else:
            event.connection.close()


EXPECTED_ANSWERS = ["%s => %s" % (r, r.upper()) for r in REQUESTS]


def serving(server):
    """The server example, running in a thread of its own (a process of
    its own, upstream) until it has answered every request."""
    s = Server(url(server))
    t = threading.Thread(target=run, args=(s,))
    t.start()
    return s, t


def test_client_and_server(server):
    s, t = serving(server)
    out = []
    run(Client(url(server), out))
    t.join(PATIENCE)
    assert out == EXPECTED_ANSWERS
    assert s.received == REQUESTS


def test_sync_client_and_server(server):
    s, t = serving(server)
    conn = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    client = SyncRequestResponse(conn, "examples")
    out = ["%s => %s" % (r, client.call(Message(body=r)).body) for r in REQUESTS]
    conn.close()
    t.join(PATIENCE)
    assert out == EXPECTED_ANSWERS
    assert s.received == REQUESTS


class TxSend(MessagingHandler, TransactionHandler):
    """tx_send: 100 messages in transactions of 10, each committed."""

    def __init__(self, url, total=100, batch=10):
        super().__init__()
        self.url, self.total, self.batch = url, total, batch
        self.sent = self.committed = self.in_batch = 0
        self.transaction = None

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.url.split("/")[0])
        self.sender = event.container.create_sender(self.conn, "examples")
        self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.transaction = event.transaction
        self.send()

    def on_sendable(self, event):
        self.send()

    def send(self):
        while self.transaction and self.sender.credit and self.sent < self.total:
            self.sent += 1
            self.in_batch += 1
            self.transaction.send(self.sender, Message(id=self.sent, body={"sequence": self.sent}))
            if self.in_batch == self.batch:
                self.transaction.commit()
                self.transaction = None

    def on_transaction_committed(self, event):
        self.committed += self.in_batch
        self.in_batch = 0
        if self.committed == self.total:
            event.connection.close()
        else:
            self.container.declare_transaction(self.conn, handler=self)


class TxRecv(MessagingHandler, TransactionHandler):
    """tx_recv: accepts in transactions of 10, with credit for a batch
    given once each is declared."""

    def __init__(self, url, out, total=100, batch=10):
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.out, self.total, self.batch = url, out, total, batch
        self.in_batch = self.committed = 0

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.url.split("/")[0])
        self.receiver = event.container.create_receiver(self.conn, "examples")
        self.container.declare_transaction(self.conn, handler=self)
        self.transaction = None

    def on_message(self, event):
        self.out.append(str(event.message.body))
        self.transaction.accept(event.delivery)
        self.in_batch += 1
        if self.in_batch == self.batch:
            self.transaction.commit()
            self.transaction = None

    def on_transaction_declared(self, event):
        self.receiver.flow(self.batch)
        self.transaction = event.transaction

    def on_transaction_committed(self, event):
        self.committed += self.in_batch
        self.in_batch = 0
        if self.committed < self.total:
            self.container.declare_transaction(self.conn, handler=self)
        else:
            event.connection.close()


def test_tx_send_and_tx_recv(server):
    out = []
    run(TxSend(url(server)))
    run(TxRecv(url(server), out))
    assert out == ["{'sequence': %i}" % (i + 1) for i in range(100)]
    # All were accepted, and committed: nothing is left.
    c = BlockingConnection("amqp://%s:%d" % server.amqp, timeout=PATIENCE)
    r = c.create_receiver("examples")
    with pytest.raises(Timeout):
        r.receive(timeout=0.5)
    c.close()


class ColourSend(MessagingHandler):
    """colour_send: 100 messages, red and green in turn, in a property."""

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.sent = self.confirmed = 0

    def on_start(self, event):
        event.container.create_sender(self.url)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < 100:
            colour = "green" if self.sent % 2 == 0 else "red"
            self.sent += 1
            event.sender.send(Message(id=self.sent, properties={"colour": colour},
                                      body="%s %i" % (colour, self.sent)))

    def on_accepted(self, event):
        self.confirmed += 1
        if self.confirmed == 100:
            event.connection.close()


def test_colour_send_then_selected_and_simple_recv(server):
    run(ColourSend(url(server)))
    green, red = [], []
    run(Recv(url(server), 50, green, options=Selector("colour = 'green'")))
    run(Recv(url(server), 50, red))
    assert green == ["green %i" % (i + 1) for i in range(100) if i % 2 == 0]
    assert red == ["red %i" % (i + 1) for i in range(100) if i % 2 == 1]


def test_the_queue_browser_leaves_the_queue_as_it_was(server):
    run(Send(url(server), 10))
    for _ in range(2):
        seen = []
        run(Recv(url(server), 10, seen, options=Copy()))
        assert seen == ["{'sequence': %i}" % (i + 1) for i in range(10)]
    taken = []
    run(Recv(url(server), 10, taken))
    assert taken == seen


class TwoConnections(MessagingHandler):
    """One container, two connections (proton gives both its container
    id), each sending a message."""

    def __init__(self, address):
        super().__init__()
        self.address = address
        self.senders, self.errors = [], []
        self.accepted = 0

    def on_start(self, event):
        self.connections = [event.container.connect(self.address) for _ in range(2)]

    def on_connection_opened(self, event):
        event.container.create_sender(event.connection, "examples")

    def on_sendable(self, event):
        if event.sender not in self.senders:
            self.senders.append(event.sender)
            event.sender.send(Message(body="hello"))

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == 2:
            self.close()

    def on_connection_error(self, event):
        self.errors.append(str(event.connection.remote_condition))
        self.close()

    def close(self):
        for c in self.connections:
            c.close()


def test_a_container_may_open_several_connections(server):
    h = TwoConnections("%s:%d" % server.amqp)
    run(h)
    assert h.errors == []
    assert h.accepted == 2
