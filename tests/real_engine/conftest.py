"""Fixtures of the real-engine suite.

One session starts two llama-server engines (A and B) and one tollgate in front of them:
A is registered at startup with --worker-urls, B at run time with POST /workers. The data
plane is guarded by a gateway key (the SDKs' api_key), the control plane by an admin key.
Health checks are short so that a dead engine leaves rotation within about a second.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402

GATEWAY_KEY = "tg-real-engine-data-key"
ADMIN_KEY = "tg-real-engine-admin-key"

# (title, text) the tests want shown at the end of the run (the TTFT / tokens/s comparison).
REPORTS: list[tuple[str, str]] = []


class Fleet:
    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.a = harness.engine(logdir, "engine-a")
        self.b = harness.engine(logdir, "engine-b")
        self.gw = harness.gateway(
            logdir,
            "tollgate",
            [self.a.url],
            [
                "--api-key", GATEWAY_KEY,
                "--control-plane-api-keys", f"ops:Operations:admin:{ADMIN_KEY}",
                "--health-check-interval-secs", "1",
                "--health-check-timeout-secs", "1",
                "--health-failure-threshold", "1",
                "--health-success-threshold", "2",
                "--worker-startup-check-interval", "1",
            ],
        )
        self.b_worker_id: str | None = None

    @property
    def engines(self):
        return [self.a, self.b]

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.gw.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        )

    def workers(self) -> list[dict]:
        with self.admin() as c:
            r = c.get("/workers")
            r.raise_for_status()
            body = r.json()
        return body["workers"] if isinstance(body, dict) else body

    def worker_by_url(self, url: str) -> dict | None:
        for w in self.workers():
            if w.get("url", "").rstrip("/") == url:
                return w
        return None

    def wait_status(self, url: str, want: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            w = self.worker_by_url(url)
            seen = w and w.get("status")
            if seen == want:
                return w
            time.sleep(0.1)
        raise AssertionError(f"worker {url} not {want} within {timeout}s (last status {seen})")

    def logs(self) -> str:
        parts = []
        for p in (self.gw, self.a, self.b):
            parts.append(f"--- {p.name} ({p.log_path}) ---\n{p.log_tail(30)}")
        return "\n".join(parts)

    def stop(self) -> None:
        for p in (self.gw, self.a, self.b):
            p.stop()


@pytest.fixture(scope="session")
def fleet():
    logdir = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-"))
    f = Fleet(logdir)
    try:
        harness.start_engine(f.a)
        harness.start_engine(f.b)
        harness.start_gateway(f.gw)
        with f.admin() as c:
            r = c.post("/workers", json={"url": f.b.url})
            assert r.status_code == 202, f"POST /workers: {r.status_code} {r.text}"
            f.b_worker_id = r.json()["worker_id"]
        f.wait_status(f.a.url, "ready")
        f.wait_status(f.b.url, "ready")
        yield f
    finally:
        f.stop()
        print(f"\nreal-engine logs kept in {logdir}")


@pytest.fixture(scope="session")
def open_gateway(fleet):
    """A second tollgate, without any auth, in front of engine A alone."""
    gw = harness.gateway(fleet.logdir, "tollgate-open", [fleet.a.url], [])
    try:
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 30)
        yield gw
    finally:
        gw.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed and "fleet" in item.fixturenames:
        f = item.funcargs.get("fleet")
        if f is not None:
            rep.sections.append(("process logs", f.logs()))


def pytest_terminal_summary(terminalreporter):
    for title, text in REPORTS:
        terminalreporter.write_sep("=", title)
        terminalreporter.write_line(text)
