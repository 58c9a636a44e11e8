//! Round robin: each selection takes the next candidate in turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Needs, Policy, RequestFacts, Selection};
use crate::fleet::Worker;

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

    fn decide(&self, candidates: &[Arc<Worker>], _facts: &RequestFacts<'_>) -> Selection {
        if candidates.is_empty() {
            return Selection::plain(None);
        }
        Selection::plain(Some(
            self.next.fetch_add(1, Ordering::Relaxed) % candidates.len(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::workers;

    #[test]
    fn rotates_exactly() {
        let rr = RoundRobin::default();
        let ws = workers(3);
        let picks: Vec<_> = (0..6)
            .map(|_| rr.decide(&ws, &RequestFacts::default()).index.unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(rr.decide(&[], &RequestFacts::default()).index, None);
    }
}
