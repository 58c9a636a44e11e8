#!/usr/bin/env bash
# Runs the Open Responses compliance suite (its CLI runner) against a `/v1/responses`
# server: the gateway in front of llama.cpp through the gRPC adapter, or in front of an
# external provider.
#
# The suite is published to no package registry (neither npm nor PyPI has it), and its code
# does not belong in this repository: give a checkout of it in OPENRESPONSES_DIR. What its
# runner needs is installed from the npm registry, pinned, once per machine, under
# $TOLLGATE_REAL_ENGINE_DIR/openresponses (default /var/tmp/tollgate-real-engine):
# bun (the runtime the suite's runner is written for; its binary comes inside the npm
# package @oven/bun-linux-*) and zod 3 (the one library the runner imports). The runner
# and the schema files it imports (bin/ or scripts/, src/lib/, src/generated/) are copied
# beside that node_modules, so the checkout itself stays untouched.
#
#   perf/real_engine/openresponses.sh BASE_URL MODEL [API_KEY] [-- RUNNER_ARGS...]
#   OPENRESPONSES_DIR=~/src/openresponses \
#     perf/real_engine/openresponses.sh http://127.0.0.1:8080/v1 smollm2 -- --filter basic-response -v
#
# BASE_URL ends in /v1 (the runner POSTs to BASE_URL/responses). API_KEY defaults to
# $OPENRESPONSES_API_KEY, else "none" (a gateway without --api-key ignores it).
# Exit status: 0 when every test passed (optional ones may be skipped), 1 when one failed,
# 2 on a usage or setup error, 77 when OPENRESPONSES_DIR is unset or not a suite checkout
# (the caller decides whether that skips or fails).
set -euo pipefail

BUN_VERSION="${OPENRESPONSES_BUN_VERSION:-1.4.5}"
ZOD_VERSION="${OPENRESPONSES_ZOD_VERSION:-3.25.76}"
root="${TOLLGATE_REAL_ENGINE_DIR:-/var/tmp/tollgate-real-engine}"

log() { printf '[openresponses] %s\n' "$*" >&2; }
usage() {
    sed -n '/^#   perf/,/^#     perf/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 2 ] || usage
base_url="$1"
model="$2"
shift 2
api_key="${OPENRESPONSES_API_KEY:-none}"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    api_key="$1"
    shift
fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift

suite="${OPENRESPONSES_DIR:-}"
if [ -z "$suite" ]; then
    log "OPENRESPONSES_DIR is not set: give a checkout of the Open Responses repository"
    exit 77
fi
if [ -f "$suite/bin/compliance-test.ts" ]; then
    runner_rel="bin/compliance-test.ts"
elif [ -f "$suite/scripts/compliance-test.ts" ]; then
    runner_rel="scripts/compliance-test.ts" # the suite's older layout
else
    log "$suite holds no bin/compliance-test.ts (nor scripts/compliance-test.ts)"
    exit 77
fi
for dir in src/lib src/generated; do
    [ -d "$suite/$dir" ] || { log "$suite lacks $dir"; exit 77; }
done
command -v npm >/dev/null || { log "npm is needed (Debian: apt-get install npm)"; exit 2; }

# 1. The runner's packages, once per version pair (one install at a time per machine).
tools="$root/openresponses/bun-$BUN_VERSION-zod-$ZOD_VERSION"
mkdir -p "$root/openresponses"
exec 8>"$root/openresponses/.lock"
flock 8
if [ ! -x "$tools/node_modules/.bin/bun" ] || [ ! -f "$tools/node_modules/zod/package.json" ]; then
    log "installing bun@$BUN_VERSION and zod@$ZOD_VERSION from the npm registry into $tools"
    tmp="$(mktemp -d "$root/openresponses/.install.XXXXXX")"
    printf '{"name":"openresponses-runner","private":true}\n' >"$tmp/package.json"
    (cd "$tmp" && npm install --silent --no-audit --no-fund --save-exact \
        "bun@$BUN_VERSION" "zod@$ZOD_VERSION")
    rm -rf "$tools"
    mv "$tmp" "$tools"
fi
flock -u 8
bun="$tools/node_modules/.bin/bun"

# 2. This run's copy of the suite's runner and schema, beside the packages: imports of
# `zod` resolve to $tools/node_modules.
work="$(mktemp -d "$tools/.run.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/$(dirname "$runner_rel")" "$work/src"
cp "$suite/$runner_rel" "$work/$runner_rel"
cp -R "$suite/src/lib" "$suite/src/generated" "$work/src/"

# 3. The run. The runner exits 1 when a test failed.
log "running $(git -C "$suite" rev-parse --short HEAD 2>/dev/null || echo "$suite") against $base_url (model $model)"
set +e
(cd "$work" && OPENRESPONSES_API_KEY="$api_key" API_KEY="$api_key" \
    "$bun" "$runner_rel" --base-url "$base_url" --api-key "$api_key" --model "$model" "$@")
status=$?
set -e
if [ $status -ne 0 ]; then
    log "compliance suite failed (exit $status)"
    exit 1
fi
log "compliance suite passed"
