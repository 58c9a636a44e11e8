//! Responses and conversations on the durable history backends, black box: real Postgres
//! and Redis servers (Debian's packages, started on 127.0.0.1 with throwaway data; a server
//! that cannot start fails the test), the bundled gRPC engine, and two gateway processes
//! on one database serving one conversation and one `previous_response_id` chain
//! alternately, one of them restarted in the middle: nothing is lost.

use crate::common;
use crate::support;

use crate::common::stores;

use common::{gateway, get, post_json, wait_ready, Proc};
use serde_json::{json, Value};
use stores::Server;
use support::echo::{grpc_url, sglang_echo};
use support::response_text;

async fn start_gateway(engine: &str, dir: &str, store: &[&str]) -> Proc {
    let mut args = vec!["--worker-urls", engine, "--model-path", dir];
    args.extend_from_slice(store);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    gw
}

async fn respond(gw: &Proc, body: Value) -> Value {
    let reply = post_json(&format!("{}/v1/responses", gw.url()), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

async fn two_gateways_share_one_store(name: &str, server: Server, flag: &str) {
    let (engine, dir) = sglang_echo("durable", name);
    let engine_url = grpc_url(&engine);
    let dir = dir.to_str().unwrap().to_owned();
    let store = ["--history-backend", name, flag, &server.url];
    let mut a = start_gateway(&engine_url, &dir, &store).await;
    let b = start_gateway(&engine_url, &dir, &store).await;

    // A conversation made on A, continued on B, then on A again.
    let made = post_json(&format!("{}/v1/conversations", a.url()), &json!({})).await;
    assert_eq!(made.status, 200, "{}", made.text());
    let conv = made.json()["id"].as_str().unwrap().to_owned();
    let body = |input: &str, instructions: &str| {
        json!({"model": "echo-model", "max_output_tokens": 200, "conversation": conv,
               "input": input, "instructions": instructions})
    };
    respond(&a, body("one", "A")).await;
    respond(&b, body("two", "B")).await;

    // A chain started on B, continued on A, A restarted, continued on the new A.
    let first = respond(
        &b,
        json!({"model": "echo-model", "max_output_tokens": 200, "input": "chain start"}),
    )
    .await;
    let second = respond(
        &a,
        json!({"model": "echo-model", "max_output_tokens": 200, "input": "more",
               "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(
        response_text(&second),
        "user\nchain start",
        "A sees B's turn"
    );
    a.terminate(std::time::Duration::from_secs(10));
    let a = start_gateway(&engine_url, &dir, &store).await;
    let third = respond(
        &a,
        json!({"model": "echo-model", "max_output_tokens": 200, "input": "after restart",
               "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(
        response_text(&third),
        "user\nchain start",
        "the chain survived the restart"
    );
    respond(&a, body("three", "C")).await;

    let items = get(&format!(
        "{}/v1/conversations/{conv}/items?order=asc",
        b.url()
    ))
    .await;
    assert_eq!(items.status, 200, "{}", items.text());
    let texts: Vec<String> = items.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .map(|item| item["content"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts,
        ["one", "system\nA", "two", "system\nB", "three", "system\nC"],
        "{name}: every turn of both gateways, in order"
    );
    for response in [&first, &second, &third] {
        let id = response["id"].as_str().unwrap();
        let got = get(&format!("{}/v1/responses/{id}", b.url())).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.json()["id"], response["id"]);
    }
}

#[tokio::test]
async fn postgres_serves_two_gateways_and_a_restart() {
    let server = Server::postgres().expect("postgres (tests/run.sh installs it)");
    two_gateways_share_one_store("postgres", server, "--postgres-db-url").await;
}

#[tokio::test]
async fn redis_serves_two_gateways_and_a_restart() {
    let server = Server::redis().expect("redis-server (tests/run.sh installs it)");
    two_gateways_share_one_store("redis", server, "--redis-url").await;
}
