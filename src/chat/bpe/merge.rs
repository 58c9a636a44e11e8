//! Byte-level BPE over one pre-tokenized piece: a whole-piece vocabulary lookup when that is
//! provably the answer, else Hugging Face's merge order (the lowest-rank adjacent pair first,
//! the leftmost on a tie) with a quadratic scan for short pieces and a heap for long ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::flat::{pack, Flat};
use crate::fxhash::FxMap;

/// Pieces up to this many bytes merge with the array scan; longer ones with the heap.
const SHORT: usize = 64;

/// No merge for this pair.
const NONE: u64 = u64::MAX;

/// The vocabulary entries a piece can be answered from with one lookup (those whose own
/// bytes merge to exactly their id, or every entry under `ignore_merges`), keyed by their
/// bytes: up to 15 bytes packed into two words in a [`Flat`] table (nearly every token of
/// real text), longer ones as byte strings.
struct Wholes {
    short: Flat<(u64, u64), u32>,
    long: FxMap<Box<[u8]>, u32>,
}

impl Wholes {
    fn new(entries: Vec<(Box<[u8]>, u32)>) -> Wholes {
        let mut short = Vec::with_capacity(entries.len());
        let mut long = FxMap::default();
        for (bytes, id) in entries {
            match pack(&bytes) {
                Some(key) => short.push((key, id)),
                None => {
                    long.insert(bytes, id);
                }
            }
        }
        Wholes {
            short: Flat::new(short.into_iter()),
            long,
        }
    }

    #[inline]
    fn get(&self, piece: &[u8]) -> Option<u32> {
        match pack(piece) {
            Some(key) => self.short.get(key),
            None => self.long.get(piece).copied(),
        }
    }
}

/// The merge tables of one BPE model, keyed by raw bytes.
pub struct Model {
    wholes: Wholes,
    /// `(left << 32 | right)` → `(rank << 32 | merged id)`.
    merges: Flat<u64, u64>,
    /// The id of each single byte; `None`: not in the vocabulary, dropped.
    byte_ids: [Option<u32>; 256],
}

/// Buffers reused across the pieces of one call.
#[derive(Default)]
pub struct Scratch {
    ids: Vec<u32>,
    ranks: Vec<u64>,
    nodes: Vec<Node>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

#[derive(Clone, Copy)]
struct Node {
    id: u32,
    prev: u32,
    next: u32,
    alive: bool,
}

impl Model {
    /// A model from its raw-byte vocabulary, its merges as id triples in rank order and the
    /// id of each single byte.
    pub fn new(
        vocab: FxMap<Box<[u8]>, u32>,
        merges: &[(u32, u32, u32)],
        byte_ids: [Option<u32>; 256],
        ignore_merges: bool,
    ) -> Model {
        let table = Flat::new(
            merges
                .iter()
                .enumerate()
                .map(|(rank, (left, right, merged))| {
                    (
                        pair(*left, *right),
                        ((rank as u64) << 32) | u64::from(*merged),
                    )
                }),
        );
        let mut model = Model {
            wholes: Wholes::new(Vec::new()),
            merges: table,
            byte_ids,
        };
        let mut scratch = Scratch::default();
        let mut out = Vec::new();
        let mut wholes = Vec::with_capacity(vocab.len());
        for (bytes, id) in vocab {
            if !ignore_merges {
                out.clear();
                model.merge(&bytes, &mut out, &mut scratch);
                if out.as_slice() != [id] {
                    continue;
                }
            }
            wholes.push((bytes, id));
        }
        model.wholes = Wholes::new(wholes);
        model
    }

    /// Appends the ids of `piece` to `out`.
    pub fn encode(&self, piece: &[u8], out: &mut Vec<u32>, scratch: &mut Scratch) {
        match self.wholes.get(piece) {
            Some(id) => out.push(id),
            None => self.merge(piece, out, scratch),
        }
    }

    fn merge(&self, piece: &[u8], out: &mut Vec<u32>, scratch: &mut Scratch) {
        if piece.len() <= SHORT {
            self.merge_short(piece, out, scratch);
        } else {
            self.merge_long(piece, out, scratch);
        }
    }

    #[inline]
    fn lookup(&self, left: u32, right: u32) -> u64 {
        self.merges.get(pair(left, right)).unwrap_or(NONE)
    }

    fn merge_short(&self, piece: &[u8], out: &mut Vec<u32>, scratch: &mut Scratch) {
        let ids = &mut scratch.ids;
        let ranks = &mut scratch.ranks;
        ids.clear();
        ids.extend(piece.iter().filter_map(|b| self.byte_ids[usize::from(*b)]));
        ranks.clear();
        ranks.extend(ids.windows(2).map(|w| self.lookup(w[0], w[1])));
        loop {
            let mut best = NONE;
            let mut at = 0;
            for (k, rank) in ranks.iter().enumerate() {
                if *rank < best {
                    best = *rank;
                    at = k;
                }
            }
            if best == NONE || at + 1 >= ids.len() {
                break;
            }
            ids[at] = best as u32;
            ids.remove(at + 1);
            ranks.remove(at);
            if at > 0 {
                ranks[at - 1] = self.lookup(ids[at - 1], ids[at]);
            }
            if at + 1 < ids.len() {
                ranks[at] = self.lookup(ids[at], ids[at + 1]);
            }
        }
        out.extend_from_slice(ids);
    }

    fn merge_long(&self, piece: &[u8], out: &mut Vec<u32>, scratch: &mut Scratch) {
        let nodes = &mut scratch.nodes;
        let heap = &mut scratch.heap;
        nodes.clear();
        heap.clear();
        let ids = piece.iter().filter_map(|b| self.byte_ids[usize::from(*b)]);
        nodes.extend(ids.enumerate().map(|(k, id)| Node {
            id,
            prev: (k as u32).wrapping_sub(1),
            next: k as u32 + 1,
            alive: true,
        }));
        if let Some(last) = nodes.last_mut() {
            last.next = u32::MAX;
        }
        for (k, pair) in nodes.windows(2).enumerate() {
            let found = self.lookup(pair[0].id, pair[1].id);
            if found != NONE {
                heap.push(Reverse(((found >> 32) as u32, k as u32)));
            }
        }
        while let Some(Reverse((rank, pos))) = heap.pop() {
            let Some(node) = nodes.get(pos as usize).copied() else {
                continue;
            };
            if !node.alive {
                continue;
            }
            let Some(right) = nodes.get(node.next as usize).copied() else {
                continue;
            };
            let found = self.lookup(node.id, right.id);
            if found == NONE || (found >> 32) as u32 != rank {
                continue;
            }
            let merged = found as u32;
            if let Some(gone) = nodes.get_mut(node.next as usize) {
                gone.alive = false;
            }
            if let Some(after) = nodes.get_mut(right.next as usize) {
                after.prev = pos;
            }
            if let Some(here) = nodes.get_mut(pos as usize) {
                here.id = merged;
                here.next = right.next;
            }
            if let Some(before) = nodes.get(node.prev as usize) {
                let found = self.lookup(before.id, merged);
                if found != NONE {
                    heap.push(Reverse(((found >> 32) as u32, node.prev)));
                }
            }
            if let Some(after) = nodes.get(right.next as usize) {
                let found = self.lookup(merged, after.id);
                if found != NONE {
                    heap.push(Reverse(((found >> 32) as u32, pos)));
                }
            }
        }
        let mut k = 0u32;
        while let Some(node) = nodes.get(k as usize) {
            out.push(node.id);
            k = node.next;
        }
    }
}

#[inline]
fn pair(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}
