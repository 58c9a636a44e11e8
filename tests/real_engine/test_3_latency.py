"""The gateway adds no visible delay: TTFT and tokens/s of one engine, direct and through
tollgate, in one run (perf/real_engine/compare.py, interleaved rounds)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf" / "real_engine"))

import compare  # noqa: E402
import conftest  # noqa: E402


def test_gateway_adds_no_visible_delay(fleet, open_gateway):
    s = compare.summary(compare.measure(fleet.a.url, open_gateway.url, rounds=16, max_tokens=32))
    conftest.REPORTS.append(("gateway vs direct (same engine, same run)", compare.table(s)))
    d, g = s["direct"], s["gateway"]
    assert d["tokens"] == g["tokens"] == 32
    # The target is within 1 ms of TTFT and the same tokens/s; the table shows the measured
    # figures. On a shared 2-core machine (engine, gateway, client and other jobs on the same
    # cores) single runs scatter by several ms and ~10 %, so the assertions catch only what
    # no noise explains: a gateway that buffers (TTFT up by tens of ms) or throttles a stream.
    assert g["ttft_median_ms"] - d["ttft_median_ms"] < 10, compare.table(s)
    assert g["tps_median"] > 0.8 * d["tps_median"], compare.table(s)
