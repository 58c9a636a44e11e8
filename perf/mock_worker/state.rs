//! State shared by every connection of the mock worker.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use http::HeaderMap;

use crate::cache::{self, PrefixCache};
use crate::cli::{Flags, MetricsStyle, Runtime};
use crate::config::LiveConfig;
use crate::reqlog::RequestLog;
use crate::stats::Stats;

/// Capacity the mock advertises; only used to derive plausible numbers.
pub const MAX_RUNNING_REQUESTS: u64 = 256;
pub const MAX_TOTAL_NUM_TOKENS: u64 = 65_536;
pub const CONTEXT_LENGTH: u64 = 4096;

pub struct AppState {
    pub runtime: Runtime,
    pub metrics_style: MetricsStyle,
    /// `dp_size` reported by `/server_info`.
    pub dp_size: u32,
    pub host: String,
    pub port: u16,
    pub verbose: bool,
    pub config: LiveConfig,
    pub stats: Arc<Stats>,
    /// `None` when started with `--no-request-log`.
    pub log: Option<RequestLog>,
    /// `--provider`: the hosted API this mock stands in for.
    pub provider: Option<crate::provider::Provider>,
    /// `--api-key` as given, for a provider's own key check.
    pub api_key: Option<String>,
    /// `--pd-role`, and whether a vLLM-style prefill leaves out `kv_transfer_params`.
    pub pd_role: Option<crate::pd::PdRole>,
    pub pd_omit_kv: bool,
    cache: Mutex<PrefixCache>,
    /// Expected `Authorization` header value, when `--api-key` is set.
    expected_auth: Option<String>,
    next_id: AtomicU64,
    /// Distinguishes ids of different mock processes in one test.
    id_salt: u32,
}

/// The engine load as reported by `/v1/loads` and `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadSnapshot {
    pub running: u64,
    pub waiting: u64,
    pub token_usage: f64,
    pub gen_throughput: f64,
    pub cache_hit_rate: f64,
}

impl AppState {
    pub fn new(flags: &Flags, port: u16) -> AppState {
        AppState {
            runtime: flags.runtime,
            metrics_style: flags.metrics_style,
            dp_size: flags.dp_size,
            host: flags.host.clone(),
            port,
            verbose: flags.verbose,
            config: LiveConfig::from_flags(flags),
            stats: Arc::new(Stats::default()),
            log: flags
                .request_log
                .then(|| RequestLog::new(flags.request_log_capacity)),
            provider: flags.provider,
            api_key: flags.api_key.clone(),
            pd_role: flags.pd_role,
            pd_omit_kv: flags.pd_omit_kv,
            cache: Mutex::new(PrefixCache::new(cache::DEFAULT_CAPACITY)),
            expected_auth: flags.api_key.as_ref().map(|key| format!("Bearer {key}")),
            next_id: AtomicU64::new(1),
            id_salt: rand::random(),
        }
    }

    /// Whether the request carries the configured API key (always true
    /// when no key is configured).
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        match &self.expected_auth {
            None => true,
            Some(expected) => headers
                .get(http::header::AUTHORIZATION)
                .is_some_and(|v| v.as_bytes() == expected.as_bytes()),
        }
    }

    /// A short unique id for responses (`chatcmpl-<id>`, …).
    pub fn next_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Relaxed);
        format!("{:08x}{n:08x}", self.id_salt)
    }

    /// Runs a prompt through the simulated prefix cache and returns the
    /// number of leading bytes that were already cached.
    pub fn observe_prompt(&self, text: &str) -> usize {
        // Hash outside the lock: only the LRU update is serialised.
        let hashes = cache::prefix_hashes(text.as_bytes());
        self.cache().observe(&hashes, text.len())
    }

    pub fn flush_cache(&self) {
        self.cache().clear();
    }

    pub fn load_snapshot(&self) -> LoadSnapshot {
        let load = self.config.load();
        let running = self.stats.inflight() + load.running;
        let itl_ms = self.config.itl_ms();
        // Each running request yields one token per inter-token interval.
        let gen_throughput = if itl_ms == 0 {
            0.0
        } else {
            running as f64 * 1000.0 / itl_ms as f64
        };
        LoadSnapshot {
            running,
            waiting: load.waiting,
            token_usage: load.token_usage,
            gen_throughput,
            cache_hit_rate: self.cache().hit_rate(),
        }
    }

    fn cache(&self) -> MutexGuard<'_, PrefixCache> {
        // The cache holds no invariants a panic elsewhere could break.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigPatch;
    use crate::stats::Inflight;
    use serde_json::json;

    #[test]
    fn auth_check() {
        let open = AppState::new(&Flags::default(), 1);
        assert!(open.authorized(&HeaderMap::new()));

        let flags = Flags {
            api_key: Some("k".to_string()),
            ..Flags::default()
        };
        let locked = AppState::new(&flags, 1);
        let mut headers = HeaderMap::new();
        assert!(!locked.authorized(&headers));
        headers.insert("authorization", "Bearer x".parse().unwrap());
        assert!(!locked.authorized(&headers));
        headers.insert("authorization", "Bearer k".parse().unwrap());
        assert!(locked.authorized(&headers));
    }

    #[test]
    fn ids_are_unique() {
        let state = AppState::new(&Flags::default(), 1);
        assert_ne!(state.next_id(), state.next_id());
    }

    #[test]
    fn load_adds_overrides_to_live_requests() {
        let state = AppState::new(&Flags::default(), 1);
        let patch = json!({"itl_ms": 10, "load": {"running": 2, "waiting": 5, "token_usage": 0.5}});
        state.config.apply(&ConfigPatch::parse(&patch).unwrap());
        let _live = Inflight::new(state.stats.clone());
        let load = state.load_snapshot();
        assert_eq!(load.running, 3);
        assert_eq!(load.waiting, 5);
        assert_eq!(load.token_usage, 0.5);
        assert_eq!(load.gen_throughput, 300.0);
    }

    #[test]
    fn prompt_cache_round_trip() {
        let state = AppState::new(&Flags::default(), 1);
        let text = "x".repeat(130);
        assert_eq!(state.observe_prompt(&text), 0);
        assert_eq!(state.observe_prompt(&text), 128);
        state.flush_cache();
        assert_eq!(state.observe_prompt(&text), 0);
    }
}
