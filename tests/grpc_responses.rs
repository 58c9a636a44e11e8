//! `/v1/responses` on gRPC engines, black box: tollgate runs the Responses API itself in
//! front of the bundled `grpc-engine` (mock mode), which echoes the prompt's first turn up
//! to the template's end of turn (the model "says" `user\n` and the first message).
//! Checked: the response object, storage and retrieval, `previous_response_id` chains,
//! `store: false`, delete, cancel and input_items with their codes, tenants kept apart,
//! function calls as items, `max_output_tokens`, and the event stream's grammar.

use crate::common;
use crate::support;

use std::time::Duration;

use common::{gateway, get, post_json, post_json_with, send, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{grpc_url, sglang_echo};
use support::{read_frames, response_text, start_json};

async fn setup(name: &str, flags: &[&str]) -> (Proc, Proc) {
    let (engine, dir) = sglang_echo("responses", name);
    let url = grpc_url(&engine);
    let mut args = vec!["--worker-urls", &url, "--model-path", dir.to_str().unwrap()];
    args.extend_from_slice(flags);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    (engine, gw)
}

fn url(gw: &Proc, tail: &str) -> String {
    format!("{}/v1/responses{tail}", gw.url())
}

async fn create(gw: &Proc, body: &Value) -> Value {
    let reply = post_json(&url(gw, ""), body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let response = reply.json();
    assert_eq!(response["object"], "response", "{response}");
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    response
}

async fn delete(url: &str, headers: &[(&str, &str)]) -> common::Reply {
    send(&common::client(false), "DELETE", url, headers, Vec::new()).await
}

#[tokio::test]
async fn a_stored_response_is_retrieved_listed_continued_and_deleted() {
    let (_e, gw) = setup("stored", &[]).await;
    let first = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "Hello there"}),
    )
    .await;
    assert_eq!(first["status"], "completed");
    assert_eq!(first["store"], true);
    assert_eq!(response_text(&first), "user\nHello there");
    let message = &first["output"][0];
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["status"], "completed");
    let usage = &first["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );
    let id = first["id"].as_str().unwrap();

    let got = get(&url(&gw, &format!("/{id}"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), first);

    let items = get(&url(&gw, &format!("/{id}/input_items"))).await;
    assert_eq!(items.status, 200);
    let items = items.json();
    assert_eq!(items["object"], "list");
    assert_eq!(items["has_more"], false);
    let data = items["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["content"][0]["text"], "Hello there");
    assert_eq!(items["first_id"], data[0]["id"]);
    assert_eq!(items["last_id"], data[0]["id"]);

    // The next turn sees the whole chain: the engine echoes its first turn, still the
    // first input, with the instructions of this request only.
    let second = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "And again", "previous_response_id": id}),
    )
    .await;
    assert_eq!(second["previous_response_id"], id);
    assert_eq!(response_text(&second), "user\nHello there");
    let third = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "x", "instructions": "be brief",
                "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(response_text(&third), "system\nbe brief");
    let second_items = get(&url(
        &gw,
        &format!("/{}/input_items", second["id"].as_str().unwrap()),
    ))
    .await;
    assert_eq!(second_items.json()["data"].as_array().unwrap().len(), 1);

    let cancel = post_json(&url(&gw, &format!("/{id}/cancel")), &json!({})).await;
    assert_eq!(cancel.status, 400);
    assert_eq!(cancel.json()["error"]["code"], "response_already_completed");

    let deleted = delete(&url(&gw, &format!("/{id}")), &[]).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    for tail in [format!("/{id}"), format!("/{id}/input_items")] {
        let gone = get(&url(&gw, &tail)).await;
        assert_eq!(gone.status, 404, "{tail}");
        assert_eq!(gone.json()["error"]["code"], "not_found");
        assert_eq!(gone.headers["x-gw-error-code"], "not_found");
    }
    assert_eq!(delete(&url(&gw, &format!("/{id}")), &[]).await.status, 404);
    let cancel = post_json(&url(&gw, &format!("/{id}/cancel")), &json!({})).await;
    assert_eq!(cancel.status, 404);
    assert_eq!(cancel.json()["error"]["code"], "response_not_found");
    let missing = post_json(
        &url(&gw, ""),
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "x", "previous_response_id": id}),
    )
    .await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.json()["error"]["code"],
        "previous_response_not_found"
    );
}

#[tokio::test]
async fn store_false_keeps_nothing() {
    let (_e, gw) = setup("unstored", &[]).await;
    let response = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "hi", "store": false}),
    )
    .await;
    assert_eq!(response["store"], false);
    let id = response["id"].as_str().unwrap();
    assert_eq!(get(&url(&gw, &format!("/{id}"))).await.status, 404);
}

#[tokio::test]
async fn tenants_cannot_see_each_others_responses() {
    let (_e, gw) = setup(
        "tenants",
        &[
            "--tenant-api-key",
            "alpha:key-a",
            "--tenant-api-key",
            "beta:key-b",
        ],
    )
    .await;
    let alpha = [("authorization", "Bearer key-a")];
    let beta = [("authorization", "Bearer key-b")];
    let made = post_json_with(
        &url(&gw, ""),
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "mine"}),
        &alpha,
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.text());
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let c = common::client(false);
    let own = send(&c, "GET", &url(&gw, &format!("/{id}")), &alpha, Vec::new()).await;
    assert_eq!(own.status, 200);
    let foreign = send(&c, "GET", &url(&gw, &format!("/{id}")), &beta, Vec::new()).await;
    assert_eq!(foreign.status, 404);
    let unknown = send(&c, "GET", &url(&gw, "/resp_0000"), &beta, Vec::new()).await;
    assert_eq!(foreign.json(), unknown.json(), "a foreign id looks unknown");
    assert_eq!(
        delete(&url(&gw, &format!("/{id}")), &beta).await.status,
        404
    );
    let continued = post_json_with(
        &url(&gw, ""),
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "x", "previous_response_id": id}),
        &beta,
    )
    .await;
    assert_eq!(continued.status, 400);
    assert_eq!(
        continued.json()["error"]["code"],
        "previous_response_not_found"
    );
    assert_eq!(
        send(&c, "GET", &url(&gw, &format!("/{id}")), &[], Vec::new())
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn calls_become_function_call_items_and_outputs_continue() {
    let (_e, gw) = setup("tools", &["--tool-call-parser", "qwen"]).await;
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n\
                </tool_call>";
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let response = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": call, "tools": tools}),
    )
    .await;
    let output = response["output"].as_array().unwrap();
    let calls: Vec<&Value> = output
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{response}");
    let item = calls[0];
    assert_eq!(item["name"], "get_weather");
    assert_eq!(item["status"], "completed");
    assert!(item["id"].as_str().unwrap().starts_with("fc_"));
    let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    let call_id = item["call_id"].as_str().unwrap();

    let next = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "tools": tools, "previous_response_id": response["id"],
                "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}]}),
    )
    .await;
    assert_eq!(next["status"], "completed");
}

#[tokio::test]
async fn max_output_tokens_makes_an_incomplete_response() {
    let (_e, gw) = setup("incomplete", &[]).await;
    let response = create(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "a rather long sentence to echo", "max_output_tokens": 2}),
    )
    .await;
    assert_eq!(response["status"], "incomplete", "{response}");
    assert_eq!(
        response["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(response["usage"]["output_tokens"], 2);
}

/// The events of a streamed request, each checked: `event:` names the `type`, sequence
/// numbers count from 0, no `[DONE]`.
async fn stream(gw: &Proc, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let resp = start_json(&common::client(false), &url(gw, ""), &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let sse = frames.text();
    assert!(!sse.contains("[DONE]"));
    sse.split_terminator("\n\n")
        .enumerate()
        .map(|(n, e)| {
            let (kind, data) = e.split_once('\n').unwrap();
            let kind = kind.strip_prefix("event: ").unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], kind);
            assert_eq!(data["sequence_number"], n as u64, "{e}");
            data
        })
        .collect()
}

#[tokio::test]
async fn the_stream_follows_the_grammar_and_is_stored_before_it_completes() {
    let (_e, gw) = setup("stream", &["--tool-call-parser", "qwen"]).await;
    let events = stream(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": "Hello stream"}),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(events[0]["response"]["output"], json!([]));
    assert_eq!(
        kinds[2..5],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
        ]
    );
    let tail = &kinds[kinds.len() - 4..];
    assert_eq!(
        tail,
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "user\nHello stream");
    let done = events.last().unwrap();
    assert_eq!(done["response"]["status"], "completed");
    assert_eq!(response_text(&done["response"]), text);
    // Stored before `response.completed` was sent: found at once.
    let id = done["response"]["id"].as_str().unwrap();
    let got = get(&url(&gw, &format!("/{id}"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), done["response"]);

    // A call streams as its own item, opened in progress and closed completed.
    let call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    let tools = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    let events = stream(
        &gw,
        &json!({"model": "echo-model", "max_output_tokens": 400, "input": call, "tools": tools}),
    )
    .await;
    let added: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .collect();
    let closed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(added.len(), closed.len());
    let opened_call = added
        .iter()
        .find(|e| e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(opened_call["item"]["status"], "in_progress");
    let closed_call = closed
        .iter()
        .find(|e| e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(closed_call["item"]["status"], "completed");
    assert!(events
        .iter()
        .any(|e| e["type"] == "response.function_call_arguments.done"));
    assert_eq!(events.last().unwrap()["type"], "response.completed");
}

/// The fields the Open Responses schema's `ResponseResource` requires beyond OpenAI's
/// older object, on every object the gateway builds: returned, retrieved and streamed.
#[tokio::test]
async fn every_object_has_the_open_responses_fields() {
    let (_e, gw) = setup("schema", &[]).await;
    let body = json!({
        "model": "echo-model", "max_output_tokens": 400, "input": "Hello there",
        "presence_penalty": 0.5, "prompt_cache_key": "k-1",
        "tools": [{"type": "function", "name": "lookup"}],
        "tool_choice": "none",
    });
    let created = create(&gw, &body).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let retrieved = get(&url(&gw, &format!("/{id}"))).await.json();
    let events = stream(&gw, &body).await;
    let completed = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .map(|e| e["response"].clone())
        .expect("a response.completed event");
    for object in [&created, &retrieved, &completed] {
        assert_eq!(object["presence_penalty"], json!(0.5), "{object}");
        assert_eq!(object["frequency_penalty"], json!(0.0));
        assert_eq!(object["top_logprobs"], json!(0));
        assert_eq!(object["service_tier"], "default");
        assert_eq!(object["prompt_cache_key"], "k-1");
        assert!(object["safety_identifier"].is_null());
        assert!(object["completed_at"].as_u64().unwrap() >= object["created_at"].as_u64().unwrap());
        let tool = &object["tools"][0];
        assert!(tool["description"].is_null() && tool["parameters"].is_null());
        assert!(tool["strict"].is_null());
    }
    let opened = events
        .iter()
        .find(|e| e["type"] == "response.created")
        .expect("a response.created event");
    assert!(opened["response"]["completed_at"].is_null(), "{opened}");
}
