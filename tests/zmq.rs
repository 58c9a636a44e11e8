//! ZMQ workers (`ipc://`), black box: tollgate binds the worker's sockets and the stand-in
//! engine core of `perf/zmq_engine/engine.py` dials in, one process per data-parallel
//! rank. The stand-in is written from vLLM's own code paths (its msgspec structs mirrored
//! field by field, encoded by msgspec itself), so the bytes the gateway reads and writes
//! are the ones a vLLM engine core reads and writes. In mock mode it echoes the prompt's
//! ids, cycling, and stops like vLLM's `check_stop`: the texts expected here are
//! `decode(ids)` of what the test's tokenizer makes of the prompt.

use crate::common;
use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, get, listed_workers, post_json, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{chat_prompt, echo, logged_in};
use support::{chat_delta_text, read_frames, read_until, start_json, stream_events};

/// The Python that runs the stand-in: a venv with pyzmq and msgspec, made once per machine
/// by `perf/zmq_engine/venv.sh` (or `TOLLGATE_ZMQ_PYTHON`).
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Ok(python) = std::env::var("TOLLGATE_ZMQ_PYTHON") {
            return python;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perf/zmq_engine/venv.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed: the ZMQ tests need Python with pyzmq and msgspec",
            script.display()
        );
        String::from_utf8(out.stdout)
            .expect("a path")
            .trim()
            .to_owned()
    })
}

/// One engine-core rank of the stand-in, killed on drop; its event lines land in `log`.
struct Rank {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Rank {
    fn start(handshake: &str, rank: u16, args: &[&str]) -> Rank {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perf/zmq_engine/engine.py");
        let mut child = Command::new(python())
            .arg(script)
            .args(["--handshake", handshake, "--rank", &rank.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the stand-in engine");
        let log = Arc::new(Mutex::new(String::new()));
        capture(child.stdout.take().expect("stdout"), log.clone());
        capture(child.stderr.take().expect("stderr"), log.clone());
        Rank { child, log }
    }

    fn log_text(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Kills the process outright (SIGKILL): no dead sentinel, as after an OOM kill.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn logged(&self, line: &str) {
        logged_in(|| self.log_text(), line).await;
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        self.kill();
    }
}

fn capture<R: Read + Send + 'static>(reader: R, log: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if std::env::var_os("TOLLGATE_TEST_VERBOSE").is_some() {
                eprintln!("[engine] {line}");
            }
            if let Ok(mut l) = log.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
}

/// A fresh directory for one test, with the test tokenizer in it, and an `ipc://` socket
/// path inside it.
fn setup(name: &str) -> (PathBuf, tokenizers::Tokenizer, String) {
    let dir = support::echo::temp_dir("zmq", name);
    let tok = write_tokenizer(&dir);
    let path = dir.join("engine");
    (dir, tok, path.to_str().unwrap().to_owned())
}

fn handshake_address() -> String {
    format!("tcp://127.0.0.1:{}", common::free_port())
}

/// `POST /workers` with `body`; the worker's id.
async fn add_worker(gw: &Proc, body: &Value) -> String {
    let reply = post_json(&format!("{}/workers", gw.url()), body).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    reply.json()["worker_id"]
        .as_str()
        .expect("worker_id")
        .to_owned()
}

async fn worker(gw: &Proc, id: &str) -> Value {
    get(&format!("{}/workers/{id}", gw.url())).await.json()
}

/// Waits until the worker's status is `status`.
async fn wait_status(gw: &Proc, id: &str, status: &str) {
    assert!(
        eventually(Duration::from_secs(20), || async {
            worker(gw, id).await["status"] == status
        })
        .await,
        "worker {id} never became {status}: {}\n{}",
        worker(gw, id).await,
        gw.log_text()
    );
}

/// Waits until the registration of `id` failed (the worker is gone: 404), and returns the
/// gateway's log, which says why.
async fn wait_failed(gw: &Proc, id: &str) -> String {
    let url = format!("{}/workers/{id}", gw.url());
    assert!(
        eventually(Duration::from_secs(20), || {
            let url = url.clone();
            async move { get(&url).await.status == 404 }
        })
        .await,
        "registration of {id} did not fail: {}\n{}",
        worker(gw, id).await,
        gw.log_text()
    );
    // The job's failure is logged as it is recorded; the log thread may read the line a
    // moment after the 404 reaches the test.
    let failed = |log: &str| {
        log.lines()
            .any(|line| line.contains("worker job failed") && line.contains(id))
    };
    let logged = eventually(Duration::from_secs(10), || {
        let log = gw.log_text();
        async move { failed(&log) }
    })
    .await;
    assert!(logged, "no failure logged for {id}: {}", gw.log_text());
    gw.log_text()
}

/// A gateway (`--model-path`: the test tokenizer) and one ZMQ worker registered through
/// `POST /workers` with `spec`, its URL and a fresh handshake address added; no rank yet.
struct Registered {
    gw: Proc,
    tok: tokenizers::Tokenizer,
    path: String,
    handshake: String,
    id: String,
}

async fn registered(name: &str, mut spec: Value) -> Registered {
    let (dir, tok, path) = setup(name);
    let gw = gateway(&["--model-path", dir.to_str().unwrap()]);
    let handshake = handshake_address();
    spec["url"] = json!(format!("ipc://{path}"));
    spec["zmq_handshake_address"] = json!(handshake);
    let id = add_worker(&gw, &spec).await;
    Registered {
        gw,
        tok,
        path,
        handshake,
        id,
    }
}

/// The handshake address of the gateway's one ZMQ worker, once it is registered.
async fn derived_handshake(gw: &Proc) -> String {
    for _ in 0..200 {
        let workers = listed_workers(gw).await;
        if let Some(address) = workers
            .first()
            .and_then(|w| w["zmq_handshake_address"].as_str())
        {
            return address.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the ZMQ worker was not registered:\n{}", gw.log_text());
}

/// A gateway with one ZMQ worker from `--worker-urls`, its one rank dialled in and ready.
async fn one_rank(name: &str, engine_args: &[&str]) -> (Proc, Rank, tokenizers::Tokenizer) {
    let (dir, tok, path) = setup(name);
    let gw = gateway(&[
        "--worker-urls",
        &format!("ipc://{path}"),
        "--model-path",
        dir.to_str().unwrap(),
    ]);
    // The derived handshake address (spec 1) is shown with the worker.
    let handshake = derived_handshake(&gw).await;
    let rank = Rank::start(&handshake, 0, engine_args);
    wait_ready(&gw).await;
    (gw, rank, tok)
}

#[tokio::test]
async fn every_generation_route_works_on_a_zmq_worker() {
    let (gw, rank, tok) = one_rank("routes", &[]).await;
    let workers = listed_workers(&gw).await;
    assert_eq!(workers[0]["connection_mode"], "zmq", "{}", workers[0]);
    assert_eq!(workers[0]["runtime_type"], "vllm", "{}", workers[0]);
    let handshake = workers[0]["zmq_handshake_address"].as_str().unwrap();
    let port: u16 = handshake.rsplit(':').next().unwrap().parse().unwrap();
    assert!((20000..=29999).contains(&port), "{handshake}");
    let eos = tok.token_to_id(IM_END).unwrap();

    // Chat, whole: the echo stops at the end of turn the gateway sent as `_eos_token_id`.
    let content = "hello world, héllo 世界 🎉";
    let prompt = chat_prompt(&tok, content);
    let ids = echo(&prompt, 200, Some(eos));
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"max_tokens": 200, "top_k": 40, "temperature": 0,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        tok.decode(&ids, true).unwrap().as_str(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], ids.len() + 1);
    rank.logged("max_tokens=200").await;
    rank.logged(&format!("eos={eos}")).await;

    // Chat, streamed: the deltas add up to the same text, then the usage.
    let body = json!({"max_tokens": 12, "stream": true,
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
    assert_eq!(
        text,
        tok.decode(&echo(&prompt, 12, Some(eos)), true).unwrap()
    );
    assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], 12);

    // Completions, whole, and n = 2 (two engine requests, vLLM's `{i}_{id}` names).
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 7, "n": 2}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    let want = tok.decode(&echo(&ids, 7, None), true).unwrap();
    assert_eq!(v["choices"].as_array().map(Vec::len), Some(2), "{v}");
    for choice in v["choices"].as_array().unwrap() {
        assert_eq!(choice["text"], want.as_str(), "{v}");
        assert_eq!(choice["finish_reason"], "length");
    }
    rank.logged("id=0_cmpl-").await;
    rank.logged("id=1_cmpl-").await;

    // /generate, streamed and not.
    let reply = post_json(
        &format!("{}/generate", gw.url()),
        &json!({"text": "hello world", "sampling_params": {"max_new_tokens": 5}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["text"],
        tok.decode(&echo(&ids, 5, None), true).unwrap().as_str(),
        "{}",
        reply.text()
    );
    let resp = start_json(
        &c,
        &format!("{}/generate", gw.url()),
        &json!({"text": "hello world", "stream": true, "sampling_params": {"max_new_tokens": 5}}),
    )
    .await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    assert!(
        frames.text().ends_with("data: [DONE]\n\n"),
        "{}",
        frames.text()
    );

    // Messages, whole and streamed.
    let messages = json!({"model": "m", "max_tokens": 9,
                          "messages": [{"role": "user", "content": content}]});
    let reply = post_json(&format!("{}/v1/messages", gw.url()), &messages).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(
        v["content"][0]["text"],
        tok.decode(&echo(&prompt, 9, Some(eos)), true)
            .unwrap()
            .as_str()
    );
    assert_eq!(v["stop_reason"], "max_tokens");
    let mut streamed = messages.clone();
    streamed["stream"] = json!(true);
    let resp = start_json(&c, &format!("{}/v1/messages", gw.url()), &streamed).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(
        frames.text().contains("event: message_stop"),
        "{}",
        frames.text()
    );

    // Responses, on the gateway's own runner.
    let reply = post_json(
        &format!("{}/v1/responses", gw.url()),
        &json!({"model": "m", "input": content, "max_output_tokens": 6, "store": false}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["status"], "incomplete", "{}", reply.text());

    // Routes ZMQ deployments do not serve (spec 1, spec 2).
    for path in ["/get_model_info", "/health_generate"] {
        let r = get(&format!("{}{path}", gw.url())).await;
        assert_eq!(r.status, 501, "{path}: {}", r.text());
    }
    let r = post_json(
        &format!("{}/v1/messages/count_tokens", gw.url()),
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 501, "{}", r.text());
    // /flush_cache skips ZMQ workers and counts them.
    let r = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["total_zmq_workers_skipped"], 1, "{}", r.text());
    // Metrics: the pool counts the worker as zmq.
    let metrics = common::scrape(&gw).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gw_worker_pool_size{") && l.contains("connection_mode=\"zmq\"")),
        "{metrics}"
    );
}

#[tokio::test]
async fn dp_size_two_spreads_requests_across_ranks() {
    let Registered {
        gw,
        tok,
        handshake,
        id,
        ..
    } = registered(
        "dp2",
        json!({"dp_size": 2, "models": [{"id": "zmq-model"}]}),
    )
    .await;
    wait_status(&gw, &id, "not_ready").await;
    // Each answer takes half a second, so the six requests overlap even on a loaded
    // machine: at 100 ms each, one could end before the next arrived, and a lone request
    // always goes to the idle rank 0 (the full suite under io_uring failed so once).
    let r0 = Rank::start(&handshake, 0, &["--token-ms", "100"]);
    let r1 = Rank::start(&handshake, 1, &["--token-ms", "100"]);
    r0.logged("ready rank=0").await;
    r1.logged("ready rank=1").await;
    wait_status(&gw, &id, "ready").await;

    let url = format!("{}/v1/completions", gw.url());
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    let want = tok.decode(&echo(&ids, 5, None), true).unwrap();
    let calls = (0..6).map(|_| {
        let url = url.clone();
        async move {
            post_json(
                &url,
                &json!({"model": "zmq-model", "prompt": "hello world", "max_tokens": 5}),
            )
            .await
        }
    });
    for reply in futures_join(calls).await {
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["text"], want.as_str());
    }
    let adds = |rank: &Rank| rank.log_text().matches("add rank=").count();
    // A rank's log is read from its pipe by a thread: its lines may trail the answers.
    let spread = eventually(Duration::from_secs(5), || async {
        adds(&r0) >= 2 && adds(&r1) >= 2
    })
    .await;
    assert!(
        spread,
        "6 concurrent requests did not spread: rank 0 took {}, rank 1 took {}",
        adds(&r0),
        adds(&r1)
    );
}

/// Many requests at once, round after round: every one is answered (the link thread's
/// wake-ups are not lost however the requests interleave).
#[tokio::test]
async fn many_concurrent_requests_are_all_answered() {
    let (gw, _rank, tok) = one_rank("concurrent", &[]).await;
    let url = format!("{}/v1/completions", gw.url());
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    let want = tok.decode(&echo(&ids, 3, None), true).unwrap();
    for _ in 0..20 {
        let calls = (0..32).map(|_| {
            let url = url.clone();
            async move {
                tokio::time::timeout(
                    Duration::from_secs(20),
                    post_json(&url, &json!({"prompt": "hello world", "max_tokens": 3})),
                )
                .await
                .expect("a request was never answered")
            }
        });
        for reply in futures_join(calls).await {
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["choices"][0]["text"], want.as_str());
        }
    }
}

/// TokenSpeed's scheduler (`rt_e`) over the same sockets, with its own payloads: the
/// stand-in speaks them (`--protocol tokenspeed`, its structs mirrored from TokenSpeed's).
#[tokio::test]
async fn a_tokenspeed_worker_serves_through_the_same_pipeline() {
    let Registered {
        gw,
        tok,
        handshake,
        id,
        ..
    } = registered(
        "tokenspeed",
        json!({"runtime": "tokenspeed", "models": [{"id": "ts-model"}]}),
    )
    .await;
    wait_status(&gw, &id, "not_ready").await;
    assert_eq!(worker(&gw, &id).await["runtime_type"], "tokenspeed");
    let eos = tok.token_to_id(IM_END).unwrap();
    let rank = Rank::start(
        &handshake,
        0,
        &["--protocol", "tokenspeed", "--eos-id", &eos.to_string()],
    );
    wait_status(&gw, &id, "ready").await;

    let content = "hello world";
    let prompt = chat_prompt(&tok, content);
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "ts-model", "max_tokens": 50, "temperature": 0,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    let ids = echo(&prompt, 50, Some(eos));
    assert_eq!(
        v["choices"][0]["message"]["content"],
        tok.decode(&ids, true).unwrap().as_str(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Streamed, and n = 2 as two engine requests.
    let c = common::client(false);
    let body = json!({"model": "ts-model", "prompt": "hello world", "max_tokens": 6,
                      "n": 2, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let events = stream_events(&frames.text());
    let finishes = events
        .iter()
        .filter(|e| e["choices"][0]["finish_reason"] == "length")
        .count();
    assert_eq!(finishes, 2, "{}", frames.text());
    rank.logged("id=0_cmpl-").await;
    // What TokenSpeed refuses outright, the gateway refuses first.
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"model": "ts-model", "prompt": "hello", "max_tokens": 2, "top_k": 200}),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    // A client that leaves aborts on the rank.
    let body = json!({"model": "ts-model", "prompt": "hello world", "max_tokens": 1000,
                      "stream": true});
    drop(rank);
    wait_status(&gw, &id, "not_ready").await;
    let slow = Rank::start(
        &handshake,
        0,
        &["--protocol", "tokenspeed", "--token-ms", "20"],
    );
    wait_status(&gw, &id, "ready").await;
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let mut body_in = resp.into_body();
    let seen = read_until(&mut body_in, "\"text\":\"", Duration::from_secs(10)).await;
    assert!(seen.contains("text_completion"), "{seen}");
    drop(body_in);
    slow.logged("abort rank=0 ids=cmpl-").await;
}

/// Runs the futures at once and collects their outputs in order.
async fn futures_join<F>(calls: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = calls.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("task"));
    }
    out
}

#[tokio::test]
async fn a_rank_killed_mid_stream_ends_the_stream_and_the_worker_recovers() {
    let Registered {
        gw,
        tok,
        handshake,
        id,
        ..
    } = registered("kill", json!({"models": [{"id": "m"}]})).await;
    let mut rank = Rank::start(&handshake, 0, &["--token-ms", "30"]);
    wait_status(&gw, &id, "ready").await;

    let c = common::client(false);
    let body = json!({"prompt": "hello world", "max_tokens": 1000, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    assert_eq!(resp.status(), 200);
    let mut body_in = resp.into_body();
    let seen = read_until(&mut body_in, "\"text\":\"", Duration::from_secs(10)).await;
    assert!(seen.contains("text_completion"), "{seen}");
    rank.kill();
    // The client's stream ends at once with the terminal error event, not a hang.
    let rest = read_frames(&mut body_in, Duration::from_secs(10)).await;
    assert!(!rest.timed_out, "the stream hung after its rank died");
    let text = rest.text();
    assert!(
        text.contains("\"error\""),
        "no error event: {rest:?}\n{}",
        gw.log_text()
    );
    assert!(text.contains("rank 0"), "{text}");
    // The worker leaves rotation: no rank takes requests.
    wait_status(&gw, &id, "not_ready").await;

    // The rank dials back and the worker serves again.
    let _back = Rank::start(&handshake, 0, &[]);
    wait_status(&gw, &id, "ready").await;
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 4}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["choices"][0]["text"],
        tok.decode(&echo(&ids, 4, None), true).unwrap().as_str()
    );
}

#[tokio::test]
async fn the_dead_sentinel_fails_requests_at_once() {
    let (gw, rank, _tok) = one_rank("dead", &["--token-ms", "20", "--fault", "die-after=3"]).await;
    let c = common::client(false);
    let body = json!({"prompt": "hello world", "max_tokens": 100, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(10)).await;
    assert!(!frames.timed_out, "{frames:?}");
    let text = frames.text();
    assert!(text.contains("ENGINE_CORE_DEAD"), "{text}");
    rank.logged("dead rank=0").await;
    // The worker leaves rotation (its status follows the link on the control runtime, a
    // moment after the rank went down): the next request is not sent to a dead rank.
    let id = listed_workers(&gw).await[0]["id"]
        .as_str()
        .expect("worker id")
        .to_owned();
    wait_status(&gw, &id, "not_ready").await;
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 4}),
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
}

#[tokio::test]
async fn a_client_that_leaves_aborts_its_request_on_the_rank() {
    let (gw, rank, _tok) = one_rank("leave", &["--token-ms", "20"]).await;
    let c = common::client(false);
    let body = json!({"prompt": "hello world", "max_tokens": 10000, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let mut body_in = resp.into_body();
    let seen = read_until(&mut body_in, "\"text\":\"", Duration::from_secs(10)).await;
    assert!(seen.contains("text_completion"), "{seen}");
    drop(body_in);
    drop(c);
    rank.logged("abort rank=0 ids=cmpl-").await;

    // A stop string ends the engine's request too: the gateway matches it and aborts.
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 50, "stop": ["wor"]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["choices"][0]["finish_reason"], "stop");
    // The abort is sent in the background as the answer goes out.
    assert!(
        eventually(Duration::from_secs(10), || async {
            rank.log_text().matches("abort rank=0").count() == 2
        })
        .await,
        "{}",
        rank.log_text()
    );
}

#[tokio::test]
async fn requests_the_engine_would_choke_on_are_refused_by_the_gateway() {
    let (gw, rank, _tok) = one_rank(
        "refuse",
        &["--max-model-len", "16", "--fault", "error-on-prompt=7"],
    )
    .await;
    let url = format!("{}/v1/completions", gw.url());
    // Out of the vocabulary, or filling the engine's window: vLLM's front-end refuses
    // these, and the engine, which trusts it, would fail or die on them.
    for prompt in [json!([1, 2, 999_999]), json!(vec![104; 16])] {
        let reply = post_json(&url, &json!({"prompt": prompt, "max_tokens": 2})).await;
        assert_eq!(reply.status, 400, "{prompt}: {}", reply.text());
    }
    // The engine's own request-scoped validation error is the client's 400.
    let reply = post_json(&url, &json!({"prompt": [104, 7], "max_tokens": 2})).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    // None of it reached the engine as a request it could not decode.
    let reply = post_json(&url, &json!({"prompt": [104, 105], "max_tokens": 2})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        !rank.log_text().contains("input-thread-died"),
        "{}",
        rank.log_text()
    );
}

#[tokio::test]
async fn zmq_registration_rules() {
    let (dir, _tok, path) = setup("rules");
    let gw = gateway(&["--model-path", dir.to_str().unwrap()]);
    let handshake = handshake_address();
    let first = add_worker(
        &gw,
        &json!({"url": format!("ipc://{path}"), "zmq_handshake_address": handshake}),
    )
    .await;
    wait_status(&gw, &first, "not_ready").await;
    // A second worker on a handshake address already bound fails.
    let taken = add_worker(
        &gw,
        &json!({"url": format!("ipc://{path}-2"), "zmq_handshake_address": handshake}),
    )
    .await;
    let message = wait_failed(&gw, &taken).await;
    assert!(message.contains(&handshake), "{message}");

    // Without --model-path (and no model in the spec), there is no model id.
    let bare = gateway(&[]);
    let id = add_worker(&bare, &json!({"url": format!("ipc://{path}-bare")})).await;
    let message = wait_failed(&bare, &id).await;
    assert!(message.contains("model id"), "{message}");
}

/// What reaches the gateway's ZMQ sockets from anything but a well-behaved rank: junk and
/// lying lengths on a rank's output socket, outputs for requests that do not exist,
/// identities outside the worker's ranks and unreadable handshakes. None of it stops the
/// worker from serving, and a client that stops reading holds up no one else.
#[tokio::test]
async fn hostile_peers_and_slow_clients_do_not_stall_the_worker() {
    let Registered {
        gw,
        tok,
        handshake,
        id,
        path,
    } = registered("hostile", json!({"models": [{"id": "m"}]})).await;
    wait_status(&gw, &id, "not_ready").await;
    let context = zmq::Context::new();

    // Dialling the handshake socket as rank 9 of a one-rank worker, with a 3-byte
    // identity, or with a HELLO that is not msgpack: ignored, the worker stays not ready.
    for (identity, payload) in [
        (&[9u8, 0][..], &b"\x81\xa6status\xa5HELLO"[..]),
        (&[0u8, 0, 0][..], &b"\x81\xa6status\xa5HELLO"[..]),
        (&[0u8, 0][..], &b"\xdd\xff\xff\xff\xff"[..]),
        (&[0u8, 0][..], &b"\x81\xa6status\xa5READY"[..]),
    ] {
        let dealer = context.socket(zmq::DEALER).unwrap();
        dealer.set_identity(identity).unwrap();
        dealer.set_linger(0).unwrap();
        dealer.connect(&handshake).unwrap();
        dealer.send(payload, 0).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(worker(&gw, &id).await["status"], "not_ready");

    let rank = Rank::start(&handshake, 0, &["--max-model-len", "1000000"]);
    wait_status(&gw, &id, "ready").await;

    // Junk on the rank's output socket, from a second connection.
    let push = context.socket(zmq::PUSH).unwrap();
    push.set_linger(0).unwrap();
    push.connect(&format!("ipc://{path}-out-0")).unwrap();
    let huge = vec![0x91u8; 4 << 20];
    let junk: [&[u8]; 6] = [
        b"\xdd\xff\xff\xff\xff",
        b"\x99\x00\x91\xdc\x00\x13\xa2r9\x91\x07",
        // An output for a request that does not exist: dropped.
        b"\x99\x00\x91\xdc\x00\x13\xa6nobody\x91\x07\xc0\xc0\xc0\x01\xc0\xc0\xc0\xc0\xc0\xc0\xc0\x00\xc0\xc0\xc0\xc0\xc0\xc0\xc0\xc0\xc0\xc0\xc0",
        b"",
        &huge,
        b"ENGINE_CORE_DEA",
    ];
    for frame in junk {
        push.send(frame, 0).unwrap();
    }
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 4}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let ids = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    assert_eq!(
        reply.json()["choices"][0]["text"],
        tok.decode(&echo(&ids, 4, None), true).unwrap().as_str()
    );
    let dropped = gw
        .log_count(
            "unreadable engine output dropped",
            1,
            Duration::from_secs(5),
        )
        .await;
    assert!(dropped >= 1, "{}", gw.log_text());

    // A client that stops reading a long stream does not hold up the next request.
    let c = common::client(false);
    let body = json!({"prompt": "hello world", "max_tokens": 100_000, "stream": true});
    let stuck = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    assert_eq!(stuck.status(), 200);
    let started = std::time::Instant::now();
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &json!({"prompt": "hello world", "max_tokens": 4}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a stalled client held up another request for {:?}",
        started.elapsed()
    );
    drop(stuck);
    rank.logged("abort rank=0").await;
    drop(rank);
}
