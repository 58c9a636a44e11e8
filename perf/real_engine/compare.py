#!/usr/bin/env python3
"""Time to first token and tokens/s of one llama-server, direct and through tollgate.

Both paths are measured in the same run, interleaved round by round (the order flips every
round), with the same prompt, temperature 0, a fixed number of generated tokens
(max_tokens with ignore_eos) and one keep-alive HTTP client per path.

  perf/real_engine/compare.py                      # starts its own engine and gateway
  perf/real_engine/compare.py --direct URL --gateway URL   # measures running ones

The engine and model come from perf/real_engine/fetch.sh (run when
TOLLGATE_REAL_ENGINE_SERVER is not set); tollgate is $TOLLGATE_BIN, else the dev build in
$CARGO_TARGET_DIR (or target/). Run it with the venv's python (fetch.sh prints its path).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

PROMPT = "Describe a quiet harbour town at dawn."


def one_stream(client: httpx.Client, url: str, max_tokens: int) -> tuple[float, float, int]:
    """Returns (ttft seconds, tokens/s after the first token, content chunks)."""
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    first = last = None
    n = 0
    try:
        r = client.send(client.build_request("POST", url + "/v1/chat/completions", json=body),
                        stream=True)
    except httpx.RemoteProtocolError as e:  # direct: nothing came back on a reused connection
        raise Lost() from e
    try:
        if r.status_code == 502 and r.headers.get("x-gw-error-code") == "worker_connection_error":
            raise Lost()  # the gateway's pooled connection to the engine was closing
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                n += 1
                first = first or now
                last = now
    finally:
        r.close()
    if first is None:
        raise RuntimeError(f"no content from {url}")
    tps = (n - 1) / (last - first) if n > 1 and last > first else float("nan")
    return first - t0, tps, n


class Lost(Exception):
    """The request was lost before any response: the connection it went out on was closing."""


def timed_stream(client: httpx.Client, url: str, max_tokens: int) -> tuple[float, float, int, int]:
    """one_stream, again on a new connection when the last one was lost (llama-server closes
    its connection after each stream; see docs/real-engine.md). Returns the retries too."""
    for attempt in range(4):
        try:
            return (*one_stream(client, url, max_tokens), attempt)
        except Lost:
            continue
    raise RuntimeError(f"{url}: four requests in a row lost")


def measure(direct_url: str, gateway_url: str, rounds: int = 10, max_tokens: int = 32,
            headers: dict | None = None) -> dict:
    paths = {"direct": direct_url, "gateway": gateway_url}
    clients = {k: httpx.Client(timeout=60, headers=headers or {}) for k in paths}
    results = {k: {"ttft": [], "tps": [], "tokens": [], "retries": 0} for k in paths}
    try:
        for k, url in paths.items():  # warm-up: connections, prompt cache
            for i in range(2):
                try:
                    timed_stream(clients[k], url, max_tokens)
                except httpx.HTTPError as e:
                    raise RuntimeError(f"{k} warm-up request {i + 1} to {url} failed: {e!r}") from e
        for i in range(rounds):
            order = ["direct", "gateway"] if i % 2 == 0 else ["gateway", "direct"]
            for k in order:
                try:
                    ttft, tps, n, retries = timed_stream(clients[k], paths[k], max_tokens)
                except httpx.HTTPError as e:
                    raise RuntimeError(f"{k} round {i + 1} to {paths[k]} failed: {e!r}") from e
                results[k]["ttft"].append(ttft)
                results[k]["tps"].append(tps)
                results[k]["tokens"].append(n)
                results[k]["retries"] += retries
    finally:
        for c in clients.values():
            c.close()
    return results


def summary(results: dict) -> dict:
    out = {}
    for k, r in results.items():
        out[k] = {
            "ttft_median_ms": statistics.median(r["ttft"]) * 1000,
            "ttft_min_ms": min(r["ttft"]) * 1000,
            "ttft_max_ms": max(r["ttft"]) * 1000,
            "tps_median": statistics.median(r["tps"]),
            "tokens": statistics.median(r["tokens"]),
            "rounds": len(r["ttft"]),
            "retries": r["retries"],
        }
    return out


def table(s: dict) -> str:
    d, g = s["direct"], s["gateway"]
    rows = [
        f"{'path':<10}{'rounds':>7}{'tokens':>8}{'TTFT median':>13}{'TTFT min':>10}{'TTFT max':>10}"
        f"{'tokens/s':>10}{'lost+resent':>13}",
    ]
    for name, x in (("direct", d), ("gateway", g)):
        rows.append(
            f"{name:<10}{x['rounds']:>7}{x['tokens']:>8.0f}{x['ttft_median_ms']:>10.2f} ms"
            f"{x['ttft_min_ms']:>7.2f} ms{x['ttft_max_ms']:>7.2f} ms{x['tps_median']:>10.1f}"
            f"{x['retries']:>13}"
        )
    rows.append(
        f"{'delta':<10}{'':>7}{'':>8}{g['ttft_median_ms'] - d['ttft_median_ms']:>+10.2f} ms"
        f"{g['ttft_min_ms'] - d['ttft_min_ms']:>+7.2f} ms{'':>10}"
        f"{(g['tps_median'] / d['tps_median'] - 1) * 100:>+9.1f}%"
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--direct", help="engine base URL (default: start one)")
    ap.add_argument("--gateway", help="gateway base URL in front of that engine only")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    if bool(args.direct) != bool(args.gateway):
        ap.error("--direct and --gateway go together")
    if args.direct:
        print(table(summary(measure(args.direct, args.gateway, args.rounds, args.max_tokens))))
        return 0
    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "tests" / "real_engine"))
    import harness

    if not os.environ.get("TOLLGATE_REAL_ENGINE_SERVER"):
        out = subprocess.run([str(repo / "perf/real_engine/fetch.sh")], check=True,
                             capture_output=True, text=True).stdout
        os.environ.update(l.split("=", 1) for l in out.splitlines() if l.startswith("TOLLGATE_"))
    if not os.environ.get("TOLLGATE_BIN"):
        target = Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
        os.environ["TOLLGATE_BIN"] = str((target / "debug" / "tollgate").resolve())

    logdir = Path(tempfile.mkdtemp(prefix="tollgate-compare-"))
    eng = harness.engine(logdir, "engine")
    gw = None
    try:
        harness.start_engine(eng)
        gw = harness.gateway(logdir, "tollgate", [eng.url], [])
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 30)
        print(table(summary(measure(eng.url, gw.url, args.rounds, args.max_tokens))))
    finally:
        if gw:
            gw.stop()
        eng.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
