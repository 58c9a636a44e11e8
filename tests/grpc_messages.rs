//! `/v1/messages` on gRPC engines, black box: tollgate in front of the bundled
//! `grpc-engine` (mock mode), which echoes the prompt's ids up to the template's end of
//! turn. The model so "says" `user\n` and the first message, so a message written in a
//! family's tool-call or reasoning syntax comes back as that family's output, and the
//! gateway must answer it in Messages' shapes: a whole message, or the event stream of
//! spec 2 (`message_start` … `message_stop`). Refusals, MLX's restrictions and
//! count_tokens' 501 are checked here too.

use crate::common;
use crate::support;

use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END, IM_START};
use common::{gateway, post_json, wait_ready, Proc, Reply};
use serde_json::{json, Value};
use support::echo::{chat_prompt, echo, grpc_url, temp_dir};
use support::{read_frames, start_json};

/// An engine (`service`, extra `engine_args`) stopping at the template's end of turn,
/// and a gateway with `flags` in front of it; also the tokenizer, to count prompts.
async fn setup(
    name: &str,
    service: &str,
    engine_args: &[&str],
    flags: &[&str],
) -> (Proc, Proc, tokenizers::Tokenizer) {
    let dir = temp_dir("messages", name);
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap().to_string();
    let mut args = vec![
        "--service",
        service,
        "--model",
        "echo-model",
        "--eos-token-id",
        &eos,
    ];
    args.extend_from_slice(engine_args);
    let engine = common::grpc_engine(&args);
    let url = grpc_url(&engine);
    let mut gw_args = vec!["--worker-urls", &url, "--model-path", dir.to_str().unwrap()];
    gw_args.extend_from_slice(flags);
    let gw = gateway(&gw_args);
    wait_ready(&gw).await;
    (engine, gw, tok)
}

fn url(gw: &Proc) -> String {
    format!("{}/v1/messages", gw.url())
}

fn body(content: &str) -> Value {
    json!({"model": "echo-model", "max_tokens": 400,
           "messages": [{"role": "user", "content": content}]})
}

fn tools() -> Value {
    json!([{"name": "get_weather", "description": "the weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
           {"type": "web_search_20250305", "name": "web_search"}])
}

/// Posts `body` and checks the answer is a 200 message.
async fn create(gw: &Proc, body: &Value) -> Value {
    let reply = post_json(&url(gw), body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let message = reply.json();
    assert_eq!(message["type"], "message", "{message}");
    assert_eq!(message["role"], "assistant");
    assert!(
        message["id"].as_str().unwrap().starts_with("msg_"),
        "{message}"
    );
    let usage = &message["usage"];
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    assert_eq!(usage["cache_read_input_tokens"], 0);
    message
}

/// The events of a streamed `body`: `(event name, data)`, each checked to be an `event:`
/// line, a `data:` line naming the same type, and a blank line; no `[DONE]`, no ping.
async fn stream(gw: &Proc, body: &Value) -> Vec<(String, Value)> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let c = common::client(false);
    let resp = start_json(&c, &url(gw), &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let sse = frames.text();
    assert!(sse.ends_with("\n\n") && !sse.contains("[DONE]"), "{sse}");
    sse.split_terminator("\n\n")
        .map(|e| {
            let (kind, data) = e.split_once('\n').unwrap_or_else(|| panic!("{e:?}"));
            let kind = kind
                .strip_prefix("event: ")
                .unwrap_or_else(|| panic!("{e:?}"));
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap())
                .unwrap_or_else(|err| panic!("{err}: {e}"));
            assert_eq!(data["type"], kind, "{e}");
            assert_ne!(kind, "ping");
            (kind.to_owned(), data)
        })
        .collect()
}

/// A message rebuilt from its events as the SDKs accumulate them, checking the order:
/// `message_start`, then each block started, given its deltas and stopped, indexes
/// 0, 1, … in order, then one `message_delta` and `message_stop`.
fn accumulate(events: &[(String, Value)]) -> Value {
    let (first, start) = &events[0];
    assert_eq!(first, "message_start");
    let mut message = start["message"].clone();
    assert_eq!(message["content"], json!([]));
    assert_eq!(message["usage"]["input_tokens"], 0);
    assert_eq!(message["usage"]["output_tokens"], 0);
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_bufs: Vec<String> = Vec::new();
    let mut open: Option<usize> = None;
    let n = events.len();
    for (kind, data) in &events[1..n - 2] {
        let index = data["index"].as_u64().unwrap() as usize;
        match kind.as_str() {
            "content_block_start" => {
                assert_eq!(open, None, "a block opened inside another");
                assert_eq!(index, blocks.len(), "indexes in order");
                blocks.push(data["content_block"].clone());
                json_bufs.push(String::new());
                open = Some(index);
            }
            "content_block_delta" => {
                assert_eq!(open, Some(index));
                let delta = &data["delta"];
                let block = &mut blocks[index];
                match delta["type"].as_str().unwrap() {
                    "text_delta" => {
                        let text = block["text"].as_str().unwrap().to_owned();
                        block["text"] = json!(text + delta["text"].as_str().unwrap());
                    }
                    "thinking_delta" => {
                        let text = block["thinking"].as_str().unwrap().to_owned();
                        block["thinking"] = json!(text + delta["thinking"].as_str().unwrap());
                    }
                    "input_json_delta" => {
                        json_bufs[index].push_str(delta["partial_json"].as_str().unwrap())
                    }
                    other => panic!("delta type {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(open, Some(index));
                open = None;
                if blocks[index]["type"] == "tool_use" && !json_bufs[index].is_empty() {
                    blocks[index]["input"] = serde_json::from_str(&json_bufs[index]).unwrap();
                }
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(open, None);
    let (kind, delta) = &events[n - 2];
    assert_eq!(kind, "message_delta");
    assert_eq!(events[n - 1].0, "message_stop");
    message["content"] = Value::Array(blocks);
    message["stop_reason"] = delta["delta"]["stop_reason"].clone();
    message["stop_sequence"] = delta["delta"]["stop_sequence"].clone();
    message["usage"] = delta["usage"].clone();
    message
}

/// Asks `body` streamed and not: both answers must be the same message (ids aside).
async fn both(gw: &Proc, body: &Value) -> Value {
    let mut whole = create(gw, body).await;
    let mut streamed = accumulate(&stream(gw, body).await);
    for m in [&mut whole, &mut streamed] {
        m["id"] = Value::Null;
        for block in m["content"].as_array_mut().unwrap() {
            if block["type"] == "tool_use" {
                assert!(
                    block["id"].as_str().unwrap().starts_with("toolu_"),
                    "{block}"
                );
                block["id"] = Value::Null;
            }
        }
    }
    assert_eq!(whole, streamed, "whole and streamed messages differ");
    whole
}

/// The ids of `text` as the test tokenizer encodes it (specials included).
fn count(tok: &tokenizers::Tokenizer, text: &str) -> u64 {
    tok.encode(text, false).unwrap().get_ids().len() as u64
}

#[tokio::test]
async fn create_and_stream_answer_the_echo_as_a_message() {
    let (_e, gw, tok) = setup("plain", "sglang", &[], &[]).await;
    let message = both(&gw, &body("hello world")).await;
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "user\nhello world"}])
    );
    assert_eq!(message["model"], "echo-model");
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["stop_sequence"], Value::Null);
    let prompt = format!("{IM_START}user\nhello world{IM_END}\n{IM_START}assistant\n");
    assert_eq!(message["usage"]["input_tokens"], count(&tok, &prompt));
    // The echoed ids and the end-of-turn id the engine stopped on.
    let eos = tok.token_to_id(IM_END);
    let said = echo(&chat_prompt(&tok, "hello world"), 400, eos).len() + 1;
    assert_eq!(message["usage"]["output_tokens"], said as u64);

    // The exact event sequence of a one-block answer.
    let events = stream(&gw, &body("hi")).await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds[..2], ["message_start", "content_block_start"]);
    assert!(kinds[2..kinds.len() - 3]
        .iter()
        .all(|k| *k == "content_block_delta"));
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert_eq!(
        events[1].1,
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}})
    );
    assert_eq!(events[2].1["delta"]["type"], "text_delta");
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(
        delta["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
    assert!(
        delta["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
}

#[tokio::test]
async fn system_tool_use_and_tool_result_round_trip() {
    let (_e, gw, tok) = setup("tools", "sglang", &[], &["--tool-call-parser", "qwen"]).await;
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n\
                </tool_call>";
    let mut first = body(call);
    first["tools"] = tools();
    let message = both(&gw, &first).await;
    assert_eq!(message["stop_reason"], "tool_use");
    let content = message["content"].as_array().unwrap();
    assert_eq!(content[0], json!({"type": "text", "text": "user\n"}));
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "get_weather");
    assert_eq!(content[1]["input"], json!({"city": "Paris"}));
    assert_eq!(content.len(), 2);

    // The client runs the tool and sends the call and its result back.
    let whole = create(&gw, &first).await;
    let id = whole["content"][1]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("toolu_") && id.len() > 10, "{id}");
    let mut second = first.clone();
    second["system"] = json!([{"type": "text", "text": "be brief"}]);
    second["messages"] = json!([
        {"role": "user", "content": call},
        {"role": "assistant", "content": whole["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "sunny"}]}]}
    ]);
    let answer = create(&gw, &second).await;
    // The engine echoes the first turn: the system prompt now.
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "system\nbe brief"}])
    );
    assert_eq!(answer["stop_reason"], "end_turn");
    // Every turn reached the template (ChatML prints role and content).
    let prompt = format!(
        "{IM_START}system\nbe brief{IM_END}\n{IM_START}user\n{call}{IM_END}\n\
         {IM_START}assistant\nuser\n{IM_END}\n{IM_START}tool\nsunny{IM_END}\n{IM_START}assistant\n"
    );
    assert_eq!(answer["usage"]["input_tokens"], count(&tok, &prompt));

    // tool_choice none: the call syntax stays text.
    let mut none = first.clone();
    none["tool_choice"] = json!({"type": "none"});
    let message = create(&gw, &none).await;
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["content"][0]["text"], format!("user\n{call}"));
}

#[tokio::test]
async fn tool_choice_any_and_tool_constrain_the_engine() {
    let (engine, gw, _) = setup("forced", "vllm", &[], &[]).await;
    let mut b = body("[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}]");
    b["tools"] = tools();
    b["tool_choice"] = json!({"type": "any"});
    let message = create(&gw, &b).await;
    assert_eq!(message["stop_reason"], "tool_use");
    let calls: Vec<&Value> = message["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(calls.len(), 1, "{message}");
    assert_eq!(calls[0]["input"], json!({"city": "Oslo"}));
    support::echo::logged(&engine, "json_schema={\"type\":\"array\",\"minItems\":1").await;

    let mut b = body("{\"city\": \"Pisa\"}");
    b["tools"] = tools();
    b["tool_choice"] = json!({"type": "tool", "name": "get_weather"});
    let message = both(&gw, &b).await;
    assert_eq!(message["stop_reason"], "tool_use");
    let blocks = message["content"].as_array().unwrap();
    let call = blocks.iter().find(|b| b["type"] == "tool_use").unwrap();
    assert_eq!(call["input"], json!({"city": "Pisa"}));
}

#[tokio::test]
async fn thinking_streams_before_the_text_and_can_be_turned_off() {
    let (_e, gw, _) = setup(
        "thinking",
        "sglang",
        &[],
        &["--reasoning-parser", "deepseek_r1"],
    )
    .await;
    let mut b = body("let me think</think>It is sunny.");
    b["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    let message = both(&gw, &b).await;
    assert_eq!(
        message["content"],
        json!([{"type": "thinking", "thinking": "user\nlet me think", "signature": ""},
               {"type": "text", "text": "It is sunny."}])
    );
    let events = stream(&gw, &b).await;
    let first_text = events
        .iter()
        .position(|(_, d)| d["delta"]["type"] == "text_delta")
        .unwrap();
    let last_thinking = events
        .iter()
        .rposition(|(_, d)| d["delta"]["type"] == "thinking_delta")
        .unwrap();
    assert!(last_thinking < first_text);

    b["thinking"] = json!({"type": "disabled"});
    let message = create(&gw, &b).await;
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "user\nlet me think</think>It is sunny."}])
    );
}

#[tokio::test]
async fn stop_sequences_and_max_tokens_end_the_message() {
    for service in ["sglang", "vllm"] {
        let (_e, gw, _) = setup(&format!("stops-{service}"), service, &[], &[]).await;
        let mut b = body("one two STOP three");
        b["stop_sequences"] = json!(["NEVER", "STOP"]);
        let message = both(&gw, &b).await;
        assert_eq!(message["stop_reason"], "stop_sequence", "{service}");
        assert_eq!(message["stop_sequence"], "STOP");
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "user\none two "}])
        );

        let mut b = body("a long enough message to be cut");
        b["max_tokens"] = json!(3);
        let message = both(&gw, &b).await;
        assert_eq!(message["stop_reason"], "max_tokens", "{service}");
        assert_eq!(message["usage"]["output_tokens"], 3);
    }
}

/// A Messages refusal: 400, `{error: {type: invalid_request_error, code, message}}`.
fn assert_refused(reply: &Reply, code: &str, case: &Value) {
    assert_eq!(reply.status, 400, "{case}: {}", reply.text());
    let body = reply.json();
    assert_eq!(
        body["error"]["type"], "invalid_request_error",
        "{case}: {body}"
    );
    // Spec 2 writes the rule failures' code as the number 400, the parse failures' as a name.
    let want = if code == "400" {
        json!(400)
    } else {
        json!(code)
    };
    assert_eq!(body["error"]["code"], want, "{case}: {body}");
    assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    assert_eq!(reply.headers["x-gw-error-code"], code);
}

#[tokio::test]
async fn each_validation_error_row() {
    let (engine, gw, _) = setup("refusals", "sglang", &[], &[]).await;
    let with = |field: &str, value: Value| {
        let mut b = body("hi");
        b[field] = value;
        b
    };
    let without = |field: &str| {
        let mut b = body("hi");
        b.as_object_mut().unwrap().remove(field);
        b
    };
    let mut tools_named_b = with("tools", tools());
    tools_named_b["tool_choice"] = json!({"type": "tool", "name": "nope"});
    let parse_errors = [
        without("max_tokens"),
        without("messages"),
        without("model"),
        with("max_tokens", json!("many")),
        with("messages", json!({"role": "user"})),
        with("stop_sequences", json!("END")),
        // A block type outside spec 2's list does not parse as a content block.
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "mcp_tool_use", "id": "x",
                    "name": "n", "server_name": "s", "input": {}}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "mcp_tool_result",
                    "tool_use_id": "x", "content": []}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "hologram"}]}]),
        ),
    ];
    for case in &parse_errors {
        let reply = post_json(&url(&gw), case).await;
        assert_refused(&reply, "json_parse_error", case);
    }
    let rules = [
        with("max_tokens", json!(0)),
        with("messages", json!([])),
        with("tool_choice", json!({"type": "any"})),
        tools_named_b,
    ];
    for case in &rules {
        let reply = post_json(&url(&gw), case).await;
        assert_refused(&reply, "400", case);
    }
    // Not JSON at all.
    let c = common::client(false);
    let raw = common::send(
        &c,
        "POST",
        &url(&gw),
        &[("content-type", "application/json")],
        &b"{nope"[..],
    )
    .await;
    assert_refused(&raw, "json_parse_error", &json!("{nope"));
    // An image: the text-only pipeline says so.
    let image = with(
        "messages",
        json!([{"role": "user", "content": [{"type": "image", "source":
                {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]),
    );
    let reply = post_json(&url(&gw), &image).await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
    assert!(reply.text().contains("text-only"), "{}", reply.text());
    // None of these reached the engine.
    assert!(
        !engine.log_text().contains("generate request_id"),
        "{}",
        engine.log_text()
    );
}

#[tokio::test]
async fn a_prompt_over_the_context_window_is_refused() {
    let (_e, gw, _) = setup("window", "sglang", &["--max-context", "8"], &[]).await;
    let reply = post_json(&url(&gw), &body("a message far longer than eight tokens")).await;
    support::assert_gateway_error(&reply, 400, "context_length_exceeded");
}

#[tokio::test]
async fn mlx_refuses_images_stop_sequences_and_forced_tools() {
    let (engine, gw, _) = setup("mlx", "mlx", &[], &[]).await;
    let message = create(&gw, &body("hello")).await;
    assert_eq!(message["content"][0]["text"], "user\nhello");
    let mut stops = body("hello");
    stops["stop_sequences"] = json!(["x"]);
    let mut any = body("hello");
    any["tools"] = tools();
    any["tool_choice"] = json!({"type": "any"});
    let mut named = any.clone();
    named["tool_choice"] = json!({"type": "tool", "name": "get_weather"});
    let mut image = body("hello");
    image["messages"] = json!([{"role": "user", "content": [{"type": "image", "source":
        {"type": "url", "url": "https://example.com/a.png"}}]}]);
    for case in [stops, any, named, image] {
        let reply = post_json(&url(&gw), &case).await;
        support::assert_gateway_error(&reply, 400, "invalid_request");
    }
    // The engine logs a request as it takes it, before it answers, so a refused one that
    // had reached the engine would be in the log ahead of this second accepted request's
    // line.
    create(&gw, &body("hello")).await;
    let generations = engine
        .settled_log_count("generate request_id", 2, Duration::from_secs(5))
        .await;
    assert_eq!(generations, 2, "{}", engine.log_text());
}

#[tokio::test]
async fn a_failure_mid_stream_is_an_error_event() {
    let (_e, gw, _) = setup("broken", "sglang", &["--drop-after", "3"], &[]).await;
    let mut b = body("a message long enough to be cut off");
    b["stream"] = json!(true);
    let c = common::client(false);
    let resp = start_json(&c, &url(&gw), &b).await;
    assert_eq!(resp.status(), 200);
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    let sse = frames.text();
    assert!(sse.starts_with("event: message_start\n"), "{frames:?}");
    assert!(frames.clean_end(), "{frames:?}");
    let last = sse.split_terminator("\n\n").last().unwrap();
    let data = last
        .strip_prefix("event: error\ndata: ")
        .unwrap_or_else(|| panic!("{sse}"));
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "api_error");
    assert!(!sse.contains("message_stop"), "{sse}");
}

#[tokio::test]
async fn count_tokens_is_not_served_on_grpc_workers() {
    let (engine, gw, _) = setup("count", "sglang", &[], &[]).await;
    let reply = post_json(
        &format!("{}/v1/messages/count_tokens", gw.url()),
        &json!({"model": "echo-model", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 501, "{}", reply.text());
    assert!(!engine.log_text().contains("generate request_id"));
}
