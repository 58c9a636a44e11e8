//! Arbitrary bytes as an engine's Prometheus page: the line parser, the load gauge reader
//! and the merge with a `worker_addr` label. Checks: no panic; every line of the merged
//! page parses again; every sample in it carries the added label exactly once, with the
//! value given; no `HELP` or `TYPE` line appears twice; the reported length is the page's.
//!
//! Input layout: the first byte splits the rest into two pages (two engines), so merging
//! across engines is exercised as well as within one.

use tollgate::control::load::from_metrics;
use tollgate::control::prom_text::{parse_line, Line, Merged};

const ADDRS: [&str; 2] = ["http://10.0.0.1:8000", "http://a\"b\\c\nd"];

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(*split).min(rest.len());
    let (first, second) = rest.split_at(at);
    let pages = [
        String::from_utf8_lossy(first),
        String::from_utf8_lossy(second),
    ];
    let mut merged = Merged::new();
    for (page, addr) in pages.iter().zip(ADDRS) {
        for line in page.split('\n') {
            let _ = parse_line(line);
        }
        if let Some(ranks) = from_metrics(page) {
            assert!(!ranks.is_empty() && ranks.len() <= 1024);
            for rank in &ranks {
                assert!((0.0..=1.0).contains(&rank.token_usage));
                assert!((0.0..=1.0).contains(&rank.cache_hit_rate));
                assert_eq!(
                    rank.num_total_reqs,
                    rank.num_running_reqs.saturating_add(rank.num_waiting_reqs)
                );
            }
        }
        merged.add(page, "worker_addr", addr);
    }
    let len = merged.len();
    let text = merged.finish();
    assert_eq!(text.len(), len);
    let mut meta = std::collections::HashSet::new();
    for line in text.lines() {
        match parse_line(line) {
            Some(Line::Sample(sample)) => {
                let labels: Vec<_> = sample
                    .labels
                    .iter()
                    .filter(|(name, _)| *name == "worker_addr")
                    .collect();
                assert_eq!(labels.len(), 1, "{line}");
                let value = sample.label("worker_addr").unwrap_or_default();
                assert!(ADDRS.contains(&value.as_ref()), "{line}");
            }
            Some(Line::Help { family }) => assert!(meta.insert(("help", family)), "{line}"),
            Some(Line::Type { family }) => assert!(meta.insert(("type", family)), "{line}"),
            Some(Line::Other) => panic!("merged page holds a stray line {line:?}"),
            None => panic!("merged page holds a malformed line {line:?}"),
        }
    }
}
