//! power_of_two: two distinct random candidates, the less loaded wins. Nearly as even as
//! least-loaded at the cost of two atomic loads instead of a scan, and without herding
//! every thread onto the same idle worker.

use std::sync::Arc;

use super::{Needs, Policy, RequestFacts, Selection};
use crate::fleet::Worker;
use crate::rng::below;

#[derive(Debug, Default, Clone, Copy)]
pub struct PowerOfTwo;

impl Policy for PowerOfTwo {
    fn name(&self) -> &'static str {
        "power_of_two"
    }

    fn needs(&self) -> Needs {
        Needs::Nothing
    }

    fn decide(&self, candidates: &[Arc<Worker>], _facts: &RequestFacts<'_>) -> Selection {
        let n = candidates.len();
        if n < 2 {
            return Selection::plain((n == 1).then_some(0));
        }
        let first = below(n);
        let second = (first + 1 + below(n - 1)) % n;
        let pick = if candidates[second].load() < candidates[first].load() {
            second
        } else {
            first
        };
        Selection::plain(Some(pick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seed_this_thread;
    use crate::routing::test_support::{load, workers};

    #[test]
    fn never_picks_the_busiest_of_two_and_spreads_when_idle() {
        seed_this_thread(21);
        let ws = workers(2);
        let _busy = load(&ws[1], 1);
        for _ in 0..100 {
            assert_eq!(
                PowerOfTwo.decide(&ws, &RequestFacts::default()).index,
                Some(0)
            );
        }
        let idle = workers(4);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[PowerOfTwo
                .decide(&idle, &RequestFacts::default())
                .index
                .unwrap()] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(
            PowerOfTwo
                .decide(&idle[..1], &RequestFacts::default())
                .index,
            Some(0)
        );
    }

    #[test]
    fn the_most_loaded_worker_is_never_chosen() {
        seed_this_thread(22);
        let ws = workers(5);
        let _busy = load(&ws[2], 9);
        for _ in 0..500 {
            assert_ne!(
                PowerOfTwo.decide(&ws, &RequestFacts::default()).index,
                Some(2)
            );
        }
    }
}
