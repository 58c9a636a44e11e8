//! Per-worker measurements, merged at the end: HDR histograms of latency, time to first
//! token and inter-token latency (microseconds, 3 significant digits), counts of
//! outcomes, and prompt/cached token sums from usage blocks.
//!
//! Each worker owns its `Stats`, so recording takes no lock; `merge` adds them up.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Highest recordable value: one hour in microseconds (values above saturate).
const MAX_MICROS: u64 = 3_600_000_000;

/// Why a request failed without an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    Connect,
    Timeout,
    /// The connection broke while sending or receiving.
    Io,
    /// The response body passed `--max-body`.
    BodyTooLarge,
    /// The stream had an SSE frame larger than `--max-frame`.
    FrameTooLarge,
    /// A 2xx stream ended without a token or without the end of its last frame.
    Truncated,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Timeout => "timeout",
            Failure::Io => "io",
            Failure::BodyTooLarge => "body_too_large",
            Failure::FrameTooLarge => "frame_too_large",
            Failure::Truncated => "truncated_stream",
        }
    }
}

pub struct Stats {
    pub latency: Histogram<u64>,
    pub ttft: Histogram<u64>,
    pub itl: Histogram<u64>,
    pub ok: u64,
    pub tokens: u64,
    pub by_status: BTreeMap<u16, u64>,
    /// Error `code` of the gateway's JSON error envelope, `-` when the body has none.
    pub by_code: BTreeMap<String, u64>,
    pub failures: BTreeMap<Failure, u64>,
    /// Open loop: requests due before the end that were never sent (the drain ran out).
    pub missed: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

fn histogram() -> Histogram<u64> {
    // Constant bounds within hdrhistogram's limits: this cannot fail on any input.
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("constant histogram bounds are valid")
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency: histogram(),
            ttft: histogram(),
            itl: histogram(),
            ok: 0,
            tokens: 0,
            by_status: BTreeMap::new(),
            by_code: BTreeMap::new(),
            failures: BTreeMap::new(),
            missed: 0,
            prompt_tokens: 0,
            cached_tokens: 0,
        }
    }
}

/// Records `d` in whole microseconds, saturating at the histogram's bound.
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    h.saturating_record(micros.clamp(1, MAX_MICROS));
}

impl Stats {
    pub fn fail(&mut self, failure: Failure) {
        *self.failures.entry(failure).or_default() += 1;
    }

    pub fn status_error(&mut self, status: u16, code: String) {
        *self.by_status.entry(status).or_default() += 1;
        *self.by_code.entry(code).or_default() += 1;
    }

    pub fn errors(&self) -> u64 {
        self.by_status.values().sum::<u64>() + self.failures.values().sum::<u64>()
    }

    pub fn merge(&mut self, other: Stats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.ttft.add(&other.ttft);
        let _ = self.itl.add(&other.itl);
        self.ok += other.ok;
        self.tokens += other.tokens;
        for (k, v) in other.by_status {
            *self.by_status.entry(k).or_default() += v;
        }
        for (k, v) in other.by_code {
            *self.by_code.entry(k).or_default() += v;
        }
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
        self.missed += other.missed;
        self.prompt_tokens += other.prompt_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// The `code` of `{"error":{"code":...}}` (string or number), `-` when absent.
pub fn error_code(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return "-".into();
    };
    match value.pointer("/error/code") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => "-".into(),
    }
}

/// (prompt tokens, cached prompt tokens) from a response's usage block, in the shapes
/// of OpenAI chat/completions, Responses, Anthropic messages and SGLang `/generate`.
pub fn usage(body: &[u8]) -> (u64, u64) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (0, 0);
    };
    let n = |path: &str| v.pointer(path).and_then(|x| x.as_u64());
    if let Some(prompt) = n("/usage/prompt_tokens") {
        return (
            prompt,
            n("/usage/prompt_tokens_details/cached_tokens").unwrap_or(0),
        );
    }
    if let Some(cached) = n("/usage/cache_read_input_tokens") {
        // Anthropic counts cached tokens outside `input_tokens`.
        return (n("/usage/input_tokens").unwrap_or(0) + cached, cached);
    }
    if let Some(input) = n("/usage/input_tokens") {
        return (
            input,
            n("/usage/input_tokens_details/cached_tokens").unwrap_or(0),
        );
    }
    (
        n("/meta_info/prompt_tokens").unwrap_or(0),
        n("/meta_info/cached_tokens").unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        assert_eq!(
            error_code(br#"{"error":{"message":"m","type":"t","code":"no_workers"}}"#),
            "no_workers"
        );
        assert_eq!(error_code(br#"{"error":{"code":429}}"#), "429");
        assert_eq!(error_code(b"<html>"), "-");
    }

    #[test]
    fn usage_shapes() {
        assert_eq!(
            usage(br#"{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#),
            (10, 4)
        );
        assert_eq!(
            usage(br#"{"usage":{"input_tokens":6,"cache_read_input_tokens":4}}"#),
            (10, 4)
        );
        assert_eq!(
            usage(br#"{"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4}}}"#),
            (10, 4)
        );
        assert_eq!(
            usage(br#"{"meta_info":{"prompt_tokens":10,"cached_tokens":4}}"#),
            (10, 4)
        );
    }

    #[test]
    fn merge_adds() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        record(&mut a.latency, Duration::from_millis(1));
        record(&mut b.latency, Duration::from_millis(3));
        b.status_error(503, "x".into());
        b.fail(Failure::Timeout);
        a.merge(b);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.errors(), 2);
    }
}
