//! One cache's two layers and the counters they report to.
//!
//! L0 maps a whole prompt to its ids. L1 keeps prompts with the places they may be cut at
//! (their [`Mark`]s) and maps the hash of each cut-off prefix to its prompt and place, so a
//! new prompt that starts like a kept one finds the longest shared prefix with one hash
//! probe per place. A later turn of a conversation holds every place of the earlier one,
//! so its entry takes over their keys and the earlier entry, no longer reachable, is
//! dropped at once; memory stays about one copy per conversation.
//!
//! Keys are SipHash values with a per-process random key (so clients cannot aim at
//! collisions), and a hit is only taken after comparing the stored text byte for byte:
//! what is answered is always exactly what the tokenizer would answer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use super::clock::Clock;

/// Bookkeeping bytes charged per entry besides its text and ids (boxes, slot, map slot).
const ENTRY_OVERHEAD: usize = 96;
/// Bytes charged per L1 place (the mark and its map slot).
const MARK_BYTES: usize = std::mem::size_of::<Mark>() + 32;
/// Most L1 entries one cache holds, whatever their size.
const L1_MAX_ENTRIES: usize = 1 << 16;

/// The bounds of one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub l0_entries: usize,
    pub l0_bytes: usize,
    pub l1_bytes: usize,
}

impl Limits {
    pub fn l0(&self) -> bool {
        self.l0_entries > 0 && self.l0_bytes > 0
    }

    pub fn l1(&self) -> bool {
        self.l1_bytes > 0
    }
}

/// Which layer a count is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    L0 = 0,
    L1 = 1,
}

/// Lookups, evictions and reused bytes of every cache of the process, per layer: plain
/// atomics, summed by nobody (each cache adds to the same ones) and read at scrape time.
#[derive(Debug, Default)]
pub struct Counters {
    /// `[layer][hit]`: `[..][1]` hits, `[..][0]` misses.
    lookups: [[AtomicU64; 2]; 2],
    evictions: [AtomicU64; 2],
    reused_bytes: [AtomicU64; 2],
}

/// A snapshot of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub hits: [u64; 2],
    pub misses: [u64; 2],
    pub evictions: [u64; 2],
    pub reused_bytes: [u64; 2],
}

impl Counters {
    pub const fn new() -> Counters {
        Counters {
            lookups: [
                [const { AtomicU64::new(0) }; 2],
                [const { AtomicU64::new(0) }; 2],
            ],
            evictions: [const { AtomicU64::new(0) }; 2],
            reused_bytes: [const { AtomicU64::new(0) }; 2],
        }
    }

    pub fn hit(&self, layer: Layer, bytes: usize) {
        self.lookups[layer as usize][1].fetch_add(1, Ordering::Relaxed);
        self.reused_bytes[layer as usize].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn miss(&self, layer: Layer) {
        self.lookups[layer as usize][0].fetch_add(1, Ordering::Relaxed);
    }

    fn evicted(&self, layer: Layer) {
        self.evictions[layer as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        let read = |a: &[AtomicU64; 2]| a.each_ref().map(|n| n.load(Ordering::Relaxed));
        let [l0, l1] = self.lookups.each_ref().map(read);
        Counts {
            hits: [l0[1], l1[1]],
            misses: [l0[0], l1[0]],
            evictions: read(&self.evictions),
            reused_bytes: read(&self.reused_bytes),
        }
    }
}

/// A map keyed by values that are already keyed hashes: hashing them again buys nothing.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type ByHash<V> = HashMap<u64, V, BuildHasherDefault<Prehashed>>;

/// A place an L1 prompt may be cut at: its first `end` bytes encode to its first `count`
/// ids; `key` is the hash of those bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub end: usize,
    pub count: usize,
    pub key: u64,
}

struct Whole {
    key: u64,
    tokenizer: u64,
    add_special: bool,
    text: Box<str>,
    ids: Box<[u32]>,
}

struct Marked {
    tokenizer: u64,
    text: Box<str>,
    ids: Box<[u32]>,
    marks: Box<[Mark]>,
    /// Marks whose key still leads here; at 0 the entry is unreachable and dropped.
    live: usize,
}

/// A prefix of a new prompt found in L1: the ids of its first `end` bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Prefix {
    pub end: usize,
    pub ids: Vec<u32>,
}

/// One cache (a data-plane thread's, or the blocking pool's).
pub struct Cache {
    limits: Limits,
    counters: &'static Counters,
    wholes: Clock<Whole>,
    whole_keys: ByHash<usize>,
    marked: Clock<Marked>,
    /// Prefix key → (slot, mark index).
    mark_keys: ByHash<(usize, usize)>,
}

impl Cache {
    pub fn new(limits: Limits, counters: &'static Counters) -> Cache {
        Cache {
            limits,
            counters,
            wholes: Clock::default(),
            whole_keys: ByHash::default(),
            marked: Clock::default(),
            mark_keys: ByHash::default(),
        }
    }

    pub fn counters(&self) -> &'static Counters {
        self.counters
    }

    /// The ids of exactly `text` (L0), counted as a hit or a miss.
    pub fn whole(
        &mut self,
        key: u64,
        tokenizer: u64,
        add_special: bool,
        text: &str,
    ) -> Option<Vec<u32>> {
        let found = self.whole_keys.get(&key).copied().filter(|&slot| {
            self.wholes.get(slot).is_some_and(|w| {
                w.tokenizer == tokenizer && w.add_special == add_special && *w.text == *text
            })
        });
        let Some(slot) = found else {
            self.counters.miss(Layer::L0);
            return None;
        };
        self.wholes.touch(slot);
        self.counters.hit(Layer::L0, text.len());
        self.wholes.get(slot).map(|w| w.ids.to_vec())
    }

    /// The longest prefix of `text` kept in L1: `places` are the ends of the places `text`
    /// may be cut at, ascending, and `keys` their prefix keys. Not counted: the caller
    /// counts once it knows whether the prefix served.
    pub fn prefix(
        &mut self,
        tokenizer: u64,
        text: &str,
        places: &[usize],
        keys: &[u64],
    ) -> Option<Prefix> {
        for (&end, key) in places.iter().zip(keys).rev() {
            let Some(&(slot, mark)) = self.mark_keys.get(key) else {
                continue;
            };
            let Some(entry) = self.marked.get(slot) else {
                continue;
            };
            let Some(m) = entry.marks.get(mark) else {
                continue;
            };
            let same = entry.tokenizer == tokenizer
                && m.end == end
                && entry.text.as_bytes().get(..end) == text.as_bytes().get(..end);
            if !same {
                continue;
            }
            let ids = entry.ids.get(..m.count).map(<[u32]>::to_vec);
            self.marked.touch(slot);
            return ids.map(|ids| Prefix { end, ids });
        }
        None
    }

    /// Keeps `text`'s ids in L0 under `key`, unless it is bigger than the whole layer.
    pub fn keep_whole(
        &mut self,
        key: u64,
        tokenizer: u64,
        add_special: bool,
        text: &str,
        ids: &[u32],
    ) {
        let bytes = text.len() + 4 * ids.len() + ENTRY_OVERHEAD;
        if !self.limits.l0() || bytes > self.limits.l0_bytes {
            return;
        }
        if let Some(old) = self.whole_keys.remove(&key) {
            self.wholes.remove(old);
        }
        while self.wholes.len() >= self.limits.l0_entries
            || self.wholes.bytes() + bytes > self.limits.l0_bytes
        {
            let Some(victim) = self.wholes.victim() else {
                break;
            };
            if let Some(gone) = self.wholes.remove(victim) {
                self.whole_keys.remove(&gone.key);
                self.counters.evicted(Layer::L0);
            }
        }
        let slot = self.wholes.insert(
            Whole {
                key,
                tokenizer,
                add_special,
                text: Box::from(text),
                ids: Box::from(ids),
            },
            bytes,
        );
        self.whole_keys.insert(key, slot);
    }

    /// Keeps `text`, its ids and the places it may be cut at in L1 (nothing without
    /// places, or bigger than the whole layer). Earlier entries whose every place this
    /// one also has are dropped.
    pub fn keep_marked(&mut self, tokenizer: u64, text: &str, ids: &[u32], marks: Vec<Mark>) {
        let bytes = text.len() + 4 * ids.len() + MARK_BYTES * marks.len() + ENTRY_OVERHEAD;
        if !self.limits.l1() || marks.is_empty() || bytes > self.limits.l1_bytes {
            return;
        }
        while self.marked.len() >= L1_MAX_ENTRIES
            || self.marked.bytes() + bytes > self.limits.l1_bytes
        {
            let Some(victim) = self.marked.victim() else {
                break;
            };
            if self.drop_marked(victim) {
                self.counters.evicted(Layer::L1);
            }
        }
        let keys: Vec<u64> = marks.iter().map(|m| m.key).collect();
        let slot = self.marked.insert(
            Marked {
                tokenizer,
                text: Box::from(text),
                ids: Box::from(ids),
                marks: marks.into_boxed_slice(),
                live: keys.len(),
            },
            bytes,
        );
        for (index, key) in keys.into_iter().enumerate() {
            let Some((old, _)) = self.mark_keys.insert(key, (slot, index)) else {
                continue;
            };
            let orphaned = self.marked.get_mut(old).is_some_and(|entry| {
                entry.live = entry.live.saturating_sub(1);
                entry.live == 0
            });
            if orphaned && old != slot {
                self.marked.remove(old);
            }
        }
    }

    /// Removes an L1 entry and the keys that still lead to it.
    fn drop_marked(&mut self, slot: usize) -> bool {
        let Some(entry) = self.marked.remove(slot) else {
            return false;
        };
        for (index, mark) in entry.marks.iter().enumerate() {
            if self.mark_keys.get(&mark.key) == Some(&(slot, index)) {
                self.mark_keys.remove(&mark.key);
            }
        }
        true
    }

    /// Entries and accounted bytes of (L0, L1), for tests.
    #[cfg(test)]
    pub fn sizes(&self) -> ((usize, usize), (usize, usize)) {
        (
            (self.wholes.len(), self.wholes.bytes()),
            (self.marked.len(), self.marked.bytes()),
        )
    }
}
