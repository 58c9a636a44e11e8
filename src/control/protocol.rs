//! Which HTTP version the gateway speaks to a worker (spec 1, `http_pool.http2`).
//!
//! `true` means HTTP/2 with prior knowledge (h2c on `http://`), and a worker that speaks
//! only HTTP/1.1 fails registration; `false` means HTTP/1.1; unset follows
//! `--upstream-http2`, under which the gateway tries HTTP/2 first and falls back to
//! HTTP/1.1. The answer is decided once, at registration, and reported as `http2`.

use std::time::Duration;

use http::HeaderValue;

use super::calls::{probe_health, CallClient, CallError};
use crate::fleet::WorkerUrl;

/// What registration should find out about a worker's HTTP version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// HTTP/1.1, nothing to find out.
    Http1,
    /// HTTP/2 or nothing (`http_pool.http2: true`).
    Http2,
    /// HTTP/2 where the worker speaks it, else HTTP/1.1 (unset under `--upstream-http2`).
    PreferHttp2,
}

impl Want {
    pub fn from_settings(http2: Option<bool>, upstream_http2: bool) -> Want {
        match http2 {
            Some(true) => Want::Http2,
            Some(false) => Want::Http1,
            None if upstream_http2 => Want::PreferHttp2,
            None => Want::Http1,
        }
    }
}

/// Why one health check of a worker did not settle its protocol.
#[derive(Debug)]
pub enum Unsettled {
    /// The worker answers, but only over HTTP/1.1, and HTTP/2 was required. Final.
    Http1Only,
    /// No healthy answer yet; probing again may succeed.
    NotYet(CallError),
}

/// The message a registration fails with when HTTP/2 was required and refused.
pub const HTTP1_ONLY: &str =
    "http_pool.http2 is true but the worker speaks only HTTP/1.1 (no HTTP/2 with prior knowledge)";

/// One `/health` probe in the wanted protocol: `Ok(http2)` once the worker answers healthy.
///
/// HTTP/2 is tried first where wanted; any failure of it (a reset preface, a garbled reply,
/// a timeout) leads to an HTTP/1.1 probe, which tells "speaks only HTTP/1.1" apart from
/// "not answering yet".
pub async fn check(
    client: &CallClient,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    timeout: Duration,
    want: Want,
) -> Result<bool, Unsettled> {
    if want == Want::Http1 {
        return probe_health(client.pool(false), url, bearer, timeout)
            .await
            .map(|()| false)
            .map_err(Unsettled::NotYet);
    }
    let h2_err = match probe_health(client.pool(true), url, bearer, timeout).await {
        Ok(()) => return Ok(true),
        // An HTTP/2 reply with an unhealthy status: the protocol works, the worker does not.
        Err(err @ CallError::Status(_)) => return Err(Unsettled::NotYet(err)),
        Err(err) => err,
    };
    let h1 = probe_health(client.pool(false), url, bearer, timeout).await;
    match (want, h1) {
        (Want::Http2, Ok(()) | Err(CallError::Status(_))) => Err(Unsettled::Http1Only),
        (Want::Http2, Err(_)) => Err(Unsettled::NotYet(h2_err)),
        (_, Ok(())) => Ok(false),
        (_, Err(err)) => Err(Unsettled::NotYet(err)),
    }
}

/// The protocol of a worker that is not waited for (health checks off, or a startup
/// worker, routable at once): one check; when it settles nothing, the operator's setting
/// stands (`true` stays HTTP/2, unset falls back to HTTP/1.1).
pub async fn settle_once(
    client: &CallClient,
    url: &WorkerUrl,
    bearer: Option<&HeaderValue>,
    timeout: Duration,
    want: Want,
) -> Result<bool, &'static str> {
    if want == Want::Http1 {
        return Ok(false);
    }
    match check(client, url, bearer, timeout, want).await {
        Ok(http2) => Ok(http2),
        Err(Unsettled::Http1Only) => Err(HTTP1_ONLY),
        Err(Unsettled::NotYet(_)) => Ok(want == Want::Http2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::control::calls::tests::{dead_url, serve};
    use crate::fleet::parse_worker_url;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn an_http1_only_worker_is_told_apart_from_a_dead_one() {
        let (base, _) = serve(|_, _, _| (200, b"{}".to_vec())).await;
        let h1 = parse_worker_url(&base).unwrap();
        let dead = parse_worker_url(&dead_url().await).unwrap();
        let client = CallClient::new(&crate::http::tls::UpstreamTls::platform());
        let check = |url, want| check(&client, url, None, SECOND, want);
        assert!(matches!(check(&h1, Want::Http1).await, Ok(false)));
        assert!(matches!(check(&h1, Want::PreferHttp2).await, Ok(false)));
        assert!(matches!(
            check(&h1, Want::Http2).await,
            Err(Unsettled::Http1Only)
        ));
        for want in [Want::Http1, Want::Http2, Want::PreferHttp2] {
            assert!(matches!(
                check(&dead, want).await,
                Err(Unsettled::NotYet(CallError::Connect(_)))
            ));
        }
        // Not waited for: a dead worker keeps the operator's setting, HTTP/1.1-only refuses.
        let once = |url, want| settle_once(&client, url, None, SECOND, want);
        assert_eq!(once(&dead, Want::Http2).await, Ok(true));
        assert_eq!(once(&dead, Want::PreferHttp2).await, Ok(false));
        assert_eq!(once(&h1, Want::Http2).await, Err(HTTP1_ONLY));
    }

    #[test]
    fn settings_map_to_wants() {
        assert_eq!(Want::from_settings(Some(true), false), Want::Http2);
        assert_eq!(Want::from_settings(Some(true), true), Want::Http2);
        assert_eq!(Want::from_settings(Some(false), true), Want::Http1);
        assert_eq!(Want::from_settings(None, true), Want::PreferHttp2);
        assert_eq!(Want::from_settings(None, false), Want::Http1);
    }
}
