//! `/v1/responses` on an external provider, black box: the gateway runs the Responses API
//! itself in front of `mock-worker --provider openai` (an OpenAI-style stand-in with its
//! own key), asking the provider's `/v1/responses` for each model turn. Checked:
//!
//! - the provider gets the whole context as `input` with `store: false`, never
//!   `previous_response_id` nor `conversation`, and the worker's key, not the gateway's;
//! - the response is the gateway's own (its id, stored, retrievable, continued by
//!   `previous_response_id`, appended to a conversation);
//! - streamed, the client gets spec 2's grammar from the gateway's writer, and the response
//!   is stored before its terminal event;
//! - `store: false` keeps nothing; a provider's error status on the first turn comes back
//!   as it is; a stream that breaks partway ends `failed`.
//!
//! MCP tools against a real MCP server are checked with the official SDKs in
//! tests/real_engine/test_11_provider_responses.py.

use crate::common;
use crate::support;

use std::time::Duration;

use common::{eventually, gateway, get, mock, mock_requests, post_json_with, Proc};
use serde_json::{json, Value};
use support::{read_frames, response_text, start};

const GW_KEY: &str = "gateway-key";
const PROVIDER_KEY: &str = "sk-openai";
const MODEL: &str = "gpt-test";

struct Setup {
    provider: Proc,
    gw: Proc,
}

impl Setup {
    async fn start() -> Setup {
        let provider = mock(&[
            "--provider",
            "openai",
            "--model",
            MODEL,
            "--api-key",
            PROVIDER_KEY,
        ]);
        let gw = gateway(&["--api-key", GW_KEY]);
        let spec = json!({"url": provider.url(), "runtime_type": "external",
                          "api_key": PROVIDER_KEY});
        let reply = post_json_with(&format!("{}/workers", gw.url()), &spec, &auth()).await;
        assert_eq!(reply.status, 202, "{}", reply.text());
        let ready = eventually(Duration::from_secs(15), || async {
            let listed = common::send(
                &common::client(false),
                "GET",
                &format!("{}/workers", gw.url()),
                &auth(),
                Vec::new(),
            )
            .await;
            listed.json()["workers"]
                .as_array()
                .is_some_and(|w| w.len() == 1 && w[0]["status"] == "ready")
        })
        .await;
        assert!(ready, "the provider never became ready:\n{}", gw.log_text());
        Setup { provider, gw }
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v1/{tail}", self.gw.url())
    }

    async fn create(&self, body: &Value) -> Value {
        let reply = post_json_with(&self.url("responses"), body, &auth()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let response = reply.json();
        assert_eq!(response["object"], "response", "{response}");
        response
    }

    async fn get(&self, tail: &str) -> common::Reply {
        common::send(
            &common::client(false),
            "GET",
            &self.url(tail),
            &auth(),
            Vec::new(),
        )
        .await
    }

    /// The requests the provider received at `/v1/responses`, oldest first, their bodies
    /// parsed.
    async fn upstream(&self) -> Vec<Value> {
        mock_requests(&self.provider)
            .await
            .into_iter()
            .filter(|r| r["path"] == "/v1/responses")
            .map(|mut r| {
                r["body"] = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
                r
            })
            .collect()
    }
}

fn auth() -> [(&'static str, &'static str); 1] {
    [("authorization", "Bearer gateway-key")]
}

fn body(input: Value, tokens: u64) -> Value {
    json!({"model": MODEL, "input": input, "mock": {"output_tokens": tokens}})
}

/// The texts of the provider-bound `input` items, in order.
fn texts(input: &Value) -> Vec<String> {
    input
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            assert!(item.get("id").is_none(), "an id went upstream: {item}");
            match &item["content"] {
                Value::String(text) => text.clone(),
                parts => parts[0]["text"].as_str().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_keeps_the_state_and_the_provider_gets_the_whole_context() {
    let s = Setup::start().await;
    let first = s.create(&body(json!("Hello there"), 3)).await;
    assert_eq!(first["status"], "completed");
    assert_eq!(first["store"], true);
    assert_eq!(response_text(&first), "tok0 tok1 tok2 ");
    assert_eq!(first["usage"]["output_tokens"], 3);
    assert!(first["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let id = first["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("resp_"));

    let sent = s.upstream().await;
    assert_eq!(sent.len(), 1);
    let asked = &sent[0];
    assert_eq!(asked["headers"]["authorization"], "Bearer sk-openai");
    let asked = &asked["body"];
    assert_eq!(asked["store"], false);
    assert_eq!(asked["model"], MODEL);
    assert!(asked.get("previous_response_id").is_none());
    assert_eq!(texts(&asked["input"]), ["Hello there"]);
    // Fields the gateway does not keep for itself go as they came.
    assert_eq!(asked["mock"]["output_tokens"], 3);

    let got = s.get(&format!("responses/{id}")).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.json()["output"], first["output"]);

    let mut next = body(json!("And again"), 2);
    next["previous_response_id"] = json!(id);
    let second = s.create(&next).await;
    assert_eq!(second["previous_response_id"], json!(id));
    assert_eq!(response_text(&second), "tok0 tok1 ");
    let sent = s.upstream().await;
    assert_eq!(sent.len(), 2);
    let asked = &sent[1]["body"];
    assert!(asked.get("previous_response_id").is_none());
    assert_eq!(
        texts(&asked["input"]),
        ["Hello there", "tok0 tok1 tok2 ", "And again"]
    );
    let roles: Vec<&str> = asked["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    let items = s
        .get(&format!(
            "responses/{}/input_items",
            second["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(items.status, 200);
    assert_eq!(items.json()["data"].as_array().unwrap().len(), 1);

    // Not stored: nothing to retrieve or continue.
    let mut unstored = body(json!("Forget me"), 1);
    unstored["store"] = json!(false);
    let gone = s.create(&unstored).await;
    assert_eq!(gone["store"], false);
    let missing = s
        .get(&format!("responses/{}", gone["id"].as_str().unwrap()))
        .await;
    assert_eq!(missing.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_collects_the_turns_the_provider_made() {
    let s = Setup::start().await;
    let conv = post_json_with(&s.url("conversations"), &json!({}), &auth()).await;
    assert_eq!(conv.status, 200, "{}", conv.text());
    let conv = conv.json()["id"].as_str().unwrap().to_owned();
    for (n, text) in ["one", "two"].iter().enumerate() {
        let mut turn = body(json!(text), 1 + n as u64);
        turn["conversation"] = json!(conv);
        let response = s.create(&turn).await;
        assert_eq!(response["conversation"]["id"], json!(conv));
    }
    let sent = s.upstream().await;
    let asked = &sent[1]["body"];
    assert!(asked.get("conversation").is_none());
    assert_eq!(texts(&asked["input"]), ["one", "tok0 ", "two"]);
    let items = s
        .get(&format!("conversations/{conv}/items?order=asc"))
        .await;
    assert_eq!(items.status, 200, "{}", items.text());
    let listed: Vec<String> = items.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ["one", "tok0 ", "two", "tok0 tok1 "]);
}

/// A streamed response's events, as JSON.
async fn stream(s: &Setup, mut request: Value) -> Vec<Value> {
    request["stream"] = json!(true);
    let resp = start(
        &common::client(false),
        "POST",
        &s.url("responses"),
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer gateway-key"),
        ],
        serde_json::to_vec(&request).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    frames
        .text()
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            serde_json::from_str(data).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_follows_the_grammar_and_is_stored_before_it_ends() {
    let s = Setup::start().await;
    let events = stream(&s, body(json!("Stream it"), 4)).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(*kinds.last().unwrap(), "response.completed");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], n as u64, "{event}");
    }
    let added = kinds
        .iter()
        .filter(|k| **k == "response.output_item.added")
        .count();
    let done = kinds
        .iter()
        .filter(|k| **k == "response.output_item.done")
        .count();
    assert_eq!((added, done), (1, 1));
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "tok0 tok1 tok2 tok3 ");
    let last = &events.last().unwrap()["response"];
    assert_eq!(response_text(last), deltas);
    assert_eq!(last["usage"]["output_tokens"], 4);
    let id = last["id"].as_str().unwrap();
    let got = s.get(&format!("responses/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["status"], "completed");
    assert_eq!(s.upstream().await[0]["body"]["stream"], true);

    // The provider's stream breaks after two tokens: the response ends failed, stored so.
    let mut broken = body(json!("Break"), 6);
    broken["mock"]["drop_after_tokens"] = json!(2);
    let events = stream(&s, broken).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed", "{events:?}");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["code"], "stream_error");
    let id = last["response"]["id"].as_str().unwrap();
    assert_eq!(
        s.get(&format!("responses/{id}")).await.json()["status"],
        "failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_comes_back_as_it_is() {
    let s = Setup::start().await;
    let mut failing = body(json!("fail"), 2);
    failing["mock"]["fail_status"] = json!(429);
    let reply = post_json_with(&s.url("responses"), &failing, &auth()).await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    let error = reply.json();
    assert!(error["error"]["message"].is_string(), "{error}");
    // An unknown model is the provider's own 404, in its own envelope.
    let mut unknown = body(json!("hi"), 1);
    unknown["model"] = json!("gpt-other");
    let reply = post_json_with(&s.url("responses"), &unknown, &auth()).await;
    assert_eq!(reply.status, 404, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], "model_not_found");
    // The gateway's key guards the route before any provider is asked.
    let before = s.upstream().await.len();
    let unauthorised = get(&format!("{}/v1/responses/resp_none", s.gw.url())).await;
    assert_eq!(unauthorised.status, 401);
    assert_eq!(s.upstream().await.len(), before);
}
