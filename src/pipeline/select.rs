//! Choosing the worker for one attempt: the policy's pick among the routable candidates,
//! skipping workers whose circuit breaker is open, workers overload protection has taken
//! out of routing and, on a retry, workers already tried.
//!
//! The common case costs one policy call, one breaker check and one flag read, with no
//! allocation: the candidate slice comes straight from the registry snapshot. Only when
//! the pick is refused is a filtered candidate list built.

use std::sync::Arc;

use uuid::Uuid;

use crate::fleet::{Snapshot, Worker};
use crate::routing::{Policy, RequestFacts, Selection};

/// Which workers a request may go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Among<'a> {
    /// Regular workers; of the model, when it narrows the candidates.
    Regular(Option<&'a str>),
    /// Prefill workers alone: count_tokens under prefill/decode disaggregation (spec 2: one
    /// prefill worker, no decode worker), and the prefill half of a pair.
    Prefill,
}

/// Why no worker was picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPick {
    /// No candidate can take traffic (none routable, every breaker open).
    None,
    /// Candidates exist, but overload protection holds every one whose breaker allows
    /// traffic: the request is shed.
    Overloaded,
}

/// Whether a worker may take an attempt now, leaving aside earlier attempts.
fn usable(worker: &Worker) -> bool {
    worker.breaker.allows() && !worker.is_overloaded()
}

/// Picks a worker for an attempt. `tried` lists the workers earlier attempts went to; they
/// are avoided while any other candidate is available, and reused otherwise (a retry on
/// the same worker beats no retry).
pub fn pick(
    snapshot: &Snapshot,
    among: Among<'_>,
    policy: &dyn Policy,
    facts: &RequestFacts<'_>,
    tried: &[Uuid],
) -> Result<(Arc<Worker>, Selection), NoPick> {
    let candidates = match among {
        Among::Regular(Some(model)) => snapshot.routable_for_model(model),
        Among::Regular(None) => snapshot.routable(),
        Among::Prefill => snapshot.routable_prefill(),
    };
    pick_from(candidates, policy, facts, tried)
}

/// [`pick`] among given candidates (all routable): the decode workers a prefill worker
/// pairs with.
pub fn pick_from(
    candidates: &[Arc<Worker>],
    policy: &dyn Policy,
    facts: &RequestFacts<'_>,
    tried: &[Uuid],
) -> Result<(Arc<Worker>, Selection), NoPick> {
    let how = policy.decide(candidates, facts);
    let first = how
        .index
        .and_then(|idx| candidates.get(idx))
        .ok_or(NoPick::None)?;
    if !tried.contains(&first.id) && usable(first) {
        return Ok((first.clone(), how));
    }
    let open: Vec<Arc<Worker>> = candidates.iter().filter(|w| usable(w)).cloned().collect();
    if open.is_empty() {
        let overloaded = candidates
            .iter()
            .any(|w| w.breaker.allows() && w.is_overloaded());
        return Err(if overloaded {
            NoPick::Overloaded
        } else {
            NoPick::None
        });
    }
    let fresh: Vec<Arc<Worker>> = open
        .iter()
        .filter(|w| !tried.contains(&w.id))
        .cloned()
        .collect();
    let pool = if fresh.is_empty() { &open } else { &fresh };
    let how = policy.decide(pool, facts);
    how.index
        .and_then(|idx| pool.get(idx))
        .map(|w| (w.clone(), how))
        .ok_or(NoPick::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Registry, Status};
    use crate::resilience::Outcome;
    use crate::routing::RoundRobin;

    fn registry(n: usize) -> (Registry, Vec<Arc<Worker>>) {
        let registry = Registry::new();
        let workers: Vec<Arc<Worker>> = (0..n)
            .map(|i| {
                let w =
                    Arc::new(Worker::for_url(&format!("http://127.0.0.1:{}", 2000 + i)).unwrap());
                w.set_status(Status::Ready);
                registry.insert(w.clone());
                w
            })
            .collect();
        (registry, workers)
    }

    fn open(worker: &Worker) {
        for _ in 0..worker.breaker.config().failure_threshold {
            worker.breaker.record(Outcome::Failure);
        }
        assert!(!worker.breaker.allows());
    }

    #[test]
    fn open_breakers_and_tried_workers_are_skipped() {
        let (registry, workers) = registry(3);
        let policy = RoundRobin::default();
        let facts = RequestFacts::default();
        let pick = |tried: &[Uuid]| {
            pick(
                &registry.snapshot(),
                Among::Regular(None),
                &policy,
                &facts,
                tried,
            )
            .map(|(w, _)| w.id)
        };
        open(&workers[0]);
        for _ in 0..6 {
            assert_ne!(pick(&[]).unwrap(), workers[0].id);
        }
        let tried = [workers[1].id];
        for _ in 0..6 {
            assert_eq!(pick(&tried).unwrap(), workers[2].id);
        }
        // Every allowed worker tried: a tried one is reused rather than giving up.
        let all = [workers[1].id, workers[2].id];
        let again = pick(&all).unwrap();
        assert!(again == workers[1].id || again == workers[2].id);
        open(&workers[1]);
        open(&workers[2]);
        assert_eq!(pick(&[]), Err(NoPick::None));
    }

    #[test]
    fn overloaded_workers_are_skipped_and_all_overloaded_sheds() {
        use crate::fleet::engine_load::{EngineLoad, RankLoad, Source};
        use crate::fleet::overload::Thresholds;
        let registry = Registry::new();
        let workers: Vec<Arc<Worker>> = (0..2)
            .map(|i| {
                let mut w = Worker::for_url(&format!("http://127.0.0.1:{}", 2100 + i)).unwrap();
                w.overload = Some(Thresholds {
                    waiting_requests: Some(4),
                    token_usage: None,
                });
                let w = Arc::new(w);
                w.set_status(Status::Ready);
                registry.insert(w.clone());
                w
            })
            .collect();
        let report = |waiting| {
            Some(Arc::new(EngineLoad {
                timestamp: String::new(),
                source: Source::LoadsApi,
                loads: vec![RankLoad {
                    num_waiting_reqs: waiting,
                    ..RankLoad::default()
                }],
            }))
        };
        let policy = RoundRobin::default();
        let facts = RequestFacts::default();
        let pick = || {
            pick(
                &registry.snapshot(),
                Among::Regular(None),
                &policy,
                &facts,
                &[],
            )
            .map(|(w, _)| w.id)
        };
        workers[0].set_engine_load(report(9));
        for _ in 0..4 {
            assert_eq!(pick().unwrap(), workers[1].id);
        }
        workers[1].set_engine_load(report(4));
        assert_eq!(pick(), Err(NoPick::Overloaded));
        // No report keeps the verdict; a report below the threshold lifts it.
        workers[1].set_engine_load(None);
        assert_eq!(pick(), Err(NoPick::Overloaded));
        workers[1].set_engine_load(report(3));
        assert_eq!(pick().unwrap(), workers[1].id);
        // An open breaker is not overload: with the only usable worker's breaker open and
        // the other overloaded, the request is still shed (the overloaded one could serve).
        open(&workers[1]);
        assert_eq!(pick(), Err(NoPick::Overloaded));
        workers[0].set_engine_load(report(0));
        assert_eq!(pick().unwrap(), workers[0].id);
    }
}
