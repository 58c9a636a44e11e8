//! The request-framing tracker never panics, and its verdict does not depend on how the
//! stream is split across reads: the first byte seeds the read sizes, the rest is the
//! client's byte stream.

use tollgate::server::h1_framing::{H1Framing, Verdict};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let whole = H1Framing::new().feed(stream);

    // Reads of pseudo-random sizes (1..=64 bytes, or the rest) derived from the seed.
    let mut framing = H1Framing::new();
    let mut verdict = framing.feed(&[]);
    let mut state = u32::from(seed) | 0x100;
    let mut rest = stream;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = match (state >> 16) % 67 {
            0 => rest.len(),
            n => usize::try_from(n).unwrap_or(1).min(rest.len()),
        };
        let (read, tail) = rest.split_at(size);
        let next = framing.feed(read);
        if verdict != Verdict::Continue {
            assert_eq!(next, verdict, "verdicts are sticky");
        }
        verdict = next;
        rest = tail;
    }
    assert_eq!(verdict, whole, "split reads");

    // One byte at a time.
    let mut framing = H1Framing::new();
    let mut verdict = Verdict::Continue;
    for byte in stream {
        verdict = framing.feed(std::slice::from_ref(byte));
    }
    assert_eq!(verdict, whole, "byte at a time");
}
