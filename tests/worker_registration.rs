//! Worker registration edge cases found by the issue 22 sweep, black box:
//!
//! - a `--worker-urls` worker that is not up yet when the gateway starts goes through the
//!   same pending → detect → ready path as `POST /workers` (spec 1: probed every
//!   `--worker-startup-check-interval`), while the gateway listens at once;
//! - "each URL once" holds for every spelling of one URL (case, default port, path, dot
//!   segments), and a query or fragment is refused;
//! - the jobs of one worker run one after the other, so a PUT racing a DELETE never puts
//!   a draining worker back in rotation.
//!
//! External providers are registered like any worker; tests/providers.rs covers them.

use crate::common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{client, eventually, free_port, gateway, get, mock, post_json, send};
use common::{listed_workers, mock_requests, Proc, Reply};
use serde_json::{json, Value};

fn chat() -> Value {
    json!({"model": "late-model", "messages": [{"role": "user", "content": "hi"}]})
}

async fn put(gw: &Proc, id: &str, spec: &Value) -> Reply {
    let body = Bytes::from(serde_json::to_vec(spec).expect("json"));
    let url = format!("{}/workers/{id}", gw.url());
    send(
        &client(false),
        "PUT",
        &url,
        &[("content-type", "application/json")],
        body,
    )
    .await
}

async fn delete(gw: &Proc, id: &str) -> Reply {
    let url = format!("{}/workers/{id}", gw.url());
    send(&client(false), "DELETE", &url, &[], Bytes::new()).await
}

async fn status_of(gw: &Proc, id: &str) -> Option<String> {
    let reply = get(&format!("{}/workers/{id}", gw.url())).await;
    (reply.status == 200).then(|| reply.json()["status"].as_str().unwrap_or("").to_owned())
}

async fn readiness(gw: &Proc) -> u16 {
    get(&format!("{}/readiness", gw.url())).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_worker_that_comes_up_late_is_detected_and_routable_once_ready() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let gw = gateway(&[
        "--worker-urls",
        &url,
        "--worker-startup-check-interval",
        "1",
        "--worker-startup-timeout-secs",
        "60",
        "--health-check-interval-secs",
        "1",
    ]);
    // Listening at once, not ready, and the worker not routable before it answers.
    assert_eq!(readiness(&gw).await, 503);
    let early = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
    assert_eq!(early.status, 503, "{}", early.text());
    std::thread::sleep(Duration::from_secs(2));
    let port_arg = port.to_string();
    let _late = mock(&[
        "--port",
        &port_arg,
        "--runtime",
        "sglang",
        "--model",
        "late-model",
    ]);
    assert!(
        eventually(Duration::from_secs(15), || async {
            readiness(&gw).await == 200
        })
        .await,
        "the late worker never became ready:\n{}",
        gw.log_text()
    );
    let models = get(&format!("{}/v1/models", gw.url())).await;
    assert_eq!(models.status, 200, "{}", models.text());
    assert!(models.text().contains("late-model"), "{}", models.text());
    let listed = listed_workers(&gw).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["url"], url.as_str());
    assert_eq!(listed[0]["runtime_type"], "sglang", "{}", listed[0]);
    assert_eq!(listed[0]["model_id"], "late-model", "{}", listed[0]);
    assert_eq!(listed[0]["status"], "ready", "{}", listed[0]);
    // No breaker period: every request succeeds right away.
    for _ in 0..5 {
        let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_listed_twice_on_the_command_line_in_two_spellings_registers_once() {
    let m = mock(&["--model", "late-model"]);
    let port = m.addr.port();
    let a = format!("http://localhost:{port}");
    let b = format!("http://LOCALHOST:{port}/v1/../");
    let gw = gateway(&["--worker-urls", &a, &b]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            readiness(&gw).await == 200
        })
        .await,
        "{}",
        gw.log_text()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listed = listed_workers(&gw).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["url"], a.as_str());
}

/// A URL on 127.0.0.3 whose port refuses connections.
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.3:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_registered_url_is_the_same_worker() {
    let gw = gateway(&[
        "--worker-startup-check-interval",
        "1",
        "--worker-startup-timeout-secs",
        "30",
    ]);
    let add = |spec: Value| {
        let url = format!("{}/workers", gw.url());
        async move { post_json(&url, &spec).await }
    };
    let unprobed = |url: &str| json!({"url": url, "health": {"disable_health_check": true}});
    let port = dead_port();
    let base = format!("http://localhost:{port}");
    let first = add(unprobed(&base)).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let id = first.json()["worker_id"].as_str().unwrap_or("").to_owned();
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_of(&gw, &id).await.as_deref() == Some("ready")
        })
        .await
    );
    for variant in [
        format!("http://localhost:{port}/"),
        format!("http://LocalHost:{port}"),
        format!("http://localhost:0{port}"),
        format!("http://localhost:{port}/../"),
        format!("http://localhost:{port}/v1/.."),
        format!("http://localhost:{port}/v1"),
    ] {
        let reply = add(unprobed(&variant)).await;
        assert_eq!(reply.status, 409, "{variant}: {}", reply.text());
        assert_eq!(reply.json()["code"], "WORKER_ALREADY_EXISTS", "{variant}");
        assert!(reply.text().contains(&id), "{variant}: {}", reply.text());
    }
    for variant in [
        format!("http://localhost:{port}?x=1"),
        format!("http://localhost:{port}/#frag"),
        format!("http://localhost:{port}#"),
    ] {
        let reply = add(unprobed(&variant)).await;
        assert_eq!(reply.status, 400, "{variant}: {}", reply.text());
        assert_eq!(reply.json()["code"], "BAD_REQUEST", "{variant}");
    }
    // The default port is the port.
    let reply = add(unprobed("http://localhost.test:80/")).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let other = reply.json()["worker_id"].as_str().unwrap_or("").to_owned();
    assert_eq!(reply.json()["url"], "http://localhost.test");
    // Registered, not still registering: a second spelling of a registration under way
    // is told to poll it (202, below), of a registered worker refused (409).
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_of(&gw, &other).await.as_deref() == Some("ready")
        })
        .await
    );
    let reply = add(unprobed("http://LOCALHOST.test")).await;
    assert_eq!(reply.status, 409, "{}", reply.text());

    // While a registration runs (a worker that does not answer yet), a second spelling
    // is told to poll the first.
    let pending = format!("http://127.0.0.3:{}", dead_port());
    let reply = add(json!({"url": pending})).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let polling = reply.json()["worker_id"].as_str().unwrap_or("").to_owned();
    let reply = add(json!({"url": format!("{pending}/x/../")})).await;
    assert_eq!(reply.status, 409, "{}", reply.text());
    assert_eq!(reply.json()["code"], "WORKER_CREATE_IN_PROGRESS");
    assert!(reply.text().contains(&polling), "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_racing_a_delete_never_puts_the_worker_back() {
    let m = mock(&["--model", "late-model"]);
    let gw = gateway(&["--health-check-interval-secs", "1"]);
    let spec = json!({
        "url": m.url(),
        "health": {"success_threshold": 1, "failure_threshold": 1, "check_interval_secs": 1,
                   "drain_settle_secs": 2},
    });
    let chat_url = format!("{}/v1/chat/completions", gw.url());
    for round in 0..4 {
        let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
        assert_eq!(reply.status, 202, "round {round}: {}", reply.text());
        let id = reply.json()["worker_id"].as_str().unwrap_or("").to_owned();
        assert!(
            eventually(Duration::from_secs(10), || async {
                status_of(&gw, &id).await.as_deref() == Some("ready")
            })
            .await,
            "round {round}: never ready"
        );
        // Back to back, one order or the other.
        let (first, second) = if round % 2 == 0 {
            (delete(&gw, &id).await, put(&gw, &id, &spec).await)
        } else {
            (put(&gw, &id, &spec).await, delete(&gw, &id).await)
        };
        assert_eq!(first.status, 202, "round {round}: {}", first.text());
        assert_eq!(second.status, 202, "round {round}: {}", second.text());
        // Once the DELETE took effect (draining, then gone), the worker never takes
        // traffic or shows ready again.
        let mut deleting = false;
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            match status_of(&gw, &id).await.as_deref() {
                None => break,
                Some("draining") => deleting = true,
                Some(other) if deleting => {
                    panic!("round {round}: worker went back to {other} while being removed")
                }
                _ => {}
            }
            if deleting {
                let before = mock_requests(&m).await.len();
                let reply = post_json(&chat_url, &chat()).await;
                assert_eq!(
                    reply.status, 503,
                    "round {round}: draining worker took traffic"
                );
                assert_eq!(mock_requests(&m).await.len(), before);
            }
            assert!(Instant::now() < end, "round {round}: worker never removed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Gone, and stays gone.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(status_of(&gw, &id).await, None, "round {round}");
        assert!(listed_workers(&gw).await.is_empty(), "round {round}");
        let before = mock_requests(&m).await.len();
        let reply = post_json(&chat_url, &chat()).await;
        assert_eq!(reply.status, 503, "round {round}: {}", reply.text());
        assert_eq!(mock_requests(&m).await.len(), before, "round {round}");
    }
}
