//! `grpc-engine`, black box over real HTTP/2: the mock follows its generation rules, its
//! faults and its stdout event lines; Abort and a dropped stream end a generation.
//!
//! The llama.cpp adapter tests at the end need a built llama-server, the SmolLM2 model and
//! its exported tokenizer, so they are `#[ignore]`d; run them with
//!   eval "$(perf/real_engine/fetch.sh)"
//!   export TOLLGATE_REAL_ENGINE_SERVER TOLLGATE_REAL_ENGINE_MODEL TOLLGATE_REAL_ENGINE_TOKENIZER
//!   cargo test --test integration grpc_engine:: -- --ignored --test-threads 1

use crate::common;
use crate::grpc_client;

use std::time::{Duration, Instant};

use common::{grpc_engine, Proc};
use grpc_client::{
    connect, generate, params, request, AbortRequest, End, GetModelInfoRequest, HealthCheckRequest,
    MatchedStop, Response, SamplingParams,
};

/// Waits until the process's output has a line containing `needle` (yielding, so the
/// test's own connection tasks keep running meanwhile).
async fn wait_for_line(proc: &Proc, needle: &str, timeout: Duration) -> String {
    let end = Instant::now() + timeout;
    loop {
        if let Some(line) = proc.log_text().lines().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < end,
            "no line with {needle:?} within {timeout:?}:\n{}",
            proc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn mock_health_and_model_info() {
    let engine = grpc_engine(&[
        "--model",
        "echo-1",
        "--tokenizer-path",
        "/models/echo",
        "--max-context",
        "128",
        "--eos-token-id",
        "2",
        "--eos-token-id",
        "9",
    ]);
    let mut c = connect(engine.addr).await;
    let health = c
        .health_check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(health.healthy, "{health:?}");
    let info = c
        .get_model_info(GetModelInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.served_model_name, "echo-1");
    assert_eq!(info.tokenizer_path, "/models/echo");
    assert_eq!(info.model_path, "/models/echo");
    assert_eq!(info.max_context_length, 128);
    assert_eq!(info.max_req_input_len, 127);
    assert_eq!(info.eos_token_ids, [2, 9]);
    assert!(info.is_generation);
}

#[tokio::test]
async fn mock_fail_health() {
    let engine = grpc_engine(&["--fail-health"]);
    let mut c = connect(engine.addr).await;
    let health = c
        .health_check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!health.healthy);
}

#[tokio::test]
async fn mock_streams_the_prompt_back_and_logs_what_it_was_asked() {
    let engine = grpc_engine(&[]);
    let mut c = connect(engine.addr).await;
    let p = SamplingParams {
        temperature: 0.5,
        top_p: 0.9,
        top_k: 40,
        stop: vec!["a b".into()],
        stop_token_ids: vec![99],
        ..params(Some(5))
    };
    let g = generate(&mut c, request("echo 1", &[5, 6, 7], p, true)).await;
    let chunk_ids: Vec<Vec<u32>> = g.chunks.iter().map(|c| c.token_ids.clone()).collect();
    assert_eq!(chunk_ids, [[5], [6], [7], [5], [6]]);
    let counts: Vec<(i32, i32)> = g
        .chunks
        .iter()
        .map(|c| (c.prompt_tokens, c.completion_tokens))
        .collect();
    assert_eq!(counts, [(3, 1), (3, 2), (3, 3), (3, 4), (3, 5)]);
    let done = g.complete();
    assert_eq!(done.finish_reason, "length");
    assert_eq!((done.prompt_tokens, done.completion_tokens), (3, 5));
    // `_create_completion_response` of the last step: its ids again.
    assert_eq!(done.output_ids, [6]);

    let line = wait_for_line(&engine, "generate request_id=", Duration::from_secs(5)).await;
    assert_eq!(
        line,
        "generate request_id=echo\\u{20}1 input_ids=3 max_new_tokens=5 stream=true \
         temperature=0.5 top_p=0.9 top_k=40 min_p=0 stop_token_ids=[99] stop=[\"a b\"] \
         ignore_eos=false"
    );
    wait_for_line(
        &engine,
        "finish request_id=echo\\u{20}1 reason=length completion_tokens=5",
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn mock_stops_on_eos_and_stop_ids_keeping_the_id() {
    let engine = grpc_engine(&["--eos-token-id", "2"]);
    let mut c = connect(engine.addr).await;
    let g = generate(&mut c, request("eos", &[4, 2, 8], params(Some(10)), true)).await;
    assert_eq!(g.ids(), [4, 2]);
    let done = g.complete();
    assert_eq!(done.finish_reason, "stop");
    assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(2)));
    assert_eq!(done.completion_tokens, 2);

    let p = SamplingParams {
        stop_token_ids: vec![8],
        ignore_eos: false,
        ..params(Some(10))
    };
    let g = generate(&mut c, request("stop-id", &[4, 8], p, true)).await;
    assert_eq!(g.ids(), [4, 8]);
    assert_eq!(
        g.complete().matched_stop,
        Some(MatchedStop::MatchedTokenId(8))
    );

    let p = SamplingParams {
        stop_token_ids: vec![8],
        ignore_eos: true,
        ..params(Some(3))
    };
    let g = generate(&mut c, request("ignore", &[2, 8], p, true)).await;
    assert_eq!(g.ids(), [2, 8, 2]);
    assert_eq!(g.complete().finish_reason, "length");
}

#[tokio::test]
async fn mock_unstreamed_is_one_complete() {
    let engine = grpc_engine(&[]);
    let mut c = connect(engine.addr).await;
    let g = generate(&mut c, request("whole", &[1, 2, 3], params(None), false)).await;
    assert!(g.chunks.is_empty());
    let done = g.complete();
    assert_eq!(done.output_ids.len(), 16);
    assert_eq!(&done.output_ids[..4], [1, 2, 3, 1]);
    assert_eq!(done.completion_tokens, 16);
}

#[tokio::test]
async fn mock_generate_error() {
    // smg's SGLang servicer fails a generation with a status (`context.abort`); its proto
    // has no `GenerateError` any more.
    let engine = grpc_engine(&["--generate-error", "engine on fire"]);
    let mut c = connect(engine.addr).await;
    let g = generate(&mut c, request("e", &[1], params(Some(4)), true)).await;
    match g.end {
        End::Status(status) => {
            assert_eq!(status.code(), tonic::Code::Internal);
            assert_eq!(status.message(), "engine on fire");
        }
        other => panic!("{other:?}"),
    }
    // And a request the engine refuses is INVALID_ARGUMENT (its 400).
    let engine = grpc_engine(&["--max-context", "4"]);
    let mut c = connect(engine.addr).await;
    let g = generate(&mut c, request("long", &[1, 2, 3, 4], params(None), true)).await;
    match g.end {
        End::Status(status) => assert_eq!(status.code(), tonic::Code::InvalidArgument),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn mock_drop_after_breaks_the_stream_with_a_status() {
    let engine = grpc_engine(&["--drop-after", "3"]);
    let mut c = connect(engine.addr).await;
    let g = generate(&mut c, request("d", &[1, 2], params(Some(10)), true)).await;
    assert_eq!(g.ids(), [1, 2, 1]);
    match g.end {
        End::Status(status) => assert_eq!(status.code(), tonic::Code::Internal),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn mock_abort_ends_the_generation_and_is_logged() {
    let engine = grpc_engine(&["--itl-ms", "50"]);
    let mut c = connect(engine.addr).await;
    let mut stream = c
        .generate(request("slow", &[1, 2], params(Some(1000)), true))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(matches!(first.response, Some(Response::Chunk(_))));

    // A second generation under a live id is refused.
    let twin = generate(&mut c, request("slow", &[1], params(Some(1)), true)).await;
    match twin.end {
        End::Status(status) => assert_eq!(status.code(), tonic::Code::AlreadyExists),
        other => panic!("{other:?}"),
    }

    let aborted = c
        .abort(AbortRequest {
            request_id: "slow".into(),
            reason: "client left".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(aborted.success);
    // SGLang's servicer marks the request finished and drops its last output
    // (`abort_request`, `_handle_batch_output`): nothing more comes, and the call stays
    // open until the client leaves.
    let next = tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            match stream.message().await {
                Ok(Some(m)) if matches!(m.response, Some(Response::Chunk(_))) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert!(next.is_err(), "{next:?}");
    wait_for_line(
        &engine,
        "abort request_id=slow found=true",
        Duration::from_secs(5),
    )
    .await;

    let unknown = c
        .abort(AbortRequest {
            request_id: "nobody".into(),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!unknown.success);
    wait_for_line(
        &engine,
        "abort request_id=nobody found=false",
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn mock_notices_a_dropped_stream() {
    let engine = grpc_engine(&["--ttft-ms", "10", "--itl-ms", "50"]);
    let mut c = connect(engine.addr).await;
    let mut stream = c
        .generate(request("leaver", &[1], params(Some(1000)), true))
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    drop(stream);
    wait_for_line(
        &engine,
        "cancelled request_id=leaver",
        Duration::from_secs(5),
    )
    .await;
    assert!(!engine.log_text().contains("finish request_id=leaver"));
}

// --- the llama.cpp adapter, against a real llama-server (ignored by default) -----------------

mod llama {
    use std::process::{Command, Stdio};

    use serde_json::{json, Value};
    use tokenizers::Tokenizer;

    use super::*;
    use crate::common::{free_port, get, post_json};

    fn env(name: &str) -> String {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: see the header of this file"))
    }

    /// llama-server as the real-engine suite starts it, killed on drop.
    struct Server {
        child: std::process::Child,
        url: String,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    async fn llama_server() -> Server {
        let port = free_port();
        let child = Command::new(env("TOLLGATE_REAL_ENGINE_SERVER"))
            .args(["-m", &env("TOLLGATE_REAL_ENGINE_MODEL")])
            .args(["--alias", "smollm2", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args([
                "-t",
                "1",
                "-tb",
                "1",
                "-c",
                "4096",
                "--parallel",
                "2",
                "--no-webui",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn llama-server");
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let end = Instant::now() + Duration::from_secs(120);
        while Instant::now() < end {
            let up = tokio::time::timeout(Duration::from_secs(2), async {
                tokio::net::TcpStream::connect(("127.0.0.1", port)).await
            })
            .await;
            if matches!(up, Ok(Ok(_))) && get(&format!("{}/health", server.url)).await.status == 200
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("llama-server not healthy within 120 s");
    }

    fn adapter(server: &Server) -> Proc {
        grpc_engine(&[
            "--llama-server",
            &server.url,
            "--model",
            "smollm2",
            "--tokenizer-path",
            &env("TOLLGATE_REAL_ENGINE_TOKENIZER"),
        ])
    }

    fn tokenizer() -> Tokenizer {
        let dir = env("TOLLGATE_REAL_ENGINE_TOKENIZER");
        Tokenizer::from_file(format!("{dir}/tokenizer.json")).expect("exported tokenizer.json")
    }

    /// The chat prompt for one user message, as the model's template renders it.
    fn chat(user: &str) -> String {
        format!(
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
             Hugging Face<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        )
    }

    const PROMPTS: [&str; 5] = [
        "Name three colours of the rainbow.",
        "Écris une phrase en français avec des accents: été, garçon.",
        "Translate to emoji: happy birthday party 🎉",
        "Write the word hello in Chinese, Japanese and Korean.",
        "What is 12345 + 54321?",
    ];

    /// llama-server's own greedy answer to `ids`, without the adapter.
    async fn direct(server: &Server, ids: &[u32], n: i32, stop: &[&str]) -> Value {
        let body = json!({
            "prompt": ids, "n_predict": n, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "stop": stop, "return_tokens": true, "cache_prompt": true,
        });
        let reply = post_json(&format!("{}/completion", server.url), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()
    }

    fn ids_of(answer: &Value) -> Vec<u32> {
        answer["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("id") as u32)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs llama-server, the model and the exported tokenizer (see the file header)"]
    async fn adapter_health_and_model_info() {
        let server = llama_server().await;
        let engine = adapter(&server);
        let mut c = connect(engine.addr).await;
        let health = c
            .health_check(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(health.healthy, "{health:?}");
        let info = c
            .get_model_info(GetModelInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info.served_model_name, "smollm2");
        assert_eq!(info.max_context_length, 2048, "n_ctx of one of two slots");
        assert_eq!(info.eos_token_ids, [2]);
        assert_eq!(info.bos_token_id, 1);
        assert_eq!(info.vocab_size, 49152);
        assert!(info.model_path.ends_with(".gguf"), "{info:?}");
        assert_eq!(info.tokenizer_path, env("TOLLGATE_REAL_ENGINE_TOKENIZER"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs llama-server, the model and the exported tokenizer (see the file header)"]
    async fn adapter_ids_equal_llama_servers_own_streamed_or_not() {
        let server = llama_server().await;
        let engine = adapter(&server);
        let mut c = connect(engine.addr).await;
        let tok = tokenizer();
        for (i, prompt) in PROMPTS.iter().enumerate() {
            let ids = tok.encode(chat(prompt), false).unwrap().get_ids().to_vec();
            // The Rust tokenizers crate reads the exported file as llama-server tokenizes.
            let theirs = post_json(
                &format!("{}/tokenize", server.url),
                &json!({"content": chat(prompt), "add_special": false, "parse_special": true}),
            )
            .await
            .json();
            let theirs: Vec<u32> = serde_json::from_value(theirs["tokens"].clone()).unwrap();
            assert_eq!(ids, theirs, "tokenization of {prompt:?}");

            let want = direct(&server, &ids, 48, &[]).await;
            let want_ids = ids_of(&want);
            for stream in [true, false] {
                let id = format!("p{i}-{stream}");
                let g = generate(&mut c, request(&id, &ids, params(Some(48)), stream)).await;
                assert_eq!(g.ids(), want_ids, "{prompt:?} stream={stream}: {g:?}");
                let done = g.complete();
                assert_eq!(done.prompt_tokens as usize, ids.len());
                assert_eq!(
                    done.completion_tokens as u64,
                    want["tokens_predicted"].as_u64().unwrap()
                );
                let reason = match want["stop_type"].as_str() {
                    Some("eos") => "stop",
                    _ => "length",
                };
                assert_eq!(done.finish_reason, reason, "{prompt:?}");
                if reason == "stop" {
                    assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(2)));
                }
            }
        }
        // The multi-byte answers (CJK, emoji) made llama-server leave ids out of its stream,
        // and they were put back; none was lost at an end mid-character.
        let log = engine.log_text();
        assert!(log.contains("restored request_id=p"), "{log}");
        assert!(!log.contains("withheld"), "{log}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs llama-server, the model and the exported tokenizer (see the file header)"]
    async fn adapter_stop_strings_and_stop_ids() {
        let server = llama_server().await;
        let engine = adapter(&server);
        let mut c = connect(engine.addr).await;
        let ids = tokenizer()
            .encode(chat(PROMPTS[0]), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let want = direct(&server, &ids, 48, &["."]).await;
        assert_eq!(want["stop_type"], "word");
        let p = SamplingParams {
            stop: vec![".".into()],
            ..params(Some(48))
        };
        let g = generate(&mut c, request("stop-str", &ids, p, true)).await;
        assert_eq!(g.ids(), ids_of(&want));
        let done = g.complete();
        assert_eq!(done.finish_reason, "stop");
        assert_eq!(
            done.matched_stop,
            Some(MatchedStop::MatchedStopStr(".".into()))
        );

        // A stop id the engine lacks: the adapter ends the generation on it, id kept.
        let full = ids_of(&direct(&server, &ids, 48, &[]).await);
        let target = full[3];
        let cut = full.iter().position(|&id| id == target).unwrap();
        for stream in [true, false] {
            let p = SamplingParams {
                stop_token_ids: vec![target],
                ..params(Some(48))
            };
            let g = generate(
                &mut c,
                request(&format!("stop-id-{stream}"), &ids, p, stream),
            )
            .await;
            assert_eq!(g.ids(), full[..=cut], "stream={stream}");
            let done = g.complete();
            assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(target)));
            assert_eq!(done.completion_tokens as usize, cut + 1);
        }
    }

    /// llama-server's slots, busy or not.
    async fn busy_slots(server: &Server) -> usize {
        let slots = get(&format!("{}/slots", server.url)).await.json();
        slots.as_array().map_or(0, |s| {
            s.iter().filter(|s| s["is_processing"] == true).count()
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs llama-server, the model and the exported tokenizer (see the file header)"]
    async fn adapter_abort_and_a_dropped_stream_stop_llama_server() {
        let server = llama_server().await;
        let engine = adapter(&server);
        let mut c = connect(engine.addr).await;
        let ids = tokenizer()
            .encode(chat("Tell me a very long story."), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let p = SamplingParams {
            ignore_eos: true,
            ..params(Some(1500))
        };
        for how in ["abort", "drop"] {
            let id = format!("long-{how}");
            let mut stream = c
                .generate(request(&id, &ids, p.clone(), true))
                .await
                .unwrap()
                .into_inner();
            stream.message().await.unwrap().unwrap();
            assert_eq!(busy_slots(&server).await, 1);
            if how == "abort" {
                let r = c
                    .abort(AbortRequest {
                        request_id: id.clone(),
                        reason: String::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert!(r.success);
                // SGLang's servicer sends nothing more after an Abort.
                let next = tokio::time::timeout(Duration::from_millis(300), async {
                    loop {
                        match stream.message().await {
                            Ok(Some(m)) if matches!(m.response, Some(Response::Chunk(_))) => {}
                            other => return other,
                        }
                    }
                })
                .await;
                assert!(next.is_err(), "{next:?}");
                wait_for_line(
                    &engine,
                    &format!("abort request_id={id}"),
                    Duration::from_secs(5),
                )
                .await;
            } else {
                drop(stream);
                wait_for_line(
                    &engine,
                    &format!("cancelled request_id={id}"),
                    Duration::from_secs(5),
                )
                .await;
            }
            let end = Instant::now() + Duration::from_secs(5);
            while busy_slots(&server).await > 0 {
                assert!(
                    Instant::now() < end,
                    "llama-server still generating after {how}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs llama-server, the model and the exported tokenizer (see the file header)"]
    async fn adapter_passes_llama_server_errors_on() {
        let server = llama_server().await;
        let engine = adapter(&server);
        let mut c = connect(engine.addr).await;
        // Longer than a slot's context window.
        let ids = vec![504u32; 3000];
        let g = generate(&mut c, request("too-long", &ids, params(Some(8)), true)).await;
        match g.end {
            End::Status(s) => assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}"),
            other => panic!("{other:?}"),
        }
        let p = SamplingParams {
            constraint: Some(grpc_client::sampling_params::Constraint::Regex("a+".into())),
            ..params(Some(8))
        };
        let g = generate(&mut c, request("regex", &[504], p, true)).await;
        assert!(
            matches!(g.end, End::Status(ref s) if s.code() == tonic::Code::InvalidArgument),
            "{:?}",
            g.end
        );
    }
}
