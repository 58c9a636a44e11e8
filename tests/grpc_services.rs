//! TensorRT-LLM's, TokenSpeed's and MLX's gRPC services, black box: tollgate in front of
//! the bundled `grpc-engine` speaking each (`--service trtllm|tokenspeed|mlx`, mock mode).
//! Registration finds each by detection in the spec's order (the services before it answer
//! UNIMPLEMENTED), the same chat pipeline serves them, and each one's stream shape (a
//! complete repeating every id, repeating the last step's, or carrying none) yields the
//! text once. `n`, log probabilities and the engines' own answers are in
//! `tests/grpc_choices.rs`; the expected texts are `decode(ids)` of what the test's
//! tokenizer makes of the prompt, as in `tests/grpc.rs`.

use crate::common;
use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, post_json, Proc};
use serde_json::{json, Value};
use support::echo::{chat_prompt, echo, gateway_for, grpc_url, logged};
use support::{read_frames, start_json};

const SERVICES: [&str; 3] = ["trtllm", "tokenspeed", "mlx"];

fn temp_dir(service: &str, name: &str) -> PathBuf {
    support::echo::temp_dir("services", &format!("{service}-{name}"))
}

/// The mock engine speaking `service`, serving `echo-model`.
fn engine(service: &str, args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--service", service, "--model", "echo-model"], args].concat())
}

fn stream_text(sse: &str) -> (String, Vec<Value>) {
    let events: Vec<Value> = sse
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let text = events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .filter_map(|c| c["delta"]["content"].as_str())
        .collect();
    (text, events)
}

#[tokio::test]
async fn every_service_is_detected_and_serves_chat_streamed_and_not() {
    for service in SERVICES {
        let dir = temp_dir(service, "chat");
        let tok = write_tokenizer(&dir);
        let eos = tok.token_to_id(IM_END).unwrap();
        let e = engine(
            service,
            &["--eos-token-id", &eos.to_string(), "--max-context", "2048"],
        );
        let gw = gateway_for(&e, &dir).await;
        let workers = common::listed_workers(&gw).await;
        assert_eq!(workers.len(), 1, "{workers:?}");
        assert_eq!(workers[0]["runtime_type"], service, "{}", workers[0]);
        assert_eq!(workers[0]["connection_mode"], "grpc");
        assert_eq!(workers[0]["model_id"], "echo-model");

        let content = "hello world, héllo 世界 🎉";
        let prompt = chat_prompt(&tok, content);
        let ids = echo(&prompt, 200, Some(eos));
        let expected = tok.decode(&ids, true).unwrap();
        let body = json!({"model": "echo-model", "max_tokens": 200, "top_k": 40,
                          "messages": [{"role": "user", "content": content}]});
        let url = format!("{}/v1/chat/completions", gw.url());
        let reply = post_json(&url, &body).await;
        assert_eq!(reply.status, 200, "{service}: {}", reply.text());
        let v = reply.json();
        assert_eq!(v["choices"][0]["message"]["content"], expected.as_str());
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{service}");
        assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(v["usage"]["completion_tokens"], ids.len() + 1, "{service}");
        logged(&e, "top_k=40").await;
        logged(&e, &format!("input_ids={}", prompt.len())).await;

        // Streamed: whatever the complete carries, nothing is decoded twice.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let c = common::client(false);
        let resp = start_json(&c, &url, &streamed).await;
        assert_eq!(resp.status(), 200);
        let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
        assert!(frames.clean_end(), "{service}: {frames:?}");
        let sse = frames.text();
        assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
        let (text, events) = stream_text(&sse);
        assert_eq!(text, expected, "{service}");
        let finish = &events[events.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "stop", "{service}");
        assert_eq!(
            events.last().unwrap()["usage"]["completion_tokens"],
            ids.len() + 1,
            "{service}"
        );

        // Completions, cut by max_tokens.
        let reply = post_json(
            &format!("{}/v1/completions", gw.url()),
            &json!({"prompt": "hello world", "max_tokens": 7}),
        )
        .await;
        let prompt_ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
        assert_eq!(
            reply.json()["choices"][0]["text"],
            tok.decode(&echo(&prompt_ids, 7, None), true)
                .unwrap()
                .as_str(),
            "{service}: {}",
            reply.text()
        );
        assert_eq!(reply.json()["choices"][0]["finish_reason"], "length");
    }
}

#[tokio::test]
async fn tensorrt_llm_always_gets_a_max_tokens() {
    // The engine has no "up to the window": without the client's max_tokens the gateway
    // sends the room the context window leaves after the prompt.
    let dir = temp_dir("trtllm", "room");
    let tok = write_tokenizer(&dir);
    let e = engine("trtllm", &["--max-context", "64"]);
    let gw = gateway_for(&e, &dir).await;
    let prompt = tok.encode("hello", true).unwrap().get_ids().to_vec();
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello"}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["usage"]["completion_tokens"],
        64 - prompt.len(),
        "{}",
        reply.text()
    );
    logged(&e, &format!("max_new_tokens={}", 64 - prompt.len())).await;
}

#[tokio::test]
async fn refusals_failures_and_clients_that_leave() {
    for service in SERVICES {
        let dir = temp_dir(service, "errors");
        write_tokenizer(&dir);
        // A prompt that fills the 8-token window leaves no room: the engine's
        // INVALID_ARGUMENT is the client's 400.
        let small = engine(service, &["--max-context", "8"]);
        let gw = gateway_for(&small, &dir).await;
        let reply = post_json(
            &format!("{}/v1/completions", gw.url()),
            &json!({"prompt": vec![104; 8], "max_tokens": 2}),
        )
        .await;
        support::assert_gateway_error(&reply, 400, "invalid_request");

        // A client that leaves mid-stream: the engine is told with the service's Abort.
        let e = engine(service, &["--itl-ms", "50"]);
        let gw = gateway_for(&e, &dir).await;
        support::echo::leaving_client_stops_the_engine(&gw, &e).await;

        // An engine failure is the gateway's 502.
        let failing = engine(service, &["--generate-error", "out of memory"]);
        let gw = gateway_for(&failing, &dir).await;
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        support::assert_gateway_error(&reply, 502, "worker_generation_failed");
        assert!(
            reply.text().contains("out of memory"),
            "{service}: {}",
            reply.text()
        );
    }
}

#[tokio::test]
async fn mlx_refuses_n_above_one_before_dispatch() {
    let dir = temp_dir("mlx", "n");
    write_tokenizer(&dir);
    let e = engine("mlx", &[]);
    let gw = gateway_for(&e, &dir).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"n": 2, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
    assert!(
        reply.text().contains("n must be 1 on mlx workers"),
        "{}",
        reply.text()
    );
    assert!(
        !e.log_text().contains("generate request_id"),
        "dispatched: {}",
        e.log_text()
    );
}

#[tokio::test]
async fn unhealthy_engines_leave_the_ready_set() {
    for service in SERVICES {
        let dir = temp_dir(service, "health");
        write_tokenizer(&dir);
        let e = engine(service, &["--fail-health"]);
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
        assert!(
            eventually(Duration::from_secs(15), || async {
                common::listed_workers(&gw)
                    .await
                    .first()
                    .is_some_and(|w| w["status"] == "not_ready")
            })
            .await,
            "{service}: {:?}\n{}",
            common::listed_workers(&gw).await,
            gw.log_text()
        );
    }
}

#[tokio::test]
async fn explicit_runtimes_skip_detection_under_either_spelling() {
    let dir = temp_dir("explicit", "names");
    write_tokenizer(&dir);
    let trt = engine("trtllm", &[]);
    let ts = engine("tokenspeed", &[]);
    // No workers yet: `gateway` returns once it listens.
    let gw = gateway(&["--model-path", dir.to_str().unwrap()]);
    let workers = format!("{}/workers", gw.url());
    for (e, runtime) in [(&trt, "tensorrt-llm"), (&ts, "rt_e")] {
        let reply = post_json(
            &workers,
            &json!({"url": grpc_url(e), "runtime_type": runtime}),
        )
        .await;
        assert_eq!(reply.status, 202, "{}", reply.text());
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            let listed = common::listed_workers(&gw).await;
            ["trtllm", "tokenspeed"].iter().all(|r| {
                listed
                    .iter()
                    .any(|w| w["runtime_type"] == *r && w["status"] == "ready")
            })
        })
        .await,
        "{:?}\n{}",
        common::listed_workers(&gw).await,
        gw.log_text()
    );
    // Named as the wrong service, the engine answers UNIMPLEMENTED: registration fails.
    let other = engine("mlx", &[]);
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
    assert_eq!(common::listed_workers(&gw).await.len(), 2);
}
