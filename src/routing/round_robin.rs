//! Round robin: each selection takes the next candidate in turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Needs, Policy, RequestFacts};
use crate::workers::Worker;

/// One shared counter for all threads, so the rotation is exact across the whole gateway.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn needs(&self) -> Needs {
        Needs::Nothing
    }

    fn select(&self, candidates: &[Arc<Worker>], _facts: &RequestFacts<'_>) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        Some(self.next.fetch_add(1, Ordering::Relaxed) % candidates.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize) -> Vec<Arc<Worker>> {
        (0..n)
            .map(|i| Arc::new(Worker::for_url(&format!("http://127.0.0.1:{}", 1000 + i)).unwrap()))
            .collect()
    }

    #[test]
    fn rotates_exactly() {
        let rr = RoundRobin::default();
        let ws = workers(3);
        let picks: Vec<_> = (0..6)
            .map(|_| rr.select(&ws, &RequestFacts::default()).unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(rr.select(&[], &RequestFacts::default()), None);
    }
}
