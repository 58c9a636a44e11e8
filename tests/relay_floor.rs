//! `relay-floor` (`perf/relay_floor/`), the cost floor `perf/compare small` measures beside
//! nginx: it must relay what the mock answers, answer its own health check, say 502 when
//! the upstream is down, and refuse a command line without an upstream.

use crate::common;

use common::{free_port, get, mock, post_json, relay_floor, RELAY_FLOOR};
use serde_json::json;

#[tokio::test]
async fn relays_a_chat_and_answers_health() {
    let worker = mock(&["--output-tokens", "4"]);
    let upstream = worker.addr.to_string();
    let floor = relay_floor(&["--upstream", &upstream]);

    let health = get(&format!("{}/health", floor.url())).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.text(), "ok");

    let body = json!({"model": "m", "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hello"}]});
    for _ in 0..3 {
        // Three in a row: the second and third reuse the pooled upstream connection.
        let reply = post_json(&format!("{}/v1/chat/completions", floor.url()), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["object"], "chat.completion");
        assert!(answer["choices"][0]["message"]["content"].is_string());
        let media = reply
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok());
        assert!(
            media.is_some_and(|m| m.starts_with("application/json")),
            "{media:?}"
        );
    }
}

#[tokio::test]
async fn an_upstream_that_is_down_is_a_502() {
    let nobody = format!("127.0.0.1:{}", free_port());
    let floor = relay_floor(&["--upstream", &nobody]);
    let reply = post_json(&format!("{}/v1/chat/completions", floor.url()), &json!({})).await;
    assert_eq!(reply.status, 502);
}

#[test]
fn an_upstream_is_required() {
    let out = std::process::Command::new(RELAY_FLOOR)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--upstream is required"), "{stderr}");
    let help = std::process::Command::new(RELAY_FLOOR)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--upstream HOST:PORT"));
}
