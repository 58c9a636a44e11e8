"""Faults with the real engine: one llama-server is killed in the middle of a stream, then
started again. Runs after the SDK tests (file order), on the same fleet."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

import harness
from conftest import GATEWAY_KEY

TPS = "llamacpp:tokens_predicted_total"
STATE: dict = {}


def client(fleet, read_timeout: float = 10) -> openai.OpenAI:
    # The read timeout bounds the test: a hang shows as a failure after 10 s, never as a stall.
    # Retries (the SDK default) never apply to an error in the middle of a stream; they cover
    # the pooled-connection 502 of test_1_sdk.test_back_to_back_streams_get_no_502.
    return openai.OpenAI(
        api_key=GATEWAY_KEY,
        base_url=fleet.gw.url + "/v1",
        timeout=httpx.Timeout(read_timeout, connect=5),
        max_retries=2,
    )


def busy_engine(fleet):
    busy = [e for e in fleet.engines if harness.engine_counter(e.url, "llamacpp:requests_processing") > 0]
    assert len(busy) == 1, "exactly one engine should be serving the stream"
    return busy[0]


def short_chat(c, n: int = 4):
    return c.chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=n,
        temperature=0,
        extra_body={"ignore_eos": True},
    )


def test_engine_killed_during_stream_gives_prompt_error_then_other_engine_serves(fleet):
    stream = client(fleet).chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=[{"role": "user", "content": "Write a long story about a lighthouse."}],
        max_tokens=512,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    received, finished, error, killed_at, victim = 0, False, None, None, None
    try:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
            if chunk.choices and chunk.choices[0].finish_reason:
                finished = True
            if received == 5 and victim is None:
                victim = busy_engine(fleet)
                victim.kill()
                killed_at = time.monotonic()
    except (httpx.HTTPError, openai.APIError) as e:
        error = e
    ended_after = time.monotonic() - killed_at if killed_at else None
    assert victim is not None, f"stream ended after {received} chunks before the kill"
    STATE["victim"] = victim
    assert not finished, "the stream claims to have finished although its engine was killed"
    assert error is not None, (
        f"the stream ended without an error {ended_after:.2f}s after the engine was killed "
        f"({received} chunks, no finish_reason): a truncated stream looks complete"
    )
    assert not isinstance(error, (httpx.TimeoutException, openai.APITimeoutError)), (
        f"the client hung until its read timeout: {error!r}"
    )
    assert ended_after < 3, f"the error came {ended_after:.2f}s after the kill"
    print(f"stream ended {ended_after * 1000:.0f} ms after the kill with {type(error).__name__}: {error}")

    # The health check (interval 1 s, failure threshold 1) takes the dead engine out...
    t0 = time.monotonic()
    fleet.wait_status(victim.url, "not_ready", timeout=10)
    print(f"dead engine left rotation {time.monotonic() - t0:.2f}s after the stream error")
    assert httpx.get(fleet.gw.url + "/readiness").status_code == 200

    # ...and the next requests all go to the other engine.
    survivor = next(e for e in fleet.engines if e is not victim)
    before = harness.engine_counter(survivor.url, TPS)
    c = client(fleet)
    for _ in range(4):
        r = short_chat(c)
        assert r.choices[0].message.content is not None
    assert harness.engine_counter(survivor.url, TPS) - before >= 16


def test_restarted_engine_returns_to_rotation(fleet):
    victim = STATE.get("victim")
    if victim is None:
        pytest.fail("the kill test did not kill an engine")
    restarted = harness.engine(fleet.logdir, victim.name + "-restarted", port=victim.port)
    if victim is fleet.a:
        fleet.a = restarted
    else:
        fleet.b = restarted
    harness.start_engine(restarted)
    up = time.monotonic()
    # success threshold 2 at a 1 s interval: back within a few seconds.
    fleet.wait_status(restarted.url, "ready", timeout=15)
    back = time.monotonic() - up
    print(f"restarted engine back in rotation {back:.2f}s after it answered /health")
    assert back < 8

    before = [harness.engine_counter(e.url, TPS) for e in fleet.engines]
    c = client(fleet)
    for _ in range(4):
        short_chat(c)
    after = [harness.engine_counter(e.url, TPS) for e in fleet.engines]
    grew = [b - a for a, b in zip(before, after)]
    assert all(g > 0 for g in grew), f"tokens predicted per engine after the restart: {grew}"
