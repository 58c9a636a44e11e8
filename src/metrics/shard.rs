//! Per-thread shards for the metrics every request records.
//!
//! A counter shared by all data-plane threads costs each request a locked add on a cache
//! line every other core writes too: about 14 cycles alone on one core (measured against
//! relay-floor: 70 relaxed atomic adds a request cost 0.3 µs of CPU), and a line that
//! bounces between cores on many. Here each data-plane thread owns one shard of every
//! series and updates it with a plain load and store (it is the shard's only writer, so
//! nothing is lost); threads without a shard (the control thread, tests) share one more
//! shard with atomic adds. A scrape sums the shards.
//!
//! Shards are numbered once per process: [`set_writers`] fixes how many a series gets
//! (the data-plane threads, before any series is made), and [`claim`] gives the calling
//! thread the next number. A thread whose number is past the series' shards (a second
//! gateway in the same process, as in tests) writes the shared shard.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Shards a series gets for data-plane threads (the shared one not counted).
static WRITERS: AtomicUsize = AtomicUsize::new(0);
/// The next shard number [`claim`] gives out.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard number; `usize::MAX`: none (writes the shared shard).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Most writer shards a series gets, whatever the thread count: past it, threads share.
const MAX_WRITERS: usize = 64;

/// Sets how many writer shards the series made from now on get: one per data-plane thread.
pub fn set_writers(threads: usize) {
    WRITERS.store(threads.min(MAX_WRITERS), Ordering::Relaxed);
}

/// Gives the calling (data-plane) thread its own shard of every series.
pub fn claim() {
    SHARD.with(|shard| {
        if shard.get() == usize::MAX {
            shard.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
    });
}

/// The calling thread's shard among `writers`, if it owns one.
#[inline]
fn own(writers: usize) -> Option<usize> {
    let shard = SHARD.with(Cell::get);
    (shard < writers).then_some(shard)
}

/// Words per cache line.
const LINE: usize = 8;

/// `words` rounded up to whole cache lines, so neighbouring shards do not share a line's
/// middle.
fn stride(words: usize) -> usize {
    words.div_ceil(LINE) * LINE
}

/// `shards × stride` zeroed words.
fn words(shards: usize, stride: usize) -> Box<[AtomicU64]> {
    (0..shards * stride).map(|_| AtomicU64::new(0)).collect()
}

/// Adds `n` to `word`: a plain store on the thread's own shard, an atomic add on the
/// shared one.
#[inline]
fn add(word: &AtomicU64, n: u64, owned: bool) {
    if owned {
        word.store(
            word.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    } else {
        word.fetch_add(n, Ordering::Relaxed);
    }
}

/// A monotonic counter, sharded per data-plane thread.
#[derive(Clone, Debug)]
pub struct Counter(Arc<CounterShards>);

#[derive(Debug)]
struct CounterShards {
    writers: usize,
    /// Shard `i` is word `i * LINE`; the last shard is the shared one.
    words: Box<[AtomicU64]>,
}

impl Default for Counter {
    fn default() -> Counter {
        let writers = WRITERS.load(Ordering::Relaxed);
        Counter(Arc::new(CounterShards {
            writers,
            words: words(writers + 1, LINE),
        }))
    }
}

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        let shards = &*self.0;
        let (shard, owned) = match own(shards.writers) {
            Some(shard) => (shard, true),
            None => (shards.writers, false),
        };
        if let Some(word) = shards.words.get(shard * LINE) {
            add(word, n, owned);
        }
    }

    /// The sum over all shards.
    pub fn get(&self) -> u64 {
        self.0
            .words
            .iter()
            .step_by(LINE)
            .map(|w| w.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge moved up and down by the requests of every thread (requests in flight),
/// sharded like [`Counter`]: a shard may go negative when a request ends on another thread
/// than it began on; the sum is the value.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Counter);

impl Gauge {
    pub fn inc(&self) {
        self.0.inc_by(1);
    }

    pub fn dec(&self) {
        self.0.inc_by(u64::MAX);
    }

    /// The sum over all shards (two's complement: the shards wrap, their sum does not).
    pub fn get(&self) -> i64 {
        self.0.get() as i64
    }
}

impl TypedMetric for Gauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Gauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The shards of a histogram: per shard, one count per bucket (not cumulative, `+Inf`
/// last) and the sum as `f64` bits.
#[derive(Debug)]
pub struct HistogramShards {
    writers: usize,
    buckets: usize,
    stride: usize,
    words: Box<[AtomicU64]>,
}

impl HistogramShards {
    pub fn new(buckets: usize) -> HistogramShards {
        let writers = WRITERS.load(Ordering::Relaxed);
        let stride = stride(buckets + 1);
        HistogramShards {
            writers,
            buckets,
            stride,
            words: words(writers + 1, stride),
        }
    }

    /// Counts `v` in `bucket` (an index below `buckets`) and adds it to the sum.
    #[inline]
    pub fn observe(&self, bucket: usize, v: f64) {
        let (shard, owned) = match own(self.writers) {
            Some(shard) => (shard, true),
            None => (self.writers, false),
        };
        let base = shard * self.stride;
        if let Some(count) = self.words.get(base + bucket.min(self.buckets - 1)) {
            add(count, 1, owned);
        }
        let Some(sum) = self.words.get(base + self.buckets) else {
            return;
        };
        if owned {
            let next = f64::from_bits(sum.load(Ordering::Relaxed)) + v;
            sum.store(next.to_bits(), Ordering::Relaxed);
            return;
        }
        let mut current = sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + v).to_bits();
            match sum.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
    }

    /// Bucket `i`'s count over all shards.
    pub fn count(&self, bucket: usize) -> u64 {
        self.words
            .iter()
            .skip(bucket)
            .step_by(self.stride)
            .map(|w| w.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// The sum of all observations over all shards.
    pub fn sum(&self) -> f64 {
        self.words
            .iter()
            .skip(self.buckets)
            .step_by(self.stride)
            .map(|w| f64::from_bits(w.load(Ordering::Relaxed)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_shared_shards_add_up() {
        // Shard numbers are process-wide: whichever this test's threads get, each is the
        // only writer of its shard, and threads past the writers share the atomic one.
        set_writers(4);
        let c = Counter::default();
        let h = Arc::new(HistogramShards::new(2));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (c, h) = (c.clone(), h.clone());
                std::thread::spawn(move || {
                    if i < 4 {
                        claim();
                    }
                    for _ in 0..10_000 {
                        c.inc();
                        h.observe(i % 2, 0.5);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.get(), 60_000);
        assert_eq!(h.count(0), 30_000);
        assert_eq!(h.count(1), 30_000);
        assert_eq!(h.sum(), 30_000.0);
    }

    #[test]
    fn a_gauge_moved_on_two_threads_sums_to_its_value() {
        set_writers(4);
        let g = Gauge::default();
        let up = {
            let g = g.clone();
            std::thread::spawn(move || {
                claim();
                for _ in 0..5 {
                    g.inc();
                }
            })
        };
        up.join().unwrap();
        let down = {
            let g = g.clone();
            std::thread::spawn(move || {
                claim();
                for _ in 0..3 {
                    g.dec();
                }
            })
        };
        down.join().unwrap();
        g.dec();
        assert_eq!(g.get(), 1);
    }

    #[test]
    fn a_thread_keeps_its_first_shard() {
        claim();
        let first = SHARD.with(Cell::get);
        claim();
        assert_eq!(SHARD.with(Cell::get), first);
    }
}
