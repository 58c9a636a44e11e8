#!/usr/bin/env bash
# Bounded fuzzing of every cargo-fuzz target, as CI and the fuzz campaign run it.
#
# For each target (discovered from fuzz/Cargo.toml, so new targets join by being declared):
#   1. replay every committed regression input in tests/fuzz_regressions/<target>/;
#   2. fuzz for --seconds, starting from fuzz/corpus/<target>/ (kept between runs, gitignored)
#      plus the committed seeds in fuzz/seeds/<target>/;
#   3. on a crash, leak, timeout or OOM, copy the reproducer to tests/fuzz_regressions/<target>/
#      and carry on with the next target; the script exits 1 naming every reproducer.
# Per target it prints the run count, execs/s and final coverage from libFuzzer's summary.
#
# Needs a nightly toolchain (skips with a message and exit 0 without one) and cargo-fuzz
# (installed with `cargo install cargo-fuzz --locked` when missing). Builds go to
# $CARGO_TARGET_DIR when set, else fuzz/target.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: fuzz/run.sh [--seconds N] [--jobs J] [--rss-limit-mb MB] [--timeout S] [--log-dir DIR]
                   [TARGET...]

Replays tests/fuzz_regressions/<target>/ and then fuzzes each target for N seconds.
With no TARGET, every target declared in fuzz/Cargo.toml runs, J at a time.

  --seconds N         fuzzing time per target (default 20); 0 replays regressions only
  --jobs J            targets fuzzed at once, one core each (default 1)
  --rss-limit-mb MB   libFuzzer -rss_limit_mb (default 2048)
  --timeout S         libFuzzer -timeout, seconds for one input (default 10)
  --log-dir DIR       keep each target's full libFuzzer output in DIR/<target>.log
  --dev               build without optimisation (much quicker to build from cold,
                      fewer execs/s: what CI uses for its short runs)
                      (default: a temporary directory, removed at the end)
  --list              print the targets and exit
  -h, --help          this text

Exit status: 0 when every target ran clean (or no nightly toolchain exists: skipped),
1 when a target crashed (the reproducer is copied to tests/fuzz_regressions/<target>/),
2 on a usage or build error.
EOF
}

seconds=20
jobs=1
profile=release
rss_limit_mb=2048
timeout=10
log_dir=""
list_only=0
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="${2:?--seconds takes a number}"; shift 2 ;;
        --jobs) jobs="${2:?--jobs takes a number}"; shift 2 ;;
        --rss-limit-mb) rss_limit_mb="${2:?--rss-limit-mb takes a number}"; shift 2 ;;
        --timeout) timeout="${2:?--timeout takes a number}"; shift 2 ;;
        --log-dir) log_dir="${2:?--log-dir takes a directory}"; shift 2 ;;
        --list) list_only=1; shift ;;
        --dev) profile=dev; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "fuzz/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
for n in "$seconds" "$jobs" "$rss_limit_mb" "$timeout"; do
    case "$n" in
        ''|*[!0-9]*) echo "fuzz/run.sh: $n is not a whole number" >&2; exit 2 ;;
    esac
done
[ "$jobs" -ge 1 ] || { echo "fuzz/run.sh: --jobs must be at least 1" >&2; exit 2; }

fuzz_dir="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$fuzz_dir")"
cd "$fuzz_dir"

# Targets are the [[bin]] names of the fuzz crate.
declared=()
while IFS= read -r name; do declared+=("$name"); done < <(
    awk '/^\[\[bin\]\]/ { in_bin = 1; next }
         /^\[/ { in_bin = 0 }
         in_bin && /^name *=/ { gsub(/^name *= *"|".*$/, ""); print }' Cargo.toml
)
if [ "$list_only" = 1 ]; then
    printf '%s\n' "${declared[@]}"
    exit 0
fi
if [ ${#targets[@]} -eq 0 ]; then
    targets=("${declared[@]}")
fi
for t in "${targets[@]}"; do
    if ! printf '%s\n' "${declared[@]}" | grep -qx -- "$t"; then
        echo "fuzz/run.sh: no fuzz target named $t (have: ${declared[*]})" >&2
        exit 2
    fi
done

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: no nightly toolchain (rustup toolchain install nightly): fuzzing skipped"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz missing; installing it"
    cargo install cargo-fuzz --locked
fi

target_dir="${CARGO_TARGET_DIR:-$fuzz_dir/target}"
triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
build_flags=()
profile_dir=release
if [ "$profile" = dev ]; then
    build_flags=(--dev)
    profile_dir=debug
fi
echo "==> cargo +nightly fuzz build ${build_flags[*]} (${targets[*]})"
build_start=$SECONDS
# Every target in one cargo invocation (its binaries link side by side) unless some were named.
if [ ${#targets[@]} -eq ${#declared[@]} ]; then
    if ! cargo +nightly fuzz build "${build_flags[@]}" --target-dir "$target_dir"; then
        echo "fuzz/run.sh: building the fuzz targets failed" >&2
        exit 2
    fi
else
    for t in "${targets[@]}"; do
        if ! cargo +nightly fuzz build "${build_flags[@]}" --target-dir "$target_dir" "$t"; then
            echo "fuzz/run.sh: building $t failed" >&2
            exit 2
        fi
    done
fi
echo "built in $((SECONDS - build_start)) s"

cleanup_logs=0
if [ -z "$log_dir" ]; then
    log_dir="$(mktemp -d)"
    cleanup_logs=1
fi
mkdir -p "$log_dir"
trap '[ "$cleanup_logs" = 1 ] && rm -rf "$log_dir"' EXIT

# The value of `stat::<name>:` in a libFuzzer log, or "-".
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1 | grep . || echo "-"; }
# A field (`cov:`, `ft:`, `corp:`) of the last libFuzzer status line, or "-".
status_field() {
    grep -E '^#[0-9]+' "$2" | tail -n 1 | sed -n "s/.* $1 \([^ ]*\).*/\1/p" | grep . || echo "-"
}

# One target: replay, then fuzz. Its summary line goes to $log_dir/$t.summary and, when it
# failed, the reason to $log_dir/$t.failed, so targets can run side by side (--jobs).
fuzz_one() {
    local t="$1"
    local bin="$target_dir/$triple/$profile_dir/$t"
    local regressions="$root/tests/fuzz_regressions/$t"
    local seeds="$fuzz_dir/seeds/$t"
    local corpus="$fuzz_dir/corpus/$t"
    local artifacts="$fuzz_dir/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    local log="$log_dir/$t.log"
    local row="$log_dir/$t.summary"

    # 1. Regression replay: each file runs once; any failure is a failure of this run.
    local replayed=0
    if [ -d "$regressions" ]; then
        local files=()
        while IFS= read -r -d '' f; do files+=("$f"); done < <(
            find "$regressions" -type f ! -name '*.md' -print0 | sort -z
        )
        replayed=${#files[@]}
        if [ "$replayed" -gt 0 ]; then
            echo "==> $t: replaying $replayed regression input(s)"
            if ! "$bin" -rss_limit_mb="$rss_limit_mb" -timeout="$timeout" "${files[@]}" \
                >"$log_dir/$t.replay.log" 2>&1; then
                tail -n 30 "$log_dir/$t.replay.log"
                echo "fuzz/run.sh: $t fails on a regression input in tests/fuzz_regressions/$t/" >&2
                echo "$t: regression replay (see above)" >"$log_dir/$t.failed"
                printf '%-12s %8s %12s %10s %8s %8s %10s  %s\n' "$t" 0 - - - - - "REPLAY FAILED" >"$row"
                return
            fi
        fi
    fi
    if [ "$seconds" = 0 ]; then
        printf '%-12s %8s %12s %10s %8s %8s %10s  %s\n' "$t" 0 - - - - - "replayed $replayed" >"$row"
        return
    fi

    # 2. Bounded fuzzing. New corpus entries go to the first directory only.
    local dirs=("$corpus")
    [ -d "$seeds" ] && dirs+=("$seeds")
    echo "==> $t: fuzzing for ${seconds} s (corpus $(find "$corpus" -type f | wc -l) + seeds $(find "$seeds" -type f 2>/dev/null | wc -l))"
    local started=$SECONDS
    local status=0
    "$bin" -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" -timeout="$timeout" \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" >"$log" 2>&1 || status=$?
    local took=$((SECONDS - started))

    local runs per_sec cov ft corp
    runs="$(final_stat number_of_executed_units "$log")"
    per_sec="$(final_stat average_exec_per_sec "$log")"
    cov="$(status_field cov: "$log")"
    ft="$(status_field ft: "$log")"
    corp="$(status_field corp: "$log")"
    local outcome="ok"
    if [ "$status" != 0 ]; then
        # libFuzzer names the reproducer on a line `Test unit written to <path>`.
        local unit
        unit="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
        tail -n 40 "$log"
        if [ -n "$unit" ] && [ -f "$unit" ]; then
            mkdir -p "$regressions"
            cp "$unit" "$regressions/"
            local kept
            kept="tests/fuzz_regressions/$t/$(basename "$unit")"
            outcome="CRASH: $kept"
            echo "$t: $kept" >"$log_dir/$t.failed"
        else
            outcome="FAILED (exit $status, no reproducer; log above)"
            echo "$t: exit $status without a reproducer" >"$log_dir/$t.failed"
        fi
    fi
    printf '%-12s %8s %12s %10s %8s %8s %10s  %s\n' "$t" "$took" "$runs" "$per_sec" "$cov" "$ft" "$corp" "$outcome" >"$row"
}

# Up to --jobs targets at once; each fuzzer is one process on one core.
running=0
for t in "${targets[@]}"; do
    rm -f "$log_dir/$t.summary" "$log_dir/$t.failed"
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
    summary+=("$(cat "$log_dir/$t.summary" 2>/dev/null || printf '%-12s %s' "$t" "NO RESULT")")
    [ -f "$log_dir/$t.summary" ] || failed+=("$t: ended without a result")
    [ -f "$log_dir/$t.failed" ] && failed+=("$(cat "$log_dir/$t.failed")")
done

echo
echo "==> fuzz summary (${seconds} s a target)"
printf '%-12s %8s %12s %10s %8s %8s %10s  %s\n' target seconds runs "execs/s" cov ft corpus outcome
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo
    echo "fuzz/run.sh: ${#failed[@]} target(s) failed:" >&2
    printf '  %s\n' "${failed[@]}" >&2
    echo "reproduce: cargo +nightly fuzz run <target> <file>; fix, then keep the file as a regression input" >&2
    exit 1
fi
