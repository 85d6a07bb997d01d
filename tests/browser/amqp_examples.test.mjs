// rhea's brokered examples against Herald. The npm package ships none, so
// each is written here from its documented behaviour (rhea's examples/:
// helloworld, simple_send and simple_recv, client and server, selector
// send and receive, the durable subscription's publisher and subscriber,
// the queue browser, the SASL client), one container per program as
// upstream runs each in a process of its own, and checked against the
// output rhea's test_examples.js expects.
// HERALD_AMQP (host:port) is a default server; HERALD_AMQP_USERS one with
// the user bob (password bob) and anonymous connections allowed.
import { test } from "node:test";
import assert from "node:assert/strict";
import rhea from "rhea";

const where = (address) => {
  const [host, port] = address.split(":");
  return { host, port: Number(port), reconnect: false };
};
const server = where(process.env.HERALD_AMQP);

// A program: its own container, what it prints, and a promise that
// settles when it closes its connection (or fails on an error).
function program(name) {
  const container = rhea.create_container({ id: `${name}-${process.pid}-${Math.random()}` });
  const out = [];
  let finish;
  const done = new Promise((resolve, reject) => {
    finish = resolve;
    container.on("connection_close", () => resolve(out));
    container.on("connection_error", (c) => reject(c.connection.error));
    container.on("error", reject);
    container.on("disconnected", (c) => c.error && reject(c.error));
    container.on("rejected", (c) => reject(c.delivery.remote_state.error));
  });
  return { container, out, done, print: (line) => out.push(String(line)), finish };
}

const times = (n, f) => Array.from({ length: n }, (_, i) => f(i));

// simple_send: 100 messages, numbered, each said when sent, and then that
// all were confirmed.
function simpleSend(node = "examples", total = 100) {
  const p = program("simple_send");
  let sent = 0;
  let confirmed = 0;
  p.container.on("sendable", (c) => {
    while (c.sender.sendable() && sent < total) {
      sent += 1;
      p.print(`sent ${sent}`);
      c.sender.send({ message_id: sent, body: { sequence: sent } });
    }
  });
  p.container.on("accepted", (c) => {
    if (++confirmed === total) {
      p.print("all messages confirmed");
      c.connection.close();
    }
  });
  p.container.connect(server).open_sender(node);
  return p;
}

// simple_recv: prints each body as JSON until it has `expected`, skipping
// a message whose numeric id is below the count so far (a duplicate).
function simpleRecv(expected = 100, options = "examples", show = JSON.stringify) {
  const p = program("simple_recv");
  let received = 0;
  p.container.on("message", (c) => {
    const id = c.message.message_id;
    if (id !== undefined && id < received) return;
    p.print(show(c.message.body));
    if (++received === expected) {
      c.receiver.detach();
      c.connection.close();
    }
  });
  p.container.connect(server).open_receiver(options);
  return p;
}

test("helloworld", async () => {
  const p = program("helloworld");
  p.container.on("sendable", (c) => {
    c.sender.send({ body: "Hello World!" });
    c.sender.close();
  });
  p.container.on("message", (c) => {
    p.print(c.message.body);
    c.connection.close();
  });
  const conn = p.container.connect(server);
  conn.open_receiver("examples");
  conn.open_sender("examples");
  assert.deepEqual(await p.done, ["Hello World!"]);
});

test("send and receive", async () => {
  const recv = simpleRecv();
  const send = simpleSend();
  assert.deepEqual(await recv.done, times(100, (i) => `{"sequence":${i + 1}}`));
  assert.deepEqual(await send.done, [...times(100, (i) => `sent ${i + 1}`), "all messages confirmed"]);
});

const REQUESTS = [
  "Twas brillig, and the slithy toves",
  "Did gire and gymble in the wabe.",
  "All mimsy were the borogroves,",
  "And the mome raths outgrabe.",
];

test("client/server", async () => {
  // server: answers each request in upper case through the connection's
  // anonymous sender, to its reply-to, with its correlation id.
  const s = program("server");
  s.container.on("message", (c) => {
    const request = c.message;
    s.print(`Received: ${request.body}`);
    c.connection.send({ to: request.reply_to, correlation_id: request.correlation_id,
      body: String(request.body).toUpperCase() });
    if (s.out.length === REQUESTS.length) setTimeout(() => c.connection.close(), 100);
  });
  const listening = new Promise((resolve) => s.container.once("receiver_open", resolve));
  s.container.connect(server).open_receiver("examples");
  await listening;
  // client: a dynamic receiver for the answers, one request at a time.
  const cl = program("client");
  const requests = [...REQUESTS];
  let sender;
  let replyTo;
  const next = () => sender.send({ reply_to: replyTo, body: requests[0] });
  cl.container.on("receiver_open", (c) => {
    replyTo = c.receiver.source.address;
    next();
  });
  cl.container.on("message", (c) => {
    cl.print(`${requests.shift()} => ${c.message.body}`);
    if (requests.length) next();
    else c.connection.close();
  });
  const conn = cl.container.connect(server);
  sender = conn.open_sender("examples");
  conn.open_receiver({ source: { dynamic: true } });
  assert.deepEqual(await cl.done, REQUESTS.map((r) => `${r} => ${r.toUpperCase()}`));
  assert.deepEqual(await s.done, REQUESTS.map((r) => `Received: ${r}`));
});

// selector/send: four animals, each with its colour as a property.
function colourSend() {
  const p = program("send");
  const animals = [["red", "panda"], ["green", "grasshopper"], ["red", "squirrel"], ["blue", "whale"]];
  let confirmed = 0;
  p.container.on("sendable", (c) => {
    while (c.sender.sendable() && animals.length) {
      const [colour, animal] = animals.shift();
      p.print(`sent ${colour}-${animal}`);
      c.sender.send({ application_properties: { colour }, body: animal });
    }
  });
  p.container.on("accepted", (c) => {
    if (++confirmed === 4) c.connection.close();
  });
  p.container.connect(server).open_sender("examples");
  return p;
}

const SENT = ["sent red-panda", "sent green-grasshopper", "sent red-squirrel", "sent blue-whale"];

test("selector", async () => {
  const recv = (m, selector) => simpleRecv(m, {
    source: { address: "examples", filter: rhea.filter.selector(selector) },
  }, String);
  const red = recv(2, "colour = 'red'");
  const blue = recv(1, "colour = 'blue'");
  const green = recv(1, "colour = 'green'");
  assert.deepEqual(await colourSend().done, SENT);
  assert.deepEqual(await red.done, ["panda", "squirrel"]);
  assert.deepEqual(await blue.done, ["whale"]);
  assert.deepEqual(await green.done, ["grasshopper"]);
});

test("queue browser", async () => {
  assert.deepEqual(await colourSend().done, SENT);
  const expected = ['"panda"', '"grasshopper"', '"squirrel"', '"whale"'];
  for (let i = 0; i < 2; i++) {
    const browse = simpleRecv(4, { source: { address: "examples", distribution_mode: "copy" } });
    assert.deepEqual(await browse.done, expected);
  }
  assert.deepEqual(await simpleRecv(4).done, expected);
});

// durable_subscription/subscriber: a durable subscription named by its
// container id and link name; 'detach' leaves it, 'close' ends it.
function subscriber(topic) {
  const p = program("subscriber");
  p.container.id = "my-client";
  p.container.on("message", (c) => {
    if (c.message.body === "detach") {
      c.receiver.detach();
      c.connection.close();
    } else if (c.message.body === "close") {
      c.receiver.close();
      c.connection.close();
    } else {
      p.print(c.message.body);
    }
  });
  const attached = new Promise((resolve) => p.container.once("receiver_open", resolve));
  p.container.connect(server).open_receiver({
    name: "my-subscription",
    source: { address: topic, durable: 2, expiry_policy: "never" },
  });
  return { ...p, attached };
}

// durable_subscription/publisher: each message given, said when sent.
async function publish(topic, messages) {
  const p = program("publisher");
  let confirmed = 0;
  const todo = [...messages];
  p.container.on("sendable", (c) => {
    while (c.sender.sendable() && todo.length) {
      const body = todo.shift();
      c.sender.send({ body });
      p.print(`sent ${body}`);
    }
  });
  p.container.on("accepted", (c) => {
    if (++confirmed === messages.length) c.connection.close();
  });
  p.container.connect(server).open_sender(topic);
  return p.done;
}

test("pub-sub, with the durable subscription kept while its subscriber is away", async () => {
  const topic = "topic://PRICE.STOCK.NYSE.RHT";
  const first = subscriber(topic);
  await first.attached;
  const messages = ["one", "two", "three", "close"];
  // As upstream: what is sent while subscribed arrives, and 'close' ends it.
  assert.deepEqual(await publish(topic, messages), messages.map((m) => `sent ${m}`));
  assert.deepEqual(await first.done, ["one", "two", "three"]);
  // Detached, the subscription keeps what is published meanwhile.
  const second = subscriber(topic);
  await second.attached;
  await publish(topic, ["four", "detach"]);
  assert.deepEqual(await second.done, ["four"]);
  await publish(topic, ["five", "six", "close"]);
  const third = subscriber(topic);
  assert.deepEqual(await third.done, ["five", "six"]);
  // Closed, it is gone: a new one gets only what comes after it.
  await publish(topic, ["lost"]);
  const fourth = subscriber(topic);
  await fourth.attached;
  await publish(topic, ["seven", "close"]);
  assert.deepEqual(await fourth.done, ["seven"]);
});

test("sasl: PLAIN with a user's password, ANONYMOUS with a name, a wrong password refused", async () => {
  const users = where(process.env.HERALD_AMQP_USERS);
  const client = (options) => {
    const p = program("simple_sasl_client");
    p.container.on("connection_open", (c) => {
      p.print("Connected!");
      c.connection.close();
    });
    p.container.connect({ ...users, ...options });
    return p.done;
  };
  assert.deepEqual(await client({ username: "bob", password: "bob" }), ["Connected!"]);
  assert.deepEqual(await client({ username: "anonymous" }), ["Connected!"]);
  await assert.rejects(client({ username: "bob", password: "wrong" }));
});
