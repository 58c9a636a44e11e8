#!/usr/bin/env python3
"""Self-test for engine.py: plays vLLM's front-end against real engine.py processes.

The front-end side here is written against the protocol brief
(/work/zmq-notes.md), not against engine.py's internals: it binds a
handshake ROUTER, an input ROUTER and an output PULL with pyzmq, answers
HELLO with INIT, waits for the registration and READY, then drives
requests and checks the bytes that come back. The only things imported from
engine.py are the mirrored wire types, to check the brief's §11 test
vectors against them.

The ``ts-*`` tests do the same for ``engine.py --protocol tokenspeed``,
written against /work/tokenspeed-zmq-notes.md (TokenSpeed's ``--zmq-msgpack``
payloads: a tagged ``TokenizedGenerateReqInput`` in, ``BatchTokenIDOutSlim``
out); ``ts-vectors`` checks that brief's §9 vectors.

    PY=$(perf/zmq_engine/venv.sh)
    $PY perf/zmq_engine/selftest.py                       # mock mode, ~15 s
    $PY perf/zmq_engine/selftest.py --llama-url http://127.0.0.1:8080   # + llama mode

Exits 0 when every check passes; prints one line per test.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import zlib
from typing import Any, Callable

import msgspec
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "engine.py")
sys.path.insert(0, HERE)
import engine as eng  # noqa: E402  (mirrored types, for the §11 vectors only)

DEAD = b"ENGINE_CORE_DEAD"
ADD, ABORT, START_DP_WAVE, UTILITY = b"\x00", b"\x01", b"\x02", b"\x03"
# Positions in the EngineCoreOutput array (brief §5.2).
O_ID, O_TOKENS, O_LOGPROBS, O_FINISH, O_STOP_REASON, O_EVENTS = 0, 1, 2, 5, 6, 7
O_TRACE, O_PREFILL, O_ERROR = 10, 11, 18

# Brief §11 test vectors.
V_HELLO = "83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3"
V_INIT = (
    "82a961646472657373657385a6696e7075747391b47463703a2f2f3132372e302e302e313a35353535a76f75"
    "747075747391b47463703a2f2f3132372e302e302e313a35353536b1636f6f7264696e61746f725f696e7075"
    "74c0b2636f6f7264696e61746f725f6f7574707574c0be66726f6e74656e645f73746174735f7075626c6973"
    "685f61646472657373c0af706172616c6c656c5f636f6e66696780"
)
V_ADD = (
    "dc0016a2723193010203c084ab74656d7065726174757265cb0000000000000000aa6d61785f746f6b656e73"
    "04ad5f656f735f746f6b656e5f696402b35f616c6c5f73746f705f746f6b656e5f6964739102c0cb00000000"
    "00000000c0c0c0c0c0000000c0c2c0c0c0c2c0c0"
)
V_ABORT = "91a27231"
V_UTILITY = "940007ab69735f736c656570696e6790"
V_OUTPUTS = (
    "990091dc0013a272319107c0c0c001c0c0c0c0c0c0c000c0c0c0c0c0c0cb405ee00000000000c0c0c0c0a764"
    "656661756c74"
)


def _ext_hook(code: int, data: memoryview) -> Any:
    """Front-end view of ext type 3 (raw ndarray bytes)."""
    assert code == 3, f"unexpected ext type {code}"
    return ("ext3", bytes(data))


DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
ENC = msgspec.msgpack.Encoder()


class Fail(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Fail(what)


# ---------------------------------------------------------------------------
# Front-end harness
# ---------------------------------------------------------------------------


class Engine:
    """One engine.py process and the event lines it prints."""

    def __init__(self, rank: int, args: list[str], handshake: str, env: dict | None = None):
        self.rank = rank
        cmd = [sys.executable, ENGINE, "--handshake", handshake, "--rank", str(rank), *args]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    @staticmethod
    def _pump(stream: Any, q: queue.Queue) -> None:
        for line in stream:
            q.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def wait_event(self, word: str, timeout: float = 5.0, **match: str) -> dict[str, str]:
        """Waits for an event line ``word k=v ...`` whose fields include ``match``."""
        deadline = time.monotonic() + timeout
        for line in self.seen:
            ev = parse_event(line)
            if ev["_word"] == word and all(ev.get(k) == v for k, v in match.items()):
                self.seen.remove(line)
                return ev
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail(f"rank {self.rank}: no '{word} {match}' event; saw {self.seen[-8:]}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            ev = parse_event(line)
            if ev["_word"] == word and all(ev.get(k) == v for k, v in match.items()):
                return ev
            self.seen.append(line)

    def wait_exit(self, timeout: float = 8.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Fail(f"rank {self.rank} did not exit") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def parse_event(line: str) -> dict[str, str]:
    word, *pairs = line.split(" ")
    ev = {"_word": word, "_line": line}
    for p in pairs:
        k, _, v = p.partition("=")
        ev[k] = v
    return ev


class FrontEnd:
    """The gateway side: binds the three sockets and runs the startup handshake (brief §2, §12)."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.hs = self.ctx.socket(zmq.ROUTER)
        self.hs.bind("tcp://127.0.0.1:*")
        self.input = self.ctx.socket(zmq.ROUTER)
        self.input.setsockopt(zmq.SNDHWM, 0)
        self.input.setsockopt(zmq.RCVHWM, 0)
        self.input.bind("tcp://127.0.0.1:*")
        self.output = self.ctx.socket(zmq.PULL)
        self.output.setsockopt(zmq.RCVHWM, 0)
        self.output.bind("tcp://127.0.0.1:*")
        self.hs_addr = self.hs.getsockopt_string(zmq.LAST_ENDPOINT)
        self.in_addr = self.input.getsockopt_string(zmq.LAST_ENDPOINT)
        self.out_addr = self.output.getsockopt_string(zmq.LAST_ENDPOINT)
        self.engines: list[Engine] = []
        self.registrations: dict[int, dict] = {}
        self.ready: dict[int, dict] = {}
        self.hello_bytes: dict[int, bytes] = {}
        self.backlog: list[list[bytes]] = []

    def close(self) -> None:
        for e in self.engines:
            e.kill()
        for s in (self.hs, self.input, self.output):
            s.close(linger=0)
        self.ctx.term()

    def spawn(self, rank: int, args: list[str] | None = None, env: dict | None = None) -> Engine:
        e = Engine(rank, args or [], self.hs_addr, env)
        self.engines.append(e)
        return e

    def init_bytes(self) -> bytes:
        return ENC.encode(
            {
                "addresses": {
                    "inputs": [self.in_addr],
                    "outputs": [self.out_addr],
                    "coordinator_input": None,
                    "coordinator_output": None,
                    "frontend_stats_publish_address": None,
                },
                "parallel_config": {},
            }
        )

    def handshake(self, ranks: list[int], timeout: float = 10.0, expect_ready: bool = True) -> None:
        """HELLO → INIT for each rank, then registration (input ROUTER) and READY (handshake)."""
        want_hello = set(ranks)
        want_reg = set(ranks) if expect_ready else set()
        want_ready = set(ranks) if expect_ready else set()
        poller = zmq.Poller()
        poller.register(self.hs, zmq.POLLIN)
        poller.register(self.input, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while want_hello or want_reg or want_ready:
            left = deadline - time.monotonic()
            check(left > 0, f"handshake timed out: hello={want_hello} reg={want_reg} ready={want_ready}")
            socks = dict(poller.poll(int(left * 1000)))
            if self.hs in socks:
                ident, payload = self.hs.recv_multipart()
                rank = int.from_bytes(ident, "little")
                check(len(ident) == 2, f"identity {ident!r} is not 2 bytes")
                msg = DECODER.decode(payload)
                if msg["status"] == "HELLO":
                    self.hello_bytes[rank] = payload
                    want_hello.discard(rank)
                    self.hs.send_multipart([ident, self.init_bytes()])
                elif msg["status"] == "READY":
                    # The registration was sent first, but on another socket:
                    # the two can arrive in either order.
                    self.ready[rank] = msg
                    want_ready.discard(rank)
                else:
                    raise Fail(f"unexpected handshake message {msg}")
            if self.input in socks:
                ident, payload = self.input.recv_multipart()
                rank = int.from_bytes(ident, "little")
                self.registrations[rank] = DECODER.decode(payload)
                want_reg.discard(rank)

    def send(self, rank: int, kind: bytes, payload: bytes) -> None:
        self.input.send_multipart([rank.to_bytes(2, "little"), kind, payload])

    def add(self, rank: int, request_id: str, prompt: list[int], **sp: Any) -> None:
        """ADD with a SamplingParams map, the full 22-element EngineCoreRequest array (brief §3)."""
        trace = sp.pop("_trace_headers", None)
        req = [request_id, prompt, None, sp, None, time.time(), None, None, None,
               None, None, 0, 0, 0, trace, False, None, None, None, False, None, None]
        self.send(rank, ADD, ENC.encode(req))

    def utility(self, rank: int, call_id: int, method: str, args: list | tuple = ()) -> None:
        self.send(rank, UTILITY, ENC.encode([0, call_id, method, list(args)]))

    def recv(self, timeout: float = 5.0) -> list[bytes] | None:
        """One output message (frames), or None on timeout."""
        if self.backlog:
            return self.backlog.pop(0)
        if self.output.poll(int(timeout * 1000)):
            return self.output.recv_multipart()
        return None

    def collect(
        self, until: Callable[[dict[str, list], list], bool], timeout: float = 5.0
    ) -> tuple[dict[str, list], list]:
        """Decodes outputs until ``until(per_request, messages)``: per-request EngineCoreOutput lists."""

        def fold(frames: list[bytes], per_req: dict[str, list]) -> None:
            eco = DECODER.decode(frames[0])
            for out in eco[1]:
                per_req.setdefault(out[O_ID], []).append(out)

        return self.collect_with(fold, until, timeout)

    def collect_with(
        self,
        fold: Callable[[list[bytes], dict[str, list]], None],
        until: Callable[[dict[str, list], list], bool],
        timeout: float,
    ) -> tuple[dict[str, list], list]:
        """Receives until ``until(per_request, messages)``; ``fold`` adds each non-sentinel message to per_request."""
        per_req: dict[str, list] = {}
        msgs: list = []
        deadline = time.monotonic() + timeout
        while not until(per_req, msgs):
            left = deadline - time.monotonic()
            check(left > 0, f"timed out collecting outputs; have {list(per_req)} / {len(msgs)} msgs")
            frames = self.recv(left)
            if frames is None:
                continue
            msgs.append(frames)
            if len(frames) == 1 and frames[0] == DEAD:
                continue
            fold(frames, per_req)
        return per_req, msgs


def finished(*ids: str) -> Callable[[dict, list], bool]:
    return lambda per, _m: all(i in per and per[i][-1][O_FINISH] is not None for i in ids)


def tokens_of(outs: list) -> list[int]:
    return [t for o in outs for t in o[O_TOKENS]]


def sigterm_exit_0(e: Engine) -> None:
    """SIGTERM, then the process must exit 0."""
    e.proc.send_signal(signal.SIGTERM)
    check(e.wait_exit() == 0, "SIGTERM exit 0")


def check_no_registration(fe: FrontEnd, e: Engine) -> None:
    """Nothing arrives on the input ROUTER; SIGTERM still ends the engine with exit 0."""
    poller = zmq.Poller()
    poller.register(fe.input, zmq.POLLIN)
    check(not poller.poll(800), "no registration arrives")
    sigterm_exit_0(e)


def check_step_faults(
    fe: FrontEnd,
    spawn: Callable[[list[str]], Engine],
    add: Callable[[str], None],
    collect: Callable[[Callable[[dict, list], bool]], tuple[dict[str, list], list]],
) -> None:
    """die-after=3: 3 steps, the sentinel, exit 1; exit-after=2: 2 steps, no sentinel, exit 1."""
    e = spawn(["--fault", "die-after=3"])
    fe.handshake([0])
    add("d1")
    _, msgs = collect(lambda _p, m: bool(m) and m[-1] == [DEAD])
    check(len(msgs) == 4, f"3 steps then the sentinel, got {len(msgs)} messages")
    check(e.wait_exit() == 1, "die-after exit code 1")
    e.wait_event("dead")

    e = spawn(["--fault", "exit-after=2"])
    fe.handshake([0])
    add("d2")
    check(e.wait_exit() == 1, "exit-after exit code 1")
    msgs = quiet(fe, 0.3)
    check(len(msgs) == 2 and all(m != [DEAD] for m in msgs), f"exit-after: 2 steps, no sentinel ({msgs})")


def quiet(fe: FrontEnd, seconds: float) -> list[list[bytes]]:
    """Everything that arrives within ``seconds``."""
    got = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        frames = fe.recv(left)
        if frames is not None:
            got.append(frames)
    return got


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


def test_vectors() -> None:
    """Brief §11 vectors against the mirrored structs."""
    hello = msgspec.msgpack.encode({"status": "HELLO", "local": False, "headless": True})
    check(hello.hex() == V_HELLO, f"HELLO bytes {hello.hex()}")
    init = msgspec.msgpack.encode(
        eng.EngineHandshakeMetadata(
            eng.EngineZmqAddresses(["tcp://127.0.0.1:5555"], ["tcp://127.0.0.1:5556"]), {}
        )
    )
    check(init.hex() == V_INIT, f"INIT bytes {init.hex()}")
    back = msgspec.msgpack.decode(bytes.fromhex(V_INIT), type=eng.EngineHandshakeMetadata)
    check(back.addresses.outputs == ["tcp://127.0.0.1:5556"], "INIT decode")

    req = eng.make_add_request_decoder().decode(bytes.fromhex(V_ADD))
    check(len(eng.EngineCoreRequest.__struct_fields__) == 22, "EngineCoreRequest has 22 fields")
    check(req.request_id == "r1" and req.prompt_token_ids == [1, 2, 3], "ADD id/prompt")
    sp = req.sampling_params
    check(sp.temperature == 0.0 and sp.max_tokens == 4, "ADD temperature/max_tokens")
    check(sp._eos_token_id == 2 and sp._all_stop_token_ids == {2}, "ADD eos / all_stop_token_ids")
    check(req.arrival_time == 0.0 and req.client_index == 0 and req.current_wave == 0, "ADD defaults")
    # A 9-element array (the last required field) also decodes, as the brief says.
    short = ENC.encode(["x", [1], None, {"max_tokens": 1}, None, 0.0, None, None, None])
    check(eng.make_add_request_decoder().decode(short).client_index == 0, "short ADD decodes")

    check(msgspec.msgpack.encode(["r1"]).hex() == V_ABORT, "ABORT bytes")
    check(msgspec.msgpack.encode((0, 7, "is_sleeping", ())).hex() == V_UTILITY, "UTILITY bytes")

    outs = eng.EngineCoreOutputs(
        engine_index=0,
        outputs=[eng.EngineCoreOutput("r1", [7], finish_reason=eng.FinishReason.LENGTH)],
        timestamp=123.5,
        weight_version="default",
    )
    frames = eng.MsgpackEncoder().encode(outs)
    check(len(frames) == 1 and frames[0].hex() == V_OUTPUTS, f"EngineCoreOutputs bytes {frames[0].hex()}")
    check(len(eng.EngineCoreOutput.__struct_fields__) == 19, "EngineCoreOutput has 19 fields")
    check(len(eng.EngineCoreOutputs.__struct_fields__) == 9, "EngineCoreOutputs has 9 fields")
    util = eng.MsgpackEncoder().encode(
        eng.EngineCoreOutputs(utility_output=eng.UtilityOutput(7, result=eng.UtilityResult(False)), timestamp=1.0)
    )[0]
    check(DECODER.decode(util)[4] == [7, None, [None, False]], "UtilityOutput encoding")


def test_basic(fe: FrontEnd) -> None:
    """Handshake + registration + ADD/finish + stops + utilities + logprobs + events on one rank."""
    e = fe.spawn(0, ["--max-model-len", "64", "--log-stats", "--token-ms", "5"])
    fe.handshake([0])
    check(fe.hello_bytes[0].hex() == V_HELLO, "engine's HELLO bytes match §11")
    e.wait_event("hello", rank="0")
    ev = e.wait_event("init", rank="0")
    check(ev["inputs"] == fe.in_addr and ev["outputs"] == fe.out_addr, f"init event {ev}")
    e.wait_event("registered", rank="0")
    e.wait_event("ready", rank="0")
    reg = fe.registrations[0]
    for key, want in {
        "max_model_len": 64, "num_gpu_blocks": 1000, "block_size": 16, "dp_stats_address": None,
        "dtype": "bfloat16", "vllm_version": "0.33.0", "world_size": 1, "data_parallel_size": 1,
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "decode_context_parallel_size": 1,
        "data_parallel_rank": 0, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
        "supports_lora": False, "max_loras": 0,
    }.items():
        check(reg.get(key) == want, f"registration {key}={reg.get(key)!r}, want {want!r}")
    check(isinstance(reg.get("instance_id"), str), "registration instance_id")
    check(list(reg) == list(eng.EngineCoreReadyResponse.__dataclass_fields__) and len(reg) == 28,
          f"registration keys {list(reg)}")
    check(fe.ready[0] == {"status": "READY", "local": False, "headless": True}, f"READY {fe.ready[0]}")

    # Plain ADD: echo, max_tokens → LENGTH, prefill_stats on the first output only.
    fe.add(0, "a1", [5, 6, 7], max_tokens=5, temperature=0.0, _eos_token_id=2, _all_stop_token_ids=[2],
           _trace_headers={"traceparent": "00-x"})
    ev = e.wait_event("add", id="a1")
    check(ev["prompt"] == "5,6,7" and ev["max_tokens"] == "5" and ev["eos"] == "2", f"add event {ev}")
    per, msgs = fe.collect(finished("a1"))
    outs = per["a1"]
    check(tokens_of(outs) == [5, 6, 7, 5, 6], f"a1 tokens {tokens_of(outs)}")
    check([len(o[O_TOKENS]) for o in outs] == [1] * 5, "one token per step")
    check(outs[-1][O_FINISH] == 1 and outs[-1][O_STOP_REASON] is None, "a1 LENGTH")
    check(all(o[O_FINISH] is None for o in outs[:-1]), "a1 not finished early")
    pf = outs[0][O_PREFILL]
    check(isinstance(pf, dict) and pf["num_prompt_tokens"] == 3 and pf["num_cached_tokens"] == 0
          and len(pf) == 6, f"prefill_stats {pf}")
    check(all(o[O_PREFILL] is None for o in outs[1:]), "prefill_stats only once")
    check(all(o[O_TRACE] == {"traceparent": "00-x"} for o in outs), "trace_headers echoed")
    evs = outs[0][O_EVENTS]
    check([x["type"] for x in evs] == [1, 2] and all(isinstance(x["timestamp"], float) for x in evs),
          f"events {evs}")
    eco = DECODER.decode(msgs[0][0])
    check(len(eco) == 9 and eco[0] == 0 and eco[8] == "default" and isinstance(eco[3], float), f"eco {eco}")
    check(all(len(o) == 19 for o in outs), "EngineCoreOutput arrays have 19 fields")
    e.wait_event("finish", id="a1", reason="length", tokens="5")

    # The brief's ADD vector: prompt [1,2,3], eos 2 → [1, 2] then STOP (EOS, stop_reason None).
    fe.send(0, ADD, bytes.fromhex(V_ADD))
    per, _ = fe.collect(finished("r1"))
    check(tokens_of(per["r1"]) == [1, 2], f"r1 tokens {tokens_of(per['r1'])}")
    check(per["r1"][-1][O_FINISH] == 0 and per["r1"][-1][O_STOP_REASON] is None, "r1 EOS STOP")

    # stop_token_ids → STOP with stop_reason = the id; no _eos_token_id (ignore_eos) → no EOS stop.
    fe.add(0, "s1", [2, 11, 12, 13], max_tokens=10, stop_token_ids=[12])
    per, _ = fe.collect(finished("s1"))
    check(tokens_of(per["s1"]) == [2, 11, 12], f"s1 tokens {tokens_of(per['s1'])}")
    check(per["s1"][-1][O_FINISH] == 0 and per["s1"][-1][O_STOP_REASON] == 12, "s1 stop_reason 12")
    e.wait_event("finish", id="s1", reason="stop", stop_reason="12")

    # min_tokens masks _all_stop_token_ids (12 is skipped at position 1).
    fe.add(0, "m1", [10, 12, 11], max_tokens=6, min_tokens=3, stop_token_ids=[12])
    per, _ = fe.collect(finished("m1"))
    check(tokens_of(per["m1"]) == [10, 11, 11, 10, 12], f"m1 tokens {tokens_of(per['m1'])}")

    # max_model_len 64: prompt 60 → LENGTH after 4 tokens.
    fe.add(0, "l1", list(range(3, 63)), max_tokens=100)
    per, _ = fe.collect(finished("l1"))
    check(len(tokens_of(per["l1"])) == 4 and per["l1"][-1][O_FINISH] == 1, "max_model_len LENGTH")

    # Utilities.
    fe.utility(0, 7, "is_sleeping")
    fe.utility(0, 8, "get_supported_tasks")
    fe.utility(0, 9, "reset_prefix_cache")
    fe.utility(0, 10, "bogus")
    got = {}
    while len(got) < 4:
        frames = fe.recv(5.0)
        check(frames is not None, f"utility replies missing; have {got}")
        eco = DECODER.decode(frames[0])
        if eco[4] is not None:
            got[eco[4][0]] = eco[4]
    check(got[7] == [7, None, [None, False]], f"is_sleeping {got[7]}")
    check(got[8] == [8, None, [None, ["generate"]]], f"get_supported_tasks {got[8]}")
    check(got[9] == [9, None, [None, True]], f"reset_prefix_cache {got[9]}")
    check(got[10] == [10, "Call to bogus method failed: 'EngineCoreProc' object has no attribute 'bogus'", None],
          f"bogus {got[10]}")
    e.wait_event("utility", method="is_sleeping")

    # Logprobs inline (ext type 3) ...
    fe.add(0, "p1", [100, 200], max_tokens=2, logprobs=2)
    per, msgs = fe.collect(finished("p1"))
    check(all(len(m) == 1 for m in msgs), "small logprobs travel inline")
    lp = per["p1"][0][O_LOGPROBS]
    check(len(lp) == 4 and lp[3] is None, f"LogprobsLists shape {lp}")
    check(lp[0][0] == "<i4" and lp[0][1] == [1, 3] and lp[0][2][0] == "ext3", f"ids {lp[0]}")
    check(struct.unpack("<3i", lp[0][2][1]) == (100, 100, 101), f"ids data {lp[0][2][1]!r}")
    check(lp[1][0] == "<f4" and struct.unpack("<3f", lp[1][2][1]) == (-0.125, -0.125, -1.125), "logprobs data")
    check(lp[2][0] == "<i8" and lp[2][1] == [1] and struct.unpack("<q", lp[2][2][1]) == (1,), "ranks")
    # ... and out of band (≥256 bytes: 81 int32 ids) as aux frames with an index.
    fe.add(0, "p2", [100], max_tokens=1, logprobs=80)
    per, msgs = fe.collect(finished("p2"))
    lp = per["p2"][0][O_LOGPROBS]
    frames = msgs[-1]
    check(lp[0][1] == [1, 81] and lp[0][2] == 1 and lp[1][2] == 2, f"aux indices {lp[0][2]}, {lp[1][2]}")
    check(len(frames) == 3 and len(frames[1]) == 324 and len(frames[2]) == 324, "aux frames")
    check(struct.unpack("<81i", frames[1])[:3] == (100, 100, 101), "aux ids")
    check(isinstance(lp[2][2], tuple) and lp[2][2][0] == "ext3", "small ranks stay inline")

    # Two requests at once are stepped together (one EngineCoreOutputs, two outputs).
    fe.add(0, "b1", [1, 3], max_tokens=3)
    fe.add(0, "b2", [4, 5], max_tokens=3)
    per, msgs = fe.collect(finished("b1", "b2"))
    sizes = [len(DECODER.decode(m[0])[1]) for m in msgs]
    check(max(sizes) == 2, f"batched step sizes {sizes}")

    # SIGTERM: clean exit 0.
    e.proc.send_signal(signal.SIGTERM)
    check(e.wait_exit() == 0, "SIGTERM exit code")
    e.wait_event("shutdown", rank="0")


def test_abort_and_faults_timing(fe: FrontEnd) -> None:
    """ABORT (no output), hang-after-first, SIGTERM with in-flight requests (ABORT outputs)."""
    e = fe.spawn(0, ["--token-ms", "20", "--ttft-ms", "30", "--fault", "hang-after-first"])
    fe.handshake([0])
    fe.add(0, "h1", [1, 2, 3], max_tokens=50)
    per, _ = fe.collect(lambda per, _m: "h1" in per)
    check(tokens_of(per["h1"]) == [1], "hang-after-first: first token")
    rest = quiet(fe, 0.3)
    check(rest == [], f"hang-after-first: nothing more ({len(rest)} msgs)")
    e.proc.send_signal(signal.SIGTERM)
    per, _ = fe.collect(finished("h1"))
    check(per["h1"][-1][O_FINISH] == 2 and per["h1"][-1][O_TOKENS] == [], "shutdown ABORT output")
    check(e.wait_exit() == 0, "SIGTERM exit 0")
    ev = e.wait_event("shutdown")
    check(ev["aborted"] == "h1", f"shutdown event {ev}")

    e = fe.spawn(0, ["--token-ms", "20"])
    fe.handshake([0])
    fe.add(0, "x1", [1, 2, 3], max_tokens=1000)
    fe.collect(lambda per, _m: len(per.get("x1", [])) >= 3)
    fe.send(0, ABORT, ENC.encode(["x1", "never-seen"]))
    ev = e.wait_event("abort")
    check(ev["ids"] == "x1,never-seen", f"abort event {ev}")
    late = quiet(fe, 0.3)
    check(len(late) <= 1, f"outputs after ABORT: {len(late)}")
    for m in late:
        for o in DECODER.decode(m[0])[1]:
            check(o[O_FINISH] is None, "an ABORT produces no finish output")
    # The engine is still fine afterwards, and the id can be reused.
    fe.add(0, "x1", [9], max_tokens=2)
    per, _ = fe.collect(finished("x1"))
    check(tokens_of(per["x1"]) == [9, 9], "id reusable after abort")
    sigterm_exit_0(e)


def test_error_and_bad_params(fe: FrontEnd) -> None:
    """error-on-prompt → request-scoped ERROR; a bad SamplingParams kills the input thread."""
    e = fe.spawn(0, ["--fault", "error-on-prompt=99"])
    fe.handshake([0])
    fe.add(0, "e1", [1, 99, 3], max_tokens=5)
    per, msgs = fe.collect(finished("e1"))
    out = per["e1"][0]
    check(out[O_FINISH] == 3 and out[O_TOKENS] == [], f"e1 ERROR {out}")
    err = out[O_ERROR]
    check(set(err) == {"code", "message", "retryable"} and err["code"] == "validation_error"
          and err["retryable"] is False, f"error map {err}")
    check(DECODER.decode(msgs[0][0])[5] == ["e1"], "finished_requests carries the id")
    e.wait_event("finish", id="e1", reason="error")
    fe.add(0, "ok", [1], max_tokens=1)
    fe.collect(finished("ok"))

    fe.add(0, "bad", [1], max_tokens=5, temperature=5.0)
    ev = e.wait_event("input-thread-died")
    check("temperature" in ev["error"], f"died because of temperature: {ev}")
    fe.utility(0, 1, "is_sleeping")
    check(quiet(fe, 0.4) == [], "no input is read after the input thread died")
    check(e.proc.poll() is None, "the process lives on")
    sigterm_exit_0(e)


def test_death(fe: FrontEnd) -> None:
    """die-after (sentinel, exit 1), exit-after (no sentinel), duplicate id (fatal)."""
    check_step_faults(fe, lambda args: fe.spawn(0, args),
                      lambda rid: fe.add(0, rid, [1, 2, 3], max_tokens=10), fe.collect)

    e = fe.spawn(0, ["--token-ms", "50"])
    fe.handshake([0])
    fe.add(0, "dup", [1, 2, 3], max_tokens=100)
    fe.collect(lambda per, _m: "dup" in per)
    fe.add(0, "dup", [1, 2, 3], max_tokens=100)
    fe.collect(lambda _p, m: bool(m) and m[-1] == [DEAD])
    e.wait_event("fatal", error="duplicate-request-id")
    check(e.wait_exit() == 1, "duplicate id exit code 1")


def test_no_registration(fe: FrontEnd) -> None:
    e = fe.spawn(0, ["--fault", "no-registration"])
    fe.handshake([0], expect_ready=False)
    e.wait_event("init")
    check_no_registration(fe, e)


def test_two_ranks(fe: FrontEnd) -> None:
    """Two ranks share the handshake ROUTER; identities, registrations, routing by identity."""
    e0 = fe.spawn(0, ["--dp-size", "2"])
    e1 = fe.spawn(1, ["--dp-size", "2", "--load-ms", "200"])
    fe.handshake([0, 1])
    for r in (0, 1):
        reg = fe.registrations[r]
        check(reg["data_parallel_rank"] == r and reg["data_parallel_size"] == 1, f"rank {r} registration")
        check("parallel_config_hash" not in fe.ready[r], "independent ranks send no parallel_config_hash")
    fe.add(0, "q0", [7, 8], max_tokens=2)
    fe.add(1, "q1", [9, 10], max_tokens=2)
    per, msgs = fe.collect(finished("q0", "q1"))
    check(tokens_of(per["q0"]) == [7, 8] and tokens_of(per["q1"]) == [9, 10], "routing by identity")
    for m in msgs:
        eco = DECODER.decode(m[0])
        for o in eco[1]:
            check(eco[0] == int(o[O_ID][1]), f"engine_index {eco[0]} for {o[O_ID]}")
    e0.wait_event("add", id="q0")
    e1.wait_event("add", id="q1")
    for e in (e0, e1):
        sigterm_exit_0(e)


def llama_tokenize(url: str, text: str) -> list[int]:
    """Token ids from llama-server's /tokenize (special tokens parsed)."""
    import json
    import urllib.request

    body = json.dumps({"content": text, "parse_special": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/tokenize", data=body)) as r:
        return json.load(r)["tokens"]


def test_llama(fe: FrontEnd, url: str) -> None:
    """llama mode against a running llama-server: greedy request, EOS, stop_token_ids, abort.

    The EOS check assumes a chat model that answers "What is 2+2?" briefly and
    whose EOS id is 2 (SmolLM2-135M-Instruct, as in perf/real_engine).
    """
    e = fe.spawn(0, ["--mode", "llama", "--llama-url", url, "--eos-id", "2"])
    fe.handshake([0], timeout=30)
    mml = fe.registrations[0]["max_model_len"]
    check(mml > 0, "max_model_len from /props")
    prompt = [1, 504, 3458, 282]
    fe.add(0, "g1", prompt, max_tokens=8, temperature=0.0, _eos_token_id=2, _all_stop_token_ids=[2], logprobs=1)
    per, _ = fe.collect(finished("g1"), timeout=60)
    toks = tokens_of(per["g1"])
    check(len(toks) == 8 and per["g1"][-1][O_FINISH] == 1, f"g1 {toks} {per['g1'][-1][O_FINISH]}")
    check(per["g1"][0][O_LOGPROBS][0][1] == [1, 2], "llama logprobs shape")
    stop_at = toks[2]
    fe.add(0, "g2", prompt, max_tokens=8, temperature=0.0, stop_token_ids=[stop_at])
    per, _ = fe.collect(finished("g2"), timeout=60)
    check(tokens_of(per["g2"])[-1] == stop_at and per["g2"][-1][O_STOP_REASON] == stop_at, "llama stop id")
    chat = llama_tokenize(
        url, "<|im_start|>user\nWhat is 2+2? Answer with just the number.<|im_end|>\n<|im_start|>assistant\n"
    )
    fe.add(0, "g4", chat, max_tokens=40, temperature=0.0, _eos_token_id=2, _all_stop_token_ids=[2])
    per, _ = fe.collect(finished("g4"), timeout=60)
    last = per["g4"][-1]
    check(last[O_FINISH] == 0 and tokens_of(per["g4"])[-1] == 2 and last[O_STOP_REASON] is None,
          f"llama EOS: {tokens_of(per['g4'])} finish={last[O_FINISH]}")
    fe.add(0, "g3", prompt, max_tokens=400, temperature=0.8, seed=1)
    fe.collect(lambda per, _m: "g3" in per, timeout=60)
    fe.send(0, ABORT, ENC.encode(["g3"]))
    time.sleep(0.3)
    late = quiet(fe, 0.5)
    check(len(late) <= 2, f"llama outputs after abort: {len(late)}")
    sigterm_exit_0(e)


# ---------------------------------------------------------------------------
# TokenSpeed (--protocol tokenspeed), written against /work/tokenspeed-zmq-notes.md
# ---------------------------------------------------------------------------

TS = ["--protocol", "tokenspeed"]
# Brief §9 vectors (msgspec 0.22 from structs mirroring TokenSpeed @ f4d8ec6).
TS_V_HELLO = (
    "84a6737461747573a548454c4c4fa56c6f63616cc3a8686561646c657373c3b4706172616c6c656c5f636f6e"
    "6669675f68617368c0"
)
TS_V_READY = (
    "84a6737461747573a55245414459a56c6f63616cc3a8686561646c657373c3b4706172616c6c656c5f636f6e"
    "6669675f68617368c0"
)
TS_V_REG = (
    "de0013ad6d61785f6d6f64656c5f6c656ecd0800ae6e756d5f6770755f626c6f636b73cd03e8b27072656669"
    "785f6772616e756c617269747940b064705f73746174735f61646472657373c0a56474797065a862666c6f61"
    "743136b86d756c74696d6f64616c5f656e636f6465725f6474797065c0ac766c6c6d5f76657273696f6eb074"
    "6f6b656e73706565642d302e312e30aa776f726c645f73697a6501b2646174615f706172616c6c656c5f7369"
    "7a6501b474656e736f725f706172616c6c656c5f73697a6501b6706970656c696e655f706172616c6c656c5f"
    "73697a6501bc6465636f64655f636f6e746578745f706172616c6c656c5f73697a6501b2646174615f706172"
    "616c6c656c5f72616e6b00ac6d61785f6e756d5f73657173cd0100b66d61785f6e756d5f626174636865645f"
    "746f6b656e73cd2000ab696e7374616e63655f6964a16db46b765f63616368655f73697a655f746f6b656e73"
    "cdfa00b86b765f63616368655f6d61785f636f6e63757272656e6379c0b06b765f6576656e74735f636f6e66"
    "6967c0"
)
TS_V_ADD = (
    "dc0018b9546f6b656e697a656447656e6572617465526571496e707574a27231c0c093010203dc001d04c0c0"
    "cb3ff0000000000000cb3ff000000000000001cb0000000000000000cb0000000000000000cb000000000000"
    "0000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c0c0c001c000c2c2ff00c0c3c0c0c0c2cb00000000"
    "00000000c0c0c0c0c0c0c0c0"
)
TS_V_ADD_PREFIX = (
    "9bb9546f6b656e697a656447656e6572617465526571496e707574a27231c0c093010203dc001d04c0c0cb3f"
    "f0000000000000cb3ff000000000000001cb0000000000000000cb0000000000000000cb0000000000000000"
    "cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c0c0c0019000c3c2ff00c0c3"
)
TS_V_ADD_RAW = (
    "9bb9546f6b656e697a656447656e6572617465526571496e707574a27231c0c093010203dc001d04c0c0cb00"
    "00000000000000cb3ff0000000000000ffcb0000000000000000cb0000000000000000cb0000000000000000"
    "cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c0c0c001c000c2c2ff00c0c3"
)
TS_V_ABORT = "91a27231"
TS_V_OUT = "9ab34261746368546f6b656e49444f7574536c696d91a2723191910791a66c656e6774689103910491009190919000"
# Captured from TokenSpeed's own Python encoder by lightseekorg/smg @ 73da68c
# (crates/engine_zmq_client/src/protocol/tokenspeed/{request,output}.rs tests);
# the output one predates engine_index (9 elements).
SMG_V_REQUEST = (
    "dc0018b9546f6b656e697a656447656e6572617465526571496e707574a57665632d31c0c093010203dc001d08"
    "c09102cb3fe0000000000000cb3feccccccccccccdce40000000cb0000000000000000cb0000000000000000cb"
    "0000000000000000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c02ac0019000c3c3ff00c0c3c0c0c0c2"
    "cb0000000000000000c0c0c0c0c0c0c0c0"
)
SMG_V_OUTPUT = (
    "99b34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e6774689103910291"
    "019192cbbfe0000000000000cbbfd000000000000091920a0b"
)
TS_REG_KEYS = [
    "max_model_len", "num_gpu_blocks", "prefix_granularity", "dp_stats_address", "dtype",
    "multimodal_encoder_dtype", "vllm_version", "world_size", "data_parallel_size",
    "tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size",
    "data_parallel_rank", "max_num_seqs", "max_num_batched_tokens", "instance_id",
    "kv_cache_size_tokens", "kv_cache_max_concurrency", "kv_events_config",
]
# SamplingParams, brief §4.1: (name, API default), in wire order.
TS_SP_FIELDS = [
    ("max_new_tokens", None), ("stop", None), ("stop_token_ids", None), ("temperature", 1.0),
    ("top_p", 1.0), ("top_k", -1), ("min_p", 0.0), ("frequency_penalty", 0.0),
    ("presence_penalty", 0.0), ("repetition_penalty", 1.0), ("min_new_tokens", 0),
    ("json_schema", None), ("regex", None), ("ebnf", None), ("structural_tag", None),
    ("ignore_eos", False), ("skip_special_tokens", True), ("spaces_between_special_tokens", True),
    ("no_stop_trim", False), ("thinking_budget", None), ("custom_params", None),
    ("stream_interval", None), ("logit_bias", None), ("seed", None), ("logprobs", None), ("n", 1),
    ("stop_strs", None), ("stop_str_max_len", 0), ("is_normalized", False),
]
# BatchTokenIDOutSlim positions (brief §6.1).
S_TAG, S_RIDS, S_IDS, S_REASONS, S_PROMPT, S_COMPLETION, S_CACHED, S_LPV, S_LPI, S_ENGINE = range(10)


def ts_add_payload(rid: str, prompt: list[int] | None, stream: bool = True, return_logprob: bool = False,
                   **sp: Any) -> bytes:
    """The 11-element ADD prefix (tag through ``stream``) with a full 29-element SamplingParams."""
    names = [n for n, _ in TS_SP_FIELDS]
    for k in sp:
        check(k in names, f"unknown SamplingParams field {k}")
    params = [sp.get(n, d) for n, d in TS_SP_FIELDS]
    return ENC.encode(["TokenizedGenerateReqInput", rid, None, None, prompt, params,
                       return_logprob, -1, 0, None, stream])


def ts_add(fe: FrontEnd, rank: int, rid: str, prompt: list[int] | None, **kw: Any) -> None:
    fe.send(rank, ADD, ts_add_payload(rid, prompt, **kw))


def ts_collect(fe: FrontEnd, until: Callable[[dict[str, list], list], bool], timeout: float = 5.0
               ) -> tuple[dict[str, list], list]:
    """Decodes BatchTokenIDOutSlim messages until ``until``: per-request lists of column slices."""

    def fold(frames: list[bytes], per_req: dict[str, list]) -> None:
        check(len(frames) == 1, f"one frame per output message, got {len(frames)}")
        b = DECODER.decode(frames[0])
        check(isinstance(b, list) and len(b) == 10 and b[S_TAG] == "BatchTokenIDOutSlim", f"slim batch {b}")
        n = len(b[S_RIDS])
        check(all(len(b[c]) == n for c in range(S_IDS, S_ENGINE)), f"ragged columns {b}")
        for i, rid in enumerate(b[S_RIDS]):
            per_req.setdefault(rid, []).append({
                "ids": b[S_IDS][i], "reason": b[S_REASONS][i], "prompt": b[S_PROMPT][i],
                "completion": b[S_COMPLETION][i], "cached": b[S_CACHED][i],
                "lpv": b[S_LPV][i], "lpi": b[S_LPI][i], "engine": b[S_ENGINE],
            })

    return fe.collect_with(fold, until, timeout)


def ts_finished(*ids: str) -> Callable[[dict, list], bool]:
    return lambda per, _m: all(i in per and per[i][-1]["reason"] != "" for i in ids)


def ts_tokens(outs: list) -> list[int]:
    return [t for o in outs for t in o["ids"]]


def test_ts_vectors() -> None:
    """Brief §9 vectors against the mirrored TokenSpeed structs, and SMG's captured ones."""
    enc = msgspec.msgpack.encode
    check(enc(eng.WireReadyMessage(status="HELLO", local=True, headless=True)).hex() == TS_V_HELLO, "HELLO")
    check(enc(eng.WireReadyMessage(status="READY", local=True, headless=True)).hex() == TS_V_READY, "READY")
    init = enc(eng.WireHandshakeInitMessage(addresses=eng.WireHandshakeAddresses(
        inputs=["tcp://127.0.0.1:5555"], outputs=["tcp://127.0.0.1:5556"])))
    check(init.hex() == V_INIT, "TokenSpeed INIT bytes equal vLLM's §11 INIT")
    # vLLM's INIT (and one with extra keys) decodes as TokenSpeed's.
    back = msgspec.msgpack.decode(bytes.fromhex(V_INIT), type=eng.WireHandshakeInitMessage)
    check(back.addresses.inputs == ["tcp://127.0.0.1:5555"], "INIT decode")
    extra = ENC.encode({"addresses": {"inputs": ["a"], "outputs": ["b"], "x": 1}, "y": 2})
    check(msgspec.msgpack.decode(extra, type=eng.WireHandshakeInitMessage).addresses.outputs == ["b"],
          "INIT with unknown keys")
    reg = eng.WireEngineCoreReadyResponse(
        max_model_len=2048, num_gpu_blocks=1000, prefix_granularity=64, dtype="bfloat16",
        vllm_version="tokenspeed-0.1.0", max_num_seqs=256, max_num_batched_tokens=8192,
        instance_id="m", kv_cache_size_tokens=64000)
    check(enc(reg).hex() == TS_V_REG, f"registration {enc(reg).hex()}")
    check(list(DECODER.decode(bytes.fromhex(TS_V_REG))) == TS_REG_KEYS, "registration keys")

    check(len(eng.TokenizedGenerateReqInput.__struct_fields__) == 23, "23 request fields")
    check(len(eng.TsSamplingParams.__struct_fields__) == 29, "29 SamplingParams fields")
    check([n for n, _ in TS_SP_FIELDS] == list(eng.TsSamplingParams.__struct_fields__), "SamplingParams order")
    check(len(eng.BatchTokenIDOutSlim.__struct_fields__) == 9, "9 output fields")
    sp = eng.TsSamplingParams(temperature=0.0, max_new_tokens=4)
    add = enc(eng.TokenizedGenerateReqInput(rid="r1", input_ids=[1, 2, 3], sampling_params=sp, stream=True))
    check(add.hex() == TS_V_ADD, f"ADD {add.hex()}")
    raw = DECODER.decode(add)
    check(len(raw) == 24 and raw[0] == "TokenizedGenerateReqInput" and len(raw[5]) == 29, "ADD shape")
    check(raw[5][3] == 1.0 and raw[5][5] == 1, "greedy became temperature 1.0, top_k 1 on construction")
    # The three ADD forms a front-end may send decode to the same request.
    dec = eng.make_ts_add_decoder()
    want = enc(eng.ts_decode_request_frames([ADD, add], dec)[0])
    for name, hx in (("prefix", TS_V_ADD_PREFIX), ("raw", TS_V_ADD_RAW)):
        [io] = eng.ts_decode_request_frames([ADD, bytes.fromhex(hx)], dec)
        check(enc(io) == want, f"ADD {name} form decodes like the full one")
    check(ts_add_payload("r1", [1, 2, 3], max_new_tokens=4, temperature=0.0).hex() == TS_V_ADD_RAW,
          "harness ADD == raw vector")
    [io] = eng.ts_decode_request_frames([ADD, bytes.fromhex(TS_V_ADD_RAW)], dec)
    check(io.sampling_params.seed == zlib.crc32(b"r1") and io.sampling_params.is_normalized, "seed/normalize")
    for bad in (ENC.encode(["TokenizedGenerateReqInput", "x", None, None, [1]]),
                ENC.encode(["BatchTokenIDOutSlim", "x", None, None, [1], []])):
        try:
            eng.ts_decode_request_frames([ADD, bad], dec)
            raise Fail("short or wrongly tagged ADD decoded")
        except msgspec.ValidationError:
            pass
    aborts = eng.ts_decode_request_frames([ABORT, bytes.fromhex(TS_V_ABORT)], dec)
    check([a.rid for a in aborts] == ["r1"] and enc(["r1"]).hex() == TS_V_ABORT, "ABORT")

    out = eng.BatchTokenIDOutSlim(rids=["r1"], output_ids=[[7]], finished_reasons=["length"],
                                  prompt_tokens=[3], completion_tokens=[4], cached_tokens=[0],
                                  output_token_logprobs_val=[[]], output_token_logprobs_idx=[[]])
    frames = eng.MsgpackEncoder().encode(out)
    check(len(frames) == 1 and frames[0].hex() == TS_V_OUT, f"output {frames[0].hex()}")
    check(DECODER.decode(frames[0]) == ["BatchTokenIDOutSlim", ["r1"], [[7]], ["length"], [3], [4], [0],
                                        [[]], [[]], 0], "output layout")
    # SMG's vectors, captured from TokenSpeed's encoder, agree with the mirrors byte for byte.
    sp = eng.TsSamplingParams(temperature=0.5, top_p=0.9, max_new_tokens=8, stop_token_ids=[2], seed=42)
    sp.normalize()
    smg = eng.TokenizedGenerateReqInput(rid="vec-1", input_ids=[1, 2, 3], sampling_params=sp,
                                        return_logprob=True, stream=True)
    check(enc(smg).hex() == SMG_V_REQUEST, "SMG request vector")
    old = msgspec.msgpack.decode(bytes.fromhex(SMG_V_OUTPUT), type=eng.BatchTokenIDOutSlim)
    check(old.engine_index == 0 and old.output_token_logprobs_val == [[-0.5, -0.25]], "SMG 9-element output")


def ts_spawn(fe: FrontEnd, rank: int, args: list[str] | None = None) -> Engine:
    return fe.spawn(rank, TS + (args or []))


def test_ts_basic(fe: FrontEnd) -> None:
    """Handshake order, registration, echo + stops, stream rules, clamps, validation aborts, batching."""
    e = ts_spawn(fe, 0, ["--max-model-len", "64", "--token-ms", "5", "--instance-id", "m"])
    fe.handshake([0])
    check(fe.hello_bytes[0].hex() == TS_V_HELLO, "engine's HELLO bytes")
    check(fe.ready[0] == {"status": "READY", "local": True, "headless": True, "parallel_config_hash": None},
          f"READY {fe.ready[0]}")
    e.wait_event("hello", rank="0")
    e.wait_event("init", rank="0")
    e.wait_event("registered", rank="0")
    check(any(parse_event(line)["_word"] == "ready" for line in e.seen), "READY is sent before registering")
    reg = fe.registrations[0]
    check(list(reg) == TS_REG_KEYS, f"registration keys {list(reg)}")
    for key, want in {"max_model_len": 64, "num_gpu_blocks": 1000, "prefix_granularity": 64,
                      "vllm_version": "tokenspeed-0.1.0", "data_parallel_size": 1, "data_parallel_rank": 0,
                      "instance_id": "m", "kv_cache_size_tokens": 64000, "dtype": "bfloat16"}.items():
        check(reg[key] == want, f"registration {key}={reg[key]!r}")

    # The brief's ADD vector: [1,2,3], greedy, max 4; the engine's own EOS (2) stops it at [1, 2].
    fe.send(0, ADD, bytes.fromhex(TS_V_ADD))
    ev = e.wait_event("add", id="r1")
    check(ev["top_k"] == "1" and ev["temperature"] == "1.0" and ev["max_tokens"] == "4"
          and ev["seed"] == str(zlib.crc32(b"r1")), f"add event {ev}")
    per, msgs = ts_collect(fe, ts_finished("r1"))
    outs = per["r1"]
    check([o["ids"] for o in outs] == [[1], [2]] and [o["reason"] for o in outs] == ["", "stop"], f"r1 {outs}")
    check([o["completion"] for o in outs] == [1, 2] and all(o["prompt"] == 3 for o in outs), "counts")
    check(all(o["engine"] == 0 and o["lpv"] == [] and o["lpi"] == [] for o in outs), "engine_index, no logprobs")
    e.wait_event("finish", id="r1", reason="stop", tokens="2", stop_reason="2")

    # ignore_eos: EOS does not stop; length comes first (checked before EOS).
    ts_add(fe, 0, "i1", [1, 2, 3], max_new_tokens=4, ignore_eos=True)
    per, _ = ts_collect(fe, ts_finished("i1"))
    check(ts_tokens(per["i1"]) == [1, 2, 3, 1] and per["i1"][-1]["reason"] == "length", f"i1 {per['i1']}")
    ts_add(fe, 0, "i2", [5, 2], max_new_tokens=2)
    per, _ = ts_collect(fe, ts_finished("i2"))
    check(ts_tokens(per["i2"]) == [5, 2] and per["i2"][-1]["reason"] == "length", "length before EOS")

    # stop_token_ids → "stop".
    ts_add(fe, 0, "s1", [3, 11, 12, 13], max_new_tokens=10, stop_token_ids=[12])
    per, _ = ts_collect(fe, ts_finished("s1"))
    check(ts_tokens(per["s1"]) == [3, 11, 12] and per["s1"][-1]["reason"] == "stop", f"s1 {per['s1']}")
    e.wait_event("finish", id="s1", reason="stop", stop_reason="12")
    # ignore_eos switches stop_token_ids off too (unlike vLLM).
    ts_add(fe, 0, "s2", [3, 12], max_new_tokens=3, stop_token_ids=[12], ignore_eos=True)
    per, _ = ts_collect(fe, ts_finished("s2"))
    check(ts_tokens(per["s2"]) == [3, 12, 3] and per["s2"][-1]["reason"] == "length", f"s2 {per['s2']}")

    # stream=False: the first token, then (before 50) only the finish with the rest.
    ts_add(fe, 0, "n1", [5, 6, 7], max_new_tokens=5, stream=False)
    per, _ = ts_collect(fe, ts_finished("n1"))
    check([o["ids"] for o in per["n1"]] == [[5], [6, 7, 5, 6]], f"n1 {per['n1']}")
    check(per["n1"][-1]["completion"] == 5 and per["n1"][-1]["reason"] == "length", "n1 length")
    # stream_interval 2: sent when len % 2 == 1, and at the finish.
    ts_add(fe, 0, "v1", [5, 6, 7], max_new_tokens=5, stream_interval=2)
    per, _ = ts_collect(fe, ts_finished("v1"))
    check([o["ids"] for o in per["v1"]] == [[5], [6, 7], [5, 6]], f"v1 {per['v1']}")

    # max_new_tokens clamped to (max_model_len-1) - len(prompt) - 1: 64-1-60-1 = 2.
    ts_add(fe, 0, "l1", list(range(3, 63)), max_new_tokens=100)
    per, _ = ts_collect(fe, ts_finished("l1"))
    check(len(ts_tokens(per["l1"])) == 2 and per["l1"][-1]["reason"] == "length", f"l1 {per['l1']}")
    ts_add(fe, 0, "l2", list(range(3, 63)))  # max_new_tokens nil: the same clamp
    per, _ = ts_collect(fe, ts_finished("l2"))
    check(len(ts_tokens(per["l2"])) == 2, "nil max_new_tokens clamps too")

    # Invalid requests: one terminal "abort" output with no tokens; the engine lives on.
    for rid, kw in (("bad-topk", {"top_k": 0}), ("bad-topk128", {"top_k": 128}), ("bad-n", {"n": 2}),
                    ("bad-topp", {"top_p": 0.0}), ("bad-lp", {"return_logprob": True}),
                    ("bad-lp2", {"logprobs": 1})):
        ts_add(fe, 0, rid, [5, 6], max_new_tokens=3, **kw)
        per, _ = ts_collect(fe, ts_finished(rid))
        out = per[rid]
        check(len(out) == 1 and out[0]["reason"] == "abort" and out[0]["ids"] == []
              and out[0]["completion"] == 0 and out[0]["prompt"] == 2, f"{rid} {out}")
        e.wait_event("finish", id=rid, reason="abort", tokens="0")
    # A negative temperature is greedy, not an error (__post_init__ runs before verify).
    ts_add(fe, 0, "t-neg", [5, 6], max_new_tokens=2, temperature=-1.0)
    per, _ = ts_collect(fe, ts_finished("t-neg"))
    check(per["t-neg"][-1]["reason"] == "length", "negative temperature runs")

    # Two requests are stepped together: one message, two columns.
    ts_add(fe, 0, "b1", [3, 4], max_new_tokens=3)
    ts_add(fe, 0, "b2", [4, 5], max_new_tokens=3)
    per, msgs = ts_collect(fe, ts_finished("b1", "b2"))
    check(max(len(DECODER.decode(m[0])[S_RIDS]) for m in msgs) == 2, "batched")

    e.proc.send_signal(signal.SIGTERM)
    check(fe.recv(5.0) == [DEAD], "SIGTERM sends ENGINE_CORE_DEAD")
    check(e.wait_exit() == 0, "SIGTERM exit 0")


def test_ts_abort_and_drop(fe: FrontEnd) -> None:
    """ABORT sends nothing; an early ABORT swallows a later ADD; malformed input is dropped."""
    e = ts_spawn(fe, 0, ["--token-ms", "20"])
    fe.handshake([0])
    ts_add(fe, 0, "x1", [3, 4, 5], max_new_tokens=1000)
    ts_collect(fe, lambda per, _m: len(per.get("x1", [])) >= 3)
    fe.send(0, ABORT, ENC.encode(["x1", "early"]))
    ev = e.wait_event("abort")
    check(ev["ids"] == "x1,early", f"abort event {ev}")
    late = quiet(fe, 0.3)
    check(len(late) <= 1, f"outputs after ABORT: {len(late)}")
    for m in late:
        check(all(r == "" for r in DECODER.decode(m[0])[S_REASONS]), "an ABORT produces no finish output")
    # "early" was unknown: the ADD that follows is dropped without a word.
    ts_add(fe, 0, "early", [3], max_new_tokens=2)
    e.wait_event("dropped", id="early", why="pending-abort")
    check(quiet(fe, 0.3) == [], "pending-aborted ADD sends nothing")
    # A live request's id can be used again.
    ts_add(fe, 0, "x1", [9], max_new_tokens=2)
    per, _ = ts_collect(fe, ts_finished("x1"))
    check(ts_tokens(per["x1"]) == [9, 9], "id reusable after a live abort")

    # Malformed messages are dropped and the engine reads on.
    fe.send(0, ADD, b"\xc1")
    fe.send(0, UTILITY, ENC.encode([0, 1, "is_sleeping", []]))
    fe.input.send_multipart([b"\x00\x00", ADD])  # no payload frame
    fe.send(0, ADD, ENC.encode(["EngineCoreRequest", "y", None, None, [1], []]))
    fe.send(0, ADD, ENC.encode(["y", [1], None, {"max_tokens": 1}, None, 0.0, None, None, None]))  # vLLM ADD
    for _ in range(5):
        e.wait_event("dropped", why="malformed")
    check(quiet(fe, 0.2) == [], "malformed input sends nothing")
    ts_add(fe, 0, "ok", [7], max_new_tokens=1)
    per, _ = ts_collect(fe, ts_finished("ok"))
    check(ts_tokens(per["ok"]) == [7], "engine still serves")

    # hang-after-first + logprobs on a second engine.
    sigterm_exit_0(e)
    quiet(fe, 0.1)
    e = ts_spawn(fe, 0, ["--enable-output-logprobs", "--fault", "hang-after-first", "--token-ms", "10"])
    fe.handshake([0])
    ts_add(fe, 0, "p1", [100, 200], max_new_tokens=5, return_logprob=True)
    per, _ = ts_collect(fe, lambda per, _m: "p1" in per)
    check(per["p1"][0]["lpv"] == [-0.125] and per["p1"][0]["lpi"] == [100], f"logprobs {per['p1']}")
    check(quiet(fe, 0.3) == [], "hang-after-first: nothing more")
    e.proc.send_signal(signal.SIGTERM)
    check(fe.recv(5.0) == [DEAD], "SIGTERM: sentinel, no abort output")
    check(e.wait_exit() == 0, "SIGTERM exit 0")
    ev = e.wait_event("shutdown")
    check(ev["dropped"] == "p1" and ev["aborted"] == "", f"shutdown event {ev}")


def test_ts_death(fe: FrontEnd) -> None:
    """die-after, exit-after, and the scheduler's fatal checks (duplicate id, prompt too long, empty)."""
    check_step_faults(fe, lambda args: ts_spawn(fe, 0, args),
                      lambda rid: ts_add(fe, 0, rid, [3, 4, 5], max_new_tokens=10),
                      lambda until: ts_collect(fe, until))

    for why, args, sends in (
        ("duplicate-request-id", ["--token-ms", "50"],
         [("dup", [3, 4], {"max_new_tokens": 100}), ("dup", [3, 4], {"max_new_tokens": 100})]),
        ("negative-max-new-tokens", ["--max-model-len", "16"], [("long", list(range(3, 18)), {})]),
        ("empty-prompt", [], [("empty", [], {"max_new_tokens": 2})]),
        ("input-ids-none", [], [("none", None, {"max_new_tokens": 2})]),
    ):
        e = ts_spawn(fe, 0, args)
        fe.handshake([0])
        for i, (rid, prompt, kw) in enumerate(sends):
            ts_add(fe, 0, rid, prompt, **kw)
            if i + 1 < len(sends):
                ts_collect(fe, lambda per, _m, rid=rid: rid in per)
        ts_collect(fe, lambda _p, m: bool(m) and m[-1] == [DEAD])
        if why != "input-ids-none":
            e.wait_event("fatal", error=why)
        check(e.wait_exit() == 1, f"{why}: exit code 1")
        e.wait_event("dead")

    e = ts_spawn(fe, 0, ["--fault", "no-registration"])
    fe.handshake([0], expect_ready=False)
    e.wait_event("ready")
    check_no_registration(fe, e)


def test_ts_two_ranks(fe: FrontEnd) -> None:
    """Two TokenSpeed ranks: identities, registrations with the real dp size, engine_index in outputs."""
    e0 = ts_spawn(fe, 0, ["--dp-size", "2"])
    e1 = ts_spawn(fe, 1, ["--dp-size", "2", "--load-ms", "200"])
    fe.handshake([0, 1])
    for r in (0, 1):
        reg = fe.registrations[r]
        check(reg["data_parallel_rank"] == r and reg["data_parallel_size"] == 2, f"rank {r} registration")
    ts_add(fe, 0, "q0", [7, 8], max_new_tokens=2)
    ts_add(fe, 1, "q1", [9, 10], max_new_tokens=2)
    per, _ = ts_collect(fe, ts_finished("q0", "q1"))
    check(ts_tokens(per["q0"]) == [7, 8] and ts_tokens(per["q1"]) == [9, 10], "routing by identity")
    check(all(o["engine"] == 0 for o in per["q0"]) and all(o["engine"] == 1 for o in per["q1"]),
          "engine_index names the rank")
    for e in (e0, e1):
        sigterm_exit_0(e)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-url", help="also test --mode llama against this llama-server")
    opts = ap.parse_args()
    tests: list[tuple[str, Callable[[], None]]] = [("vectors", test_vectors)]
    for name, fn in [
        ("basic", test_basic),
        ("abort-hang-sigterm", test_abort_and_faults_timing),
        ("error-and-bad-params", test_error_and_bad_params),
        ("death", test_death),
        ("no-registration", test_no_registration),
        ("two-ranks", test_two_ranks),
    ]:
        tests.append((name, lambda fn=fn: with_frontend(fn)))
    tests.append(("ts-vectors", test_ts_vectors))
    for name, fn in [
        ("ts-basic", test_ts_basic),
        ("ts-abort-and-drop", test_ts_abort_and_drop),
        ("ts-death", test_ts_death),
        ("ts-two-ranks", test_ts_two_ranks),
    ]:
        tests.append((name, lambda fn=fn: with_frontend(fn)))
    if opts.llama_url:
        tests.append(("llama", lambda: with_frontend(lambda fe: test_llama(fe, opts.llama_url))))
    failed = 0
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s)", flush=True)
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    print(f"{len(tests) - failed}/{len(tests)} passed", flush=True)
    return 1 if failed else 0


def with_frontend(fn: Callable[[FrontEnd], None]) -> None:
    fe = FrontEnd()
    try:
        fn(fe)
    except Exception:
        for e in fe.engines:
            if e.stderr:
                print(f"--- rank {e.rank} stderr ---\n" + "\n".join(e.stderr[-20:]), file=sys.stderr)
        raise
    finally:
        fe.close()


if __name__ == "__main__":
    sys.exit(main())
