//! The tokenizer an engine streams (`GetTokenizer`), black box: the bundled `grpc-engine`
//! advertises model and tokenizer paths that do not exist on this host (an engine on
//! another machine) and, asked, streams its tokenizer directory as a zip archive with its
//! SHA-256. A gateway started without `--model-path` registers it with those files and
//! serves chat with them; a corrupted archive or an engine without one fails registration
//! with the reason.

use crate::common;
use crate::support;

use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, post_json, wait_ready, Proc};
use serde_json::json;
use support::echo::{chat_prompt, echo, grpc_url, temp_dir};

const ELSEWHERE: &str = "/nonexistent/tollgate-test/models/echo";

/// An engine of `service` whose tokenizer files are in `dir`, said to be elsewhere.
fn remote_engine(service: &str, dir: &std::path::Path, args: &[&str]) -> Proc {
    let base = [
        "--service",
        service,
        "--model",
        "echo-model",
        "--tokenizer-path",
        dir.to_str().unwrap(),
        "--advertise-model-path",
        ELSEWHERE,
    ];
    common::grpc_engine(&[&base[..], args].concat())
}

/// A gateway with no tokenizer of its own in front of `engines`.
fn bare_gateway(engines: &[&Proc]) -> Proc {
    let urls: Vec<String> = engines.iter().map(|e| grpc_url(e)).collect();
    let mut args = vec!["--worker-urls"];
    args.extend(urls.iter().map(String::as_str));
    gateway(&args)
}

#[tokio::test]
async fn engines_elsewhere_send_their_tokenizer_and_chat_works() {
    let dir = temp_dir("tokenizer-stream", "chat");
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap();
    let eos_arg = eos.to_string();
    // Small chunks: the archive comes in many pieces. Two services, one archive: one kit.
    let sglang = remote_engine(
        "sglang",
        &dir,
        &[
            "--tokenizer-chunk-bytes",
            "1024",
            "--eos-token-id",
            &eos_arg,
        ],
    );
    let trt = remote_engine("trtllm", &dir, &["--eos-token-id", &eos_arg]);
    let gw = bare_gateway(&[&sglang, &trt]);
    wait_ready(&gw).await;
    assert!(
        eventually(Duration::from_secs(15), || async {
            let listed = common::listed_workers(&gw).await;
            listed.len() == 2 && listed.iter().all(|w| w["status"] == "ready")
        })
        .await,
        "{:?}\n{}",
        common::listed_workers(&gw).await,
        gw.log_text()
    );
    assert!(
        gw.log_text().contains("the engine sent its tokenizer"),
        "{}",
        gw.log_text()
    );

    let content = "héllo 世界 🎉";
    let prompt = chat_prompt(&tok, content);
    let expected = tok.decode(&echo(&prompt, 100, Some(eos)), true).unwrap();
    for _ in 0..4 {
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &json!({"max_tokens": 100, "messages": [{"role": "user", "content": content}]}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let v = reply.json();
        assert_eq!(v["choices"][0]["message"]["content"], expected.as_str());
        assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    }
    // Nothing is left unpacked on disk.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("tollgate-tokenizer-{}-", gw.child.id()))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn a_corrupt_archive_or_none_fails_registration_with_the_reason() {
    let dir = temp_dir("tokenizer-stream", "corrupt");
    write_tokenizer(&dir);
    let corrupt = remote_engine("vllm", &dir, &["--corrupt-tokenizer-sha"]);
    let gw = bare_gateway(&[&corrupt]);
    assert!(
        eventually(Duration::from_secs(15), || async {
            gw.log_text().contains("SHA-256")
        })
        .await,
        "{}",
        gw.log_text()
    );
    assert!(common::listed_workers(&gw).await.is_empty());

    // An engine with no tokenizer to send, and none on this host.
    let bare = common::grpc_engine(&[
        "--service",
        "tokenspeed",
        "--model",
        "echo-model",
        "--advertise-model-path",
        ELSEWHERE,
    ]);
    let gw = bare_gateway(&[&bare]);
    assert!(
        eventually(Duration::from_secs(15), || async {
            gw.log_text().contains("GetTokenizer")
        })
        .await,
        "{}",
        gw.log_text()
    );
    assert!(common::listed_workers(&gw).await.is_empty());
}
