#!/usr/bin/env bash
# Side-by-side: the mock worker hit directly, nginx as a plain proxy_pass (when installed),
# and tollgate on each IO engine, under the same wrk load, in interleaved rounds.
# Prints requests/s, p50/p99 latency and the proxy's CPU time per request.
#
#   perf/compare.sh [--rounds N] [--duration SECS] [--connections N] [--threads N]
#
# Needs: wrk (apt package wrk); nginx is optional (apt package nginx).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 duration=10 connections=64 wrk_threads=1 proxy_threads=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --connections) connections=$2; shift 2 ;;
        --threads) proxy_threads=$2; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }

target_dir=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet --bin tollgate --bin mock-worker
bin="$target_dir/release"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The worker gets the second core's worth of threads so it is never the bottleneck.
"$bin/mock-worker" --host 127.0.0.1 --port 0 --threads 1 --no-request-log --output-tokens 16 >"$work/mock.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q LISTENING "$work/mock.out" && break; sleep 0.1; done
mock_addr=$(awk '/LISTENING/ {print $2; exit}' "$work/mock.out")

declare -A url pid
url[direct]="http://$mock_addr"

start_gateway() { # name engine
    local port; port=$(free_port)
    "$bin/tollgate" --host 127.0.0.1 --port "$port" --worker-urls "http://$mock_addr" \
        --runtime-worker-threads "$proxy_threads" --io-engine "$2" --log-level warn \
        --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" >"$work/$1.log" 2>&1 &
    pid[$1]=$!; pids+=($!)
    url[$1]="http://127.0.0.1:$port"
    for _ in $(seq 100); do curl -sf "${url[$1]}/health" >/dev/null && return; sleep 0.05; done
    echo "$1 did not start" >&2; cat "$work/$1.log" >&2; exit 1
}
start_gateway tollgate-epoll epoll
if [ "$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 0)" = "0" ]; then
    start_gateway tollgate-uring uring
fi

if command -v nginx >/dev/null; then
    port=$(free_port)
    mkdir -p "$work/nginx"
    cat >"$work/nginx.conf" <<CONF
worker_processes $proxy_threads;
pid $work/nginx.pid;
error_log $work/nginx/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx; proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx; uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
    upstream mock { server $mock_addr; keepalive 512; }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
CONF
    nginx -c "$work/nginx.conf" &
    pids+=($!)
    url[nginx]="http://127.0.0.1:$port"
    for _ in $(seq 50); do curl -sf -o /dev/null "${url[nginx]}/health" && break; sleep 0.1; done
    # nginx forks workers: account CPU of the whole process group.
    pid[nginx]=$(cat "$work/nginx.pid")
fi

cat >"$work/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"mock-model","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %.3f %.3f %.3f %d\n", summary.requests,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.duration / 1e6, summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

cpu_ticks() { # pid [children too]: utime+stime of the process and its children (nginx workers)
    local total=0 p
    for p in $1 $(pgrep -P "$1" 2>/dev/null); do
        [ -r "/proc/$p/stat" ] || continue
        total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$total"
}
hz=$(getconf CLK_TCK)

targets=(direct)
[ -n "${url[nginx]:-}" ] && targets+=(nginx)
targets+=(tollgate-epoll)
[ -n "${url[tollgate-uring]:-}" ] && targets+=(tollgate-uring)

declare -A reqs secs p50 p99 cpu errs
for r in $(seq "$rounds"); do
    for t in "${targets[@]}"; do
        before=0; [ -n "${pid[$t]:-}" ] && before=$(cpu_ticks "${pid[$t]}")
        line=$(wrk -t"$wrk_threads" -c"$connections" -d"${duration}s" -s "$work/chat.lua" "${url[$t]}/v1/chat/completions" | grep RESULT)
        after=0; [ -n "${pid[$t]:-}" ] && after=$(cpu_ticks "${pid[$t]}")
        read -r _ n a b d e <<<"$line"
        reqs[$t]=$(( ${reqs[$t]:-0} + n )); secs[$t]=$(echo "${secs[$t]:-0} + $d" | bc -l)
        p50[$t]="${p50[$t]:-} $a"; p99[$t]="${p99[$t]:-} $b"; errs[$t]=$(( ${errs[$t]:-0} + e ))
        cpu[$t]=$(( ${cpu[$t]:-0} + after - before ))
        echo "round $r $t: $n requests, p50 ${a} ms, p99 ${b} ms" >&2
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
direct_rps=$(echo "${reqs[direct]} / ${secs[direct]}" | bc -l)
printf '\n%-16s %10s %9s %9s %9s %14s %7s\n' target "req/s" "vs direct" "p50 ms" "p99 ms" "CPU µs/req" errors
for t in "${targets[@]}"; do
    rps=$(echo "${reqs[$t]} / ${secs[$t]}" | bc -l)
    ratio=$(echo "$rps / $direct_rps" | bc -l)
    per="-"
    [ "$t" != direct ] && per=$(printf '%.1f' "$(echo "${cpu[$t]} * 1000000 / $hz / ${reqs[$t]}" | bc -l)")
    printf '%-16s %10.0f %9.2f %9s %9s %14s %7s\n' "$t" "$rps" "$ratio" \
        "$(echo "${p50[$t]}" | median)" "$(echo "${p99[$t]}" | median)" "$per" "${errs[$t]}"
done
