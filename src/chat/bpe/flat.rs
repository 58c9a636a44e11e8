//! A read-only open-addressing table for the merge loop's two lookups (is this piece a
//! whole token, what does this pair merge to). Each slot holds its key and value inline,
//! so a lookup touches one cache line where a `HashMap` touches its control bytes and then
//! its bucket: with 150k–450k entries neither fits in cache, and the miss is most of what
//! a token costs.

/// A fixed-size key with one value that no real key takes (marks an empty slot).
pub trait Key: Copy + Eq {
    const EMPTY: Self;
    fn hash(self) -> u64;
}

/// Built once from its entries, never changed; at most three quarters full, so every
/// probe sequence reaches an empty slot.
pub struct Flat<K, V> {
    slots: Box<[(K, V)]>,
    /// Shift that turns a 64-bit hash into a slot index (its top bits).
    shift: u32,
}

impl<K: Key, V: Copy + Default> Flat<K, V> {
    /// A table of `entries`; a key given twice keeps its last value, as a map filled in
    /// order would (Hugging Face collects its merges so).
    pub fn new(entries: impl ExactSizeIterator<Item = (K, V)>) -> Flat<K, V> {
        let want = entries.len().saturating_mul(4) / 3 + 1;
        let size = want.next_power_of_two().max(2);
        let mut slots = vec![(K::EMPTY, V::default()); size].into_boxed_slice();
        let shift = 64 - size.trailing_zeros();
        let mask = size - 1;
        for (key, value) in entries {
            if key == K::EMPTY {
                continue;
            }
            let mut at = index(key, shift);
            while let Some(slot) = slots.get_mut(at) {
                if slot.0 == K::EMPTY {
                    *slot = (key, value);
                    break;
                }
                if slot.0 == key {
                    slot.1 = value;
                    break;
                }
                at = (at + 1) & mask;
            }
        }
        Flat { slots, shift }
    }

    #[inline]
    pub fn get(&self, key: K) -> Option<V> {
        let mask = self.slots.len() - 1;
        let mut at = index(key, self.shift);
        loop {
            let (found, value) = *self.slots.get(at)?;
            // Empty first, so that the marker itself is never found.
            if found == K::EMPTY {
                return None;
            }
            if found == key {
                return Some(value);
            }
            at = (at + 1) & mask;
        }
    }
}

#[inline]
fn index<K: Key>(key: K, shift: u32) -> usize {
    (key.hash() >> shift) as usize
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// A merge's pair of ids, `left << 32 | right`; no id is `u32::MAX`.
impl Key for u64 {
    const EMPTY: u64 = u64::MAX;

    #[inline]
    fn hash(self) -> u64 {
        (self ^ (self >> 29)).wrapping_mul(MULTIPLIER)
    }
}

/// Up to 15 bytes and their count ([`pack`]); the count is never 0, so `(0, 0)` is free.
impl Key for (u64, u64) {
    const EMPTY: (u64, u64) = (0, 0);

    #[inline]
    fn hash(self) -> u64 {
        (self.0.wrapping_mul(MULTIPLIER).rotate_left(29) ^ self.1).wrapping_mul(MULTIPLIER)
    }
}

/// 1 to 15 bytes and their count as two words: the bytes from the low end, the count in the
/// top byte (so `"a"` and `"a\0"` differ); `None` for the empty slice and longer ones.
///
/// Read with two (possibly overlapping) loads from the slice's ends instead of a copy into
/// a zeroed buffer: the copy's length is known only at run time, so it was a `memcpy`
/// call for every piece the encoder looks up.
#[inline]
pub fn pack(bytes: &[u8]) -> Option<(u64, u64)> {
    let len = bytes.len();
    let (lo, hi) = match len {
        1 => (u64::from(*bytes.first()?), 0),
        // The two loads overlap in the middle; the bytes there are the same in both.
        2..=3 => {
            let head = u16::from_le_bytes(*bytes.first_chunk::<2>()?);
            let tail = u16::from_le_bytes(*bytes.last_chunk::<2>()?);
            (u64::from(head) | u64::from(tail) << (8 * (len - 2)), 0)
        }
        4..=7 => {
            let head = u32::from_le_bytes(*bytes.first_chunk::<4>()?);
            let tail = u32::from_le_bytes(*bytes.last_chunk::<4>()?);
            (u64::from(head) | u64::from(tail) << (8 * (len - 4)), 0)
        }
        // Bytes 8 and on are the last eight shifted down past the ones `lo` already has
        // (none when there are exactly 8: the shift would be 64 bits, so `hi` is 0).
        8..=15 => {
            let head = u64::from_le_bytes(*bytes.first_chunk::<8>()?);
            let tail = u64::from_le_bytes(*bytes.last_chunk::<8>()?);
            (head, tail.checked_shr(8 * (16 - len) as u32).unwrap_or(0))
        }
        _ => return None,
    };
    Some((lo, hi | (len as u64) << 56))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_entry_and_nothing_else() {
        let entries: Vec<(u64, u32)> = (0..10_000u64).map(|k| (k * 7919, k as u32)).collect();
        let table = Flat::new(entries.iter().copied());
        for (key, value) in &entries {
            assert_eq!(table.get(*key), Some(*value));
        }
        for k in 0..10_000u64 {
            assert_eq!(table.get(k * 7919 + 1), None);
        }
        assert_eq!(table.get(u64::MAX), None, "the empty marker is no key");
    }

    #[test]
    fn last_value_of_a_repeated_key_wins_and_tiny_tables_work() {
        let table = Flat::new([(5u64, 1u32), (5, 2)].into_iter());
        assert_eq!(table.get(5), Some(2));
        let empty: Flat<u64, u32> = Flat::new(std::iter::empty());
        assert_eq!(empty.get(5), None);
    }

    /// The layout [`pack`] promises, written the plain way: the bytes in a zeroed
    /// 16-byte buffer, the count in its last byte.
    fn pack_by_copy(bytes: &[u8]) -> Option<(u64, u64)> {
        let len = u8::try_from(bytes.len())
            .ok()
            .filter(|n| (1..16).contains(n))?;
        let mut buf = [0u8; 16];
        buf[..bytes.len()].copy_from_slice(bytes);
        buf[15] = len;
        let (lo, hi) = buf.split_at(8);
        Some((
            u64::from_le_bytes(lo.try_into().ok()?),
            u64::from_le_bytes(hi.try_into().ok()?),
        ))
    }

    #[test]
    fn packing_by_loads_matches_packing_by_copy() {
        crate::rng::seed_this_thread(0x2545_f491_4f6c_dd1d);
        for _ in 0..2_000 {
            let bytes = crate::rng::next_u64().to_le_bytes();
            let more = crate::rng::next_u64().to_le_bytes();
            let all: Vec<u8> = bytes.iter().chain(&more).chain(&bytes).copied().collect();
            for len in 0..=all.len() {
                let piece = &all[..len];
                assert_eq!(pack(piece), pack_by_copy(piece), "{piece:?}");
            }
        }
        for len in 0..=17 {
            for fill in [0u8, 1, 0x7f, 0x80, 0xff] {
                let piece = vec![fill; len];
                assert_eq!(pack(&piece), pack_by_copy(&piece), "{piece:?}");
            }
        }
    }

    #[test]
    fn packed_keys_tell_lengths_and_bytes_apart() {
        assert_eq!(pack(b""), None);
        assert_eq!(pack(&[b'x'; 16]), None);
        assert!(pack(&[b'x'; 15]).is_some());
        assert_ne!(pack(b"a"), pack(b"a\0"));
        assert_ne!(pack(b"ab"), pack(b"ba"));
        let words: Vec<&[u8]> = vec![b"a", b"a\0", b"\0", b"hello", b" the", b"0123456789abcde"];
        let table = Flat::new(words.iter().enumerate().map(|(i, w)| {
            let key = pack(w).expect("short");
            (key, i as u32)
        }));
        for (i, w) in words.iter().enumerate() {
            assert_eq!(table.get(pack(w).expect("short")), Some(i as u32));
        }
        assert_eq!(table.get(pack(b"\0\0").expect("short")), None);
    }
}
