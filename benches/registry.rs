//! The data plane's view of the fleet: load the current snapshot and pick a worker with
//! round robin, for 2, 64 and 1,024 ready workers, while another thread keeps registering
//! and removing a worker (so every few microseconds a new snapshot is published).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tollgate::config::PolicyName;
use tollgate::fleet::{Registry, Status, Worker};
use tollgate::routing::{self, RequestFacts};

fn ready_worker(port: u32) -> Arc<Worker> {
    let url = format!(
        "http://10.{}.{}.{}:8000",
        port >> 16 & 255,
        port >> 8 & 255,
        port & 255
    );
    let worker = Arc::new(Worker::for_url(&url).expect("worker url"));
    worker.set_status(Status::Ready);
    worker
}

fn bench_select(c: &mut Criterion) {
    let policy =
        routing::build_with_params(PolicyName::RoundRobin, &routing::PolicyParams::default());
    let mut group = c.benchmark_group("snapshot_select_round_robin");
    for size in [2u32, 64, 1024] {
        let registry = Arc::new(Registry::new());
        for i in 0..size {
            registry.insert(ready_worker(i));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let (registry, stop) = (registry.clone(), stop.clone());
            thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let worker = ready_worker((1 << 20) | (n % 4096));
                    registry.insert(worker.clone());
                    registry.remove(&worker.id);
                    n = n.wrapping_add(1);
                }
                n
            })
        };
        let facts = RequestFacts::default();
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| {
                let snapshot = registry.snapshot();
                let routable = snapshot.routable();
                let pick = policy.select(routable, &facts).map(|i| routable[i].load());
                black_box(pick)
            })
        });
        stop.store(true, Ordering::Relaxed);
        let publishes = churn.join().expect("churn thread");
        println!(
            "  ({size} workers: {} snapshots published meanwhile)",
            publishes * 2
        );
    }
    group.finish();
}

criterion_group!(benches, bench_select);
criterion_main!(benches);
