//! Bodies on the data path.
//!
//! Both directions stream frame by frame: a client's request body goes to the worker
//! through [`LimitedBody`] (which only counts bytes), and the worker's response comes back
//! through [`RespBody`] without re-chunking or buffering, so SSE events reach the client as
//! soon as the worker writes them.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::admission::Ticket;
use crate::server::ConnActivity;
use crate::workers::LoadGuard;

/// Boxed error type of both bodies; allocated only when an error actually happens.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// The client's body passed `--max-payload-size`.
#[derive(Debug)]
pub struct BodyTooLarge;

impl fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request body exceeds the maximum payload size")
    }
}

impl StdError for BodyTooLarge {}

/// The worker's response did not finish before the request deadline.
#[derive(Debug)]
pub struct DeadlineExceeded;

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request timeout reached while relaying the response")
    }
}

impl StdError for DeadlineExceeded {}

/// True when `err` (or anything in its source chain) is a [`BodyTooLarge`].
pub fn is_body_too_large(err: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<BodyTooLarge>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Why a request body could not be read whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// More than the limit arrived.
    TooLarge,
    /// The client's body broke off (reset, malformed chunking).
    Broken,
    /// The body did not arrive before the deadline.
    TooSlow,
}

/// Reads a request body whole, within `limit` bytes and before `deadline`. For the routes
/// and policies that must look inside a body; everything else streams it.
pub async fn read_whole(
    body: Incoming,
    limit: u64,
    deadline: tokio::time::Instant,
) -> Result<Bytes, ReadError> {
    use http_body_util::BodyExt;
    let limited = LimitedBody::new(body, limit);
    match tokio::time::timeout_at(deadline, limited.collect()).await {
        Err(_) => Err(ReadError::TooSlow),
        Ok(Err(err)) if is_body_too_large(err.as_ref()) => Err(ReadError::TooLarge),
        Ok(Err(_)) => Err(ReadError::Broken),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// A client request body on its way to a worker: streamed, and cut off with
/// [`BodyTooLarge`] as soon as more than `limit` bytes have passed (covers chunked bodies,
/// whose size is unknown up front; a declared Content-Length over the limit is refused
/// before reading); or already read whole, when routing had to look inside it.
#[derive(Debug)]
pub struct LimitedBody {
    source: Source,
    remaining: u64,
}

#[derive(Debug)]
enum Source {
    Stream(Incoming),
    /// Sent as one frame; `None` once sent.
    Whole(Option<Bytes>),
}

impl LimitedBody {
    pub fn new(inner: Incoming, limit: u64) -> LimitedBody {
        LimitedBody {
            source: Source::Stream(inner),
            remaining: limit,
        }
    }

    /// A body already read (and checked against the limit) by the gateway.
    pub fn whole(bytes: Bytes) -> LimitedBody {
        LimitedBody {
            remaining: bytes.len() as u64,
            source: Source::Whole(Some(bytes)),
        }
    }
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let inner = match &mut self.source {
            Source::Whole(bytes) => return Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Source::Stream(inner) => inner,
        };
        let frame = match ready!(Pin::new(inner).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
            Some(Ok(frame)) => frame,
        };
        if let Some(data) = frame.data_ref() {
            let len = data.len() as u64;
            if len > self.remaining {
                self.remaining = 0;
                return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
            }
            self.remaining -= len;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Stream(inner) => inner.is_end_stream(),
            Source::Whole(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Stream(inner) => inner.size_hint(),
            Source::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

pin_project! {
    /// Ties the relay's bookkeeping to the life of the response body: the worker's load
    /// and the connection's activity count drop exactly when the client has the last byte
    /// or goes away, and the whole exchange is bounded by the request deadline.
    pub struct Relay {
        inner: Incoming,
        #[pin]
        deadline: Sleep,
        load: Option<LoadGuard>,
    }
}

pin_project! {
    /// Every response body the gateway sends.
    #[project = KindProj]
    enum Kind {
        Full { data: Option<Bytes> },
        Relay { #[pin] relay: Relay },
    }
}

pin_project! {
    /// A response body: either generated by the gateway or relayed from a worker.
    pub struct RespBody {
        #[pin]
        kind: Kind,
        activity: Option<ConnActivity>,
        // The request's admission token (and media charge), returned with the last byte.
        ticket: Option<Ticket>,
    }
}

impl RespBody {
    pub fn full(data: Bytes) -> RespBody {
        RespBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            activity: None,
            ticket: None,
        }
    }

    pub fn empty() -> RespBody {
        RespBody {
            kind: Kind::Full { data: None },
            activity: None,
            ticket: None,
        }
    }

    /// Relays a worker's body until it ends, errors, or `deadline` passes.
    pub fn relay(inner: Incoming, deadline: Instant, load: LoadGuard) -> RespBody {
        RespBody {
            kind: Kind::Relay {
                relay: Relay {
                    inner,
                    deadline: tokio::time::sleep_until(deadline.into()),
                    load: Some(load),
                },
            },
            activity: None,
            ticket: None,
        }
    }

    /// Keeps the connection counted as active until this body is done.
    pub fn with_activity(mut self, activity: ConnActivity) -> RespBody {
        self.activity = Some(activity);
        self
    }

    /// Holds the request's admission ticket until this body is done.
    pub fn holding(mut self, ticket: Ticket) -> RespBody {
        self.ticket = Some(ticket);
        self
    }

    /// The bytes of a gateway-generated body (tests and small internal callers).
    pub fn into_full(self) -> Option<Bytes> {
        match self.kind {
            Kind::Full { data } => Some(data.unwrap_or_default()),
            Kind::Relay { .. } => None,
        }
    }
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = match this.kind.project() {
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Relay { relay } => {
                let relay = relay.project();
                match Pin::new(relay.inner).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                    Poll::Ready(Some(Err(e))) => {
                        relay.load.take();
                        Poll::Ready(Some(Err(Box::new(e) as BoxError)))
                    }
                    Poll::Ready(None) => {
                        relay.load.take();
                        Poll::Ready(None)
                    }
                    Poll::Pending => {
                        if relay.deadline.poll(cx).is_ready() {
                            relay.load.take();
                            Poll::Ready(Some(Err(Box::new(DeadlineExceeded) as BoxError)))
                        } else {
                            Poll::Pending
                        }
                    }
                }
            }
        };
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.activity.take();
            this.ticket.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data } => data.is_none(),
            Kind::Relay { relay } => relay.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Relay { relay } => relay.inner.size_hint(),
        }
    }
}
