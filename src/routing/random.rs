//! Random: a uniformly random candidate, from a per-thread generator (no shared state).

use std::cell::Cell;
use std::sync::Arc;

use super::{Needs, Policy, RequestFacts};
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

/// xorshift64*: a few instructions, good enough to spread load evenly.
pub(crate) fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn needs(&self) -> Needs {
        Needs::Nothing
    }

    fn select(&self, candidates: &[Arc<Worker>], _facts: &RequestFacts<'_>) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        Some((next_u64() % candidates.len() as u64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_roughly_evenly() {
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[(next_u64() % 4) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
