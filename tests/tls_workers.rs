//! https workers on the data plane: tollgate in front of a mock worker that serves TLS
//! (HTTP/1.1 and h2 by ALPN) with certificates made at test time. A worker whose
//! certificate the gateway trusts (`--upstream-ca-cert-path`) is probed, detected and
//! served like a cleartext one, streams included; one it cannot verify (unknown CA, wrong
//! host, expired) answers 502 `worker_tls_failed` naming what failed, counted like any
//! worker failure. A bad `--upstream-ca-cert-path` stops startup.

use crate::common;
use crate::support;

use std::time::Duration;

use common::pki::{tls_mock_requests, Kind, Pki};
use common::{eventually, gateway, listed_workers, mock, post_json, run_to_exit, sample, scrape};
use serde_json::{json, Value};
use support::{assert_gateway_error, chat};

/// A mock worker serving TLS with `cert`.
fn tls_mock(cert: &common::pki::ServerCert, extra: &[&str]) -> (common::Proc, String) {
    let mut args = vec![
        "--tls-cert-path",
        cert.cert_str(),
        "--tls-key-path",
        cert.key_str(),
    ];
    args.extend_from_slice(extra);
    let m = mock(&args);
    let url = format!("https://127.0.0.1:{}", m.addr.port());
    (m, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_https_worker_serves_like_a_cleartext_one() {
    let pki = Pki::new();
    let cert = pki.server("worker", Kind::Good);
    let (_m, url) = tls_mock(&cert, &[]);
    let gw = gateway(&[
        "--worker-urls",
        &url,
        "--upstream-ca-cert-path",
        pki.ca_str(),
    ]);
    common::wait_ready(&gw).await;
    let workers = listed_workers(&gw).await;
    assert_eq!(workers[0]["url"], url.as_str());
    // Detection ran over TLS: the mock says it is SGLang.
    assert_eq!(workers[0]["runtime_type"], "sglang", "{workers:?}");

    let target = format!("{}/v1/chat/completions", gw.url());
    let reply = post_json(&target, &chat(false, Value::Null)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["object"], "chat.completion");

    let reply = post_json(&target, &chat(true, json!({"output_tokens": 5}))).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    assert!(text.matches("tok").count() >= 5, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    // The worker saw both requests, over TLS, negotiated as HTTP/2 by ALPN.
    let seen: Vec<Value> = tls_mock_requests(&pki.ca, &url)
        .await
        .into_iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["version"], "HTTP/2.0", "{seen:?}");
}

/// Registers `url` without probing (so the data path meets the TLS failure) and returns
/// the answer to one chat request.
async fn chat_through(gw: &common::Proc, url: &str) -> common::Reply {
    let spec =
        json!({"url": url, "runtime_type": "sglang", "health": {"disable_health_check": true}});
    let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            !listed_workers(gw).await.is_empty()
        })
        .await
    );
    post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &chat(false, Value::Null),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverifiable_worker_answers_502_naming_what_failed() {
    let pki = Pki::new();
    let cases = [
        (
            pki.untrusted("stranger"),
            None,
            "not signed by a trusted CA",
        ),
        (
            pki.server("elsewhere", Kind::WrongHost),
            Some(pki.ca_str()),
            "not valid for its host name",
        ),
        (
            pki.server("old", Kind::Expired),
            Some(pki.ca_str()),
            "expired",
        ),
        // Trusted by the CA, but the gateway was not told about it: the platform's
        // roots alone do not cover a private CA.
        (
            pki.server("private", Kind::Good),
            None,
            "not signed by a trusted CA",
        ),
    ];
    for (cert, ca, reason) in cases {
        let (m, url) = tls_mock(&cert, &[]);
        let mut args = vec!["--disable-retries"];
        if let Some(ca) = ca {
            args.extend(["--upstream-ca-cert-path", ca]);
        }
        let gw = gateway(&args);
        let reply = chat_through(&gw, &url).await;
        assert_gateway_error(&reply, 502, "worker_tls_failed");
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(message.contains(reason), "{reason}: {message}");
        let metrics = scrape(&gw).await;
        let errors = metrics
            .lines()
            .filter(|l| {
                l.starts_with("gw_router_request_errors_total{")
                    && l.contains("error_type=\"backend_error\"")
            })
            .count();
        assert!(errors >= 1, "{reason}: the failure is counted:\n{metrics}");
        assert_eq!(
            sample(&metrics, "gw_worker_errors_total{worker_type=\"regular\",connection_mode=\"http\",error_type=\"backend_error\"}"),
            Some(1.0),
            "{reason}"
        );
        // The log reaches the test through a reader thread: wait for the line.
        let logged = eventually(Duration::from_secs(5), || async {
            gw.log_text().contains("TLS with the worker failed")
        });
        assert!(logged.await, "{reason}");
        drop(m);
    }
}

#[test]
fn a_bad_ca_bundle_stops_startup() {
    let pki = Pki::new();
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let missing = pki.dir.join("missing.pem");
    for (path, said) in [(&garbage, "no PEM certificate"), (&missing, "cannot read")] {
        let out = run_to_exit(&["--upstream-ca-cert-path", path.to_str().unwrap()], &[]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--upstream-ca-cert-path") && stderr.contains(said),
            "{stderr}"
        );
    }
}
