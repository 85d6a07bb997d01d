// Drives page.html in headless Chromium (Debian's, through playwright-core)
// against a running server: a message published with the native client
// reaches the page over STOMP/WebSocket, and the page's answer reaches a
// native consumer. HERALD_WS, HERALD_NATIVE and HERALD_BIN_DIR say where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

import { launch } from "./launch.mjs";

const ws = process.env.HERALD_WS;
const native = process.env.HERALD_NATIVE;
const herald = `${process.env.HERALD_BIN_DIR}/herald`;
const page = new URL("./page.html", import.meta.url);

test("a stomp.js page receives a native publish and answers it", async () => {
  const browser = await launch();
  try {
    const tab = await browser.newPage();
    await tab.goto(`${page.href}#${ws}`);
    await tab.waitForFunction(() => document.title !== "connecting", null, { timeout: 10000 });
    assert.equal(await tab.title(), "subscribed");
    execFileSync(herald, ["--server", native, "pub", "browser.test", "to the browser", "-P", "region=EU"]);
    await tab.waitForFunction(() => document.querySelectorAll("#messages li").length === 1, null, { timeout: 10000 });
    assert.equal(await tab.textContent("#messages li"), "to the browser region=EU");
    const answer = execFileSync(herald, ["--server", native, "sub", "--queue", "from.browser", "--count", "1", "--timeout", "10"], { encoding: "utf8" });
    assert.equal(answer, "from.browser [] hello from chromium\n");
  } finally {
    await browser.close();
  }
});

