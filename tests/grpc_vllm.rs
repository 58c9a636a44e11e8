//! vLLM's gRPC engine service, black box: tollgate in front of the bundled `grpc-engine`
//! serving `vllm.grpc.engine.VllmEngine` (`--service vllm`, mock mode). Registration finds
//! the service by detection (SGLang's answers UNIMPLEMENTED, vLLM's answers), and the same
//! chat pipeline serves it: the texts expected here are `decode(ids)` of what the test's
//! own tokenizer makes of the prompt, as in `tests/grpc.rs`.

use crate::common;
use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, post_json, Proc};
use serde_json::json;
use support::echo::{chat_prompt, echo, gateway_for, grpc_url, logged};
use support::{chat_delta_text, read_frames, start_json, stream_events};

fn temp_dir(name: &str) -> PathBuf {
    support::echo::temp_dir("vllm", name)
}

/// The mock engine speaking vLLM's service, serving `echo-model`.
fn vllm_engine(args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--service", "vllm", "--model", "echo-model"], args].concat())
}

#[tokio::test]
async fn a_vllm_engine_is_detected_and_serves_chat() {
    let dir = temp_dir("chat");
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap();
    let e = vllm_engine(&["--eos-token-id", &eos.to_string(), "--max-context", "2048"]);
    let gw = gateway_for(&e, &dir).await;

    let workers = common::listed_workers(&gw).await;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["runtime_type"], "vllm", "{}", workers[0]);
    assert_eq!(workers[0]["connection_mode"], "grpc");
    assert_eq!(workers[0]["model_id"], "echo-model");

    let content = "hello world, héllo 世界 🎉";
    let prompt = chat_prompt(&tok, content);
    let ids = echo(&prompt, 200, Some(eos));
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "echo-model", "max_tokens": 200, "top_k": 40,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        tok.decode(&ids, true).unwrap().as_str()
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    // The EOS id the engine stopped on is counted, not shown.
    assert_eq!(v["usage"]["completion_tokens"], ids.len() + 1);
    // vLLM's request shape: the engine read top_k and max_tokens as sent.
    logged(&e, "max_new_tokens=200").await;
    logged(&e, "top_k=40").await;
    logged(&e, &format!("input_ids={}", prompt.len())).await;
}

#[tokio::test]
async fn a_vllm_stream_is_not_doubled_by_the_repeating_complete() {
    let dir = temp_dir("stream");
    let tok = write_tokenizer(&dir);
    let e = vllm_engine(&["--itl-ms", "1"]);
    let gw = gateway_for(&e, &dir).await;
    let content = "héllo 世界 🎉 hello";
    let prompt = chat_prompt(&tok, content);
    let expected = tok.decode(&echo(&prompt, 30, None), true).unwrap();
    let body = json!({"max_tokens": 30, "stream": true,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": content}]});
    let c = common::client(false);
    let resp = start_json(&c, &format!("{}/v1/chat/completions", gw.url()), &body).await;
    assert_eq!(resp.status(), 200);
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let sse = frames.text();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    let events = stream_events(&sse);
    let text = chat_delta_text(&events);
    assert_eq!(text, expected);
    let finish = &events[events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], 30);

    // Non-streamed too: the complete's repeated ids are not decoded twice.
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 7}),
    )
    .await;
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    assert_eq!(
        reply.json()["choices"][0]["text"],
        tok.decode(&echo(&ids, 7, None), true).unwrap().as_str(),
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["usage"]["completion_tokens"], 7);
}

#[tokio::test]
async fn vllm_refusals_failures_and_a_client_that_leaves() {
    let dir = temp_dir("errors");
    write_tokenizer(&dir);
    // The engine advertises an 8-token window. A longer prompt is refused by the gateway
    // before dispatch; one that fills the window leaves the engine no room, and its
    // INVALID_ARGUMENT is the client's 400.
    let small = vllm_engine(&["--max-context", "8"]);
    let gw = gateway_for(&small, &dir).await;
    let url = format!("{}/v1/completions", gw.url());
    let reply = post_json(&url, &json!({"prompt": vec![104; 9], "max_tokens": 2})).await;
    support::assert_gateway_error(&reply, 400, "context_length_exceeded");
    assert!(
        reply.text().contains("context window is 8"),
        "{}",
        reply.text()
    );
    assert!(
        !small.log_text().contains("generate request_id"),
        "dispatched: {}",
        small.log_text()
    );
    let reply = post_json(&url, &json!({"prompt": vec![104; 8], "max_tokens": 2})).await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
    assert!(
        reply.text().contains("context window 8"),
        "{}",
        reply.text()
    );

    // A client that leaves mid-stream: the engine is told with vLLM's Abort.
    let e = vllm_engine(&["--itl-ms", "50"]);
    let gw = gateway_for(&e, &dir).await;
    support::echo::leaving_client_stops_the_engine(&gw, &e).await;

    // An engine failure (INTERNAL) is the gateway's 502.
    let failing = vllm_engine(&["--generate-error", "out of memory"]);
    let gw2 = gateway_for(&failing, &dir).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw2.url()),
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    support::assert_gateway_error(&reply, 502, "worker_generation_failed");
    assert!(reply.text().contains("out of memory"), "{}", reply.text());
}

#[tokio::test]
async fn an_explicit_runtime_skips_detection_and_a_wrong_one_fails_registration() {
    let dir = temp_dir("explicit");
    write_tokenizer(&dir);
    let e = vllm_engine(&[]);
    let gw = gateway(&["--model-path", dir.to_str().unwrap()]);
    let workers = format!("{}/workers", gw.url());

    // Named as vLLM: registered without asking SGLang's service first.
    let reply = post_json(
        &workers,
        &json!({"url": grpc_url(&e), "runtime_type": "vllm"}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::listed_workers(&gw)
                .await
                .iter()
                .any(|w| w["runtime_type"] == "vllm" && w["status"] == "ready")
        })
        .await,
        "{}",
        gw.log_text()
    );

    // Named as SGLang, the vLLM engine answers UNIMPLEMENTED: registration fails, saying so.
    let other = vllm_engine(&[]);
    let reply = post_json(
        &workers,
        &json!({"url": grpc_url(&other), "runtime_type": "sglang"}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw.log_text().contains("UNIMPLEMENTED")
        })
        .await,
        "{}",
        gw.log_text()
    );

    // Named as TensorRT-LLM, too: only that service is asked, and it is not there.
    let reply = post_json(
        &workers,
        &json!({"url": grpc_url(&other), "runtime_type": "trtllm"}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw.log_text()
                .contains("tried trtllm; each answered UNIMPLEMENTED")
        })
        .await,
        "{}",
        gw.log_text()
    );
    assert_eq!(common::listed_workers(&gw).await.len(), 1);
}
