//! Prefill/decode pairs of gRPC engines ("sequential PD"), black box: the gateway under
//! `--pd-disaggregation` in front of the bundled `grpc-engine` in prefill and decode roles
//! (`--disaggregation-mode`). The engines check the pair from their side: a prefill keeps
//! the prompt's ids under the key its handoff names and a decode fetches them over the
//! prefill's side channel and compares them with its own prompt, so a pair sent different
//! prompts, rooms or parameters fails. SGLang's service: both legs at once with the same
//! bootstrap fields; vLLM's: prefill for one token, then decode with the
//! `kv_transfer_params` it answered. Every route, streamed and not; a failed or stalled
//! prefill ends the exchange promptly with the decode leg cancelled; the `pd_admission`
//! stage waits for and sheds on decode rooms.

use crate::common;
use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::tokenizer::{write_tokenizer, IM_END};
use common::{client, eventually, gateway, get, post_json, sample, scrape, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{chat_prompt, echo, grpc_url, logged};
use support::{assert_gateway_error, generation_body, read_frames, start_json};

const ROUTES: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/generate",
    "/v1/messages",
];

fn temp_dir(name: &str) -> PathBuf {
    support::echo::temp_dir("grpc-pd", name)
}

/// An engine of `service` in `role`, serving `echo-model`; a prefill's bootstrap port is
/// read from its log.
fn engine(service: &str, role: &str, eos: u32, extra: &[&str]) -> Proc {
    let eos = eos.to_string();
    let args = [
        &[
            "--service",
            service,
            "--model",
            "echo-model",
            "--eos-token-id",
            &eos,
            "--disaggregation-mode",
            role,
        ][..],
        extra,
    ]
    .concat();
    common::grpc_engine(&args)
}

/// The port of a prefill engine's KV side channel (its `BOOTSTRAP` line).
async fn bootstrap_port(prefill: &Proc) -> u16 {
    assert!(
        eventually(Duration::from_secs(5), || async {
            prefill.log_text().contains("BOOTSTRAP ")
        })
        .await,
        "no BOOTSTRAP line:\n{}",
        prefill.log_text()
    );
    let log = prefill.log_text();
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("BOOTSTRAP "))
        .unwrap_or_default();
    line.rsplit(':').next().unwrap_or_default().parse().unwrap()
}

/// A gateway pairing `prefill` and `decode`, tokenizing with the tokenizer in `dir`.
async fn pd_gateway(prefill: &Proc, decode: &Proc, dir: &Path, extra: &[&str]) -> Proc {
    let port = bootstrap_port(prefill).await.to_string();
    let (p, d) = (grpc_url(prefill), grpc_url(decode));
    let mut args = vec![
        "--pd-disaggregation",
        "--prefill",
        &p,
        &port,
        "--decode",
        &d,
        "--model-path",
        dir.to_str().unwrap(),
        "--health-check-interval-secs",
        "1",
    ];
    args.extend_from_slice(extra);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    gw
}

/// Lines of `engine`'s log that start with `word`.
fn lines(engine: &Proc, word: &str) -> Vec<String> {
    engine
        .log_text()
        .lines()
        .filter(|l| l.starts_with(word))
        .map(str::to_owned)
        .collect()
}

/// Waits until `engine` has logged `count` lines starting with `word` (its output is read
/// by a background thread, which may lag behind the answers under load).
async fn logged_lines(engine: &Proc, word: &str, count: usize) -> Vec<String> {
    assert!(
        eventually(Duration::from_secs(10), || async {
            lines(engine, word).len() >= count
        })
        .await,
        "{} {word} lines of {count}:\n{}",
        lines(engine, word).len(),
        engine.log_text()
    );
    lines(engine, word)
}

/// The value of `key=` in `line`.
fn field<'l>(line: &'l str, key: &str) -> &'l str {
    line.split(' ')
        .find_map(|part| part.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_default()
}

fn is_stream(reply: &common::Reply) -> bool {
    reply
        .headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// Every route, streamed and not, answers 200 through the pair; the chat text is what the
/// decode engine generated from the whole prompt.
async fn every_route_is_served(gw: &Proc, dir: &Path) {
    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let eos = tok.token_to_id(IM_END).unwrap();
    for path in ROUTES {
        for stream in [false, true] {
            let mut body = generation_body(path, stream, Value::Null);
            body["model"] = json!("echo-model");
            let reply = post_json(&format!("{}{path}", gw.url()), &body).await;
            assert_eq!(
                reply.status,
                200,
                "{path} stream={stream}: {}",
                reply.text()
            );
            assert_eq!(is_stream(&reply), stream, "{path}: {}", reply.text());
            if stream {
                assert!(
                    !reply.text().contains("\"error\""),
                    "{path}: {}",
                    reply.text()
                );
            }
        }
    }
    let content = "hello there";
    let prompt = chat_prompt(&tok, content);
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "echo-model", "max_tokens": 12,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        tok.decode(&echo(&prompt, 12, Some(eos)), true)
            .unwrap()
            .as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_pairs_meet_in_one_room_per_request_on_every_route() {
    let dir = temp_dir("sglang");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("sglang", "prefill", eos, &["--ttft-ms", "20"]);
    let d = engine("sglang", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;

    let workers = common::listed_workers(&gw).await;
    assert_eq!(workers.len(), 2, "{workers:?}");
    // Information routes go to an HTTP prefill worker; a gRPC deployment has none (spec 1).
    for path in ["/get_model_info", "/get_server_info"] {
        assert_gateway_error(
            &get(&format!("{}{path}", gw.url())).await,
            501,
            "not_implemented",
        );
    }
    every_route_is_served(&gw, &dir).await;
    let served = ROUTES.len() * 2 + 1;

    // Both legs named the prefill's bootstrap server and the same room; the decode found
    // the prefill's cache there, for its own prompt; every request had a room of its own.
    let port = bootstrap_port(&p).await;
    assert_eq!(logged_lines(&d, "kv_fetched", served).await.len(), served);
    let prefill_legs = logged_lines(&p, "handoff", served).await;
    let decode_legs = logged_lines(&d, "handoff", served).await;
    assert_eq!(prefill_legs.len(), served, "{prefill_legs:?}");
    let rooms: std::collections::HashSet<String> = prefill_legs
        .iter()
        .map(|l| field(l, "kv").to_owned())
        .collect();
    assert_eq!(
        rooms.len(),
        served,
        "rooms are not unique: {prefill_legs:?}"
    );
    for room in &rooms {
        assert!(
            room.starts_with(&format!("bootstrap:127.0.0.1:{port}/")),
            "{room}"
        );
        assert!(
            decode_legs.iter().any(|l| field(l, "kv") == room),
            "decode never got {room}: {decode_legs:?}"
        );
    }
    // The prefill generated one token per leg.
    let generated = logged_lines(&p, "finish", served).await;
    assert!(
        generated
            .iter()
            .all(|l| field(l, "completion_tokens") == "1"),
        "{generated:?}"
    );

    let metrics = scrape(&gw).await;
    // The model label is `unknown`: prefill/decode dispatch does not read the body's
    // model to route (as over HTTP).
    let labels = r#"{backend_type="pd",model="unknown",runtime="sglang"}"#;
    for family in [
        "gw_pd_prefill_duration_seconds_count",
        "gw_pd_kv_transfer_duration_seconds_count",
        "gw_pd_ttft_seconds_count",
    ] {
        assert_eq!(
            sample(&metrics, &format!("{family}{labels}")),
            Some(served as f64),
            "{family}:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_pairs_prefill_one_token_then_decode_with_its_kv_transfer_params() {
    let dir = temp_dir("vllm");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("vllm", "prefill", eos, &[]);
    let d = engine("vllm", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;
    every_route_is_served(&gw, &dir).await;
    let served = ROUTES.len() * 2 + 1;

    let prefill_legs = logged_lines(&p, "handoff", served).await;
    assert_eq!(prefill_legs.len(), served, "{prefill_legs:?}");
    for leg in &prefill_legs {
        assert!(
            field(leg, "kv").contains(r#""do_remote_decode":true"#),
            "{leg}"
        );
    }
    assert!(logged_lines(&p, "generate", served)
        .await
        .iter()
        .all(|l| field(l, "max_new_tokens") == "1"));
    assert_eq!(logged_lines(&d, "kv_fetched", served).await.len(), served);
    // Each decode leg named the prefill request its cache came from.
    for leg in logged_lines(&d, "handoff", served).await {
        assert!(
            field(&leg, "kv").contains(r#""do_remote_prefill":true"#),
            "{leg}"
        );
    }
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(&metrics, "gw_pd_kv_transfer_failures_total"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &metrics,
            r#"gw_pd_kv_transfer_duration_seconds_count{backend_type="pd",model="unknown",runtime="vllm"}"#
        ),
        Some(served as f64),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_prefill_without_kv_transfer_params_is_counted_and_decode_recomputes() {
    let dir = temp_dir("vllm-omit");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("vllm", "prefill", eos, &["--omit-kv-params"]);
    let d = engine("vllm", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &generation_body("/v1/chat/completions", false, Value::Null),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    logged(&d, "kv_recompute request_id=chatcmpl-").await;
    assert!(lines(&d, "kv_fetched").is_empty());
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(&metrics, "gw_pd_kv_transfer_failures_total"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prefill_ends_the_exchange_at_once_and_cancels_decode() {
    let dir = temp_dir("fail");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine(
        "sglang",
        "prefill",
        eos,
        &["--generate-error", "prefill exploded"],
    );
    // A decode that would wait 10 s for a cache that never comes.
    let d = engine("sglang", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;
    for stream in [false, true] {
        let started = Instant::now();
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &generation_body("/v1/chat/completions", stream, Value::Null),
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert!(
            reply.text().contains("prefill exploded"),
            "{}",
            reply.text()
        );
    }
    // The decode legs were given up, not left waiting.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let cancelled = lines(&d, "cancelled").len() + lines(&d, "abort").len();
            cancelled >= 2
        })
        .await,
        "{}",
        d.log_text()
    );
    assert!(lines(&d, "kv_fetched").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_prefill_times_out_and_cancels_decode() {
    let dir = temp_dir("stall");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("vllm", "prefill", eos, &["--ttft-ms", "60000"]);
    let d = engine("vllm", "decode", eos, &[]);
    let gw = pd_gateway(
        &p,
        &d,
        &dir,
        &["--stream-stall-timeout-secs", "1", "--disable-retries"],
    )
    .await;
    let started = Instant::now();
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &generation_body("/v1/completions", false, Value::Null),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?} {}",
        started.elapsed(),
        reply.text()
    );
    assert!(reply.status >= 500, "{} {}", reply.status, reply.text());
    // The stalled prefill was stopped; the decode leg never started.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !lines(&p, "cancelled").is_empty() || !lines(&p, "abort").is_empty()
        })
        .await,
        "{}",
        p.log_text()
    );
    assert!(lines(&d, "generate").is_empty(), "{}", d.log_text());
}

/// Waits until the gateway's load monitor has read `decode`'s window.
async fn window_known(gw: &Proc) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            let v = get(&format!("{}/get_loads", gw.url())).await.json();
            v.to_string().contains("\"max_running_requests\":1")
        })
        .await,
        "the load monitor never read the decode worker's window"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pd_admission_waits_for_a_decode_room_then_sheds() {
    let dir = temp_dir("admission");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("sglang", "prefill", eos, &[]);
    let d = engine(
        "sglang",
        "decode",
        eos,
        &["--max-running-requests", "1", "--itl-ms", "50"],
    );
    let gw = pd_gateway(
        &p,
        &d,
        &dir,
        &[
            "--pd-admission-wait-secs",
            "2",
            "--load-monitor-interval",
            "1",
        ],
    )
    .await;
    window_known(&gw).await;
    let url = format!("{}/v1/completions", gw.url());
    let c = client(false);
    let body = |max: u32| json!({"prompt": "hello world", "max_tokens": max, "stream": true});

    // A short generation holds the one room; the next dispatch waits for it and is served.
    let first = start_json(&c, &url, &body(10)).await;
    let second = post_json(&url, &json!({"prompt": "hello world", "max_tokens": 3})).await;
    assert_eq!(second.status, 200, "{}", second.text());
    let frames = read_frames(&mut first.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");

    // A long one holds it past the wait: the next is shed.
    let long = start_json(&c, &url, &body(200)).await;
    let started = Instant::now();
    let shed = post_json(&url, &json!({"prompt": "hello world", "max_tokens": 3})).await;
    assert_gateway_error(&shed, 503, "worker_overload_protection_shed");
    assert!(shed.headers.get("retry-after").is_some());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1800) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    drop(long);

    // More rooms than the window: shed without waiting.
    let started = Instant::now();
    let many = post_json(
        &url,
        &json!({"prompt": "hello world", "max_tokens": 3, "n": 2}),
    )
    .await;
    assert_gateway_error(&many, 503, "worker_overload_protection_shed");
    assert!(started.elapsed() < Duration::from_secs(1));

    let metrics = scrape(&gw).await;
    assert_eq!(sample(&metrics, "gw_pd_admission_waits_total"), Some(2.0));
    assert_eq!(sample(&metrics, "gw_pd_admission_sheds_total"), Some(2.0));
    assert_eq!(
        sample(
            &metrics,
            r#"gw_worker_overload_shed_total{stage="pd_admission"}"#
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_needs_a_ready_prefill_and_decode_engine() {
    let dir = temp_dir("ready");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("sglang", "prefill", eos, &[]);
    let mut d = engine("sglang", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;
    assert_eq!(get(&format!("{}/readiness", gw.url())).await.status, 200);
    d.terminate(Duration::from_secs(5));
    assert!(
        eventually(Duration::from_secs(15), || async {
            get(&format!("{}/readiness", gw.url())).await.status == 503
        })
        .await,
        "readiness stayed 200 without a decode engine"
    );
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &generation_body("/v1/chat/completions", false, Value::Null),
    )
    .await;
    assert_gateway_error(&reply, 503, "no_available_workers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_run_every_model_turn_on_the_pair_and_epd_fleets_refuse_them() {
    let dir = temp_dir("responses");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let p = engine("vllm", "prefill", eos, &[]);
    let d = engine("vllm", "decode", eos, &[]);
    let gw = pd_gateway(&p, &d, &dir, &[]).await;
    let url = format!("{}/v1/responses", gw.url());

    let first = post_json(
        &url,
        &json!({"model": "echo-model", "input": "hello there", "max_output_tokens": 200}),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let first = first.json();
    assert_eq!(first["status"], "completed", "{first}");
    assert!(!support::response_text(&first).is_empty(), "{first}");
    // A stored response chains: the next turn's prompt holds the first exchange.
    let second = post_json(
        &url,
        &json!({"model": "echo-model", "input": "and again", "max_output_tokens": 200,
                "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(second.json()["previous_response_id"], first["id"]);
    let c = client(false);
    let streamed = start_json(
        &c,
        &url,
        &json!({"model": "echo-model", "input": "hello", "max_output_tokens": 200, "stream": true}),
    )
    .await;
    assert_eq!(streamed.status(), 200);
    let frames = read_frames(&mut streamed.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    assert!(
        frames.text().contains("response.completed"),
        "{}",
        frames.text()
    );

    // Each turn ran its prefill leg, and its decode fetched that prefill's cache.
    assert_eq!(logged_lines(&d, "kv_fetched", 3).await.len(), 3);
    assert_eq!(logged_lines(&p, "handoff", 3).await.len(), 3);
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(
            &metrics,
            r#"gw_pd_prefill_duration_seconds_count{backend_type="pd",model="echo-model",runtime="vllm"}"#
        ),
        Some(3.0),
        "{metrics}"
    );

    // An encode worker makes the fleet EPD: Responses are refused, the rest is served.
    let encoder = common::grpc_engine(&["--service", "vllm", "--model", "echo-model"]);
    let added = post_json(
        &format!("{}/workers", gw.url()),
        &json!({"url": grpc_url(&encoder), "worker_type": "encode"}),
    )
    .await;
    assert_eq!(added.status, 202, "{}", added.text());
    assert!(
        eventually(Duration::from_secs(20), || async {
            get(&format!("{}/workers", gw.url())).await.json()["total"] == 3
        })
        .await,
        "the encode worker was not registered:\n{}",
        gw.log_text()
    );
    let refused = post_json(&url, &json!({"model": "echo-model", "input": "hello"})).await;
    assert_gateway_error(&refused, 501, "not_implemented");
    let messages = post_json(
        &format!("{}/v1/messages", gw.url()),
        &generation_body("/v1/messages", false, Value::Null),
    )
    .await;
    assert_eq!(messages.status, 200, "{}", messages.text());
}

/// The listed worker of `role`.
async fn listed(gw: &Proc, role: &str) -> Value {
    common::listed_workers(gw)
        .await
        .into_iter()
        .find(|w| w["worker_type"] == role)
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_engines_kv_configuration_is_read_and_its_engine_id_reread_on_recovery() {
    let dir = temp_dir("kv-facts");
    let eos = write_tokenizer(&dir).token_to_id(IM_END).unwrap();
    let kv = |id: &'static str| ["--kv-connector", "NixlConnector", "--kv-engine-id", id];
    let p = engine("vllm", "prefill", eos, &kv("eng-p1"));
    let port = common::free_port().to_string();
    let decode_at = |id: &'static str| {
        engine(
            "vllm",
            "decode",
            eos,
            &[&kv(id)[..], &["--port", &port]].concat(),
        )
    };
    let mut d = decode_at("eng-d1");
    let gw = pd_gateway(&p, &d, &dir, &[]).await;

    // What the engines report fills the spec fields left empty (spec 1).
    let prefill = listed(&gw, "prefill").await;
    assert_eq!(prefill["kv_connector"], "NixlConnector", "{prefill}");
    assert_eq!(prefill["kv_role"], "kv_producer", "{prefill}");
    assert_eq!(prefill["kv_engine_id"], "eng-p1", "{prefill}");
    let decode = listed(&gw, "decode").await;
    assert_eq!(decode["kv_role"], "kv_consumer", "{decode}");
    assert_eq!(decode["kv_engine_id"], "eng-d1", "{decode}");
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &generation_body("/v1/chat/completions", false, Value::Null),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        sample(
            &scrape(&gw).await,
            r#"gw_pd_kv_connector_mode_total{mode="conn_a"}"#
        ),
        Some(1.0)
    );

    // The decode engine restarts with another engine id: read again once it recovers.
    d.terminate(Duration::from_secs(5));
    assert!(
        eventually(Duration::from_secs(15), || async {
            listed(&gw, "decode").await["status"] != "ready"
        })
        .await,
        "the dead decode engine stayed ready"
    );
    let _restarted = decode_at("eng-d2");
    assert!(
        eventually(Duration::from_secs(20), || async {
            let decode = listed(&gw, "decode").await;
            decode["status"] == "ready" && decode["kv_engine_id"] == "eng-d2"
        })
        .await,
        "the recovered decode worker kept its old engine id: {}",
        listed(&gw, "decode").await
    );
}
