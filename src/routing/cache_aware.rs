//! cache_aware: send a request where its prefix is most likely cached, unless that would
//! pile work onto a busy worker.
//!
//! Per model (requests without a model share a default tree) a [`CacheTree`] approximates
//! which prefixes each worker holds. A selection:
//! 1. no text (body not read) → least loaded (`first_healthy_fallback`);
//! 2. loads imbalanced (max − min > `balance_abs_threshold` and max >
//!    `balance_rel_threshold` × min) → least loaded (`spill`);
//! 3. otherwise the longest prefix held by a candidate: when it covers at least
//!    `cache_threshold` of the text, the least loaded of its holders (`tree_match`), else
//!    the least loaded candidate (`expected_wait_fallback`).
//!
//! In cases 2 and 3 the text is then inserted for the chosen worker. Only the first
//! [`MAX_EXAMINED_BYTES`] of a text are examined and stored, which bounds the work per
//! request and the depth of the trees.
//!
//! Memory: between eviction passes a tree stops growing at twice `max_tree_size` per live
//! tenant; a pass ([`Policy::maintain`]) trims every tenant to `max_tree_size`. At most
//! [`MAX_MODEL_TREES`] model trees exist (further models share the default tree), and a
//! model tree unused for [`IDLE_PASSES`] eviction intervals is dropped, so arbitrary model
//! names in requests cannot grow memory without bound.
//!
//! Hot path: the model tree map and the candidate index are lock-free `arc_swap` reads;
//! the tree itself uses per-node locks (see [`super::cache_tree`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use super::cache_tree::{CacheTree, TenantId, TreeStats};
use super::candidates::{fingerprint, CandidateCache};
use super::clock::{ms, now_ms};
use super::load::least_loaded;
use super::tenants::{CandidateIndex, TenantTable};
use super::{Branch, Gauges, Needs, Policy, PolicyParams, RequestFacts, Selection};
use crate::bounded::{prefix_within, KEY_BYTES};
use crate::fleet::Worker;

/// Bytes of a request's text that are matched and inserted.
pub const MAX_EXAMINED_BYTES: usize = 64 * 1024;
/// Model trees besides the default one.
pub const MAX_MODEL_TREES: usize = 64;
/// Eviction intervals a model tree may go unused before it is dropped.
pub const IDLE_PASSES: u64 = 5;

/// Gauge figures of one model's tree.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeGauge {
    /// `None` for requests without a model.
    pub model: Option<Arc<str>>,
    pub stats: TreeStats,
}

#[derive(Debug, Default)]
struct ModelTree {
    tree: CacheTree,
    /// Last selection that used the tree, in clock milliseconds.
    last_used: AtomicU64,
}

impl ModelTree {
    /// Notes a use; stores at most about once a second so busy trees do not bounce the
    /// cache line between threads.
    fn touch(&self, now: u64) {
        if self.last_used.load(Ordering::Relaxed) + 1000 <= now {
            self.last_used.store(now, Ordering::Relaxed);
        }
    }
}

pub struct CacheAware {
    cache_threshold: f32,
    balance_abs_threshold: usize,
    balance_rel_threshold: f32,
    max_tree_size: usize,
    idle_ms: u64,
    tenants: TenantTable,
    default_tree: ModelTree,
    trees: ArcSwap<HashMap<Box<str>, Arc<ModelTree>>>,
    index: CandidateCache<CandidateIndex>,
    /// Written by `maintain` (control thread), read by `gauges`.
    gauges: Mutex<Vec<TreeGauge>>,
}

impl CacheAware {
    pub fn new(params: &PolicyParams) -> CacheAware {
        CacheAware {
            cache_threshold: params.cache_threshold,
            balance_abs_threshold: params.balance_abs_threshold,
            balance_rel_threshold: params.balance_rel_threshold,
            max_tree_size: params.max_tree_size,
            idle_ms: ms(params.eviction_interval).saturating_mul(IDLE_PASSES),
            tenants: TenantTable::default(),
            default_tree: ModelTree::default(),
            trees: ArcSwap::default(),
            index: CandidateCache::default(),
            gauges: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on the tree of `model`, creating it on first use (copy-on-write of the
    /// small map, once per model). A model name longer than [`KEY_BYTES`] shares the
    /// default tree: the map key and the tree's gauge label would cost its length.
    fn with_tree<R>(&self, model: Option<&str>, f: impl FnOnce(&ModelTree) -> R) -> R {
        let Some(model) = model.filter(|m| m.len() <= KEY_BYTES) else {
            return f(&self.default_tree);
        };
        {
            let trees = self.trees.load();
            if let Some(tree) = trees.get(model) {
                return f(tree);
            }
            if trees.len() >= MAX_MODEL_TREES {
                return f(&self.default_tree);
            }
        }
        let mut created = None;
        self.trees.rcu(|trees| {
            let mut trees = HashMap::clone(trees);
            if trees.len() < MAX_MODEL_TREES {
                let tree = trees.entry(model.into()).or_default();
                created = Some(tree.clone());
            }
            trees
        });
        match created {
            Some(tree) => f(&tree),
            None => f(&self.default_tree),
        }
    }

    /// Tree growth stops here until the next eviction pass.
    fn growth_limit(&self) -> usize {
        self.max_tree_size
            .saturating_mul(2)
            .saturating_mul(self.tenants.live().max(1))
    }

    fn imbalanced(&self, candidates: &[Arc<Worker>]) -> bool {
        let (mut min, mut max) = (usize::MAX, 0);
        for worker in candidates {
            let load = worker.load();
            min = min.min(load);
            max = max.max(load);
        }
        max.saturating_sub(min) > self.balance_abs_threshold
            && max as f64 > f64::from(self.balance_rel_threshold) * min as f64
    }

    /// Match, decide, insert: steps 2 and 3 of the module documentation.
    fn select_with_text(
        &self,
        candidates: &[Arc<Worker>],
        model: Option<&str>,
        text: &str,
    ) -> Selection {
        let text = prefix_within(text, MAX_EXAMINED_BYTES);
        let now = now_ms();
        let spill = self.imbalanced(candidates);
        let key = fingerprint(candidates).salted(self.tenants.generation());
        self.with_tree(model, |tree| {
            tree.touch(now);
            self.index.with(
                key,
                || CandidateIndex::build(&self.tenants, candidates),
                |index| {
                    let selection = if spill {
                        Selection::branched(least_loaded(candidates), Branch::Spill)
                    } else {
                        self.match_or_fallback(&tree.tree, index, candidates, text)
                    };
                    if let Some(tenant) = selection.index.and_then(|i| index.tenant(i)) {
                        tree.tree.insert(text, tenant, now, self.growth_limit());
                    }
                    selection
                },
            )
        })
    }

    fn match_or_fallback(
        &self,
        tree: &CacheTree,
        index: &CandidateIndex,
        candidates: &[Arc<Worker>],
        text: &str,
    ) -> Selection {
        let found = tree.longest_match(text, |t| index.position(t).is_some());
        let text_chars = text.chars().count().max(1);
        let ratio = (found.chars as f32 / text_chars as f32).clamp(0.0, 1.0);
        let mut holder: Option<(usize, usize)> = None;
        if found.chars > 0 && ratio >= self.cache_threshold {
            found.for_each_tenant(|t| {
                let Some((at, worker)) = index
                    .position(t)
                    .and_then(|at| Some((at, candidates.get(at)?)))
                else {
                    return;
                };
                let load = worker.load();
                if holder.is_none_or(|(_, min)| load < min) {
                    holder = Some((at, load));
                }
            });
        }
        let (index, branch) = match holder {
            Some((at, _)) => (Some(at), Branch::TreeMatch),
            None => (least_loaded(candidates), Branch::ExpectedWaitFallback),
        };
        Selection {
            index,
            branch: Some(branch),
            match_ratio: Some(ratio),
        }
    }

    /// One eviction pass over every tree; see [`Policy::maintain`].
    fn evict(&self) {
        let now = now_ms();
        let retired = self.tenants.take_retired();
        let gone = |t: TenantId| retired.contains(&t);
        let mut gauges = vec![TreeGauge {
            model: None,
            stats: self.default_tree.tree.evict(self.max_tree_size, gone),
        }];
        let trees = self.trees.load_full();
        let idle: Vec<&str> = trees
            .iter()
            .filter(|(_, t)| now.saturating_sub(t.last_used.load(Ordering::Relaxed)) > self.idle_ms)
            .map(|(model, _)| &**model)
            .collect();
        if !idle.is_empty() {
            self.trees.rcu(|current| {
                let mut kept = HashMap::clone(current);
                kept.retain(|model, _| !idle.contains(&&**model));
                kept
            });
        }
        for (model, tree) in trees.iter().filter(|(m, _)| !idle.contains(&&***m)) {
            gauges.push(TreeGauge {
                model: Some(Arc::from(&**model)),
                stats: tree.tree.evict(self.max_tree_size, gone),
            });
        }
        self.tenants.release(retired);
        *self.gauges.lock().unwrap_or_else(PoisonError::into_inner) = gauges;
    }
}

impl Policy for CacheAware {
    fn name(&self) -> &'static str {
        "cache_aware"
    }

    fn needs(&self) -> Needs {
        Needs::PromptText
    }

    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection {
        if candidates.is_empty() {
            return Selection::plain(None);
        }
        match facts.text.filter(|t| !t.is_empty()) {
            Some(text) => self.select_with_text(candidates, facts.model, text),
            None => Selection::branched(least_loaded(candidates), Branch::FirstHealthyFallback),
        }
    }

    /// Trims every tree (each tenant to `max_tree_size` characters), strips removed
    /// workers, drops idle model trees and refreshes the gauges.
    fn maintain(&self) {
        self.evict();
    }

    fn remove_worker(&self, url: &str) {
        let Some(tenant) = self.tenants.retire(url) else {
            return;
        };
        self.default_tree.tree.remove_tenant(tenant);
        for tree in self.trees.load().values() {
            tree.tree.remove_tenant(tenant);
        }
    }

    fn gauges(&self) -> Gauges {
        Gauges {
            trees: self
                .gauges
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            manual_entries: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seed_this_thread;
    use crate::routing::test_support::{load, workers};

    fn facts<'a>(text: &'a str, model: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts {
            text: Some(text),
            model,
            ..RequestFacts::default()
        }
    }

    fn policy() -> CacheAware {
        CacheAware::new(&PolicyParams::default())
    }

    #[test]
    fn sticks_to_the_worker_holding_the_prefix() {
        seed_this_thread(11);
        let p = policy();
        let ws = workers(4);
        let first = p.decide(&ws, &facts("You are a helpful assistant. Q1", None));
        assert_eq!(first.branch, Some(Branch::ExpectedWaitFallback));
        assert_eq!(first.match_ratio, Some(0.0));
        let chosen = first.index.unwrap();
        for q in 2..20 {
            let text = format!("You are a helpful assistant. Q{q}");
            let s = p.decide(&ws, &facts(&text, None));
            assert_eq!(s.branch, Some(Branch::TreeMatch));
            assert_eq!(s.index, Some(chosen));
            assert!(s.match_ratio.unwrap() > 0.9);
        }
    }

    #[test]
    fn below_the_threshold_falls_back_to_least_loaded() {
        seed_this_thread(12);
        let p = policy();
        let ws = workers(3);
        let first = p.decide(&ws, &facts("ab", None)).index.unwrap();
        let _busy = load(&ws[first], 3);
        // "a" of "a-much-longer-prompt…" is far below 30%.
        let s = p.decide(&ws, &facts("a-much-longer-prompt-than-before", None));
        assert_eq!(s.branch, Some(Branch::ExpectedWaitFallback));
        assert!(s.match_ratio.unwrap() < 0.3);
        assert_ne!(s.index, Some(first), "least loaded, not the busy holder");
    }

    #[test]
    fn spills_only_when_loads_are_imbalanced_both_ways() {
        seed_this_thread(13);
        let params = PolicyParams {
            balance_abs_threshold: 4,
            balance_rel_threshold: 2.0,
            ..PolicyParams::default()
        };
        let p = CacheAware::new(&params);
        let ws = workers(2);
        let holder = p.decide(&ws, &facts("prompt", None)).index.unwrap();
        let other = 1 - holder;
        // 5 vs 0: diff 5 > 4 and 5 > 2×0 → spill.
        let busy = load(&ws[holder], 5);
        let s = p.decide(&ws, &facts("prompt", None));
        assert_eq!((s.index, s.branch), (Some(other), Some(Branch::Spill)));
        assert_eq!(s.match_ratio, None);
        // 10 vs 6: diff 4 is not > 4 → the tree decides.
        drop(busy);
        let _b = (load(&ws[holder], 10), load(&ws[other], 6));
        let s = p.decide(&ws, &facts("prompt", None));
        assert_eq!(s.branch, Some(Branch::TreeMatch));
    }

    #[test]
    fn no_text_is_first_healthy_fallback_and_no_candidates_is_none() {
        let p = policy();
        let ws = workers(2);
        let _busy = load(&ws[0], 1);
        let s = p.decide(&ws, &RequestFacts::default());
        assert_eq!(
            (s.index, s.branch),
            (Some(1), Some(Branch::FirstHealthyFallback))
        );
        assert_eq!(p.decide(&[], &facts("x", None)), Selection::default());
    }

    #[test]
    fn models_have_separate_trees() {
        seed_this_thread(14);
        let p = policy();
        let ws = workers(8);
        let a = p.decide(&ws, &facts("same prompt", Some("llama"))).index;
        let s = p.decide(&ws, &facts("same prompt", Some("qwen")));
        assert_eq!(
            s.branch,
            Some(Branch::ExpectedWaitFallback),
            "no match across models"
        );
        let s = p.decide(&ws, &facts("same prompt", Some("llama")));
        assert_eq!((s.index, s.branch), (a, Some(Branch::TreeMatch)));
    }

    #[test]
    fn only_candidates_can_match() {
        seed_this_thread(15);
        let p = policy();
        let ws = workers(4);
        let holder = p.decide(&ws, &facts("prefix-x", None)).index.unwrap();
        let others: Vec<_> = ws
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != holder)
            .map(|(_, w)| w.clone())
            .collect();
        let s = p.decide(&others, &facts("prefix-x", None));
        assert_eq!(s.branch, Some(Branch::ExpectedWaitFallback));
        assert!(s.index.is_some_and(|i| i < 3));
    }

    #[test]
    fn removing_a_worker_forgets_its_prefixes() {
        seed_this_thread(16);
        let p = policy();
        let ws = workers(2);
        let holder = p.decide(&ws, &facts("prompt one", None)).index.unwrap();
        p.remove_worker(&ws[holder].url);
        let s = p.decide(&ws, &facts("prompt one", None));
        assert_eq!(s.branch, Some(Branch::ExpectedWaitFallback));
        p.maintain();
        let trees = p.gauges().trees;
        assert_eq!(trees.len(), 1);
        assert_eq!(
            trees[0].stats.tenants, 1,
            "only the re-chosen worker remains"
        );
    }

    #[test]
    fn maintain_bounds_each_tenant_and_reports_gauges() {
        seed_this_thread(17);
        let params = PolicyParams {
            max_tree_size: 100,
            ..PolicyParams::default()
        };
        let p = CacheAware::new(&params);
        let ws = workers(2);
        for i in 0..200 {
            let text = format!("{i:04} some distinct prompt text");
            p.decide(&ws, &facts(&text, Some("m")));
        }
        p.maintain();
        let gauges = p.gauges();
        let m = gauges
            .trees
            .iter()
            .find(|g| g.model.as_deref() == Some("m"))
            .unwrap();
        assert!(m.stats.chars <= 200, "{m:?}");
        assert!(m.stats.stored_chars <= 200);
        assert_eq!(m.stats.tenants, 2);
    }

    #[test]
    fn model_trees_are_bounded() {
        let p = policy();
        let ws = workers(1);
        for i in 0..MAX_MODEL_TREES + 10 {
            p.decide(&ws, &facts("x", Some(&format!("model-{i}"))));
        }
        assert_eq!(p.trees.load().len(), MAX_MODEL_TREES);
    }

    #[test]
    fn overlong_model_names_share_the_default_tree() {
        let p = policy();
        let ws = workers(1);
        let long = "m".repeat(KEY_BYTES + 1);
        p.decide(&ws, &facts("x", Some(&long)));
        assert!(p.trees.load().is_empty());
    }

    #[test]
    fn long_and_odd_texts_never_panic() {
        let p = policy();
        let ws = workers(3);
        let long = "🦀é".repeat(MAX_EXAMINED_BYTES);
        for text in [long.as_str(), "\u{0}", "a\u{10FFFF}b", "é", "e\u{301}"] {
            let s = p.decide(&ws, &facts(text, None));
            assert!(s.index.is_some());
            let s = p.decide(&ws, &facts(text, None));
            assert_eq!(s.branch, Some(Branch::TreeMatch), "{text:.8}");
        }
    }

    #[test]
    fn concurrent_selects_are_consistent() {
        let p = policy();
        let ws = workers(8);
        let prefixes: Vec<String> = (0..16).map(|i| format!("system prompt {i}: ")).collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (p, ws, prefixes) = (&p, &ws, &prefixes);
                s.spawn(move || {
                    seed_this_thread(100 + t);
                    for i in 0..400 {
                        let text = format!("{}question {i} from {t}", prefixes[i % 16]);
                        let s = p.decide(ws, &facts(&text, None));
                        assert!(s.index.is_some_and(|i| i < ws.len()));
                        assert!(s.match_ratio.is_some_and(|r| (0.0..=1.0).contains(&r)));
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..10 {
                    p.maintain();
                }
            });
        });
        // Every full prompt is now held by someone: it matches completely.
        for (t, i) in [(0, 5), (3, 399)] {
            let text = format!("{}question {i} from {t}", prefixes[i % 16]);
            let s = p.decide(&ws, &facts(&text, None));
            assert_eq!(
                (s.branch, s.match_ratio),
                (Some(Branch::TreeMatch), Some(1.0))
            );
        }
    }
}
