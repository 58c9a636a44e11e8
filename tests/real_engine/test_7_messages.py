"""/v1/messages on the gRPC path, read by the official anthropic SDK.

The engine is grpc-engine in mock mode (it echoes the prompt's token ids up to the model's
end-of-turn token), and the gateway tokenizes with SmolLM2's own tokenizer and ChatML
template, exported from the GGUF. So the "model" answers `system\n` followed by the system
prompt, and a system prompt written as a thinking model's output with a Qwen-style tool call
comes back as that output: the gateway must answer it as Messages blocks (thinking, text,
tool_use), whole and as the event stream the SDK's `messages.stream` accumulates, and take
the call and its result back in the next turn.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anthropic
import pytest
from tokenizers import Tokenizer

import harness

TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
]

# What the mock "model" says: reasoning (DeepSeek-R1 style: the output starts inside it),
# a sentence, then a call in Qwen's syntax.
SAID = (
    "I should look it up.</think>Let me check. "
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}\n</tool_call>'
)
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def gateway():
    logdir = Path(tempfile.mkdtemp(prefix="tollgate-real-engine-messages-"))
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
        "tollgate-messages",
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
        print(f"\nreal-engine messages logs kept in {logdir}")


def client(gw) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="unused", base_url=gw.url, timeout=60, max_retries=0)


def ask() -> dict:
    return {
        "model": harness.MODEL_ALIAS,
        "max_tokens": 200,
        "system": SAID,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": TOOLS,
        "thinking": THINKING,
    }


def check_blocks(message) -> None:
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.stop_reason == "tool_use"
    assert message.stop_sequence is None
    thinking, text, call = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "system\nI should look it up."
    assert thinking.signature == ""
    assert text.type == "text" and text.text == "Let me check. "
    assert call.type == "tool_use"
    assert call.id.startswith("toolu_")
    assert call.name == "get_weather"
    assert call.input == {"city": "Zürich", "days": 2}
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert message.usage.cache_creation_input_tokens == 0
    assert message.usage.cache_read_input_tokens == 0


def test_sdk_create_reads_blocks_and_takes_the_tool_result_back(gateway):
    message = client(gateway).messages.create(**ask())
    check_blocks(message)

    # The call goes back as the SDK's blocks, with its result in the next user turn.
    call = message.content[2]
    follow = ask()
    follow["messages"] = follow["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    follow["tool_choice"] = {"type": "none"}
    follow["thinking"] = {"type": "disabled"}
    again = client(gateway).messages.create(**follow)
    assert again.stop_reason == "end_turn"
    assert [b.type for b in again.content] == ["text"]
    assert "<tool_call>" in again.content[0].text
    # The longer conversation reached the template.
    assert again.usage.input_tokens > message.usage.input_tokens


def test_sdk_stream_accumulates_the_same_message(gateway):
    seen = []
    with client(gateway).messages.stream(**ask()) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_message()
    check_blocks(final)
    assert seen[0] == "message_start"
    assert seen[-1] == "message_stop"
    assert "ping" not in seen


def test_stop_sequences_end_the_message(gateway):
    params = ask()
    params["thinking"] = {"type": "disabled"}
    params["stop_sequences"] = ["look"]
    message = client(gateway).messages.create(**params)
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "look"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "system\nI should "
