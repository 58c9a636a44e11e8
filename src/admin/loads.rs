//! `GET /loads` (public) and `GET /get_loads` (its deprecated control-plane alias): the
//! load monitor's cached reports, one entry per worker per DP rank (spec 1, "Engine load
//! entry"). Answered from the registry alone: no request reaches a worker, so the figures
//! are at most one `--load-monitor-interval` old, and workers without a current report
//! (not polled yet, last poll failed, not ready) are left out.

use std::time::SystemTime;

use http::{Response, StatusCode};
use serde::Serialize;

use super::json_response;
use super::workers::model_query;
use super::Admin;
use crate::control::load::rfc3339;
use crate::fleet::engine_load::RankLoad;
use crate::fleet::Worker;
use crate::http::body::RespBody;

/// One entry of `loads`: the worker, then its rank's figures.
#[derive(Serialize)]
struct Entry<'a> {
    worker: &'a str,
    worker_type: &'static str,
    #[serde(flatten)]
    rank: &'a RankLoad,
}

/// Sums and means over every entry.
#[derive(Serialize)]
struct Aggregate {
    total_running_reqs: u64,
    total_waiting_reqs: u64,
    total_reqs: u64,
    avg_token_usage: f64,
    avg_throughput: f64,
    avg_utilization: f64,
}

#[derive(Serialize)]
struct LoadsBody<'a> {
    timestamp: String,
    version: &'static str,
    dp_rank_count: usize,
    loads: Vec<Entry<'a>>,
    /// Absent while there is no entry (a mean of nothing is not 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregate: Option<Aggregate>,
}

/// `GET /loads[?model=<model_id>]` and `GET /get_loads`.
pub fn loads(admin: &Admin, query: Option<&str>) -> Response<RespBody> {
    let model = model_query(query);
    let snapshot = admin.registry.snapshot();
    let reports: Vec<(&Worker, _)> = snapshot
        .all()
        .iter()
        .filter(|w| w.is_ready())
        .filter(|w| model.as_deref().is_none_or(|m| serves(admin, w, m)))
        .filter_map(|w| Some((w.as_ref(), w.engine_load()?)))
        .collect();
    let loads: Vec<Entry<'_>> = reports
        .iter()
        .flat_map(|(worker, report)| {
            report.loads.iter().map(|rank| Entry {
                worker: &worker.url,
                worker_type: worker.worker_type.as_str(),
                rank,
            })
        })
        .collect();
    let body = LoadsBody {
        timestamp: rfc3339(SystemTime::now()),
        version: concat!("gw-", env!("CARGO_PKG_VERSION")),
        dp_rank_count: loads.len(),
        aggregate: aggregate(&loads),
        loads,
    };
    json_response(StatusCode::OK, &body)
}

/// Whether `worker` serves `model`, by id, card alias or `--model-alias` name.
fn serves(admin: &Admin, worker: &Worker, model: &str) -> bool {
    worker.serves(model)
        || admin
            .registry
            .aliases()
            .iter()
            .any(|(alias, canonical)| alias == model && worker.serves(canonical))
}

fn aggregate(loads: &[Entry<'_>]) -> Option<Aggregate> {
    if loads.is_empty() {
        return None;
    }
    let count = loads.len() as f64;
    let sum = |f: fn(&RankLoad) -> u64| {
        loads
            .iter()
            .fold(0u64, |acc, e| acc.saturating_add(f(e.rank)))
    };
    let mean = |f: fn(&RankLoad) -> f64| loads.iter().map(|e| f(e.rank)).sum::<f64>() / count;
    Some(Aggregate {
        total_running_reqs: sum(|r| r.num_running_reqs),
        total_waiting_reqs: sum(|r| r.num_waiting_reqs),
        total_reqs: sum(|r| r.num_total_reqs),
        avg_token_usage: mean(|r| r.token_usage),
        avg_throughput: mean(|r| r.gen_throughput),
        avg_utilization: mean(|r| r.utilization),
    })
}
