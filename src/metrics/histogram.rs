//! A histogram recorded without locks, sharded per data-plane thread.
//!
//! prometheus-client's own histogram takes a write lock on every observation; two of them
//! sit on every proxied request's path (HTTP and router duration), shared by all data-plane
//! threads. This one keeps one counter per bucket and the sum as `f64` bits, in one shard
//! per data-plane thread ([`super::shard`]: plain stores, no locked instruction); the count
//! is derived from the buckets at scrape time, so `_count` always equals the `+Inf` bucket.

use std::sync::Arc;

use super::shard::HistogramShards;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

#[derive(Clone, Debug)]
pub struct Histogram(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Upper bounds, ascending, without the final `+Inf`.
    bounds: Box<[f64]>,
    /// One count per bound plus the `+Inf` bucket (not cumulative), and the sum.
    shards: HistogramShards,
}

impl Histogram {
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Histogram {
        let bounds: Box<[f64]> = bounds.into_iter().collect();
        let shards = HistogramShards::new(bounds.len() + 1);
        Histogram(Arc::new(Inner { bounds, shards }))
    }

    pub fn observe(&self, v: f64) {
        let inner = &*self.0;
        let bucket = inner.bounds.partition_point(|bound| *bound < v);
        inner.shards.observe(bucket, v);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        (0..=self.0.bounds.len())
            .map(|b| self.0.shards.count(b))
            .sum()
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.0;
        let buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip((0..).map(|b| inner.shards.count(b)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = inner.shards.sum();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn buckets_bounds_are_inclusive_and_the_exposition_is_cumulative() {
        let h = Histogram::new([0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 1.0, 7.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 5);
        let mut registry = Registry::default();
        registry.register("t", "test", h.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("t_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"1.0\"} 4\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("t_count 5\n"), "{out}");
        assert!(out.contains("t_sum 8.65\n"), "{out}");
    }

    #[test]
    fn threads_lose_no_observation() {
        let h = Histogram::new([0.5]);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        h.observe(1.0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(h.count(), 40_000);
        assert_eq!(h.0.shards.sum(), 40_000.0);
    }
}
