use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use http_body_util::BodyExt;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::*;
use crate::http::guard::Release;

/// A worker's body the test feeds frame by frame: pending while nothing is queued, over
/// once the feeding end is dropped.
struct Upstream(UnboundedReceiver<Result<Frame<Bytes>, BoxError>>);

impl Body for Upstream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

type Feed = UnboundedSender<Result<Frame<Bytes>, BoxError>>;

fn upstream() -> (Feed, Upstream) {
    let (tx, rx) = unbounded_channel();
    (tx, Upstream(rx))
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// What a tap saw: the frames, and every end it was told of.
#[derive(Default)]
struct Seen {
    frames: Vec<Bytes>,
    ends: Vec<String>,
}

struct Recorder(Arc<Mutex<Seen>>);

impl Tap for Recorder {
    fn on_frame(&mut self, data: &Bytes) {
        if let Ok(mut seen) = self.0.lock() {
            seen.frames.push(data.clone());
        }
    }

    fn on_end(&mut self, end: End<'_>) {
        let end = match end {
            End::Completed => "completed".to_owned(),
            End::Failed(err) => format!("failed: {err}"),
            End::ClientGone => "client gone".to_owned(),
        };
        if let Ok(mut seen) = self.0.lock() {
            seen.ends.push(end);
        }
    }
}

/// Counts its drops.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts its releases.
#[derive(Default)]
struct ReleaseCount(AtomicUsize);

impl Release for ReleaseCount {
    fn release(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The instruments one body carries: a tap, an owned guard and a counted one.
#[derive(Default)]
struct Watch {
    seen: Arc<Mutex<Seen>>,
    dropped: Arc<AtomicUsize>,
    released: Arc<ReleaseCount>,
}

impl Watch {
    fn on<B: Body>(&self, mut body: RespBody<B>) -> RespBody<B> {
        body.tap(Box::new(Recorder(self.seen.clone())))
            .hold(Guard::new(DropCount(self.dropped.clone())))
            .keep_active(Guard::counted(self.released.clone()));
        body
    }

    /// How many times each guard was released.
    fn released(&self) -> (usize, usize) {
        (
            self.dropped.load(Ordering::SeqCst),
            self.released.0.load(Ordering::SeqCst),
        )
    }

    fn frames(&self) -> Vec<Bytes> {
        self.seen
            .lock()
            .map(|s| s.frames.clone())
            .unwrap_or_default()
    }

    fn ends(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.ends.clone()).unwrap_or_default()
    }

    /// Once the body is gone: the tap saw `frames` and the one end `end`, and each guard
    /// was released once.
    fn assert_settled(&self, frames: &[&str], end: &str) {
        assert_eq!(self.frames(), frames);
        assert_eq!(self.ends(), [end]);
        assert_eq!(self.released(), (1, 1));
    }

    /// A relay of a worker that has sent `a` so far, by `deadline`, with its first frame
    /// read.
    async fn relay_after_a(&self, deadline: Instant) -> (Feed, Pin<Box<RespBody<Upstream>>>) {
        let (feed, up) = upstream();
        let mut body = Box::pin(self.on(RespBody::relay(up, deadline, None)));
        feed.send(Ok(Frame::data(Bytes::from_static(b"a"))))
            .expect("feed");
        assert_eq!(next_data(&mut body).await, "a");
        (feed, body)
    }

    /// A generated stream whose producer has sent `one`, not read yet.
    async fn generated_after_one(&self) -> (FrameSender, Pin<Box<RespBody>>) {
        let (tx, body) = RespBody::generated(4);
        tx.send(Bytes::from_static(b"one")).await.expect("room");
        (tx, Box::pin(self.on(body)))
    }
}

async fn next_data<B>(body: &mut Pin<Box<RespBody<B>>>) -> Bytes
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let frame = body.frame().await.expect("a frame").expect("no error");
    frame.into_data().expect("a data frame")
}

async fn next_error<B>(body: &mut Pin<Box<RespBody<B>>>) -> BoxError
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match body.frame().await {
        Some(Err(err)) => err,
        _ => panic!("expected an error"),
    }
}

/// Polls `fut` once: whether it finished at once.
async fn ready_now<F: Future>(fut: Pin<&mut F>) -> bool {
    let mut fut = fut;
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await
}

#[tokio::test]
async fn relay_passes_frames_untouched_and_in_order() {
    let (feed, up) = upstream();
    let chunks = [
        Bytes::from_static(b"data: one\n\n"),
        Bytes::from_static(b"data: two\n\n"),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ];
    for chunk in &chunks {
        feed.send(Ok(Frame::data(chunk.clone()))).expect("feed");
    }
    let mut trailers = HeaderMap::new();
    trailers.insert("x-end", http::HeaderValue::from_static("1"));
    feed.send(Ok(Frame::trailers(trailers.clone())))
        .expect("feed");
    drop(feed);

    let mut body = Box::pin(RespBody::relay(up, far(), None));
    for chunk in &chunks {
        let got = next_data(&mut body).await;
        assert_eq!(got, chunk);
        assert_eq!(got.as_ptr(), chunk.as_ptr(), "relayed without a copy");
    }
    let frame = body.frame().await.expect("trailers").expect("no error");
    assert_eq!(frame.into_trailers().ok(), Some(trailers));
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn relay_that_completes_is_tapped_and_released_once() {
    let watch = Watch::default();
    let (feed, mut body) = watch.relay_after_a(far()).await;
    assert_eq!(watch.released(), (0, 0), "held while the stream runs");
    feed.send(Ok(Frame::data(Bytes::from_static(b"b"))))
        .expect("feed");
    assert_eq!(next_data(&mut body).await, "b");
    drop(feed);
    assert!(body.frame().await.is_none());
    assert_eq!(watch.released(), (1, 1), "released at the end");
    drop(body);
    watch.assert_settled(&["a", "b"], "completed");
}

#[tokio::test]
async fn relay_worker_error_ends_the_stream_with_it() {
    let watch = Watch::default();
    let (feed, mut body) = watch.relay_after_a(far()).await;
    feed.send(Err("worker reset".into())).expect("feed");
    let err = next_error(&mut body).await;
    assert_eq!(err.to_string(), "worker reset");
    assert_eq!(watch.released(), (1, 1), "released at the error");
    drop(body);
    watch.assert_settled(&["a"], "failed: worker reset");
}

#[tokio::test]
async fn relay_past_its_deadline_fails_with_deadline_exceeded() {
    let watch = Watch::default();
    let deadline = Instant::now() + Duration::from_millis(50);
    let (feed, mut body) = watch.relay_after_a(deadline).await;
    // The worker goes quiet without ending its body.
    let err = next_error(&mut body).await;
    assert!(err.is::<DeadlineExceeded>());
    assert!(Instant::now() >= deadline);
    assert_eq!(watch.released(), (1, 1), "released at the deadline");
    drop(body);
    assert!(feed.is_closed(), "the worker's body is dropped with ours");
    watch.assert_settled(&["a"], &format!("failed: {DeadlineExceeded}"));
}

#[tokio::test]
async fn client_gone_mid_stream_is_one_end_and_one_release() {
    let watch = Watch::default();
    let (feed, body) = watch.relay_after_a(far()).await;
    assert_eq!(watch.released(), (0, 0));
    drop(body);
    assert!(feed.is_closed(), "the worker's body is dropped with ours");
    watch.assert_settled(&["a"], "client gone");
}

#[tokio::test]
async fn body_dropped_once_it_says_it_has_ended_is_complete() {
    // hyper drops a body without polling it again once `is_end_stream` is true.
    let watch = Watch::default();
    let mut body = Box::pin(watch.on(RespBody::full(Bytes::from_static(b"whole"))));
    assert_eq!(next_data(&mut body).await, "whole");
    assert!(body.is_end_stream());
    drop(body);
    let empty = watch.on(RespBody::empty());
    assert!(empty.is_end_stream());
    drop(empty);
    assert_eq!(watch.frames(), ["whole"]);
    assert_eq!(watch.ends(), ["completed", "completed"]);
    assert_eq!(watch.released(), (2, 2));
}

#[tokio::test]
async fn generated_stream_delivers_frames_with_backpressure_then_finishes() {
    let watch = Watch::default();
    let (tx, body) = RespBody::generated(1);
    let mut body = Box::pin(watch.on(body));
    tx.send(Bytes::from_static(b"one"))
        .await
        .expect("room for one");
    {
        let blocked = tx.send(Bytes::from_static(b"two"));
        tokio::pin!(blocked);
        assert!(
            !ready_now(blocked.as_mut()).await,
            "full until the client reads"
        );
        assert_eq!(next_data(&mut body).await, "one");
        assert!(ready_now(blocked.as_mut()).await, "room once it has");
    }
    assert_eq!(next_data(&mut body).await, "two");
    assert!(!body.is_end_stream());
    tx.finish().await;
    assert!(body.frame().await.is_none(), "a clean end");
    assert!(body.is_end_stream());
    assert_eq!(watch.released(), (1, 1));
    drop(body);
    watch.assert_settled(&["one", "two"], "completed");
}

#[tokio::test]
async fn generated_stream_that_fails_ends_with_the_error() {
    let watch = Watch::default();
    let (tx, mut body) = watch.generated_after_one().await;
    tx.fail("engine stopped").await;
    assert_eq!(next_data(&mut body).await, "one");
    assert_eq!(next_error(&mut body).await.to_string(), "engine stopped");
    drop(body);
    watch.assert_settled(&["one"], "failed: engine stopped");
}

#[tokio::test]
async fn generated_stream_whose_producer_is_dropped_is_unfinished() {
    let watch = Watch::default();
    let (tx, mut body) = watch.generated_after_one().await;
    drop(tx);
    assert_eq!(next_data(&mut body).await, "one");
    assert!(next_error(&mut body).await.is::<Unfinished>());
    assert!(!matches!(body.frame().await, Some(Ok(_))));
    drop(body);
    watch.assert_settled(&["one"], &format!("failed: {Unfinished}"));
}

#[tokio::test]
async fn producer_learns_the_client_has_gone() {
    let watch = Watch::default();
    let (tx, mut body) = watch.generated_after_one().await;
    assert_eq!(next_data(&mut body).await, "one");
    drop(body);
    assert!(tx.send(Bytes::from_static(b"two")).await.is_err());
    watch.assert_settled(&["one"], "client gone");
}

#[tokio::test]
async fn every_held_guard_is_kept_to_the_end_and_released_once() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let counted = Arc::new(ReleaseCount::default());
    let mut body = RespBody::full(Bytes::from_static(b"x"));
    body.hold(Guard::counted(counted.clone()))
        .hold(Guard::new(DropCount(dropped.clone())))
        .hold(Guard::new(DropCount(dropped.clone())));
    let mut body = Box::pin(body);
    assert_eq!(
        (
            dropped.load(Ordering::SeqCst),
            counted.0.load(Ordering::SeqCst)
        ),
        (0, 0),
        "a third guard must not push out the second"
    );
    assert_eq!(next_data(&mut body).await, Bytes::from_static(b"x"));
    drop(body);
    assert_eq!(
        (
            dropped.load(Ordering::SeqCst),
            counted.0.load(Ordering::SeqCst)
        ),
        (2, 1)
    );
}

/// Counts the failures a terminal reports.
#[derive(Default)]
struct FailureCount(AtomicUsize);

impl CountFailure for FailureCount {
    fn count(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn relay_silent_past_the_stall_limit_fails_as_stalled() {
    let watch = Watch::default();
    let (feed, up) = upstream();
    let stall = Duration::from_millis(60);
    let mut body = Box::pin(watch.on(RespBody::relay(up, far(), Some(stall))));
    feed.send(Ok(Frame::data(Bytes::from_static(b"a"))))
        .expect("feed");
    assert_eq!(next_data(&mut body).await, "a");
    let quiet_from = Instant::now();
    let err = next_error(&mut body).await;
    assert!(err.is::<Stalled>(), "{err}");
    assert!(quiet_from.elapsed() >= stall);
    assert!(
        feed.is_closed(),
        "the worker's body is dropped at the failure"
    );
    drop(body);
    watch.assert_settled(&["a"], &format!("failed: {}", Stalled { after: stall }));
}

/// A relay of a fresh worker body with a far deadline and the stall limit `stall`.
fn relay_with_stall_limit(stall: Duration) -> (Feed, Pin<Box<RespBody<Upstream>>>) {
    let (feed, up) = upstream();
    (feed, Box::pin(RespBody::relay(up, far(), Some(stall))))
}

/// Feeds `count` one-byte frames 30 ms apart, each read from `body` as it comes.
async fn frames_every_30_ms(feed: &Feed, body: &mut Pin<Box<RespBody<Upstream>>>, count: usize) {
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(30)).await;
        feed.send(Ok(Frame::data(Bytes::from_static(b"t"))))
            .expect("feed");
        assert_eq!(next_data(body).await, "t");
    }
}

#[tokio::test]
async fn frames_keep_a_relay_from_stalling_without_a_timer_per_frame() {
    let stall = Duration::from_millis(80);
    let (feed, mut body) = relay_with_stall_limit(stall);
    // Frames every 30 ms for well past the stall limit: the timer fires early, is re-armed
    // from the last frame, and never fails the relay.
    frames_every_30_ms(&feed, &mut body, 8).await;
    drop(feed);
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn silence_after_a_run_of_frames_fails_one_stall_limit_after_the_last() {
    let stall = Duration::from_millis(80);
    let (feed, mut body) = relay_with_stall_limit(stall);
    frames_every_30_ms(&feed, &mut body, 6).await;
    // The silence is timed from the relay's first wait after the last frame, and the
    // timer is brought forward to it: not left at the deadline, nor a limit late.
    let quiet_from = Instant::now();
    let err = next_error(&mut body).await;
    assert!(err.is::<Stalled>(), "{err}");
    let quiet = quiet_from.elapsed();
    assert!(quiet >= stall && quiet < stall * 3, "{quiet:?}");
}

#[tokio::test]
async fn without_a_stall_limit_only_the_deadline_ends_a_silent_relay() {
    let (_feed, up) = upstream();
    let deadline = Instant::now() + Duration::from_millis(120);
    let mut body = Box::pin(RespBody::relay(up, deadline, None));
    let err = next_error(&mut body).await;
    assert!(err.is::<DeadlineExceeded>());
    assert!(Instant::now() >= deadline);
}

#[tokio::test]
async fn a_deadline_before_the_stall_limit_wins() {
    let (_feed, up) = upstream();
    let deadline = Instant::now() + Duration::from_millis(50);
    let mut body = Box::pin(RespBody::relay(up, deadline, Some(Duration::from_secs(60))));
    assert!(next_error(&mut body).await.is::<DeadlineExceeded>());
}

#[tokio::test]
async fn relayed_sse_that_breaks_off_ends_with_its_terminal_event_and_cleanly() {
    let watch = Watch::default();
    let failures = Arc::new(FailureCount::default());
    let (feed, up) = upstream();
    let mut relayed = RespBody::relay(up, far(), None);
    relayed.end_with(Terminal::new(Dialect::OpenAi, failures.clone()));
    let mut body = Box::pin(watch.on(relayed));
    feed.send(Ok(Frame::data(Bytes::from_static(b"data: a\n\n"))))
        .expect("feed");
    assert_eq!(next_data(&mut body).await, "data: a\n\n");
    feed.send(Err("worker reset".into())).expect("feed");
    let event = next_data(&mut body).await;
    assert_eq!(
        event,
        terminal::render(
            Dialect::OpenAi,
            &crate::http::error::GatewayError::UpstreamBroken,
            0
        )
    );
    assert!(
        feed.is_closed(),
        "the worker's body is dropped at the failure"
    );
    assert_eq!(
        watch.released(),
        (1, 0),
        "the request's holdings go at once"
    );
    assert!(body.is_end_stream(), "the event is the last frame");
    assert!(body.frame().await.is_none());
    assert_eq!(failures.0.load(Ordering::SeqCst), 1);
    drop(body);
    watch.assert_settled(&["data: a\n\n"], "failed: worker reset");
}

#[tokio::test]
async fn a_stalled_responses_stream_continues_its_sequence() {
    let failures = Arc::new(FailureCount::default());
    let (feed, up) = upstream();
    let mut body = RespBody::relay(up, far(), Some(Duration::from_millis(40)));
    body.end_with(Terminal::new(Dialect::Responses, failures.clone()));
    let mut body = Box::pin(body);
    let event = Bytes::from_static(
        b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":5}\n\n",
    );
    feed.send(Ok(Frame::data(event.clone()))).expect("feed");
    assert_eq!(next_data(&mut body).await, event);
    let last = next_data(&mut body).await;
    let text = String::from_utf8_lossy(&last);
    assert!(text.starts_with("event: response.failed\n"), "{text}");
    assert!(text.contains("\"sequence_number\":6"), "{text}");
    assert!(text.contains("\"worker_timeout\""), "{text}");
    assert!(body.frame().await.is_none());
    assert_eq!(failures.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_gone_is_no_stream_failure() {
    let failures = Arc::new(FailureCount::default());
    let (feed, up) = upstream();
    let mut body = RespBody::relay(up, far(), None);
    body.end_with(Terminal::new(Dialect::Messages, failures.clone()));
    let mut body = Box::pin(body);
    feed.send(Ok(Frame::data(Bytes::from_static(b"x"))))
        .expect("feed");
    assert_eq!(next_data(&mut body).await, "x");
    drop(body);
    assert!(feed.is_closed());
    assert_eq!(failures.0.load(Ordering::SeqCst), 0);
}

/// A response is moved a dozen times between the worker's answer and hyper (attempt,
/// outcome, guards, route labels), each move a copy of the whole value: the relay's state
/// lives behind one box so that those copies stay small.
#[test]
fn a_response_stays_small_to_move() {
    let size = std::mem::size_of::<http::Response<RespBody>>();
    assert!(size <= 320, "Response<RespBody> is {size} bytes");
}
