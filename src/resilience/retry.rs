//! Retry policy: which answers are retried and how long to wait before each retry.
//!
//! A request is retried only before any byte of the response has reached the client, so
//! the decision is made on the status line (or on a failed exchange) and a stream that
//! has started is never replayed. The delay grows exponentially with jitter so that many
//! requests failing at once do not come back in lockstep.

use std::time::Duration;

use http::StatusCode;

use crate::rng::next_u64;

/// Statuses that are retried (on another worker where one exists).
pub const RETRYABLE_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];

/// Retry settings from the flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryConfig {
    /// Retries after the first attempt; 0 (or `--disable-retries`) sends once.
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub multiplier: f64,
    /// Fraction of the delay added or removed at random (0.0 to 1.0).
    pub jitter: f64,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            max_retries: 5,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(30_000),
            multiplier: 1.5,
            jitter: 0.2,
        }
    }
}

impl RetryConfig {
    pub fn enabled(&self) -> bool {
        self.max_retries > 0
    }

    /// Whether a worker's answer with this status is worth another attempt.
    pub fn retries_status(status: StatusCode) -> bool {
        RETRYABLE_STATUSES.contains(&status.as_u16())
    }

    /// The delay before retry number `attempt` (1 for the first retry), with `unit` a
    /// uniform random number in [0, 1) choosing the jitter.
    pub fn backoff_with(&self, attempt: u32, unit: f64) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let base = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = base.min(self.max_backoff.as_secs_f64());
        let spread = self.jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let secs = (capped * (1.0 + spread)).clamp(0.0, self.max_backoff.as_secs_f64());
        Duration::try_from_secs_f64(secs).unwrap_or(self.max_backoff)
    }

    /// The delay before retry number `attempt`, with fresh jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.backoff_with(attempt, unit_random())
    }
}

/// A uniform number in [0, 1) from the routing policies' per-thread generator: jitter
/// needs spread, not cryptographic quality, and must not contend across threads.
pub fn unit_random() -> f64 {
    // The top 53 bits make an exactly representable fraction.
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_by_the_multiplier_up_to_the_cap() {
        let c = RetryConfig {
            jitter: 0.0,
            ..RetryConfig::default()
        };
        let ms = |attempt| c.backoff_with(attempt, 0.5).as_secs_f64() * 1000.0;
        assert!((ms(1) - 50.0).abs() < 1e-6);
        assert!((ms(2) - 75.0).abs() < 1e-6);
        assert!((ms(3) - 112.5).abs() < 1e-6);
        assert_eq!(c.backoff_with(40, 0.5), Duration::from_secs(30));
        assert_eq!(c.backoff_with(u32::MAX, 0.5), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let c = RetryConfig::default();
        let low = c.backoff_with(1, 0.0).as_secs_f64();
        let high = c.backoff_with(1, 0.999_999).as_secs_f64();
        assert!((low - 0.040).abs() < 1e-6, "{low}");
        assert!((high - 0.060).abs() < 1e-4, "{high}");
        for _ in 0..1000 {
            let d = c.backoff(2).as_secs_f64();
            assert!((0.060..=0.090).contains(&d), "{d}");
        }
    }

    #[test]
    fn random_units_are_in_range_and_vary() {
        let draws: Vec<f64> = (0..1000).map(|_| unit_random()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((0.4..0.6).contains(&mean), "{mean}");
    }

    #[test]
    fn retryable_statuses() {
        for code in RETRYABLE_STATUSES {
            assert!(RetryConfig::retries_status(
                StatusCode::from_u16(code).unwrap()
            ));
        }
        for code in [200, 400, 401, 404, 413, 501] {
            assert!(!RetryConfig::retries_status(
                StatusCode::from_u16(code).unwrap()
            ));
        }
    }
}
