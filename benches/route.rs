//! Route matcher micro-benchmarks: every route with sample parameters, single hot routes,
//! an unknown path and a long path.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::Method;
use tollgate::http::route::{match_metrics_route, match_route, Route, RouteMatch};

/// A concrete request path for `template`, parameters filled with realistic values.
fn sample_path(template: &str) -> String {
    template
        .replace("{worker_id}", "0b6f0c7e-1a2b-4c3d-8e9f-001122334455")
        .replace("{tokenizer_id}", "meta-llama-3-8b")
        .replace("{module_uuid}", "5f1d4a4e-0000-4000-8000-000000000000")
        .replace("{response_id}", "resp_67ccd2bed1ec8190b14f964abc054267")
        .replace("{conversation_id}", "conv_689667905b048191b4740501625afd94")
        .replace("{item_id}", "msg_abc123")
        .replace("{id}", "0b6f0c7e-1a2b-4c3d-8e9f-001122334455")
        .replace("{path}", "update_weights_from_disk")
}

fn requests() -> Vec<(Method, String)> {
    Route::ALL
        .iter()
        .filter(|route| **route != Route::Metrics)
        .map(|route| (route.method(), sample_path(route.template())))
        .collect()
}

fn bench_routes(c: &mut Criterion) {
    let all = requests();
    for (method, path) in &all {
        assert!(
            matches!(match_route(method, path), RouteMatch::Found(_)),
            "{method} {path}"
        );
    }

    let mut group = c.benchmark_group("match_route");
    group.throughput(Throughput::Elements(all.len() as u64));
    group.bench_function("all_routes", |b| {
        b.iter(|| {
            for (method, path) in &all {
                black_box(match_route(black_box(method), black_box(path)));
            }
        })
    });
    group.finish();

    let long_path = format!("/v1/rl/engine/{}", "segment/".repeat(64)) + "end";
    let long_unknown = "/v1/".to_owned() + &"x".repeat(2048);
    let singles: [(&str, Method, &str); 9] = [
        ("chat_completions", Method::POST, "/v1/chat/completions"),
        ("generate", Method::POST, "/generate"),
        ("health", Method::GET, "/health"),
        (
            "worker_get",
            Method::GET,
            "/workers/0b6f0c7e-1a2b-4c3d-8e9f-001122334455",
        ),
        (
            "conversation_item_delete",
            Method::DELETE,
            "/v1/conversations/conv_689667905b048191b4740501625afd94/items/msg_abc123",
        ),
        ("method_not_allowed", Method::GET, "/v1/chat/completions"),
        ("unknown", Method::GET, "/favicon.ico"),
        ("long_rl_path", Method::POST, &long_path),
        ("long_unknown", Method::GET, &long_unknown),
    ];
    let mut group = c.benchmark_group("match_route_single");
    for (name, method, path) in &singles {
        group.bench_function(*name, |b| {
            b.iter(|| match_route(black_box(method), black_box(path)))
        });
    }
    group.bench_function("metrics_listener", |b| {
        b.iter(|| match_metrics_route(black_box(&Method::GET), black_box("/metrics")))
    });
    group.finish();
}

criterion_group!(benches, bench_routes);
criterion_main!(benches);
