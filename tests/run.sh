#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit tests, and the black-box
# integration suite once per IO engine (io_uring and epoll). Usage: tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "unit tests"
cargo test --lib --bins

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

step "benches compile"
cargo bench --no-run --quiet
