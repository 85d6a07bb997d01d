"""stomp.py, a STOMP client this project did not write, against Herald's
STOMP listener, and across to the native protocol (the herald CLI)."""

import subprocess
import time

from conftest import BIN_DIR, PATIENCE, connect


def test_every_version_connects(server):
    for version in ("1.0", "1.1", "1.2"):
        conn, inbox = connect(server, version)
        assert conn.is_connected()
        conn.disconnect(receipt="bye")


def test_topic_fan_out_with_wildcards(server):
    subscribers = []
    for i, pattern in enumerate(["/topic/sales.#", "/topic/sales.*.phone", "/topic/sales.eu.phone"]):
        conn, inbox = connect(server)
        conn.subscribe(pattern, id=str(i), receipt=f"s{i}")
        assert inbox.receipt() == f"s{i}"
        subscribers.append((conn, inbox))
    pub, pub_inbox = connect(server)
    pub.send("/topic/sales.eu.phone", "sold", receipt="p")
    assert pub_inbox.receipt() == "p"
    for _, inbox in subscribers:
        frame = inbox.next()
        assert frame.body == "sold"
        assert frame.headers["destination"] == "/topic/sales.eu.phone"


def test_queue_load_balancing_between_two_subscribers(server):
    consumers = []
    for name in ("a", "b"):
        conn, inbox = connect(server)
        conn.subscribe("/queue/work", id=name, ack="client-individual", receipt=name)
        inbox.receipt()
        consumers.append((conn, inbox))
    pub, pub_inbox = connect(server)
    for i in range(20):
        pub.send("/queue/work", str(i))
    pub.send("/queue/work", "end", receipt="sent")
    pub_inbox.receipt()
    got = {"a": [], "b": []}
    deadline = time.time() + PATIENCE
    while sum(len(v) for v in got.values()) < 21 and time.time() < deadline:
        for (conn, inbox), name in zip(consumers, ("a", "b")):
            try:
                frame = inbox.next(timeout=0.05)
            except Exception:
                continue
            got[name].append(frame.body)
            conn.ack(frame.headers["ack"])
    everything = got["a"] + got["b"]
    assert sorted(everything) == sorted([str(i) for i in range(20)] + ["end"])
    assert got["a"] and got["b"], got


def test_client_ack_returns_unacknowledged_messages_after_disconnect(server):
    conn, inbox = connect(server)
    conn.subscribe("/queue/jobs", id="1", ack="client")
    pub, pub_inbox = connect(server)
    for i in range(3):
        pub.send("/queue/jobs", str(i))
    frames = [inbox.next() for _ in range(3)]
    conn.ack(frames[0].headers["ack"], receipt="a")
    assert inbox.receipt() == "a"
    conn.disconnect(receipt="bye")
    again, again_inbox = connect(server)
    again.subscribe("/queue/jobs", id="2", ack="auto")
    redelivered = [again_inbox.next() for _ in range(2)]
    assert [f.body for f in redelivered] == ["1", "2"]
    # A goodbye is not a crash, and STOMP cannot say what the application
    # read: what was not acknowledged returns as it was (docs/stomp.md).
    assert all("redelivered" not in f.headers for f in redelivered)
    again_inbox.nothing()


def test_nack_redelivers_at_once(server):
    conn, inbox = connect(server)
    conn.subscribe("/queue/retry", id="1", ack="client-individual")
    pub, _ = connect(server)
    pub.send("/queue/retry", "again")
    first = inbox.next()
    conn.nack(first.headers["ack"])
    second = inbox.next()
    assert second.body == "again" and second.headers.get("redelivered") == "true"


def test_headers_round_trip_with_escaping(server):
    conn, inbox = connect(server)
    conn.subscribe("/topic/h", id="1", receipt="s")
    inbox.receipt()
    conn.send("/topic/h", "x", headers={"odd": "a:b\\c\nd", "plain": "v", "priority": "8", "correlation-id": "c1"})
    frame = inbox.next()
    assert frame.headers["odd"] == "a:b\\c\nd"
    assert frame.headers["plain"] == "v"
    assert frame.headers["priority"] == "8"
    assert frame.headers["correlation-id"] == "c1"


def test_a_binary_body_with_nul_bytes(server):
    conn, inbox = connect(server, auto_decode=False)
    conn.subscribe("/queue/bin", id="1")
    body = b"\x00\x01binary\x00\xff"
    conn.send("/queue/bin", body, content_type="application/octet-stream")
    assert inbox.next().body == body


def test_selectors(server):
    conn, inbox = connect(server)
    conn.subscribe("/topic/orders", id="1", headers={"selector": "region = 'EU' AND kind LIKE 'ph%'"}, receipt="s")
    inbox.receipt()
    pub, _ = connect(server)
    for region, kind in (("EU", "phone"), ("NA", "phone"), ("EU", "laptop"), ("EU", "phablet")):
        pub.send("/topic/orders", f"{region}-{kind}", headers={"region": region, "kind": kind})
    assert inbox.next().body == "EU-phone"
    assert inbox.next().body == "EU-phablet"
    inbox.nothing()


def test_durable_subscription_across_a_reconnect(server):
    conn, inbox = connect(server, client_id="interop")
    conn.subscribe("/topic/news.#", id="d", headers={"activemq.subscriptionName": "daily"}, receipt="s")
    inbox.receipt()
    conn.disconnect(receipt="bye")
    pub, pub_inbox = connect(server)
    pub.send("/topic/news.sport", "while away", receipt="p")
    pub_inbox.receipt()
    back, back_inbox = connect(server, client_id="interop")
    back.subscribe("/topic/news.#", id="d", headers={"activemq.subscriptionName": "daily"})
    assert back_inbox.next().body == "while away"


def test_unsubscribe_naming_a_durable_subscription_deletes_it(server):
    conn, inbox = connect(server, client_id="interop-gone")
    durable = {"activemq.subscriptionName": "daily"}
    conn.subscribe("/topic/gone.#", id="d", headers=durable, receipt="s")
    inbox.receipt()
    conn.unsubscribe(id="d", headers=durable, receipt="u")
    inbox.receipt()
    pub, pub_inbox = connect(server)
    pub.send("/topic/gone.x", "after the deletion", receipt="p")
    pub_inbox.receipt()
    conn.subscribe("/topic/gone.#", id="d", headers=durable, receipt="again")
    inbox.receipt()
    inbox.nothing()


def test_errors_close_the_connection(server):
    conn, inbox = connect(server)
    conn.send("/nowhere/x", "lost")
    error = inbox.errors.get(timeout=PATIENCE)
    assert "neither /topic" in error.headers["message"]
    inbox.disconnected.get(timeout=PATIENCE)


def test_stomp_to_native_and_native_to_stomp_with_properties(server):
    sub = subprocess.Popen(
        [f"{BIN_DIR}/herald", "--server", f"herald://{server.native}", "sub", "cross.#", "--count", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "subscribed" in sub.stderr.readline()
    conn, inbox = connect(server)
    conn.send("/topic/cross.stomp", "from stomp", headers={"region": "EU"}, receipt="p")
    inbox.receipt()
    out, _ = sub.communicate(timeout=PATIENCE)
    assert out == "cross.stomp [region=EU] from stomp\n"

    conn.subscribe("/topic/cross.#", id="1", receipt="s")
    inbox.receipt()
    server.herald("pub", "cross.native", "from native", "-P", "units=3", "-P", "flag=true")
    frame = inbox.next()
    assert frame.body == "from native"
    assert frame.headers["units"] == "3" and frame.headers["flag"] == "true"


def test_transactions_commit_and_abort(server):
    consumer, inbox = connect(server)
    consumer.subscribe("/queue/tx", id="1", receipt="s")
    inbox.receipt()
    conn, conn_inbox = connect(server)
    tx = conn.begin()
    conn.send("/queue/tx", "in transaction", transaction=tx)
    inbox.nothing()
    conn.commit(tx, receipt="c")
    assert conn_inbox.receipt() == "c"
    assert inbox.next().body == "in transaction"
    tx = conn.begin()
    conn.send("/queue/tx", "aborted", transaction=tx)
    conn.abort(tx, receipt="a")
    assert conn_inbox.receipt() == "a"
    inbox.nothing()


def test_temp_queue_request_reply(server):
    service, service_inbox = connect(server)
    service.subscribe("/queue/rpc", id="svc", receipt="s")
    service_inbox.receipt()
    client, client_inbox = connect(server)
    client.send("/queue/rpc", "ping", headers={"reply-to": "/temp-queue/replies", "correlation-id": "7"})
    request = service_inbox.next()
    assert request.headers["reply-to"].startswith("/queue/temp.")
    service.send(request.headers["reply-to"], "pong", headers={"correlation-id": request.headers["correlation-id"]})
    reply = client_inbox.next()
    assert reply.body == "pong" and reply.headers["correlation-id"] == "7"


def test_stomp_over_websocket_both_ways(server):
    ws, ws_inbox = connect(server, websocket=True)
    ws.subscribe("/topic/browser.#", id="1", receipt="s")
    assert ws_inbox.receipt() == "s"
    server.herald("pub", "browser.news", "to the browser", "-P", "k=v")
    frame = ws_inbox.next()
    assert frame.body == "to the browser" and frame.headers["k"] == "v"
    plain, plain_inbox = connect(server)
    plain.subscribe("/queue/from.browser", id="2", receipt="s2")
    plain_inbox.receipt()
    ws.send("/queue/from.browser", "from the browser", receipt="p")
    assert ws_inbox.receipt() == "p"
    assert plain_inbox.next().body == "from the browser"
    ws.disconnect(receipt="bye")
