//! Policy micro-benchmarks: one decision per iteration for every policy with 2, 64 and
//! 1,024 ready candidates (a third of them with requests in flight), on 1 KB prompts that
//! share 16 system prefixes and on 1,024 distinct routing keys. For cache_aware each
//! decision includes the insert of the prompt for the chosen worker.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::config::PolicyName;
use tollgate::fleet::{LoadGuard, Status, Worker};
use tollgate::routing::{build_with_params, PolicyParams, RequestFacts};

/// Distinct prompts cycled through; bounds what cache_aware's tree grows to.
const PROMPTS: usize = 4096;
const KEYS: usize = 1024;

fn ready_workers(n: usize) -> (Vec<Arc<Worker>>, Vec<LoadGuard>) {
    let workers: Vec<Arc<Worker>> = (0..n)
        .map(|i| {
            let url = format!("http://10.0.{}.{}:8000", i >> 8, i & 255);
            let worker = Worker::for_url(&url).expect("worker url");
            worker.set_status(Status::Ready);
            Arc::new(worker)
        })
        .collect();
    let in_flight = workers
        .iter()
        .enumerate()
        .flat_map(|(i, w)| (0..i % 3).map(|_| w.track()))
        .collect();
    (workers, in_flight)
}

/// 1 KB prompts: one of 16 shared ~800-byte system prefixes, then a distinct question.
fn prompts() -> Vec<String> {
    let prefixes: Vec<String> = (0..16)
        .map(|p| format!("System {p}: you are a careful assistant. ").repeat(20))
        .collect();
    (0..PROMPTS)
        .map(|i| {
            let mut text = format!("{}Question {i}: ", prefixes[i % 16]);
            while text.len() < 1024 {
                text.push_str("please explain in detail ");
            }
            text.truncate(1024);
            text
        })
        .collect()
}

fn bench_policies(c: &mut Criterion) {
    let params = PolicyParams::default();
    let prompts = prompts();
    let keys: Vec<String> = (0..KEYS).map(|k| format!("session-{k}")).collect();
    for &name in PolicyName::ALL {
        let mut group = c.benchmark_group(format!("decide_{name}"));
        for size in [2usize, 64, 1024] {
            let policy = build_with_params(name, &params);
            let (workers, _in_flight) = ready_workers(size);
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
                b.iter(|| {
                    i = i.wrapping_add(1);
                    let facts = RequestFacts {
                        routing_key: Some(&keys[i % KEYS]),
                        text: Some(&prompts[i % PROMPTS]),
                        body_len: 1024,
                        ..RequestFacts::default()
                    };
                    black_box(policy.decide(black_box(&workers), &facts))
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_policies);
criterion_main!(benches);
