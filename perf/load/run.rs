//! The load loops. Closed: `--concurrency` workers, each sending its next request when the
//! previous one ends. Open: a scheduler hands out intended start times at `--rate`, the
//! workers take them from one queue; a request that waits for a free worker is late, and
//! its latency includes the wait (no coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Mutex};

use crate::cli::Options;
use crate::client::{Conn, H2Slot, Target};
use crate::exchange::{self, Settings};
use crate::stats::{Failure, Stats};
use crate::workload::Workload;

/// Pause after a failed connect, so a dead target is not hammered in a tight loop.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);

/// Shared by every worker of a run.
struct Plan {
    options: Options,
    target: Target,
    workload: Workload,
    /// Next request's sequence number (also the `--requests` budget).
    next: AtomicU64,
    start: Instant,
    end: Instant,
}

impl Plan {
    /// The next sequence number, or `None` once `--requests` are used up.
    fn claim(&self) -> Option<u64> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        match self.options.requests {
            Some(limit) if seq >= limit => None,
            _ => Some(seq),
        }
    }
}

/// Where a worker gets the intended start time of its next request.
type Schedule = Option<Arc<Mutex<mpsc::UnboundedReceiver<Instant>>>>;

/// Runs the load; returns the merged stats and the wall time it took.
pub async fn load(options: Options, target: Target) -> (Stats, Duration) {
    let workload = Workload::new(
        options.template,
        options.workload.clone(),
        &options.model,
        options.prompt_bytes,
        options.max_tokens,
        options.stream,
        options.seed,
    );
    let start = Instant::now();
    let plan = Arc::new(Plan {
        end: start + options.duration,
        options,
        target,
        workload,
        next: AtomicU64::new(0),
        start,
    });
    let schedule: Schedule = plan.options.rate.map(|rate| {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(scheduler(plan.clone(), rate, tx));
        Arc::new(Mutex::new(rx))
    });
    let slots: Vec<H2Slot> = (0..plan.options.connections)
        .map(|_| Arc::new(Mutex::new(None)))
        .collect();
    let workers: Vec<_> = (0..plan.options.concurrency)
        .map(|i| {
            let conn = if plan.options.http2 {
                Conn::H2(slots[i % slots.len()].clone())
            } else {
                Conn::H1(None)
            };
            tokio::spawn(worker(plan.clone(), conn, schedule.clone()))
        })
        .collect();
    let mut total = Stats::default();
    for handle in workers {
        if let Ok(stats) = handle.await {
            total.merge(stats);
        }
    }
    (total, plan.start.elapsed())
}

/// Emits intended start times `start + k / rate` until the end (or the request budget).
/// It wakes at most every millisecond and releases every slot that is due, so high rates
/// do not need one timer each.
async fn scheduler(plan: Arc<Plan>, rate: f64, tx: mpsc::UnboundedSender<Instant>) {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut k: u32 = 0;
    let mut due = plan.start;
    let budget = plan.options.requests.unwrap_or(u64::MAX);
    while due < plan.end && u64::from(k) < budget {
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let now = Instant::now();
        while due <= now && due < plan.end && u64::from(k) < budget {
            if tx.send(due).is_err() {
                return;
            }
            k = k.saturating_add(1);
            due = plan.start + interval.saturating_mul(k);
        }
    }
}

async fn worker(plan: Arc<Plan>, mut conn: Conn, schedule: Schedule) -> Stats {
    let mut stats = Stats::default();
    let options = &plan.options;
    let settings = Settings {
        target: &plan.target,
        template: plan.workload.template(),
        stream: options.stream,
        max_body: options.max_body,
        max_frame: options.max_frame,
        connect_timeout: options.connect_timeout,
    };
    // Queued open-loop slots are still sent this long after the end, then counted missed.
    let drain_until = plan.end + options.timeout;
    loop {
        let intended = match &schedule {
            None if Instant::now() >= plan.end => break,
            None => Instant::now(),
            Some(rx) => match rx.lock().await.recv().await {
                Some(t) if Instant::now() > drain_until => {
                    let _ = t;
                    stats.missed += 1;
                    continue;
                }
                Some(t) => t,
                None => break,
            },
        };
        let Some(seq) = plan.claim() else { break };
        let request = match plan.target.request(
            options.http2,
            http::Method::POST,
            plan.workload.template().path(),
            &options.headers,
            plan.workload.body(seq),
        ) {
            Ok(r) => r,
            Err(failure) => {
                stats.fail(failure);
                continue;
            }
        };
        let exchange = exchange::run(&mut conn, &settings, request, intended, &mut stats);
        let failure = match tokio::time::timeout(options.timeout, exchange).await {
            Ok(Ok(())) => continue,
            Ok(Err(failure)) => failure,
            Err(_) => Failure::Timeout,
        };
        stats.fail(failure);
        conn.reset();
        if failure == Failure::Connect {
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
    stats
}
