#!/usr/bin/env bash
# The project's one test command: every Rust test (unit and end to end),
# then the interoperability tests with clients this project did not write:
# stomp.py (installed into a local virtual environment) and stomp.js in
# headless Chromium (Debian's chromium package, installed if missing, and
# the npm packages pinned in tests/browser). The benchmark's comparison
# with NATS is tested against Debian's nats-server, cluster mode against
# Debian's redis-server, and the MQTT listener with Debian's
# mosquitto-clients (and compared with its mosquitto), all installed if
# missing.
# Every server a test starts listens on 127.0.0.1 ephemeral ports and is
# stopped by the test. Two short cluster fault drills (two nodes, a node
# and a Redis primary killed: on Redis Sentinel, then on a Redis Cluster,
# the primary of the cluster's own keys) follow the Rust tests. Between the two, each fuzz target in fuzz/ runs
# FUZZ_RUNS inputs (300,000 by default; 0 skips them) from a fixed seed,
# so that a run is repeatable, with cargo-fuzz on the nightly toolchain,
# installing cargo-fuzz if it is missing. Longer searches from random
# seeds are run by hand (README).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: command, then package.
missing=()
for pair in chromium:chromium nats-server:nats-server redis-server:redis-server \
  mosquitto_pub:mosquitto-clients mosquitto:mosquitto; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing: ${missing[*]}: install Debian's packages (as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cargo test --workspace --locked "$@"

echo "== fuzzing, ${FUZZ_RUNS:=300000} inputs a target"
if [ "$FUZZ_RUNS" -gt 0 ]; then
  if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzzing needs the nightly toolchain (rustup toolchain install nightly)" >&2
    exit 1
  fi
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked --quiet cargo-fuzz
  mkdir -p target
  for target in $(cargo +nightly fuzz list --fuzz-dir fuzz); do
    log="target/fuzz-$target.log"
    # Starting from fuzz/seeds/<target> where there is one (the forms a
    # specification lists); new inputs go to the untracked corpus.
    corpus=("fuzz/corpus/$target")
    mkdir -p "${corpus[0]}"
    [ -d "fuzz/seeds/$target" ] && corpus+=("fuzz/seeds/$target")
    if cargo +nightly fuzz run --fuzz-dir fuzz "$target" "${corpus[@]}" -- \
      -seed=1 -runs="$FUZZ_RUNS" >"$log" 2>&1; then
      echo "$target: $(tail -n 1 "$log")"
    else
      cat "$log"
      echo "fuzz target $target failed; the input is in fuzz/artifacts/$target" >&2
      exit 1
    fi
  done
fi

# The drills and the interoperability tests run the binaries that `cargo
# test --workspace` built for the end-to-end tests, in target/debug (a
# `cargo build` would build them again: without the dev-dependencies its
# features differ, a minute on 2 cores).
echo "== cluster fault drills (short ones: scripts/cluster-drill.sh)"
scripts/cluster-drill.sh --duration 24 --rate 200 --bin target/debug
scripts/cluster-drill.sh --duration 24 --rate 200 --bin target/debug --redis-cluster --kill-control

echo "== interoperability tests"
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
venv=target/interop-venv
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/interop/requirements.txt
HERALD_BIN_DIR="$PWD/target/debug" "$venv/bin/pytest" -q tests/interop

