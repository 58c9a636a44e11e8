//! Log output: human-readable or JSON, to stderr or a daily-rotated file in `--log-dir`.

use std::io;
use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::filter::EnvFilter;

use crate::config::Config;

/// Keeps the background log writer alive; drop it last so buffered lines are flushed.
pub struct LogGuard(#[allow(dead_code)] Option<WorkerGuard>);

/// Installs the global subscriber. `RUST_LOG`, when set, refines `--log-level`.
pub fn init(config: &Config) -> io::Result<LogGuard> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(config.log_level.as_str()));
    let (writer, guard) = match &config.log_dir {
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
    let installed = if config.log_json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    installed.map_err(|e| io::Error::other(e.to_string()))?;
    Ok(LogGuard(guard))
}
