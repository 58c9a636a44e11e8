//! `gw_http_inflight_request_age_count`: how old the requests in flight are, sampled every
//! 20 seconds into non-cumulative age buckets (spec 3).
//!
//! Requests are counted by start time in a ring of 5-second slots (45 hours of slots):
//! starting a request increments its slot, finishing decrements the same slot, each one
//! relaxed atomic add on the request path and no lock. The sampler walks the ring and turns
//! each non-empty slot into an age. A request older than the ring (45 h, beyond any
//! request timeout the gateway would normally run with) would be counted as young.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::labels::Labels;

/// Width of one slot.
const SLOT_SECS: u64 = 5;
/// Slots in the ring (a power of two).
const SLOTS: usize = 1 << 15;
/// How often the sampler runs.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(20);
/// Upper bounds of the age buckets, in seconds; the last bucket is `gt=86400, le=+Inf`.
const BOUNDS: [u64; 11] = [30, 60, 180, 300, 600, 1200, 3600, 7200, 14400, 28800, 86400];
const BOUND_LABELS: [&str; 12] = [
    "0", "30", "60", "180", "300", "600", "1200", "3600", "7200", "14400", "28800", "86400",
];

#[derive(Debug)]
pub struct InflightAges {
    epoch: Instant,
    slots: Box<[AtomicU32]>,
    /// The last sample per bucket; -1 before the first sample (nothing exported).
    sample: [AtomicI64; 12],
}

impl Default for InflightAges {
    fn default() -> InflightAges {
        InflightAges {
            epoch: Instant::now(),
            slots: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            sample: std::array::from_fn(|_| AtomicI64::new(-1)),
        }
    }
}

impl InflightAges {
    /// The absolute slot of `at`.
    fn slot_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_secs() / SLOT_SECS
    }

    /// Counts a request started `at` (the caller's clock read, not another); returns its
    /// ring index for [`InflightAges::leave`].
    pub fn enter(&self, at: Instant) -> usize {
        let index = (self.slot_of(at) as usize) & (SLOTS - 1);
        self.slots[index].fetch_add(1, Ordering::Relaxed);
        index
    }

    pub fn leave(&self, index: usize) {
        self.slots[index & (SLOTS - 1)].fetch_sub(1, Ordering::Relaxed);
    }

    /// Walks the ring and stores the per-bucket counts.
    pub fn sample(&self, now: Instant) {
        let current = self.slot_of(now);
        let mut counts = [0i64; 12];
        for (index, slot) in self.slots.iter().enumerate() {
            let n = slot.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            // The most recent absolute slot that lands on this index.
            let back = (current as usize).wrapping_sub(index) & (SLOTS - 1);
            let age = back as u64 * SLOT_SECS;
            let bucket = BOUNDS
                .iter()
                .position(|b| age <= *b)
                .unwrap_or(BOUNDS.len());
            counts[bucket] += i64::from(n);
        }
        for (stored, count) in self.sample.iter().zip(counts) {
            stored.store(count, Ordering::Relaxed);
        }
    }

    /// Samples every [`SAMPLE_EVERY`] until the runtime stops.
    pub async fn sampler(ages: std::sync::Arc<InflightAges>) {
        let mut ticks = tokio::time::interval(SAMPLE_EVERY);
        loop {
            ticks.tick().await;
            ages.sample(Instant::now());
        }
    }
}

/// Exports the last sample.
#[derive(Debug)]
pub struct AgeCollector(pub std::sync::Arc<InflightAges>);

impl Collector for AgeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.0.sample[0].load(Ordering::Relaxed) < 0 {
            return Ok(());
        }
        let mut metric = encoder.encode_descriptor(
            "gw_http_inflight_request_age_count",
            "In-flight requests per age bucket (gt < age <= le), sampled every 20 seconds",
            None,
            MetricType::Gauge,
        )?;
        for (i, stored) in self.0.sample.iter().enumerate() {
            let le = BOUND_LABELS.get(i + 1).copied().unwrap_or("+Inf");
            let labels: Labels<2> = [("gt", BOUND_LABELS[i].into()), ("le", le.into())];
            ConstGauge::new(stored.load(Ordering::Relaxed))
                .encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(ages: &InflightAges) -> Vec<i64> {
        ages.sample
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn requests_land_in_their_age_bucket_and_leave() {
        let ages = InflightAges::default();
        let a = ages.enter(Instant::now());
        let b = ages.enter(Instant::now());
        ages.sample(Instant::now());
        assert_eq!(sampled(&ages)[0], 2);
        ages.sample(Instant::now() + Duration::from_secs(45));
        assert_eq!(sampled(&ages)[..3], [0, 2, 0]);
        ages.sample(Instant::now() + Duration::from_secs(90_000));
        assert_eq!(sampled(&ages)[11], 2);
        ages.leave(a);
        ages.leave(b);
        ages.sample(Instant::now() + Duration::from_secs(45));
        assert!(sampled(&ages).iter().all(|n| *n == 0));
    }
}
