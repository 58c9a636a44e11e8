//! The tokenizer caches through the gRPC path, black box: the same chat twice is an L0
//! hit, a chat with one more turn an L1 hit on the earlier turns, and a prompt large
//! enough for the blocking pool hits the pool's cache; every prompt the engine gets is
//! exactly the uncached tokenization (the echoed token count says so), and `/metrics`
//! shows the spec's `gw_tokenizer_cache_*` series.

use crate::common;

use std::path::{Path, PathBuf};

use common::tokenizer::{write_tokenizer, IM_END, IM_START};
use common::{gateway, post_json, sample, scrape, wait_ready, Proc};
use serde_json::{json, Value};
use tokenizers::Tokenizer;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-tokcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The test template's rendering of `messages` with the generation prompt.
fn rendered(messages: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (role, content) in messages {
        out.push_str(&format!("{IM_START}{role}\n{content}{IM_END}\n"));
    }
    out.push_str(&format!("{IM_START}assistant\n"));
    out
}

/// Sends a chat; its prompt's token count as the engine saw it.
async fn chat(gw: &Proc, messages: &[(&str, &str)]) -> u64 {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "echo-model", "max_tokens": 4, "messages": messages}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["usage"]["prompt_tokens"].as_u64().unwrap()
}

/// A mock engine with `engine_args` and a gateway in front of it tokenizing with the
/// tokenizer in `dir`, with `args`, once ready.
async fn serve(dir: &Path, engine_args: &[&str], args: &[&str]) -> (Proc, Proc) {
    let engine = common::grpc_engine(&[&["--model", "echo-model"], engine_args].concat());
    let url = format!("grpc://{}", engine.addr);
    let base = ["--worker-urls", &url, "--model-path", dir.to_str().unwrap()];
    let gw = gateway(&[&base[..], args].concat());
    wait_ready(&gw).await;
    (engine, gw)
}

fn count(tok: &Tokenizer, text: &str) -> u64 {
    tok.encode(text, false).unwrap().len() as u64
}

fn series(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or(0.0)
}

const L0_HIT: &str = r#"gw_tokenizer_cache_lookups_total{layer="l0",result="hit"}"#;
const L0_MISS: &str = r#"gw_tokenizer_cache_lookups_total{layer="l0",result="miss"}"#;
const L1_HIT: &str = r#"gw_tokenizer_cache_lookups_total{layer="l1",result="hit"}"#;
const L1_MISS: &str = r#"gw_tokenizer_cache_lookups_total{layer="l1",result="miss"}"#;
const L0_BYTES: &str = r#"gw_tokenizer_cache_reused_bytes_total{layer="l0"}"#;
const L1_BYTES: &str = r#"gw_tokenizer_cache_reused_bytes_total{layer="l1"}"#;

#[tokio::test]
async fn repeated_and_growing_chats_hit_the_caches_and_stay_exact() {
    let dir = temp_dir("chat");
    let tok = write_tokenizer(&dir);
    // One data-plane thread: every request meets the same thread's cache.
    let (_engine, gw) = serve(&dir, &[], &["--runtime-worker-threads", "1"]).await;
    let before = scrape(&gw).await;
    assert!(!before.contains("gw_tokenizer_cache_"), "{before}");

    let first = [("system", "be brief"), ("user", "hello world, héllo 世界")];
    let first_text = rendered(&first);
    assert_eq!(chat(&gw, &first).await, count(&tok, &first_text));
    let text = scrape(&gw).await;
    assert_eq!(series(&text, L0_MISS), 1.0, "{text}");
    assert_eq!(series(&text, L1_MISS), 1.0, "{text}");
    assert!(
        text.contains("# TYPE gw_tokenizer_cache_lookups counter"),
        "{text}"
    );

    // The same chat again: the whole prompt from L0.
    assert_eq!(chat(&gw, &first).await, count(&tok, &first_text));
    let text = scrape(&gw).await;
    assert_eq!(series(&text, L0_HIT), 1.0, "{text}");
    assert_eq!(series(&text, L0_BYTES), first_text.len() as f64, "{text}");
    assert_eq!(series(&text, L1_MISS), 1.0, "{text}");

    // One more turn: the earlier turns from L1, up to the last <|im_start|> they share.
    let second = [
        first[0],
        first[1],
        ("assistant", "hello"),
        ("user", " world\nand again"),
    ];
    let second_text = rendered(&second);
    assert_eq!(chat(&gw, &second).await, count(&tok, &second_text));
    let text = scrape(&gw).await;
    assert_eq!(series(&text, L1_HIT), 1.0, "{text}");
    let shared = first_text.len() - "assistant\n".len();
    assert_eq!(series(&text, L1_BYTES), shared as f64, "{text}");
    assert_eq!(series(&text, L0_MISS), 2.0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn large_prompts_use_the_blocking_pools_cache_and_tokenize_is_cached() {
    let dir = temp_dir("large");
    let tok = write_tokenizer(&dir);
    let (_engine, gw) = serve(
        &dir,
        &["--max-context", "100000"],
        &["--runtime-worker-threads", "1"],
    )
    .await;

    // Over 32 KiB of body: read, rendered and tokenized on the blocking pool.
    let long = "hello world ".repeat(4000);
    let messages = [("user", long.as_str())];
    let expected = count(&tok, &rendered(&messages));
    assert_eq!(chat(&gw, &messages).await, expected);
    assert_eq!(chat(&gw, &messages).await, expected);
    let text = scrape(&gw).await;
    assert_eq!(series(&text, L0_HIT), 1.0, "{text}");
    assert_eq!(
        series(&text, L0_BYTES),
        rendered(&messages).len() as f64,
        "{text}"
    );

    // /v1/tokenize: the tokenizer's own ids (BOS handling included), then from L0.
    let prompt = format!("{IM_START}user\nhello{IM_END}");
    let ids: Vec<u32> = tok
        .encode(prompt.as_str(), true)
        .unwrap()
        .get_ids()
        .to_vec();
    for _ in 0..2 {
        let reply = post_json(
            &format!("{}/v1/tokenize", gw.url()),
            &json!({"model": "echo-model", "prompt": prompt}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["tokens"], json!(ids));
    }
    let text = scrape(&gw).await;
    assert_eq!(series(&text, L0_HIT), 2.0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn caches_sized_zero_are_off() {
    let dir = temp_dir("off");
    let tok = write_tokenizer(&dir);
    let off = [
        "--tokenizer-cache-l0-max-entries",
        "0",
        "--tokenizer-cache-l1-max-memory",
        "0",
    ];
    let (_engine, gw) = serve(&dir, &[], &off).await;
    let messages = [("user", "hello")];
    for _ in 0..2 {
        assert_eq!(
            chat(&gw, &messages).await,
            count(&tok, &rendered(&messages))
        );
    }
    let text = scrape(&gw).await;
    assert!(!text.contains("gw_tokenizer_cache_"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
