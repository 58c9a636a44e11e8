//! A consistent-hash ring over candidates with virtual nodes.
//!
//! Points derive from each worker's URL only, so every gateway replica (and a restarted
//! one) places a worker at the same points, and adding or removing one worker moves only
//! the keys that land next to its points.

use std::sync::Arc;

use super::hash::{hash64, mix};
use crate::fleet::Worker;

/// Upper bound on points per worker, so a huge flag value cannot make rings enormous.
const MAX_VIRTUAL_NODES: usize = 4096;

pub(crate) struct Ring {
    /// (position, candidate index), sorted by position.
    points: Vec<(u64, u32)>,
}

impl Ring {
    pub(crate) fn new(candidates: &[Arc<Worker>], virtual_nodes: usize) -> Ring {
        let per_worker = virtual_nodes.clamp(1, MAX_VIRTUAL_NODES);
        let mut points = Vec::with_capacity(candidates.len().saturating_mul(per_worker));
        for (index, worker) in candidates.iter().enumerate() {
            let base = hash64(worker.url.as_bytes());
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            for replica in 0..per_worker as u64 {
                points.push((mix(base ^ mix(replica + 1)), index));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// Candidate indices clockwise from the first point at or after `key`, one per point,
    /// wrapping once around the ring.
    pub(crate) fn walk(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.points.partition_point(|&(pos, _)| pos < key);
        let (tail, head) = self.points.split_at(start.min(self.points.len()));
        head.iter().chain(tail).map(|&(_, index)| index as usize)
    }

    /// The candidate that owns `key`.
    pub(crate) fn owner(&self, key: u64) -> Option<usize> {
        self.walk(key).next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::workers;

    #[test]
    fn spreads_keys_and_moves_few_when_a_worker_leaves() {
        let ws = workers(8);
        let ring = Ring::new(&ws, 160);
        let mut counts = [0usize; 8];
        let owners: Vec<usize> = (0..8000u64)
            .map(|k| ring.owner(mix(k)).unwrap_or(usize::MAX))
            .collect();
        for &o in &owners {
            counts[o] += 1;
        }
        for c in counts {
            assert!((600..1400).contains(&c), "{counts:?}");
        }
        // Drop worker 3: only its keys move; the others keep their owner (by URL).
        let rest: Vec<_> = ws.iter().enumerate().filter(|(i, _)| *i != 3).collect();
        let smaller: Vec<_> = rest.iter().map(|(_, w)| (*w).clone()).collect();
        let ring2 = Ring::new(&smaller, 160);
        for (k, &before) in owners.iter().enumerate() {
            let after = ring2.owner(mix(k as u64)).map(|i| rest[i].0);
            if before != 3 {
                assert_eq!(after, Some(before));
            }
        }
        assert_eq!(Ring::new(&[], 160).owner(1), None);
        assert_eq!(ring.walk(0).count(), 8 * 160);
    }
}
