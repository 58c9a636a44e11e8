"""The official OpenAI Python SDK's Conversations calls against tollgate (spec 2).

No engine here: the gateway answers `/v1/conversations` from its history store (the
default `memory` backend), so it runs without workers. Every `client.conversations.*` and
`client.conversations.items.*` call is made, sync and async, and the objects the SDK
builds are checked; errors come back as the SDK's exception types with their status.
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

import harness

GATEWAY_KEY = "tg-conversations-key"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = harness.gateway(
        tmp_path_factory.mktemp("conversations"), "tollgate-conversations", [],
        ["--api-key", GATEWAY_KEY],
    )
    harness.start_gateway(gw)
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture()
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)


def test_create_retrieve_update_delete(client):
    conv = client.conversations.create(metadata={"topic": "demo", "lang": "en"})
    assert isinstance(conv, openai.types.conversations.Conversation)
    assert conv.id.startswith("conv_")
    assert conv.object == "conversation"
    assert conv.created_at > 1_700_000_000
    assert conv.metadata == {"topic": "demo", "lang": "en"}

    got = client.conversations.retrieve(conv.id)
    assert got == conv

    updated = client.conversations.update(conv.id, metadata={"topic": None, "owner": "sdk"})
    assert updated.id == conv.id
    assert updated.metadata == {"lang": "en", "owner": "sdk"}
    assert client.conversations.retrieve(conv.id).metadata == updated.metadata

    deleted = client.conversations.delete(conv.id)
    assert deleted.id == conv.id
    assert deleted.object == "conversation.deleted"
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError) as err:
        client.conversations.retrieve(conv.id)
    assert err.value.status_code == 404
    assert err.value.response.headers["x-gw-error-code"] == "conversation_not_found"


def test_create_with_initial_items(client):
    conv = client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Hi, how can I help?"},
        ]
    )
    assert conv.metadata == {}
    page = client.conversations.items.list(conv.id, order="asc")
    assert [item.type for item in page.data] == ["message", "message"]
    user, assistant = page.data
    assert user.id.startswith("msg_")
    assert user.role == "user"
    assert user.status == "completed"
    assert user.content[0].type == "input_text"
    assert user.content[0].text == "Hello!"
    assert assistant.role == "assistant"
    assert assistant.content[0].type == "output_text"
    assert assistant.content[0].text == "Hi, how can I help?"


def test_items_create_list_retrieve_delete(client):
    conv = client.conversations.create()
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
            {"type": "message", "role": "user", "content": "two"},
            {"type": "message", "role": "user", "content": "three"},
        ],
    )
    assert isinstance(added, openai.types.conversations.ConversationItemList)
    assert added.object == "list"
    assert added.has_more is False
    assert len(added.data) == 3
    assert added.first_id == added.data[0].id
    assert added.last_id == added.data[2].id
    ids = [item.id for item in added.data]

    newest_first = client.conversations.items.list(conv.id)
    assert [item.id for item in newest_first.data] == ids[::-1]
    assert newest_first.has_more is False

    first = client.conversations.items.list(conv.id, limit=2, order="asc")
    assert [item.id for item in first.data] == ids[:2]
    assert first.has_more is True
    assert first.last_id == ids[1]
    rest = client.conversations.items.list(conv.id, limit=2, order="asc", after=first.last_id)
    assert [item.id for item in rest.data] == ids[2:]
    # The SDK's auto-pagination walks every page.
    assert [item.id for item in client.conversations.items.list(conv.id, limit=1, order="asc")] == ids

    item = client.conversations.items.retrieve(ids[1], conversation_id=conv.id)
    assert item.id == ids[1]
    assert item.type == "message"
    assert item.content[0].text == "two"

    after_delete = client.conversations.items.delete(ids[1], conversation_id=conv.id)
    assert isinstance(after_delete, openai.types.conversations.Conversation)
    assert after_delete.id == conv.id
    remaining = client.conversations.items.list(conv.id, order="asc")
    assert [i.id for i in remaining.data] == [ids[0], ids[2]]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(ids[1], conversation_id=conv.id)


def test_other_item_types_and_references(client):
    conv = client.conversations.create()
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        ],
    )
    assert [item.type for item in added.data] == ["reasoning", "function_call", "function_call_output"]
    assert added.data[0].id.startswith("rs_")
    assert added.data[1].name == "lookup"
    # The warnings of the stored-with-warning types ride along as an extra field.
    assert len(added.model_extra["warnings"]) == 2

    other = client.conversations.create()
    copied = client.conversations.items.create(
        other.id, items=[{"type": "item_reference", "id": added.data[1].id}]
    )
    assert copied.data[0].id == added.data[1].id
    assert copied.data[0].name == "lookup"


def test_errors_are_the_sdks_exceptions(client):
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as err:
        client.conversations.items.create(
            conv.id, items=[{"type": "message", "role": "user", "content": f"m{i}"} for i in range(21)]
        )
    # Conversation errors are `{"error": <message>}` (spec 2): the message is in the body.
    assert "20" in err.value.response.json()["error"]
    assert err.value.response.headers["x-gw-error-code"] == "400"
    with pytest.raises(openai.BadRequestError):
        client.conversations.items.create(conv.id, items=[{"type": "teleport"}])
    with pytest.raises(openai.BadRequestError):
        client.conversations.retrieve("not-a-conversation")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve("conv_0123456789abcdef")
    with pytest.raises(openai.BadRequestError):
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})

    client.conversations.items.create(conv.id, items=[{"id": "msg_once", "role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as err:
        client.conversations.items.create(conv.id, items=[{"id": "msg_once", "role": "user", "content": "y"}])
    assert err.value.code == "item_already_in_conversation"
    assert err.value.param == "items"
    assert err.value.type == "invalid_request_error"


def test_a_wrong_key_is_refused(gateway):
    bad = openai.OpenAI(base_url=gateway.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.conversations.create()
    r = httpx.post(gateway.url + "/v1/conversations", json={})
    assert r.status_code == 401
    assert r.content == b""


def test_async_client_makes_every_call(gateway):
    async def run():
        client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
        conv = await client.conversations.create(metadata={"a": "1"})
        assert (await client.conversations.retrieve(conv.id)).metadata == {"a": "1"}
        assert (await client.conversations.update(conv.id, metadata={"a": None})).metadata == {}
        added = await client.conversations.items.create(
            conv.id, items=[{"role": "user", "content": "async"}]
        )
        item_id = added.data[0].id
        page = await client.conversations.items.list(conv.id)
        assert [i.id for i in page.data] == [item_id]
        assert (await client.conversations.items.retrieve(item_id, conversation_id=conv.id)).id == item_id
        assert (await client.conversations.items.delete(item_id, conversation_id=conv.id)).id == conv.id
        assert (await client.conversations.delete(conv.id)).deleted is True
        await client.close()

    asyncio.run(run())
