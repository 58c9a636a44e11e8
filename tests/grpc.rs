//! The gRPC path, black box: tollgate in front of the bundled gRPC engine (`grpc-engine`,
//! SGLang's scheduler service, mock mode), with a tokenizer directory the test writes.
//! The mock echoes the prompt's token ids back (cycling) until `max_new_tokens`, a stop
//! token or its EOS id, so every expected text is `decode(ids)` of what the test's own
//! tokenizer makes of the prompt, computed here with the same `tokenizers` crate.

use crate::common;
use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, get, post_json, scrape, Proc};
use serde_json::{json, Value};
use support::echo::{chat_prompt, echo, gateway_for, grpc_url, logged};
use support::{read_frames, start_json};

/// A fresh directory under the target's temp space.
fn temp_dir(name: &str) -> PathBuf {
    support::echo::temp_dir("grpc", name)
}

/// Starts the mock gRPC engine serving `echo-model` with `args`; returns once it listens.
fn engine(args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--model", "echo-model"], args].concat())
}

/// The text of an OpenAI stream: its deltas (chat) or texts (completions), in order.
fn stream_text(sse: &str) -> (String, Vec<Value>) {
    let mut text = String::new();
    let mut events = Vec::new();
    for data in sse.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        if let Some(choice) = v["choices"].get(0) {
            let piece = choice["delta"]["content"]
                .as_str()
                .or(choice["text"].as_str())
                .unwrap_or("");
            assert!(
                !piece.contains('\u{fffd}'),
                "a delta split a character: {piece:?}"
            );
            text.push_str(piece);
        }
        events.push(v);
    }
    (text, events)
}

#[tokio::test]
async fn chat_is_rendered_tokenized_generated_and_decoded_by_the_gateway() {
    let dir = temp_dir("chat");
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap();
    let e = engine(&["--eos-token-id", &eos.to_string()]);
    let gw = gateway_for(&e, &dir).await;

    let content = "hello world, héllo 世界 🎉";
    let prompt = chat_prompt(&tok, content);
    let expected = tok.decode(&echo(&prompt, 200, Some(eos)), true).unwrap();
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "echo-model", "max_tokens": 200,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "echo-model");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], expected.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // The engine's output ends with the EOS id it stopped on: counted, not shown.
    let generated = echo(&prompt, 200, Some(eos)).len() + 1;
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], generated);
    assert_eq!(v["usage"]["total_tokens"], prompt.len() + generated);
    // The engine got the rendered, tokenized prompt and the OpenAI defaults.
    logged(&e, &format!("input_ids={}", prompt.len())).await;
    logged(&e, "max_new_tokens=200").await;
}

#[tokio::test]
async fn chat_streams_role_deltas_finish_usage_and_done() {
    let dir = temp_dir("stream");
    let tok = write_tokenizer(&dir);
    let e = engine(&["--itl-ms", "2"]);
    let gw = gateway_for(&e, &dir).await;
    let content = "héllo 世界 🎉 hello world";
    let prompt = chat_prompt(&tok, content);
    let ids = echo(&prompt, 40, None);
    let expected = tok.decode(&ids, true).unwrap();
    let body = json!({"model": "echo-model", "max_tokens": 40, "stream": true,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": content}]});
    for h2 in [false, true] {
        let c = common::client(h2);
        let resp = start_json(&c, &format!("{}/v1/chat/completions", gw.url()), &body).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
        assert!(frames.clean_end(), "{frames:?}");
        let sse = frames.text();
        assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
        let (text, events) = stream_text(&sse);
        assert_eq!(text, expected);
        assert_eq!(
            events[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        let finish = &events[events.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "length");
        let usage = events.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(usage["usage"]["completion_tokens"], 40);
        assert!(events
            .iter()
            .all(|e| e["object"] == "chat.completion.chunk"));
        let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]), "one id per stream");
    }
}

#[tokio::test]
async fn completions_stop_strings_and_length() {
    let dir = temp_dir("completions");
    let tok = write_tokenizer(&dir);
    let e = engine(&[]);
    let gw = gateway_for(&e, &dir).await;
    let url = format!("{}/v1/completions", gw.url());
    let prompt = "hello world hello world";
    let ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();

    // Length: the first 5 echoed ids.
    let reply = post_json(&url, &json!({"prompt": prompt, "max_tokens": 5})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(
        v["choices"][0]["text"],
        tok.decode(&ids[..5], true).unwrap().as_str()
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);

    // A stop string, matched by the gateway on the decoded text: cut before it, and the
    // engine is told to stop.
    let reply = post_json(
        &url,
        &json!({"prompt": prompt, "max_tokens": 500, "stop": ["o w"]}),
    )
    .await;
    let v = reply.json();
    assert_eq!(v["choices"][0]["text"], "hell");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(
        eventually(Duration::from_secs(5), || async {
            e.log_text().contains("abort request_id=cmpl-")
        })
        .await,
        "no Abort after the stop string:\n{}",
        e.log_text()
    );

    // Streamed, the stop string never shows, not even in part.
    let c = common::client(false);
    let body = json!({"prompt": prompt, "max_tokens": 500, "stop": "world", "stream": true});
    let resp = start_json(&c, &url, &body).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    let (text, events) = stream_text(&frames.text());
    assert_eq!(text, "hello ");
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert!(
        events.iter().all(|e| e.get("usage").is_none()),
        "usage only when asked"
    );

    // Token ids as the prompt go to the engine as they are.
    let reply = post_json(&url, &json!({"prompt": [104, 105], "max_tokens": 3})).await;
    assert_eq!(
        reply.json()["choices"][0]["text"],
        tok.decode(&[104, 105, 104], true).unwrap().as_str()
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_aborts_the_generation() {
    let dir = temp_dir("leave");
    write_tokenizer(&dir);
    let e = engine(&["--itl-ms", "50"]);
    let gw = gateway_for(&e, &dir).await;
    support::echo::leaving_client_stops_the_engine(&gw, &e).await;
}

#[tokio::test]
async fn engine_errors_and_bad_requests_are_clear() {
    let dir = temp_dir("errors");
    write_tokenizer(&dir);
    let e = engine(&["--generate-error", "out of memory"]);
    let gw = gateway_for(&e, &dir).await;
    let url = format!("{}/v1/chat/completions", gw.url());
    let msgs = json!([{"role": "user", "content": "hi"}]);

    let reply = post_json(&url, &json!({"messages": msgs})).await;
    support::assert_gateway_error(&reply, 502, "worker_generation_failed");
    assert!(reply.text().contains("out of memory"), "{}", reply.text());

    for (body, says) in [
        (
            json!({"messages": msgs, "n": 17}),
            "n must be between 1 and 16",
        ),
        (json!({"model": "m"}), "messages is required"),
        (json!({"messages": msgs, "temperature": 9}), "temperature"),
    ] {
        let reply = post_json(&url, &body).await;
        support::assert_gateway_error(&reply, 400, "invalid_request");
        assert!(reply.text().contains(says), "{}", reply.text());
    }
    // A template that raises is the client's 400 with the template's words.
    let bad = temp_dir("raise");
    write_tokenizer(&bad);
    let config = json!({"eos_token": IM_END,
        "chat_template": "{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}x"});
    std::fs::write(bad.join("tokenizer_config.json"), config.to_string()).unwrap();
    let e2 = engine(&[]);
    let gw2 = gateway_for(&e2, &bad).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw2.url()),
        &json!({"messages": msgs}),
    )
    .await;
    support::assert_gateway_error(&reply, 400, "chat_template_error");
    assert!(
        reply.text().contains("a system message must come first"),
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn grpc_workers_register_with_what_the_engine_reports() {
    let dir = temp_dir("register");
    write_tokenizer(&dir);
    let e = engine(&["--max-context", "4096"]);
    let gw = gateway_for(&e, &dir).await;
    let workers = common::listed_workers(&gw).await;
    assert_eq!(workers.len(), 1);
    let w = &workers[0];
    assert_eq!(w["url"], grpc_url(&e));
    assert_eq!(w["runtime_type"], "sglang");
    assert_eq!(w["connection_mode"], "grpc");
    assert_eq!(w["model_id"], "echo-model");
    assert_eq!(w["status"], "ready");

    // Without a tokenizer the worker cannot be served: registration fails and says why.
    let e2 = engine(&[]);
    let gw2 = gateway(&["--worker-urls", &grpc_url(&e2)]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw2.log_text().contains("no tokenizer for this gRPC worker")
        })
        .await,
        "{}",
        gw2.log_text()
    );
    assert_eq!(get(&format!("{}/readiness", gw2.url())).await.status, 503);
}

#[tokio::test]
async fn an_unhealthy_engine_leaves_rotation() {
    let dir = temp_dir("health");
    write_tokenizer(&dir);
    let e = engine(&["--fail-health"]);
    let gw = gateway(&[
        "--worker-urls",
        &grpc_url(&e),
        "--model-path",
        dir.to_str().unwrap(),
        "--health-check-interval-secs",
        "1",
        "--health-failure-threshold",
        "1",
    ]);
    let url = format!("{}/readiness", gw.url());
    assert!(
        eventually(Duration::from_secs(15), || {
            let url = url.clone();
            async move { get(&url).await.status == 503 }
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::listed_workers(&gw)
                .await
                .first()
                .is_some_and(|w| w["status"] == "not_ready")
        })
        .await,
        "{}",
        gw.log_text()
    );
}

#[tokio::test]
async fn generation_metrics_are_recorded_for_grpc() {
    let dir = temp_dir("metrics");
    write_tokenizer(&dir);
    let e = engine(&["--itl-ms", "5"]);
    let gw = gateway_for(&e, &dir).await;
    let c = common::client(false);
    let body =
        json!({"model": "echo-model", "prompt": "hello world", "max_tokens": 8, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(10)).await;
    assert!(frames.clean_end());
    let text = scrape(&gw).await;
    for series in [
        "gw_router_ttft_seconds_count{router_type=\"grpc\"",
        "gw_router_tpot_seconds_count{router_type=\"grpc\"",
        "gw_router_generation_duration_seconds_count{router_type=\"grpc\"",
        "gw_router_tokens_total{router_type=\"grpc\"",
        // Every worker is a gRPC engine: the body is read whole for the chat pipeline.
        "gw_router_request_body_path_total{path=\"buffered\",reason=\"grpc\"} 1",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    let output = text
        .lines()
        .find(|l| l.starts_with("gw_router_tokens_total{") && l.contains("token_type=\"output\""))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(output.ends_with(" 8"), "{output}");
}

#[tokio::test]
async fn tokenize_and_detokenize_are_answered_by_the_gateway() {
    let dir = temp_dir("tokenize");
    let tok = write_tokenizer(&dir);
    let e = engine(&["--max-context", "2048"]);
    let gw = gateway_for(&e, &dir).await;
    let text = "hello world, héllo 🎉";
    let ids = tok.encode(text, true).unwrap().get_ids().to_vec();
    let reply = post_json(
        &format!("{}/v1/tokenize", gw.url()),
        &json!({"model": "echo-model", "prompt": text}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["tokens"], json!(ids));
    assert_eq!(v["count"], ids.len());
    assert_eq!(v["max_model_len"], 2048);
    let reply = post_json(
        &format!("{}/v1/detokenize", gw.url()),
        &json!({"model": "echo-model", "tokens": ids}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["text"], text);
    let reply = post_json(&format!("{}/v1/tokenize", gw.url()), &json!({"text": 1})).await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
    assert!(
        !e.log_text().contains("generate request_id"),
        "the engine was not called"
    );
}

#[tokio::test]
async fn generate_speaks_sglang_native_shapes() {
    let dir = temp_dir("generate");
    let tok = write_tokenizer(&dir);
    let e = engine(&[]);
    let gw = gateway_for(&e, &dir).await;
    let url = format!("{}/generate", gw.url());
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    let echoed = echo(&ids, 6, None);

    let reply = post_json(
        &url,
        &json!({"text": "hello world", "sampling_params": {"max_new_tokens": 6, "temperature": 0}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["text"], tok.decode(&echoed, true).unwrap().as_str());
    assert_eq!(v["output_ids"], json!(echoed));
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 6})
    );
    assert_eq!(v["meta_info"]["prompt_tokens"], ids.len());
    assert_eq!(v["meta_info"]["completion_tokens"], 6);

    // Streamed: every event repeats the whole text so far; the last one says why it ended.
    let c = common::client(false);
    let body = json!({"input_ids": ids, "stream": true, "sampling_params": {"max_new_tokens": 6}});
    let resp = start_json(&c, &url, &body).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(10)).await;
    let sse = frames.text();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    let events: Vec<Value> = sse
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let texts: Vec<&str> = events
        .iter()
        .map(|e| e["text"].as_str().unwrap_or_else(|| panic!("{sse}")))
        .collect();
    assert!(
        texts.windows(2).all(|w| w[1].starts_with(w[0])),
        "{texts:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["text"], tok.decode(&echoed, true).unwrap().as_str());
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "length");
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| e["meta_info"]["finish_reason"].is_null()));
}
