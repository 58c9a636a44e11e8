#!/usr/bin/env bash
# The real-engine suite: tollgate in front of llama.cpp's llama-server (SmolLM2-135M on CPU),
# driven by the official OpenAI and Anthropic Python SDKs.
#   tests/real_engine/run.sh [pytest args...]
# Fetches/builds the engine, model and Python packages once per machine (outside the clone,
# see perf/real_engine/fetch.sh), builds tollgate, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."

paths="$(perf/real_engine/fetch.sh)"
eval "$paths"
export TOLLGATE_REAL_ENGINE_SERVER TOLLGATE_REAL_ENGINE_MODEL

if [ -z "${TOLLGATE_BIN:-}" ]; then
    cargo build --quiet --bin tollgate
    TOLLGATE_BIN="${CARGO_TARGET_DIR:-target}/debug/tollgate"
fi
export TOLLGATE_BIN="$(cd "$(dirname "$TOLLGATE_BIN")" && pwd)/$(basename "$TOLLGATE_BIN")"

exec "$TOLLGATE_REAL_ENGINE_PYTHON" -m pytest tests/real_engine -p no:cacheprovider \
    -o console_output_style=classic -rA --durations=5 "$@"
