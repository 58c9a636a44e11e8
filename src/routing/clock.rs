//! A coarse monotonic clock for last-access times: milliseconds since the first use in
//! this process, as a plain `u64` that fits in an atomic.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since the process-wide epoch.
pub(crate) fn now_ms() -> u64 {
    let epoch = EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A duration in the clock's unit, saturating.
pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
