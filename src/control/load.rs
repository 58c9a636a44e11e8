//! The engine load monitor: every `--load-monitor-interval` it asks each ready HTTP worker
//! how busy its engine is, per data-parallel rank, and keeps the latest answer in the
//! worker's live figures ([`crate::fleet::Worker::engine_load`]), where `GET /loads`, the worker
//! object and, later, load-aware selection read it without locking or calling anyone.
//!
//! A gRPC engine answers its `GetLoads` RPC. Over HTTP the report comes from SGLang's JSON
//! load route (`GET /v1/loads`) where the engine has one, else from the engine's
//! Prometheus page (`GET /metrics`): SGLang's gauges (`sglang:`
//! or `sglang_` names) or vLLM's (`vllm:` names), per `dp_rank` label (vLLM's `engine`
//! label; rank 0 without either). A worker whose poll fails, or that leaves `ready`, loses
//! its report: a stale figure would steer traffic wrongly, an absent one is visibly absent.
//!
//! Everything is bounded: each poll (both routes together) by the smaller of the interval
//! and the worker's health timeout, each reply body by the call client's cap, the polls in
//! flight by [`MAX_PARALLEL_POLLS`], the ranks kept per worker by [`MAX_DP_RANKS`]. A
//! round waits for its polls, so rounds never overlap.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::Method;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use super::calls::{call_url, CallClient, CallError, CallReply};
use super::prom_text::{parse_line, Line, Sample};
use super::Control;
use crate::engine::grpc::Engine;
use crate::fleet::engine_load::{EngineLoad, Memory, Queues, RankLoad, Source};
use crate::fleet::{ConnectionMode, RuntimeType, Transport, Worker};

/// Polls in flight at once, so a large fleet is not hit in the same instant.
pub const MAX_PARALLEL_POLLS: usize = 32;
/// Most DP ranks kept from one report; more would only be a broken or hostile engine.
pub const MAX_DP_RANKS: usize = 1024;
/// SGLang's load route, asking only for the sections a load entry shows.
const LOADS_PATH: &str = "/v1/loads?include=core,memory,queues,disagg";

/// The monitor: a round of polls now and then every `--load-monitor-interval`, until the
/// control runtime stops. It always runs: under `--disable-load-monitoring` a round
/// that finds nothing to poll costs one snapshot walk, and a worker registered later with
/// an `overload` block must still be polled.
pub async fn monitor(control: Arc<Control>) {
    let interval = control.settings.load_monitor_interval;
    let client = CallClient::new(&control.tls);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        round(&control, &client).await;
    }
}

/// One round: polls every ready worker of a polled group; clears the report of workers
/// that are not ready.
async fn round(control: &Control, client: &CallClient) {
    let demand = control.load_demand;
    let workers: Vec<Arc<Worker>> = control
        .registry
        .snapshot()
        .all()
        .iter()
        .filter(|w| pollable(w) && (demand.polls(w.worker_type) || w.overload.is_some()))
        .cloned()
        .collect();
    let mut ready = Vec::with_capacity(workers.len());
    for worker in workers {
        if worker.is_ready() {
            ready.push(worker);
        } else {
            worker.set_engine_load(None);
        }
    }
    let interval = control.settings.load_monitor_interval;
    bounded_parallel(ready, MAX_PARALLEL_POLLS, |worker| {
        let client = client.clone();
        async move {
            let timeout = interval.min(worker.health.timeout);
            let result = poll(&client, &worker, timeout).await;
            store(&worker, result);
        }
    })
    .await;
}

/// Workers that can be asked: engines (not external providers) over HTTP, and gRPC
/// engines whose service reports loads (TensorRT-LLM's and MLX's do not).
fn pollable(worker: &Worker) -> bool {
    match worker.connection_mode() {
        ConnectionMode::Http => worker.runtime != RuntimeType::External,
        ConnectionMode::Grpc => worker
            .runtime
            .grpc_service()
            .is_some_and(crate::engine::grpc::Service::reports_loads),
        ConnectionMode::Zmq => false,
    }
}

/// Keeps a poll's outcome on a worker that is still registered.
fn store(worker: &Worker, result: Result<EngineLoad, String>) {
    if worker.is_retired() {
        return;
    }
    match result {
        Ok(report) => worker.set_engine_load(Some(Arc::new(report.for_target(worker)))),
        Err(reason) => {
            if worker.engine_load().is_some() {
                tracing::warn!(worker = %worker.url, %reason, "engine load poll failed; report dropped");
            } else {
                tracing::debug!(worker = %worker.url, %reason, "engine load poll failed");
            }
            worker.set_engine_load(None);
        }
    }
}

/// Reads one worker's load report: SGLang's load route first (engines known to lack it
/// are not asked), then its Prometheus page; both within `timeout`.
pub async fn poll(
    client: &CallClient,
    worker: &Worker,
    timeout: Duration,
) -> Result<EngineLoad, String> {
    if worker.connection_mode() == ConnectionMode::Grpc {
        return poll_grpc(client, worker, timeout).await;
    }
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    if !matches!(
        worker.runtime,
        RuntimeType::Vllm | RuntimeType::Trtllm | RuntimeType::Mlx
    ) {
        match ask(client, worker, LOADS_PATH, left()).await {
            Ok(reply) => {
                if let Some(loads) = success(&reply).and_then(from_loads_json) {
                    return Ok(report(Source::LoadsApi, loads));
                }
            }
            // Unreachable: the Prometheus page would not answer either.
            Err(err @ (CallError::Connect(_) | CallError::Timeout)) => return Err(err.to_string()),
            Err(_) => {}
        }
    }
    let reply = ask(client, worker, "/metrics", left())
        .await
        .map_err(|e| e.to_string())?;
    let body = success(&reply).ok_or_else(|| format!("/metrics answered {}", reply.status))?;
    from_metrics(&String::from_utf8_lossy(body))
        .map(|loads| report(Source::Metrics, loads))
        .ok_or_else(|| "no engine load figures in /metrics".to_owned())
}

/// A gRPC engine's `GetLoads`, within `timeout`.
async fn poll_grpc(
    client: &CallClient,
    worker: &Worker,
    timeout: Duration,
) -> Result<EngineLoad, String> {
    let (Some(service), Transport::Grpc { tls, authority }) =
        (worker.runtime.grpc_service(), &worker.transport)
    else {
        return Err("not a gRPC engine this gateway speaks to".to_owned());
    };
    let engine = Engine::new(service, client.grpc().clone(), authority, *tls);
    let loads = engine
        .loads(timeout)
        .await
        .map_err(|err| format!("GetLoads: {err}"))?;
    let count = |n: i32| u64::try_from(n).unwrap_or(0);
    let finite = |f: f64| if f.is_finite() && f > 0.0 { f } else { 0.0 };
    let mut ranks: Vec<RankLoad> = loads
        .into_iter()
        .take(MAX_DP_RANKS)
        .filter_map(|l| {
            let running = count(l.num_running_reqs);
            let waiting = count(l.num_waiting_reqs);
            Some(RankLoad {
                dp_rank: u32::try_from(l.dp_rank).ok()?,
                num_running_reqs: running,
                num_waiting_reqs: waiting,
                num_total_reqs: running.saturating_add(waiting),
                num_used_tokens: count(l.num_used_tokens),
                max_total_num_tokens: count(l.max_total_num_tokens),
                token_usage: finite(l.token_usage).min(1.0),
                gen_throughput: finite(l.gen_throughput),
                cache_hit_rate: finite(l.cache_hit_rate).min(1.0),
                utilization: finite(l.utilization),
                max_running_requests: count(l.max_running_requests),
                ..RankLoad::default()
            })
        })
        .collect();
    ranks.sort_by_key(|r| r.dp_rank);
    ranks.dedup_by_key(|r| r.dp_rank);
    Ok(report(Source::Grpc, ranks))
}

/// `GET path` on a worker with its key, as housekeeping (the probe `User-Agent`, like
/// health probes), so engine logs and request counts tell polls from client traffic.
async fn ask(
    client: &CallClient,
    worker: &Worker,
    path: &str,
    timeout: Duration,
) -> Result<CallReply, CallError> {
    call_url(
        client.pool(worker.http2),
        &worker.spec.url,
        worker.bearer.as_ref(),
        Method::GET,
        path,
        None,
        timeout,
    )
    .await
}

/// The body of a 2xx reply.
fn success(reply: &CallReply) -> Option<&[u8]> {
    reply.status.is_success().then_some(&reply.body[..])
}

fn report(source: Source, loads: Vec<RankLoad>) -> EngineLoad {
    EngineLoad {
        timestamp: rfc3339(SystemTime::now()),
        source,
        loads,
    }
}

/// The ranks of a `/v1/loads` body (`{loads: [{dp_rank, num_running_reqs, …}]}`); `None`
/// when the body is not such a report (not JSON, no `loads` array).
pub fn from_loads_json(body: &[u8]) -> Option<Vec<RankLoad>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let entries = value.get("loads")?.as_array()?;
    let mut ranks: Vec<RankLoad> = entries
        .iter()
        .take(MAX_DP_RANKS)
        .enumerate()
        .filter_map(|(index, entry)| rank_from_json(index, entry))
        .collect();
    ranks.sort_by_key(|r| r.dp_rank);
    ranks.dedup_by_key(|r| r.dp_rank);
    Some(ranks)
}

fn rank_from_json(index: usize, entry: &Value) -> Option<RankLoad> {
    let entry = entry.as_object()?;
    let count = |key: &str| entry.get(key).map_or(0, as_count);
    let dp_rank = match entry.get("dp_rank") {
        Some(v) => u32::try_from(v.as_u64()?).ok()?,
        None => u32::try_from(index).ok()?,
    };
    let mut rank = RankLoad {
        dp_rank,
        num_running_reqs: count("num_running_reqs"),
        num_waiting_reqs: count("num_waiting_reqs"),
        num_waiting_uncached_tokens: count("num_waiting_uncached_tokens"),
        num_used_tokens: count("num_used_tokens"),
        max_total_num_tokens: count("max_total_num_tokens"),
        token_usage: fraction(entry.get("token_usage")),
        gen_throughput: amount(entry.get("gen_throughput")),
        cache_hit_rate: fraction(entry.get("cache_hit_rate")),
        utilization: amount(entry.get("utilization")),
        max_running_requests: count("max_running_requests"),
        ..RankLoad::default()
    };
    rank.num_total_reqs = rank.num_running_reqs.saturating_add(rank.num_waiting_reqs);
    if let Some(memory) = entry.get("memory").and_then(Value::as_object) {
        rank.memory = Some(Memory {
            weight_gb: amount(memory.get("weight_gb")),
            kv_cache_gb: amount(memory.get("kv_cache_gb")),
            graph_gb: amount(memory.get("graph_gb")),
            token_capacity: memory.get("token_capacity").map_or(0, as_count),
        });
    }
    if let Some(queues) = entry.get("queues").and_then(Value::as_object) {
        let count = |key: &str| queues.get(key).map_or(0, as_count);
        rank.queues = Some(Queues {
            waiting: count("waiting"),
            grammar: count("grammar"),
            paused: count("paused"),
            retracted: count("retracted"),
        });
    }
    if let Some(disagg) = entry.get("disaggregation").and_then(Value::as_object) {
        let count = |key: &str| disagg.get(key).map_or(0, as_count);
        rank.kv_transfer_latency_ms = Some(amount(disagg.get("kv_transfer_latency_ms")));
        rank.kv_transfer_speed_gb_s = Some(amount(disagg.get("kv_transfer_speed_gb_s")));
        rank.prefill_queue_reqs = Some(
            count("prefill_bootstrap_queue_reqs")
                .saturating_add(count("prefill_inflight_queue_reqs")),
        );
        rank.decode_queue_reqs = Some(
            count("decode_prealloc_queue_reqs").saturating_add(count("decode_transfer_queue_reqs")),
        );
        rank.disagg_mode = disagg
            .get("mode")
            .and_then(Value::as_str)
            .map(|mode| mode.chars().take(32).collect());
    }
    Some(rank)
}

/// A non-negative whole figure (engines sometimes write counts as floats).
fn as_count(value: &Value) -> u64 {
    match value.as_u64() {
        Some(n) => n,
        // `as` saturates and maps NaN to 0.
        None => value.as_f64().filter(|f| *f > 0.0).map_or(0, |f| f as u64),
    }
}

/// A finite, non-negative figure; 0 otherwise.
fn amount(value: Option<&Value>) -> f64 {
    clean(value.and_then(Value::as_f64).unwrap_or(0.0))
}

/// A figure between 0 and 1.
fn fraction(value: Option<&Value>) -> f64 {
    amount(value).min(1.0)
}

fn clean(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

/// A figure of a Prometheus page that a load entry shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gauge {
    Running,
    Waiting,
    WaitingUncachedTokens,
    UsedTokens,
    TokenUsage,
    GenThroughput,
    CacheHitRate,
    Utilization,
    MaxRunning,
}

/// Which figure a sample name carries: SGLang's names (with `:` or, as its load route's
/// Prometheus format and older versions write them, `_`) and vLLM's.
fn gauge(name: &str) -> Option<Gauge> {
    if let Some(field) = name
        .strip_prefix("sglang:")
        .or_else(|| name.strip_prefix("sglang_"))
    {
        return match field {
            "num_running_reqs" => Some(Gauge::Running),
            "num_queue_reqs" | "num_waiting_reqs" => Some(Gauge::Waiting),
            "num_waiting_uncached_tokens" => Some(Gauge::WaitingUncachedTokens),
            "num_used_tokens" => Some(Gauge::UsedTokens),
            "token_usage" => Some(Gauge::TokenUsage),
            "gen_throughput" => Some(Gauge::GenThroughput),
            "cache_hit_rate" => Some(Gauge::CacheHitRate),
            "utilization" => Some(Gauge::Utilization),
            "max_running_requests" => Some(Gauge::MaxRunning),
            _ => None,
        };
    }
    match name.strip_prefix("vllm:")? {
        "num_requests_running" => Some(Gauge::Running),
        "num_requests_waiting" => Some(Gauge::Waiting),
        "kv_cache_usage_perc" | "gpu_cache_usage_perc" => Some(Gauge::TokenUsage),
        "gpu_prefix_cache_hit_rate" => Some(Gauge::CacheHitRate),
        _ => None,
    }
}

/// The DP rank a sample describes: its `dp_rank` label, else vLLM's `engine` label, else
/// 0; `None` for a rank label that is not a number.
fn sample_rank(sample: &Sample<'_>) -> Option<u32> {
    match sample.label("dp_rank").or_else(|| sample.label("engine")) {
        Some(text) => text.trim().parse().ok(),
        None => Some(0),
    }
}

/// The ranks described by a Prometheus page; `None` when it has none of the gauges.
/// Several samples of one figure and rank (per tensor-parallel rank, per model name)
/// describe the same engine state, so the largest is kept.
pub fn from_metrics(page: &str) -> Option<Vec<RankLoad>> {
    let mut ranks: BTreeMap<u32, RankLoad> = BTreeMap::new();
    for line in page.lines() {
        let Some(Line::Sample(sample)) = parse_line(line) else {
            continue;
        };
        let Some(gauge) = gauge(sample.name) else {
            continue;
        };
        let Some(dp_rank) = sample_rank(&sample) else {
            continue;
        };
        if !sample.value.is_finite() || sample.value < 0.0 {
            continue;
        }
        if !ranks.contains_key(&dp_rank) && ranks.len() >= MAX_DP_RANKS {
            continue;
        }
        let rank = ranks.entry(dp_rank).or_insert_with(|| RankLoad {
            dp_rank,
            ..RankLoad::default()
        });
        let value = sample.value;
        // `as` saturates: a huge figure stays huge instead of wrapping.
        let count = value as u64;
        match gauge {
            Gauge::Running => rank.num_running_reqs = rank.num_running_reqs.max(count),
            Gauge::Waiting => rank.num_waiting_reqs = rank.num_waiting_reqs.max(count),
            Gauge::WaitingUncachedTokens => {
                rank.num_waiting_uncached_tokens = rank.num_waiting_uncached_tokens.max(count)
            }
            Gauge::UsedTokens => rank.num_used_tokens = rank.num_used_tokens.max(count),
            Gauge::TokenUsage => rank.token_usage = rank.token_usage.max(value.min(1.0)),
            Gauge::GenThroughput => rank.gen_throughput = rank.gen_throughput.max(value),
            Gauge::CacheHitRate => rank.cache_hit_rate = rank.cache_hit_rate.max(value.min(1.0)),
            Gauge::Utilization => rank.utilization = rank.utilization.max(value),
            Gauge::MaxRunning => rank.max_running_requests = rank.max_running_requests.max(count),
        }
    }
    if ranks.is_empty() {
        return None;
    }
    Some(
        ranks
            .into_values()
            .map(|mut rank| {
                rank.num_total_reqs = rank.num_running_reqs.saturating_add(rank.num_waiting_reqs);
                rank
            })
            .collect(),
    )
}

/// Runs `task` for every item, at most `limit` at once, on the current runtime; the
/// outputs in item order (`None` for a task that panicked). Dropping the future aborts
/// the tasks still running.
pub async fn bounded_parallel<T, F, Fut>(
    items: Vec<T>,
    limit: usize,
    task: F,
) -> Vec<Option<Fut::Output>>
where
    F: Fn(T) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let mut outputs: Vec<Option<Fut::Output>> = Vec::with_capacity(items.len());
    outputs.resize_with(items.len(), || None);
    let mut set = JoinSet::new();
    for (index, item) in items.into_iter().enumerate() {
        while set.len() >= limit.max(1) {
            collect_one(&mut set, &mut outputs).await;
        }
        let running = task(item);
        set.spawn(async move { (index, running.await) });
    }
    while !set.is_empty() {
        collect_one(&mut set, &mut outputs).await;
    }
    outputs
}

async fn collect_one<O: Send + 'static>(set: &mut JoinSet<(usize, O)>, outputs: &mut [Option<O>]) {
    if let Some(Ok((index, output))) = set.join_next().await {
        if let Some(slot) = outputs.get_mut(index) {
            *slot = Some(output);
        }
    }
}

/// `time` as RFC 3339 in UTC with microseconds (`2025-01-31T09:15:23.481920Z`).
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_micros()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// days-to-civil algorithm, for non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::calls::tests::serve;

    #[test]
    fn a_rank_target_keeps_only_its_rank() {
        let body = br#"{"loads":[{"dp_rank":0,"num_running_reqs":5},
            {"dp_rank":1,"num_running_reqs":7},{"dp_rank":2,"num_running_reqs":9}]}"#;
        let report = EngineLoad {
            timestamp: String::new(),
            source: Source::LoadsApi,
            loads: from_loads_json(body).unwrap(),
        };
        let spec = crate::fleet::spec::WorkerSpec::new(
            crate::fleet::parse_worker_url("http://e:30000").unwrap(),
        );
        let size = crate::fleet::dp::DpSize::choose(Some(3), None)
            .unwrap()
            .unwrap();
        let Some(rank1) = size.ranks().nth(1) else {
            panic!("three ranks")
        };
        let config = crate::fleet::WorkerDefaults::default();
        let target = Worker::for_rank(
            uuid::Uuid::new_v4(),
            spec.clone(),
            crate::fleet::Discovered::default(),
            &config,
            rank1,
        );
        let kept = report.clone().for_target(&target);
        assert_eq!(kept.loads.len(), 1);
        assert_eq!(
            (kept.loads[0].dp_rank, kept.loads[0].num_running_reqs),
            (1, 7)
        );
        let single = Worker::new(uuid::Uuid::new_v4(), spec, Default::default(), &config);
        assert_eq!(report.clone().for_target(&single), report);
    }

    #[test]
    fn sglang_load_route_body() {
        let body = br#"{"timestamp":"2025-01-01T00:00:00Z","version":"0.5.4","loads":[
            {"dp_rank":1,"num_running_reqs":19,"num_waiting_reqs":0,"num_used_tokens":291044,
             "max_total_num_tokens":524288,"max_running_requests":256,"token_usage":0.5551,
             "gen_throughput":1521.08,"cache_hit_rate":0.713,"utilization":0.0},
            {"dp_rank":0,"num_running_reqs":24,"num_waiting_reqs":3,
             "num_waiting_uncached_tokens":6144,"token_usage":1.7,"gen_throughput":-2,
             "memory":{"weight_gb":15.2,"kv_cache_gb":42.1,"graph_gb":1.8,"token_capacity":524288},
             "queues":{"waiting":3,"grammar":1,"paused":0,"retracted":2},
             "disaggregation":{"mode":"prefill","prefill_bootstrap_queue_reqs":2,
               "prefill_inflight_queue_reqs":1,"kv_transfer_speed_gb_s":3.5,
               "kv_transfer_latency_ms":1.25}}]}"#;
        let ranks = from_loads_json(body).unwrap();
        assert_eq!(ranks.len(), 2);
        let r0 = &ranks[0];
        assert_eq!(
            (r0.dp_rank, r0.num_running_reqs, r0.num_waiting_reqs),
            (0, 24, 3)
        );
        assert_eq!(r0.num_total_reqs, 27);
        assert_eq!(r0.num_waiting_uncached_tokens, 6144);
        assert_eq!(r0.token_usage, 1.0, "clamped to a fraction");
        assert_eq!(r0.gen_throughput, 0.0, "negative figures are 0");
        assert_eq!(r0.memory.as_ref().unwrap().token_capacity, 524288);
        assert_eq!(r0.queues.as_ref().unwrap().retracted, 2);
        assert_eq!(r0.prefill_queue_reqs, Some(3));
        assert_eq!(r0.decode_queue_reqs, Some(0));
        assert_eq!(r0.disagg_mode.as_deref(), Some("prefill"));
        assert_eq!(r0.kv_transfer_latency_ms, Some(1.25));
        let r1 = &ranks[1];
        assert_eq!(
            (r1.dp_rank, r1.num_used_tokens, r1.max_total_num_tokens),
            (1, 291044, 524288)
        );
        assert_eq!(r1.max_running_requests, 256);
        assert!(r1.memory.is_none() && r1.disagg_mode.is_none());
        let shown = serde_json::to_value(r1).unwrap();
        assert!(shown.get("memory").is_none() && shown.get("queues").is_none());
    }

    #[test]
    fn other_bodies_are_not_load_reports() {
        assert_eq!(from_loads_json(b"not json"), None);
        assert_eq!(from_loads_json(b"{\"detail\":\"Not Found\"}"), None);
        assert_eq!(from_loads_json(b"[1,2]"), None);
        assert_eq!(from_loads_json(b"{\"loads\":[]}"), Some(vec![]));
        // Entries that are not objects or have an impossible rank are skipped.
        let ranks =
            from_loads_json(br#"{"loads":[3,{"dp_rank":-1},{"num_running_reqs":1.9}]}"#).unwrap();
        assert_eq!(ranks.len(), 1);
        assert_eq!((ranks[0].dp_rank, ranks[0].num_running_reqs), (2, 1));
    }

    #[test]
    fn sglang_metrics_per_dp_rank() {
        let page = "# HELP sglang:num_running_reqs The number of running requests.\n\
            # TYPE sglang:num_running_reqs gauge\n\
            sglang:num_running_reqs{model_name=\"m\",dp_rank=\"0\",tp_rank=\"0\"} 4\n\
            sglang:num_running_reqs{model_name=\"m\",dp_rank=\"0\",tp_rank=\"1\"} 4\n\
            sglang:num_running_reqs{model_name=\"m\",dp_rank=\"1\"} 7\n\
            sglang:num_queue_reqs{dp_rank=\"1\"} 2\n\
            sglang_token_usage{dp_rank=\"1\"} 0.25\n\
            sglang:gen_throughput{dp_rank=\"1\"} 88.5\n\
            sglang:cache_hit_rate{dp_rank=\"1\"} 0.5\n\
            sglang:num_used_tokens{dp_rank=\"1\"} 100\n\
            sglang:max_total_num_tokens{dp_rank=\"1\"} 9999\n\
            sglang:num_running_reqs{dp_rank=\"x\"} 50\n\
            sglang:num_queue_reqs{dp_rank=\"0\"} NaN\n\
            sglang:prompt_tokens_total 1000\n\
            broken line\n";
        let ranks = from_metrics(page).unwrap();
        assert_eq!(ranks.len(), 2);
        assert_eq!(
            (ranks[0].num_running_reqs, ranks[0].num_waiting_reqs),
            (4, 0)
        );
        let r1 = &ranks[1];
        assert_eq!(
            (
                r1.dp_rank,
                r1.num_running_reqs,
                r1.num_waiting_reqs,
                r1.num_total_reqs
            ),
            (1, 7, 2, 9)
        );
        assert_eq!(
            (r1.token_usage, r1.gen_throughput, r1.cache_hit_rate),
            (0.25, 88.5, 0.5)
        );
        assert_eq!(r1.num_used_tokens, 100);
        assert_eq!(
            r1.max_total_num_tokens, 0,
            "not read from a Prometheus page"
        );
    }

    #[test]
    fn vllm_metrics() {
        let page = "vllm:num_requests_running{model_name=\"m\"} 3\n\
            vllm:num_requests_waiting{model_name=\"m\"} 1\n\
            vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n\
            vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n\
            vllm:gpu_prefix_cache_hit_rate{model_name=\"m\"} 0.25\n\
            vllm:num_requests_running{model_name=\"m\",engine=\"1\"} 6\n";
        let ranks = from_metrics(page).unwrap();
        assert_eq!(ranks.len(), 2);
        assert_eq!(
            (ranks[0].num_running_reqs, ranks[0].num_waiting_reqs),
            (3, 1)
        );
        assert_eq!((ranks[0].token_usage, ranks[0].cache_hit_rate), (0.5, 0.25));
        assert_eq!((ranks[1].dp_rank, ranks[1].num_running_reqs), (1, 6));
        assert_eq!(from_metrics("up 1\nprocess_cpu_seconds_total 3\n"), None);
        assert_eq!(from_metrics(""), None);
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_micros(951_782_400_000_000 + 3_723_000_042);
        assert_eq!(rfc3339(t), "2000-02-29T01:02:03.000042Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_735_689_599);
        assert_eq!(rfc3339(t), "2024-12-31T23:59:59.000000Z");
    }

    #[tokio::test]
    async fn bounded_parallel_keeps_order_and_limit() {
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let out = bounded_parallel((0..20u64).collect(), 3, |i| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(now, SeqCst);
                tokio::time::sleep(Duration::from_millis(20 - i)).await;
                running.fetch_sub(1, SeqCst);
                i * 2
            }
        })
        .await;
        assert_eq!(out, (0..20u64).map(|i| Some(i * 2)).collect::<Vec<_>>());
        assert!(peak.load(std::sync::atomic::Ordering::SeqCst) <= 3);
    }

    #[tokio::test]
    async fn poll_prefers_the_load_route_and_falls_back_to_metrics() {
        let (sglang, _) = serve(|_, path, _| match path {
            p if p.starts_with("/v1/loads") => (
                200,
                br#"{"loads":[{"dp_rank":0,"num_running_reqs":2}]}"#.to_vec(),
            ),
            _ => (500, Vec::new()),
        })
        .await;
        let (generic, seen) = serve(|_, path, _| match path {
            "/metrics" => (200, b"sglang:num_running_reqs 5\n".to_vec()),
            _ => (404, b"{\"detail\":\"Not Found\"}".to_vec()),
        })
        .await;
        let client = CallClient::new(&crate::http::tls::UpstreamTls::platform());
        let second = Duration::from_secs(1);
        let worker = Worker::for_url(&sglang).unwrap();
        let report = poll(&client, &worker, second).await.unwrap();
        assert_eq!(
            (report.source, report.loads[0].num_running_reqs),
            (Source::LoadsApi, 2)
        );
        let worker = Worker::for_url(&generic).unwrap();
        let report = poll(&client, &worker, second).await.unwrap();
        assert_eq!(
            (report.source, report.loads[0].num_running_reqs),
            (Source::Metrics, 5)
        );
        let paths: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.path.clone())
            .collect();
        assert_eq!(paths, [LOADS_PATH, "/metrics"]);
        let dead = crate::control::calls::tests::dead_url().await;
        let worker = Worker::for_url(&dead).unwrap();
        assert!(poll(&client, &worker, second).await.is_err());
    }
}
