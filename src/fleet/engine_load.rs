//! A worker's engine load report: what the load monitor (`control::load`) last read from
//! the engine, per data-parallel rank. Kept in the worker's live figures, where `GET /loads`,
//! the worker object and load-aware selection read it without locking.

use serde::Serialize;

use super::Worker;

/// Where a report was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// SGLang's `GET /v1/loads`.
    LoadsApi,
    /// The engine's Prometheus page.
    Metrics,
    /// A gRPC engine's `GetLoads`.
    Grpc,
}

/// One worker's latest engine load report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineLoad {
    /// When it was read (RFC 3339, UTC).
    pub timestamp: String,
    pub source: Source,
    /// One entry per DP rank, by rank.
    pub loads: Vec<RankLoad>,
}

impl EngineLoad {
    /// The report as `worker` shows it: a data-parallel rank target (`--dp-aware`) keeps
    /// only its own rank's entry, so each rank carries its own figures; any other worker
    /// keeps them all.
    pub fn for_target(mut self, worker: &Worker) -> EngineLoad {
        if let Some(rank) = worker.dp {
            self.loads.retain(|load| load.dp_rank == rank.rank());
        }
        self
    }
}

/// One DP rank's figures, named as SGLang's load report names them. Figures the engine
/// does not report are 0; sections it does not report are absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RankLoad {
    pub dp_rank: u32,
    pub num_running_reqs: u64,
    pub num_waiting_reqs: u64,
    /// Running plus waiting.
    pub num_total_reqs: u64,
    pub num_waiting_uncached_tokens: u64,
    pub num_used_tokens: u64,
    /// KV capacity in tokens; 0 when read from a Prometheus page (spec 1).
    pub max_total_num_tokens: u64,
    /// 0.0 to 1.0.
    pub token_usage: f64,
    /// Tokens per second.
    pub gen_throughput: f64,
    /// 0.0 to 1.0.
    pub cache_hit_rate: f64,
    pub utilization: f64,
    pub max_running_requests: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queues: Option<Queues>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_transfer_latency_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_transfer_speed_gb_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_queue_reqs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_queue_reqs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagg_mode: Option<String>,
}

/// The engine's memory split (SGLang's `memory` section).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Memory {
    pub weight_gb: f64,
    pub kv_cache_gb: f64,
    pub graph_gb: f64,
    pub token_capacity: u64,
}

/// The engine's queues (SGLang's `queues` section).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Queues {
    pub waiting: u64,
    pub grammar: u64,
    pub paused: u64,
    pub retracted: u64,
}
