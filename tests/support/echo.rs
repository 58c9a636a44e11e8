//! The bundled gRPC engine's mock mode, from the tests' side: what it answers (the prompt's
//! ids echoed back) and the checks every gRPC service's suite repeats.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tokenizers::Tokenizer;

use super::{read_until, start_json};
use crate::common::tokenizer::{IM_END, IM_START};
use crate::common::{client, eventually, gateway, wait_ready, Proc};

/// A fresh directory under the temp space, named for the suite and the test.
pub fn temp_dir(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The `grpc://` URL of a bundled engine.
/// A tokenizer written to a fresh directory of `suite`/`name`, and the bundled engine's
/// SGLang service in mock mode (model `echo-model`) stopping at its end of turn.
pub fn sglang_echo(suite: &str, name: &str) -> (Proc, PathBuf) {
    let dir = temp_dir(suite, name);
    let tok = crate::common::tokenizer::write_tokenizer(&dir);
    let eos = tok
        .token_to_id(IM_END)
        .expect("the test tokenizer has an end of turn")
        .to_string();
    let engine = crate::common::grpc_engine(&[
        "--service",
        "sglang",
        "--model",
        "echo-model",
        "--eos-token-id",
        &eos,
    ]);
    (engine, dir)
}

pub fn grpc_url(engine: &Proc) -> String {
    format!("grpc://{}", engine.addr)
}

/// A gateway in front of `engine`, tokenizing with the tokenizer in `dir`, once ready.
pub async fn gateway_for(engine: &Proc, dir: &Path) -> Proc {
    let gw = gateway(&[
        "--worker-urls",
        &grpc_url(engine),
        "--model-path",
        dir.to_str().unwrap(),
    ]);
    wait_ready(&gw).await;
    gw
}

/// What the mock answers for `prompt` ids: the ids echoed (cycling) up to `max`, cut
/// before the first `stop_id`.
pub fn echo(prompt: &[u32], max: usize, stop_id: Option<u32>) -> Vec<u32> {
    prompt
        .iter()
        .cycle()
        .take(max)
        .take_while(|id| Some(**id) != stop_id)
        .copied()
        .collect()
}

/// The ids of a one-message chat as the test template renders it.
pub fn chat_prompt(tok: &Tokenizer, content: &str) -> Vec<u32> {
    let text = format!("{IM_START}user\n{content}{IM_END}\n{IM_START}assistant\n");
    tok.encode(text, false).unwrap().get_ids().to_vec()
}

/// Waits for `line` in the engine's log: its output is read by a background thread, so a
/// line printed just before the engine answered may land a moment after the answer.
pub async fn logged(engine: &Proc, line: &str) {
    logged_in(|| engine.log_text(), line).await;
}

/// Waits up to 10 s for `line` in what `log` returns (a process's captured output).
pub async fn logged_in(log: impl Fn() -> String, line: &str) {
    assert!(
        eventually(Duration::from_secs(10), || {
            let seen = log().contains(line);
            async move { seen }
        })
        .await,
        "no {line:?} in:\n{}",
        log()
    );
}

/// A client that leaves a streamed completion after its first text makes the gateway
/// stop `engine` (an Abort, or the stream's cancellation, in the engine's log).
pub async fn leaving_client_stops_the_engine(gw: &Proc, engine: &Proc) {
    let c = client(false);
    let body = json!({"prompt": "hello world", "max_tokens": 10000, "stream": true});
    let resp = start_json(&c, &format!("{}/v1/completions", gw.url()), &body).await;
    let mut body_in = resp.into_body();
    let seen = read_until(&mut body_in, "\"text\":\"", Duration::from_secs(10)).await;
    assert!(seen.contains("text_completion"), "{seen}");
    drop(body_in);
    drop(c);
    assert!(
        eventually(Duration::from_secs(5), || async {
            let log = engine.log_text();
            log.contains("abort request_id=cmpl-") || log.contains("cancelled request_id=cmpl-")
        })
        .await,
        "the engine kept generating for a client that left:\n{}",
        engine.log_text()
    );
}
