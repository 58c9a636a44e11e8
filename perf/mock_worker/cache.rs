//! Simulated prefix (KV) cache.
//!
//! Real engines reuse the KV cache of a previously seen prompt prefix; a
//! cache-aware gateway is judged by how often it sends a prompt to the
//! worker that already holds its prefix. The mock keeps a bounded LRU of
//! hashes of prompt prefixes at 64-byte granularity, reports the cached
//! part of each prompt as `cached_tokens`, and tracks the overall hit
//! ratio for `/v1/loads` and `/metrics`.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::Hasher;

/// Prefix granularity in bytes (a stand-in for a KV-cache page).
pub const BLOCK_BYTES: usize = 64;

/// Default number of prefix entries kept.
pub const DEFAULT_CAPACITY: usize = 4096;

const NIL: usize = usize::MAX;

/// Hashes of the first 64, 128, 192, … bytes of `text` (whole blocks only).
/// Computed incrementally, so the cost is linear in the prompt length, and
/// outside the cache lock.
pub fn prefix_hashes(text: &[u8]) -> Vec<u64> {
    let mut hasher = DefaultHasher::new();
    text.chunks_exact(BLOCK_BYTES)
        .map(|block| {
            hasher.write(block);
            hasher.finish()
        })
        .collect()
}

struct Node {
    key: u64,
    prev: usize,
    next: usize,
}

/// LRU set of prefix hashes: a hash map into an index-linked list, so
/// lookups, touches and evictions are O(1) without unsafe code.
pub struct PrefixCache {
    capacity: usize,
    index: HashMap<u64, usize>,
    nodes: Vec<Node>,
    /// Most recently used.
    head: usize,
    /// Least recently used, evicted first.
    tail: usize,
    cached_bytes: u64,
    prompt_bytes: u64,
}

impl PrefixCache {
    pub fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity,
            index: HashMap::with_capacity(capacity),
            nodes: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
            cached_bytes: 0,
            prompt_bytes: 0,
        }
    }

    /// Records one prompt: returns how many of its leading bytes were
    /// already cached (the longest cached prefix), then caches all of its
    /// prefixes. `hashes` come from [`prefix_hashes`] of the same prompt.
    pub fn observe(&mut self, hashes: &[u64], prompt_len: usize) -> usize {
        let hit_blocks = hashes
            .iter()
            .rposition(|h| self.index.contains_key(h))
            .map_or(0, |i| i + 1);
        for &h in hashes {
            self.touch(h);
        }
        let cached = hit_blocks * BLOCK_BYTES;
        self.cached_bytes += cached as u64;
        self.prompt_bytes += prompt_len as u64;
        cached
    }

    /// Cached prompt bytes over all prompt bytes seen so far.
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_bytes == 0 {
            0.0
        } else {
            self.cached_bytes as f64 / self.prompt_bytes as f64
        }
    }

    /// Drops every entry (`/flush_cache`); the hit statistics are kept,
    /// like an engine's cumulative counters.
    pub fn clear(&mut self) {
        self.index.clear();
        self.nodes.clear();
        self.head = NIL;
        self.tail = NIL;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn touch(&mut self, key: u64) {
        if self.capacity == 0 {
            return;
        }
        let idx = if let Some(&idx) = self.index.get(&key) {
            self.unlink(idx);
            idx
        } else if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key,
                prev: NIL,
                next: NIL,
            });
            let idx = self.nodes.len() - 1;
            self.index.insert(key, idx);
            idx
        } else {
            let idx = self.tail;
            self.unlink(idx);
            let old = std::mem::replace(&mut self.nodes[idx].key, key);
            self.index.remove(&old);
            self.index.insert(key, idx);
            idx
        };
        self.push_front(idx);
    }

    fn unlink(&mut self, idx: usize) {
        let (prev, next) = (self.nodes[idx].prev, self.nodes[idx].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        self.nodes[idx].prev = NIL;
        self.nodes[idx].next = NIL;
    }

    fn push_front(&mut self, idx: usize) {
        self.nodes[idx].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = idx;
        }
        self.head = idx;
        if self.tail == NIL {
            self.tail = idx;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn hashes_cover_whole_blocks_only() {
        assert!(prefix_hashes(&[1; 63]).is_empty());
        assert_eq!(prefix_hashes(&[1; 64]).len(), 1);
        assert_eq!(prefix_hashes(&[1; 200]).len(), 3);
        // A prefix hash depends on the whole prefix, not just its last block.
        let a = prefix_hashes(&[[1u8; 64], [2u8; 64]].concat());
        let b = prefix_hashes(&[[3u8; 64], [2u8; 64]].concat());
        assert_ne!(a[1], b[1]);
        // Shared prefixes hash equally.
        let c = prefix_hashes(&[[1u8; 64], [9u8; 64]].concat());
        assert_eq!(a[0], c[0]);
        assert_ne!(a[1], c[1]);
    }

    #[test]
    fn longest_cached_prefix_counts() {
        let mut cache = PrefixCache::new(DEFAULT_CAPACITY);
        let first = prompt(0, 300);
        assert_eq!(cache.observe(&prefix_hashes(&first), first.len()), 0);
        // Same prompt again: all four whole blocks are cached.
        assert_eq!(cache.observe(&prefix_hashes(&first), first.len()), 256);
        // Shares the first 130 bytes: two blocks hit.
        let mut other = first[..130].to_vec();
        other.extend(prompt(77, 200));
        assert_eq!(cache.observe(&prefix_hashes(&other), other.len()), 128);
        let expected = (256.0 + 128.0) / (300.0 + 300.0 + 330.0);
        assert!((cache.hit_rate() - expected).abs() < 1e-9);
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut cache = PrefixCache::new(2);
        let a = prefix_hashes(&prompt(1, 64));
        let b = prefix_hashes(&prompt(2, 64));
        let c = prefix_hashes(&prompt(3, 64));
        cache.observe(&a, 64);
        cache.observe(&b, 64);
        assert_eq!(cache.observe(&a, 64), 64); // refreshes a
        cache.observe(&c, 64); // evicts b
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.observe(&a, 64), 64);
        assert_eq!(cache.observe(&b, 64), 0);
    }

    #[test]
    fn clear_and_zero_capacity() {
        let mut cache = PrefixCache::new(8);
        let a = prefix_hashes(&prompt(1, 128));
        cache.observe(&a, 128);
        cache.clear();
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.observe(&a, 128), 0);
        assert_eq!(cache.observe(&a, 128), 128);

        let mut none = PrefixCache::new(0);
        none.observe(&a, 128);
        assert_eq!(none.observe(&a, 128), 0);
        assert_eq!(none.hit_rate(), 0.0);
    }
}
