//! Runtime figures: the event-loop canary, and a once-a-second sampler on every
//! data-plane runtime.
//!
//! The canary is a task on every runtime that sleeps 10 ms in a loop and records how late
//! it woke. A late wake-up means the thread was busy with something that did not yield (or
//! the machine is overloaded): every request on that thread waited as long.
//!
//! The sampler (same task, once a second) reads the runtime's alive tasks and global queue
//! depth and the thread's CPU time (`/proc/thread-self/schedstat`, nanoseconds on CPU), from
//! which the busy ratio of the last second follows. Parks are counted by the epoll
//! runtime's park hook; the io_uring runtime keeps its park hook to itself, so its threads
//! export no parks series. Each thread writes only its own slots; the scrape sums them.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::histogram::Histogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::labels::{Label, Labels};

/// The canary's period.
const TICK: Duration = Duration::from_millis(10);
/// A wake-up later than this is a stall.
const STALL: Duration = Duration::from_millis(5);
/// How often the sampler reads the runtime.
const SAMPLE: Duration = Duration::from_secs(1);
/// Buckets (seconds) of the delay histogram, as spec 3 fixes them.
const DELAY_BUCKETS: [f64; 10] = [0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// One data-plane thread's latest figures; -1 where not known (yet). Only that thread
/// writes them, and each thread's sit on their own cache lines (128 bytes: adjacent-line
/// prefetch pairs lines), so a park on one core never invalidates another core's line.
#[derive(Debug)]
#[repr(align(128))]
pub struct ThreadStats {
    alive_tasks: AtomicI64,
    global_queue: AtomicI64,
    /// Busy fraction of the last second, in millionths.
    busy_ppm: AtomicI64,
    /// Parks so far; -1 where the runtime does not report them.
    parks: AtomicI64,
}

impl Default for ThreadStats {
    fn default() -> ThreadStats {
        ThreadStats {
            alive_tasks: AtomicI64::new(-1),
            global_queue: AtomicI64::new(-1),
            busy_ppm: AtomicI64::new(-1),
            parks: AtomicI64::new(-1),
        }
    }
}

impl ThreadStats {
    /// Counts one park (the epoll runtime's park hook, on the thread these figures are
    /// for). A plain load and store, no read-modify-write: this thread is the only writer,
    /// and a locked add on every park (about once per request under load) cost as much as
    /// the rest of the hook.
    pub fn parked(&self) {
        let parks = self.parks.load(Ordering::Relaxed);
        self.parks.store(parks.max(0) + 1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    delay: Histogram,
    stalls: Counter,
    workers: Gauge,
    threads: Arc<OnceLock<Box<[ThreadStats]>>>,
}

impl Default for RuntimeMetrics {
    fn default() -> RuntimeMetrics {
        RuntimeMetrics {
            delay: Histogram::new(DELAY_BUCKETS),
            stalls: Counter::default(),
            workers: Gauge::default(),
            threads: Arc::default(),
        }
    }
}

impl RuntimeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gw_runtime_event_loop_delay_seconds",
            "How late a 10 ms canary sleep woke",
            self.delay.clone(),
        );
        registry.register(
            "gw_runtime_event_loop_stalls",
            "Wake-ups more than 5 ms late",
            self.stalls.clone(),
        );
        registry.register(
            "gw_runtime_workers",
            "Runtime worker threads",
            self.workers.clone(),
        );
        registry.register_collector(Box::new(ThreadCollector(self.threads.clone())));
    }

    /// The number of data-plane threads (set once, before they start).
    pub fn set_workers(&self, n: usize) {
        self.workers.set(i64::try_from(n).unwrap_or(i64::MAX));
        let _ = self
            .threads
            .set((0..n).map(|_| ThreadStats::default()).collect());
    }

    /// Data-plane thread `index`'s figures.
    pub fn thread(&self, index: usize) -> Option<&ThreadStats> {
        self.threads.get().and_then(|t| t.get(index))
    }

    /// Runs the canary (and, for data-plane thread `thread`, the sampler) on the current
    /// runtime until the returned future is dropped.
    pub async fn canary(self, thread: Option<usize>) {
        let mut next_sample = Instant::now();
        let mut last_cpu = thread_cpu_ns().map(|ns| (Instant::now(), ns));
        loop {
            let asked = Instant::now();
            tokio::time::sleep(TICK).await;
            let woke = Instant::now();
            let late = woke.duration_since(asked).saturating_sub(TICK);
            self.delay.observe(late.as_secs_f64());
            if late > STALL {
                self.stalls.inc();
            }
            if woke < next_sample {
                continue;
            }
            next_sample = woke + SAMPLE;
            if let Some(stats) = thread.and_then(|i| self.thread(i)) {
                sample(stats, &mut last_cpu);
            }
        }
    }
}

/// Tasks every data-plane thread runs beside its connections on its local task set: the
/// companion that runs this sampler.
const COMPANIONS: usize = 1;

/// Reads the current runtime and thread into `stats`. Alive tasks are the runtime's own
/// (spawned with `tokio::spawn`: hyper's connections to h2c and TLS workers, its h2
/// streams) plus the thread's client connections and its companion task (this sampler),
/// both spawned on its local task set.
fn sample(stats: &ThreadStats, last_cpu: &mut Option<(Instant, u64)>) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    stats.alive_tasks.store(
        count(metrics.num_alive_tasks() + crate::runtime::connection_tasks() + COMPANIONS),
        Ordering::Relaxed,
    );
    stats
        .global_queue
        .store(count(metrics.global_queue_depth()), Ordering::Relaxed);
    let now = Instant::now();
    if let (Some((then, cpu_then)), Some(cpu_now)) = (*last_cpu, thread_cpu_ns()) {
        let wall = now.duration_since(then).as_nanos().max(1) as f64;
        let busy = (cpu_now.saturating_sub(cpu_then) as f64 / wall).clamp(0.0, 1.0);
        stats.busy_ppm.store((busy * 1e6) as i64, Ordering::Relaxed);
        *last_cpu = Some((now, cpu_now));
    }
}

/// This thread's time on CPU so far, in nanoseconds (`None` where the kernel does not keep
/// scheduler statistics).
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Exports the per-thread figures at scrape time.
#[derive(Debug)]
struct ThreadCollector(Arc<OnceLock<Box<[ThreadStats]>>>);

impl Collector for ThreadCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(threads) = self.0.get() else {
            return Ok(());
        };
        let known = |read: fn(&ThreadStats) -> i64| -> Vec<(usize, i64)> {
            threads
                .iter()
                .enumerate()
                .map(|(i, t)| (i, read(t)))
                .filter(|(_, v)| *v >= 0)
                .collect()
        };
        let totals = [
            (
                "gw_runtime_alive_tasks",
                "Spawned, not completed tasks",
                known(|t| t.alive_tasks.load(Ordering::Relaxed)),
            ),
            (
                "gw_runtime_global_queue_depth",
                "Tasks in the global queue",
                known(|t| t.global_queue.load(Ordering::Relaxed)),
            ),
        ];
        for (name, help, values) in totals {
            if values.is_empty() {
                continue;
            }
            let total: i64 = values.iter().map(|(_, v)| v).sum();
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(total).encode(metric)?;
        }
        let label = |i: usize| Label::Shared(Arc::from(i.to_string().as_str()));
        let busy = known(|t| t.busy_ppm.load(Ordering::Relaxed));
        if !busy.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "gw_runtime_worker_busy_ratio",
                "Busy fraction of last interval, 0.0 to 1.0",
                None,
                MetricType::Gauge,
            )?;
            for (i, ppm) in busy {
                let labels: Labels<1> = [("worker", label(i))];
                ConstGauge::new(ppm as f64 / 1e6).encode(metric.encode_family(&labels)?)?;
            }
        }
        let parks = known(|t| t.parks.load(Ordering::Relaxed));
        if !parks.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "gw_runtime_worker_parks",
                "Times a worker thread parked",
                None,
                MetricType::Counter,
            )?;
            for (i, n) in parks {
                let labels: Labels<1> = [("worker", label(i))];
                ConstCounter::new(n as u64).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_is_read() {
        // Every Linux this gateway targets keeps scheduler statistics.
        let a = thread_cpu_ns().unwrap();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns().unwrap() >= a);
    }

    #[test]
    fn parks_start_unknown_then_count() {
        let t = ThreadStats::default();
        assert_eq!(t.parks.load(Ordering::Relaxed), -1);
        t.parked();
        t.parked();
        assert_eq!(t.parks.load(Ordering::Relaxed), 2);
    }
}
