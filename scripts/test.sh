#!/usr/bin/env bash
# The project's one test command: every Rust test (unit and end to end),
# then the interoperability tests with clients this project did not write
# (stomp.py), which it installs into a local virtual environment.
# Every server a test starts listens on 127.0.0.1 ephemeral ports and is
# stopped by the test.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --locked "$@"

echo "== interoperability tests"
cargo build --locked --bins
venv=target/interop-venv
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/interop/requirements.txt
HERALD_BIN_DIR="$PWD/target/debug" "$venv/bin/pytest" -q tests/interop
