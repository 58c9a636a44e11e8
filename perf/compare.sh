#!/usr/bin/env bash
# Kept for old instructions: the side-by-side runner is now perf/compare, which drives
# tollgate-load instead of wrk and has several scenarios (see perf/compare --help).
exec "$(dirname "$0")/compare" "$@"
