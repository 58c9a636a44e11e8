//! `--rate-limit-tokens-per-second`: a rate limiter as a generic cell rate algorithm.
//!
//! The whole state is one atomic "theoretical arrival time": each admitted request moves it
//! one interval (1 / rate) ahead. A request may start once that time is within the burst
//! window of now; otherwise it is told how long to wait. Reservations are taken in the order
//! requests ask, so waiters start in FIFO order, and no lock or timer task is needed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Rate {
    /// Nanoseconds between two admissions at the steady rate.
    interval: u64,
    /// How far ahead of now reservations may run without waiting: one second's worth of
    /// requests (at least one), so a quiet limiter admits a burst of that size at once.
    burst: u64,
    /// The theoretical arrival time, in nanoseconds since `epoch`.
    tat: AtomicU64,
    epoch: Instant,
}

impl Rate {
    /// A limiter admitting `per_second` requests per second on average (> 0).
    pub fn new(per_second: f64) -> Rate {
        let interval = (1e9 / per_second).clamp(1.0, 1e15) as u64;
        let burst_requests = per_second.floor().max(1.0);
        Rate {
            interval,
            burst: ((burst_requests - 1.0) * interval as f64) as u64,
            tat: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Reserves the next start time if it is at most `max_wait` away and returns the wait
    /// (zero: start now); `None` leaves the limiter untouched.
    pub fn reserve(&self, now: Instant, max_wait: Duration) -> Option<Duration> {
        let now =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            let wait = start.saturating_sub(now.saturating_add(self.burst));
            if wait > max_wait {
                return None;
            }
            match self.tat.compare_exchange_weak(
                tat,
                start.saturating_add(self.interval),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Duration::from_nanos(wait)),
                Err(current) => tat = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_second_then_the_steady_rate() {
        let rate = Rate::new(4.0);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(rate.reserve(t0, Duration::ZERO), Some(Duration::ZERO));
        }
        // The fifth must wait one interval; without patience it is refused and the
        // limiter stays as it was.
        assert_eq!(rate.reserve(t0, Duration::ZERO), None);
        assert_eq!(rate.reserve(t0, Duration::ZERO), None);
        let wait = rate.reserve(t0, Duration::from_secs(1)).unwrap();
        assert_eq!(wait, Duration::from_millis(250));
        // The next one queues behind it (FIFO): two intervals.
        assert_eq!(
            rate.reserve(t0, Duration::from_secs(1)),
            Some(Duration::from_millis(500))
        );
        // A second later the backlog has drained.
        let later = t0 + Duration::from_secs(2);
        assert_eq!(rate.reserve(later, Duration::ZERO), Some(Duration::ZERO));
    }

    #[test]
    fn slow_rates_admit_one_at_a_time() {
        let rate = Rate::new(0.5);
        let t0 = Instant::now();
        assert_eq!(rate.reserve(t0, Duration::ZERO), Some(Duration::ZERO));
        assert_eq!(rate.reserve(t0, Duration::from_secs(1)), None);
        assert_eq!(
            rate.reserve(t0, Duration::from_secs(2)),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn many_threads_never_over_admit() {
        let rate = std::sync::Arc::new(Rate::new(100.0));
        let t0 = Instant::now();
        let admitted: usize = (0..4)
            .map(|_| {
                let rate = rate.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| rate.reserve(t0, Duration::ZERO).is_some())
                        .count()
                })
            })
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(admitted, 100);
    }
}
