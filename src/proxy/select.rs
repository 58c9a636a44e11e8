//! Choosing the worker for one attempt: the policy's pick among the routable candidates,
//! skipping workers whose circuit breaker is open and, on a retry, workers already tried.
//!
//! The common case costs one policy call and one breaker check, with no allocation: the
//! candidate slice comes straight from the registry snapshot. Only when the pick is
//! refused (open breaker, already tried) is a filtered candidate list built.

use std::sync::Arc;

use uuid::Uuid;

use crate::http::error::GatewayError;
use crate::routing::{Policy, RequestFacts, Selection};
use crate::workers::{Snapshot, Worker};

/// Picks a worker for an attempt. `tried` lists the workers earlier attempts went to; they
/// are avoided while any other candidate is available, and reused otherwise (a retry on
/// the same worker beats no retry).
pub fn pick(
    snapshot: &Snapshot,
    model: Option<&str>,
    policy: &dyn Policy,
    facts: &RequestFacts<'_>,
    tried: &[Uuid],
) -> Result<(Arc<Worker>, Selection), GatewayError> {
    let candidates = match model {
        Some(model) => snapshot.routable_for_model(model),
        None => snapshot.routable(),
    };
    let how = policy.decide(candidates, facts);
    let first = how
        .index
        .and_then(|idx| candidates.get(idx))
        .ok_or(GatewayError::NoAvailableWorkers)?;
    if !tried.contains(&first.id) && first.breaker.allows() {
        return Ok((first.clone(), how));
    }
    let open: Vec<Arc<Worker>> = candidates
        .iter()
        .filter(|w| w.breaker.allows())
        .cloned()
        .collect();
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
        .ok_or(GatewayError::NoAvailableWorkers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::Outcome;
    use crate::routing::RoundRobin;
    use crate::workers::{Registry, Status};

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
            pick(&registry.snapshot(), None, &policy, &facts, tried).map(|(w, _)| w.id)
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
        assert_eq!(pick(&[]), Err(GatewayError::NoAvailableWorkers));
    }
}
