//! The SSE parser never panics, never hands out a frame larger than its limit, and yields
//! the same frames and verdict however the stream is split: the first byte picks the
//! frame limit and seeds the read sizes, the rest is the event stream.

use tollgate::sse::{SseError, SseParser};

/// Everything a parse produced: the frames as owned (event, data) pairs and the verdict.
type Outcome = (Vec<(Vec<u8>, Vec<u8>)>, Result<(), SseError>);

fn parse<'a>(limit: usize, reads: impl Iterator<Item = &'a [u8]>) -> Outcome {
    let mut parser = SseParser::new(limit);
    let mut frames = Vec::new();
    let mut verdict = Ok(());
    for read in reads {
        verdict = parser.feed(read, |frame| {
            assert!(frame.data.len() <= limit, "data within the limit");
            assert!(frame.event.len() <= limit, "event within the limit");
            frames.push((frame.event.to_vec(), frame.data.to_vec()));
        });
        if verdict.is_err() {
            break;
        }
    }
    (frames, verdict)
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    // Small limits so the fuzzer reaches the oversized-frame path often.
    let limit = usize::from(seed % 128) + 1;
    let whole = parse(limit, std::iter::once(stream));
    assert_eq!(
        parse(limit, super::reads::random_reads(seed, stream).into_iter()),
        whole,
        "split reads"
    );
    assert_eq!(parse(limit, stream.chunks(1)), whole, "byte at a time");
    let empty_reads = stream.chunks(7).flat_map(|c| [c, &c[..0]]);
    assert_eq!(parse(limit, empty_reads), whole, "empty reads in between");
}
