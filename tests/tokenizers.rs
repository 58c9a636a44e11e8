//! The tokenizer registry (`/v1/tokenizers*`, spec 1), black box: registration jobs and
//! their status, every answer shape of the five routes, control-plane authentication, and
//! gRPC workers that name a registered tokenizer (the bundled `grpc-engine` in mock mode,
//! which echoes the prompt's token ids back).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END, IM_START};
use common::{client, gateway, get, post_json, send, wait_ready, Proc, Reply};
use serde_json::{json, Value};
use tokenizers::Tokenizer;

/// A fresh directory under the target's temp space.
fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tollgate-tokenizers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn path(dir: &Path) -> &str {
    dir.to_str().expect("utf-8 temp path")
}

fn tokenizers_url(gw: &Proc) -> String {
    format!("{}/v1/tokenizers", gw.url())
}

async fn add(gw: &Proc, body: &Value) -> Reply {
    post_json(&tokenizers_url(gw), body).await
}

/// Registers a tokenizer; checks the 202 body and returns the job's ID.
async fn add_ok(gw: &Proc, body: &Value) -> String {
    let reply = add(gw, body).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let v = reply.json();
    assert_eq!(v["status"], "pending", "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    id
}

async fn status(gw: &Proc, key: &str) -> Reply {
    get(&format!("{}/{key}/status", tokenizers_url(gw))).await
}

/// Polls the job's status until it leaves `pending`/`processing`; its last body.
async fn settled(gw: &Proc, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reply = status(gw, id).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let last = reply.json();
        let under_way = matches!(last["status"].as_str(), Some("pending" | "processing"));
        if !under_way {
            return last;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never settled: {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn delete(gw: &Proc, key: &str) -> Reply {
    let url = format!("{}/{key}", tokenizers_url(gw));
    send(&client(false), "DELETE", &url, &[], "").await
}

#[tokio::test]
async fn a_tokenizer_is_registered_listed_found_and_removed() {
    let dir = temp_dir("lifecycle");
    let tok = write_tokenizer(&dir);
    let gw = gateway(&[]);
    let id = add_ok(&gw, &json!({"name": "chatml", "source": path(&dir)})).await;

    let done = settled(&gw, &id).await;
    let vocab = tok.get_vocab_size(true);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["id"], id.as_str());
    assert_eq!(done["vocab_size"], vocab);
    // A loaded tokenizer's status is also found by its name.
    let by_name = status(&gw, "chatml").await;
    assert_eq!(by_name.status, 200);
    assert_eq!(by_name.json()["id"], id.as_str());
    assert_eq!(by_name.json()["status"], "completed");

    let object = json!({"id": id, "name": "chatml", "source": path(&dir), "vocab_size": vocab,
                        "encoder": "fast-bpe", "encoder_note": "byte-level BPE, split gpt2"});
    let list = get(&tokenizers_url(&gw)).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json(), json!({"tokenizers": [object]}));
    for key in [id.as_str(), "chatml"] {
        let one = get(&format!("{}/{key}", tokenizers_url(&gw))).await;
        assert_eq!(one.status, 200, "{}", one.text());
        assert_eq!(one.json(), object);
    }

    // The name is taken: 409 in the 202 shape, with the existing ID and status failed.
    let again = add(&gw, &json!({"name": "chatml", "source": path(&dir)})).await;
    assert_eq!(again.status, 409, "{}", again.text());
    let v = again.json();
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["status"], "failed");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("already registered"),
        "{v}"
    );

    let removed = delete(&gw, "chatml").await;
    assert_eq!(removed.status, 200, "{}", removed.text());
    assert_eq!(removed.json()["success"], true);
    assert!(removed.json()["message"].is_string());

    let gone = get(&format!("{}/{id}", tokenizers_url(&gw))).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.json()["error"]["type"], "tokenizer_not_found");
    assert!(gone.json()["error"]["message"].is_string());
    let gone = status(&gw, &id).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.json()["error"]["type"], "not_found");
    assert!(gone.json()["error"]["message"].is_string());
    let gone = delete(&gw, &id).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.json()["success"], false);
    assert!(gone.json()["message"].is_string());
    assert_eq!(
        get(&tokenizers_url(&gw)).await.json(),
        json!({"tokenizers": []})
    );

    // Registered anew under the same name, by its tokenizer.json this time.
    let file = dir.join("tokenizer.json");
    let id2 = add_ok(&gw, &json!({"name": "chatml", "source": path(&file)})).await;
    assert_ne!(id2, id);
    assert_eq!(settled(&gw, &id2).await["status"], "completed");
}

/// The registry reports the encoder chosen at load: the fast path for a byte-level BPE
/// tokenizer it covers, Hugging Face with the reason for one it does not.
#[tokio::test]
async fn the_registry_reports_the_encoder_chosen_at_load() {
    let fast = temp_dir("encoder-fast");
    write_tokenizer(&fast);
    let slow = temp_dir("encoder-hf");
    write_tokenizer(&slow);
    let file = slow.join("tokenizer.json");
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    json["normalizer"] = json!({"type": "Lowercase"});
    std::fs::write(&file, json.to_string()).unwrap();
    let gw = gateway(&[]);
    for (name, dir) in [("fast", &fast), ("slow", &slow)] {
        let id = add_ok(&gw, &json!({"name": name, "source": path(dir)})).await;
        assert_eq!(settled(&gw, &id).await["status"], "completed");
    }
    let one = |name: &'static str| {
        let url = format!("{}/{name}", tokenizers_url(&gw));
        async move { get(&url).await.json() }
    };
    let fast = one("fast").await;
    assert_eq!(fast["encoder"], "fast-bpe", "{fast}");
    let slow = one("slow").await;
    assert_eq!(slow["encoder"], "huggingface", "{slow}");
    assert_eq!(slow["encoder_note"], "normalizer Lowercase", "{slow}");
}

#[tokio::test]
async fn failed_loads_are_reported_by_id_only() {
    let gw = gateway(&[]);
    let missing = temp_dir("missing");
    let id = add_ok(&gw, &json!({"name": "missing", "source": path(&missing)})).await;
    let failed = settled(&gw, &id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["id"], id.as_str());
    assert!(failed.get("vocab_size").is_none(), "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("does not exist"), "{message}");
    // A job is found only by its ID; a failed one registers nothing.
    assert_eq!(status(&gw, "missing").await.status, 404);
    let by_name = get(&format!("{}/missing", tokenizers_url(&gw))).await;
    assert_eq!(by_name.status, 404);
    assert_eq!(by_name.json()["error"]["type"], "tokenizer_not_found");
    assert_eq!(
        get(&tokenizers_url(&gw)).await.json(),
        json!({"tokenizers": []})
    );

    // A model-hub ID is not fetched: the job fails and says so.
    let hub = add_ok(&gw, &json!({"name": "qwen", "source": "Qwen/Qwen3-0.6B"})).await;
    let failed = settled(&gw, &hub).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("does not download"), "{message}");

    // A chat template that does not exist fails the load too.
    let dir = temp_dir("no-template");
    write_tokenizer(&dir);
    let body = json!({"name": "templated", "source": path(&dir),
                      "chat_template_path": path(&dir.join("absent.jinja"))});
    let templated = add_ok(&gw, &body).await;
    assert_eq!(settled(&gw, &templated).await["status"], "failed");

    // The name of a failed job is free again.
    let retry = add_ok(&gw, &json!({"name": "missing", "source": path(&dir)})).await;
    assert_eq!(settled(&gw, &retry).await["status"], "completed");
}

#[tokio::test]
async fn unusable_bodies_are_refused_before_any_job() {
    let gw = gateway(&[]);
    let url = tokenizers_url(&gw);
    let c = client(false);
    let json_type = [("content-type", "application/json")];
    let none: &[(&str, &str)] = &[];
    let cases = [
        (none, r#"{"name":"a","source":"/m"}"#, 415),
        (&json_type[..], r#"{"name":"a","#, 400),
        (&json_type[..], r#"{"name":"a"}"#, 422),
        (&json_type[..], r#"{"name":["a"],"source":"/m"}"#, 422),
        (&json_type[..], r#"{"name":"a/b","source":"/m"}"#, 400),
        (&json_type[..], r#"{"name":"a","source":""}"#, 400),
    ];
    for (headers, body, want) in cases {
        let reply = send(&c, "POST", &url, headers, body.to_owned()).await;
        assert_eq!(reply.status, want, "{body}: {}", reply.text());
        assert!(!reply.text().is_empty(), "{body}: a message says why");
    }
    let huge = json!({"name": "a", "source": "x".repeat(64 * 1024)}).to_string();
    let reply = send(&c, "POST", &url, &json_type, huge).await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    assert_eq!(
        get(&tokenizers_url(&gw)).await.json(),
        json!({"tokenizers": []})
    );
}

#[tokio::test]
async fn the_routes_are_guarded_like_workers() {
    let admin = "cpk-admin-tok-1";
    let user = "cpk-user-tok-2";
    let gw = gateway(&[
        "--control-plane-api-keys",
        &format!("ops:Ops:admin:{admin}"),
        "--control-plane-api-keys",
        &format!("dev:Dev:user:{user}"),
    ]);
    let c = client(false);
    let bearer = |key: &str| format!("Bearer {key}");
    for path in ["/workers", "/v1/tokenizers", "/v1/tokenizers/x/status"] {
        let url = format!("{}{path}", gw.url());
        let none = send(&c, "GET", &url, &[], "").await;
        assert_eq!(none.status, 401, "{path}");
        let as_user = bearer(user);
        let denied = send(&c, "GET", &url, &[("authorization", &as_user)], "").await;
        assert_eq!(denied.status, 403, "{path}");
        let as_admin = bearer(admin);
        let allowed = send(&c, "GET", &url, &[("authorization", &as_admin)], "").await;
        assert!(
            allowed.status == 200 || allowed.status == 404,
            "{path}: {}",
            allowed.status
        );
    }
    let body = r#"{"name":"a","source":"/m"}"#;
    let json_type = ("content-type", "application/json");
    let url = tokenizers_url(&gw);
    let refused = send(&c, "POST", &url, &[json_type], body).await;
    assert_eq!(refused.status, 401);
    let as_admin = bearer(admin);
    let auth = ("authorization", as_admin.as_str());
    let accepted = send(&c, "POST", &url, &[json_type, auth], body).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());

    // Only the shared key configured: it guards both planes.
    let shared = gateway(&["--api-key", "shared-tok-3"]);
    let url = tokenizers_url(&shared);
    assert_eq!(send(&c, "GET", &url, &[], "").await.status, 401);
    let key = bearer("shared-tok-3");
    let ok = send(&c, "GET", &url, &[("authorization", &key)], "").await;
    assert_eq!(ok.status, 200);
}

/// The chat prompt `template` makes of one user message (the test tokenizer's ChatML with
/// `prefix` before the content).
fn chat_prompt(tok: &Tokenizer, prefix: &str, content: &str) -> Vec<u32> {
    let text = format!("{IM_START}user\n{prefix}{content}{IM_END}\n{IM_START}assistant\n");
    tok.encode(text, false).unwrap().get_ids().to_vec()
}

/// What the mock engine answers: the prompt ids echoed up to the first `eos`.
fn echoed(tok: &Tokenizer, prompt: &[u32], eos: u32) -> String {
    let ids: Vec<u32> = prompt
        .iter()
        .cycle()
        .take(200)
        .take_while(|id| **id != eos)
        .copied()
        .collect();
    tok.decode(&ids, true).unwrap()
}

async fn chat(gw: &Proc, content: &str) -> Value {
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "echo-model", "max_tokens": 200,
                "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

async fn add_worker(gw: &Proc, spec: &Value) {
    let reply = post_json(&format!("{}/workers", gw.url()), spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
}

/// A mock engine serving `echo-model` that stops on the test tokenizer's `<|im_end|>`,
/// and a gateway (`args`) without a worker where `registration` (a tokenizer in `dir`,
/// written here) has loaded.
async fn registered_setup(
    dir: &Path,
    registration: Value,
    args: &[&str],
) -> (Tokenizer, u32, Proc, Proc) {
    let tok = write_tokenizer(dir);
    let eos = tok.token_to_id(IM_END).unwrap();
    let engine =
        common::grpc_engine(&["--model", "echo-model", "--eos-token-id", &eos.to_string()]);
    let gw = gateway(args);
    let id = add_ok(&gw, &registration).await;
    assert_eq!(settled(&gw, &id).await["status"], "completed");
    (tok, eos, engine, gw)
}

/// The chat answer is the mock's echo of `prompt`, and the prompt was `prompt`.
fn assert_echoed(v: &Value, tok: &Tokenizer, prompt: &[u32], eos: u32) {
    assert_eq!(
        v["choices"][0]["message"]["content"],
        echoed(tok, prompt, eos).as_str()
    );
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
}

#[tokio::test]
async fn a_grpc_worker_serves_with_the_tokenizer_it_names() {
    let dir = temp_dir("grpc-named");
    // The registration's own template wins over the directory's.
    let template = dir.join("custom.jinja");
    let custom =
        common::tokenizer::TEMPLATE.replace("\n{{ m['content'] }}", "\ncustom: {{ m['content'] }}");
    assert_ne!(custom, common::tokenizer::TEMPLATE);
    let body = json!({"name": "echo-tok", "source": path(&dir),
                      "chat_template_path": path(&template)});
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&template, &custom).unwrap();
    let (tok, eos, engine, gw) = registered_setup(&dir, body, &[]).await;

    let url = format!("grpc://{}", engine.addr);
    let spec = json!({"url": url, "labels": {"tokenizer_path": "echo-tok"}});
    add_worker(&gw, &spec).await;
    wait_ready(&gw).await;
    let prompt = chat_prompt(&tok, "custom: ", "hello world");
    assert_echoed(&chat(&gw, "hello world").await, &tok, &prompt, eos);

    // Removing the tokenizer leaves the worker that holds it serving.
    assert_eq!(delete(&gw, "echo-tok").await.status, 200);
    assert_echoed(&chat(&gw, "hello world").await, &tok, &prompt, eos);
}

#[tokio::test]
async fn a_grpc_worker_without_a_tokenizer_takes_the_one_named_after_its_model() {
    let dir = temp_dir("grpc-model");
    let body = json!({"name": "echo-model", "source": path(&dir)});
    let (tok, eos, engine, gw) = registered_setup(&dir, body, &[]).await;
    add_worker(&gw, &json!({"url": format!("grpc://{}", engine.addr)})).await;
    wait_ready(&gw).await;
    let prompt = chat_prompt(&tok, "", "hello");
    assert_echoed(&chat(&gw, "hello").await, &tok, &prompt, eos);
}

#[tokio::test]
async fn the_tokenizer_path_flag_may_name_a_registered_tokenizer() {
    let dir = temp_dir("grpc-flag");
    let body = json!({"name": "flag-tok", "source": path(&dir)});
    let args = ["--tokenizer-path", "flag-tok"];
    let (tok, eos, engine, gw) = registered_setup(&dir, body, &args).await;
    add_worker(&gw, &json!({"url": format!("grpc://{}", engine.addr)})).await;
    wait_ready(&gw).await;
    let prompt = chat_prompt(&tok, "", "hello");
    assert_echoed(&chat(&gw, "hello").await, &tok, &prompt, eos);
}
