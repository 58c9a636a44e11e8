//! Random: a uniformly random candidate, from a per-thread generator (no shared state).

use std::cell::Cell;
use std::sync::Arc;

use super::{Needs, Policy, RequestFacts, Selection};
use crate::workers::Worker;

#[derive(Debug, Default, Clone, Copy)]
pub struct Random;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    // Distinct per thread and per process; quality needs are modest (load spreading).
    let addr = &STATE as *const _ as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (addr ^ nanos.rotate_left(17)) | 1
}

/// xorshift64* on a per-thread state: a few instructions, good enough to spread load (and
/// retry jitter) evenly, and never contended.
pub fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A uniform-enough index below `n` (`n` > 0); the modulo bias is negligible for fleet sizes.
pub(crate) fn below(n: usize) -> usize {
    (next_u64() % n.max(1) as u64) as usize
}

/// Makes this thread's sequence repeatable, so policy tests are deterministic.
#[cfg(test)]
pub(crate) fn seed_this_thread(seed: u64) {
    STATE.with(|s| s.set(seed | 1));
}

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
    use super::*;

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
