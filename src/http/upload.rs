//! Request bodies on their way from the client to a worker.
//!
//! A body streams through [`LimitedBody`], which counts it against `--max-payload-size`
//! and cuts it off after `--request-body-idle-timeout-secs` of silence. When something
//! must look inside first (routing, a retry's replay), [`read_prefix`] reads it up to a
//! cap, charging every byte it holds to the gateway-wide budget ([`HoldBudget`]); a body
//! that passes the cap, or finds the budget full, is handed back as a [`LimitedBody`] that
//! sends the held prefix first and then the rest as it arrives. So no request holds more
//! than its cap, and all of them together no more than `--max-buffered-request-total-bytes`.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::http::request_body::RequestBody;
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::{Instant, Sleep};

use super::guard::Guard;
use super::BoxError;

/// The client's body passed `--max-payload-size`.
#[derive(Debug)]
pub struct BodyTooLarge;

impl fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request body exceeds the maximum payload size")
    }
}

impl StdError for BodyTooLarge {}

/// The client sent nothing of its body for `--request-body-idle-timeout-secs`, or had not
/// sent all of it within `--request-body-timeout-secs`.
#[derive(Debug)]
pub struct BodyStalled;

impl fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body stalled")
    }
}

impl StdError for BodyStalled {}

/// The client's body broke off (reset, malformed chunking). Wraps hyper's error so that a
/// failed exchange can tell the client's fault from the worker's.
#[derive(Debug)]
pub struct BodyBroken(hyper::Error);

impl fmt::Display for BodyBroken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the request body broke off: {}", self.0)
    }
}

impl StdError for BodyBroken {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.0)
    }
}

/// Why a request body could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// More than the limit arrived.
    TooLarge,
    /// The client's body broke off (reset, malformed chunking).
    Broken,
    /// The body did not arrive in time (deadline, or too long a silence).
    TooSlow,
}

/// The client's fault in `err`'s source chain, if the body is what failed; `None` when
/// the failure is the worker's (or the connection's towards it).
pub fn client_fault(err: &(dyn StdError + 'static)) -> Option<ReadError> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<BodyTooLarge>() {
            return Some(ReadError::TooLarge);
        }
        if e.is::<BodyStalled>() {
            return Some(ReadError::TooSlow);
        }
        if e.is::<BodyBroken>() {
            return Some(ReadError::Broken);
        }
        cur = e.source();
    }
    None
}

/// A client request body on its way to a worker: streamed (after any prefix the gateway
/// read first), and cut off with [`BodyTooLarge`] as soon as more than `limit` bytes have
/// passed (covers chunked bodies, whose size is unknown up front; a declared
/// Content-Length over the limit is refused before reading) or with [`BodyStalled`] after
/// too long a silence or past the whole-body deadline; or already read whole, when routing had to look inside it.
#[derive(Debug)]
pub struct LimitedBody {
    source: Source,
    remaining: u64,
    idle: Option<Idle>,
    /// The budget held by the prefix; returned once the prefix is handed on.
    charge: Option<Guard>,
}

#[derive(Debug)]
enum Source {
    /// The prefix read so far (sent first, frame by frame), then the rest of the stream.
    Stream {
        held: VecDeque<Bytes>,
        inner: RequestBody,
    },
    /// Sent as one frame; `None` once sent.
    Whole(Option<Bytes>),
}

/// How long a client may take over its body: at most `idle` of silence at a time, and the
/// whole body by `whole_by` (so a body trickled just faster than the idle timeout still
/// ends: each wait is cut at whichever comes first).
#[derive(Clone, Copy, Debug)]
pub struct BodyTiming {
    pub idle: Duration,
    pub whole_by: Instant,
}

/// The idle timer: armed when the next frame is asked for and not there yet, so time the
/// worker spends not reading (backpressure) never counts against the client. Created on
/// first use: a body that is already there when asked for never allocates one.
#[derive(Debug)]
struct Idle {
    timing: BodyTiming,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl LimitedBody {
    /// Streams `inner`, within `limit` bytes and, with `timing`, within its time bounds.
    pub fn new(inner: RequestBody, limit: u64, timing: Option<BodyTiming>) -> LimitedBody {
        LimitedBody {
            source: Source::Stream {
                held: VecDeque::new(),
                inner,
            },
            remaining: limit,
            idle: timing.map(|timing| Idle {
                timing,
                timer: None,
                armed: false,
            }),
            charge: None,
        }
    }

    /// A body already read (and checked against the limit) by the gateway.
    pub fn whole(bytes: Bytes) -> LimitedBody {
        LimitedBody {
            remaining: bytes.len() as u64,
            source: Source::Whole(Some(bytes)),
            idle: None,
            charge: None,
        }
    }

    /// The next frame of the client's stream, counted and timed.
    fn poll_stream(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Source::Stream { inner, .. } = &mut self.source else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        let frame = match (polled, self.idle.as_mut()) {
            (Poll::Pending, Some(idle)) => {
                if !idle.armed {
                    idle.armed = true;
                    let at = (Instant::now() + idle.timing.idle).min(idle.timing.whole_by);
                    match idle.timer.as_mut() {
                        Some(timer) => timer.as_mut().reset(at),
                        None => idle.timer = Some(Box::pin(tokio::time::sleep_until(at))),
                    }
                }
                if let Some(timer) = idle.timer.as_mut() {
                    ready!(timer.as_mut().poll(cx));
                    return Poll::Ready(Some(Err(Box::new(BodyStalled))));
                }
                return Poll::Pending;
            }
            (Poll::Pending, None) => return Poll::Pending,
            (Poll::Ready(None), _) => return Poll::Ready(None),
            (Poll::Ready(Some(Err(e))), _) => {
                return Poll::Ready(Some(Err(Box::new(BodyBroken(e)))))
            }
            (Poll::Ready(Some(Ok(frame))), _) => frame,
        };
        if let Some(idle) = self.idle.as_mut() {
            idle.armed = false;
        }
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
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.source {
            Source::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Source::Stream { held, .. } => match held.pop_front() {
                Some(bytes) => {
                    if held.is_empty() {
                        self.charge = None;
                    }
                    Poll::Ready(Some(Ok(Frame::data(bytes))))
                }
                None => self.poll_stream(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Stream { held, inner } => held.is_empty() && inner.is_end_stream(),
            Source::Whole(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Stream { held, inner } => {
                let prefix: u64 = held.iter().map(|b| b.len() as u64).sum();
                let rest = inner.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(prefix));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(prefix));
                }
                hint
            }
            Source::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// One request's share of the gateway-wide budget for held request bytes
/// (`--max-buffered-request-total-bytes`), given back when dropped. The account is
/// admission's; [`read_prefix`] only asks it to grow.
pub trait HoldBudget: Send + 'static {
    /// Adds `bytes` to this share if the budget has room; otherwise changes nothing and
    /// returns `false`.
    fn grow(&mut self, bytes: u64) -> bool;
}

/// What [`read_prefix`] read.
#[derive(Debug)]
pub enum Prefix<C> {
    /// The whole body, within the cap, and the budget it holds.
    Whole(Bytes, C),
    /// The body goes on past what may be held: the prefix read so far, then the rest.
    Partial {
        body: LimitedBody,
        /// The gateway-wide budget, not the cap, ended the read.
        budget_full: bool,
    },
}

/// Reads `body` until it ends, more than `cap` bytes have arrived, or `charge` cannot grow
/// by the next frame; within `deadline` (408 territory, as is a stall the body itself
/// notices). Held bytes are charged as they arrive; the frame that passes the cap or the
/// budget is the only one held uncharged, for as long as it takes to hand it on.
pub async fn read_prefix<C: HoldBudget>(
    mut body: LimitedBody,
    cap: u64,
    mut charge: C,
    deadline: Instant,
) -> Result<Prefix<C>, ReadError> {
    // Most bodies arrive as one frame: it is held on its own, and a queue is allocated
    // only for the frames after it.
    let mut held = Held::default();
    let mut total: u64 = 0;
    let ended = {
        let read = async {
            loop {
                // A body whose length is known ends with its last byte: asking hyper for the
                // end as well would be one more turn through its body channel (a lock and a
                // waker registration) for nothing.
                if body.is_end_stream() {
                    return Ok(None);
                }
                let Some(frame) = body.frame().await else {
                    return Ok(None);
                };
                let frame =
                    frame.map_err(|e| client_fault(e.as_ref()).unwrap_or(ReadError::Broken))?;
                let Ok(data) = frame.into_data() else {
                    // Trailers: the body is over; they are not relayed.
                    continue;
                };
                let len = data.len() as u64;
                total = total.saturating_add(len);
                let within_cap = total <= cap;
                let charged = within_cap && charge.grow(len);
                held.push(data);
                if !charged {
                    return Ok(Some(!within_cap));
                }
            }
        };
        // A small body is usually in hand already: read first, and set up the timer (a handle
        // on the runtime's clock, cloned and dropped) only when the body has to be waited for.
        let mut read = pin!(read);
        match poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
            Poll::Ready(ended) => ended?,
            Poll::Pending => tokio::time::timeout_at(deadline, read)
                .await
                .map_err(|_| ReadError::TooSlow)??,
        }
    };
    match ended {
        None => Ok(Prefix::Whole(held.concat(total), charge)),
        Some(over_cap) => {
            if let Source::Stream { held: prefix, .. } = &mut body.source {
                *prefix = held.into_queue();
            }
            body.charge = Some(Guard::new(charge));
            Ok(Prefix::Partial {
                body,
                budget_full: !over_cap,
            })
        }
    }
}

/// Reads a request body whole, within `limit` bytes and before `deadline`. For
/// administration bodies (small, never forwarded).
pub async fn read_whole(
    body: RequestBody,
    limit: u64,
    deadline: Instant,
) -> Result<Bytes, ReadError> {
    let limited = LimitedBody::new(body, limit, None);
    match tokio::time::timeout_at(deadline, limited.collect()).await {
        Err(_) => Err(ReadError::TooSlow),
        Ok(Err(err)) => Err(client_fault(err.as_ref()).unwrap_or(ReadError::Broken)),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// The frames [`read_prefix`] holds, in order: the first on its own, the rest (rare) in a
/// queue allocated when the second arrives.
#[derive(Default)]
struct Held {
    first: Option<Bytes>,
    more: VecDeque<Bytes>,
}

impl Held {
    fn push(&mut self, data: Bytes) {
        if self.first.is_none() {
            self.first = Some(data);
        } else {
            self.more.push_back(data);
        }
    }

    /// The frames as one buffer; a body that came in one frame is not copied.
    fn concat(self, total: u64) -> Bytes {
        let Some(first) = self.first else {
            return Bytes::new();
        };
        if self.more.is_empty() {
            return first;
        }
        let mut out = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
        out.extend_from_slice(&first);
        for bytes in self.more {
            out.extend_from_slice(&bytes);
        }
        out.freeze()
    }

    /// The frames as the queue a partly read body replays first.
    fn into_queue(self) -> VecDeque<Bytes> {
        let mut queue = self.more;
        if let Some(first) = self.first {
            queue.push_front(first);
        }
        queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(frames: &[&'static [u8]]) -> Held {
        let mut held = Held::default();
        for frame in frames {
            held.push(Bytes::from_static(frame));
        }
        held
    }

    #[test]
    fn held_frames_keep_their_order() {
        assert_eq!(held(&[]).concat(0), Bytes::new());
        let one = held(&[b"whole"]);
        assert!(one.more.is_empty(), "one frame needs no queue");
        assert_eq!(one.concat(5), Bytes::from_static(b"whole"));
        assert_eq!(
            held(&[b"a", b"bc", b"d"]).concat(4),
            Bytes::from_static(b"abcd")
        );
        let queue = held(&[b"a", b"bc", b"d"]).into_queue();
        assert_eq!(
            queue,
            [&b"a"[..], b"bc", b"d"].map(Bytes::from_static).to_vec()
        );
        assert_eq!(held(&[b"a"]).into_queue().len(), 1);
        assert!(held(&[]).into_queue().is_empty());
    }
}
