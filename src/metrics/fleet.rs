//! Worker gauges read from the registry at scrape time.
//!
//! In-flight load, status, breaker state and pool sizes already live in the registry (as
//! atomics on each worker); copying them into gauges on every change would cost the hot
//! path for nothing. The collector reads them when Prometheus asks. Removed workers keep
//! reporting as spec 3 says: health and breaker state -1, in-flight and streaks 0, HTTP/2
//! its last value.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::labels::{Label, Labels};
use crate::resilience::State;
use crate::workers::{Fleet, Status};

/// What the fleet collector reads.
pub type SnapshotSource = Arc<Fleet>;

#[derive(Debug)]
pub struct FleetCollector {
    fleet: Arc<Fleet>,
}

impl FleetCollector {
    pub fn new(fleet: Arc<Fleet>) -> FleetCollector {
        FleetCollector { fleet }
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
