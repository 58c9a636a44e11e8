"""The official Anthropic Python SDK through tollgate's provider backend (--backend anthropic).

No engine here: the provider is mock-worker standing in for Anthropic's Messages API
(`--provider anthropic`: its key header, its error envelope, its SSE events). The SDK is
given the gateway key (`auth_token`, sent as Authorization) and the provider key (an
x-api-key header), as a client of a gateway with --api-key would be.
"""

from __future__ import annotations

import anthropic
import httpx
import pytest

import harness

GATEWAY_KEY = "tg-provider-gateway-key"
PROVIDER_KEY = "sk-ant-stand-in-key"
MODEL = "claude-stand-in"
TOKENS = 5
TEXT = "".join(f"tok{i} " for i in range(TOKENS))
PROMPT = [{"role": "user", "content": "Say five tokens."}]


class Provider:
    def __init__(self, logdir):
        port = harness.free_port()
        self.stand_in = harness.Proc(
            "anthropic-stand-in",
            [
                harness.env_path("TOLLGATE_MOCK_WORKER_BIN"),
                "--host", "127.0.0.1", "--port", str(port),
                "--provider", "anthropic",
                "--model", MODEL,
                "--api-key", PROVIDER_KEY,
                "--output-tokens", str(TOKENS),
            ],
            logdir / "anthropic-stand-in.log",
            port,
        )
        self.gw = harness.gateway(
            logdir,
            "tollgate-provider",
            [self.stand_in.url],
            ["--backend", "anthropic", "--api-key", GATEWAY_KEY],
        )

    def start(self) -> "Provider":
        self.stand_in.start()
        harness.wait_log(self.stand_in, ("LISTENING",), 30)
        harness.start_gateway(self.gw)
        self.gw.wait_http("/readiness", 30)
        return self

    def stop(self) -> None:
        self.gw.stop()
        self.stand_in.stop()

    def client(self, api_key: str = PROVIDER_KEY, gateway_key: str = GATEWAY_KEY) -> anthropic.Anthropic:
        # One credential argument per client in this SDK, and an Authorization header of the
        # caller's own makes it drop its x-api-key: the gateway key is the credential
        # (Authorization: Bearer), the provider key a header of its own.
        return anthropic.Anthropic(
            auth_token=gateway_key,
            default_headers={"x-api-key": api_key},
            base_url=self.gw.url,
            timeout=30,
            max_retries=0,
        )

    def seen(self) -> list[dict]:
        """What the stand-in received (its request log)."""
        r = httpx.get(self.stand_in.url + "/mock/requests", timeout=5)
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    p = Provider(tmp_path_factory.mktemp("provider")).start()
    try:
        yield p
    finally:
        p.stop()


def test_create_reads_the_providers_message(provider):
    before = len(provider.seen())
    msg = provider.client().messages.create(model=MODEL, max_tokens=64, messages=PROMPT)
    assert isinstance(msg, anthropic.types.Message)
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == TEXT
    assert msg.stop_reason == "end_turn"
    assert msg.usage.output_tokens == TOKENS

    sent = provider.seen()[before:]
    assert [r["path"] for r in sent] == ["/v1/messages"]
    headers = sent[0]["headers"]
    assert headers["x-api-key"] == PROVIDER_KEY
    assert headers["authorization"] == f"Bearer {GATEWAY_KEY}"
    assert headers["anthropic-version"]
    # The SDK's own telemetry headers (x-stainless-*), user agent and the like stay here.
    extra = set(headers) - {
        "x-api-key", "authorization", "anthropic-version", "anthropic-beta",
        "content-type", "content-length", "host",
    }
    assert not extra, headers


def test_stream_arrives_as_text_deltas(provider):
    pieces = []
    with provider.client().messages.stream(
        model=MODEL, max_tokens=64, messages=PROMPT
    ) as stream:
        for text in stream.text_stream:
            pieces.append(text)
        final = stream.get_final_message()
    assert pieces == [f"tok{i} " for i in range(TOKENS)]
    assert final.content[0].text == TEXT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == TOKENS


def test_beta_requests_keep_their_betas(provider):
    before = len(provider.seen())
    msg = provider.client().beta.messages.create(
        model=MODEL, max_tokens=64, messages=PROMPT, betas=["interleaved-thinking-2025-05-14"]
    )
    assert msg.content[0].text == TEXT
    sent = provider.seen()[before:]
    assert sent[0]["path"] == "/v1/messages"
    assert sent[0]["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_provider_errors_reach_the_sdk_as_the_provider_sent_them(provider):
    client = provider.client()
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(
            model=MODEL, max_tokens=64, messages=PROMPT, extra_body={"mock": {"fail_status": 400}}
        )
    assert bad.value.status_code == 400
    assert bad.value.body["type"] == "error"
    assert bad.value.body["error"]["message"] == "mock worker injected failure (400)"
    # The provider's key check, with a wrong provider key.
    with pytest.raises(anthropic.AuthenticationError) as refused:
        provider.client(api_key="sk-wrong").messages.create(
            model=MODEL, max_tokens=64, messages=PROMPT
        )
    assert refused.value.body["error"]["type"] == "authentication_error"


def test_gateway_answers_of_its_own(provider):
    # The gateway key is checked first: the provider never hears of this request.
    before = len(provider.seen())
    with pytest.raises(anthropic.AuthenticationError) as denied:
        provider.client(gateway_key="not-the-gateway-key").messages.create(
            model=MODEL, max_tokens=64, messages=PROMPT
        )
    assert denied.value.status_code == 401
    # A 200 that is no Messages response: 502 parse_error in the gateway's envelope.
    with pytest.raises(anthropic.InternalServerError) as broken:
        provider.client().messages.create(
            model=MODEL, max_tokens=64, messages=PROMPT,
            extra_body={"mock": {"reply_body": '{"type": "message"}'}},
        )
    assert broken.value.status_code == 502
    assert broken.value.body["error"]["code"] == "parse_error"
    assert broken.value.response.headers["x-gw-error-code"] == "parse_error"
    # count_tokens is not served on the provider backend: a plain-text 501.
    with pytest.raises(anthropic.APIStatusError) as unserved:
        provider.client().messages.count_tokens(model=MODEL, messages=PROMPT)
    assert unserved.value.status_code == 501
    assert unserved.value.response.headers["content-type"].startswith("text/plain")
    assert len(provider.seen()) == before + 1, "only the malformed create reached the provider"
