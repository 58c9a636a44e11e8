//! Counters that tests read through `/mock/stats` and that feed the
//! simulated load reports.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde_json::{json, Value};

#[derive(Default)]
pub struct Stats {
    /// Inference requests received (after routing and auth).
    requests_total: AtomicU64,
    /// Inference requests whose response is not finished yet.
    inflight: AtomicU64,
    /// Streaming responses whose client went away before the end.
    cancelled: AtomicU64,
    prompt_tokens_total: AtomicU64,
    generation_tokens_total: AtomicU64,
    /// Prompt tokens the simulated prefix cache already held.
    cached_tokens_total: AtomicU64,
}

impl Stats {
    pub fn record_request(&self) {
        self.requests_total.fetch_add(1, Relaxed);
    }

    pub fn record_cancelled(&self) {
        self.cancelled.fetch_add(1, Relaxed);
    }

    pub fn record_tokens(&self, prompt: u64, cached: u64, generated: u64) {
        self.prompt_tokens_total.fetch_add(prompt, Relaxed);
        self.cached_tokens_total.fetch_add(cached, Relaxed);
        self.generation_tokens_total.fetch_add(generated, Relaxed);
    }

    pub fn inflight(&self) -> u64 {
        self.inflight.load(Relaxed)
    }

    pub fn requests_total(&self) -> u64 {
        self.requests_total.load(Relaxed)
    }

    pub fn prompt_tokens_total(&self) -> u64 {
        self.prompt_tokens_total.load(Relaxed)
    }

    pub fn generation_tokens_total(&self) -> u64 {
        self.generation_tokens_total.load(Relaxed)
    }

    /// Zeroes the cumulative counters (`DELETE /mock/stats`). `inflight`
    /// describes live requests, so it is left alone.
    pub fn reset(&self) {
        self.requests_total.store(0, Relaxed);
        self.cancelled.store(0, Relaxed);
        self.prompt_tokens_total.store(0, Relaxed);
        self.generation_tokens_total.store(0, Relaxed);
        self.cached_tokens_total.store(0, Relaxed);
    }

    pub fn to_json(&self) -> Value {
        json!({
            "requests_total": self.requests_total(),
            "inflight": self.inflight(),
            "cancelled": self.cancelled.load(Relaxed),
            "prompt_tokens_total": self.prompt_tokens_total(),
            "generation_tokens_total": self.generation_tokens_total(),
            "cached_tokens_total": self.cached_tokens_total.load(Relaxed),
        })
    }
}

/// Counts one in-flight request for as long as it lives. A streaming
/// response moves it into its body, so the request stays "running" until
/// the last event has been handed to the connection.
pub struct Inflight {
    stats: Arc<Stats>,
}

impl Inflight {
    pub fn new(stats: Arc<Stats>) -> Self {
        stats.inflight.fetch_add(1, Relaxed);
        Inflight { stats }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        self.stats.inflight.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflight_guard_counts_while_alive() {
        let stats = Arc::new(Stats::default());
        let a = Inflight::new(stats.clone());
        let b = Inflight::new(stats.clone());
        assert_eq!(stats.inflight(), 2);
        drop(a);
        assert_eq!(stats.inflight(), 1);
        stats.reset();
        assert_eq!(stats.inflight(), 1);
        drop(b);
        assert_eq!(stats.to_json()["inflight"], 0);
    }
}
