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
