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

    // Reads of pseudo-random sizes derived from the seed.
    let mut framing = H1Framing::new();
    let mut verdict = framing.feed(&[]);
    for read in super::reads::random_reads(seed, stream) {
        let next = framing.feed(read);
        if verdict != Verdict::Continue {
            assert_eq!(next, verdict, "verdicts are sticky");
        }
        verdict = next;
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
