//! Load helpers shared by the load-aware policies.

use std::sync::Arc;

use crate::fleet::Worker;
use crate::rng::below;

/// The least loaded candidate in `range` (indices into `candidates`). The scan starts at a
/// random offset so ties — all idle at low traffic — spread instead of always choosing
/// the first worker.
pub(crate) fn least_loaded_in(
    candidates: &[Arc<Worker>],
    range: std::ops::Range<usize>,
) -> Option<usize> {
    let range = range.start.min(candidates.len())..range.end.min(candidates.len());
    let len = range.len();
    if len == 0 {
        return None;
    }
    let start = below(len);
    let mut best: Option<(usize, usize)> = None;
    for step in 0..len {
        let index = range.start + (start + step) % len;
        let load = candidates[index].load();
        if best.is_none_or(|(_, min)| load < min) {
            best = Some((index, load));
        }
    }
    best.map(|(index, _)| index)
}

/// The least loaded of all candidates (ties broken at random).
pub(crate) fn least_loaded(candidates: &[Arc<Worker>]) -> Option<usize> {
    least_loaded_in(candidates, 0..candidates.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seed_this_thread;
    use crate::routing::test_support::{load, workers};

    #[test]
    fn picks_the_minimum_and_spreads_ties() {
        seed_this_thread(3);
        let ws = workers(4);
        let _busy = [load(&ws[0], 2), load(&ws[1], 1), load(&ws[3], 1)];
        assert_eq!(least_loaded(&ws), Some(2));
        assert_eq!(least_loaded_in(&ws, 0..2), Some(1));
        assert_eq!(least_loaded_in(&ws, 4..9), None);
        assert_eq!(least_loaded(&[]), None);

        let idle = workers(4);
        let mut seen = [false; 4];
        for _ in 0..200 {
            if let Some(i) = least_loaded(&idle) {
                seen[i] = true;
            }
        }
        assert_eq!(seen, [true; 4], "idle ties spread over every worker");
    }
}
