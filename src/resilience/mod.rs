//! Absorbing worker failures: per-worker circuit breakers and request retries.

pub mod breaker;
pub mod retry;

pub use breaker::{Breaker, BreakerConfig, Outcome, State, Transition};
pub use retry::RetryConfig;

use crate::config::Config;
use crate::workers::spec::ResilienceOverrides;

/// A worker's breaker settings: its `resilience` block over the gateway flags. A status
/// list given in the block replaces the default set.
pub fn breaker_config(config: &Config, overrides: &ResilienceOverrides) -> BreakerConfig {
    let defaults = &config.breaker;
    let clamp = |v: u64| u32::try_from(v.max(1)).unwrap_or(u32::MAX);
    BreakerConfig {
        enabled: !defaults.disabled,
        failure_threshold: overrides
            .cb_failure_threshold
            .map_or(defaults.failure_threshold, clamp),
        success_threshold: overrides
            .cb_success_threshold
            .map_or(defaults.success_threshold, clamp),
        open_for: overrides
            .cb_timeout_secs
            .map_or(defaults.open_for, std::time::Duration::from_secs),
        failure_statuses: overrides
            .retryable_status_codes
            .clone()
            .unwrap_or_else(|| breaker::DEFAULT_FAILURE_STATUSES.to_vec()),
        capacity_statuses: overrides
            .capacity_status_codes
            .clone()
            .unwrap_or_else(|| breaker::DEFAULT_CAPACITY_STATUSES.to_vec()),
    }
}

/// The retry settings in force: none under `--disable-retries`.
pub fn retry_config(config: &Config) -> RetryConfig {
    if config.disable_retries {
        RetryConfig {
            max_retries: 0,
            ..config.retry
        }
    } else {
        config.retry
    }
}
