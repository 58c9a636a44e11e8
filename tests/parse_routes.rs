//! The parser utilities, black box: `POST /parse/function_call` and `POST /parse/reasoning`
//! answered by the gateway itself (no worker is asked) in the shapes of SGLang's router and
//! server, refusals as spec 1's `{error, success: false}` with 400, the administration body
//! bound, and control-plane authentication in front of them.

use crate::common;
use crate::support;

use common::{client, gateway, mock, mock_requests, post_json, post_json_with, send, Proc};
use serde_json::{json, Value};
use support::assert_gateway_error;

fn url(gw: &Proc, path: &str) -> String {
    format!("{}{path}", gw.url())
}

/// The 400 of spec 1: exactly `{error: <message>, success: false}`; the message.
fn assert_refused(reply: &common::Reply) -> String {
    assert_eq!(reply.status, 400, "{}", reply.text());
    let body = reply.json();
    let fields = body.as_object().expect("an object");
    assert_eq!(fields.len(), 2, "{body}");
    assert_eq!(body["success"], false, "{body}");
    body["error"].as_str().expect("error text").to_owned()
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
    }}])
}

fn arguments(text: &Value) -> Value {
    serde_json::from_str(text.as_str().expect("a JSON text")).expect("JSON object text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_calls_are_parsed_by_the_gateway() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let path = url(&gw, "/parse/function_call");

    let text = "Checking the weather.\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>";
    let reply = post_json(
        &path,
        &json!({"text": text, "tool_call_parser": "qwen", "tools": weather_tool()}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["normal_text"], "Checking the weather.\n", "{v}");
    assert_eq!(v["remaining_text"], v["normal_text"]);
    assert_eq!(v["success"], true);
    let calls = v["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["tool_index"], 0);
    assert_eq!(calls[0]["name"], "get_weather");
    assert_eq!(arguments(&calls[0]["parameters"]), json!({"city": "Paris"}));
    let routed = &v["tool_calls"][0]["function"];
    assert_eq!(routed["name"], "get_weather");
    assert_eq!(arguments(&routed["arguments"]), json!({"city": "Paris"}));

    // Llama 3's JSON form and Mistral's `[TOOL_CALLS]` array; SGLang's parser names.
    let cases = [
        (
            "llama3",
            r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
            "Oslo",
        ),
        (
            "mistral",
            r#"[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}}]"#,
            "Rome",
        ),
    ];
    for (parser, text, city) in cases {
        let body = json!({"text": text, "tool_call_parser": parser, "tools": weather_tool()});
        let reply = post_json(&path, &body).await;
        assert_eq!(reply.status, 200, "{parser}: {}", reply.text());
        let v = reply.json();
        assert_eq!(v["normal_text"], "", "{parser}: {v}");
        assert_eq!(
            v["calls"].as_array().map(Vec::len),
            Some(1),
            "{parser}: {v}"
        );
        assert_eq!(v["calls"][0]["name"], "get_weather");
        assert_eq!(
            arguments(&v["calls"][0]["parameters"]),
            json!({"city": city})
        );
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_split_by_the_gateway() {
    let gw = gateway(&[]);
    let path = url(&gw, "/parse/reasoning");
    let cases = [
        // DeepSeek-R1 starts inside reasoning, opening tag or not.
        (
            "deepseek_r1",
            "Two and two.</think>Four.",
            "Two and two.",
            "Four.",
        ),
        ("deepseek-r1", "<think>Hmm.</think>\n\nYes.", "Hmm.", "Yes."),
        // Qwen3 reasons only inside a leading `<think>`.
        ("qwen3", "<think>Check.</think>Done.", "Check.", "Done."),
        ("qwen3", "No thinking here.", "", "No thinking here."),
    ];
    for (parser, text, reasoning, answer) in cases {
        let reply = post_json(&path, &json!({"text": text, "reasoning_parser": parser})).await;
        assert_eq!(reply.status, 200, "{parser}: {}", reply.text());
        let v = reply.json();
        assert_eq!(v["reasoning_text"], reasoning, "{parser} {text:?}: {v}");
        assert_eq!(v["normal_text"], answer, "{parser} {text:?}: {v}");
        assert_eq!(v["text"], answer, "{parser} {text:?}: {v}");
        assert_eq!(v["success"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_400_in_the_spec_shape() {
    let gw = gateway(&[]);
    let calls = url(&gw, "/parse/function_call");
    let reasoning = url(&gw, "/parse/reasoning");

    let msg = assert_refused(
        &post_json(&calls, &json!({"text": "x", "tool_call_parser": "no_such"})).await,
    );
    assert!(msg.contains("Unknown tool parser: no_such"), "{msg}");
    let msg = assert_refused(
        &post_json(
            &reasoning,
            &json!({"text": "x", "reasoning_parser": "no_such"}),
        )
        .await,
    );
    assert!(msg.contains("Unknown reasoning parser: no_such"), "{msg}");

    let msg = assert_refused(&post_json(&calls, &json!({"tool_call_parser": "qwen"})).await);
    assert!(msg.contains("`text`"), "{msg}");
    let msg = assert_refused(&post_json(&reasoning, &json!({"reasoning_parser": "qwen3"})).await);
    assert!(msg.contains("`text`"), "{msg}");
    let msg = assert_refused(&post_json(&reasoning, &json!({"text": "x"})).await);
    assert!(msg.contains("`reasoning_parser`"), "{msg}");

    let c = client(false);
    for path in [&calls, &reasoning] {
        for body in ["{\"text\": ", "not json", ""] {
            let reply = send(
                &c,
                "POST",
                path,
                &[("content-type", "application/json")],
                body,
            )
            .await;
            let msg = assert_refused(&reply);
            assert!(
                msg.starts_with("invalid request body"),
                "{path} {body:?}: {msg}"
            );
        }
    }

    // Bounded like every administration body (1 MiB).
    let big = json!({"text": "a".repeat(1024 * 1024 + 64 * 1024), "reasoning_parser": "qwen3"});
    let reply = post_json(&reasoning, &big).await;
    assert_gateway_error(&reply, 413, "payload_too_large");

    // Another method is 405, as on every known path.
    let reply = send(&c, "GET", &calls, &[], "").await;
    assert_eq!(reply.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_auth_guards_them() {
    const ADMIN_KEY: &str = "cpk-parse-admin-3Fq9";
    let gw = gateway(&[
        "--control-plane-api-keys",
        &format!("ops:Ops:admin:{ADMIN_KEY}"),
        "--api-key",
        "sk-data-shared-7Pz",
    ]);
    let body = json!({"text": "<think>a</think>b", "reasoning_parser": "qwen3"});
    let path = url(&gw, "/parse/reasoning");

    let reply = post_json(&path, &body).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    // The data-plane key does not open the control plane once it has its own keys.
    let data = [("authorization", "Bearer sk-data-shared-7Pz")];
    let reply = post_json_with(&path, &body, &data).await;
    assert_eq!(reply.status, 401, "{}", reply.text());

    let bearer = format!("Bearer {ADMIN_KEY}");
    let admin = [("authorization", bearer.as_str())];
    let reply = post_json_with(&path, &body, &admin).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["reasoning_text"], "a");
    let calls = url(&gw, "/parse/function_call");
    let reply = post_json(&calls, &json!({"text": "x", "tool_call_parser": "qwen"})).await;
    assert_eq!(reply.status, 401);
    let reply = post_json_with(
        &calls,
        &json!({"text": "x", "tool_call_parser": "qwen"}),
        &admin,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}
