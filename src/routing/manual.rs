//! manual: sticky sessions. A routing key is pinned to the worker it first went to, for as
//! long as the key keeps being used.
//!
//! - key pinned to a worker that is still a candidate → that worker (`occupied_hit`);
//! - key pinned to a worker that is gone → least loaded, re-pinned (`occupied_miss`);
//! - key unknown, or idle longer than `manual_idle_ttl` → least loaded, pinned (`vacant`);
//! - no key → random (`no_routing_id`).
//!
//! Pins are by worker URL, so they survive fleet changes; a removed worker's pins are not
//! purged eagerly but re-pinned on next use (counted as `occupied_miss`) or expire.
//!
//! The map is split into [`SHARDS`] shards by key hash, each a `Mutex<HashMap>`: a lookup
//! locks one shard for a hash probe and a timestamp store, so threads collide only when
//! their keys share a shard and never wait on a scan (the least-loaded scan runs between
//! two short lock holds). A lock-free map would need a dependency for little gain at
//! these hold times. Each shard holds at most `manual_max_entries / SHARDS` keys; at that
//! bound a new key replaces the least recently used of a few sampled entries (a cheap
//! approximation of LRU; [`Manual::sweep`] keeps shards below it in normal operation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::candidates::{fingerprint, CandidateCache};
use super::clock::{ms, now_ms};
use super::hash::hash64;
use super::load::least_loaded;
use super::{Branch, Gauges, Needs, Policy, PolicyParams, RequestFacts, Selection};
use crate::bounded::KEY_BYTES;
use crate::fleet::Worker;
use crate::rng::below;

pub const SHARDS: usize = 64;
/// Entries sampled for replacement when a shard is full.
const SAMPLE: usize = 8;

#[derive(Debug)]
struct Pin {
    url: Arc<str>,
    last_used: u64,
}

type Shard = HashMap<Box<str>, Pin>;

/// Candidate URL → position, for one candidate set.
type UrlIndex = HashMap<Arc<str>, usize>;

pub struct Manual {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    ttl_ms: u64,
    urls: CandidateCache<UrlIndex>,
}

impl Manual {
    pub fn new(params: &PolicyParams) -> Manual {
        Manual {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: params.manual_max_entries.div_ceil(SHARDS).max(1),
            ttl_ms: ms(params.manual_idle_ttl),
            urls: CandidateCache::default(),
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let at = (hash64(key.as_bytes()) % SHARDS as u64) as usize;
        self.shards[at]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keys currently remembered (for `gw_manual_policy_cache_entries`).
    pub fn entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Forgets keys idle longer than `manual_idle_ttl`.
    pub fn sweep(&self) {
        self.sweep_at(now_ms());
    }

    fn sweep_at(&self, now: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            shard.retain(|_, pin| !self.expired(pin, now));
        }
    }

    fn expired(&self, pin: &Pin, now: u64) -> bool {
        now.saturating_sub(pin.last_used) > self.ttl_ms
    }

    fn select_at(&self, candidates: &[Arc<Worker>], key: &str, now: u64) -> Selection {
        self.urls.with(
            fingerprint(candidates),
            || url_index(candidates),
            |urls| {
                let branch = match self.shard(key).get_mut(key) {
                    Some(pin) if !self.expired(pin, now) => {
                        match position(urls, &pin.url, candidates) {
                            Some(at) => {
                                pin.last_used = now;
                                return Selection::branched(Some(at), Branch::OccupiedHit);
                            }
                            None => Branch::OccupiedMiss,
                        }
                    }
                    _ => Branch::Vacant,
                };
                let Some(pick) = least_loaded(candidates) else {
                    return Selection::branched(None, Branch::NoHealthyWorkers);
                };
                let Some((url, _)) = urls.get_key_value(candidates[pick].url.as_str()) else {
                    return Selection::branched(Some(pick), branch);
                };
                self.pin(key, url, pick, branch, (urls, candidates), now)
            },
        )
    }

    /// Stores the pick, unless a concurrent request for the same key pinned a live worker
    /// meanwhile: then that one is used, so a key never splits across workers.
    fn pin(
        &self,
        key: &str,
        url: &Arc<str>,
        pick: usize,
        branch: Branch,
        (urls, candidates): (&UrlIndex, &[Arc<Worker>]),
        now: u64,
    ) -> Selection {
        let mut shard = self.shard(key);
        if let Some(pin) = shard.get_mut(key) {
            let live = position(urls, &pin.url, candidates).filter(|_| !self.expired(pin, now));
            if let Some(at) = live {
                pin.last_used = now;
                return Selection::branched(Some(at), Branch::OccupiedHit);
            }
            pin.url = url.clone();
            pin.last_used = now;
            return Selection::branched(Some(pick), branch);
        }
        if shard.len() >= self.per_shard {
            let oldest = shard
                .iter()
                .take(SAMPLE)
                .min_by_key(|(_, pin)| pin.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                shard.remove(&oldest);
            }
        }
        shard.insert(
            key.into(),
            Pin {
                url: url.clone(),
                last_used: now,
            },
        );
        Selection::branched(Some(pick), branch)
    }
}

/// The map key of a routing key longer than [`KEY_BYTES`]: `#` and its SHA-256 digest in
/// hex (65 bytes), so the map's memory stays bounded whatever a client puts in its `rid`
/// or routing header, and one long key still pins one worker.
fn long_key(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let mut out = String::with_capacity(1 + 2 * digest.as_ref().len());
    out.push('#');
    for byte in digest.as_ref() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Where `url` stands among the candidates (bounds-checked: the index is shared by every
/// slice with the same fingerprint).
fn position(urls: &UrlIndex, url: &str, candidates: &[Arc<Worker>]) -> Option<usize> {
    urls.get(url).copied().filter(|&at| at < candidates.len())
}

fn url_index(candidates: &[Arc<Worker>]) -> UrlIndex {
    candidates
        .iter()
        .enumerate()
        .map(|(at, w)| (Arc::from(w.url.as_str()), at))
        .collect()
}

impl Policy for Manual {
    fn name(&self) -> &'static str {
        "manual"
    }

    fn needs(&self) -> Needs {
        Needs::Header
    }

    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection {
        if candidates.is_empty() {
            return Selection::branched(None, Branch::NoHealthyWorkers);
        }
        match facts.routing_key {
            Some(key) if key.len() > KEY_BYTES => {
                self.select_at(candidates, &long_key(key), now_ms())
            }
            Some(key) => self.select_at(candidates, key, now_ms()),
            None => Selection::branched(Some(below(candidates.len())), Branch::NoRoutingId),
        }
    }

    /// Forgets idle keys ([`Manual::sweep`]).
    fn maintain(&self) {
        self.sweep();
    }

    fn gauges(&self) -> Gauges {
        Gauges {
            trees: Vec::new(),
            manual_entries: Some(self.entries()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rng::seed_this_thread;
    use crate::routing::test_support::{load, workers};

    fn manual() -> Manual {
        Manual::new(&PolicyParams {
            manual_idle_ttl: Duration::from_secs(10),
            ..PolicyParams::default()
        })
    }

    #[test]
    fn long_keys_are_sticky_and_stored_as_digests() {
        let m = manual();
        let ws = workers(4);
        let long = "k".repeat(KEY_BYTES * 100);
        let facts = RequestFacts {
            routing_key: Some(&long),
            ..RequestFacts::default()
        };
        let first = m.decide(&ws, &facts).index;
        for _ in 0..5 {
            assert_eq!(m.decide(&ws, &facts).index, first);
        }
        let stored: usize = m
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .map(|s| s.keys().map(|k| k.len()).collect::<Vec<_>>())
            })
            .flatten()
            .sum();
        assert_eq!(stored, 65);
        assert_ne!(long_key(&long), long_key(&"k".repeat(KEY_BYTES * 100 + 1)));
    }

    #[test]
    fn vacant_then_sticky_even_under_load() {
        seed_this_thread(41);
        let m = manual();
        let ws = workers(4);
        let first = m.select_at(&ws, "session-1", 0);
        assert_eq!(first.branch, Some(Branch::Vacant));
        let pinned = first.index.unwrap();
        let _busy = load(&ws[pinned], 50);
        for t in 1..5 {
            let s = m.select_at(&ws, "session-1", t * 1000);
            assert_eq!(
                (s.index, s.branch),
                (Some(pinned), Some(Branch::OccupiedHit))
            );
        }
        assert_eq!(m.entries(), 1);
    }

    #[test]
    fn a_gone_worker_is_replaced_and_repinned() {
        seed_this_thread(42);
        let m = manual();
        let ws = workers(3);
        let pinned = m.select_at(&ws, "k", 0).index.unwrap();
        let rest: Vec<_> = ws
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != pinned)
            .map(|(_, w)| w.clone())
            .collect();
        let s = m.select_at(&rest, "k", 1);
        assert_eq!(s.branch, Some(Branch::OccupiedMiss));
        let again = m.select_at(&rest, "k", 2);
        assert_eq!(
            (again.index, again.branch),
            (s.index, Some(Branch::OccupiedHit))
        );
        // The new pin is by URL, so it holds in the full set too.
        let full = m.select_at(&ws, "k", 3);
        assert_eq!(ws[full.index.unwrap()].url, rest[s.index.unwrap()].url);
    }

    #[test]
    fn idle_keys_expire_and_sweep_forgets_them() {
        seed_this_thread(43);
        let m = manual();
        let ws = workers(2);
        m.select_at(&ws, "old", 0);
        m.select_at(&ws, "fresh", 9_000);
        let s = m.select_at(&ws, "old", 10_001);
        assert_eq!(s.branch, Some(Branch::Vacant), "expired before any sweep");
        m.sweep_at(19_500);
        assert_eq!(
            m.entries(),
            1,
            "`fresh` idle 10.5 s is gone, `old` was renewed"
        );
        m.sweep_at(30_000);
        assert_eq!(m.entries(), 0);
    }

    #[test]
    fn the_map_is_bounded() {
        let m = Manual::new(&PolicyParams {
            manual_max_entries: 128,
            ..PolicyParams::default()
        });
        let ws = workers(2);
        for i in 0..5000u64 {
            m.select_at(&ws, &format!("key-{i}"), i);
        }
        assert!(m.entries() <= 128, "{}", m.entries());
        assert_eq!(m.gauges().manual_entries, Some(m.entries()));
    }

    #[test]
    fn no_key_is_random_and_no_candidates_is_no_healthy_workers() {
        seed_this_thread(44);
        let m = manual();
        let ws = workers(3);
        let s = m.decide(&ws, &RequestFacts::default());
        assert_eq!(s.branch, Some(Branch::NoRoutingId));
        assert!(s.index.is_some());
        assert_eq!(m.entries(), 0);
        let keyed = RequestFacts {
            routing_key: Some("k"),
            ..RequestFacts::default()
        };
        assert_eq!(m.decide(&[], &keyed).branch, Some(Branch::NoHealthyWorkers));
    }

    #[test]
    fn concurrent_first_requests_for_a_key_agree() {
        let m = manual();
        let ws = workers(8);
        let picks: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (m, ws) = (&m, &ws);
                    s.spawn(move || {
                        seed_this_thread(50 + t);
                        (0..200)
                            .map(|i| m.select_at(ws, "shared", i).index.unwrap_or(usize::MAX))
                            .last()
                            .unwrap_or(usize::MAX)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(picks.windows(2).all(|w| w[0] == w[1]), "{picks:?}");
    }
}
