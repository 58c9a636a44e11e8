//! Output: a human table, or with `--json` one JSON object (what `perf/compare.sh` reads).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::cli::Options;
use crate::idle::Idle;
use crate::stats::Stats;
use crate::workload::WorkloadKind;

/// The quantiles reported for every histogram, with their JSON keys.
const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// Percentiles in milliseconds, or `null` when nothing was recorded.
fn summary(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return Value::Null;
    }
    let mut out = serde_json::Map::new();
    for (key, q) in QUANTILES {
        out.insert(key.into(), json!(ms(h.value_at_quantile(q))));
    }
    out.insert("max".into(), json!(ms(h.max())));
    out.insert("mean".into(), json!(h.mean() / 1000.0));
    out.insert("count".into(), json!(h.len()));
    Value::Object(out)
}

fn workload_name(kind: &WorkloadKind) -> &'static str {
    match kind {
        WorkloadKind::Fixed => "fixed",
        WorkloadKind::Prefix { .. } => "prefix",
        WorkloadKind::Conversation { .. } => "conversation",
    }
}

fn to_json(o: &Options, s: &Stats, elapsed: Duration) -> Value {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let by_status: serde_json::Map<_, _> = s
        .by_status
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let failures: serde_json::Map<_, _> = s
        .failures
        .iter()
        .map(|(k, v)| (k.name().to_string(), json!(v)))
        .collect();
    let cached_share = if s.prompt_tokens > 0 {
        json!(s.cached_tokens as f64 / s.prompt_tokens as f64)
    } else {
        Value::Null
    };
    json!({
        "url": o.url,
        "protocol": if o.http2 { "h2c" } else { "http/1.1" },
        "loop": if o.rate.is_some() { "open" } else { "closed" },
        "rate": o.rate,
        "connections": o.connections,
        "concurrency": o.concurrency,
        "template": o.template.name(),
        "stream": o.stream,
        "workload": workload_name(&o.workload),
        "elapsed_s": secs,
        "ok": s.ok,
        "errors": s.errors(),
        "missed": s.missed,
        "rps": s.ok as f64 / secs,
        "tokens": s.tokens,
        "tokens_per_s": s.tokens as f64 / secs,
        "latency_ms": summary(&s.latency),
        "ttft_ms": summary(&s.ttft),
        "itl_ms": summary(&s.itl),
        "errors_by_status": by_status,
        "errors_by_code": s.by_code,
        "errors_by_transport": failures,
        "prompt_tokens": s.prompt_tokens,
        "cached_tokens": s.cached_tokens,
        "cached_share": cached_share,
    })
}

/// Prints the result of a load run.
pub fn load(o: &Options, s: &Stats, elapsed: Duration) {
    let report = to_json(o, s, elapsed);
    if o.json {
        println!("{report}");
        return;
    }
    let num = |key: &str| report[key].as_f64().unwrap_or(0.0);
    println!(
        "{} {} {} loop, {} workload, {} connections, {} concurrent, {:.1} s",
        o.url,
        report["protocol"].as_str().unwrap_or(""),
        report["loop"].as_str().unwrap_or(""),
        report["workload"].as_str().unwrap_or(""),
        o.connections,
        o.concurrency,
        num("elapsed_s"),
    );
    println!(
        "requests: {} ok, {} errors, {} missed; {:.1} req/s",
        s.ok,
        s.errors(),
        s.missed,
        num("rps")
    );
    println!(
        "\n{:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "ms", "p50", "p90", "p99", "p99.9", "max", "count"
    );
    for (name, h) in [("latency", &s.latency), ("ttft", &s.ttft), ("itl", &s.itl)] {
        if h.is_empty() {
            continue;
        }
        print!("{name:<10}");
        for (_, q) in QUANTILES {
            print!(" {:>10.3}", ms(h.value_at_quantile(q)));
        }
        println!(" {:>10.3} {:>10}", ms(h.max()), h.len());
    }
    if s.tokens > 0 {
        println!("\ntokens: {} ({:.0}/s)", s.tokens, num("tokens_per_s"));
    }
    if s.prompt_tokens > 0 {
        println!(
            "prompt tokens: {}, cached: {} (share {:.3})",
            s.prompt_tokens,
            s.cached_tokens,
            report["cached_share"].as_f64().unwrap_or(0.0)
        );
    }
    for (status, n) in &s.by_status {
        println!("status {status}: {n}");
    }
    for (code, n) in &s.by_code {
        println!("error code {code}: {n}");
    }
    for (failure, n) in &s.failures {
        println!("{}: {n}", failure.name());
    }
}

/// Prints the result of an idle-connections run.
pub fn idle(o: &Options, held: &Idle) {
    if o.json {
        println!(
            "{}",
            json!({"url": o.url, "idle_opened": held.opened, "idle_failed": held.failed,
                "open_s": held.open_time.as_secs_f64()})
        );
    } else {
        println!(
            "{}: {} idle connections held, {} failed, opened in {:.2} s",
            o.url,
            held.opened,
            held.failed,
            held.open_time.as_secs_f64()
        );
    }
}
