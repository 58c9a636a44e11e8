//! What the metrics cost one proxied request: the exact recording calls the HTTP layer and
//! the router make for a small non-streaming chat completion that succeeds on the first
//! attempt (HTTP in-flight guard, body path, selection, upstream response, router request,
//! HTTP response), on one thread and on two threads at once (shared counters contend).

use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use http::Method;
use tollgate::admission::{Admission, AdmissionConfig};
use tollgate::config::PolicyName;
use tollgate::fleet::{Registry, Worker};
use tollgate::http::route::Route;
use tollgate::metrics::{Metrics, RouteLabels, Sources, DURATION_BUCKETS};
use tollgate::pipeline::body_path::{BodyPath, BufferReason};
use tollgate::routing::{self, PolicyParams, Selection};

fn metrics() -> Metrics {
    let registry = Registry::new();
    Metrics::new(
        &DURATION_BUCKETS,
        Sources {
            fleet: registry.fleet(),
            policy: routing::build_with_params(PolicyName::RoundRobin, &PolicyParams::default()),
            admission: Arc::new(Admission::new(&AdmissionConfig::default())),
        },
    )
}

/// The recording calls of one request.
fn one_request(m: &Metrics, worker: &Worker) {
    let started = Instant::now();
    let in_flight = m.http_started(&Method::POST, Route::ChatCompletions, started);
    let path = BodyPath::Buffered(BufferReason::Retryable);
    m.body_path(path.index(), path.path(), path.reason());
    let how = Selection {
        index: Some(0),
        branch: None,
        match_ratio: None,
    };
    m.selected(worker, Some("mock-model"), "round_robin", &how);
    m.upstream_response(200, "");
    let route = RouteLabels {
        connection_mode: "http",
        model: Some("mock-model"),
        endpoint: "chat",
    };
    let seconds = started.elapsed().as_secs_f64();
    m.routed(&route, false, seconds);
    black_box(&in_flight);
    in_flight.finished(200, "", seconds);
}

fn bench_request(c: &mut Criterion) {
    let m = Arc::new(metrics());
    let worker = Arc::new(Worker::for_url("http://127.0.0.1:8000").expect("worker"));
    c.bench_function("metrics_per_request/one_thread", |b| {
        b.iter(|| one_request(&m, &worker))
    });
    c.bench_function("metrics_per_request/two_threads", |b| {
        b.iter_custom(|iters| {
            let other = {
                let (m, worker) = (m.clone(), worker.clone());
                thread::spawn(move || {
                    for _ in 0..iters {
                        one_request(&m, &worker);
                    }
                })
            };
            let start = Instant::now();
            for _ in 0..iters {
                one_request(&m, &worker);
            }
            let took = start.elapsed();
            let _ = other.join();
            took
        })
    });
}

criterion_group!(benches, bench_request);
criterion_main!(benches);
