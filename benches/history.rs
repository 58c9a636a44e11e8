//! The history store's latency per backend: a store write (`put_response` of a ~2 KB
//! record, what every stored response costs) and a chain read (`get_response`, what every
//! `previous_response_id` turn costs), each awaited from a caller's runtime as a request
//! handler would. `memory` in this process; `postgres` and `redis` on throwaway local
//! servers (Debian's packages, see tests/common/stores.rs), skipped with a note when those
//! cannot be started.

#[path = "../tests/common/stores.rs"]
mod stores;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::history::{self, History, HistoryBackend, HistorySettings, Owner, ResponseRecord};
use tollgate::secret::Secret;

/// A stored response of about 2 KB: the object, its input items and its context.
fn record(id: &str) -> ResponseRecord {
    let text = "The gateway keeps the turn so the next one can continue from it. ".repeat(8);
    ResponseRecord {
        id: id.to_owned(),
        owner: Owner::tenant(Arc::from("bench")),
        created_at: 1_700_000_000,
        status: "completed".into(),
        conversation: None,
        object: format!(
            r#"{{"id":"{id}","object":"response","status":"completed","output":[{{"type":"message","content":[{{"type":"output_text","text":"{text}"}}]}}]}}"#
        ),
        input_items: format!(
            r#"[{{"id":"msg_1","type":"message","role":"user","content":"{text}"}}]"#
        ),
        context: format!(
            r#"[{{"type":"message","role":"user","content":"{text}"}},{{"type":"message","role":"assistant","content":"{text}"}}]"#
        ),
    }
}

fn run(c: &mut Criterion, name: &str, store: Arc<dyn History>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return eprintln!("history/{name}: no runtime: {err}"),
    };
    let owner = Owner::tenant(Arc::from("bench"));
    let size = {
        let r = record("resp_size");
        r.object.len() + r.input_items.len() + r.context.len()
    };
    eprintln!("history/{name}: record of {size} bytes");
    let mut n = 0u64;
    c.bench_function(&format!("history/{name}/put_response"), |b| {
        b.iter(|| {
            n += 1;
            let put = store.put_response(record(&format!("resp_{n}")));
            black_box(rt.block_on(put)).ok();
        })
    });
    if let Err(err) = rt.block_on(store.put_response(record("resp_chain"))) {
        return eprintln!("history/{name}: cannot store the read's record: {err}");
    }
    c.bench_function(&format!("history/{name}/get_response"), |b| {
        b.iter(|| {
            let found = rt.block_on(store.get_response(&owner, "resp_chain"));
            black_box(found).ok();
        })
    });
}

fn open(backend: HistoryBackend, url: Option<&str>) -> Option<Arc<dyn History>> {
    let url = url.map(Secret::new);
    let settings = HistorySettings {
        backend,
        postgres_url: url.clone(),
        redis_url: url,
        timeout: Duration::from_secs(5),
        ..HistorySettings::default()
    };
    match history::open(&settings) {
        Ok(store) => Some(store),
        Err(err) => {
            eprintln!("history/{}: skipped, cannot open: {err}", backend.as_str());
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    if let Some(store) = open(HistoryBackend::Memory, None) {
        run(c, "memory", store);
    }
    match stores::Server::postgres() {
        Ok(server) => {
            if let Some(store) = open(HistoryBackend::Postgres, Some(&server.url)) {
                run(c, "postgres", store);
            }
        }
        Err(why) => eprintln!("history/postgres: skipped, no server: {why}"),
    }
    match stores::Server::redis() {
        Ok(server) => {
            if let Some(store) = open(HistoryBackend::Redis, Some(&server.url)) {
                run(c, "redis", store);
            }
        }
        Err(why) => eprintln!("history/redis: skipped, no server: {why}"),
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
