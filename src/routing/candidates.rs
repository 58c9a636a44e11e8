//! Per-candidate-set caches: structures derived from the candidate slice (hash rings, URL
//! indexes) are built once per distinct candidate set and read lock-free afterwards.
//!
//! The data plane hands policies a slice from the current fleet snapshot; the same slice
//! content recurs until the fleet changes. A fingerprint of the slice (each worker's id and
//! allocation, in order) keys the cache, so a rebuild happens only when membership, order
//! or a worker's description changes. Reads are an `arc_swap` load: no lock, no refcount
//! traffic on the shared value.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::hash::mix;
use crate::fleet::Worker;

/// Distinct candidate sets cached at once (one per model in a multi-model fleet, usually).
const SLOTS: usize = 8;

/// Identifies a candidate slice: a hash of its workers plus its length, which is compared
/// too so that even a hash collision cannot hand a value built for a longer slice to a
/// shorter one (positions stay in bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetKey {
    hash: u64,
    len: usize,
}

impl SetKey {
    /// The same set under another version of what the cached value also depends on.
    pub(crate) fn salted(self, salt: u64) -> SetKey {
        SetKey {
            hash: self.hash ^ mix(salt),
            len: self.len,
        }
    }
}

/// Fingerprint of a candidate slice. The id names the worker; the allocation address
/// changes whenever the registry publishes a new version of it (a PATCH or a replacement),
/// which may change its URL. This runs on every selection of the policies that cache, so
/// four independent lanes keep the multiply chain from bounding it.
pub(crate) fn fingerprint(candidates: &[Arc<Worker>]) -> SetKey {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [candidates.len() as u64, 1, 2, 3];
    for chunk in candidates.chunks(lanes.len()) {
        for (lane, worker) in lanes.iter_mut().zip(chunk) {
            let (hi, lo) = worker.id.as_u64_pair();
            let addr = Arc::as_ptr(worker) as usize as u64;
            *lane = (*lane ^ lo ^ addr).wrapping_mul(K).rotate_left(23) ^ hi;
        }
    }
    let hash = lanes
        .iter()
        .fold(0u64, |h, &lane| mix(h.rotate_left(17) ^ lane));
    SetKey {
        hash,
        len: candidates.len(),
    }
}

struct Keyed<T> {
    key: SetKey,
    value: T,
}

/// A small direct-mapped cache of values derived from candidate sets.
pub(crate) struct CandidateCache<T> {
    slots: [ArcSwapOption<Keyed<T>>; SLOTS],
}

impl<T> Default for CandidateCache<T> {
    fn default() -> Self {
        CandidateCache {
            slots: std::array::from_fn(|_| ArcSwapOption::empty()),
        }
    }
}

impl<T> CandidateCache<T> {
    /// Runs `read` on the value cached for `key`, building and publishing it first when
    /// absent. Concurrent first uses may each build; the last one published stays.
    pub(crate) fn with<R>(
        &self,
        key: SetKey,
        build: impl FnOnce() -> T,
        read: impl FnOnce(&T) -> R,
    ) -> R {
        let slot = &self.slots[(key.hash % SLOTS as u64) as usize];
        {
            let current = slot.load();
            if let Some(hit) = current.as_deref().filter(|hit| hit.key == key) {
                return read(&hit.value);
            }
        }
        let fresh = Arc::new(Keyed {
            key,
            value: build(),
        });
        slot.store(Some(fresh.clone()));
        read(&fresh.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::workers;

    #[test]
    fn builds_once_per_candidate_set() {
        let cache: CandidateCache<usize> = CandidateCache::default();
        let ws = workers(4);
        let mut builds = 0;
        for _ in 0..3 {
            let len = cache.with(
                fingerprint(&ws),
                || {
                    builds += 1;
                    ws.len()
                },
                |len| *len,
            );
            assert_eq!(len, 4);
        }
        assert_eq!(builds, 1);
        assert_ne!(fingerprint(&ws), fingerprint(&ws[..3]));
        let reversed: Vec<_> = ws.iter().rev().cloned().collect();
        assert_ne!(fingerprint(&ws), fingerprint(&reversed), "order matters");
    }
}
