//! `gw_worker_retry_backoff_seconds`: a summary per retry attempt over a rolling one-minute
//! window (spec 3: quantiles 0, 0.5, 0.9, 0.95, 0.99, 0.999 and 1, plus `_sum` and
//! `_count`).
//!
//! `prometheus-client` has no summary type, so this module keeps the window and writes its
//! own exposition lines. Backoffs happen only on retries, far off the common path, so one
//! mutex over the windows is enough; each window keeps at most [`MAX_SAMPLES`] samples.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The rolling window.
const WINDOW: Duration = Duration::from_secs(60);
/// Samples kept per attempt; beyond this the oldest go first.
const MAX_SAMPLES: usize = 4096;
/// Reported quantiles.
const QUANTILES: [(f64, &str); 7] = [
    (0.0, "0"),
    (0.5, "0.5"),
    (0.9, "0.9"),
    (0.95, "0.95"),
    (0.99, "0.99"),
    (0.999, "0.999"),
    (1.0, "1"),
];

#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<(Instant, f64)>,
    /// Since start, not just the window (`_sum` and `_count` are cumulative).
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
pub struct BackoffSummary {
    by_attempt: Mutex<BTreeMap<u32, Window>>,
}

impl BackoffSummary {
    /// A backoff of `seconds` before retry number `attempt`.
    pub fn observe(&self, attempt: u32, seconds: f64) {
        let now = Instant::now();
        let mut windows = self
            .by_attempt
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let window = windows.entry(attempt).or_default();
        if window.samples.len() >= MAX_SAMPLES {
            window.samples.pop_front();
        }
        window.samples.push_back((now, seconds));
        window.sum += seconds;
        window.count += 1;
    }

    /// Appends the family in the OpenMetrics text format (nothing before the first
    /// backoff).
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        let now = Instant::now();
        let mut windows = self
            .by_attempt
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if windows.is_empty() {
            return Ok(());
        }
        const NAME: &str = "gw_worker_retry_backoff_seconds";
        writeln!(out, "# HELP {NAME} Backoff before retry number attempt.")?;
        writeln!(out, "# TYPE {NAME} summary")?;
        writeln!(out, "# UNIT {NAME} seconds")?;
        for (attempt, window) in windows.iter_mut() {
            while window
                .samples
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > WINDOW)
            {
                window.samples.pop_front();
            }
            let mut values: Vec<f64> = window.samples.iter().map(|(_, v)| *v).collect();
            values.sort_by(f64::total_cmp);
            if !values.is_empty() {
                for (q, label) in QUANTILES {
                    let rank = (q * (values.len() - 1) as f64).round() as usize;
                    let value = values[rank.min(values.len() - 1)];
                    writeln!(
                        out,
                        "{NAME}{{attempt=\"{attempt}\",quantile=\"{label}\"}} {}",
                        float(value)
                    )?;
                }
            }
            writeln!(
                out,
                "{NAME}_sum{{attempt=\"{attempt}\"}} {}",
                float(window.sum)
            )?;
            writeln!(
                out,
                "{NAME}_count{{attempt=\"{attempt}\"}} {}",
                window.count
            )?;
        }
        Ok(())
    }
}

/// A sample value as the exposition writes floats (always with a decimal point).
fn float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_sum_and_count_per_attempt() {
        let s = BackoffSummary::default();
        let mut out = String::new();
        s.encode(&mut out).unwrap();
        assert!(out.is_empty());
        for i in 1..=100 {
            s.observe(1, f64::from(i) / 100.0);
        }
        s.observe(2, 0.5);
        s.encode(&mut out).unwrap();
        assert!(out.contains("# TYPE gw_worker_retry_backoff_seconds summary\n"));
        assert!(
            out.contains("gw_worker_retry_backoff_seconds{attempt=\"1\",quantile=\"0\"} 0.01\n")
        );
        assert!(out.contains("gw_worker_retry_backoff_seconds{attempt=\"1\",quantile=\"0.5\"} 0.5"));
        assert!(out.contains("gw_worker_retry_backoff_seconds{attempt=\"1\",quantile=\"1\"} 1.0\n"));
        assert!(out.contains("gw_worker_retry_backoff_seconds_count{attempt=\"1\"} 100\n"));
        assert!(out.contains("gw_worker_retry_backoff_seconds_sum{attempt=\"2\"} 0.5\n"));
        assert!(
            out.contains("gw_worker_retry_backoff_seconds{attempt=\"2\",quantile=\"0.99\"} 0.5\n")
        );
    }
}
