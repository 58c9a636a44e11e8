"""/v1/responses run by the gateway on the gRPC path, driven by the official OpenAI SDK.

The engine is grpc-engine in mock mode (it echoes the prompt's first turn up to the model's
end-of-turn token) and the gateway tokenizes with SmolLM2's own tokenizer and ChatML
template. The instructions are the first turn, so the "model" answers `system\\n` followed by
them: instructions written as a Qwen-style tool call make the model call that tool. Checked
with the SDK: create / retrieve / input_items / delete / cancel, streaming, function tools
and their outputs in the next turn, previous_response_id, conversations, and `mcp` tools run
by the gateway against the official `mcp` SDK's Streamable HTTP server (successes, failures,
max_tool_calls, the cap of 10, an unreachable server).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import openai
import pytest
from tokenizers import Tokenizer

import harness

TOKEN = "mcp-test-token"


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.fixture(scope="module")
def setup():
    logdir = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-responses-"))
    tokenizer_dir = harness.env_path("TOLLGATE_REAL_ENGINE_TOKENIZER")
    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    assert eos is not None
    port = harness.free_port()
    engine = harness.Proc(
        "grpc-engine-mock",
        [
            harness.env_path("TOLLGATE_GRPC_ENGINE_BIN"),
            "--host", "127.0.0.1", "--port", str(port),
            "--model", harness.MODEL_ALIAS,
            "--eos-token-id", str(eos),
        ],
        logdir / "grpc-engine-mock.log",
        port,
    )
    mcp = harness.mcp_tools(logdir, TOKEN)
    gw = harness.gateway(
        logdir,
        "tollgate-responses",
        [f"grpc://127.0.0.1:{port}"],
        ["--model-path", tokenizer_dir, "--tool-call-parser", "qwen",
         "--mcp-call-timeout-secs", "2"],
    )
    try:
        mcp.start()
        harness.wait_log(mcp, ("LISTENING",), 60)
        harness.start_grpc_adapter(engine)
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 60)
        yield gw, mcp
    finally:
        gw.stop()
        engine.stop()
        mcp.stop()


def client(setup) -> openai.OpenAI:
    gw, _ = setup
    return openai.OpenAI(api_key="unused", base_url=f"{gw.url}/v1", timeout=60, max_retries=0)


def create(setup, **kwargs):
    kwargs.setdefault("model", harness.MODEL_ALIAS)
    kwargs.setdefault("max_output_tokens", 300)
    return client(setup).responses.create(**kwargs)


def test_create_retrieve_list_delete(setup):
    c = client(setup)
    first = create(setup, instructions="Be brief.", input="Hello")
    assert first.id.startswith("resp_")
    assert first.status == "completed"
    assert first.output_text == "system\nBe brief."
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    assert c.responses.retrieve(first.id).model_dump() == first.model_dump()
    items = c.responses.input_items.list(first.id)
    assert [i.type for i in items.data] == ["message"]
    assert items.data[0].content[0].text == "Hello"
    with pytest.raises(openai.BadRequestError) as refused:
        c.responses.cancel(first.id)
    assert refused.value.code == "response_already_completed"
    deleted = c.responses.delete(first.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as missing:
        create(setup, input="x", previous_response_id=first.id)
    assert missing.value.code == "previous_response_not_found"


def test_stream_events_and_final_response(setup):
    c = client(setup)
    with c.responses.stream(
        model=harness.MODEL_ALIAS, instructions="Streamed.", input="hi", max_output_tokens=300
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "system\nStreamed." == final.output_text
    assert c.responses.retrieve(final.id).output_text == text


def test_function_call_and_output_in_the_next_turn(setup):
    tools = [{"type": "function", "name": "get_weather", "description": "weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    first = create(setup, instructions=call("get_weather", '{"city": "Paris"}'), input="go",
                   tools=tools)
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert calls[0].arguments == '{"city": "Paris"}'
    second = create(setup, previous_response_id=first.id, tools=tools, instructions="Thanks.",
                    input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                            "output": "sunny"}])
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert second.output_text == "system\nThanks."


def test_conversation_collects_the_turns(setup):
    c = client(setup)
    conv = c.conversations.create(metadata={"topic": "demo"})
    create(setup, conversation=conv.id, instructions="One.", input="first")
    create(setup, conversation=conv.id, instructions="Two.", input="second")
    items = c.conversations.items.list(conv.id, order="asc")
    texts = [i.content[0].text for i in items.data if i.type == "message"]
    assert texts == ["first", "system\nOne.", "second", "system\nTwo."]
    with pytest.raises(openai.NotFoundError):
        create(setup, conversation="conv_doesnotexist", input="x")


def mcp_tool(setup, **extra):
    _, mcp = setup
    tool = {"type": "mcp", "server_label": "tools", "server_url": f"{mcp.url}/mcp",
            "authorization": TOKEN, "require_approval": "never"}
    tool.update(extra)
    return tool


def test_mcp_calls_run_by_the_gateway_up_to_max_tool_calls(setup):
    # The echo model calls `add` every turn: max_tool_calls ends the loop normally.
    response = create(setup, instructions=call("add", '{"a": 2, "b": 40}'), input="go",
                      tools=[mcp_tool(setup)], max_tool_calls=2)
    kinds = [i.type for i in response.output]
    assert kinds[0] == "mcp_list_tools"
    assert {t.name for t in response.output[0].tools} == {"add", "echo", "slow", "fail", "header"}
    mcp_calls = [i for i in response.output if i.type == "mcp_call"]
    assert len(mcp_calls) == 2
    assert all(i.name == "add" and i.output == "42" and i.server_label == "tools"
               for i in mcp_calls)
    assert response.status == "completed"


def test_mcp_internal_cap_fails_the_response(setup):
    response = create(setup, instructions=call("add", '{"a": 1, "b": 1}'), input="go",
                      tools=[mcp_tool(setup, allowed_tools=["add"])])
    assert [t.name for t in response.output[0].tools] == ["add"]
    assert len([i for i in response.output if i.type == "mcp_call"]) == 10
    assert response.status == "failed"
    assert response.error.code == "max_tool_calls_exceeded"


def test_a_failing_mcp_tool_is_a_failed_item_not_a_failed_response(setup):
    response = create(setup, instructions=call("fail", "{}"), input="go",
                      tools=[mcp_tool(setup)], max_tool_calls=1)
    failed = [i for i in response.output if i.type == "mcp_call"]
    assert len(failed) == 1 and failed[0].status == "failed"
    assert failed[0].error is not None
    assert response.status == "completed"


def test_mcp_stream_events(setup):
    c = client(setup)
    with c.responses.stream(model=harness.MODEL_ALIAS, instructions=call("echo", '{"text": "hi"}'),
                            input="go", max_output_tokens=300, tools=[mcp_tool(setup)],
                            max_tool_calls=1) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.mcp_list_tools.completed" in kinds
    assert "response.mcp_call.completed" in kinds
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [i.output for i in final.output if i.type == "mcp_call"] == ["hi"]


def test_a_server_offering_too_many_tools_is_named_as_the_cause(setup, tmp_path):
    """A server listing 130 tools was a 400 blaming the request's tools; it is the server's
    listing, said so in a 424, and allowed_tools is the way out."""
    crowded = harness.mcp_tools(tmp_path, TOKEN, extra_tools=130, name="mcp-crowded")
    crowded.start()
    try:
        harness.wait_log(crowded, ("LISTENING",), 60)
        with pytest.raises(openai.APIStatusError) as failed:
            create(setup, input="go", tools=[mcp_tool(setup, server_url=f"{crowded.url}/mcp")])
        assert failed.value.status_code == 424
        assert failed.value.code == "connect_mcp_server_failed"
        assert "more than 128 tools" in str(failed.value), failed.value
        assert "allowed_tools" in str(failed.value)
    finally:
        crowded.stop()


def test_a_server_listing_more_tools_than_the_gateway_reads_is_refused(setup, tmp_path):
    """A listing past 512 tools used to be cut silently there, so an allowed tool beyond it
    looked absent; now the listing is refused with its reason, even with allowed_tools."""
    crowded = harness.mcp_tools(tmp_path, TOKEN, extra_tools=600, name="mcp-huge")
    crowded.start()
    try:
        harness.wait_log(crowded, ("LISTENING",), 60)
        with pytest.raises(openai.APIStatusError) as failed:
            create(setup, input="go", tools=[
                mcp_tool(setup, server_url=f"{crowded.url}/mcp", allowed_tools=["add"])])
        assert failed.value.status_code == 424
        assert failed.value.code == "connect_mcp_server_failed"
        assert "more than 512 tools" in str(failed.value), failed.value
    finally:
        crowded.stop()


def test_an_unreachable_mcp_server_is_424(setup):
    with pytest.raises(openai.APIStatusError) as failed:
        create(setup, input="go", tools=[mcp_tool(setup, server_url="http://127.0.0.1:1/mcp")])
    assert failed.value.status_code == 424
    assert failed.value.code == "connect_mcp_server_failed"
