//! Drives a streaming generation: a spawned task that sends each SSE event
//! of a [`Completion`] when its simulated delay has elapsed.
//!
//! Delays are measured against deadlines from the start of the stream, so
//! timer granularity does not accumulate over many tokens. While waiting,
//! the task also watches for the client going away (the body, and so the
//! channel's receiver, dropped) and stops at once.

use std::time::Duration;

use tokio::sync::mpsc::Sender;
use tokio::time::{sleep_until, Instant};

use crate::body::{MockBody, StreamItem};
use crate::formats::Completion;
use crate::stats::Inflight;

/// Timing and fault settings of one stream.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    pub ttft_ms: u64,
    pub itl_ms: u64,
    /// Cut the connection after this many token events.
    pub drop_after_tokens: Option<u64>,
    /// Go silent after this many token events, the connection kept open (a hung engine).
    pub stall_after_tokens: Option<u64>,
}

/// Starts generating in the background and returns the response body.
pub fn spawn(completion: Completion, pacing: Pacing, inflight: Inflight) -> MockBody {
    let (tx, body) = MockBody::channel(inflight);
    tokio::spawn(drive(tx, completion, pacing));
    body
}

async fn drive(tx: Sender<StreamItem>, c: Completion, pacing: Pacing) {
    let mut deadline = Instant::now();
    for event in c.stream_start() {
        if tx.send(StreamItem::Data(event)).await.is_err() {
            return;
        }
    }
    let total = c.completion_tokens;
    let cut = pacing.drop_after_tokens.map(|n| n.min(total));
    for i in 0..total {
        if cut == Some(i) {
            abort_after_flush(&tx).await;
            return;
        }
        if pacing.stall_after_tokens == Some(i) {
            // Silent until the client gives up; the receiver's drop ends the task.
            tx.closed().await;
            return;
        }
        let delay = if i == 0 {
            pacing.ttft_ms
        } else {
            pacing.itl_ms
        };
        if !wait(&tx, &mut deadline, delay).await {
            return;
        }
        if tx.send(StreamItem::Data(c.stream_token(i))).await.is_err() {
            return;
        }
    }
    if total == 0 && !wait(&tx, &mut deadline, pacing.ttft_ms).await {
        return;
    }
    if cut.is_some() {
        // Every token was sent; the crash comes before the final events.
        abort_after_flush(&tx).await;
        return;
    }
    for event in c.stream_end() {
        if tx.send(StreamItem::Data(event)).await.is_err() {
            return;
        }
    }
}

/// How long the connection gets to write out the last events before the
/// simulated crash.
const FLUSH_GRACE: Duration = Duration::from_millis(20);

/// Cuts the connection once the events already sent have reached the
/// client: hyper discards frames it has buffered but not yet written when
/// a body fails, so the client would otherwise miss the last tokens.
async fn abort_after_flush(tx: &Sender<StreamItem>) {
    // Wait until the body has taken every queued event ...
    while tx.capacity() < tx.max_capacity() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
            _ = tx.closed() => return,
        }
    }
    // ... and the connection has had a moment to write it out.
    tokio::select! {
        _ = tokio::time::sleep(FLUSH_GRACE) => {}
        _ = tx.closed() => return,
    }
    let _ = tx.send(StreamItem::Abort).await;
}

/// Advances the deadline by `delay_ms` and sleeps until it, unless the
/// client leaves first. Returns whether the stream should go on.
async fn wait(tx: &Sender<StreamItem>, deadline: &mut Instant, delay_ms: u64) -> bool {
    if delay_ms == 0 {
        // No timer at all on the zero-delay benchmark path.
        return !tx.is_closed();
    }
    match deadline.checked_add(Duration::from_millis(delay_ms)) {
        Some(next) => {
            *deadline = next;
            tokio::select! {
                _ = sleep_until(next) => true,
                _ = tx.closed() => false,
            }
        }
        // A delay beyond the clock's range: the token never comes.
        None => {
            tx.closed().await;
            false
        }
    }
}

/// Time a non-streaming response takes to generate `tokens` tokens.
pub fn generation_time(ttft_ms: u64, itl_ms: u64, tokens: u64) -> Duration {
    let itl_total = itl_ms.saturating_mul(tokens.saturating_sub(1));
    Duration::from_millis(ttft_ms.saturating_add(itl_total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Completion, Finish};
    use crate::prompt::Api;
    use crate::stats::Stats;
    use http_body_util::BodyExt;
    use std::sync::Arc;

    fn completion(tokens: u64) -> Completion {
        Completion {
            api: Api::Completions,
            id: "x".to_string(),
            model: "m".to_string(),
            created: 0,
            prompt_tokens: 1,
            cached_tokens: 0,
            completion_tokens: tokens,
            finish: Finish::Stop,
            include_usage: false,
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    fn pacing(ttft_ms: u64, itl_ms: u64, drop_after_tokens: Option<u64>) -> Pacing {
        Pacing {
            ttft_ms,
            itl_ms,
            drop_after_tokens,
            stall_after_tokens: None,
        }
    }

    #[test]
    fn full_stream_with_delays() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let start = Instant::now();
            let body = spawn(
                completion(3),
                pacing(30, 10, None),
                Inflight::new(stats.clone()),
            );
            let bytes = body.collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&bytes);
            assert_eq!(text.matches("tok").count(), 3);
            assert!(text.ends_with("data: [DONE]\n\n"));
            let elapsed = start.elapsed();
            assert!(elapsed >= Duration::from_millis(50), "{elapsed:?}");
            assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
            assert_eq!(stats.inflight(), 0);
        });
    }

    #[test]
    fn drop_after_tokens_ends_in_error() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let mut body = spawn(
                completion(5),
                pacing(0, 0, Some(2)),
                Inflight::new(stats.clone()),
            );
            let mut tokens = 0;
            loop {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        let data = frame.into_data().unwrap_or_default();
                        tokens += String::from_utf8_lossy(&data).matches("tok").count();
                    }
                    Some(Err(_)) => break,
                    None => panic!("stream ended cleanly despite drop_after_tokens"),
                }
            }
            assert_eq!(tokens, 2);
            drop(body);
            assert_eq!(stats.to_json()["cancelled"], 0);
        });
    }

    #[test]
    fn stall_after_tokens_goes_silent_without_ending() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let mut body = spawn(
                completion(5),
                Pacing {
                    stall_after_tokens: Some(2),
                    ..pacing(0, 0, None)
                },
                Inflight::new(stats.clone()),
            );
            let mut text = String::new();
            let silent = loop {
                match tokio::time::timeout(Duration::from_millis(300), body.frame()).await {
                    Ok(Some(Ok(frame))) => {
                        let data = frame.into_data().unwrap_or_default();
                        text.push_str(&String::from_utf8_lossy(&data));
                    }
                    Ok(other) => panic!("stream ended despite stall_after_tokens: {other:?}"),
                    Err(_) => break true,
                }
            };
            assert!(silent);
            assert_eq!(text.matches("tok").count(), 2);
            assert!(!text.contains("[DONE]"));
        });
    }

    #[test]
    fn client_leaving_stops_the_generator() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let (tx, mut body) = MockBody::channel(Inflight::new(stats.clone()));
            let start = Instant::now();
            let task = tokio::spawn(drive(tx, completion(100), pacing(0, 1000, None)));
            assert!(body.frame().await.is_some());
            drop(body);
            assert_eq!(stats.to_json()["cancelled"], 1);
            assert_eq!(stats.inflight(), 0);
            task.await.unwrap();
            // Stopped during its first wait, not after 99 more seconds.
            assert!(start.elapsed() < Duration::from_millis(900));
        });
    }

    #[test]
    fn absurd_delays_do_not_panic() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let (tx, body) = MockBody::channel(Inflight::new(stats.clone()));
            let task = tokio::spawn(drive(tx, completion(2), pacing(u64::MAX, u64::MAX, None)));
            tokio::task::yield_now().await;
            drop(body);
            task.await.unwrap();
        });
    }

    #[test]
    fn non_stream_generation_time() {
        assert_eq!(generation_time(100, 10, 0), Duration::from_millis(100));
        assert_eq!(generation_time(100, 10, 1), Duration::from_millis(100));
        assert_eq!(generation_time(100, 10, 4), Duration::from_millis(130));
        assert_eq!(
            generation_time(0, u64::MAX, 3),
            Duration::from_millis(u64::MAX)
        );
    }
}
