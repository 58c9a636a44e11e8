//! bucket (for prefill): requests of similar length go to the same group of workers, so a
//! long prompt does not queue behind short ones and batches stay uniform.
//!
//! `bucket_boundaries` (sorted, deduplicated) split request lengths into buckets: a length
//! up to the first boundary is bucket 0, up to the second bucket 1, …, beyond the last the
//! final bucket. The candidates are split by position into as many contiguous groups as
//! there are buckets (fewer when there are fewer candidates: buckets then share groups in
//! order), and the request goes to the least loaded worker of its bucket's group. The
//! length is the prompt text's in bytes, or the body length when no text was extracted.

use std::sync::Arc;

use super::load::least_loaded_in;
use super::{Needs, Policy, PolicyParams, RequestFacts, Selection};
use crate::fleet::Worker;

#[derive(Debug, Clone)]
pub struct Bucket {
    boundaries: Vec<usize>,
}

impl Bucket {
    pub fn new(params: &PolicyParams) -> Bucket {
        let mut boundaries = params.bucket_boundaries.clone();
        boundaries.sort_unstable();
        boundaries.dedup();
        Bucket { boundaries }
    }

    /// Indices of the group that serves requests of `len` among `n` candidates.
    fn group(&self, len: usize, n: usize) -> std::ops::Range<usize> {
        let buckets = self.boundaries.len() + 1;
        let bucket = self.boundaries.partition_point(|&b| b < len);
        let groups = buckets.min(n);
        let group = bucket * groups / buckets;
        group * n / groups.max(1)..(group + 1) * n / groups.max(1)
    }
}

impl Policy for Bucket {
    fn name(&self) -> &'static str {
        "bucket"
    }

    fn needs(&self) -> Needs {
        Needs::PromptText
    }

    fn decide(&self, candidates: &[Arc<Worker>], facts: &RequestFacts<'_>) -> Selection {
        let len = facts.text.map_or(facts.body_len, str::len);
        let range = self.group(len, candidates.len());
        Selection::plain(least_loaded_in(candidates, range))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::{load, workers};

    fn bucket() -> Bucket {
        Bucket::new(&PolicyParams::default())
    }

    #[test]
    fn lengths_pick_their_group() {
        let b = bucket();
        // 8 workers, 4 buckets: groups of two.
        assert_eq!(b.group(0, 8), 0..2);
        assert_eq!(b.group(1024, 8), 0..2);
        assert_eq!(b.group(1025, 8), 2..4);
        assert_eq!(b.group(16384, 8), 4..6);
        assert_eq!(b.group(1 << 30, 8), 6..8);
        // Fewer workers than buckets: neighbouring buckets share.
        assert_eq!(b.group(0, 2), 0..1);
        assert_eq!(b.group(4096, 2), 0..1);
        assert_eq!(b.group(5000, 2), 1..2);
        assert_eq!(b.group(1 << 30, 1), 0..1);
        assert_eq!(b.group(5, 0), 0..0);
    }

    #[test]
    fn least_loaded_within_the_group() {
        let b = bucket();
        let ws = workers(8);
        let _busy = load(&ws[6], 2);
        let long = "x".repeat(20_000);
        let facts = RequestFacts {
            text: Some(&long),
            ..RequestFacts::default()
        };
        assert_eq!(b.decide(&ws, &facts).index, Some(7));
        let facts = RequestFacts {
            body_len: 2000,
            ..RequestFacts::default()
        };
        assert!(b
            .decide(&ws, &facts)
            .index
            .is_some_and(|i| (2..4).contains(&i)));
        assert_eq!(b.decide(&[], &facts).index, None);
    }

    #[test]
    fn unsorted_or_empty_boundaries_are_fine() {
        let params = PolicyParams {
            bucket_boundaries: vec![],
            ..PolicyParams::default()
        };
        assert_eq!(Bucket::new(&params).group(99, 4), 0..4);
        let params = PolicyParams {
            bucket_boundaries: vec![100, 10, 100],
            ..PolicyParams::default()
        };
        let b = Bucket::new(&params);
        assert_eq!(b.group(50, 3), 1..2);
    }
}
