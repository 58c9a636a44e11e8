"""The provider backend's MCP tool loop against a real MCP server (the official `mcp` Python
SDK's Streamable HTTP server, tests/real_engine/mcp_tools_server.py), driven by the official
Anthropic Python SDK with `X-GW-MCP: enabled`.

The provider is tests/real_engine/tool_model.py, a stand-in that answers like a model calling
the tools its prompt names, so every turn of the loop is known: the gateway must connect to
the server (with the bearer token), offer its tools as ordinary tools, run the calls, send the
results back, and answer with mcp_tool_use / mcp_tool_result blocks and the final text,
streamed and not; a failing tool is an is_error result, a slow one times out without holding
other requests, ten rounds is the bound, and a server that cannot be reached is 502
mcp_connection_failed.
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import anthropic
import httpx
import pytest

import harness

TOKEN = "mcp-test-token"
MODEL = "tool-model"
CALL_TIMEOUT_SECS = 2
MCP = {"X-GW-MCP": "enabled"}


class Setup:
    def __init__(self, logdir: Path):
        self.mcp = harness.mcp_tools(logdir, TOKEN)
        self.model = harness.tool_model(logdir)
        self.gw = harness.gateway(
            logdir,
            "tollgate-mcp",
            [self.model.url],
            ["--backend", "anthropic", "--mcp-call-timeout-secs", str(CALL_TIMEOUT_SECS)],
        )

    def start(self) -> "Setup":
        for proc in (self.mcp, self.model):
            proc.start()
            harness.wait_log(proc, ("LISTENING",), 60)
        harness.start_gateway(self.gw)
        self.gw.wait_http("/readiness", 30)
        return self

    def stop(self) -> None:
        for proc in (self.gw, self.model, self.mcp):
            proc.stop()

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key="sk-client", base_url=self.gw.url, timeout=60, max_retries=0)

    def servers(self, token: str = TOKEN, url: str | None = None) -> list[dict]:
        return [{"type": "url", "name": "tools", "url": url or f"{self.mcp.url}/mcp",
                 "authorization_token": token}]

    def seen(self) -> list[dict]:
        return httpx.get(self.model.url + "/requests", timeout=5).json()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("mcp")).start()
    yield s
    s.stop()


TOOLSET = [{"type": "mcp_toolset", "mcp_server_name": "tools"}]


def ask(setup: Setup, prompt: str, **extra):
    return setup.client().beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": prompt}],
        tools=extra.pop("tools", TOOLSET),
        mcp_servers=extra.pop("mcp_servers", setup.servers()),
        betas=["mcp-client-2025-11-20"],
        extra_headers=MCP,
        **extra,
    )


def test_a_call_runs_on_the_server_and_the_result_goes_back(setup):
    before = len(setup.seen())
    message = ask(setup, 'call add {"a": 2, "b": 40}')
    kinds = [b.type for b in message.content]
    assert kinds == ["mcp_tool_use", "mcp_tool_result", "text"], message
    use, result, text = message.content
    assert use.id.startswith("mcptoolu_") and use.name == "add" and use.server_name == "tools"
    assert use.input == {"a": 2, "b": 40}
    assert result.tool_use_id == use.id and result.is_error is False
    assert text.text == "results: 42"
    assert message.stop_reason == "end_turn"
    # Usage summed over the two model calls (10+3, then 11+3).
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 6)

    first, second = setup.seen()[before:]
    offered = {t["name"] for t in first["body"]["tools"]}
    assert offered == {"add", "echo", "slow", "fail", "header"}
    assert "mcp_servers" not in first["body"]
    assert first["body"]["tool_choice"] == {"type": "auto"}
    assert first["body"]["stream"] is False
    assert "x-gw-mcp" not in first["headers"]
    tool_result = second["body"]["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["content"][0]["text"] == "42"


def test_two_calls_in_one_turn_and_a_failing_tool(setup):
    message = ask(setup, "call twice")
    kinds = [b.type for b in message.content]
    assert kinds == ["mcp_tool_use", "mcp_tool_result", "mcp_tool_use", "mcp_tool_result", "text"]
    assert message.content[-1].text == "results: 5|hi"

    failed = ask(setup, "call fail {}")
    result = failed.content[1]
    assert result.type == "mcp_tool_result" and result.is_error is True
    assert failed.content[-1].text.startswith("results: ")


def test_the_stream_relays_the_rounds_with_the_mcp_blocks_and_one_end(setup):
    before = len(setup.seen())
    with setup.client().beta.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "call twice"}],
        tools=TOOLSET,
        mcp_servers=setup.servers(),
        betas=["mcp-client-2025-11-20"],
        extra_headers=MCP,
    ) as stream:
        events = [event for event in stream]
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds.count("message_start") == 1
    assert kinds.count("message_delta") == 1 and kinds[-1] == "message_stop"
    # The provider's text came as two deltas, relayed as they were (the accumulator's own
    # "text" events follow each delta).
    text_deltas = [e for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert [d.delta.text for d in text_deltas] == ["Two c", "alls.", "result", "s: 5|hi"]
    assert [b.type for b in final.content] == [
        "text", "mcp_tool_use", "mcp_tool_result", "mcp_tool_use", "mcp_tool_result", "text"]
    assert [b.input for b in final.content if b.type == "mcp_tool_use"] == [{"a": 2, "b": 3}, {"text": "hi"}]
    assert final.content[-1].text == "results: 5|hi"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 6
    rounds = setup.seen()[before:]
    assert [r["body"]["stream"] for r in rounds] == [True, True]
    assert rounds[1]["body"]["messages"][1]["content"][2]["input"] == {"text": "hi"}


def test_a_slow_tool_times_out_without_holding_others(setup):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        slow = pool.submit(ask, setup, 'call slow {"seconds": 10}')
        time.sleep(0.3)
        quick = ask(setup, 'call add {"a": 1, "b": 1}')
        quick_took = time.monotonic() - started
        slow_message = slow.result(timeout=30)
        slow_took = time.monotonic() - started
    assert quick.content[-1].text == "results: 2"
    assert quick_took < CALL_TIMEOUT_SECS + 1, quick_took
    result = slow_message.content[1]
    assert result.is_error is True, slow_message
    assert slow_took < 10, slow_took


def test_ten_rounds_is_the_bound(setup):
    r = httpx.post(
        setup.gw.url + "/v1/messages",
        headers={**MCP, "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "loop"}],
              "tools": TOOLSET, "mcp_servers": setup.servers()},
        timeout=60,
    )
    assert r.status_code == 502, r.text
    assert r.headers["x-gw-error-code"] == "mcp_max_iterations"


def test_an_unreachable_or_refusing_server_is_mcp_connection_failed(setup):
    for servers in (setup.servers(token="wrong-token"),
                    setup.servers(url=f"http://127.0.0.1:{harness.free_port()}/mcp")):
        with pytest.raises(anthropic.APIStatusError) as err:
            ask(setup, 'call add {"a": 1, "b": 2}', mcp_servers=servers)
        assert err.value.status_code == 502
        assert err.value.response.headers["x-gw-error-code"] == "mcp_connection_failed"


def test_provider_errors_come_back_and_own_tools_end_the_loop(setup):
    with pytest.raises(anthropic.APIStatusError) as err:
        ask(setup, "fail upstream")
    assert err.value.status_code == 529
    assert err.value.body["error"]["type"] == "overloaded_error"

    mine = [{"name": "mine", "description": "the client's own", "input_schema": {"type": "object"}}]
    message = ask(setup, "call mine", tools=TOOLSET + mine)
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["tool_use"]
    assert message.content[0].name == "mine"


def test_without_the_header_the_request_goes_to_the_provider_as_is(setup):
    before = len(setup.seen())
    setup.client().beta.messages.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hello"}],
        tools=TOOLSET, mcp_servers=setup.servers(), betas=["mcp-client-2025-11-20"],
    )
    forwarded = setup.seen()[before:]
    assert len(forwarded) == 1
    assert forwarded[0]["body"]["mcp_servers"][0]["name"] == "tools"
    assert forwarded[0]["body"]["tools"] == TOOLSET
