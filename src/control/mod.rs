//! The control plane's background work on the fleet: the registration job queue and its
//! executor (detection, startup probing, PATCH, PUT, draining DELETE), one health watcher per
//! worker, the engine load monitor, the tokenizer registry, and the gateway's own HTTP calls
//! to workers. It writes the fleet (`crate::fleet`) that the data path only reads.

pub mod calls;
pub mod detect;
pub mod engine_tokenizer;
pub mod external;
pub mod grpc;
pub mod jobs;
pub mod lifecycle;
pub mod load;
pub mod prom_text;
pub mod protocol;
pub mod spec_body;
pub mod tokenizers;
pub mod zmq;

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{Registry, WorkerDefaults, WorkerType};
use crate::http::tls::UpstreamTls;
use crate::metrics::Metrics;
use crate::routing::{Policy, PolicyName};
use crate::secret::Secret;
use jobs::Jobs;

/// One `--prefill` occurrence: the worker's URL and, optionally, its KV bootstrap port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillWorker {
    pub url: String,
    pub bootstrap_port: Option<u16>,
}

/// The control plane's part of the Workers flag group: the workers registered at startup
/// and how long registration and the load monitor wait.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlSettings {
    /// `--worker-urls`: workers registered at startup (`http://` or `https://`, with a host).
    pub worker_urls: Vec<String>,
    /// `--prefill URL [BOOTSTRAP_PORT]`: prefill workers registered at startup.
    pub prefill_workers: Vec<PrefillWorker>,
    /// `--decode URL`: decode workers registered at startup.
    pub decode_workers: Vec<String>,
    /// `--worker-startup-timeout-secs`: how long registration waits for a worker to answer.
    pub startup_timeout: Duration,
    /// `--worker-startup-check-interval`: time between registration probes.
    pub startup_check_interval: Duration,
    /// `--load-monitor-interval`: time between engine load polls of a worker.
    pub load_monitor_interval: Duration,
    /// `--disable-load-monitoring`: poll engine load only for groups that need it.
    pub disable_load_monitoring: bool,
    /// Where gRPC workers' tokenizers and chat templates come from by default.
    pub language: LanguageSettings,
}

/// `--model-path`, `--tokenizer-path`, `--chat-template`: the gateway's default tokenizer
/// and chat template for gRPC workers whose registration names none;
/// `--tool-call-parser`, `--reasoning-parser`: their output parsers, where the model card
/// names none (else the model's name chooses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LanguageSettings {
    pub model_path: Option<std::path::PathBuf>,
    pub tokenizer_path: Option<std::path::PathBuf>,
    pub chat_template: Option<std::path::PathBuf>,
    pub tool_call_parser: Option<String>,
    pub reasoning_parser: Option<String>,
}

impl Default for ControlSettings {
    fn default() -> ControlSettings {
        ControlSettings {
            worker_urls: Vec::new(),
            prefill_workers: Vec::new(),
            decode_workers: Vec::new(),
            startup_timeout: Duration::from_secs(1800),
            startup_check_interval: Duration::from_secs(30),
            load_monitor_interval: Duration::from_secs(10),
            disable_load_monitoring: false,
            language: LanguageSettings::default(),
        }
    }
}

/// Which worker groups the load monitor polls (spec 3): all of them, unless
/// `--disable-load-monitoring` leaves only the groups something needs engine load for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadDemand {
    /// `--disable-load-monitoring`.
    pub disabled: bool,
    /// The `--worker-overload-*` flags turn overload protection on for every worker.
    pub overload_on: bool,
    /// The policy of regular, prefill and decode workers.
    pub regular: PolicyName,
    pub prefill: PolicyName,
    pub decode: PolicyName,
}

impl LoadDemand {
    /// Whether workers of `group` are polled: always, unless monitoring is off; then only
    /// when something needs their engine load: a load-aware policy (in this build
    /// `power_of_two`, which compares engine load), overload protection (the flags here; a
    /// worker's own `overload` block makes that worker polled) or `--engine-metrics` (not in
    /// this build).
    pub fn polls(&self, group: WorkerType) -> bool {
        if !self.disabled || self.overload_on {
            return true;
        }
        let policy = match group {
            WorkerType::Prefill => self.prefill,
            WorkerType::Decode => self.decode,
            WorkerType::Regular | WorkerType::Encode => self.regular,
        };
        policy == PolicyName::PowerOfTwo
    }
}

/// What the control plane's tasks use: the fleet they write, the job board, the policy
/// (told when a worker leaves), the metrics they record, and their settings. Built once by
/// the wiring; the tasks never see the rest of the gateway.
pub struct Control {
    pub registry: Arc<Registry>,
    pub jobs: Arc<Jobs>,
    pub policy: Arc<dyn Policy>,
    pub metrics: Arc<Metrics>,
    pub settings: ControlSettings,
    /// What workers inherit where their spec is silent.
    pub defaults: WorkerDefaults,
    /// `--dp-aware`: an engine with `dp_size` N registers as N rank targets.
    pub dp_aware: bool,
    /// `--upstream-http2`: h2c is tried first for workers that do not set `http2`.
    pub upstream_http2: bool,
    /// `--api-key`: the key of workers registered from the command line (not under a
    /// provider backend, whose clients bring their own provider key).
    pub startup_api_key: Option<Secret>,
    /// `--backend`: under a provider backend, HTTP workers are registered without a call.
    pub backend: crate::fleet::provider::Backend,
    /// What the control plane's calls to https workers trust.
    pub tls: UpstreamTls,
    pub load_demand: LoadDemand,
    /// The client to gRPC engines and their loaded tokenizers.
    pub grpc: grpc::GrpcControl,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_polled_with_monitoring_disabled() {
        let mut demand = LoadDemand {
            disabled: false,
            overload_on: false,
            regular: PolicyName::RoundRobin,
            prefill: PolicyName::RoundRobin,
            decode: PolicyName::RoundRobin,
        };
        assert!(demand.polls(WorkerType::Regular));
        demand.disabled = true;
        assert!(!demand.polls(WorkerType::Regular));
        demand.decode = PolicyName::PowerOfTwo;
        assert!(demand.polls(WorkerType::Decode));
        assert!(!demand.polls(WorkerType::Regular));
        demand.overload_on = true;
        assert!(demand.polls(WorkerType::Regular));
    }
}
