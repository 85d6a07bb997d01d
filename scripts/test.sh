#!/usr/bin/env bash
# The project's one test command: every Rust test (unit and end to end),
# then the interoperability tests with clients this project did not write:
# stomp.py (installed into a local virtual environment) and stomp.js in
# headless Chromium (Debian's chromium package, installed if missing, and
# the npm packages pinned in tests/browser).
# Every server a test starts listens on 127.0.0.1 ephemeral ports and is
# stopped by the test.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --locked "$@"

echo "== interoperability tests"
cargo build --locked --bins
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "chromium is missing: install Debian's chromium package (as root: apt-get install chromium)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
venv=target/interop-venv
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/interop/requirements.txt
HERALD_BIN_DIR="$PWD/target/debug" "$venv/bin/pytest" -q tests/interop
