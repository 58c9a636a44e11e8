//! Tuning knobs of the policies, one struct so the integrator fills it from the flags in
//! one place and every policy reads only what it needs.

use std::time::Duration;

use crate::config::Config;

/// Parameters of every policy, with the documented defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyParams {
    /// cache_aware: a prefix match at least this fraction of the text (0.0–1.0) routes to
    /// the worker holding it.
    pub cache_threshold: f32,
    /// cache_aware: loads count as imbalanced only when max − min exceeds this …
    pub balance_abs_threshold: usize,
    /// … and max exceeds this multiple of min.
    pub balance_rel_threshold: f32,
    /// cache_aware: how often the integrator calls [`super::Policy::maintain`]; model trees
    /// idle for several intervals are dropped.
    pub eviction_interval: Duration,
    /// cache_aware: characters each tenant may hold in a model's tree after an eviction pass.
    pub max_tree_size: usize,
    /// prefix_hash: tokens of the text that are hashed, at about four bytes a token.
    pub prefix_token_count: usize,
    /// prefix_hash: a ring worker whose load exceeds this multiple of the average is passed
    /// over.
    pub prefix_hash_load_factor: f32,
    /// manual: a routing key unused this long is forgotten.
    pub manual_idle_ttl: Duration,
    /// manual: most routing keys remembered at once.
    pub manual_max_entries: usize,
    /// bucket: ascending upper bounds (bytes of prompt text) of every bucket but the last.
    pub bucket_boundaries: Vec<usize>,
    /// prefix_hash, consistent_hashing: ring points per worker.
    pub virtual_nodes: usize,
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval: Duration::from_secs(120),
            max_tree_size: 67_108_864,
            prefix_token_count: 256,
            prefix_hash_load_factor: 1.25,
            manual_idle_ttl: Duration::from_secs(1800),
            manual_max_entries: 1_000_000,
            bucket_boundaries: vec![1024, 4096, 16384],
            virtual_nodes: 160,
        }
    }
}

impl PolicyParams {
    /// The parameters the flags set; the rest keep their defaults.
    pub fn from_config(config: &Config) -> PolicyParams {
        PolicyParams {
            cache_threshold: config.cache_threshold as f32,
            balance_abs_threshold: config.balance_abs_threshold,
            balance_rel_threshold: config.balance_rel_threshold as f32,
            eviction_interval: config.eviction_interval,
            max_tree_size: config.max_tree_size,
            prefix_token_count: config.prefix_token_count,
            ..PolicyParams::default()
        }
    }
}
