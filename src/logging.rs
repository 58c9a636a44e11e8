//! Log output: human-readable or JSON, to stderr or a daily-rotated file in `--log-dir`;
//! [`Throttle`] for records that can repeat in a flood.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::filter::EnvFilter;

/// Minimum level of log records that are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub const ALL: &'static [LogLevel] = &[
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where and how log records are written (the Logging flag group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// `--log-level`.
    pub level: LogLevel,
    /// `--log-json`: one JSON object per log record.
    pub json: bool,
    /// `--log-dir`: also write logs to files in this directory.
    pub dir: Option<PathBuf>,
}

impl Default for LogSettings {
    fn default() -> LogSettings {
        LogSettings {
            level: LogLevel::Info,
            json: false,
            dir: None,
        }
    }
}

/// Keeps the background log writer alive; drop it last so buffered lines are flushed.
pub struct LogGuard(#[allow(dead_code)] Option<WorkerGuard>);

/// Installs the global subscriber. `RUST_LOG`, when set, refines `--log-level`.
pub fn init(settings: &LogSettings) -> io::Result<LogGuard> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(settings.level.as_str()));
    let (writer, guard) = match &settings.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            let appender = tracing_appender::rolling::daily(Path::new(dir), "tollgate.log");
            let (w, g) = tracing_appender::non_blocking(appender);
            (
                tracing_subscriber::fmt::writer::BoxMakeWriter::new(w),
                Some(g),
            )
        }
        None => (
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(io::stderr),
            None,
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false);
    let installed = if settings.json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    installed.map_err(|e| io::Error::other(e.to_string()))?;
    Ok(LogGuard(guard))
}

/// Lets a repeated log record through at most once per period and counts the rest, so a
/// flood of one event (accept errors under a full descriptor table, refused connections)
/// costs a log line a second instead of one per event. Lock-free: a `static` shared by
/// every thread, two atomics.
///
/// ```ignore
/// static ACCEPT_FAILED: Throttle = Throttle::per_second();
/// if let Some(suppressed) = ACCEPT_FAILED.admit() {
///     tracing::warn!(error = %err, suppressed, "accept failed");
/// }
/// ```
///
/// Repeats after the last record of a burst are reported with the next record of the
/// same kind, whenever that comes.
pub struct Throttle {
    period_ms: u64,
    /// Milliseconds since [`clock_base`] from which the next record may pass; 0 at first.
    next_ms: AtomicU64,
    /// Records held back since the last one that passed.
    held_back: AtomicU64,
}

impl Throttle {
    pub const fn new(period: Duration) -> Throttle {
        Throttle {
            period_ms: period.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    pub const fn per_second() -> Throttle {
        Throttle::new(Duration::from_secs(1))
    }

    /// `Some(n)` when this record may be logged, `n` being how many were held back since
    /// the last one; `None` when it is held back (and counted).
    pub fn admit(&self) -> Option<u64> {
        let now = elapsed_ms();
        let next = self.next_ms.load(Ordering::Relaxed);
        let passes = now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.period_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        if passes {
            Some(self.held_back.swap(0, Ordering::Relaxed))
        } else {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The instant throttles measure from (the first use).
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn elapsed_ms() -> u64 {
    u64::try_from(clock_base().elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_once_per_period_and_counts_the_rest() {
        let t = Throttle::new(Duration::from_millis(200));
        assert_eq!(t.admit(), Some(0));
        for _ in 0..5 {
            assert_eq!(t.admit(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.admit(), Some(5));
        assert_eq!(t.admit(), None);
    }
}
