//! A small deterministic 64-bit hash.
//!
//! Ring positions must agree between gateway replicas and across restarts, so the hash is
//! fixed here rather than `std`'s (unspecified across releases) or a randomly seeded one.

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// Final avalanche so that nearby inputs land far apart on the ring.
pub(crate) fn mix(mut h: u64) -> u64 {
    h ^= h >> 32;
    h = h.wrapping_mul(K2);
    h ^= h >> 29;
    h = h.wrapping_mul(K1);
    h ^ (h >> 32)
}

/// Hashes `bytes` eight at a time; stable across processes, versions and platforms.
pub(crate) fn hash64(bytes: &[u8]) -> u64 {
    let mut h = K1 ^ (bytes.len() as u64).wrapping_mul(K2);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(K1)
            .rotate_left(29);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(K2)
            .rotate_left(29);
    }
    mix(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_spreads() {
        assert_eq!(hash64(b"worker-a#0"), hash64(b"worker-a#0"));
        assert_ne!(hash64(b"worker-a#0"), hash64(b"worker-a#1"));
        assert_ne!(hash64(b""), hash64(b"\0"));
        // Pinned so an accidental change (which would move every ring point) fails here.
        assert_eq!(hash64(b"tollgate"), 0xE7F8_3EFA_C3CC_6447);
        let high = (0..1000u32)
            .filter(|i| hash64(&i.to_le_bytes()) >> 63 == 1)
            .count();
        assert!((400..600).contains(&high), "{high}");
    }
}
