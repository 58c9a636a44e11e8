"""Processes of the real-engine suite: llama-server engines, grpc-engine adapters and the
tollgate gateway.

Everything runs on 127.0.0.1 with ports picked at start. Each process writes its output to a
log file in a per-run directory, shown when a test fails.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

MODEL_ALIAS = "smollm2"


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999): a port the kernel hands out
    for `bind(0)` can be taken as the source port of some outgoing connection before the
    process it is meant for binds it."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_path(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the suite through tests/real_engine/run.sh")
    return value


@dataclass
class Proc:
    name: str
    argv: list[str]
    log_path: Path
    port: int
    popen: subprocess.Popen | None = None
    # The gateway's --prometheus-port (gateways only).
    metrics_port: int | None = None
    _log: object = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Proc":
        self._log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to end its streams cleanly."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        if self._log:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_http(
        self,
        path: str,
        timeout: float,
        ok=lambda r: r.status_code == 200,
        base: str | None = None,
        verify=True,
    ) -> None:
        """Polls GET `path` until `ok`; `base` and `verify` reach a TLS listener."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            try:
                r = httpx.get((base or self.url) + path, timeout=2, verify=verify)
                if ok(r):
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as e:
                last = repr(e)
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready on {path} after {timeout}s ({last}):\n{self.log_tail()}")


def engine(logdir: Path, name: str, port: int | None = None) -> Proc:
    """A llama-server on one thread (-t 1) serving the SmolLM2 model, with /metrics on."""
    port = port or free_port()
    argv = [
        env_path("TOLLGATE_REAL_ENGINE_SERVER"),
        "-m", env_path("TOLLGATE_REAL_ENGINE_MODEL"),
        "--alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        "-t", "1", "-tb", "1",
        "-c", "4096", "--parallel", "2",
        "--metrics",
        "--no-webui",
    ]
    return Proc(name, argv, logdir / f"{name}.log", port)


def start_engine(proc: Proc, timeout: float = 120) -> Proc:
    proc.start()
    proc.wait_http("/health", timeout)
    return proc


def grpc_adapter(logdir: Path, name: str, engine: Proc, extra: list[str] | None = None) -> Proc:
    """grpc-engine in llama mode: SGLang's gRPC scheduler service (or the one `extra` names
    with `--service`) in front of `engine`, serving the model as MODEL_ALIAS with the
    tokenizer exported from its GGUF. Its event lines (`generate ...`, `abort ...`,
    `cancelled ...`) go to its log."""
    port = free_port()
    argv = [
        env_path("TOLLGATE_GRPC_ENGINE_BIN"),
        "--host", "127.0.0.1", "--port", str(port),
        "--llama-server", engine.url,
        "--model", MODEL_ALIAS,
        "--tokenizer-path", env_path("TOLLGATE_REAL_ENGINE_TOKENIZER"),
        *(extra or []),
    ]
    return Proc(name, argv, logdir / f"{name}.log", port)


def zmq_rank(logdir: Path, name: str, engine: Proc, handshake: str, rank: int = 0) -> Proc:
    """perf/zmq_engine/engine.py in llama mode: one vLLM engine-core rank in front of
    `engine`, dialling the gateway's ZMQ handshake address. Its event lines (`add ...`,
    `abort ...`, `finish ...`) go to its log. It listens on no port of its own."""
    script = Path(__file__).resolve().parents[2] / "perf" / "zmq_engine" / "engine.py"
    argv = [
        sys.executable, str(script),
        "--handshake", handshake, "--rank", str(rank),
        "--mode", "llama", "--llama-url", engine.url,
    ]
    return Proc(name, argv, logdir / f"{name}.log", 0)


def wait_log(proc: Proc, needles: tuple[str, ...], timeout: float) -> str:
    """The first line of `proc`'s log containing any of `needles`, waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        for line in proc.log_tail(10_000).splitlines():
            if any(n in line for n in needles):
                return line
        if time.monotonic() >= deadline:
            raise AssertionError(f"no line with {needles} in {proc.name}'s log:\n{proc.log_tail()}")
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
        time.sleep(0.05)


def start_grpc_adapter(proc: Proc, timeout: float = 30) -> Proc:
    proc.start()
    wait_log(proc, ("LISTENING",), timeout)
    return proc


def python_server(logdir: Path, name: str, script: str, extra: list[str] | None = None) -> Proc:
    """One of this suite's Python servers (mcp_tools_server.py, tool_model.py) on a free port;
    it prints LISTENING once it accepts connections."""
    port = free_port()
    here = Path(__file__).resolve().parent
    argv = [sys.executable, str(here / script), "--port", str(port), *(extra or [])]
    return Proc(name, argv, logdir / f"{name}.log", port)


def mcp_tools(logdir: Path, token: str, extra_tools: int = 0, name: str = "mcp-tools") -> Proc:
    """The official `mcp` SDK's Streamable HTTP server with the test tools, behind `token`
    (and `extra_tools` trivial ones more)."""
    args = ["--token", token, "--extra-tools", str(extra_tools)]
    return python_server(logdir, name, "mcp_tools_server.py", args)


def tool_model(logdir: Path) -> Proc:
    """The stand-in provider that answers like a model calling the tools its prompt names."""
    return python_server(logdir, "tool-model", "tool_model.py")


def gateway(logdir: Path, name: str, worker_urls: list[str], extra: list[str]) -> Proc:
    port = free_port()
    metrics_port = free_port()
    argv = [
        env_path("TOLLGATE_BIN"),
        "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        "--runtime-worker-threads", "2",
        "--log-level", os.environ.get("TOLLGATE_REAL_ENGINE_LOG_LEVEL", "info"),
        # This suite's MCP servers are on 127.0.0.1, which the gateway refuses for a
        # client-named server by default (tests/grpc_hostile.rs checks that).
        "--mcp-allow-private-addresses",
    ]
    if worker_urls:
        argv += ["--worker-urls", *worker_urls]
    argv += extra
    return Proc(name, argv, logdir / f"{name}.log", port, metrics_port=metrics_port)


def start_gateway(proc: Proc, timeout: float = 30) -> Proc:
    """Starts the gateway and waits for /health; a gateway whose port was taken meanwhile
    (it exits with "Address already in use") is started again on fresh ports."""
    for attempt in range(3):
        proc.start()
        try:
            proc.wait_http("/health", timeout, ok=lambda r: r.status_code in (200, 503))
            return proc
        except RuntimeError:
            taken = not proc.alive() and "Address already in use" in proc.log_tail()
            if not taken or attempt == 2:
                raise
            proc.stop()
            for flag, attr in (("--port", "port"), ("--prometheus-port", "metrics_port")):
                if flag in proc.argv:
                    port = free_port()
                    proc.argv[proc.argv.index(flag) + 1] = str(port)
                    setattr(proc, attr, port)
    return proc


def engine_counter(engine_url: str, name: str) -> float:
    """One sample of the engine's own Prometheus series (e.g. llamacpp:prompt_tokens_total)."""
    r = httpx.get(engine_url + "/metrics", timeout=5)
    r.raise_for_status()
    for line in r.text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(f"{name} not in {engine_url}/metrics")
