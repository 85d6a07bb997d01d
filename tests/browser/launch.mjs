// Debian's Chromium, headless, with the flags this machine's closed
// network needs (no background connections, no component updates).
import { chromium } from "playwright-core";

export function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      ...extraArgs],
  });
}
