//! `GET /engine_metrics`: the engines' own Prometheus pages, merged into one (spec 3).
//!
//! Every registered HTTP worker's `/metrics` is fetched once per base URL (scheme and
//! authority: two registrations of one engine are one page), in parallel, each call
//! bounded in time and size. Every sample gains `worker_addr="<base URL>"`; names, help
//! text and label values pass through unchanged. A worker whose scrape fails or answers
//! non-2xx is left out. Nothing is cached: the page is as fresh as the engines.

use std::collections::HashSet;
use std::time::Duration;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Response, StatusCode};

use super::Admin;
use crate::control::calls::{call, CallClient};
use crate::control::load::bounded_parallel;
use crate::control::prom_text::Merged;
use crate::fleet::Worker;
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};
use crate::http::reply;

/// Timeout of one scrape (never longer than `--request-timeout-secs`). Engines render the
/// page from memory; one that needs longer is left out rather than holding the answer.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrapes in flight at once.
pub const MAX_PARALLEL_SCRAPES: usize = 64;
/// Largest merged page. Each scrape is capped by the call client; this bounds the sum for
/// a large fleet. Workers whose page would not fit are left out, with a warning.
pub const MAX_MERGED_BYTES: usize = 64 * 1024 * 1024;
/// The label naming the engine of a sample.
const LABEL: &str = "worker_addr";
/// Content type of the text exposition format.
const EXPOSITION: &str = "text/plain; version=0.0.4";

/// `GET /engine_metrics`. No worker registered: 500 `No available workers`; no scrape
/// succeeded: 500 `All backend requests failed`.
pub async fn engine_metrics(admin: &Admin, client: &CallClient) -> Response<RespBody> {
    let (targets, registered) = {
        let snapshot = admin.registry.snapshot();
        let mut seen = HashSet::new();
        let targets: Vec<(String, std::sync::Arc<Worker>)> = snapshot
            .all()
            .iter()
            .filter_map(|w| {
                let (scheme, authority) = w.http_origin()?;
                let base = format!("{scheme}://{authority}");
                seen.insert(base.clone()).then(|| (base, w.clone()))
            })
            .collect();
        (targets, !snapshot.all().is_empty())
    };
    if !registered {
        return admin_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            AdminErrorBody::text("No available workers"),
        );
    }
    let timeout = SCRAPE_TIMEOUT.min(admin.call_timeout);
    let pages = bounded_parallel(targets, MAX_PARALLEL_SCRAPES, |(base, worker)| {
        let client = client.clone();
        async move {
            match call(&client, &worker, Method::GET, "/metrics", None, timeout).await {
                Ok(reply) if reply.status.is_success() => Some((base, reply.body)),
                Ok(reply) => {
                    tracing::debug!(worker = %base, status = reply.status.as_u16(), "engine metrics scrape refused");
                    None
                }
                Err(err) => {
                    tracing::debug!(worker = %base, error = %err, "engine metrics scrape failed");
                    None
                }
            }
        }
    })
    .await;
    let mut merged = Merged::new();
    let mut answered = 0usize;
    for (base, body) in pages.into_iter().flatten().flatten() {
        answered += 1;
        if merged.len().saturating_add(body.len()) > MAX_MERGED_BYTES {
            tracing::warn!(worker = %base, "engine metrics page left out: merged page too large");
            continue;
        }
        merged.add(&String::from_utf8_lossy(&body), LABEL, &base);
    }
    if answered == 0 {
        return admin_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            AdminErrorBody::text("All backend requests failed"),
        );
    }
    let mut resp = reply::plain(StatusCode::OK, merged.finish());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(EXPOSITION));
    resp
}
