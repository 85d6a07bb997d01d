// Drives page.html in headless Chromium (Debian's, through playwright-core)
// against a running server: a message published with the native client
// reaches the page over STOMP/WebSocket, and the page's answer reaches a
// native consumer; and the same page served by another site is refused.
// HERALD_WS, HERALD_NATIVE and HERALD_BIN_DIR say where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

import { launch } from "./launch.mjs";
import { serveFolder } from "./serve.mjs";

const ws = process.env.HERALD_WS;
const native = process.env.HERALD_NATIVE;
const herald = `${process.env.HERALD_BIN_DIR}/herald`;

test("a stomp.js page receives a native publish and answers it", async () => {
  const [site, port] = await serveFolder();
  const browser = await launch();
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://127.0.0.1:${port}/page.html#${ws}`);
    await tab.waitForFunction(() => document.title !== "connecting", null, { timeout: 10000 });
    assert.equal(await tab.title(), "subscribed");
    execFileSync(herald, ["--server", native, "pub", "browser.test", "to the browser", "-P", "region=EU"]);
    await tab.waitForFunction(() => document.querySelectorAll("#messages li").length === 1, null, { timeout: 10000 });
    assert.equal(await tab.textContent("#messages li"), "to the browser region=EU");
    const answer = execFileSync(herald, ["--server", native, "sub", "--queue", "from.browser", "--count", "1", "--timeout", "10"], { encoding: "utf8" });
    assert.equal(answer, "from.browser hello from chromium\n");
  } finally {
    await browser.close();
    site.close();
  }
});

test("the same page served by another site may not open the WebSocket", async () => {
  const [site, port] = await serveFolder();
  // evil.example is this machine to the browser: DNS rebinding's effect.
  const browser = await launch(["--host-resolver-rules=MAP evil.example 127.0.0.1"]);
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://evil.example:${port}/page.html#${ws}`);
    await tab.waitForFunction(() => document.title !== "connecting", null, { timeout: 10000 });
    assert.equal(await tab.title(), "websocket error");
  } finally {
    await browser.close();
    site.close();
  }
});

