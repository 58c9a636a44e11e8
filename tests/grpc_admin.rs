//! Administration of gRPC engines, black box: `POST /flush_cache`, `/start_profile`,
//! `/stop_profile` and the engine load monitor (`GET /loads`) against the bundled
//! `grpc-engine` speaking SGLang's service and vLLM's. Each RPC the engine receives is a
//! line in its log, so the tests check what reached it.

use crate::common;
use crate::support;

use std::time::Duration;

use common::tokenizer::write_tokenizer;
use common::{eventually, gateway, get, post_json, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{grpc_url, logged, temp_dir};

/// A gateway in front of `engines`, tokenizing with a tokenizer written for the test.
async fn gateway_for(name: &str, engines: &[&Proc], extra: &[&str]) -> Proc {
    let dir = temp_dir("grpc-admin", name);
    write_tokenizer(&dir);
    let urls: Vec<String> = engines.iter().map(|e| grpc_url(e)).collect();
    let mut args = vec!["--model-path", dir.to_str().unwrap(), "--worker-urls"];
    args.extend(urls.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::listed_workers(&gw).await.len() == engines.len()
        })
        .await,
        "{}",
        gw.log_text()
    );
    gw
}

fn sglang(args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--model", "m"], args].concat())
}

fn vllm(args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--service", "vllm", "--model", "m"], args].concat())
}

fn failures(body: &Value) -> Vec<(String, String)> {
    body["failed"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|f| {
                    (
                        f["worker"].as_str().unwrap_or("").to_owned(),
                        f["error"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn flush_cache_reaches_both_grpc_services() {
    let s = sglang(&[]);
    let v = vllm(&[]);
    let gw = gateway_for("flush", &[&s, &v], &[]).await;
    let reply = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "success");
    assert_eq!(body["workers_flushed"], 2);
    assert_eq!(body["total_grpc_workers"], 2);
    assert_eq!(body["total_http_workers"], 0);
    assert_eq!(body["total_workers"], 2);
    assert!(body.get("failed").is_none(), "{body}");
    for engine in [&s, &v] {
        logged(engine, "flush_cache success=true").await;
    }
}

#[tokio::test]
async fn a_refused_flush_counts_under_failed() {
    let ok = sglang(&[]);
    let busy = vllm(&["--refuse-flush"]);
    let gw = gateway_for("refused", &[&ok, &busy], &[]).await;
    let reply = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(reply.status, 206, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "partial_success");
    assert_eq!(body["workers_flushed"], 1);
    assert_eq!(body["successful"], json!([grpc_url(&ok)]));
    let failed = failures(&body);
    assert_eq!(failed.len(), 1, "{body}");
    assert_eq!(failed[0].0, grpc_url(&busy));
    assert!(
        failed[0].1.contains("FlushCache refused by the engine")
            && failed[0].1.contains("requests are in flight"),
        "{}",
        failed[0].1
    );
}

#[tokio::test]
async fn profiling_reaches_sglang_and_reports_vllm_as_unimplemented() {
    let s = sglang(&[]);
    let v = vllm(&[]);
    let gw = gateway_for("profile", &[&s, &v], &[]).await;
    let reply = post_json(
        &format!("{}/start_profile", gw.url()),
        &json!({"output_dir": "/tmp/traces", "num_steps": 4}),
    )
    .await;
    assert_eq!(reply.status, 206, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["successful"], json!([grpc_url(&s)]));
    let failed = failures(&body);
    assert_eq!(failed.len(), 1, "{body}");
    assert_eq!(failed[0].0, grpc_url(&v));
    assert!(
        failed[0]
            .1
            .starts_with("UNIMPLEMENTED: vllm workers do not support StartProfile"),
        "{}",
        failed[0].1
    );
    logged(&s, "start_profile output_dir=/tmp/traces num_steps=4").await;

    // Only the SGLang engine, named by its URL: all targeted workers succeed.
    let reply = post_json(
        &format!("{}/stop_profile", gw.url()),
        &json!({"url": grpc_url(&s)}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    logged(&s, "stop_profile").await;
}

#[tokio::test]
async fn the_load_monitor_asks_grpc_engines_with_get_loads() {
    let s = sglang(&["--itl-ms", "100"]);
    let v = vllm(&[]);
    let gw = gateway_for("loads", &[&s, &v], &["--load-monitor-interval", "1"]).await;
    let url = format!("{}/loads", gw.url());
    let mut last = Value::Null;
    for _ in 0..100 {
        last = get(&url).await.json();
        if last["loads"].as_array().is_some_and(|l| l.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        last["loads"].as_array().map(Vec::len),
        Some(2),
        "{last}\n{}",
        gw.log_text()
    );
    for entry in last["loads"].as_array().unwrap() {
        assert_eq!(entry["dp_rank"], 0, "{entry}");
        assert_eq!(entry["worker_type"], "regular");
        assert_eq!(entry["max_running_requests"], 4096, "{entry}");
    }
    assert_eq!(last["dp_rank_count"], 2);
    // The worker object carries the report too.
    let workers = common::listed_workers(&gw).await;
    assert!(
        workers.iter().all(|w| w["engine_load"]["source"] == "grpc"),
        "{workers:?}"
    );
}

fn service(name: &str, args: &[&str]) -> Proc {
    common::grpc_engine(&[&["--service", name, "--model", "m"], args].concat())
}

#[tokio::test]
async fn tokenspeed_takes_every_admin_rpc_and_trtllm_and_mlx_none() {
    let ts = service("tokenspeed", &[]);
    let trt = service("trtllm", &[]);
    let mlx = service("mlx", &[]);
    let gw = gateway_for(
        "three",
        &[&ts, &trt, &mlx],
        &["--load-monitor-interval", "1"],
    )
    .await;

    let reply = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(reply.status, 206, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["workers_flushed"], 1);
    assert_eq!(body["total_grpc_workers"], 3);
    assert_eq!(body["successful"], json!([grpc_url(&ts)]));
    let mut failed = failures(&body);
    failed.sort();
    let mut expected = vec![
        (
            grpc_url(&trt),
            "UNIMPLEMENTED: trtllm workers do not support FlushCache".to_owned(),
        ),
        (
            grpc_url(&mlx),
            "UNIMPLEMENTED: mlx workers do not support FlushCache".to_owned(),
        ),
    ];
    expected.sort();
    assert_eq!(failed, expected, "{body}");
    logged(&ts, "flush_cache success=true").await;

    let reply = post_json(
        &format!("{}/start_profile", gw.url()),
        &json!({"url": grpc_url(&ts), "output_dir": "/tmp/ts", "num_steps": 2}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    logged(&ts, "start_profile output_dir=/tmp/ts num_steps=2").await;
    let reply = post_json(&format!("{}/stop_profile", gw.url()), &json!({})).await;
    assert_eq!(reply.status, 206, "{}", reply.text());
    assert_eq!(reply.json()["successful"], json!([grpc_url(&ts)]));
    assert_eq!(failures(&reply.json()).len(), 2, "{}", reply.text());
    logged(&ts, "stop_profile").await;

    // Only TokenSpeed reports loads; the others are omitted, not shown as failing.
    let url = format!("{}/loads", gw.url());
    let mut last = Value::Null;
    for _ in 0..100 {
        last = get(&url).await.json();
        if last["loads"].as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let loads = last["loads"].as_array().cloned().unwrap_or_default();
    assert_eq!(loads.len(), 1, "{last}\n{}", gw.log_text());
    assert_eq!(loads[0]["worker"], grpc_url(&ts), "{last}");
    // Two more polls: still only one report.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let again = get(&url).await.json();
    assert_eq!(again["loads"].as_array().map(Vec::len), Some(1), "{again}");
}
