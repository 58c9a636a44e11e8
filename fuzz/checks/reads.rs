//! Splitting a fuzz input into reads, shared by the targets that check that a streaming
//! parser's result does not depend on how the stream arrives.

/// `stream` cut into reads of pseudo-random sizes (1..=64 bytes, sometimes the whole
/// rest), the sizes derived from `seed` so a crash input replays the same cuts.
pub fn random_reads(seed: u8, mut rest: &[u8]) -> Vec<&[u8]> {
    let mut reads = Vec::new();
    let mut state = u32::from(seed) | 0x100;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = match (state >> 16) % 67 {
            0 => rest.len(),
            n => usize::try_from(n).unwrap_or(1).min(rest.len()),
        };
        let (read, tail) = rest.split_at(size);
        reads.push(read);
        rest = tail;
    }
    reads
}
