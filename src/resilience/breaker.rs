//! The per-worker circuit breaker (spec 1, "Circuit breaker per worker").
//!
//! `closed` → `open` when consecutive counted failures reach the failure threshold;
//! `open` → `half_open` once the open timeout has passed (checked lazily, by the next
//! request that asks); `half_open` → `closed` after the success threshold of successes,
//! back to `open` on any failure. The breaker counts consecutive failures only: the
//! spec's window setting is accepted and unused.
//!
//! Every data-plane thread asks and reports at once, so the state is a handful of atomics;
//! transitions are compare-and-swap on the state, so exactly one thread performs each.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use http::StatusCode;

/// Breaker states, numbered as the `gw_worker_cb_state` gauge reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Open,
            2 => State::HalfOpen,
            _ => State::Closed,
        }
    }
}

/// What one exchange with the worker says about its health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    /// Capacity pushback (e.g. 429): the worker is alive but busy; not counted.
    Neutral,
}

/// Settings of one breaker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// `--disable-circuit-breaker`: never opens.
    pub enabled: bool,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub open_for: Duration,
    /// Statuses counted as failures (`retryable_status_codes`).
    pub failure_statuses: Vec<u16>,
    /// Statuses never counted (`capacity_status_codes`); wins over `failure_statuses`.
    pub capacity_statuses: Vec<u16>,
}

/// Default statuses counted as failures.
pub const DEFAULT_FAILURE_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];
/// Default capacity-pushback statuses.
pub const DEFAULT_CAPACITY_STATUSES: [u16; 1] = [429];

impl BreakerConfig {
    /// The thresholds a PATCH leaves behind (spec 1, PATCH row): built-in 5 failures,
    /// 2 successes, 30 seconds, whatever the flags and overrides say, until a PUT. The
    /// status sets and the on/off switch are kept.
    pub fn after_patch(&self) -> BreakerConfig {
        BreakerConfig {
            failure_threshold: 5,
            success_threshold: 2,
            open_for: Duration::from_secs(30),
            ..self.clone()
        }
    }

    /// How a worker's answer counts. A 4xx of the client's own making is a success: the
    /// worker works.
    pub fn classify(&self, status: StatusCode) -> Outcome {
        let code = status.as_u16();
        if self.capacity_statuses.contains(&code) {
            Outcome::Neutral
        } else if self.failure_statuses.contains(&code) {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    }
}

/// A state change, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: State,
    pub to: State,
}

/// One worker's breaker.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: AtomicU8,
    failures: AtomicU32,
    successes: AtomicU32,
    /// When the breaker last opened, in milliseconds since [`epoch`].
    opened_at_ms: AtomicU64,
}

/// A process-wide monotonic origin, so an instant fits in an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config,
            state: AtomicU8::new(State::Closed as u8),
            failures: AtomicU32::new(0),
            successes: AtomicU32::new(0),
            opened_at_ms: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.failures.load(Ordering::Relaxed)
    }

    pub fn consecutive_successes(&self) -> u32 {
        self.successes.load(Ordering::Relaxed)
    }

    /// Whether the worker may get a request now. An open breaker whose timeout has passed
    /// turns half-open here and lets requests through to test the worker.
    pub fn allows(&self) -> bool {
        if !self.config.enabled {
            return true;
        }
        match self.state() {
            State::Closed | State::HalfOpen => true,
            State::Open => {
                let opened = self.opened_at_ms.load(Ordering::Acquire);
                let open_for = u64::try_from(self.config.open_for.as_millis()).unwrap_or(u64::MAX);
                if now_ms().saturating_sub(opened) < open_for {
                    return false;
                }
                if self.switch(State::Open, State::HalfOpen) {
                    self.successes.store(0, Ordering::Relaxed);
                }
                true
            }
        }
    }

    /// Records one exchange; returns the transition it caused, if any.
    pub fn record(&self, outcome: Outcome) -> Option<Transition> {
        if !self.config.enabled {
            return None;
        }
        match (self.state(), outcome) {
            (_, Outcome::Neutral) => None,
            (State::Closed, Outcome::Success) => {
                self.failures.store(0, Ordering::Relaxed);
                self.successes.fetch_add(1, Ordering::Relaxed);
                None
            }
            (State::Closed, Outcome::Failure) => {
                self.successes.store(0, Ordering::Relaxed);
                let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                (failures >= self.config.failure_threshold)
                    .then(|| self.open_from(State::Closed))
                    .flatten()
            }
            (State::HalfOpen, Outcome::Success) => {
                self.failures.store(0, Ordering::Relaxed);
                let successes = self.successes.fetch_add(1, Ordering::AcqRel) + 1;
                if successes >= self.config.success_threshold
                    && self.switch(State::HalfOpen, State::Closed)
                {
                    return Some(Transition {
                        from: State::HalfOpen,
                        to: State::Closed,
                    });
                }
                None
            }
            (State::HalfOpen, Outcome::Failure) => {
                self.successes.store(0, Ordering::Relaxed);
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.open_from(State::HalfOpen)
            }
            // Answers to requests sent before the breaker opened change nothing.
            (State::Open, _) => None,
        }
    }

    fn open_from(&self, from: State) -> Option<Transition> {
        // Stamp first, so a thread that sees `Open` never reads a stale opening time.
        self.opened_at_ms.store(now_ms(), Ordering::Release);
        self.switch(from, State::Open).then_some(Transition {
            from,
            to: State::Open,
        })
    }

    fn switch(&self, from: State, to: State) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(failures: u32, successes: u32, open_for: Duration) -> BreakerConfig {
        BreakerConfig {
            enabled: true,
            failure_threshold: failures,
            success_threshold: successes,
            open_for,
            failure_statuses: DEFAULT_FAILURE_STATUSES.to_vec(),
            capacity_statuses: DEFAULT_CAPACITY_STATUSES.to_vec(),
        }
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = Breaker::new(config(3, 1, Duration::from_secs(60)));
        assert_eq!(b.record(Outcome::Failure), None);
        assert_eq!(b.record(Outcome::Failure), None);
        assert_eq!(b.record(Outcome::Success), None);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.record(Outcome::Failure), None);
        assert_eq!(b.record(Outcome::Neutral), None);
        assert_eq!(b.record(Outcome::Failure), None);
        assert_eq!(
            b.record(Outcome::Failure),
            Some(Transition {
                from: State::Closed,
                to: State::Open
            })
        );
        assert_eq!(b.state(), State::Open);
        assert!(!b.allows());
        // Late answers while open change nothing.
        assert_eq!(b.record(Outcome::Success), None);
        assert_eq!(b.state(), State::Open);
    }

    #[test]
    fn half_open_after_the_timeout_then_closes_or_reopens() {
        let b = Breaker::new(config(1, 2, Duration::from_millis(30)));
        b.record(Outcome::Failure);
        assert!(!b.allows());
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allows());
        assert_eq!(b.state(), State::HalfOpen);
        assert_eq!(b.record(Outcome::Success), None);
        assert_eq!(
            b.record(Outcome::Success),
            Some(Transition {
                from: State::HalfOpen,
                to: State::Closed
            })
        );
        assert_eq!(b.state(), State::Closed);

        b.record(Outcome::Failure);
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allows());
        assert_eq!(
            b.record(Outcome::Failure),
            Some(Transition {
                from: State::HalfOpen,
                to: State::Open
            })
        );
        assert!(!b.allows(), "a failed trial reopens for the full timeout");
    }

    #[test]
    fn statuses_are_classified_by_the_configured_sets() {
        let c = config(1, 1, Duration::from_secs(1));
        assert_eq!(c.classify(StatusCode::OK), Outcome::Success);
        assert_eq!(c.classify(StatusCode::BAD_REQUEST), Outcome::Success);
        assert_eq!(c.classify(StatusCode::NOT_FOUND), Outcome::Success);
        assert_eq!(c.classify(StatusCode::TOO_MANY_REQUESTS), Outcome::Neutral);
        for code in [408, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(c.classify(status), Outcome::Failure, "{code}");
        }
        let custom = BreakerConfig {
            failure_statuses: vec![501],
            capacity_statuses: vec![],
            ..c
        };
        assert_eq!(
            custom.classify(StatusCode::NOT_IMPLEMENTED),
            Outcome::Failure
        );
        assert_eq!(
            custom.classify(StatusCode::INTERNAL_SERVER_ERROR),
            Outcome::Success
        );
        assert_eq!(
            custom.classify(StatusCode::TOO_MANY_REQUESTS),
            Outcome::Success
        );
    }

    #[test]
    fn a_disabled_breaker_never_opens() {
        let b = Breaker::new(BreakerConfig {
            enabled: false,
            ..config(1, 1, Duration::from_secs(60))
        });
        for _ in 0..10 {
            assert_eq!(b.record(Outcome::Failure), None);
        }
        assert!(b.allows());
        assert_eq!(b.state(), State::Closed);
    }

    #[test]
    fn patch_thresholds_are_the_built_in_ones() {
        let c = config(10, 3, Duration::from_secs(60)).after_patch();
        assert_eq!(
            (c.failure_threshold, c.success_threshold, c.open_for),
            (5, 2, Duration::from_secs(30))
        );
    }

    #[test]
    fn concurrent_failures_open_exactly_once() {
        let b = Breaker::new(config(100, 1, Duration::from_secs(60)));
        let opened = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        if b.record(Outcome::Failure).is_some() {
                            opened.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(opened.load(Ordering::Relaxed), 1);
        assert_eq!(b.state(), State::Open);
    }
}
