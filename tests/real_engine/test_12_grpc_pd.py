"""Prefill/decode pairs of gRPC engines, against llama.cpp itself.

Two grpc-engine llama.cpp adapters front the same llama-server, one in the prefill role and one
in the decode role (`--disaggregation-mode`). The gateway (`--pd-disaggregation`) renders and
tokenizes once, runs the prefill leg (llama.cpp generates one token) and the decode leg (llama.cpp
generates the answer), in each of the two protocols: vLLM's connectors (prefill first, then decode
with the `kv_transfer_params` the prefill answered) and SGLang's bootstrap (both legs at once, in
one room). The adapters hand the prompt's ids over their side channel as the "KV cache" and the
decode checks them against its own prompt, so a pair sent different prompts or rooms fails.

With greedy sampling the answers through the pair must equal llama-server's own word for word,
through the official OpenAI and Anthropic SDKs, whole and streamed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

import harness

MAX_TOKENS = 40
PROMPTS = [
    "Name three colours of the rainbow.",
    "What is 12345 + 54321?",
]


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def logdir():
    d = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-grpc-pd-"))
    yield d
    print(f"\nreal-engine gRPC PD logs kept in {d}")


@pytest.fixture(scope="module")
def llama(logdir):
    engine = harness.engine(logdir, "engine-grpc-pd")
    try:
        harness.start_engine(engine)
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def pair(request, logdir, llama):
    """A prefill and a decode adapter of one service over llama-server, and a gateway that
    pairs them."""
    service = request.param
    bootstrap = harness.free_port()
    prefill = harness.grpc_adapter(
        logdir, f"prefill-{service}", llama,
        ["--service", service, "--disaggregation-mode", "prefill", "--bootstrap-port", str(bootstrap)],
    )
    decode = harness.grpc_adapter(
        logdir, f"decode-{service}", llama, ["--service", service, "--disaggregation-mode", "decode"]
    )
    gw = harness.gateway(
        logdir,
        f"tollgate-pd-{service}",
        [],
        [
            "--pd-disaggregation",
            "--prefill", f"grpc://127.0.0.1:{prefill.port}", str(bootstrap),
            "--decode", f"grpc://127.0.0.1:{decode.port}",
            "--model-path", harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER"),
        ],
    )
    try:
        harness.start_grpc_adapter(prefill)
        harness.start_grpc_adapter(decode)
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 60)
        yield service, prefill, decode, gw
    finally:
        gw.stop()
        decode.stop()
        prefill.stop()


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=url + "/v1", timeout=120, max_retries=0)


def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="unused", base_url=url, timeout=120, max_retries=0)


def count(proc, word: str) -> int:
    return sum(1 for line in proc.log_tail(200_000).splitlines() if line.startswith(word))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_chat_through_the_pair_matches_llama_server(pair, llama, prompt):
    service, prefill, decode, gw = pair
    fetched = count(decode, "kv_fetched")
    ask = dict(model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0)
    theirs = openai_client(llama.url).chat.completions.create(**ask)
    ours = openai_client(gw.url).chat.completions.create(**ask)
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens
    assert ours.usage.completion_tokens == theirs.usage.completion_tokens
    streamed = "".join(
        (chunk.choices[0].delta.content or "") if chunk.choices else ""
        for chunk in openai_client(gw.url).chat.completions.create(**ask, stream=True)
    )
    assert streamed == theirs.choices[0].message.content
    # Both requests went through the pair: the decode took the prefill's cache each time.
    harness.wait_log(decode, ("kv_fetched",), 10)
    assert count(decode, "kv_fetched") == fetched + 2, decode.log_tail()


def test_messages_through_the_pair_match_llama_servers_own(pair, llama):
    service, prefill, decode, gw = pair
    ask = dict(model=harness.MODEL_ALIAS, max_tokens=MAX_TOKENS, messages=chat(PROMPTS[0]),
               extra_body={"temperature": 0})
    theirs = anthropic_client(llama.url).messages.create(**ask)
    ours = anthropic_client(gw.url).messages.create(**ask)
    assert ours.content[0].text == theirs.content[0].text
    assert ours.stop_reason == theirs.stop_reason
    with anthropic_client(gw.url).messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == theirs.content[0].text


def test_the_legs_and_the_window_are_measured(pair):
    service, prefill, decode, gw = pair
    # The prefill generated one token per leg with the pair's handoff.
    legs = [l for l in prefill.log_tail(200_000).splitlines() if l.startswith("handoff ")]
    assert legs, prefill.log_tail()
    marker = "kv=json:" if service == "vllm" else "kv=bootstrap:127.0.0.1:"
    assert all(marker in l for l in legs), legs
    metrics = httpx.get(f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout=5).text
    for family in ("gw_pd_prefill_duration_seconds_count", "gw_pd_kv_transfer_duration_seconds_count"):
        lines = [l for l in metrics.splitlines() if l.startswith(family) and f'runtime="{service}"' in l]
        assert lines and float(lines[0].rsplit(" ", 1)[1]) >= 1, metrics
