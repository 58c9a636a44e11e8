#!/usr/bin/env bash
# Quick start: builds tollgate and the bundled mock engine, starts the mock on 127.0.0.1:8000
# and tollgate on 127.0.0.1:30000 in front of it, and leaves both running until Ctrl-C.
#   perf/quickstart.sh [extra tollgate flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin tollgate --bin mock-worker
bin="${CARGO_TARGET_DIR:-target}/release"
"$bin/mock-worker" --host 127.0.0.1 --port 8000 --itl-ms 20 --output-tokens 32 &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
echo "mock engine on http://127.0.0.1:8000; tollgate on http://127.0.0.1:30000 (Ctrl-C stops both)"
"$bin/tollgate" --host 127.0.0.1 --port 30000 --worker-urls http://127.0.0.1:8000 "$@"
