//! A provider's Responses answer read as deltas
//! (`api::responses::provider::events`) on arbitrary bytes. Checks: no
//! panic; the stream reads the same whether it arrives whole, in two pieces or byte by
//! byte (text, reasoning, calls and how it ended); a whole answer's JSON reads without
//! panic and gives each call's start before its arguments.

use tollgate::api::responses::provider::events::{whole, Reading};
use tollgate::generation::delta::CallDelta;

/// What a reading made of the stream: text, reasoning, the calls' pieces, and the end.
#[derive(Debug, Default, PartialEq)]
struct Read {
    text: String,
    reasoning: String,
    calls: Vec<CallDelta>,
    end: Option<(Option<String>, Option<String>, u32, u32)>,
    failed: bool,
}

fn read<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Read {
    let mut reading = Reading::default();
    let mut out = Read::default();
    for chunk in chunks {
        if reading.feed(chunk).is_err() {
            out.failed = true;
            break;
        }
        out.text.push_str(&reading.delta.text);
        out.reasoning.push_str(&reading.delta.reasoning);
        out.calls.append(&mut reading.delta.calls);
        reading.delta.clear();
        if out.end.is_none() {
            out.end = reading.take_end().map(|end| {
                (
                    end.finish.map(|f| format!("{f:?}")),
                    end.error.map(|e| e.to_string()),
                    end.usage.prompt_tokens,
                    end.usage.completion_tokens,
                )
            });
        }
    }
    out
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let once = read(std::iter::once(data));
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let twice = read([a, b].into_iter());
    if !once.failed && !twice.failed {
        assert_eq!(once, twice, "two pieces read differently");
    }
    if data.len() <= 4096 {
        let bytes = read(data.chunks(1));
        if !once.failed && !bytes.failed {
            assert_eq!(once, bytes, "byte by byte read differently");
        }
    }
    if let Ok(answer) = serde_json::from_slice(data) {
        let (delta, _) = whole(&answer);
        let mut started = Vec::new();
        for call in &delta.calls {
            match call {
                CallDelta::Start { index, .. } => started.push(*index),
                CallDelta::Arguments { index, .. } => {
                    assert!(started.contains(index), "arguments before their start")
                }
            }
        }
    }
}
