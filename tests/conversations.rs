//! The Conversations API (`/v1/conversations`, spec 2), black box: the real binary with
//! the default `memory` history backend and no worker (the store needs none). Every route,
//! every validation rule and error row: `{"error": <message>}` bodies with their status and
//! `X-GW-Error-Code`, the structured `item_already_in_conversation`, malformed ids 400
//! before the store, unknown ones 404, the 20-item and 16-property caps, null deletes,
//! paging, `item_reference`, soft deletes, and data-plane authentication with tenants kept
//! apart (a foreign id looks unknown).

use crate::common;

use common::{call_with_key as call, client, gateway, send, Proc, Reply};
use serde_json::{json, Value};

const TENANT_A: &str = "acme:tk-acme-conv-1";
const TENANT_B: &str = "globex:tk-globex-conv-2";
const KEY_A: &str = "tk-acme-conv-1";
const KEY_B: &str = "tk-globex-conv-2";

/// A gateway with the given flags and no worker.
fn start(flags: &[&str]) -> Proc {
    gateway(flags)
}

async fn raw(gw: &Proc, method: &str, path: &str, body: &str) -> Reply {
    let url = format!("{}{path}", gw.url());
    let headers = [("content-type", "application/json")];
    send(&client(false), method, &url, &headers, body.to_owned()).await
}

async fn post(gw: &Proc, path: &str, body: Value) -> Reply {
    call(gw, "POST", path, Some(body), None).await
}

async fn get(gw: &Proc, path: &str) -> Reply {
    call(gw, "GET", path, None, None).await
}

async fn delete(gw: &Proc, path: &str) -> Reply {
    call(gw, "DELETE", path, None, None).await
}

/// `{"error": <message>}` with `status` and `code` in `X-GW-Error-Code`; the message.
fn assert_plain_error(reply: &Reply, status: u16, code: &str) -> String {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.headers["x-gw-error-code"], code, "{}", reply.text());
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body = reply.json();
    let top = body.as_object().expect("object");
    assert_eq!(top.len(), 1, "{body}");
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("error is a string: {body}"))
        .to_owned()
}

fn assert_already_in(reply: &Reply) {
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(
        reply.headers["x-gw-error-code"],
        "item_already_in_conversation"
    );
    assert_eq!(
        reply.json(),
        json!({"error": {"message": "Item already in conversation",
            "type": "invalid_request_error", "param": "items",
            "code": "item_already_in_conversation"}})
    );
}

async fn new_conversation(gw: &Proc, body: Value) -> Value {
    let reply = post(gw, "/v1/conversations", body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": text})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_created_read_updated_and_deleted() {
    let gw = start(&[]);
    let conv = new_conversation(&gw, json!({"metadata": {"topic": "demo"}})).await;
    let id = conv["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("conv_") && id.len() > 5, "{conv}");
    assert_eq!(conv["object"], "conversation");
    assert!(conv["created_at"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(conv["metadata"], json!({"topic": "demo"}));
    assert_eq!(conv.as_object().unwrap().len(), 4, "{conv}");

    // No body at all, and `{}`: empty metadata.
    let bare = raw(&gw, "POST", "/v1/conversations", "").await;
    assert_eq!(bare.status, 200, "{}", bare.text());
    assert_eq!(bare.json()["metadata"], json!({}));
    assert_eq!(
        new_conversation(&gw, json!({})).await["metadata"],
        json!({})
    );

    let path = format!("/v1/conversations/{id}");
    assert_eq!(get(&gw, &path).await.json(), conv);

    // Merge: a string sets, a null deletes.
    let updated = post(
        &gw,
        &path,
        json!({"metadata": {"topic": null, "owner": "me"}}),
    )
    .await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    assert_eq!(updated.json()["metadata"], json!({"owner": "me"}));
    let updated = post(&gw, &path, json!({"metadata": {"lang": "en"}})).await;
    assert_eq!(
        updated.json()["metadata"],
        json!({"owner": "me", "lang": "en"})
    );
    assert_eq!(
        get(&gw, &path).await.json()["metadata"],
        json!({"owner": "me", "lang": "en"})
    );

    let deleted = delete(&gw, &path).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "conversation.deleted", "deleted": true})
    );
    // Soft-deleted: gone for every route.
    for reply in [
        get(&gw, &path).await,
        delete(&gw, &path).await,
        post(&gw, &path, json!({"metadata": {}})).await,
        get(&gw, &format!("{path}/items")).await,
        post(&gw, &format!("{path}/items"), json!({"items": [user("x")]})).await,
    ] {
        assert_eq!(
            assert_plain_error(&reply, 404, "conversation_not_found"),
            "Conversation not found"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_ids_are_400_and_unknown_ones_404() {
    let gw = start(&[]);
    for bad in ["abc", "resp_123", "conv_", "conv_a.b", "conv_a%20b"] {
        for (method, path) in [
            ("GET", format!("/v1/conversations/{bad}")),
            ("POST", format!("/v1/conversations/{bad}")),
            ("DELETE", format!("/v1/conversations/{bad}")),
            ("GET", format!("/v1/conversations/{bad}/items")),
            ("POST", format!("/v1/conversations/{bad}/items")),
            ("GET", format!("/v1/conversations/{bad}/items/msg_1")),
            ("DELETE", format!("/v1/conversations/{bad}/items/msg_1")),
        ] {
            let reply = call(&gw, method, &path, Some(json!({"metadata": {}})), None).await;
            let message = assert_plain_error(&reply, 400, "400");
            assert!(
                message.contains("conversation ID"),
                "{method} {path}: {message}"
            );
        }
    }
    let long = format!("/v1/conversations/conv_{}", "a".repeat(200));
    assert_plain_error(&get(&gw, &long).await, 400, "400");

    let unknown = "/v1/conversations/conv_0123456789abcdef";
    assert_plain_error(&get(&gw, unknown).await, 404, "conversation_not_found");
    assert_plain_error(&delete(&gw, unknown).await, 404, "conversation_not_found");
    assert_plain_error(
        &post(&gw, unknown, json!({"metadata": {"a": "b"}})).await,
        404,
        "conversation_not_found",
    );
    let items = format!("{unknown}/items");
    assert_plain_error(&get(&gw, &items).await, 404, "conversation_not_found");
    assert_plain_error(
        &post(&gw, &items, json!({"items": [user("x")]})).await,
        404,
        "conversation_not_found",
    );
    assert_plain_error(
        &get(&gw, &format!("{items}/msg_1")).await,
        404,
        "conversation_not_found",
    );
    assert_plain_error(
        &delete(&gw, &format!("{items}/msg_1")).await,
        404,
        "conversation_not_found",
    );

    // A malformed item id in a known conversation.
    let id = new_conversation(&gw, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = get(&gw, &format!("/v1/conversations/{id}/items/a.b")).await;
    assert_plain_error(&reply, 400, "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_and_metadata_are_validated() {
    let gw = start(&[]);
    // Not JSON, not an object: json_parse_error.
    for body in ["{", "[]", "\"x\"", "{\"metadata\": 1"] {
        let reply = raw(&gw, "POST", "/v1/conversations", body).await;
        assert_plain_error(&reply, 400, "json_parse_error");
    }
    let reply = post(&gw, "/v1/conversations", json!({"items": "x"})).await;
    assert_plain_error(&reply, 400, "json_parse_error");

    let sixteen: serde_json::Map<String, Value> =
        (0..16).map(|i| (format!("k{i}"), json!("v"))).collect();
    let conv = new_conversation(&gw, json!({"metadata": sixteen})).await;
    let mut seventeen = sixteen.clone();
    seventeen.insert("k16".into(), json!("v"));
    let message = assert_plain_error(
        &post(&gw, "/v1/conversations", json!({"metadata": seventeen})).await,
        400,
        "400",
    );
    assert!(message.contains("16"), "{message}");
    for metadata in [
        json!({"a": 1}),
        json!({"a": null}),
        json!({ "k".repeat(65): "v" }),
        json!({ "k": "v".repeat(513) }),
    ] {
        let reply = post(&gw, "/v1/conversations", json!({ "metadata": metadata })).await;
        assert_plain_error(&reply, 400, "400");
    }

    // Update: the 17th key is refused, a swap (one null, one new) is not.
    let path = format!("/v1/conversations/{}", conv["id"].as_str().unwrap());
    let reply = post(&gw, &path, json!({"metadata": {"k16": "v"}})).await;
    assert!(assert_plain_error(&reply, 400, "400").contains("16"));
    let reply = post(&gw, &path, json!({"metadata": {"k0": null, "k16": "v"}})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["metadata"].as_object().unwrap().len(), 16);
    assert!(reply.json()["metadata"].get("k0").is_none());
    assert_plain_error(&post(&gw, &path, json!({})).await, 400, "400");
    assert_plain_error(
        &post(&gw, &path, json!({"metadata": {"a": 1}})).await,
        400,
        "400",
    );
    assert_plain_error(
        &raw(&gw, "POST", &path, "nope").await,
        400,
        "json_parse_error",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_are_checked_typed_and_stored() {
    let gw = start(&[]);
    let id = new_conversation(&gw, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let items = format!("/v1/conversations/{id}/items");

    // 21 items: 400, nothing stored.
    let many: Vec<Value> = (0..21).map(|i| user(&format!("m{i}"))).collect();
    let message = assert_plain_error(
        &post(&gw, &items, json!({ "items": many })).await,
        400,
        "400",
    );
    assert!(message.contains("20"), "{message}");
    assert_eq!(get(&gw, &items).await.json()["data"], json!([]));
    // Twenty are fine.
    let twenty: Vec<Value> = (0..20).map(|i| user(&format!("m{i}"))).collect();
    let added = post(&gw, &items, json!({ "items": twenty })).await;
    assert_eq!(added.status, 200, "{}", added.text());
    assert_eq!(added.json()["data"].as_array().unwrap().len(), 20);

    // Unknown type, message rules, empty and missing lists.
    for (body, what) in [
        (json!({"items": [{"type": "teleport"}]}), "teleport"),
        (json!({"items": [{"content": "no role"}]}), "role"),
        (json!({"items": [{"role": "user"}]}), "content"),
        (
            json!({"items": [{"role": "user", "content": 3}]}),
            "content",
        ),
        (json!({"items": []}), "items"),
        (json!({}), "items"),
        (json!({"items": [{"type": "item_reference"}]}), "id"),
        (
            json!({"items": [{"id": "bad id", "role": "user", "content": "x"}]}),
            "id",
        ),
    ] {
        let message = assert_plain_error(&post(&gw, &items, body.clone()).await, 400, "400");
        assert!(message.contains(what), "{body}: {message}");
    }

    // An item without type is a message; its string content becomes an input_text part.
    let added = post(
        &gw,
        &items,
        json!({"items": [{"role": "user", "content": "hello"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "mcp_call", "server_label": "s", "name": "t", "arguments": "{}", "output": "ok"},
            {"type": "mcp_list_tools", "server_label": "s", "tools": []}]}),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.text());
    let list = added.json();
    assert!(list.get("warnings").is_none(), "{list}");
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], false);
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 5);
    assert_eq!(list["first_id"], data[0]["id"]);
    assert_eq!(list["last_id"], data[4]["id"]);
    let message = &data[0];
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "user");
    assert_eq!(message["status"], "completed");
    assert_eq!(
        message["content"],
        json!([{"type": "input_text", "text": "hello"}])
    );
    assert!(message["created_at"].as_i64().unwrap() > 1_700_000_000);
    assert!(data[2]["id"].as_str().unwrap().starts_with("rs_"));

    // Retrieve one.
    let one = get(&gw, &format!("{items}/{}", message["id"].as_str().unwrap())).await;
    assert_eq!(one.status, 200);
    assert_eq!(&one.json(), message);

    // Types stored with a warning.
    let warned = post(
        &gw,
        &items,
        json!({"items": [{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"}]}),
    )
    .await;
    assert_eq!(warned.status, 200, "{}", warned.text());
    let warned = warned.json();
    assert_eq!(warned["data"].as_array().unwrap().len(), 2);
    assert_eq!(warned["data"][0]["name"], "f");
    let warnings = warned["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{warned}");
    assert!(warnings[0].as_str().unwrap().contains("function_call"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_kept_once_and_references_copy_items() {
    let gw = start(&[]);
    let first = new_conversation(
        &gw,
        json!({"items": [
            {"id": "msg_fixed", "type": "message", "role": "user", "content": "original"}
        ]}),
    )
    .await;
    let first_items = format!("/v1/conversations/{}/items", first["id"].as_str().unwrap());
    let listed = get(&gw, &first_items).await.json();
    assert_eq!(listed["data"][0]["id"], "msg_fixed");

    // The same id again, or a reference to an item already there: refused, nothing added.
    assert_already_in(
        &post(
            &gw,
            &first_items,
            json!({"items": [
        {"id": "msg_fixed", "role": "user", "content": "again"}]}),
        )
        .await,
    );
    assert_already_in(
        &post(
            &gw,
            &first_items,
            json!({"items": [
        {"type": "item_reference", "id": "msg_fixed"}]}),
        )
        .await,
    );
    // Twice in one request.
    assert_already_in(
        &post(
            &gw,
            &first_items,
            json!({"items": [
        {"id": "msg_twice", "role": "user", "content": "a"},
        {"id": "msg_twice", "role": "user", "content": "b"}]}),
        )
        .await,
    );
    assert_eq!(
        get(&gw, &first_items).await.json()["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Also in the initial items of a new conversation.
    assert_already_in(
        &post(
            &gw,
            "/v1/conversations",
            json!({"items": [
        {"id": "msg_x", "role": "user", "content": "a"},
        {"id": "msg_x", "role": "user", "content": "b"}]}),
        )
        .await,
    );

    // A reference brings the stored item into another conversation, content and all.
    let second = new_conversation(&gw, json!({})).await;
    let second_items = format!("/v1/conversations/{}/items", second["id"].as_str().unwrap());
    let copied = post(
        &gw,
        &second_items,
        json!({"items": [{"type": "item_reference", "id": "msg_fixed"}]}),
    )
    .await;
    assert_eq!(copied.status, 200, "{}", copied.text());
    assert_eq!(copied.json()["data"][0], listed["data"][0]);
    // An unknown reference: 404, the item is not found.
    let missing = post(
        &gw,
        &second_items,
        json!({"items": [{"type": "item_reference", "id": "msg_nowhere"}]}),
    )
    .await;
    assert!(assert_plain_error(&missing, 404, "not_found").contains("msg_nowhere"));
    // Initial items over the cap.
    let many: Vec<Value> = (0..21).map(|i| user(&format!("m{i}"))).collect();
    assert_plain_error(
        &post(&gw, "/v1/conversations", json!({ "items": many })).await,
        400,
        "400",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_page_with_limit_order_and_after() {
    let gw = start(&[]);
    let five: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("msg_{i}"), "role": "user", "content": format!("m{i}")}))
        .collect();
    let conv = new_conversation(&gw, json!({ "items": five })).await;
    let items = format!("/v1/conversations/{}/items", conv["id"].as_str().unwrap());
    let ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };

    // Default: newest first, all of them, has_more false (5 < 100).
    let page = get(&gw, &items).await.json();
    assert_eq!(ids(&page), ["msg_4", "msg_3", "msg_2", "msg_1", "msg_0"]);
    assert_eq!(page["has_more"], false);
    assert_eq!(page["first_id"], "msg_4");
    assert_eq!(page["last_id"], "msg_0");

    let page = get(&gw, &format!("{items}?limit=2&order=asc")).await.json();
    assert_eq!(ids(&page), ["msg_0", "msg_1"]);
    assert_eq!(page["has_more"], true);
    let page = get(&gw, &format!("{items}?limit=2&order=asc&after=msg_1"))
        .await
        .json();
    assert_eq!(ids(&page), ["msg_2", "msg_3"]);
    let page = get(&gw, &format!("{items}?limit=2&order=asc&after=msg_3"))
        .await
        .json();
    assert_eq!(ids(&page), ["msg_4"]);
    assert_eq!(page["has_more"], false);
    let page = get(&gw, &format!("{items}?limit=2&after=msg_3"))
        .await
        .json();
    assert_eq!(ids(&page), ["msg_2", "msg_1"]);
    // A page holding exactly `limit` items says has_more (spec 2, literally).
    let page = get(&gw, &format!("{items}?limit=5")).await.json();
    assert_eq!(page["has_more"], true);
    // Past the end: an empty page, null ends.
    let page = get(&gw, &format!("{items}?order=asc&after=msg_4"))
        .await
        .json();
    assert_eq!(
        page,
        json!({"object": "list", "data": [], "first_id": null, "last_id": null, "has_more": false})
    );
    for query in [
        "limit=0",
        "limit=101",
        "limit=x",
        "order=sideways",
        "after=a.b",
    ] {
        let reply = get(&gw, &format!("{items}?{query}")).await;
        assert_plain_error(&reply, 400, "400");
    }
    assert_eq!(get(&gw, &format!("{items}?limit=100")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_item_answers_the_conversation() {
    let gw = start(&[]);
    let conv = new_conversation(
        &gw,
        json!({"metadata": {"a": "b"}, "items": [
        {"id": "msg_keep", "role": "user", "content": "keep"},
        {"id": "msg_drop", "role": "user", "content": "drop"}]}),
    )
    .await;
    let items = format!("/v1/conversations/{}/items", conv["id"].as_str().unwrap());
    let reply = delete(&gw, &format!("{items}/msg_drop")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json(), conv);
    let page = get(&gw, &items).await.json();
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["first_id"], "msg_keep");
    for reply in [
        get(&gw, &format!("{items}/msg_drop")).await,
        delete(&gw, &format!("{items}/msg_drop")).await,
        get(&gw, &format!("{items}/msg_never")).await,
    ] {
        assert_plain_error(&reply, 404, "not_found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_guards_every_route() {
    let gw = start(&["--api-key", "sk-conv-test"]);
    let conv_path = "/v1/conversations/conv_abc";
    for (method, path) in [
        ("POST", "/v1/conversations".to_owned()),
        ("GET", conv_path.to_owned()),
        ("POST", conv_path.to_owned()),
        ("DELETE", conv_path.to_owned()),
        ("GET", format!("{conv_path}/items")),
        ("POST", format!("{conv_path}/items")),
        ("GET", format!("{conv_path}/items/msg_1")),
        ("DELETE", format!("{conv_path}/items/msg_1")),
    ] {
        for key in [None, Some("wrong")] {
            let reply = call(&gw, method, &path, Some(json!({})), key).await;
            assert_eq!(reply.status, 401, "{method} {path}");
            assert!(reply.body.is_empty());
        }
    }
    let reply = call(
        &gw,
        "POST",
        "/v1/conversations",
        Some(json!({})),
        Some("sk-conv-test"),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_conversations() {
    let gw = start(&["--tenant-api-key", TENANT_A, "--tenant-api-key", TENANT_B]);
    let created = call(
        &gw,
        "POST",
        "/v1/conversations",
        Some(json!({"items": [{"id": "msg_a", "role": "user", "content": "secret"}]})),
        Some(KEY_A),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let path = format!(
        "/v1/conversations/{}",
        created.json()["id"].as_str().unwrap()
    );
    let items = format!("{path}/items");
    for (method, path, body) in [
        ("GET", path.clone(), None),
        ("POST", path.clone(), Some(json!({"metadata": {"x": "y"}}))),
        ("GET", items.clone(), None),
        (
            "POST",
            items.clone(),
            Some(json!({"items": [user("intrude")]})),
        ),
        ("GET", format!("{items}/msg_a"), None),
        ("DELETE", format!("{items}/msg_a"), None),
        ("DELETE", path.clone(), None),
    ] {
        let reply = call(&gw, method, &path, body, Some(KEY_B)).await;
        assert_plain_error(&reply, 404, "conversation_not_found");
    }
    // B cannot pull A's item in by reference either.
    let other = call(
        &gw,
        "POST",
        "/v1/conversations",
        Some(json!({})),
        Some(KEY_B),
    )
    .await;
    let other_items = format!(
        "/v1/conversations/{}/items",
        other.json()["id"].as_str().unwrap()
    );
    let reply = call(
        &gw,
        "POST",
        &other_items,
        Some(json!({"items": [{"type": "item_reference", "id": "msg_a"}]})),
        Some(KEY_B),
    )
    .await;
    assert_plain_error(&reply, 404, "not_found");
    // A still has everything.
    let page = call(&gw, "GET", &items, None, Some(KEY_A)).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.json()["data"].as_array().unwrap().len(), 1);
    assert_eq!(call(&gw, "GET", &path, None, Some(KEY_A)).await.status, 200);
    assert_eq!(call(&gw, "GET", &path, None, None).await.status, 401);
}
