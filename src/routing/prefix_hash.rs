//! prefix_hash: requests sharing a prompt prefix go to the same worker, by consistent
//! hashing, unless it is overloaded.
//!
//! The key is the first `prefix_token_count` tokens of the text, approximated as four
//! bytes a token (cut back to a character boundary): exact enough for prefix affinity,
//! O(1) to find, and unlike whitespace splitting it works for code and for languages
//! written without spaces. Without text the routing key is hashed instead (so sticky
//! clients still land consistently); with neither the request goes to the least loaded
//! worker (`no_routing_key`).
//!
//! The key's owner on the ring of candidates is taken when its load is at most
//! `prefix_hash_load_factor` × the average (`ring_hit`); otherwise the walk goes on
//! clockwise to the first acceptable worker (`load_balance_walk`), for at most
//! [`MAX_WALK`] ring points, then falls back to the least loaded (`fallback_least_load`).
//! With a factor ≥ 1 some worker is always acceptable, so the fallback only shows when the
//! walk limit is reached. Rings are cached per candidate set (see [`super::candidates`]).

use std::sync::Arc;

use super::candidates::{fingerprint, CandidateCache};
use super::hash::hash64;
use super::load::least_loaded;
use super::ring::Ring;
use super::{Branch, Needs, Policy, PolicyParams, RequestFacts, Selection};
use crate::bounded::prefix_within;
use crate::fleet::Worker;

/// Approximate bytes per token when cutting the text to `prefix_token_count` tokens.
pub const BYTES_PER_TOKEN: usize = 4;
/// Ring points visited looking for an acceptable worker before falling back.
pub const MAX_WALK: usize = 64;

pub struct PrefixHash {
    prefix_bytes: usize,
    load_factor: f64,
    virtual_nodes: usize,
    rings: CandidateCache<Ring>,
}

impl PrefixHash {
    pub fn new(params: &PolicyParams) -> PrefixHash {
        PrefixHash {
            prefix_bytes: params.prefix_token_count.saturating_mul(BYTES_PER_TOKEN),
            load_factor: f64::from(params.prefix_hash_load_factor),
            virtual_nodes: params.virtual_nodes,
            rings: CandidateCache::default(),
        }
    }

    fn key(&self, facts: &RequestFacts<'_>) -> Option<u64> {
        match (facts.text.filter(|t| !t.is_empty()), facts.routing_key) {
            (Some(text), _) => Some(hash64(prefix_within(text, self.prefix_bytes).as_bytes())),
            (None, Some(key)) => Some(hash64(key.as_bytes())),
            (None, None) => None,
        }
    }

    fn walk(&self, ring: &Ring, key: u64, candidates: &[Arc<Worker>]) -> Selection {
        let mut limit: Option<f64> = None;
        for (step, at) in ring.walk(key).take(MAX_WALK).enumerate() {
            let Some(load) = candidates.get(at).map(|w| w.load()) else {
                continue;
            };
            // The average is only needed once the owner is busy at all.
            let acceptable = load == 0
                || load as f64
                    <= *limit.get_or_insert_with(|| self.load_factor * average(candidates));
            if acceptable {
                let branch = if step == 0 {
                    Branch::RingHit
                } else {
                    Branch::LoadBalanceWalk
                };
                return Selection::branched(Some(at), branch);
            }
        }
        Selection::branched(least_loaded(candidates), Branch::FallbackLeastLoad)
    }
}

fn average(candidates: &[Arc<Worker>]) -> f64 {
    let total: usize = candidates.iter().map(|w| w.load()).sum();
    total as f64 / candidates.len().max(1) as f64
}

impl Policy for PrefixHash {
    fn name(&self) -> &'static str {
        "prefix_hash"
    }

    fn needs(&self) -> Needs {
        Needs::PromptText
    }

    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection {
        if candidates.is_empty() {
            return Selection::branched(None, Branch::NoHealthyWorkers);
        }
        let Some(key) = self.key(facts) else {
            return Selection::branched(least_loaded(candidates), Branch::NoRoutingKey);
        };
        self.rings.with(
            fingerprint(candidates),
            || Ring::new(candidates, self.virtual_nodes),
            |ring| self.walk(ring, key, candidates),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::{load, workers};

    fn text(t: &str) -> RequestFacts<'_> {
        RequestFacts {
            text: Some(t),
            ..RequestFacts::default()
        }
    }

    #[test]
    fn same_prefix_same_worker_and_prefixes_spread() {
        let p = PrefixHash::new(&PolicyParams::default());
        let ws = workers(8);
        let shared = "s".repeat(2000);
        let a = p.decide(&ws, &text(&format!("{shared} question A")));
        let b = p.decide(&ws, &text(&format!("{shared} question B")));
        assert_eq!(a.branch, Some(Branch::RingHit));
        assert_eq!(a.index, b.index, "only the first 1024 bytes count");
        let mut counts = [0usize; 8];
        for i in 0..4000 {
            counts[p.decide(&ws, &text(&format!("prompt {i}"))).index.unwrap()] += 1;
        }
        assert!(
            counts.iter().all(|&c| (250..750).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn an_overloaded_owner_is_walked_past() {
        let p = PrefixHash::new(&PolicyParams::default());
        let ws = workers(4);
        let owner = p.decide(&ws, &text("hello")).index.unwrap();
        // Owner 8, others 0: average 2, limit 2.5.
        let busy = load(&ws[owner], 8);
        let s = p.decide(&ws, &text("hello"));
        assert_eq!(s.branch, Some(Branch::LoadBalanceWalk));
        assert_ne!(s.index, Some(owner));
        let again = p.decide(&ws, &text("hello"));
        assert_eq!(again.index, s.index, "the walk is deterministic");
        drop(busy);
        // Everyone equally busy: within the factor, the owner keeps it.
        let _all: Vec<_> = ws.iter().map(|w| load(w, 3)).collect();
        let s = p.decide(&ws, &text("hello"));
        assert_eq!((s.index, s.branch), (Some(owner), Some(Branch::RingHit)));
    }

    #[test]
    fn a_factor_below_one_can_exhaust_the_walk() {
        let params = PolicyParams {
            prefix_hash_load_factor: 0.5,
            ..PolicyParams::default()
        };
        let p = PrefixHash::new(&params);
        let ws = workers(2);
        let _all: Vec<_> = ws.iter().map(|w| load(w, 2)).collect();
        let s = p.decide(&ws, &text("x"));
        assert_eq!(s.branch, Some(Branch::FallbackLeastLoad));
        assert!(s.index.is_some());
    }

    #[test]
    fn routing_key_without_text_and_neither() {
        let p = PrefixHash::new(&PolicyParams::default());
        let ws = workers(4);
        let keyed = RequestFacts {
            routing_key: Some("session-9"),
            ..RequestFacts::default()
        };
        let first = p.decide(&ws, &keyed);
        assert_eq!(first.branch, Some(Branch::RingHit));
        assert_eq!(p.decide(&ws, &keyed).index, first.index);
        let s = p.decide(&ws, &text(""));
        assert_eq!(s.branch, Some(Branch::NoRoutingKey));
        assert_eq!(
            p.decide(&[], &keyed),
            Selection::branched(None, Branch::NoHealthyWorkers)
        );
    }

    #[test]
    fn multi_byte_prefixes_are_cut_on_boundaries() {
        let params = PolicyParams {
            prefix_token_count: 1,
            ..PolicyParams::default()
        };
        let p = PrefixHash::new(&params);
        let ws = workers(4);
        // Four bytes end inside the emoji, so both texts are cut back to `éa`.
        let a = p.decide(&ws, &text("éa🦀 one"));
        let b = p.decide(&ws, &text("éa🦊 two"));
        assert_eq!(a.index, b.index);
    }
}
