#!/usr/bin/env bash
# The real-engine suite: tollgate in front of llama.cpp's llama-server (SmolLM2-135M on CPU),
# over HTTP and over SGLang's gRPC service (grpc-engine's llama.cpp adapter), driven by the
# official OpenAI and Anthropic Python SDKs.
#   tests/real_engine/run.sh [pytest args...]
# Fetches/builds the engine, model and Python packages once per machine (outside the clone,
# see perf/real_engine/fetch.sh), builds tollgate and grpc-engine, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."

paths="$(perf/real_engine/fetch.sh)"
eval "$paths"
export TOLLGATE_REAL_ENGINE_SERVER TOLLGATE_REAL_ENGINE_MODEL TOLLGATE_REAL_ENGINE_TOKENIZER

# The gateway, grpc-engine (SGLang's gRPC service in front of llama-server, for
# test_5_grpc.py) and mock-worker (the provider stand-in of test_7_provider.py); each can be
# given prebuilt.
bins=()
[ -n "${TOLLGATE_BIN:-}" ] || bins+=(--bin tollgate)
[ -n "${TOLLGATE_GRPC_ENGINE_BIN:-}" ] || bins+=(--bin grpc-engine)
[ -n "${TOLLGATE_MOCK_WORKER_BIN:-}" ] || bins+=(--bin mock-worker)
if [ "${#bins[@]}" -gt 0 ]; then
    cargo build --quiet "${bins[@]}"
fi
TOLLGATE_BIN="${TOLLGATE_BIN:-${CARGO_TARGET_DIR:-target}/debug/tollgate}"
TOLLGATE_GRPC_ENGINE_BIN="${TOLLGATE_GRPC_ENGINE_BIN:-${CARGO_TARGET_DIR:-target}/debug/grpc-engine}"
export TOLLGATE_BIN="$(cd "$(dirname "$TOLLGATE_BIN")" && pwd)/$(basename "$TOLLGATE_BIN")"
export TOLLGATE_GRPC_ENGINE_BIN="$(cd "$(dirname "$TOLLGATE_GRPC_ENGINE_BIN")" && pwd)/$(basename "$TOLLGATE_GRPC_ENGINE_BIN")"
TOLLGATE_MOCK_WORKER_BIN="${TOLLGATE_MOCK_WORKER_BIN:-${CARGO_TARGET_DIR:-target}/debug/mock-worker}"
export TOLLGATE_MOCK_WORKER_BIN="$(cd "$(dirname "$TOLLGATE_MOCK_WORKER_BIN")" && pwd)/$(basename "$TOLLGATE_MOCK_WORKER_BIN")"

exec "$TOLLGATE_REAL_ENGINE_PYTHON" -m pytest tests/real_engine -p no:cacheprovider \
    -o console_output_style=classic -rA --durations=5 "$@"
