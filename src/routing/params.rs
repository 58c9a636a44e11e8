//! The routing settings: which policy, where routing keys come from, and the tuning knobs of
//! the policies in one struct, so the flags fill it in one place, the defaults are written
//! once, and every policy reads only what it needs.

use std::fmt;
use std::time::Duration;

/// Routing policy names, spelled as the spec and the `policy` metric label spell them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyName {
    Random,
    RoundRobin,
    PowerOfTwo,
    CacheAware,
    PrefixHash,
    ConsistentHashing,
    Manual,
    Bucket,
}

impl PolicyName {
    pub const ALL: &'static [PolicyName] = &[
        PolicyName::Random,
        PolicyName::RoundRobin,
        PolicyName::PowerOfTwo,
        PolicyName::CacheAware,
        PolicyName::PrefixHash,
        PolicyName::ConsistentHashing,
        PolicyName::Manual,
        PolicyName::Bucket,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyName::Random => "random",
            PolicyName::RoundRobin => "round_robin",
            PolicyName::PowerOfTwo => "power_of_two",
            PolicyName::CacheAware => "cache_aware",
            PolicyName::PrefixHash => "prefix_hash",
            PolicyName::ConsistentHashing => "consistent_hashing",
            PolicyName::Manual => "manual",
            PolicyName::Bucket => "bucket",
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Routing flag group.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutingSettings {
    /// `--policy`: routing policy.
    pub policy: PolicyName,
    /// `--prefill-policy`, `--decode-policy`: per-role policies; `None` follows `--policy`.
    pub prefill_policy: Option<PolicyName>,
    pub decode_policy: Option<PolicyName>,
    /// `--routing-key-headers`: lowercase header names carrying the routing key.
    pub routing_key_headers: Vec<String>,
    /// `--cache-threshold`, `--balance-*`, `--eviction-interval`, `--max-tree-size`,
    /// `--prefix-token-count`, and the knobs without a flag.
    pub params: PolicyParams,
}

impl Default for RoutingSettings {
    fn default() -> RoutingSettings {
        RoutingSettings {
            policy: PolicyName::RoundRobin,
            prefill_policy: None,
            decode_policy: None,
            routing_key_headers: vec!["x-gw-routing-key".to_owned()],
            params: PolicyParams::default(),
        }
    }
}

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
