// Drives the management console (served by the server's admin port) in
// headless Chromium: a queue the test fills shows with its depth, a
// message published through the console's form raises it, and the purge
// button empties it. HERALD_ADMIN, HERALD_NATIVE and HERALD_BIN_DIR say
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

    await tab.click('#queues tr[data-queue="console.q"] button');
    await tab.waitForFunction(
      () => document.querySelector('#queues tr[data-queue="console.q"] td.depth').textContent === "0",
      null, { timeout: 10000 });
    const waiting = execFileSync(herald, ["--server", native, "browse", "console.q"], { encoding: "utf8" });
    assert.equal(waiting, "");
  } finally {
    await browser.close();
  }
});
