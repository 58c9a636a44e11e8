//! Absorbing worker failures: per-worker circuit breakers and request retries.

pub mod breaker;
pub mod retry;

pub use breaker::{Breaker, BreakerConfig, Outcome, State, Transition};
pub use retry::RetryConfig;

use std::time::Duration;

/// The gateway-wide circuit-breaker settings; a worker's `resilience` block overrides them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerDefaults {
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub open_for: Duration,
    /// Accepted and unused: the breaker counts consecutive failures, not a window.
    pub window: Duration,
    pub disabled: bool,
}

impl Default for BreakerDefaults {
    fn default() -> BreakerDefaults {
        BreakerDefaults {
            failure_threshold: 10,
            success_threshold: 3,
            open_for: Duration::from_secs(60),
            window: Duration::from_secs(120),
            disabled: false,
        }
    }
}

/// The Retries and circuit breakers flag group.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResilienceSettings {
    /// `--retry-*`: retry count and backoff.
    pub retry: RetryConfig,
    /// `--disable-retries`: every request is sent once.
    pub disable_retries: bool,
    /// `--cb-*`, `--disable-circuit-breaker`: gateway defaults of workers' breakers.
    pub breaker: BreakerDefaults,
}

impl ResilienceSettings {
    /// The retry settings in force: none under `--disable-retries`.
    pub fn retry_in_force(&self) -> RetryConfig {
        if self.disable_retries {
            RetryConfig {
                max_retries: 0,
                ..self.retry
            }
        } else {
            self.retry
        }
    }
}
