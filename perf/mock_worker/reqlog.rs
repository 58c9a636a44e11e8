//! The request log: what the gateway actually sent, for tests to assert on
//! (rewritten paths, forwarded headers, body transformations).
//!
//! A bounded ring (oldest entries dropped). Entries keep the raw body
//! bytes; the UTF-8 conversion happens only when a test reads the log, so
//! recording stays cheap. Benchmarks turn the log off entirely.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::request::Parts;
use serde_json::{json, Map, Value};

/// Bodies longer than this are stored truncated (`body_len` keeps the
/// real length).
pub const MAX_LOGGED_BODY: usize = 64 * 1024;

pub struct RequestLog {
    capacity: usize,
    entries: Mutex<VecDeque<Entry>>,
}

#[derive(Debug, Clone)]
pub struct Entry {
    method: String,
    /// `HTTP/1.1` or `HTTP/2.0`, so tests can see which protocol the gateway spoke.
    version: &'static str,
    path: String,
    query: Option<String>,
    /// Lowercase names in first-seen order; repeated names joined.
    headers: Vec<(String, String)>,
    body: Bytes,
    body_len: usize,
    ts_ms: u64,
}

impl Entry {
    pub fn new(parts: &Parts, body: &Bytes) -> Entry {
        let headers = parts
            .headers
            .keys()
            .map(|name| {
                let joined = parts
                    .headers
                    .get_all(name)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()))
                    .collect::<Vec<_>>()
                    .join(", ");
                (name.as_str().to_string(), joined)
            })
            .collect();
        let stored = if body.len() > MAX_LOGGED_BODY {
            // Copy, so a huge upload is not kept alive by the log.
            Bytes::copy_from_slice(&body[..MAX_LOGGED_BODY])
        } else {
            body.clone()
        };
        Entry {
            method: parts.method.as_str().to_string(),
            version: version_name(parts.version),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers,
            body: stored,
            body_len: body.len(),
            ts_ms: now_ms(),
        }
    }

    /// The body's `data_parallel_rank` (what a `--dp-aware` gateway pins), when the body
    /// is a JSON object carrying a whole number there; parsed only when the log is read.
    fn data_parallel_rank(&self) -> Option<u64> {
        let body: Value = serde_json::from_slice(&self.body).ok()?;
        body.get("data_parallel_rank")?.as_u64()
    }

    pub fn to_json(&self) -> Value {
        let headers: Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "method": self.method,
            "version": self.version,
            "path": self.path,
            "query": self.query,
            "headers": headers,
            "body": String::from_utf8_lossy(&self.body),
            "body_len": self.body_len,
            "ts_ms": self.ts_ms,
            "data_parallel_rank": self.data_parallel_rank(),
        })
    }
}

impl RequestLog {
    pub fn new(capacity: usize) -> Self {
        RequestLog {
            capacity,
            entries: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
        }
    }

    pub fn record(&self, entry: Entry) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        while entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Oldest first.
    pub fn to_json(&self) -> Value {
        // Snapshot under the lock, serialise outside it.
        let snapshot: Vec<Entry> = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        Value::Array(snapshot.iter().map(Entry::to_json).collect())
    }
}

fn version_name(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method("POST").uri(uri);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn entry_fields() {
        let p = parts(
            "/v1/chat/completions?a=1&b=2",
            &[("X-Trace", "t1"), ("Accept", "a"), ("x-trace", "t2")],
        );
        let v = Entry::new(&p, &Bytes::from_static(b"{\"x\":1}")).to_json();
        assert_eq!(v["method"], "POST");
        assert_eq!(v["path"], "/v1/chat/completions");
        assert_eq!(v["query"], "a=1&b=2");
        assert_eq!(v["headers"]["x-trace"], "t1, t2");
        assert_eq!(v["headers"]["accept"], "a");
        assert_eq!(v["body"], "{\"x\":1}");
        assert_eq!(v["body_len"], 7);
        assert!(v["ts_ms"].as_u64().unwrap() > 0);

        let v = Entry::new(&parts("/health", &[]), &Bytes::new()).to_json();
        assert_eq!(v["query"], Value::Null);
    }

    #[test]
    fn long_and_binary_bodies() {
        let mut raw = vec![b'a'; MAX_LOGGED_BODY + 10];
        raw[0] = 0xff;
        let v = Entry::new(&parts("/x", &[]), &Bytes::from(raw)).to_json();
        assert_eq!(v["body_len"], MAX_LOGGED_BODY + 10);
        let body = v["body"].as_str().unwrap();
        assert!(body.starts_with('\u{fffd}'));
        assert_eq!(body.chars().count(), MAX_LOGGED_BODY);
    }

    #[test]
    fn ring_drops_oldest() {
        let log = RequestLog::new(2);
        for path in ["/a", "/b", "/c"] {
            log.record(Entry::new(&parts(path, &[]), &Bytes::new()));
        }
        let v = log.to_json();
        let paths: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["/b", "/c"]);
        log.clear();
        assert_eq!(log.to_json(), json!([]));
    }
}
