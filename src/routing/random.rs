//! Random: a uniformly random candidate, from a per-thread generator (no shared state).

use std::sync::Arc;

use super::{Needs, Policy, RequestFacts, Selection};
use crate::fleet::Worker;
use crate::rng::below;

#[derive(Debug, Default, Clone, Copy)]
pub struct Random;

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn needs(&self) -> Needs {
        Needs::Nothing
    }

    fn decide(&self, candidates: &[Arc<Worker>], _facts: &RequestFacts<'_>) -> Selection {
        Selection::plain((!candidates.is_empty()).then(|| below(candidates.len())))
    }
}

#[cfg(test)]
mod tests {
    use crate::rng::{next_u64, seed_this_thread};

    #[test]
    fn spreads_roughly_evenly() {
        seed_this_thread(7);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[(next_u64() % 4) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
