//! `grpcs://` engines, black box: the bundled `grpc-engine` serving SGLang's or vLLM's
//! service over TLS (ALPN h2) with certificates made at test time. An engine whose
//! certificate the gateway trusts (`--upstream-ca-cert-path`) registers, serves chat and
//! takes the administrative RPCs like a `grpc://` one; one it cannot verify never
//! registers, and the log says why.

use crate::common;
use crate::support;

use std::time::Duration;

use common::pki::{Kind, Pki, ServerCert};
use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, post_json, wait_ready, Proc};
use serde_json::json;
use support::echo::{chat_prompt, echo, temp_dir};

/// The mock engine serving `service` over TLS with `cert`, and its `grpcs://` URL.
fn tls_engine(service: &str, cert: &ServerCert, extra: &[&str]) -> (Proc, String) {
    let mut args = vec![
        "--service",
        service,
        "--model",
        "echo-model",
        "--tls-cert-path",
        cert.cert_str(),
        "--tls-key-path",
        cert.key_str(),
    ];
    args.extend_from_slice(extra);
    let engine = common::grpc_engine(&args);
    let url = format!("grpcs://localhost:{}", engine.addr.port());
    (engine, url)
}

#[tokio::test]
async fn trusted_grpcs_engines_serve_like_cleartext_ones() {
    let pki = Pki::new();
    let cert = pki.server("engine", Kind::Good);
    let dir = temp_dir("grpcs", "serve");
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap().to_string();
    let (_s, s_url) = tls_engine("sglang", &cert, &["--eos-token-id", &eos]);
    let (_v, v_url) = tls_engine("vllm", &cert, &["--eos-token-id", &eos]);
    let gw = gateway(&[
        "--worker-urls",
        &s_url,
        &v_url,
        "--model-path",
        dir.to_str().unwrap(),
        "--upstream-ca-cert-path",
        pki.ca_str(),
        "--policy",
        "round_robin",
    ]);
    wait_ready(&gw).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::listed_workers(&gw).await.len() == 2
        })
        .await,
        "{}",
        gw.log_text()
    );
    let workers = common::listed_workers(&gw).await;
    let mut runtimes: Vec<&str> = workers
        .iter()
        .map(|w| w["runtime_type"].as_str().unwrap_or(""))
        .collect();
    runtimes.sort_unstable();
    assert_eq!(runtimes, ["sglang", "vllm"], "{workers:?}");

    // Both engines answer, over TLS, with the gateway's own chat pipeline.
    let content = "héllo 世界";
    let prompt = chat_prompt(&tok, content);
    let expected = tok
        .decode(&echo(&prompt, 50, tok.token_to_id(IM_END)), true)
        .unwrap();
    for _ in 0..4 {
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &json!({"max_tokens": 50, "messages": [{"role": "user", "content": content}]}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            expected.as_str()
        );
    }
    let reply = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["workers_flushed"], 2);
}

#[tokio::test]
async fn an_engine_the_gateway_cannot_verify_never_registers() {
    let pki = Pki::new();
    let dir = temp_dir("grpcs", "untrusted");
    write_tokenizer(&dir);
    let stranger = pki.untrusted("stranger");
    let (_e, url) = tls_engine("sglang", &stranger, &[]);
    let gw = gateway(&[
        "--worker-urls",
        &url,
        "--model-path",
        dir.to_str().unwrap(),
        "--upstream-ca-cert-path",
        pki.ca_str(),
        "--worker-startup-timeout-secs",
        "2",
        "--worker-startup-check-interval",
        "1",
    ]);
    assert!(
        eventually(Duration::from_secs(15), || async {
            let log = gw.log_text();
            log.contains("did not answer GetModelInfo") && log.contains("UnknownIssuer")
        })
        .await,
        "{}",
        gw.log_text()
    );
    assert!(common::listed_workers(&gw).await.is_empty());
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
}
