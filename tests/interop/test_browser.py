"""Browser tests in headless Chromium (Debian's chromium package), driven
by tests/browser with playwright-core: a stomp.js and an mqtt.js
application over WebSocket, and the server's management console."""

import os
import subprocess

from conftest import BIN_DIR, Server

BROWSER_DIR = os.path.join(os.path.dirname(__file__), "..", "browser")


def run_node(test, **env):
    """Runs one node test file in tests/browser with these variables."""
    result = subprocess.run(
        ["node", "--test", test],
        cwd=BROWSER_DIR,
        env=dict(os.environ, HERALD_BIN_DIR=os.path.abspath(BIN_DIR), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_stomp_js_page_talks_to_native_clients(server):
    run_node(
        "stomp.test.mjs",
        HERALD_WS=f"ws://{server.stomp_ws[0]}:{server.stomp_ws[1]}/stomp",
        HERALD_NATIVE=f"herald://{server.native}",
    )


def test_an_mqtt_js_page_talks_to_native_clients(server):
    run_node(
        "mqtt.test.mjs",
        HERALD_MQTT_WS=f"ws://{server.mqtt_ws[0]}:{server.mqtt_ws[1]}/mqtt",
        HERALD_NATIVE=f"herald://{server.native}",
    )


def test_the_management_console_in_a_browser():
    # A keyed topic, whose instances its page shows.
    server = Server(
        config='[[addresses]]\nmatch = "topic://page.sensors.#"\n'
        'key = ["sensor_id"]\ndurability = "transient_local"\n'
    )
    try:
        run_node(
            "console.test.mjs",
            HERALD_ADMIN=server.admin,
            HERALD_NATIVE=f"herald://{server.native}",
        )
    finally:
        server.stop()


def test_rhea_talks_amqp_with_native_clients(server):
    run_node(
        "amqp.test.mjs",
        HERALD_AMQP=f"{server.amqp[0]}:{server.amqp[1]}",
        HERALD_AMQP_WS=f"ws://{server.amqp_ws[0]}:{server.amqp_ws[1]}/",
        HERALD_NATIVE=f"herald://{server.native}",
    )


# The user bob, password bob (`herald passwd`), with every permission;
# anonymous connections may connect too.
BOB = """
[auth]
required = false
[[auth.users]]
name = "bob"
password = "$argon2id$v=19$m=19456,t=2,p=1$cdgbZMZ/uOullTm+Y549Rg$xtqa/56vruzpIA+al94ikRxhddf4XNu2HI0XZuN0Mhs"
roles = ["all"]
[auth.roles.all]
publish = ["queue:#", "topic:#"]
consume = ["queue:#", "topic:#"]
"""


def test_rheas_examples_run_against_the_broker(server):
    users = Server(config=BOB)
    try:
        run_node(
            "amqp_examples.test.mjs",
            HERALD_AMQP=f"{server.amqp[0]}:{server.amqp[1]}",
            HERALD_AMQP_USERS=f"{users.amqp[0]}:{users.amqp[1]}",
        )
    finally:
        users.stop()
