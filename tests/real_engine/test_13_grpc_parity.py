"""Greedy parity through the gateway's gRPC pipeline, on each of SGLang's and vLLM's message
sequences, and through a ZMQ worker (vLLM's engine-core protocol), against llama-server's own
HTTP answers.

grpc-engine's llama.cpp adapter speaks SGLang's service (`--service sglang`) or vLLM's
(`--service vllm`) the way their published servicers do: SGLang ends a streamed sequence with
a chunk and then a complete repeating that chunk's ids and counting the whole sequence; vLLM's
complete repeats the last delta too, but counts only it. A gateway that decoded a complete's
ids would double the last delta ("doorstep doorstep"); one that counted its own ids or a
vLLM complete's figure would report the wrong `completion_tokens`. Every route the pipeline
serves is compared, streamed and not: text, finish reason and every token count equal
llama-server's own answer to the same request.

The ZMQ worker is perf/zmq_engine/engine.py in llama mode: a vLLM engine-core rank (its
msgspec structs mirrored from vLLM's) that dials the gateway and forwards each request's ids
to llama-server; the gateway speaks to it as vLLM's own front-end does.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

import harness

MAX_TOKENS = 48
PROMPTS = [
    "Name three colours of the rainbow.",
    "Écris une phrase en français avec des accents: été, garçon.",
    "What is 12345 + 54321?",
]
COMPLETION_PROMPT = "The capital of France is"
COMPLETION_TOKENS = 24
SERVICES = ["sglang", "vllm", "zmq"]


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def logdir():
    d = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-parity-"))
    yield d
    print(f"\nreal-engine parity logs kept in {d}")


@pytest.fixture(scope="module")
def llama(logdir):
    engine = harness.engine(logdir, "engine-parity")
    try:
        harness.start_engine(engine)
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module", params=SERVICES)
def gw(request, logdir, llama):
    """The adapter speaking one service's sequences (or a ZMQ engine-core rank), and a gateway
    in front of it."""
    service = request.param
    if service == "zmq":
        yield from zmq_gateway(logdir, llama)
        return
    proc = harness.grpc_adapter(logdir, f"grpc-engine-parity-{service}", llama, ["--service", service])
    gateway = harness.gateway(
        logdir,
        f"tollgate-parity-{service}",
        [f"grpc://127.0.0.1:{proc.port}"],
        ["--model-path", harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")],
    )
    try:
        harness.start_grpc_adapter(proc)
        harness.start_gateway(gateway)
        gateway.wait_http("/readiness", 60)
        workers = httpx.get(gateway.url + "/workers", timeout=5).json()["workers"]
        assert [w["runtime_type"] for w in workers] == [service]
        yield gateway
    finally:
        gateway.stop()
        proc.stop()


def zmq_gateway(logdir, llama):
    """A gateway with one ipc:// worker, and its rank dialling the handshake address the
    gateway derived and shows with the worker."""
    gateway = harness.gateway(
        logdir,
        "tollgate-parity-zmq",
        [f"ipc://{logdir}/zmq-engine"],
        ["--model-path", harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")],
    )
    rank = None
    try:
        harness.start_gateway(gateway)
        deadline = time.monotonic() + 30
        handshake = None
        while handshake is None:
            workers = httpx.get(gateway.url + "/workers", timeout=5).json()["workers"]
            handshake = workers[0].get("zmq_handshake_address") if workers else None
            if handshake is None:
                assert time.monotonic() < deadline, gateway.log_tail()
                time.sleep(0.1)
        rank = harness.zmq_rank(logdir, "zmq-engine-parity", llama, handshake).start()
        gateway.wait_http("/readiness", 60)
        workers = httpx.get(gateway.url + "/workers", timeout=5).json()["workers"]
        assert [(w["runtime_type"], w["connection_mode"]) for w in workers] == [("vllm", "zmq")]
        yield gateway
    finally:
        gateway.stop()
        if rank is not None:
            rank.stop()


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=url + "/v1", timeout=120, max_retries=0)


def theirs_chat(llama, prompt: str):
    return openai_client(llama.url).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
    )


def sse_events(response: httpx.Response) -> list[dict]:
    """The JSON payloads of an SSE body, `[DONE]` left out."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


@pytest.mark.parametrize("prompt", PROMPTS)
def test_chat(gw, llama, prompt):
    theirs = theirs_chat(llama, prompt)
    ask = dict(model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0)
    ours = openai_client(gw.url).chat.completions.create(**ask)
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert (ours.usage.prompt_tokens, ours.usage.completion_tokens, ours.usage.total_tokens) == (
        theirs.usage.prompt_tokens,
        theirs.usage.completion_tokens,
        theirs.usage.total_tokens,
    )
    chunks = list(
        openai_client(gw.url).chat.completions.create(
            **ask, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == theirs.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [theirs.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        theirs.usage.prompt_tokens,
        theirs.usage.completion_tokens,
    )


def test_completions(gw, llama):
    ask = dict(model=harness.MODEL_ALIAS, prompt=COMPLETION_PROMPT, max_tokens=COMPLETION_TOKENS, temperature=0)
    theirs = openai_client(llama.url).completions.create(**ask)
    ours = openai_client(gw.url).completions.create(**ask)
    assert ours.choices[0].text == theirs.choices[0].text
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert (ours.usage.prompt_tokens, ours.usage.completion_tokens) == (
        theirs.usage.prompt_tokens,
        theirs.usage.completion_tokens,
    )
    chunks = list(
        openai_client(gw.url).completions.create(**ask, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == theirs.choices[0].text
    assert chunks[-1].usage.completion_tokens == theirs.usage.completion_tokens


def test_generate(gw, llama):
    """SGLang's native /generate: the whole text and the counts, and streamed, the cumulative
    text of the last event."""
    theirs = openai_client(llama.url).completions.create(
        model=harness.MODEL_ALIAS, prompt=COMPLETION_PROMPT, max_tokens=COMPLETION_TOKENS, temperature=0
    )
    body = {
        "text": COMPLETION_PROMPT,
        "sampling_params": {"max_new_tokens": COMPLETION_TOKENS, "temperature": 0},
    }
    r = httpx.post(gw.url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    ours = r.json()
    assert ours["text"] == theirs.choices[0].text
    assert ours["meta_info"]["completion_tokens"] == theirs.usage.completion_tokens
    assert ours["meta_info"]["prompt_tokens"] == theirs.usage.prompt_tokens
    with httpx.stream("POST", gw.url + "/generate", json=dict(body, stream=True), timeout=120) as r:
        assert r.status_code == 200, r.read()
        events = sse_events(r)
    assert events[-1]["text"] == theirs.choices[0].text
    assert events[-1]["meta_info"]["completion_tokens"] == theirs.usage.completion_tokens


def test_messages(gw, llama):
    ask = dict(
        model=harness.MODEL_ALIAS,
        max_tokens=MAX_TOKENS,
        messages=chat(PROMPTS[0]),
        extra_body={"temperature": 0},
    )
    client = anthropic.Anthropic(api_key="unused", base_url=gw.url, timeout=120, max_retries=0)
    theirs = anthropic.Anthropic(api_key="unused", base_url=llama.url, timeout=120, max_retries=0).messages.create(**ask)
    ours = client.messages.create(**ask)
    assert ours.content[0].text == theirs.content[0].text
    assert ours.stop_reason == theirs.stop_reason
    # llama-server's input_tokens leaves out what its prompt cache held (Anthropic's reading);
    # the gateway's engine reports none cached, so only the generated count compares.
    assert ours.usage.output_tokens == theirs.usage.output_tokens
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == theirs.content[0].text
    assert final.stop_reason == theirs.stop_reason
    assert final.usage.output_tokens == theirs.usage.output_tokens


def test_responses(gw, llama):
    """/v1/responses run by the gateway: the output text and usage equal llama-server's chat
    answer to the same one-message input."""
    theirs = theirs_chat(llama, PROMPTS[2])
    client = openai_client(gw.url)
    ask = dict(model=harness.MODEL_ALIAS, input=PROMPTS[2], max_output_tokens=MAX_TOKENS, temperature=0, store=False)
    ours = client.responses.create(**ask)
    assert ours.output_text == theirs.choices[0].message.content
    assert ours.usage.output_tokens == theirs.usage.completion_tokens
    assert ours.usage.input_tokens == theirs.usage.prompt_tokens
    expected = "completed" if theirs.choices[0].finish_reason == "stop" else "incomplete"
    assert ours.status == expected
    text, usage = "", None
    for event in client.responses.create(**ask, stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            usage = event.response.usage
    assert text == theirs.choices[0].message.content
    assert usage is not None and usage.output_tokens == theirs.usage.completion_tokens
