//! Worker selection policies.
//!
//! A policy declares what it needs from a request ([`Needs`]) so the handler knows whether
//! the body must be read at all; stateless policies need nothing and the body is forwarded
//! unread. Each selection also says which decision branch it took ([`Branch`]), so the
//! caller can count `gw_*_policy_branch_total` without the policies knowing about metrics.
//!
//! Every policy is shared by all data-plane threads: `decide` takes `&self` and keeps its
//! state in atomics, lock-free snapshots or short sharded critical sections (each module
//! says which and why). Periodic upkeep ([`Policy::maintain`]) runs on a control thread.

mod bucket;
mod cache_aware;
pub mod cache_tree;
mod candidates;
mod clock;
mod consistent_hashing;
mod hash;
mod load;
mod manual;
mod params;
mod power_of_two;
mod prefix_hash;
mod random;
mod ring;
mod round_robin;
mod tenants;
#[cfg(test)]
mod test_support;

use std::sync::Arc;

use crate::fleet::Worker;
pub use params::{PolicyName, RoutingSettings};

pub use bucket::Bucket;
pub use cache_aware::{CacheAware, TreeGauge};
pub use cache_tree::TreeStats;
pub use consistent_hashing::ConsistentHashing;
pub use manual::Manual;
pub use params::PolicyParams;
pub use power_of_two::PowerOfTwo;
pub use prefix_hash::PrefixHash;
pub use random::Random;
pub use round_robin::RoundRobin;

/// What a policy must see of a request before it can choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    Header,
    Model,
    PromptText,
}

/// What the handler extracted for the policy; empty for policies that need nothing.
#[derive(Debug, Default)]
pub struct RequestFacts<'a> {
    /// Sticky key: the first `--routing-key-headers` header present (default
    /// `x-gw-routing-key`), else the body's `rid`.
    pub routing_key: Option<&'a str>,
    /// Header `X-GW-Target-Worker`: an index into the candidates, as sent.
    pub target_worker: Option<&'a str>,
    pub model: Option<&'a str>,
    /// Prompt text; `None` when the body was not read or has no text.
    pub text: Option<&'a str>,
    /// Body length in bytes when known (0 otherwise); the bucket policy falls back to it
    /// when there is no text.
    pub body_len: usize,
}

/// The decision branch a selection took. Labels are the spec's `branch` label values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Branch {
    TreeMatch,
    Spill,
    ExpectedWaitFallback,
    FirstHealthyFallback,
    RingHit,
    LoadBalanceWalk,
    FallbackLeastLoad,
    NoRoutingKey,
    TargetWorkerHit,
    TargetWorkerMiss,
    RoutingKeyHit,
    RandomFallback,
    OccupiedHit,
    OccupiedMiss,
    Vacant,
    NoRoutingId,
    NoHealthyWorkers,
}

impl Branch {
    pub fn as_str(self) -> &'static str {
        match self {
            Branch::TreeMatch => "tree_match",
            Branch::Spill => "spill",
            Branch::ExpectedWaitFallback => "expected_wait_fallback",
            Branch::FirstHealthyFallback => "first_healthy_fallback",
            Branch::RingHit => "ring_hit",
            Branch::LoadBalanceWalk => "load_balance_walk",
            Branch::FallbackLeastLoad => "fallback_least_load",
            Branch::NoRoutingKey => "no_routing_key",
            Branch::TargetWorkerHit => "target_worker_hit",
            Branch::TargetWorkerMiss => "target_worker_miss",
            Branch::RoutingKeyHit => "routing_key_hit",
            Branch::RandomFallback => "random_fallback",
            Branch::OccupiedHit => "occupied_hit",
            Branch::OccupiedMiss => "occupied_miss",
            Branch::Vacant => "vacant",
            Branch::NoRoutingId => "no_routing_id",
            Branch::NoHealthyWorkers => "no_healthy_workers",
        }
    }
}

/// The outcome of one selection.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Selection {
    /// Index into the candidates; `None` only when there were none (answer 503).
    pub index: Option<usize>,
    /// The branch to count; `None` for policies without a branch metric (random,
    /// round_robin, power_of_two, bucket) and for cache_aware with no candidates (its
    /// metric counts tree decisions only).
    pub branch: Option<Branch>,
    /// cache_aware only: the best prefix match ratio (0.0–1.0) when the tree was consulted,
    /// for `gw_cache_aware_match_ratio`.
    pub match_ratio: Option<f32>,
}

impl Selection {
    /// A choice without a branch (policies that have no branch metric).
    fn plain(index: Option<usize>) -> Selection {
        Selection {
            index,
            ..Selection::default()
        }
    }

    fn branched(index: Option<usize>, branch: Branch) -> Selection {
        Selection {
            index,
            branch: Some(branch),
            match_ratio: None,
        }
    }
}

/// Figures for the policy gauges, as of the last upkeep pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// cache_aware: one entry per model tree (`gw_cache_tree_chars`, `gw_cache_tree_tenants`).
    pub trees: Vec<TreeGauge>,
    /// manual: remembered routing keys (`gw_manual_policy_cache_entries`).
    pub manual_entries: Option<usize>,
}

/// A routing policy. Implementations are shared by every data-plane thread, so `decide`
/// takes `&self` and keeps any state in atomics, lock-free snapshots or short sharded
/// critical sections.
pub trait Policy: Send + Sync {
    fn name(&self) -> &'static str;
    fn needs(&self) -> Needs;
    /// Picks one of `candidates` (all routable) and says which branch decided it; `index`
    /// is `None` only when the slice is empty.
    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection;
    /// Just the index of [`Policy::decide`], for callers that count no branches.
    fn select(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Option<usize> {
        self.decide(candidates, facts).index
    }
    /// Periodic upkeep on a control thread, every `eviction_interval`: cache_aware trims
    /// its trees, manual forgets idle keys. Also refreshes [`Policy::gauges`].
    fn maintain(&self) {}
    /// Forgets everything about a worker that left the registry (by its URL).
    fn remove_worker(&self, _url: &str) {}
    /// Gauge figures as of the last [`Policy::maintain`].
    fn gauges(&self) -> Gauges {
        Gauges::default()
    }
}

/// Builds the policy for a configured name with the given parameters.
pub fn build_with_params(name: PolicyName, params: &PolicyParams) -> Arc<dyn Policy> {
    match name {
        PolicyName::Random => Arc::new(Random),
        PolicyName::RoundRobin => Arc::new(RoundRobin::default()),
        PolicyName::PowerOfTwo => Arc::new(PowerOfTwo),
        PolicyName::CacheAware => Arc::new(CacheAware::new(params)),
        PolicyName::PrefixHash => Arc::new(PrefixHash::new(params)),
        PolicyName::ConsistentHashing => Arc::new(ConsistentHashing::new(params)),
        PolicyName::Manual => Arc::new(Manual::new(params)),
        PolicyName::Bucket => Arc::new(Bucket::new(params)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::workers;

    #[test]
    fn every_policy_is_built_and_answers_none_without_candidates() {
        let params = PolicyParams::default();
        let facts = RequestFacts {
            routing_key: Some("k"),
            text: Some("hello"),
            ..RequestFacts::default()
        };
        for &name in PolicyName::ALL {
            let policy = build_with_params(name, &params);
            assert_eq!(policy.name(), name.as_str());
            let none = policy.decide(&[], &facts);
            assert_eq!(none.index, None, "{name}");
            let expected = match name {
                PolicyName::PrefixHash | PolicyName::ConsistentHashing | PolicyName::Manual => {
                    Some(Branch::NoHealthyWorkers)
                }
                _ => None,
            };
            assert_eq!(none.branch, expected, "{name}");
            let ws = workers(3);
            let some = policy.decide(&ws, &facts);
            assert!(some.index.is_some_and(|i| i < 3), "{name}");
        }
    }

    #[test]
    fn branch_labels_are_the_spec_strings() {
        let labels = [
            (Branch::TreeMatch, "tree_match"),
            (Branch::ExpectedWaitFallback, "expected_wait_fallback"),
            (Branch::FirstHealthyFallback, "first_healthy_fallback"),
            (Branch::LoadBalanceWalk, "load_balance_walk"),
            (Branch::TargetWorkerMiss, "target_worker_miss"),
            (Branch::NoHealthyWorkers, "no_healthy_workers"),
        ];
        for (branch, label) in labels {
            assert_eq!(branch.as_str(), label);
        }
    }
}
