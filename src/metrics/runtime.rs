//! The event-loop canary: a task on every runtime sleeps 10 ms in a loop and records how
//! late it woke. A late wake-up means the thread was busy with something that did not
//! yield (or the machine is overloaded): every request on that thread waited as long.

use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The canary's period.
const TICK: Duration = Duration::from_millis(10);
/// A wake-up later than this is a stall.
const STALL: Duration = Duration::from_millis(5);
/// Buckets (seconds) of the delay histogram, as spec 3 fixes them.
const DELAY_BUCKETS: [f64; 10] = [0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    delay: Histogram,
    stalls: Counter,
    workers: Gauge,
}

impl Default for RuntimeMetrics {
    fn default() -> RuntimeMetrics {
        RuntimeMetrics {
            delay: Histogram::new(DELAY_BUCKETS),
            stalls: Counter::default(),
            workers: Gauge::default(),
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
    }

    /// The number of data-plane threads.
    pub fn set_workers(&self, n: usize) {
        self.workers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Runs the canary on the current runtime until the returned future is dropped.
    pub async fn canary(self) {
        loop {
            let asked = Instant::now();
            tokio::time::sleep(TICK).await;
            let late = asked.elapsed().saturating_sub(TICK);
            self.delay.observe(late.as_secs_f64());
            if late > STALL {
                self.stalls.inc();
            }
        }
    }
}
