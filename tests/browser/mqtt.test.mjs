// Drives mqtt_page.html in headless Chromium against a running server:
// a message published with the native client reaches the page over
// MQTT 5.0 in WebSocket messages (user properties and all), and the page's
// answer (a retained message) reaches a native subscriber.
// HERALD_MQTT_WS, HERALD_NATIVE and HERALD_BIN_DIR say where.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

import { launch } from "./launch.mjs";
import { serveFolder } from "./serve.mjs";

const ws = process.env.HERALD_MQTT_WS;
const native = process.env.HERALD_NATIVE;
const herald = `${process.env.HERALD_BIN_DIR}/herald`;

test("an mqtt.js page receives a native publish and answers it", async () => {
  const [site, port] = await serveFolder();
  const browser = await launch();
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://127.0.0.1:${port}/mqtt_page.html#${ws}`);
    await tab.waitForFunction(() => document.title !== "connecting", null, { timeout: 10000 });
    assert.equal(await tab.title(), "subscribed");
    execFileSync(herald, ["--server", native, "pub", "browser.mqtt.news", "to mqtt.js", "-P", "region=EU"]);
    await tab.waitForFunction(() => document.querySelectorAll("#messages li").length === 1, null, { timeout: 10000 });
    assert.equal(await tab.textContent("#messages li"), "browser/mqtt/news to mqtt.js region=EU");
    // Retained: a subscriber that comes after it still gets it.
    let answer = "";
    for (let i = 0; i < 50 && answer === ""; i++) {
      answer = execFileSync(herald, ["--server", native, "sub", "from.browser.mqtt", "--count", "1", "--timeout", "1"], { encoding: "utf8" });
    }
    assert.equal(answer, "from.browser.mqtt hello from mqtt.js\n");
  } finally {
    await browser.close();
    site.close();
  }
});
