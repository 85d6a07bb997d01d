// rhea, Node.js's AMQP 1.0 client, against a running server: messages
// with their properties through a queue; request/reply through a dynamic
// receiver and the anonymous relay; a topic fed by the herald CLI; a
// message rejected to the dead-letter queue; AMQP over WebSocket.
// HERALD_AMQP (host:port), HERALD_AMQP_WS (a ws:// URL), HERALD_NATIVE and
// HERALD_BIN_DIR say where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import rhea from "rhea";
import WebSocket from "ws";

const [host, port] = process.env.HERALD_AMQP.split(":");
const native = process.env.HERALD_NATIVE;
const herald = `${process.env.HERALD_BIN_DIR}/herald`;

// A connection, open.
function connect(id) {
  const container = rhea.create_container({ id });
  const connection = container.connect({ host, port: Number(port), reconnect: false });
  return new Promise((resolve, reject) => {
    connection.once("connection_open", () => resolve(connection));
    connection.once("connection_error", (context) => reject(context.connection.error));
  });
}

// The next `count` messages a receiver gets (accepted automatically).
function messages(receiver, count) {
  return new Promise((resolve) => {
    const got = [];
    const take = (context) => {
      got.push(context.message);
      if (got.length === count) {
        receiver.removeListener("message", take);
        resolve(got);
      }
    };
    receiver.on("message", take);
  });
}

const opened = (link) => new Promise((resolve) => link.once(link.is_sender() ? "sendable" : "receiver_open", () => resolve(link)));

test("rhea sends and receives through a queue with properties", async () => {
  const connection = await connect("rhea-queue");
  const receiver = await opened(connection.open_receiver("queue://rhea.orders"));
  const sender = await opened(connection.open_sender("queue://rhea.orders"));
  const got = messages(receiver, 2);
  sender.send({ body: "two laptops", application_properties: { region: "EU", units: 2 }, durable: true });
  // Both persistent: a non-persistent one may overtake a persistent one,
  // which enters its queue once the journal has it.
  sender.send({ body: rhea.message.data_section(Buffer.from([0, 1, 2])), subject: "raw", durable: true });
  const [first, second] = await got;
  assert.equal(first.body, "two laptops");
  assert.deepEqual(first.application_properties, { region: "EU", units: 2 });
  assert.equal(first.durable, true);
  assert.deepEqual([...second.body.content], [0, 1, 2]);
  assert.equal(second.subject, "raw");
  connection.close();
});

test("rhea does request/reply through a dynamic receiver and the anonymous relay", async () => {
  const client = await connect("rhea-client");
  const service = await connect("rhea-service");
  const replies = await opened(client.open_receiver({ source: { dynamic: true } }));
  const address = replies.source.address;
  assert.match(address, /^queue:\/\/temp\./);
  const requests = await opened(service.open_receiver("queue://rhea.requests"));
  const relay = await opened(service.open_sender({ target: {} }));
  requests.on("message", (context) => {
    relay.send({ to: context.message.reply_to, body: `re: ${context.message.body}` });
  });
  const answer = messages(replies, 1);
  const asking = await opened(client.open_sender("queue://rhea.requests"));
  asking.send({ body: "ping", reply_to: address });
  assert.equal((await answer)[0].body, "re: ping");
  client.close();
  service.close();
});

test("rhea subscribes to a topic the herald CLI publishes to, and rejects to the dead-letter queue", async () => {
  const connection = await connect("rhea-topic");
  const news = await opened(connection.open_receiver({ source: { address: "rhea.news", capabilities: ["topic"] } }));
  const got = messages(news, 1);
  // Subscribed: the attach is answered once the subscription is made.
  execFileSync(herald, ["--server", native, "pub", "topic://rhea.news", "from the CLI", "-P", "units=10"]);
  const [m] = await got;
  assert.equal(m.body, "from the CLI");
  assert.equal(m.application_properties.units, 10);
  // A message rejected by its consumer goes to the dead-letter queue.
  const sender = await opened(connection.open_sender("queue://rhea.work"));
  sender.send({ body: "poison" });
  const work = connection.open_receiver({ source: "queue://rhea.work", autoaccept: false });
  const rejected = new Promise((resolve) => work.once("message", (context) => {
    context.delivery.reject({ condition: "app:bad", description: "cannot parse" });
    resolve();
  }));
  await rejected;
  const dead = execFileSync(herald, ["--server", native, "sub", "queue://DLQ.rhea.work", "--count", "1", "--timeout", "5s"], { encoding: "utf8" });
  assert.match(dead, /poison/);
  connection.close();
});

test("the Node.js example in docs/amqp.md runs as written", async () => {
  const { readFileSync, writeFileSync, rmSync } = await import("node:fs");
  const docs = readFileSync(new URL("../../docs/amqp.md", import.meta.url), "utf8");
  const example = docs.split("```js\n")[1].split("```")[0]
    .replace('host: "127.0.0.1", port: 5672', `host: "${host}", port: ${port}`);
  // Beside node_modules, so that `import "rhea"` finds it.
  const file = new URL("./docs-example.tmp.mjs", import.meta.url);
  writeFileSync(file, example);
  try {
    const out = execFileSync("node", [file.pathname], { encoding: "utf8", timeout: 10000 });
    assert.equal(out, "2 laptops\n");
  } finally {
    rmSync(file);
  }
});

test("rhea sends and receives over WebSocket", async () => {
  const ws = rhea.websocket_connect(WebSocket);
  const container = rhea.create_container({ id: "rhea-ws" });
  const connection = container.connect({ connection_details: ws(process.env.HERALD_AMQP_WS, ["amqp"]), reconnect: false });
  await new Promise((resolve, reject) => {
    connection.once("connection_open", resolve);
    connection.once("connection_error", (context) => reject(context.connection.error));
  });
  const receiver = await opened(connection.open_receiver("queue://rhea.ws"));
  const sender = await opened(connection.open_sender("queue://rhea.ws"));
  const got = messages(receiver, 1);
  sender.send({ body: "through a WebSocket", application_properties: { n: 1 } });
  const [m] = await got;
  assert.equal(m.body, "through a WebSocket");
  assert.equal(m.application_properties.n, 1);
  // The native client reads what came in over WebSocket too.
  const toCli = await opened(connection.open_sender("queue://rhea.ws.cli"));
  // Accepted (journaled) before the CLI, which blocks this event loop, runs.
  const accepted = new Promise((resolve) => toCli.once("accepted", resolve));
  toCli.send({ body: "to the CLI", durable: true });
  await accepted;
  const out = execFileSync(herald, ["--server", native, "sub", "queue://rhea.ws.cli", "--count", "1", "--timeout", "5s"], { encoding: "utf8" });
  connection.close();
  assert.match(out, /to the CLI/);
});
