"""The official OpenAI and Anthropic Python SDKs through tollgate to real llama-server engines."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest

import harness
from conftest import ADMIN_KEY, GATEWAY_KEY, REPORTS

MAX_TOKENS = 24
PROMPT = "Name three colours of the rainbow."
# The SDKs' own default: two retries of a 502/connection error. llama-server closes its
# connection after every streamed response, and the gateway's pooled connection can lose that
# race (see test_back_to_back_streams_get_no_502 below); real clients retry, so do these.
RETRIES = 2


def oai(fleet, key: str = GATEWAY_KEY) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=fleet.gw.url + "/v1", timeout=60, max_retries=RETRIES)


def ant(fleet, key: str = GATEWAY_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=fleet.gw.url, timeout=60, max_retries=RETRIES)


def chat(messages_text: str = PROMPT):
    return [{"role": "user", "content": messages_text}]


# --- registration ----------------------------------------------------------------------------


def test_workers_registered_both_ways_as_generic(fleet):
    workers = fleet.workers()
    by_url = {w["url"].rstrip("/"): w for w in workers}
    assert set(by_url) == {fleet.a.url, fleet.b.url}, workers
    for w in by_url.values():
        assert w["runtime_type"] == "generic", w
        assert w["status"] == "ready", w
        assert w["is_healthy"] is True, w
        assert w["connection_mode"] == "http", w
    # B came in through POST /workers and kept the id it was given.
    assert by_url[fleet.b.url]["id"] == fleet.b_worker_id


def test_control_plane_refuses_the_data_key(fleet):
    r = httpx.get(fleet.gw.url + "/workers", headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
    assert r.status_code == 401
    r = httpx.get(fleet.gw.url + "/workers", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200


def test_models_list(fleet):
    # The gateway answers from its registry (spec: owned_by self_hosted); the engine's own
    # card (owned_by llamacpp) is what detection read to call it generic.
    models = oai(fleet).models.list()
    assert [m.id for m in models.data] == [harness.MODEL_ALIAS], models
    assert models.data[0].owned_by == "self_hosted"
    direct = httpx.get(fleet.a.url + "/v1/models").json()
    assert [m["id"] for m in direct["data"]] == [harness.MODEL_ALIAS]
    assert direct["data"][0]["owned_by"] == "llamacpp"


# --- OpenAI SDK -------------------------------------------------------------------------------


def test_chat_completion(fleet):
    r = oai(fleet).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=chat(), max_tokens=MAX_TOKENS, temperature=0
    )
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= MAX_TOKENS
    assert r.usage.prompt_tokens > 5


def test_chat_stream_is_incremental_and_ends_with_usage(fleet):
    stream = oai(fleet).chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=chat("Count from one to twenty in words."),
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    arrivals, text, chunks = [], [], []
    for chunk in stream:
        chunks.append(chunk)
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
            text.append(chunk.choices[0].delta.content)
    # One token a chunk, spread over the generation: not buffered and sent at once.
    assert len(arrivals) >= MAX_TOKENS // 2, len(arrivals)
    spread = arrivals[-1] - arrivals[0]
    assert spread > 0.03, f"all {len(arrivals)} content chunks arrived within {spread * 1000:.1f} ms"
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert max(gaps) < spread, "content arrived in one burst"
    assert "".join(text).strip()
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish and finish[-1].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.completion_tokens == MAX_TOKENS


def test_completions(fleet):
    r = oai(fleet).completions.create(
        model=harness.MODEL_ALIAS, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert r.choices[0].text.strip()
    assert 0 < r.usage.completion_tokens <= 8


def test_responses_passthrough(fleet):
    r = oai(fleet).responses.create(
        model=harness.MODEL_ALIAS, input=PROMPT, max_output_tokens=MAX_TOKENS, temperature=0
    )
    assert r.output_text.strip()
    assert r.status in ("completed", "incomplete")


def test_wrong_or_missing_key_is_refused_by_the_gateway(fleet):
    with pytest.raises(openai.AuthenticationError) as e:
        oai(fleet, key="not-the-key").chat.completions.create(
            model=harness.MODEL_ALIAS, messages=chat(), max_tokens=4
        )
    assert e.value.status_code == 401
    with pytest.raises(anthropic.AuthenticationError):
        ant(fleet, key="not-the-key").messages.create(
            model=harness.MODEL_ALIAS, max_tokens=4, messages=chat()
        )
    r = httpx.post(
        fleet.gw.url + "/v1/chat/completions",
        json={"model": harness.MODEL_ALIAS, "messages": chat(), "max_tokens": 4},
    )
    assert r.status_code == 401 and r.content == b""


# --- Anthropic SDK ----------------------------------------------------------------------------


def test_anthropic_sdk_sends_bearer(fleet):
    # The installed SDK sends its api_key as Authorization: Bearer; the gateway key passes.
    assert ant(fleet).auth_headers == {"Authorization": f"Bearer {GATEWAY_KEY}"}


def test_messages(fleet):
    m = ant(fleet).messages.create(
        model=harness.MODEL_ALIAS, max_tokens=MAX_TOKENS, messages=chat()
    )
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert 0 < m.usage.output_tokens <= MAX_TOKENS


def test_messages_stream(fleet):
    # One content_block_delta event a token, spread over the generation (24 tokens take
    # ~130-250 ms here): the gateway relays each event as the engine sends it. Timed on the
    # wire with httpx, because the SDK's own transport (httpx2) sometimes reads a short stream
    # whole before yielding its first text, which says nothing about the gateway.
    body = {
        "model": harness.MODEL_ALIAS,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "messages": chat("Count from one to twenty in words."),
        "temperature": 0,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "anthropic-version": "2023-06-01"}
    arrivals = []
    with httpx.stream("POST", fleet.gw.url + "/v1/messages", json=body, headers=headers,
                      timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers
        for line in r.iter_lines():
            if line == "event: content_block_delta":
                arrivals.append(time.monotonic())
    assert len(arrivals) >= MAX_TOKENS // 2, len(arrivals)
    spread = arrivals[-1] - arrivals[0]
    assert spread > 0.05, f"{len(arrivals)} deltas arrived within {spread * 1000:.1f} ms"

    # The SDK's stream helper assembles the same events into the final message.
    with ant(fleet).messages.stream(
        model=harness.MODEL_ALIAS,
        max_tokens=MAX_TOKENS,
        messages=chat("Count from one to twenty in words."),
        extra_body={"temperature": 0, "ignore_eos": True},
    ) as stream:
        parts = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(parts) >= MAX_TOKENS // 2, parts
    assert "".join(parts) == final.content[0].text
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == MAX_TOKENS


def test_count_tokens(fleet):
    c = ant(fleet).messages.count_tokens(model=harness.MODEL_ALIAS, messages=chat())
    assert c.input_tokens > 5
    direct = httpx.post(
        fleet.a.url + "/v1/messages/count_tokens",
        json={"model": harness.MODEL_ALIAS, "messages": chat()},
    ).json()
    assert c.input_tokens == direct["input_tokens"]


def test_older_x_api_key_spelling_with_gateway_auth(fleet):
    """Older anthropic SDKs send the key as x-api-key only.

    The spec (documents 1 and 2; docs/auth.md) says the gateway never reads x-api-key: with
    data-plane auth on, such a client is refused with 401 and must send the gateway key as
    Authorization: Bearer (the SDK's auth_token, or default_headers). Both headers together
    pass.
    """
    body = {"model": harness.MODEL_ALIAS, "max_tokens": 4, "messages": chat()}
    h = {"anthropic-version": "2023-06-01", "x-api-key": GATEWAY_KEY}
    r = httpx.post(fleet.gw.url + "/v1/messages", json=body, headers=h, timeout=60)
    assert r.status_code == 401, r.text
    r = httpx.post(
        fleet.gw.url + "/v1/messages",
        json=body,
        headers={**h, "Authorization": f"Bearer {GATEWAY_KEY}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"]


def test_older_x_api_key_spelling_on_open_gateway(open_gateway):
    """Without gateway auth the x-api-key client works; the header is not passed on."""
    r = httpx.post(
        open_gateway.url + "/v1/messages",
        json={"model": harness.MODEL_ALIAS, "max_tokens": 4, "messages": chat()},
        headers={"anthropic-version": "2023-06-01", "x-api-key": "client-provider-key"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["type"] == "message"


# --- requests reach both engines ----------------------------------------------------------------


def test_requests_are_spread_over_both_engines(fleet):
    before = [harness.engine_counter(e.url, "llamacpp:tokens_predicted_total") for e in fleet.engines]
    client = oai(fleet)
    for _ in range(4):
        client.chat.completions.create(
            model=harness.MODEL_ALIAS, messages=chat(), max_tokens=4, temperature=0,
            extra_body={"ignore_eos": True},
        )
    after = [harness.engine_counter(e.url, "llamacpp:tokens_predicted_total") for e in fleet.engines]
    grew = [b - a for a, b in zip(before, after)]
    assert all(g > 0 for g in grew), f"tokens predicted per engine: {grew}"
    assert sum(grew) >= 16


def test_back_to_back_streams_get_no_502(open_gateway):
    # One engine behind the gateway, so each request reuses the connection of the last stream.
    # llama-server closes its connection after each streamed response while announcing
    # keep-alive; the gateway resends a request lost on such a connection (once, at once).
    body = {"model": harness.MODEL_ALIAS, "messages": chat("hi"), "max_tokens": 2, "stream": True}
    outcomes: dict = {}
    with httpx.Client(base_url=open_gateway.url, timeout=60) as c:
        for _ in range(40):
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                r.read()
                key = (r.status_code, r.headers.get("x-gw-error-code"))
                outcomes[key] = outcomes.get(key, 0) + 1
    REPORTS.append(("40 back-to-back streams through the gateway: (status, X-GW-Error-Code)", str(outcomes)))
    assert outcomes == {(200, None): 40}, outcomes


# --- engine metrics ---------------------------------------------------------------------------


def test_engine_metrics_carry_engine_series_with_worker_addr(fleet):
    r = httpx.get(fleet.gw.url + "/engine_metrics", timeout=10)
    if r.status_code == 501:
        pytest.skip("needs /engine_metrics (issue 6)")
    assert r.status_code == 200, r.text
    lines = [l for l in r.text.splitlines() if l and not l.startswith("#")]
    for e in fleet.engines:
        mine = [l for l in lines if f'worker_addr="{e.url}"' in l]
        assert any(l.startswith("llamacpp:prompt_tokens_total") for l in mine), (e.url, r.text[:2000])
        assert any(l.startswith("llamacpp:tokens_predicted_total") for l in mine), e.url
    assert all("worker_addr=" in l for l in lines), "a sample without worker_addr"


def test_gateway_metrics_parse_as_openmetrics(fleet):
    """The whole /metrics exposition, after the traffic above, read by the reference parser."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    r = httpx.get(f"http://127.0.0.1:{fleet.gw.metrics_port}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    want = {
        "gw_http_requests": "counter",
        "gw_http_request_duration_seconds": "histogram",
        "gw_http_responses": "counter",
        "gw_http_connections_active": "gauge",
        "gw_http_inflight_request_age_count": "gauge",
        "gw_router_requests": "counter",
        "gw_router_request_duration_seconds": "histogram",
        "gw_router_upstream_responses": "counter",
        "gw_router_request_body_path": "counter",
        "gw_worker_selection": "counter",
        "gw_worker_health": "gauge",
        "gw_worker_requests_active": "gauge",
        "gw_worker_pool_size": "gauge",
        "gw_worker_cb_state": "gauge",
        "gw_runtime_event_loop_delay_seconds": "histogram",
        "gw_runtime_workers": "gauge",
        "gw_runtime_alive_tasks": "gauge",
        "gw_runtime_worker_busy_ratio": "gauge",
    }
    for name, kind in want.items():
        assert name in families, f"{name} missing: {sorted(families)}"
        assert families[name].type == kind, (name, families[name].type)
    chat = [
        s
        for s in families["gw_router_requests"].samples
        if s.labels.get("endpoint") == "chat" and s.name == "gw_router_requests_total"
    ]
    assert chat and sum(s.value for s in chat) >= 1, chat
    ages = families["gw_http_inflight_request_age_count"].samples
    assert [(s.labels["gt"], s.labels["le"]) for s in ages][-1] == ("86400", "+Inf")
