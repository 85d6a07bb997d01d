#!/usr/bin/env bash
# The project's one test command: every Rust test, unit and end to end.
# Tests start their own servers on 127.0.0.1 ephemeral ports and stop them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked "$@"
