//! Tenant numbering for the cache trees: worker URL ⇄ small [`TenantId`], and a per
//! candidate-set index from tenant to candidate position.
//!
//! Trees store `u32` ids rather than `Arc<str>` URLs so marks are small and touching them
//! causes no reference-count traffic between threads. The table's `RwLock` is taken only
//! when a candidate index is built (once per distinct candidate set) and by control-plane
//! calls, never per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::cache_tree::TenantId;
use crate::fleet::Worker;

#[derive(Debug, Default)]
struct Table {
    by_url: HashMap<Arc<str>, TenantId>,
    /// Next never-used id.
    next: u32,
    /// Ids of removed workers, not reusable until an eviction pass has stripped them
    /// (a selection that started before the removal may still insert under them).
    retired: Vec<TenantId>,
    free: Vec<TenantId>,
}

/// Worker URLs and their tenant ids, shared by every model tree of a policy.
#[derive(Debug, Default)]
pub(crate) struct TenantTable {
    table: RwLock<Table>,
    /// Bumped on every removal, so candidate indexes built before it are rebuilt.
    generation: AtomicU64,
    live: AtomicUsize,
}

impl TenantTable {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Tenants currently known (removed ones excluded).
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The id of `url`, assigned on first sight.
    pub(crate) fn intern(&self, url: &str) -> TenantId {
        if let Some(&id) = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_url
            .get(url)
        {
            return id;
        }
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(&id) = table.by_url.get(url) {
            return id;
        }
        let id = match table.free.pop() {
            Some(id) => id,
            None => {
                let id = TenantId(table.next);
                table.next = table.next.saturating_add(1);
                id
            }
        };
        table.by_url.insert(url.into(), id);
        self.live.store(table.by_url.len(), Ordering::Relaxed);
        id
    }

    /// Forgets `url`; its id stays retired until [`TenantTable::take_retired`].
    pub(crate) fn retire(&self, url: &str) -> Option<TenantId> {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let id = table.by_url.remove(url)?;
        table.retired.push(id);
        self.live.store(table.by_url.len(), Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Some(id)
    }

    /// The retired ids, for an eviction pass to strip; pass them to
    /// [`TenantTable::release`] afterwards.
    pub(crate) fn take_retired(&self) -> Vec<TenantId> {
        std::mem::take(
            &mut self
                .table
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .retired,
        )
    }

    /// Makes stripped ids reusable.
    pub(crate) fn release(&self, ids: Vec<TenantId>) {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        table.free.extend(ids);
    }
}

const ABSENT: u32 = u32::MAX;

/// For one candidate set: tenant id → candidate position and back.
#[derive(Debug)]
pub(crate) struct CandidateIndex {
    /// Indexed by tenant id; `ABSENT` for tenants that are not candidates.
    position: Vec<u32>,
    /// Indexed by candidate position.
    tenant: Vec<TenantId>,
}

impl CandidateIndex {
    pub(crate) fn build(table: &TenantTable, candidates: &[Arc<Worker>]) -> CandidateIndex {
        let tenant: Vec<TenantId> = candidates.iter().map(|w| table.intern(&w.url)).collect();
        let size = tenant.iter().map(|t| t.0 as usize + 1).max().unwrap_or(0);
        let mut position = vec![ABSENT; size];
        for (at, t) in tenant.iter().enumerate() {
            position[t.0 as usize] = u32::try_from(at).unwrap_or(ABSENT);
        }
        CandidateIndex { position, tenant }
    }

    /// The candidate position of a tenant, if it is a candidate.
    pub(crate) fn position(&self, tenant: TenantId) -> Option<usize> {
        match self.position.get(tenant.0 as usize) {
            Some(&at) if at != ABSENT => Some(at as usize),
            _ => None,
        }
    }

    pub(crate) fn tenant(&self, position: usize) -> Option<TenantId> {
        self.tenant.get(position).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::workers;

    #[test]
    fn ids_are_stable_and_reused_only_after_release() {
        let table = TenantTable::default();
        let a = table.intern("http://a");
        let b = table.intern("http://b");
        assert_ne!(a, b);
        assert_eq!(table.intern("http://a"), a);
        assert_eq!(table.live(), 2);
        let g = table.generation();
        assert_eq!(table.retire("http://a"), Some(a));
        assert_eq!(table.retire("http://a"), None);
        assert!(table.generation() > g);
        let c = table.intern("http://c");
        assert_ne!(c, a, "a retired id is not reused before a pass strips it");
        let retired = table.take_retired();
        assert_eq!(retired, [a]);
        table.release(retired);
        assert_eq!(table.intern("http://d"), a);
    }

    #[test]
    fn index_maps_both_ways() {
        let table = TenantTable::default();
        let ws = workers(3);
        table.intern("http://elsewhere");
        let index = CandidateIndex::build(&table, &ws[1..]);
        let t = index.tenant(1).unwrap();
        assert_eq!(index.position(t), Some(1));
        assert_eq!(index.position(TenantId(0)), None);
        assert_eq!(index.position(TenantId(999)), None);
        assert_eq!(index.tenant(2), None);
    }
}
