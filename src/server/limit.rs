//! `--max-connections`: one count of open client connections over every data-plane thread.
//!
//! Past the cap a new connection is still accepted, answered with [`REFUSAL`] and closed
//! at once: the client learns why, and the descriptor is back in a moment. Without a cap a
//! flood of idle connections used up the process's descriptors, so accepts failed (and
//! were logged in a loop) and upstream connections could not be opened.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::logging::Throttle;

/// Descriptors kept out of the default cap: listeners, the io_uring or epoll instances,
/// log files, the metrics and health listeners and their clients, worker probes.
const RESERVED_FDS: usize = 128;

/// The whole answer to a connection over the cap: a 503 in the gateway's error envelope.
pub const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
x-gw-error-code: too_many_connections\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 134\r\n\
\r\n\
{\"error\":{\"message\":\"Too many open connections; retry later\",\
\"type\":\"Service Unavailable\",\"param\":null,\"code\":\"too_many_connections\"}}";

/// The default `--max-connections` for an open-file limit of `nofile`: half of what is
/// left after [`RESERVED_FDS`], so every client connection can have one upstream
/// connection open at the same time and a descriptor is always left to refuse with.
pub fn default_max_connections(nofile: u64) -> usize {
    let usable = usize::try_from(nofile).unwrap_or(usize::MAX);
    (usable.saturating_sub(RESERVED_FDS) / 2).max(1)
}

/// Raises the soft open-file limit (`RLIMIT_NOFILE`) to the hard one and returns the soft
/// limit then in force (`u64::MAX` for unlimited). The usual soft default of 1,024 (login
/// shells, systemd units) would hold `--max-connections` to 448 although the hard limit
/// allows far more; a server that expects many connections raises it itself, as Go's
/// runtime and nginx's `worker_rlimit_nofile` do. An unlimited hard limit is left alone
/// (Linux refuses it past `fs.nr_open`), and so is a soft limit that cannot be raised.
pub fn raise_open_file_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    match limit.maximum {
        Some(hard) if hard > soft => {
            let raised = Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => {
                    tracing::info!(from = soft, to = hard, "open-file limit raised");
                    hard
                }
                Err(err) => {
                    tracing::warn!(soft, hard, error = %err, "cannot raise the open-file limit");
                    soft
                }
            }
        }
        _ => soft,
    }
}

/// The shared count of open client connections.
#[derive(Debug)]
pub struct ConnLimit {
    open: AtomicUsize,
    max: usize,
}

impl ConnLimit {
    pub fn new(max: usize) -> ConnLimit {
        ConnLimit {
            open: AtomicUsize::new(0),
            max,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Counts one more connection, or refuses it (`false`) when the cap is reached. Each
    /// `true` must be matched by one [`ConnLimit::close`].
    pub fn try_open(&self) -> bool {
        if self.open.fetch_add(1, Ordering::Relaxed) < self.max {
            return true;
        }
        self.open.fetch_sub(1, Ordering::Relaxed);
        false
    }

    pub fn close(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Logs a refusal, at most once a second over all threads.
    pub fn log_refusal(&self) {
        static REFUSED: Throttle = Throttle::per_second();
        if let Some(suppressed) = REFUSED.admit() {
            tracing::warn!(
                max_connections = self.max,
                suppressed,
                "connection refused: --max-connections reached"
            );
        }
    }
}

/// Logs a failed accept (descriptors exhausted and the like), at most once a second over
/// all threads.
pub fn log_accept_error(err: &std::io::Error) {
    static ACCEPT_FAILED: Throttle = Throttle::per_second();
    if let Some(suppressed) = ACCEPT_FAILED.admit() {
        tracing::warn!(error = %err, suppressed, "accept failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        let length = format!("content-length: {}", body.len());
        assert!(head.lines().any(|l| l == length), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections");
    }

    #[test]
    fn cap_counts_and_frees() {
        let limit = ConnLimit::new(2);
        assert!(limit.try_open() && limit.try_open());
        assert!(!limit.try_open());
        limit.close();
        assert!(limit.try_open());
    }

    #[test]
    fn default_leaves_room_for_upstream() {
        assert_eq!(default_max_connections(1024), 448);
        assert_eq!(default_max_connections(256), 64);
        assert_eq!(default_max_connections(10), 1);
        assert!(raise_open_file_limit() > 0);
    }
}
