//! One request, measured: status, body read within the bound, SSE token timing.
//!
//! Every time is taken from the request's *intended* start (the schedule's slot in an
//! open loop, the actual send in a closed one), so waiting for a free connection counts.

use std::time::Instant;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use tollgate::sse::SseParser;

use crate::client::{Body, Conn, Target};
use crate::stats::{self, Failure, Stats};
use crate::workload::Template;

/// What an exchange needs besides the request.
pub struct Settings<'a> {
    pub target: &'a Target,
    pub template: Template,
    pub stream: bool,
    pub max_body: usize,
    pub max_frame: usize,
    pub connect_timeout: std::time::Duration,
}

/// Reads a whole body, failing once it passes `max` bytes.
pub async fn read_bounded(mut body: Incoming, max: usize) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Failure::Io)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                return Err(Failure::BodyTooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// Sends `request` on `conn` and records the outcome in `stats`. An `Err` is a transport
/// failure the caller records (the connection is then unusable).
pub async fn run(
    conn: &mut Conn,
    settings: &Settings<'_>,
    request: http::Request<Body>,
    intended: Instant,
    stats: &mut Stats,
) -> Result<(), Failure> {
    let response = conn
        .send(settings.target, settings.connect_timeout, request)
        .await?;
    let status = response.status();
    let body = response.into_body();
    if !status.is_success() {
        let bytes = read_bounded(body, settings.max_body).await?;
        stats.status_error(status.as_u16(), stats::error_code(&bytes));
        return Ok(());
    }
    if settings.stream {
        read_stream(body, settings, intended, stats).await?;
    } else {
        let bytes = read_bounded(body, settings.max_body).await?;
        let (prompt, cached) = stats::usage(&bytes);
        stats.prompt_tokens += prompt;
        stats.cached_tokens += cached;
    }
    stats::record(&mut stats.latency, intended.elapsed());
    stats.ok += 1;
    Ok(())
}

/// Parses the event stream, timing token events: the first against `intended` (TTFT), the
/// others against the previous one (ITL). Events that arrive in one read share a time.
async fn read_stream(
    mut body: Incoming,
    settings: &Settings<'_>,
    intended: Instant,
    stats: &mut Stats,
) -> Result<(), Failure> {
    let mut parser = SseParser::new(settings.max_frame);
    let mut read = 0usize;
    let mut last_token: Option<Instant> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Failure::Io)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read += data.len();
        if read > settings.max_body {
            return Err(Failure::BodyTooLarge);
        }
        let now = Instant::now();
        let mut tokens = 0u64;
        parser
            .feed(&data, |f| {
                tokens += u64::from(settings.template.is_token(&f))
            })
            .map_err(|_| Failure::FrameTooLarge)?;
        for _ in 0..tokens {
            match last_token {
                None => stats::record(&mut stats.ttft, now - intended),
                Some(previous) => stats::record(&mut stats.itl, now - previous),
            }
            last_token = Some(now);
        }
        stats.tokens += tokens;
    }
    if last_token.is_none() || parser.has_partial_frame() {
        return Err(Failure::Truncated);
    }
    Ok(())
}
