//! Client strings the gateway keeps beyond one request are bounded in length as well as in
//! number (issue: 40 requests with unique 2 MB `model` strings made the next scrape 2.72 GB
//! and the gateway's RSS 2.37 GB).

use crate::common;
use crate::support;

use common::{gateway, mock, post_json, scrape};
use serde_json::Value;

/// The gateway's resident set, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Unique long models per round.
const ROUND: u8 = 24;

/// Sends `ROUND` chat requests, each naming (and keyed by `rid` to) its own 1 MiB model.
async fn send_unique_long_models(url: &str, first: u8) {
    for i in first..first + ROUND {
        let mut body = support::chat(false, Value::Null);
        let long = format!("{}{i}", "m".repeat(1024 * 1024));
        body["model"] = Value::String(long.clone());
        body["rid"] = Value::String(long);
        let reply = post_json(url, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

/// Chat requests naming unique 1 MiB models, through a policy that reads the model and
/// the prompt (cache_aware) and one that keys a map by a client string (manual, by `rid`).
/// `reads_model`: the policy reads the body's model, so the router series carry it.
async fn unique_long_models(policy: &str, reads_model: bool) {
    let m = mock(&["--model", "bounded-model"]);
    // One data-plane thread: one allocator heap, so the first round warms exactly the heap
    // the second round uses (with two, a round can land on the colder one and grow it).
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--policy",
        policy,
        "--runtime-worker-threads",
        "1",
    ]);
    let url = format!("{}/v1/chat/completions", gw.url());
    let warm = post_json(&url, &support::chat(false, Value::Null)).await;
    assert_eq!(warm.status, 200, "{}", warm.text());
    // A first round brings the allocator to its working size for 1 MiB bodies (it keeps
    // freed pages for reuse, 20-50 MiB here); the second round must not add to it.
    send_unique_long_models(&url, 0).await;
    let _ = scrape(&gw).await;
    let before = rss_kib(gw.child.id());
    send_unique_long_models(&url, ROUND).await;
    let text = scrape(&gw).await;
    assert!(
        text.len() < 512 * 1024,
        "{policy}: scrape is {} bytes after 48 unique 1 MiB models",
        text.len()
    );
    let longest = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest < 2048, "{policy}: a series line of {longest} bytes");
    assert!(
        !reads_model || text.contains(r#"model="other""#),
        "{policy}: long models are counted under other"
    );
    let grown = rss_kib(gw.child.id()).saturating_sub(before);
    // Each request's 1 MiB body passes through; nothing of it may stay behind. Unbounded,
    // the labels, thread caches and policy maps kept several copies of each (> 70 MiB for
    // one round).
    assert!(
        grown < 16 * 1024,
        "{policy}: RSS grew by {grown} KiB in the second round"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_model_labels_do_not_grow_scrapes_or_memory_cache_aware() {
    unique_long_models("cache_aware", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_model_labels_and_routing_keys_are_bounded_manual() {
    unique_long_models("manual", false).await;
}
