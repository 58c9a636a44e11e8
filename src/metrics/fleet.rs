//! Worker gauges read from the registry at scrape time.
//!
//! In-flight load, status, breaker state and pool sizes already live in the registry (as
//! atomics on each worker); copying them into gauges on every change would cost the hot
//! path for nothing. The collector reads them when Prometheus asks. Removed workers keep
//! reporting as spec 3 says: health and breaker state -1, in-flight and streaks 0, HTTP/2
//! its last value.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::labels::{Label, Labels};
use crate::fleet::engine_load::RankLoad;
use crate::fleet::{Fleet, Status};
use crate::resilience::State;

/// What the fleet collector reads.
pub type SnapshotSource = Arc<Fleet>;

#[derive(Debug)]
pub struct FleetCollector {
    fleet: Arc<Fleet>,
    /// Engine-load series exported so far: they report -1 once their worker stops
    /// reporting (removed, out of ready), as spec 3 says.
    engine_series: Mutex<HashSet<EngineSeries>>,
}

/// One (worker, model, dp_rank) of the `gw_engine_*` gauges.
type EngineSeries = (Arc<str>, Arc<str>, u32);

/// Engine-load series remembered for the -1 rule; beyond this, new ones are not tracked.
const ENGINE_SERIES_CAP: usize = 65_536;

/// A re-exported engine gauge: name, help, and the figure it takes from a rank report.
type EngineGauge = (&'static str, &'static str, fn(&RankLoad) -> f64);

const ENGINE_GAUGES: [EngineGauge; 5] = [
    (
        "gw_engine_running_requests",
        "Engine running requests",
        |r| r.num_running_reqs as f64,
    ),
    (
        "gw_engine_waiting_requests",
        "Engine waiting requests",
        |r| r.num_waiting_reqs as f64,
    ),
    (
        "gw_engine_token_usage",
        "Engine KV token usage (0.0-1.0)",
        |r| r.token_usage,
    ),
    (
        "gw_engine_gen_throughput",
        "Engine generation throughput (tokens/s)",
        |r| r.gen_throughput,
    ),
    (
        "gw_engine_cache_hit_rate",
        "Engine prefix cache hit rate (0.0-1.0)",
        |r| r.cache_hit_rate,
    ),
];

/// A re-exported disaggregation gauge (spec 3 `gw_engine_pd_*`): name, help and the figure,
/// present only in ranks whose report has a disaggregation section.
type PdGauge = (&'static str, &'static str, fn(&RankLoad) -> Option<f64>);

const PD_GAUGES: [PdGauge; 4] = [
    (
        "gw_engine_pd_kv_transfer_latency_ms",
        "Engine KV transfer latency (ms)",
        |r| r.kv_transfer_latency_ms,
    ),
    (
        "gw_engine_pd_kv_transfer_speed_gb_s",
        "Engine KV transfer speed (GB/s)",
        |r| r.kv_transfer_speed_gb_s,
    ),
    (
        "gw_engine_pd_prefill_queue_reqs",
        "Engine prefill bootstrap and in-flight queue",
        |r| r.prefill_queue_reqs.map(|n| n as f64),
    ),
    (
        "gw_engine_pd_decode_queue_reqs",
        "Engine decode prealloc and transfer queue",
        |r| r.decode_queue_reqs.map(|n| n as f64),
    ),
];

/// The `role` label of a disaggregation section: the engine's mode when it is one of the
/// two roles, else `null`.
fn pd_role(rank: &RankLoad) -> &'static str {
    match rank.disagg_mode.as_deref() {
        Some("prefill") => "prefill",
        Some("decode") => "decode",
        _ => "null",
    }
}

impl FleetCollector {
    pub fn new(fleet: Arc<Fleet>) -> FleetCollector {
        FleetCollector {
            fleet,
            engine_series: Mutex::new(HashSet::new()),
        }
    }

    /// The `gw_engine_*` gauges: the latest report of every reporting worker, -1 for
    /// series whose worker no longer reports.
    fn encode_engine(
        &self,
        encoder: &mut DescriptorEncoder,
        snapshot: &crate::fleet::Snapshot,
    ) -> Result<(), std::fmt::Error> {
        let mut rows: Vec<(EngineSeries, Option<RankLoad>)> = Vec::new();
        let mut live: HashSet<EngineSeries> = HashSet::new();
        for w in snapshot.all() {
            let Some(report) = w.engine_load() else {
                continue;
            };
            let model: Arc<str> = Arc::from(w.model_id.as_deref().unwrap_or("unknown"));
            for rank in &report.loads {
                let key = (w.url_label.clone(), model.clone(), rank.dp_rank);
                live.insert(key.clone());
                rows.push((key, Some(rank.clone())));
            }
        }
        if let Ok(mut seen) = self.engine_series.lock() {
            for key in seen.iter().filter(|k| !live.contains(*k)) {
                rows.push((key.clone(), None));
            }
            for key in live {
                if seen.len() < ENGINE_SERIES_CAP {
                    seen.insert(key);
                }
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        for (name, help, figure) in ENGINE_GAUGES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for ((worker, model, rank), load) in &rows {
                let labels: Labels<3> = [
                    ("worker", Label::Shared(worker.clone())),
                    ("model", Label::Shared(model.clone())),
                    (
                        "dp_rank",
                        Label::Shared(Arc::from(rank.to_string().as_str())),
                    ),
                ];
                let value = load.as_ref().map_or(-1.0, figure);
                ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        let pd_rows: Vec<(&Arc<str>, &RankLoad)> = rows
            .iter()
            .filter_map(|((worker, _, _), load)| Some((worker, load.as_ref()?)))
            .filter(|(_, load)| load.kv_transfer_latency_ms.is_some())
            .collect();
        if pd_rows.is_empty() {
            return Ok(());
        }
        for (name, help, figure) in PD_GAUGES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (worker, load) in &pd_rows {
                let labels: Labels<3> = [
                    ("worker", Label::Shared((*worker).clone())),
                    ("role", pd_role(load).into()),
                    (
                        "dp_rank",
                        Label::Shared(Arc::from(load.dp_rank.to_string().as_str())),
                    ),
                ];
                let value = figure(load).unwrap_or(0.0);
                ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// One per-worker gauge family: (name, help, value per live worker, value once removed).
struct PerWorker {
    name: &'static str,
    help: &'static str,
    rows: Vec<(Arc<str>, i64)>,
}

fn emit(encoder: &mut DescriptorEncoder, family: &PerWorker) -> Result<(), std::fmt::Error> {
    if family.rows.is_empty() {
        return Ok(());
    }
    let mut metric =
        encoder.encode_descriptor(family.name, family.help, None, MetricType::Gauge)?;
    for (worker, value) in &family.rows {
        let labels: Labels<1> = [("worker", Label::Shared(worker.clone()))];
        ConstGauge::new(*value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for FleetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.fleet.snapshot();
        let departed = self.fleet.departed();
        let mut families = [
            PerWorker {
                name: "gw_worker_requests_active",
                help: "In-flight requests to the worker",
                rows: Vec::new(),
            },
            PerWorker {
                name: "gw_worker_health",
                help: "1 ready, 0 any other status, -1 removed",
                rows: Vec::new(),
            },
            PerWorker {
                name: "gw_worker_http2",
                help: "1 if HTTP/2 with prior knowledge, else 0",
                rows: Vec::new(),
            },
            PerWorker {
                name: "gw_worker_cb_state",
                help: "0 closed, 1 open, 2 half-open, -1 removed",
                rows: Vec::new(),
            },
            PerWorker {
                name: "gw_worker_cb_consecutive_failures",
                help: "Consecutive breaker failures",
                rows: Vec::new(),
            },
            PerWorker {
                name: "gw_worker_cb_consecutive_successes",
                help: "Consecutive breaker successes",
                rows: Vec::new(),
            },
        ];
        let mut pools: BTreeMap<(&'static str, &'static str, String), i64> = BTreeMap::new();
        let mut overloaded: BTreeMap<&str, i64> = BTreeMap::new();
        for w in snapshot.all() {
            let url = w.url_label.clone();
            let cb = match w.breaker.state() {
                State::Closed => 0,
                State::Open => 1,
                State::HalfOpen => 2,
            };
            let values = [
                i64::try_from(w.load()).unwrap_or(i64::MAX),
                i64::from(w.status() == Status::Ready),
                i64::from(w.http2),
                cb,
                i64::from(w.breaker.consecutive_failures()),
                i64::from(w.breaker.consecutive_successes()),
            ];
            for (family, value) in families.iter_mut().zip(values) {
                family.rows.push((url.clone(), value));
            }
            let mode = match w.connection_mode().as_str() {
                "grpc" => "grpc",
                "zmq" => "zmq",
                _ => "http",
            };
            if w.overload.is_some() {
                *overloaded
                    .entry(w.model_id.as_deref().unwrap_or("unknown"))
                    .or_default() += i64::from(w.is_overloaded());
            }
            let model = w.model_id.clone().unwrap_or_else(|| "unknown".to_owned());
            *pools
                .entry((w.worker_type.as_str(), mode, model))
                .or_default() += 1;
        }
        for gone in departed {
            let values = [0, -1, i64::from(gone.http2), -1, 0, 0];
            for (family, value) in families.iter_mut().zip(values) {
                family.rows.push((gone.url.clone(), value));
            }
        }
        for family in &families {
            emit(&mut encoder, family)?;
        }
        if !overloaded.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "gw_workers_overloaded",
                "Workers flagged overloaded",
                None,
                MetricType::Gauge,
            )?;
            for (model, count) in overloaded {
                let labels: Labels<1> = [("model", Label::Shared(Arc::from(model)))];
                ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
            }
        }
        self.encode_engine(&mut encoder, &snapshot)?;
        if !pools.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "gw_worker_pool_size",
                "Workers registered",
                None,
                MetricType::Gauge,
            )?;
            for ((worker_type, mode, model), count) in pools {
                let labels: Labels<3> = [
                    ("worker_type", worker_type.into()),
                    ("connection_mode", mode.into()),
                    ("model", Label::Shared(Arc::from(model.as_str()))),
                ];
                ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
