"""A browser application: stomp.js over WebSocket in headless Chromium
(Debian's chromium package), driven by tests/browser with playwright-core."""

import os
import subprocess

from conftest import BIN_DIR

BROWSER_DIR = os.path.join(os.path.dirname(__file__), "..", "browser")


def test_a_stomp_js_page_talks_to_native_clients(server):
    env = dict(
        os.environ,
        HERALD_WS=f"ws://{server.stomp_ws[0]}:{server.stomp_ws[1]}/stomp",
        HERALD_NATIVE=f"herald://{server.native}",
        HERALD_BIN_DIR=os.path.abspath(BIN_DIR),
    )
    result = subprocess.run(
        ["node", "--test", "stomp.test.mjs"],
        cwd=BROWSER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_management_console_in_a_browser(server):
    env = dict(
        os.environ,
        HERALD_ADMIN=server.admin,
        HERALD_NATIVE=f"herald://{server.native}",
        HERALD_BIN_DIR=os.path.abspath(BIN_DIR),
    )
    result = subprocess.run(
        ["node", "--test", "console.test.mjs"],
        cwd=BROWSER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
