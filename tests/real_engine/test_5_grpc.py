"""tollgate's own chat pipeline over SGLang's gRPC service, against llama.cpp itself.

In front of a gRPC engine the gateway does the engine's text work: it renders the model's chat
template, tokenizes with the model's tokenizer, sends token ids, and detokenizes the ids that
come back. Here the engine is grpc-engine's llama.cpp adapter in front of llama-server, and the
tokenizer and template are the ones exported from the GGUF (perf/real_engine/gguf_tokenizer.py).
With greedy sampling the gateway's answers must then equal llama-server's own OpenAI endpoints
word for word, with the same token counts.

The first two tests need no gateway: they check the exported tokenizer against llama-server's
tokenization, and that ids sent through llama-server detokenize to its own chat text (what the
gateway tests below rely on).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

import harness

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf" / "real_engine"))

import gguf_tokenizer  # noqa: E402

# Greedy answers of this model to these prompts end on a whole character at this length (the
# premise tests below check it): where an answer stops mid-character, what the text shows of
# the half character is each server's own choice, not the pipeline's correctness.
MAX_TOKENS = 60
PROMPTS = [
    "Name three colours of the rainbow.",
    "Écris une phrase en français avec des accents: été, garçon.",
    "Translate to emoji: happy birthday party 🎉",
    "Write the word hello in Chinese, Japanese and Korean.",
    "What is 12345 + 54321?",
]
COMPLETION_TOKENS = 30
COMPLETION_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Les saisons de l'année sont: l'été,",
    "My favourite emoji are 🎉 and",
]

def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def logdir():
    d = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-grpc-"))
    yield d
    print(f"\nreal-engine gRPC logs kept in {d}")


@pytest.fixture(scope="module")
def llama(logdir):
    engine = harness.engine(logdir, "engine-grpc")
    try:
        harness.start_engine(engine)
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def adapter(logdir, llama):
    proc = harness.grpc_adapter(logdir, "grpc-engine", llama)
    try:
        harness.start_grpc_adapter(proc)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def grpc_gateway(logdir, adapter):
    """tollgate with the adapter as its one worker and the exported tokenizer directory."""
    gw = harness.gateway(
        logdir,
        "tollgate-grpc",
        [f"grpc://127.0.0.1:{adapter.port}"],
        ["--model-path", harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")],
    )
    try:
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 60)
        yield gw
    finally:
        gw.stop()


def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")) / "tokenizer.json"))


def via_gateway(gw) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=gw.url + "/v1", timeout=60, max_retries=0)


def direct(engine) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=engine.url + "/v1", timeout=60, max_retries=0)


def first_content(chunk: dict) -> str:
    choices = chunk.get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def busy_slots(engine) -> int:
    slots = httpx.get(engine.url + "/slots", timeout=5).json()
    return sum(1 for s in slots if s.get("is_processing"))


# --- without the gateway ---------------------------------------------------------------------


def test_exported_tokenizer_matches_llama_server(llama):
    rendered = [
        httpx.post(llama.url + "/apply-template", json={"messages": chat(p)}, timeout=10).json()["prompt"]
        for p in PROMPTS
    ]
    bad = gguf_tokenizer.mismatches(
        Path(harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")),
        llama.url,
        gguf_tokenizer.PARITY_TEXTS + rendered,
    )
    assert bad == [], "\n".join(f"{t!r}: exported {a} llama-server {b}" for t, a, b in bad)


def greedy_ids(llama, ids: list[int], n: int) -> dict:
    body = {"prompt": ids, "n_predict": n, "temperature": 0, "return_tokens": True, "cache_prompt": True}
    return httpx.post(llama.url + "/completion", json=body, timeout=60).json()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ids_through_llama_server_detokenize_to_its_chat_text(llama, prompt):
    tok = tokenizer()
    text = httpx.post(llama.url + "/apply-template", json={"messages": chat(prompt)}, timeout=10).json()["prompt"]
    ids = tok.encode(text, add_special_tokens=False).ids
    out = greedy_ids(llama, ids, MAX_TOKENS)
    theirs = direct(llama).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
    )
    decoded = tok.decode(out["tokens"], skip_special_tokens=True)
    assert not decoded.endswith("\ufffd"), f"ends mid-character at {MAX_TOKENS} tokens: pick another"
    assert decoded == theirs.choices[0].message.content
    assert len(ids) == theirs.usage.prompt_tokens
    assert out["tokens_predicted"] == theirs.usage.completion_tokens


@pytest.mark.parametrize("prompt", COMPLETION_PROMPTS)
def test_ids_through_llama_server_detokenize_to_its_completion_text(llama, prompt):
    tok = tokenizer()
    ids = tok.encode(prompt, add_special_tokens=True).ids
    out = greedy_ids(llama, ids, COMPLETION_TOKENS)
    theirs = direct(llama).completions.create(
        model=harness.MODEL_ALIAS, prompt=prompt, max_tokens=COMPLETION_TOKENS, temperature=0
    )
    decoded = tok.decode(out["tokens"], skip_special_tokens=True)
    assert not decoded.endswith("\ufffd"), f"ends mid-character at {COMPLETION_TOKENS} tokens"
    assert decoded == theirs.choices[0].text
    assert len(ids) == theirs.usage.prompt_tokens
    assert out["tokens_predicted"] == theirs.usage.completion_tokens


# --- through the gateway ---------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_chat_matches_llama_server(grpc_gateway, llama, prompt):
    ours = via_gateway(grpc_gateway).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
    )
    theirs = direct(llama).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
    )
    assert ours.model == harness.MODEL_ALIAS
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens
    assert ours.usage.completion_tokens == theirs.usage.completion_tokens


def messages_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="unused", base_url=url, timeout=60, max_retries=0)


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_messages_match_llama_servers_own(grpc_gateway, llama, prompt):
    """/v1/messages built by the gateway's pipeline equals llama-server's own /v1/messages
    (greedy), whole and streamed through the official SDK's accumulator."""
    # This SDK release has no temperature argument: greedy sampling goes as an extra field.
    ask = dict(model=harness.MODEL_ALIAS, max_tokens=MAX_TOKENS, messages=chat(prompt),
               extra_body={"temperature": 0})
    theirs = messages_client(llama.url).messages.create(**ask)
    ours = messages_client(grpc_gateway.url).messages.create(**ask)
    assert [b.type for b in ours.content] == ["text"], ours
    assert ours.content[0].text == theirs.content[0].text
    assert ours.stop_reason == theirs.stop_reason
    assert ours.usage.output_tokens == theirs.usage.output_tokens
    assert ours.usage.cache_read_input_tokens == 0
    with messages_client(grpc_gateway.url).messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == theirs.content[0].text
    assert final.stop_reason == theirs.stop_reason
    assert final.usage.output_tokens == theirs.usage.output_tokens


@pytest.mark.parametrize("prompt", PROMPTS)
def test_chat_stream_matches_llama_server(grpc_gateway, llama, prompt):
    stream = via_gateway(grpc_gateway).chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=chat(prompt),
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    theirs = direct(llama).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
    )
    assert text == theirs.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [theirs.choices[0].finish_reason]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.prompt_tokens == theirs.usage.prompt_tokens
    assert last.usage.completion_tokens == theirs.usage.completion_tokens


@pytest.mark.parametrize("prompt", COMPLETION_PROMPTS)
def test_completions_match_llama_server(grpc_gateway, llama, prompt):
    ours = via_gateway(grpc_gateway).completions.create(
        model=harness.MODEL_ALIAS, prompt=prompt, max_tokens=COMPLETION_TOKENS, temperature=0
    )
    theirs = direct(llama).completions.create(
        model=harness.MODEL_ALIAS, prompt=prompt, max_tokens=COMPLETION_TOKENS, temperature=0
    )
    assert ours.choices[0].text == theirs.choices[0].text
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens
    assert ours.usage.completion_tokens == theirs.usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_matches_llama_server(grpc_gateway, llama, stream):
    args = dict(
        model=harness.MODEL_ALIAS, messages=chat(PROMPTS[0]), max_tokens=MAX_TOKENS, temperature=0,
        stop=["."],
    )
    theirs = direct(llama).chat.completions.create(**args)
    assert theirs.choices[0].finish_reason == "stop"
    if stream:
        chunks = list(via_gateway(grpc_gateway).chat.completions.create(**args, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        ours = via_gateway(grpc_gateway).chat.completions.create(**args)
        text, finish = ours.choices[0].message.content, [ours.choices[0].finish_reason]
    assert text == theirs.choices[0].message.content
    assert "." not in text
    assert finish == ["stop"]


def test_client_disconnect_stops_the_engine(grpc_gateway, adapter, llama):
    body = {
        "model": harness.MODEL_ALIAS,
        "messages": chat("Tell me a very long story about a dragon and a lighthouse."),
        "max_tokens": 1500,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", grpc_gateway.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        # Checked while the stream is still being read: leaving the loop closes the
        # response (the line iterator is closed with it), which is the disconnect.
        for line in r.iter_lines():
            if line.startswith("data: {") and first_content(json.loads(line[6:])):
                assert busy_slots(llama) == 1
                break
    # The gateway saw the client leave: it aborts the generation or drops its gRPC stream.
    line = harness.wait_log(adapter, ("abort request_id=", "cancelled request_id="), 10)
    assert "request_id=" in line
    deadline = time.monotonic() + 10
    while busy_slots(llama):
        assert time.monotonic() < deadline, "llama-server still generating after the client left"
        time.sleep(0.05)


# --- the other services, with the tokenizer the engine streams ---------------------------------

OTHER_SERVICES = ["vllm", "trtllm", "tokenspeed", "mlx"]


@pytest.fixture(scope="module", params=OTHER_SERVICES)
def remote_gateway(request, logdir, llama):
    """The adapter speaking another engine's service and saying its files are elsewhere, and
    a gateway with no tokenizer of its own: it must take the one the engine streams."""
    service = request.param
    proc = harness.grpc_adapter(
        logdir,
        f"grpc-engine-{service}",
        llama,
        ["--service", service, "--advertise-model-path", "/nonexistent/models/smollm2"],
    )
    gw = harness.gateway(logdir, f"tollgate-grpc-{service}", [f"grpc://127.0.0.1:{proc.port}"], [])
    try:
        harness.start_grpc_adapter(proc)
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 60)
        yield service, gw
    finally:
        gw.stop()
        proc.stop()


def test_every_service_with_a_streamed_tokenizer_matches_llama_server(remote_gateway, llama):
    service, gw = remote_gateway
    workers = httpx.get(gw.url + "/workers", timeout=5).json()["workers"]
    assert [w["runtime_type"] for w in workers] == [service]
    assert "the engine sent its tokenizer" in gw.log_tail(100_000)
    for prompt in PROMPTS[:3]:
        ours = via_gateway(gw).chat.completions.create(
            model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
        )
        theirs = direct(llama).chat.completions.create(
            model=harness.MODEL_ALIAS, messages=chat(prompt), max_tokens=MAX_TOKENS, temperature=0
        )
        assert ours.choices[0].message.content == theirs.choices[0].message.content, service
        assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason, service
        assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens, service
        assert ours.usage.completion_tokens == theirs.usage.completion_tokens, service
    # Streamed too: the services' different completes must not double or lose text.
    stream = via_gateway(gw).chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=chat(PROMPTS[1]),
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    )
    text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
    theirs = direct(llama).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(PROMPTS[1]), max_tokens=MAX_TOKENS, temperature=0
    )
    assert text == theirs.choices[0].message.content, service
