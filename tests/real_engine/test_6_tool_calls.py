"""Tool calls and reasoning on the gRPC path, read by the official openai SDK.

The engine is grpc-engine in mock mode (it echoes the prompt's token ids up to the model's
end-of-turn token), and the gateway tokenizes with SmolLM2's own tokenizer and ChatML
template, exported from the GGUF. So the "model" answers `system\n` followed by the system
message, and a system message written as a thinking model's output with a Qwen-style tool
call comes back as that output: the gateway must hand the SDK `reasoning_content`, the
content and a well-formed `tool_calls` entry, streamed and not, and the SDK's typed objects
must read them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import openai
import pytest
from tokenizers import Tokenizer

import harness

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]

# What the mock "model" says: reasoning (DeepSeek-R1 style: the output starts inside it),
# a sentence, then a call in Qwen's syntax.
SAID = (
    "I should look it up.</think>Let me check. "
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}\n</tool_call>'
)


@pytest.fixture(scope="module")
def gateway():
    logdir = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-tools-"))
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
    gw = harness.gateway(
        logdir,
        "tollgate-tools",
        [f"grpc://127.0.0.1:{port}"],
        [
            "--model-path", tokenizer_dir,
            "--tool-call-parser", "qwen",
            "--reasoning-parser", "deepseek_r1",
        ],
    )
    try:
        harness.start_grpc_adapter(engine)
        harness.start_gateway(gw)
        gw.wait_http("/readiness", 60)
        yield gw
    finally:
        gw.stop()
        engine.stop()
        print(f"\nreal-engine tool-call logs kept in {logdir}")


def client(gw) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=gw.url + "/v1", timeout=60, max_retries=0)


def messages() -> list[dict]:
    return [{"role": "system", "content": SAID}, {"role": "user", "content": "Weather?"}]


def test_sdk_reads_tool_calls_and_reasoning(gateway):
    resp = client(gateway).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=messages(), tools=TOOLS, max_tokens=200
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    message = choice.message
    assert message.content == "Let me check. "
    assert (message.model_extra or {}).get("reasoning_content") == "system\nI should look it up."
    (call,) = message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Zürich", "days": 2}

    # The call goes back as the SDK builds the next turn; the answer is a plain text then.
    follow = messages() + [
        message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    again = client(gateway).chat.completions.create(
        model=harness.MODEL_ALIAS, messages=follow, tools=TOOLS, tool_choice="none", max_tokens=200
    )
    assert again.choices[0].message.tool_calls is None
    assert "<tool_call>" in again.choices[0].message.content


def test_sdk_streams_tool_calls_in_pieces(gateway):
    stream = client(gateway).chat.completions.create(
        model=harness.MODEL_ALIAS,
        messages=messages(),
        tools=TOOLS,
        max_tokens=200,
        stream=True,
        stream_options={"include_usage": True},
    )
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for piece in delta.tool_calls or []:
            if piece.id is not None:
                assert piece.index not in calls, "a call is named once"
                calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
            calls[piece.index]["arguments"] += piece.function.arguments or ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert content == "Let me check. "
    assert reasoning == "system\nI should look it up."
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Zürich", "days": 2}
    assert usage is not None and usage.completion_tokens > 0
