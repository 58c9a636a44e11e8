#!/usr/bin/env python3
"""Prefix-cache hit ratio through the gateway for one routing policy.

Starts N mock workers (each simulating a prefix KV cache) and tollgate with the given
policy, sends G groups x R requests (each: a shared prefix of P bytes + a unique suffix),
in shuffled order over C concurrent connections, and prints the share of prompt tokens
the workers served from their caches (the mocks' `cached_tokens`).

    perf/prefix_hits.py --policy cache_aware [--workers 4 --groups 32 --prefix 4096 ...]

Build first: cargo build --release --bin tollgate --bin mock-worker (or pass --bin-dir).
"""
import argparse
import concurrent.futures
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except Exception:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="cache_aware")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--per-group", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--bin-dir", default=os.environ.get("CARGO_TARGET_DIR", "target") + "/release")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    procs = []
    try:
        mocks = []
        for _ in range(args.workers):
            port = free_port()
            procs.append(subprocess.Popen(
                [f"{args.bin_dir}/mock-worker", "--host", "127.0.0.1", "--port", str(port),
                 "--no-request-log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            mocks.append(f"http://127.0.0.1:{port}")
        for m in mocks:
            wait_http(m + "/health")
        gw_port = free_port()
        procs.append(subprocess.Popen(
            [f"{args.bin_dir}/tollgate", "--host", "127.0.0.1", "--port", str(gw_port),
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
             "--policy", args.policy, "--log-level", "warn", "--worker-urls", *mocks],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        gw = f"http://127.0.0.1:{gw_port}"
        wait_http(gw + "/health")

        rng = random.Random(args.seed)
        prefixes = []
        for g in range(args.groups):
            words = [f"g{g}w{rng.randrange(10**6)}" for _ in range(args.prefix // 9 + 1)]
            prefixes.append(" ".join(words)[: args.prefix])
        jobs = [(g, i) for g in range(args.groups) for i in range(args.per_group)]
        rng.shuffle(jobs)

        def one(job):
            g, i = job
            body = {"model": "mock-model", "messages": [
                {"role": "system", "content": prefixes[g]},
                {"role": "user", "content": f"question {i} of group {g}"}]}
            req = urllib.request.Request(gw + "/v1/chat/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                usage = json.load(r)["usage"]
            details = usage.get("prompt_tokens_details") or {}
            return usage["prompt_tokens"], details.get("cached_tokens", 0)

        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(one, jobs))
        took = time.time() - started
        prompt = sum(p for p, _ in results)
        cached = sum(c for _, c in results)
        print(json.dumps({"policy": args.policy, "requests": len(results),
                          "workers": args.workers, "groups": args.groups,
                          "prefix_bytes": args.prefix,
                          "cached_token_ratio": round(cached / max(prompt, 1), 3),
                          "seconds": round(took, 2)}))
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    sys.exit(main())
