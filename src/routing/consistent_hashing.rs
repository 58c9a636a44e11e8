//! consistent_hashing: explicit placement first, then the routing key on a hash ring.
//!
//! 1. Header `X-GW-Target-Worker` parses as an index into the candidates →
//!    `target_worker_hit`. A header that does not parse or is out of range counts as
//!    `target_worker_miss` and the request falls through to the next steps (the branch
//!    reported stays the miss, so every selection counts exactly once).
//! 2. A routing key → its owner on the ring of candidates (`routing_key_hit`), with no
//!    load check: the point of this policy is that a key always lands on one worker.
//! 3. Neither → a random candidate (`random_fallback`).
//!
//! Rings are cached per candidate set (see [`super::candidates`]).

use std::sync::Arc;

use super::candidates::{fingerprint, CandidateCache};
use super::hash::hash64;
use super::ring::Ring;
use super::{Branch, Needs, Policy, PolicyParams, RequestFacts, Selection};
use crate::fleet::Worker;
use crate::rng::below;

pub struct ConsistentHashing {
    virtual_nodes: usize,
    rings: CandidateCache<Ring>,
}

impl ConsistentHashing {
    pub fn new(params: &PolicyParams) -> ConsistentHashing {
        ConsistentHashing {
            virtual_nodes: params.virtual_nodes,
            rings: CandidateCache::default(),
        }
    }
}

impl Policy for ConsistentHashing {
    fn name(&self) -> &'static str {
        "consistent_hashing"
    }

    fn needs(&self) -> Needs {
        Needs::Header
    }

    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection {
        if candidates.is_empty() {
            return Selection::branched(None, Branch::NoHealthyWorkers);
        }
        let mut missed = false;
        if let Some(target) = facts.target_worker {
            match target.trim().parse::<usize>() {
                Ok(at) if at < candidates.len() => {
                    return Selection::branched(Some(at), Branch::TargetWorkerHit);
                }
                _ => missed = true,
            }
        }
        let (index, branch) = match facts.routing_key {
            Some(key) => {
                let owner = self
                    .rings
                    .with(
                        fingerprint(candidates),
                        || Ring::new(candidates, self.virtual_nodes),
                        |ring| ring.owner(hash64(key.as_bytes())),
                    )
                    .filter(|&at| at < candidates.len());
                (owner, Branch::RoutingKeyHit)
            }
            None => (Some(below(candidates.len())), Branch::RandomFallback),
        };
        let branch = if missed {
            Branch::TargetWorkerMiss
        } else {
            branch
        };
        Selection::branched(index, branch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seed_this_thread;
    use crate::routing::test_support::workers;

    fn facts<'a>(target: Option<&'a str>, key: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts {
            target_worker: target,
            routing_key: key,
            ..RequestFacts::default()
        }
    }

    #[test]
    fn target_header_wins_when_valid() {
        let p = ConsistentHashing::new(&PolicyParams::default());
        let ws = workers(3);
        let s = p.decide(&ws, &facts(Some(" 2 "), Some("k")));
        assert_eq!(
            (s.index, s.branch),
            (Some(2), Some(Branch::TargetWorkerHit))
        );
        let keyed = p.decide(&ws, &facts(None, Some("k")));
        assert_eq!(keyed.branch, Some(Branch::RoutingKeyHit));
        for bad in ["3", "-1", "x", ""] {
            let s = p.decide(&ws, &facts(Some(bad), Some("k")));
            assert_eq!(s.branch, Some(Branch::TargetWorkerMiss), "{bad:?}");
            assert_eq!(s.index, keyed.index, "falls through to the key");
        }
    }

    #[test]
    fn keys_are_sticky_and_spread() {
        let p = ConsistentHashing::new(&PolicyParams::default());
        let ws = workers(4);
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            let key = format!("user-{i}");
            let a = p.decide(&ws, &facts(None, Some(&key))).index.unwrap();
            assert_eq!(p.decide(&ws, &facts(None, Some(&key))).index, Some(a));
            counts[a] += 1;
        }
        assert!(
            counts.iter().all(|&c| (600..1400).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn no_key_is_random() {
        seed_this_thread(31);
        let p = ConsistentHashing::new(&PolicyParams::default());
        let ws = workers(4);
        let mut seen = [false; 4];
        for _ in 0..100 {
            let s = p.decide(&ws, &facts(None, None));
            assert_eq!(s.branch, Some(Branch::RandomFallback));
            seen[s.index.unwrap()] = true;
        }
        assert_eq!(seen, [true; 4]);
        let s = p.decide(&ws, &facts(Some("nope"), None));
        assert_eq!(s.branch, Some(Branch::TargetWorkerMiss));
        assert_eq!(
            p.decide(&[], &facts(Some("0"), None)).branch,
            Some(Branch::NoHealthyWorkers)
        );
    }
}
