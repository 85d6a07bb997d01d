// Drives the management console (served by the server's admin port) in
// headless Chromium: a queue the test fills shows with its depth, a
// message published through the console's form raises it, and the purge
// button, once confirmed, empties it; a long queue name does not push the
// table off the screen. HERALD_ADMIN, HERALD_NATIVE and HERALD_BIN_DIR say
// where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

import { launch } from "./launch.mjs";

const admin = process.env.HERALD_ADMIN;
const native = process.env.HERALD_NATIVE;
const herald = `${process.env.HERALD_BIN_DIR}/herald`;

const depth = (tab, queue) =>
  tab.textContent(`#queues tr[data-queue="${queue}"] td.depth`);

test("the console shows a queue, publishes to it and purges it", async () => {
  execFileSync(herald, ["--server", native, "pub", "--queue", "console.q", "waiting", "--count", "2"]);
  const browser = await launch();
  try {
    const tab = await browser.newPage();
    await tab.goto(admin);
    await tab.waitForSelector('#queues tr[data-queue="console.q"]', { timeout: 10000 });
    assert.equal(await depth(tab, "console.q"), "2");

    await tab.fill("#publish-destination", "queue://console.q");
    await tab.fill("#publish-body", "from the console");
    await tab.click("#publish-button");
    await tab.waitForFunction(
      () => document.querySelector("#publish-result").textContent.startsWith("published"),
      null, { timeout: 10000 });
    await tab.waitForFunction(
      () => document.querySelector('#queues tr[data-queue="console.q"] td.depth').textContent === "3",
      null, { timeout: 10000 });

    // A bad destination is refused, and says why.
    await tab.fill("#publish-destination", "queue://bad..name");
    await tab.click("#publish-button");
    await tab.waitForFunction(
      () => document.querySelector("#publish-result").textContent.startsWith("refused"),
      null, { timeout: 10000 });

    // Purge asks first, naming the queue and what goes: dismissed, nothing
    // happens.
    let asked = "";
    tab.once("dialog", (d) => { asked = d.message(); d.dismiss(); });
    await tab.click('#queues tr[data-queue="console.q"] button');
    assert.match(asked, /Purge queue console\.q\? Its 3 waiting/);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await depth(tab, "console.q"), "3");
    tab.once("dialog", (d) => d.accept());
    await tab.click('#queues tr[data-queue="console.q"] button');
    await tab.waitForFunction(
      () => document.querySelector('#queues tr[data-queue="console.q"] td.depth').textContent === "0",
      null, { timeout: 10000 });
    const waiting = execFileSync(herald, ["--server", native, "browse", "console.q"], { encoding: "utf8" });
    assert.equal(waiting, "");

    // A long name is cut to its column, whole on hover: the page does not
    // grow wider than the window, and the Purge button stays on it.
    const long = "console." + "very-long-segment.".repeat(12) + "end";
    execFileSync(herald, ["--server", native, "pub", "--queue", long, "x"]);
    const row = `#queues tr[data-queue="${long}"]`;
    await tab.waitForSelector(row, { timeout: 10000 });
    assert.equal(await tab.getAttribute(`${row} span.name`, "title"), long);
    const fits = await tab.evaluate((sel) => {
      const b = document.querySelector(`${sel} button`).getBoundingClientRect();
      return document.documentElement.scrollWidth <= window.innerWidth && b.right <= window.innerWidth;
    }, row);
    assert.ok(fits, "the row fits the window");
  } finally {
    await browser.close();
  }
});

// Screenshots of the pages, for docs/console.md; kept under target/.
const shots = new URL("../../target/console-screenshots/", import.meta.url).pathname;
const rows = (tab) => tab.$$eval("#q-messages tbody tr", (trs) => trs.map((tr) => tr.dataset.id));
const said = (tab) => tab.textContent("#q-result");
// Waits for the queue page to list `n` messages.
const listed = (tab, n) => tab.waitForFunction(
  (n) => document.querySelectorAll("#q-messages tbody tr").length === n, n, { timeout: 10000 });

test("a queue's page browses, filters, moves, deletes, replays and deletes the queue", async () => {
  const { mkdirSync } = await import("node:fs");
  mkdirSync(shots, { recursive: true });
  const cli = (...args) => execFileSync(herald, ["--server", native, "--admin", admin, ...args], { encoding: "utf8" });
  for (const n of [1, 2, 3]) cli("pub", "queue://page.q", `order ${n}`, "-P", `n=${n}`, "-P", "region=EU");
  // Two that expire, set aside in the expiry queue when a consumer comes.
  cli("pub", "queue://page.dlq", "too late", "--ttl", "1", "--count", "2");
  await new Promise((r) => setTimeout(r, 50));
  cli("sub", "queue://page.dlq", "--timeout", "300ms");
  const browser = await launch();
  try {
    const tab = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await tab.goto(`${admin}/`);
    await tab.waitForSelector('#queues tr[data-queue="page.q"] a', { timeout: 10000 });
    // The rates over the last hour, then back to five minutes: no error.
    await tab.selectOption("#chart-window", "1h");
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await tab.textContent("#error"), "");
    await tab.selectOption("#chart-window", "5m");
    await tab.screenshot({ path: `${shots}/overview.png`, fullPage: true });
    await tab.click('#queues tr[data-queue="page.q"] a');
    await listed(tab, 3);
    // The figures come from another request than the list: wait for them.
    await tab.waitForFunction(() => document.querySelector("#q-figures").textContent !== "",
      null, { timeout: 10000 });
    assert.match(await tab.textContent("#q-figures"), /^3 waiting/);
    assert.match(await tab.textContent("#q-messages tbody tr:first-child td.body"), /order 1/);
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal(await tab.textContent("#error"), "");
    await tab.screenshot({ path: `${shots}/queue.png`, fullPage: true });

    // A selector filters; one that does not parse says why.
    await tab.fill("#q-selector", "n > 1");
    await tab.click("#q-filter button[type=submit]");
    await listed(tab, 2);
    await tab.fill("#q-selector", "n == 1");
    await tab.click("#q-filter button[type=submit]");
    await tab.waitForFunction(() => document.querySelector("#q-result").textContent.includes("use = for equality"),
      null, { timeout: 10000 });
    await tab.fill("#q-selector", "");
    await tab.click("#q-filter button[type=submit]");
    await listed(tab, 3);

    // Move the first to another queue, after a confirmation.
    const [first, second] = await rows(tab);
    await tab.check(`#q-messages tr[data-id="${first}"] input`);
    await tab.fill("#q-to", "queue://page.other");
    tab.once("dialog", (d) => d.accept());
    await tab.click("#q-move");
    await listed(tab, 2);
    assert.match(await said(tab), /1 done/);
    // A bad destination is refused, and nothing moves.
    await tab.check(`#q-messages tr[data-id="${second}"] input`);
    await tab.fill("#q-to", "queue://bad..name");
    tab.once("dialog", (d) => d.accept());
    await tab.click("#q-move");
    await tab.waitForFunction(() => document.querySelector("#q-result").textContent.includes("empty word"),
      null, { timeout: 10000 });
    await listed(tab, 2);
    // Delete one.
    await tab.check(`#q-messages tr[data-id="${second}"] input`);
    tab.once("dialog", (d) => d.accept());
    await tab.click("#q-delete-messages");
    await listed(tab, 1);

    // The expiry queue: where each came from and why; replay one.
    await tab.goto(`${admin}/#/queue/ExpiryQueue`);
    await listed(tab, 2);
    const row = "#q-messages tbody tr:first-child";
    assert.equal(await tab.textContent(`${row} td:nth-child(7)`), "queue://page.dlq");
    assert.match(await tab.textContent(`${row} td:nth-child(8)`), /^expired at \d{4}-\d\d-\d\dT/);
    await tab.waitForSelector("#q-replay:not([hidden])", { timeout: 10000 });
    await tab.screenshot({ path: `${shots}/dead-letters.png`, fullPage: true });
    await tab.check(`${row} input`);
    let question = "";
    tab.once("dialog", (d) => { question = d.message(); d.accept(); });
    await tab.click("#q-replay");
    await listed(tab, 1);
    assert.match(question, /Replay 1 message\(s\) of ExpiryQueue/);
    assert.match(await said(tab), /replayed 1/);
    assert.match(cli("queue", "show", "page.dlq"), /too late/);

    // A topic's page: its subscriptions (a durable one without a consumer
    // can be deleted) and its retained message.
    cli("--client-id", "console-app", "sub", "page.news.#", "--durable", "daily", "--timeout", "50ms");
    cli("pub", "page.news.today", "kept for later", "--retain", "-P", "edition=1");
    await tab.goto(`${admin}/#/topic/page.news.today`);
    await tab.waitForSelector("#t-retained tbody tr", { timeout: 10000 });
    assert.match(await tab.textContent("#t-retained tbody tr td.body"), /kept for later/);
    const sub = "#t-subscriptions tbody tr";
    assert.equal(await tab.textContent(`${sub} td:first-child`), "durable");
    assert.equal(await tab.textContent(`${sub} td:nth-child(7)`), "1");
    await tab.screenshot({ path: `${shots}/topic.png`, fullPage: true });
    tab.once("dialog", (d) => { question = d.message(); d.accept(); });
    await tab.click(`${sub} button`);
    await tab.waitForFunction(() => !document.querySelector("#t-subscriptions tbody tr"), null, { timeout: 10000 });
    assert.match(question, /Delete durable subscription daily of console-app\? Its 1 waiting/);

    // A keyed topic's page: its settings and instances.
    for (const id of ["7", "7", "8"]) {
      cli("pub", "page.sensors.hall", `reading of ${id}`, "-P", `sensor_id=${id}`);
    }
    await tab.goto(`${admin}/#/topic/page.sensors.hall`);
    await tab.waitForSelector("#t-instances tbody tr", { timeout: 10000 });
    assert.match(await tab.textContent("#t-instances-settings"), /key \[sensor_id\] · keep_last \(depth 1\) · transient_local/);
    const instances = await tab.$$eval("#t-instances tbody tr",
      (rows) => rows.map((r) => [...r.children].map((c) => c.textContent).join(" ")));
    assert.deepEqual(instances.sort(), ["sensor_id=7 alive 1", "sensor_id=8 alive 1"]);

    // Delete a queue: the question says how many messages go with it.
    await tab.goto(`${admin}/#/queue/page.other`);
    await listed(tab, 1);
    await tab.waitForFunction(() => document.querySelector("#q-figures").textContent.startsWith("1 waiting"),
      null, { timeout: 10000 });
    tab.once("dialog", (d) => { question = d.message(); d.accept(); });
    await tab.click("#q-delete");
    await tab.waitForSelector("#overview:not([hidden])", { timeout: 10000 });
    assert.match(question, /Delete queue page\.other\? Its 1 message\(s\) go with it/);
    await tab.waitForFunction(() => !document.querySelector('#queues tr[data-queue="page.other"]'),
      null, { timeout: 10000 });
  } finally {
    await browser.close();
  }
});

// A server of the test's own, with users: the console asks for a login.
async function securedServer() {
  const { mkdtempSync, writeFileSync } = await import("node:fs");
  const { spawn } = await import("node:child_process");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(`${tmpdir()}/herald-console-`);
  const hash = execFileSync(herald, ["passwd"], { input: "secret\n", encoding: "utf8" }).trim();
  writeFileSync(`${dir}/herald.toml`, [
    'listen = "127.0.0.1:0"', `data_dir = "${dir}/data"`,
    "[stomp]", "enabled = false", "websocket_enabled = false",
    "[mqtt]", "enabled = false", "websocket_enabled = false",
    "[amqp]", "enabled = false",
    "[admin]", 'listen = "127.0.0.1:0"',
    "[auth]", "failed_login_delay_ms = 10",
    "[[auth.users]]", 'name = "ops"', `password = "${hash}"`, 'roles = ["ops"]',
    "[[auth.users]]", 'name = "watcher"', `password = "${hash}"`, 'roles = ["watch"]',
    "[auth.roles.ops]", "admin = true", "monitor = true", 'publish = ["#"]', 'consume = ["#"]',
    "[auth.roles.watch]", "monitor = true",
  ].join("\n"));
  const proc = spawn(`${process.env.HERALD_BIN_DIR}/herald-server`, ["--config", `${dir}/herald.toml`],
    { stdio: ["ignore", "pipe", "ignore"] });
  const lines = [];
  await new Promise((resolve, reject) => {
    proc.stdout.on("data", (chunk) => {
      lines.push(...chunk.toString().split("\n"));
      if (lines.some((l) => l.startsWith("herald-server admin listening on "))) resolve();
    });
    proc.on("exit", () => reject(new Error("herald-server stopped")));
  });
  const value = (prefix) => lines.find((l) => l.startsWith(prefix)).slice(prefix.length).trim();
  return {
    proc,
    admin: value("herald-server admin listening on ").replace(/\/$/, ""),
    native: `herald://${value("herald-server listening on ")}`,
  };
}

test("with users the console asks for a login with its own form; a monitor sees every page and changes nothing", async () => {
  const secured = await securedServer();
  const browser = await launch();
  try {
    const asOps = ["--server", secured.native, "--admin", secured.admin, "--user", "ops", "--password", "secret"];
    execFileSync(herald, [...asOps, "pub", "queue://kept", "x", "--persistent"]);
    const sub = execFileSync(herald, [...asOps, "sub", "news.#", "--timeout", "50ms"]);
    assert.equal(sub.length, 0);

    // No login, no data: the API answers 401 (asking a browser for basic
    // auth), while the console's page loads and shows its own form.
    const anonymous = await browser.newPage();
    const refused = await anonymous.request.get(`${secured.admin}/api/queues`);
    assert.equal(refused.status(), 401);
    assert.match(refused.headers()["www-authenticate"] || "", /Basic/);

    const tab = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const page = await tab.goto(`${secured.admin}/`);
    assert.equal(page.status(), 200);
    await tab.waitForSelector("#login-page:not([hidden])", { timeout: 10000 });
    assert.equal(await tab.isHidden("#overview"), true);
    await tab.screenshot({ path: `${shots}/login.png` });
    // A wrong password says so, and the form stays.
    await tab.fill("#login-user", "watcher");
    await tab.fill("#login-password", "wrong");
    await tab.click("#login-button");
    await tab.waitForFunction(() => document.querySelector("#login-error").textContent.includes("invalid user name or password"),
      null, { timeout: 10000 });
    await tab.fill("#login-password", "secret");
    await tab.click("#login-button");
    await tab.waitForSelector('#queues tr[data-queue="kept"]', { timeout: 10000 });
    assert.equal(await tab.isHidden("#login-page"), true);
    // A monitor's change is refused, and the page says why.
    await tab.fill("#create-queue-name", "made.by.watcher");
    await tab.click("#create-queue-button");
    await tab.waitForFunction(() => document.querySelector("#create-queue-result").textContent.includes("'admin'"),
      null, { timeout: 10000 });

    // The server page: version, journal, configuration with its secrets hidden.
    await tab.goto(`${secured.admin}/#/server`);
    await tab.waitForFunction(() => document.querySelector("#s-journal").textContent.includes("batch"),
      null, { timeout: 10000 });
    const config = await tab.textContent("#s-config");
    assert.match(config, /"password": "\(hidden\)"/);
    assert.doesNotMatch(config, /argon2/);
    await tab.screenshot({ path: `${shots}/server.png`, fullPage: true });

    // Users and roles.
    await tab.goto(`${secured.admin}/#/users`);
    await tab.waitForSelector("#u-users tbody tr", { timeout: 10000 });
    const users = await tab.$$eval("#u-users tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
    assert.deepEqual(users, ["ops", "watcher"]);
    assert.match(await tab.textContent("#u-roles"), /watch/);
    // A monitor may not add a role.
    await tab.fill("#r-name", "made.by.watcher");
    await tab.click("#r-form button[type=submit]");
    await tab.waitForFunction(() => document.querySelector("#r-result").textContent.includes("'admin'"),
      null, { timeout: 10000 });

    // Log out: the form again, and the API is asked nothing more.
    await tab.click("#logout");
    await tab.waitForSelector("#login-page:not([hidden])", { timeout: 10000 });

    // An admin adds a role and a user with it, who then logs in; then
    // deletes the user.
    await tab.fill("#login-user", "ops");
    await tab.fill("#login-password", "secret");
    await tab.click("#login-button");
    await tab.waitForSelector("#users-page:not([hidden]) #u-users tbody tr", { timeout: 10000 });
    await tab.fill("#r-name", "audit");
    await tab.fill("#r-browse", "queue:kept");
    await tab.check("#r-monitor");
    await tab.click("#r-form button[type=submit]");
    await tab.waitForFunction(() => document.querySelector("#u-roles").textContent.includes("audit"),
      null, { timeout: 10000 });
    await tab.fill("#u-name", "newbie");
    await tab.fill("#u-password", "fresh");
    await tab.fill("#u-user-roles", "audit");
    await tab.click("#u-form button[type=submit]");
    await tab.waitForFunction(() => document.querySelector("#u-users").textContent.includes("newbie"),
      null, { timeout: 10000 });
    await tab.screenshot({ path: `${shots}/users.png`, fullPage: true });
    const asNewbie = (path) => tab.request.get(`${secured.admin}${path}`,
      { headers: { Authorization: `Basic ${Buffer.from("newbie:fresh").toString("base64")}` } });
    assert.equal((await asNewbie("/api/queues")).status(), 200);
    const row = tab.locator("#u-users tbody tr", { hasText: "newbie" });
    let question = "";
    tab.once("dialog", (d) => { question = d.message(); d.accept(); });
    await row.getByRole("button", { name: "Delete" }).click();
    await tab.waitForFunction(() => !document.querySelector("#u-users").textContent.includes("newbie"),
      null, { timeout: 10000 });
    assert.match(question, /Delete user newbie\?/);
    assert.equal((await asNewbie("/api/queues")).status(), 401);
  } finally {
    await browser.close();
    secured.proc.kill();
  }
});
