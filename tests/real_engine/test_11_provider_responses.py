"""/v1/responses run by the gateway on an external provider, driven by the official OpenAI SDK.

The provider is tests/real_engine/tool_model.py's OpenAI surface (a stand-in that answers like
a model calling the tools its prompt names), registered at run time with `POST /workers
{"runtime_type": "external", "api_key": ...}`; the MCP server is the official `mcp` SDK's
Streamable HTTP server (tests/real_engine/mcp_tools_server.py). The gateway keeps the
responses itself and asks the provider one model turn at a time, so checked here are both
what the SDK gets and what the provider received: the whole context as input items (the
chain of previous_response_id, a conversation's items, the MCP calls made so far as
function_call + function_call_output pairs, no ids), store false, never
previous_response_id or conversation, the worker's key instead of the client's, MCP tools
offered as function tools and run by the gateway (streamed and not, usage summed over the
turns), the client's own function tools ending the response, an incomplete answer, the
provider's error relayed as is and an unreachable MCP server as 424.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest

import harness

TOKEN = "mcp-test-token"
MODEL = "tool-model"
ADMIN_KEY = "tg-provider-responses-admin-key"
PROVIDER_KEY = "sk-provider"
CLIENT_KEY = "sk-client"
MINE = {"type": "function", "name": "mine",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}


class Setup:
    def __init__(self, logdir: Path):
        self.mcp = harness.mcp_tools(logdir, TOKEN)
        self.model = harness.tool_model(logdir)
        # web_search_preview runs through the MCP server's `echo` tool.
        config = logdir / "mcp-config.json"
        config.write_text(json.dumps({"builtins": [
            {"type": "web_search_preview", "url": f"{self.mcp.url}/mcp", "tool": "echo",
             "label": "search", "authorization": TOKEN}]}))
        # No worker at startup: the provider is registered over the control plane.
        self.gw = harness.gateway(
            logdir,
            "tollgate-provider-responses",
            [],
            ["--control-plane-api-keys", f"ops:Operations:admin:{ADMIN_KEY}",
             "--mcp-call-timeout-secs", "2", "--mcp-loop-timeout-secs", "5",
             "--mcp-config-path", str(config)],
        )

    def start(self) -> "Setup":
        for proc in (self.mcp, self.model):
            proc.start()
            harness.wait_log(proc, ("LISTENING",), 60)
        harness.start_gateway(self.gw)
        with self.admin() as c:
            r = c.post("/workers", json={"url": self.model.url, "runtime_type": "external",
                                         "api_key": PROVIDER_KEY})
            assert r.status_code == 202, f"POST /workers: {r.status_code} {r.text}"
        self.wait_ready()
        self.gw.wait_http("/readiness", 30)
        return self

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.gw.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                            timeout=10)

    def wait_ready(self, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            with self.admin() as c:
                r = c.get("/workers")
            if r.status_code == 200:
                body = r.json()
                workers = body["workers"] if isinstance(body, dict) else body
                last = workers
                for w in workers:
                    if w.get("url", "").rstrip("/") == self.model.url and w.get("status") == "ready":
                        return w
            else:
                last = f"{r.status_code} {r.text[:200]}"
            time.sleep(0.1)
        raise AssertionError(f"the provider never became a ready worker ({last}):\n{self.gw.log_tail()}")

    def stop(self) -> None:
        for proc in (self.gw, self.model, self.mcp):
            proc.stop()

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(api_key=CLIENT_KEY, base_url=f"{self.gw.url}/v1", timeout=60,
                             max_retries=0)

    def seen(self) -> list[dict]:
        """The stand-in's kept requests to /v1/responses."""
        kept = httpx.get(self.model.url + "/requests", timeout=5).json()
        return [r for r in kept if r["path"] == "/v1/responses"]

    def mcp_tool(self, url: str | None = None) -> dict:
        return {"type": "mcp", "server_label": "tools", "server_url": url or f"{self.mcp.url}/mcp",
                "authorization": TOKEN, "require_approval": "never"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("provider-responses"))
    try:
        yield s.start()
    finally:
        s.stop()


def create(setup: Setup, **kwargs):
    kwargs.setdefault("model", MODEL)
    return setup.client().responses.create(**kwargs)


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content)


def summary(items: list[dict]) -> list[tuple]:
    """(type, role or name, text or call_id) of each upstream input item."""
    out = []
    for i in items:
        if i["type"] == "message":
            out.append(("message", i["role"], text_of(i["content"])))
        else:
            out.append((i["type"], i.get("name"), i["call_id"]))
    return out


def assert_no_ids(items: list[dict]) -> None:
    assert all("id" not in i for i in items), items
    assert all(i["type"] in ("message", "function_call", "function_call_output") for i in items), items


def test_create_is_the_gateways_response_with_the_providers_answer(setup):
    before = len(setup.seen())
    response = create(setup, input="hello")
    assert response.output_text == "no tools needed"
    assert response.id.startswith("resp_") and not response.id.startswith("resp_stand_in")
    assert response.status == "completed"
    assert response.model == MODEL
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 3)

    sent = setup.seen()[before:]
    assert len(sent) == 1
    body, headers = sent[0]["body"], sent[0]["headers"]
    assert body["model"] == MODEL
    assert body["store"] is False
    assert "previous_response_id" not in body and "conversation" not in body
    assert body.get("stream") in (None, False)
    assert summary(body["input"]) == [("message", "user", "hello")]
    assert_no_ids(body["input"])
    assert headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert not any(CLIENT_KEY in v for v in headers.values()), headers

    c = setup.client()
    stored = c.responses.retrieve(response.id)
    assert stored.id == response.id and stored.status == "completed"
    assert [i.model_dump() for i in stored.output] == [i.model_dump() for i in response.output]
    items = c.responses.input_items.list(response.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]
    assert items.data[0].content[0].text == "hello"


def test_previous_response_id_sends_the_chain_as_items(setup):
    first = create(setup, input="first turn")
    before = len(setup.seen())
    second = create(setup, input="second turn", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.output_text == "no tools needed"
    (sent,) = setup.seen()[before:]
    items = sent["body"]["input"]
    assert summary(items) == [("message", "user", "first turn"),
                              ("message", "assistant", "no tools needed"),
                              ("message", "user", "second turn")]
    assert_no_ids(items)
    assert "previous_response_id" not in sent["body"] and sent["body"]["store"] is False


def test_store_false_is_not_kept(setup):
    response = create(setup, input="forget me", store=False)
    assert response.output_text == "no tools needed"
    with pytest.raises(openai.NotFoundError):
        setup.client().responses.retrieve(response.id)


def test_stream_is_the_responses_event_stream(setup):
    c = setup.client()
    before = len(setup.seen())
    events = list(c.responses.create(model=MODEL, input="hello", stream=True))
    numbers = [e.sequence_number for e in events]
    assert numbers[0] == 0 and all(a < b for a, b in zip(numbers, numbers[1:])), numbers
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    added = sorted(e.output_index for e in events if e.type == "response.output_item.added")
    done = sorted(e.output_index for e in events if e.type == "response.output_item.done")
    assert added and added == done, kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == "no tools needed" == final.output_text
    assert final.status == "completed" and not final.id.startswith("resp_stand_in")
    assert c.responses.retrieve(final.id).output_text == "no tools needed"
    (sent,) = setup.seen()[before:]
    assert sent["body"]["stream"] is True and sent["body"]["store"] is False


def test_the_clients_function_tool_ends_the_response_and_its_output_comes_back(setup):
    before = len(setup.seen())
    first = create(setup, input="call mine", tools=[MINE])
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "mine", first.output
    assert json.loads(calls[0].arguments) == {"x": 1}
    (sent,) = setup.seen()[before:]
    assert MINE in sent["body"]["tools"]

    before = len(setup.seen())
    second = create(setup, previous_response_id=first.id, tools=[MINE],
                    input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                            "output": "42"}])
    assert second.output_text == "results: 42"
    (sent,) = setup.seen()[before:]
    items = sent["body"]["input"]
    assert_no_ids(items)
    call, output = items[-2:]
    assert call["type"] == "function_call" and call["call_id"] == calls[0].call_id
    assert call["name"] == "mine" and json.loads(call["arguments"]) == {"x": 1}
    assert output == {"type": "function_call_output", "call_id": calls[0].call_id, "output": "42"}


def mcp_add(setup: Setup):
    """One non-streamed MCP response calling add(2, 3), and the provider turns it took."""
    before = len(setup.seen())
    response = create(setup, input='call add {"a": 2, "b": 3}', tools=[setup.mcp_tool()])
    return response, setup.seen()[before:]


def test_an_mcp_tool_is_run_by_the_gateway_between_two_turns(setup):
    response, sent = mcp_add(setup)
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    listed, mcp_call, _ = response.output
    assert {t.name for t in listed.tools} == {"add", "echo", "slow", "fail", "header"}
    assert mcp_call.status == "completed" and mcp_call.name == "add"
    assert mcp_call.server_label == "tools" and "5" in mcp_call.output
    assert json.loads(mcp_call.arguments) == {"a": 2, "b": 3}
    assert response.output_text == "results: 5"
    assert response.status == "completed"

    assert len(sent) == 2
    first, second = (r["body"] for r in sent)
    offered = {t["name"]: t for t in first["tools"]}
    assert all(t["type"] == "function" for t in first["tools"]), first["tools"]
    assert {"add", "echo", "slow", "fail", "header"} <= set(offered)
    assert offered["add"]["description"] == "Adds two integers."
    assert offered["add"]["parameters"]["properties"].keys() >= {"a", "b"}
    items = second["input"]
    assert_no_ids(items)
    call, output = items[-2:]
    assert call["type"] == "function_call" and call["name"] == "add"
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert output["type"] == "function_call_output" and output["call_id"] == call["call_id"]
    assert "5" in output["output"]
    assert [i["type"] for i in items[:-2]] == ["message"]


def test_usage_is_summed_over_the_mcp_turns(setup):
    response, _ = mcp_add(setup)
    # 10 + 3 on the first turn, 11 + 3 on the second (one function_call_output in its input).
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 6)


def test_an_mcp_tool_streamed(setup):
    before = len(setup.seen())
    events = list(setup.client().responses.create(
        model=MODEL, input='call add {"a": 2, "b": 3}', tools=[setup.mcp_tool()], stream=True))
    kinds = [e.type for e in events]
    assert "response.mcp_call.in_progress" in kinds and "response.mcp_call.completed" in kinds
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done")
    numbers = [e.sequence_number for e in events]
    assert numbers[0] == 0 and all(a < b for a, b in zip(numbers, numbers[1:])), numbers
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    final = events[-1].response
    assert final.output_text == "results: 5"
    assert [i.type for i in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    sent = setup.seen()[before:]
    assert [r["body"]["stream"] for r in sent] == [True, True]


def test_an_incomplete_answer_is_incomplete(setup):
    response = create(setup, input="say long")
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "partial"


def test_a_provider_error_is_relayed_as_is(setup):
    with pytest.raises(openai.InternalServerError) as err:
        create(setup, input="fail upstream")
    assert err.value.status_code == 500
    assert err.value.response.json() == {"error": {
        "message": "The server is overloaded", "type": "server_error", "param": None,
        "code": "overloaded"}}


def test_an_unreachable_mcp_server_is_424(setup):
    before = len(setup.seen())
    unreachable = f"http://127.0.0.1:{harness.free_port()}/mcp"
    with pytest.raises(openai.APIStatusError) as err:
        create(setup, input='call add {"a": 1, "b": 2}', tools=[setup.mcp_tool(unreachable)])
    assert err.value.status_code == 424
    assert setup.seen()[before:] == [], "no model turn without the server's tools"


def test_a_conversation_collects_the_turns_and_sends_them_upstream(setup):
    c = setup.client()
    conv = c.conversations.create()
    before = len(setup.seen())
    create(setup, input="first", conversation=conv.id)
    create(setup, input="second", conversation=conv.id)
    items = c.conversations.items.list(conv.id, order="asc")
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [
        ("message", "user", "first"), ("message", "assistant", "no tools needed"),
        ("message", "user", "second"), ("message", "assistant", "no tools needed")]
    first, second = setup.seen()[before:]
    assert len(first["body"]["input"]) == 1
    assert summary(second["body"]["input"]) == [("message", "user", "first"),
                                                ("message", "assistant", "no tools needed"),
                                                ("message", "user", "second")]
    assert_no_ids(second["body"]["input"])
    assert all("conversation" not in r["body"] for r in (first, second))


def approval_tool(setup: Setup, policy) -> dict:
    return dict(setup.mcp_tool(), require_approval=policy)


def test_require_approval_holds_the_call_until_the_client_approves(setup):
    tools = [approval_tool(setup, "always")]
    before = len(setup.seen())
    asked = create(setup, input='call add {"a": 2, "b": 3}', tools=tools)
    assert [i.type for i in asked.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = asked.output[1]
    assert request.name == "add" and request.server_label == "tools"
    assert json.loads(request.arguments) == {"a": 2, "b": 3}
    assert asked.status == "completed"
    assert len(setup.seen()[before:]) == 1, "no second turn before the approval"

    approved = create(setup, previous_response_id=asked.id, tools=tools, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    kinds = [i.type for i in approved.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"], kinds
    assert approved.output[1].status == "completed" and "5" in approved.output[1].output
    assert approved.output_text == "results: 5"
    # The provider saw the call and its output, not the approval items.
    items = setup.seen()[-1]["body"]["input"]
    assert_no_ids(items)
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output"]
    assert "5" in items[-1]["output"]


def test_a_refused_approval_runs_nothing(setup):
    tools = [approval_tool(setup, "always")]
    asked = create(setup, input='call add {"a": 1, "b": 1}', tools=tools)
    request = asked.output[-1]
    refused = create(setup, previous_response_id=asked.id, tools=tools, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False}])
    assert "mcp_call" not in [i.type for i in refused.output]
    # An answer to no request of the chain is refused before the provider is asked.
    before = len(setup.seen())
    with pytest.raises(openai.BadRequestError):
        create(setup, previous_response_id=asked.id, tools=tools, input=[
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_none", "approve": True}])
    assert setup.seen()[before:] == []


def test_an_approval_filter_names_the_tools_that_wait(setup):
    waits_for_echo = [approval_tool(setup, {"always": {"tool_names": ["echo"]}})]
    response = create(setup, input='call add {"a": 2, "b": 2}', tools=waits_for_echo)
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    all_but_echo = [approval_tool(setup, {"never": {"tool_names": ["echo"]}})]
    response = create(setup, input='call add {"a": 2, "b": 2}', tools=all_but_echo)
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_approval_request"]


def test_a_servers_headers_go_with_its_calls(setup):
    tool = dict(setup.mcp_tool(), headers={"X-Tenant": "acme"})
    response = create(setup, input='call header {"name": "x-tenant"}', tools=[tool])
    mcp_call = response.output[1]
    assert mcp_call.type == "mcp_call" and mcp_call.output == "acme", response.output
    # The headers are the MCP server's: the provider never sees them.
    assert "x-tenant" not in setup.seen()[-1]["headers"]


def test_a_built_in_tool_runs_through_its_configured_mcp_server(setup):
    before = len(setup.seen())
    search = [{"type": "web_search_preview"}]
    response = create(setup, input='call web_search_preview {"text": "rust news"}', tools=search)
    assert [i.type for i in response.output] == ["web_search_call", "message"], response.output
    call = response.output[0]
    assert call.status == "completed" and call.id.startswith("ws_")
    assert "rust news" in call.action.query
    assert response.output_text == "results: rust news"
    first, second = (r["body"] for r in setup.seen()[before:])
    # The provider is offered the built-in as a function, never the built-in itself.
    assert [t["type"] for t in first["tools"]] == ["function"]
    assert first["tools"][0]["name"] == "web_search_preview"
    assert [i["type"] for i in second["input"][-2:]] == ["function_call", "function_call_output"]
    assert second["input"][-1]["output"] == "rust news"

    events = list(setup.client().responses.create(
        model=MODEL, input='call web_search_preview {"text": "streamed"}', tools=search,
        stream=True))
    kinds = [e.type for e in events]
    at = kinds.index("response.web_search_call.in_progress")
    assert kinds[at:at + 3] == ["response.web_search_call.in_progress",
                                "response.web_search_call.searching",
                                "response.web_search_call.completed"], kinds
    assert events[-1].response.output_text == "results: streamed"

    # A built-in without a configured server goes to the provider as it is.
    before = len(setup.seen())
    create(setup, input="hello", tools=[{"type": "code_interpreter", "container": {"type": "auto"}}])
    assert setup.seen()[before]["body"]["tools"] == [
        {"type": "code_interpreter", "container": {"type": "auto"}}]


def test_a_model_that_keeps_calling_a_hanging_tool_is_cut_off_by_the_loop_timeout(setup):
    """Ten calls of 2 s each (--mcp-call-timeout-secs) took 20 s and more; the loop's 5 s
    (--mcp-loop-timeout-secs) end the calls after it at once."""
    started = time.monotonic()
    response = create(setup, input="loop slow", tools=[setup.mcp_tool()])
    took = time.monotonic() - started
    calls = [o for o in response.output if o.type == "mcp_call"]
    assert len(calls) >= 3, response.output
    assert all(c.status == "failed" for c in calls), calls
    assert "spent" in str(calls[-1].error), calls[-1]
    assert took < 12, took


def test_a_hanging_tool_is_a_failed_call_within_the_call_timeout(setup):
    started = time.monotonic()
    response = create(setup, input='call slow {"seconds": 10}', tools=[setup.mcp_tool()])
    took = time.monotonic() - started
    mcp_call = response.output[1]
    assert mcp_call.type == "mcp_call" and mcp_call.status == "failed", response.output
    assert mcp_call.error is not None
    # The model was told and answered; the response itself did not fail.
    assert response.status == "completed"
    assert response.output_text.startswith("results: ")
    assert took < 8, took
