//! Response bodies on the data path.
//!
//! Every response the gateway sends is a [`RespBody`] of one of three kinds: a full body
//! it built (errors, administration answers); a worker's body relayed frame by frame,
//! without re-chunking or buffering, so SSE events reach the client as soon as the worker
//! writes them; or a stream the gateway produces itself through a [`FrameSender`]. On any
//! of them a [`Tap`] may watch the frames go by, and what must be released at the last
//! byte rides as [`Guard`]s. A relay fails when the worker stalls, breaks off or outlasts
//! the deadline; a relayed SSE stream given a [`Terminal`] then ends with an error event in
//! its dialect rather than truncated. (Request bodies: [`super::request_body`] as the server
//! hands them over, [`super::upload`] on their way to a worker.)
//!
//! Backpressure is hyper's: it polls a body for its next frame only once the previous one
//! is written, so a client that stops reading stops the relay, and the worker's socket
//! buffers fill up instead of the gateway's memory.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::mpsc;
use tokio::time::Sleep;

use super::guard::Guard;
use generated::Msg;
pub use generated::{FrameSender, StreamClosed, Unfinished};
pub use terminal::{CountFailure, Dialect, Terminal};
pub use upstream::UpstreamBody;

mod generated;
pub mod terminal;
#[cfg(test)]
mod tests;
mod upstream;

pub use super::BoxError;

/// The worker's response did not finish before the request deadline.
#[derive(Debug)]
pub struct DeadlineExceeded;

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request timeout reached while relaying the response")
    }
}

impl StdError for DeadlineExceeded {}

/// The worker sent nothing for the stall timeout (`after`) in the middle of its response.
#[derive(Debug)]
pub struct Stalled {
    pub after: Duration,
}

impl fmt::Display for Stalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the worker sent nothing for {} s in the middle of the response",
            self.after.as_secs()
        )
    }
}

impl StdError for Stalled {}

/// Watches a response's data frames as the client is given them, by reference (for
/// storing a response or counting its usage without copying it).
pub trait Tap: Send + 'static {
    /// The next data frame handed to the client.
    fn on_frame(&mut self, data: &Bytes);
    /// How the body ended; called exactly once, after the last `on_frame`.
    fn on_end(&mut self, end: End<'_>);
}

/// How a response body ended.
#[derive(Clone, Copy, Debug)]
pub enum End<'a> {
    /// The client was given the whole body.
    Completed,
    /// The body broke off with this error (the worker's, the deadline's, the producer's);
    /// the client's stream ends with an error, never as if complete.
    Failed(&'a (dyn StdError + Send + Sync + 'static)),
    /// The body was dropped before its end: the client went away (or hyper needed no body,
    /// as for `HEAD`).
    ClientGone,
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Full { data: Option<Bytes> },
        /// A worker's body, bounded by the request deadline and the stall timeout. Boxed:
        /// the relay (a worker connection and a timer) is several times the size of the
        /// other kinds, and a response is moved a dozen times on its way to hyper, each
        /// move copying the whole enum.
        Relay { relay: Pin<Box<Relay<B>>> },
        /// Frames a producer task sends; `None` once the producer has ended the stream.
        Generated { rx: Option<mpsc::Receiver<Msg>> },
        /// A relay that failed: the worker's body is dropped at once (which cancels the
        /// upstream request), and nothing more comes.
        Failed,
    }
}

pin_project! {
    /// A worker's body and what bounds it.
    #[project = RelayProj]
    struct Relay<B> {
        #[pin]
        inner: B,
        // The one timer of the relay, set for the earlier of the deadline and the stall
        // limit; frames only clear `quiet_since`, and the timer is re-armed when it fires
        // early, so the hot path touches no timer.
        #[pin]
        timer: Sleep,
        limits: Limits,
    }
}

/// When a relay gives up on its worker.
struct Limits {
    deadline: tokio::time::Instant,
    /// `--stream-stall-timeout-secs`; `None` when off.
    stall: Option<Duration>,
    /// When the relay began waiting for the worker: stamped the first time it waits after
    /// the head or a frame, and cleared by the next frame. So a stream reads the clock
    /// once per wait, not once per frame and once more at its start, and frames that
    /// arrive together cost one read.
    quiet_since: Option<tokio::time::Instant>,
}

impl Limits {
    /// When the timer should next fire.
    fn next_check(&self) -> tokio::time::Instant {
        match (self.stall, self.quiet_since) {
            (Some(stall), Some(since)) => self.deadline.min(since + stall),
            _ => self.deadline,
        }
    }

    /// The relay is about to wait for its worker: the first wait since the last frame
    /// starts the silence the stall limit measures, and brings the timer forward to it.
    fn waiting(&mut self, mut timer: Pin<&mut Sleep>) {
        if self.stall.is_none() || self.quiet_since.is_some() {
            return;
        }
        self.quiet_since = Some(tokio::time::Instant::now());
        let due = self.next_check();
        if due < timer.deadline() {
            timer.as_mut().reset(due);
        }
    }

    /// The timer fired at `now`: the relay's failure if a limit has passed, else `None`
    /// (it fired for a stall check, and a frame came since).
    fn check(&self, now: tokio::time::Instant) -> Option<BoxError> {
        if now >= self.deadline {
            return Some(Box::new(DeadlineExceeded));
        }
        match (self.stall, self.quiet_since) {
            (Some(stall), Some(since)) if now >= since + stall => {
                Some(Box::new(Stalled { after: stall }))
            }
            _ => None,
        }
    }
}

/// What rides on a body and is settled exactly once, when it ends, fails or is dropped.
struct Riders {
    tap: Option<Box<dyn Tap>>,
    /// The request's holdings (the worker's load, the admission ticket), attached by the
    /// handler that built the response: two slots, so the usual pair needs no allocation to
    /// be held together.
    held: [Option<Guard>; 2],
    /// The connection's activity, attached by the server around whatever the handler built.
    /// A slot of its own so that neither has to know about the other: one slot would make
    /// the server box the pair again, a second allocation per request.
    activity: Option<Guard>,
    /// For a relayed SSE stream: how to end it should the relay fail.
    terminal: Option<Terminal>,
}

impl Riders {
    const NONE: Riders = Riders {
        tap: None,
        held: [None, None],
        activity: None,
        terminal: None,
    };

    /// Tells the tap how the body ended and releases the guards; later calls do nothing.
    fn end(&mut self, end: End<'_>) {
        self.settle(end);
        self.activity = None;
    }

    /// Tells the tap how the request ended and releases its holdings (the worker's load,
    /// the admission ticket), keeping the connection active: a terminal event may still
    /// be on its way to the client.
    fn settle(&mut self, end: End<'_>) {
        if let Some(mut tap) = self.tap.take() {
            tap.on_end(end);
        }
        self.held = [None, None];
    }
}

pin_project! {
    /// A response body: generated by the gateway or relayed from a worker (`B`, an
    /// [`UpstreamBody`] in production; tests relay bodies of their own).
    pub struct RespBody<B: Body = UpstreamBody> {
        #[pin]
        kind: Kind<B>,
        riders: Riders,
    }

    impl<B: Body> PinnedDrop for RespBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // hyper stops polling once `is_end_stream` says the client has it all.
            let end = if this.kind.as_ref().get_ref().is_end_stream() {
                End::Completed
            } else {
                End::ClientGone
            };
            this.riders.end(end);
        }
    }
}

impl RespBody {
    pub fn full(data: Bytes) -> RespBody {
        RespBody::of(Kind::Full {
            data: (!data.is_empty()).then_some(data),
        })
    }

    pub fn empty() -> RespBody {
        RespBody::of(Kind::Full { data: None })
    }

    /// A stream the gateway produces: the returned sender's frames, with backpressure once
    /// `capacity` of them (at least one) wait unread.
    pub fn generated(capacity: usize) -> (FrameSender, RespBody) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            FrameSender::new(tx),
            RespBody::of(Kind::Generated { rx: Some(rx) }),
        )
    }

    /// The bytes of a gateway-generated body (tests and small internal callers).
    pub fn into_full(mut self) -> Option<Bytes> {
        match &mut self.kind {
            Kind::Full { data } => Some(data.take().unwrap_or_default()),
            Kind::Relay { .. } | Kind::Generated { .. } | Kind::Failed => None,
        }
    }
}

impl<B: Body> RespBody<B> {
    fn of(kind: Kind<B>) -> RespBody<B> {
        RespBody {
            kind,
            riders: Riders::NONE,
        }
    }

    /// Relays a worker's body until it ends, errors, `deadline` passes, or the worker sends
    /// nothing for `stall` (`None`: no such limit) in the middle of its response.
    pub fn relay(inner: B, deadline: Instant, stall: Option<Duration>) -> RespBody<B> {
        let limits = Limits {
            deadline: tokio::time::Instant::from_std(deadline),
            stall,
            quiet_since: None,
        };
        RespBody::of(Kind::Relay {
            relay: Box::pin(Relay {
                inner,
                timer: tokio::time::sleep_until(limits.next_check()),
                limits,
            }),
        })
    }

    // The riders are set in place: a body is 160 bytes, and a builder that took it by value
    // and gave it back moved it, and the response around it, twice for each rider on every
    // request.

    /// Ends the stream with `terminal`'s error event, and cleanly, should the relay fail
    /// (for relayed SSE streams: a body of another type ends with an error, as it must).
    pub fn end_with(&mut self, terminal: Terminal) -> &mut Self {
        self.riders.terminal = Some(terminal);
        self
    }

    /// Lets `tap` watch the frames and the end.
    pub fn tap(&mut self, tap: Box<dyn Tap>) -> &mut Self {
        self.riders.tap = Some(tap);
        self
    }

    /// Holds the request's `guard` (its admission ticket, the worker's load) until this
    /// body is done.
    pub fn hold(&mut self, guard: Guard) -> &mut Self {
        match &mut self.riders.held {
            [first @ None, _] => *first = Some(guard),
            [_, second @ None] => *second = Some(guard),
            // More than two: the second slot holds the rest together.
            [_, second] => {
                let kept = second.take();
                *second = Some(Guard::new((kept, guard)));
            }
        }
        self
    }

    /// Keeps the connection counted as active until this body is done.
    pub fn keep_active(&mut self, activity: Guard) -> &mut Self {
        self.riders.activity = Some(activity);
        self
    }
}

impl<B> Kind<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Relay { relay } => {
                let RelayProj {
                    inner,
                    mut timer,
                    limits,
                } = relay.as_mut().project();
                match inner.poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        limits.quiet_since = None;
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => {
                        limits.waiting(timer.as_mut());
                        loop {
                            if timer.as_mut().poll(cx).is_pending() {
                                break Poll::Pending;
                            }
                            if let Some(err) = limits.check(tokio::time::Instant::now()) {
                                break Poll::Ready(Some(Err(err)));
                            }
                            // Fired for a stall check, but frames came since: wait for the
                            // next.
                            timer.as_mut().reset(limits.next_check());
                        }
                    }
                }
            }
            KindProj::Generated { rx } => generated::poll(rx, cx),
            KindProj::Failed => Poll::Ready(None),
        }
    }
}

impl<B: Body> Kind<B> {
    /// Whether the client has been given everything (hyper asks, so as not to poll again;
    /// so does the drop, to tell a finished body from an abandoned one).
    fn is_end_stream(&self) -> bool {
        match self {
            Kind::Full { data } => data.is_none(),
            Kind::Relay { relay } => relay.inner.is_end_stream(),
            Kind::Generated { rx } => rx.is_none(),
            // Ended by an error: never as if complete.
            Kind::Failed => false,
        }
    }
}

impl<B> Body for RespBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.kind.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Some(tap) = this.riders.tap.as_mut() {
                        tap.on_frame(data);
                    }
                    if let Some(terminal) = this.riders.terminal.as_mut() {
                        terminal.saw(data);
                    }
                }
            }
            Poll::Ready(Some(Err(err))) => {
                if matches!(*this.kind, Kind::Relay { .. }) {
                    return relay_failed(this.kind, this.riders, polled);
                }
                this.riders.end(End::Failed(err.as_ref()));
            }
            Poll::Ready(None) => this.riders.end(End::Completed),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.kind.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Relay { relay } => relay.inner.size_hint(),
            Kind::Generated { .. } | Kind::Failed => SizeHint::default(),
        }
    }
}

/// A relay failed (`polled` holds the error): the worker's body goes at once, cancelling
/// the upstream request; the request's holdings are released; and the client gets the
/// terminal event and a clean end, or, without a [`Terminal`], the error.
fn relay_failed<B: Body>(
    mut kind: Pin<&mut Kind<B>>,
    riders: &mut Riders,
    polled: Poll<Option<Result<Frame<Bytes>, BoxError>>>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    kind.set(Kind::Failed);
    let Poll::Ready(Some(Err(err))) = polled else {
        return polled;
    };
    match riders.terminal.take() {
        Some(terminal) => {
            riders.settle(End::Failed(err.as_ref()));
            let event = terminal.broke_off(&err);
            // The event is the body's last frame: hyper ends the chunked body after it.
            kind.set(Kind::Full { data: None });
            Poll::Ready(Some(Ok(Frame::data(event))))
        }
        None => {
            riders.end(End::Failed(err.as_ref()));
            Poll::Ready(Some(Err(err)))
        }
    }
}
