//! The one response body type of the mock: a complete buffer or a live
//! stream of frames fed by a generator task through a channel.
//!
//! A stream can end in three ways, and the body tells them apart:
//! * the generator finishes and drops its sender: a clean end;
//! * the generator sends [`StreamItem::Abort`]: the body yields an error,
//!   which makes hyper cut the connection (HTTP/1.1: no terminating chunk;
//!   HTTP/2: `RST_STREAM`), simulating an engine crash mid-stream;
//! * hyper drops the body before either happened because the client went
//!   away: counted as a cancellation, and the generator notices the closed
//!   channel and stops.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use crate::stats::Inflight;

/// Error yielded by a body (or service) to make hyper drop the connection.
#[derive(Debug)]
pub struct Aborted;

impl std::fmt::Display for Aborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mock worker dropped the connection on purpose")
    }
}

impl std::error::Error for Aborted {}

/// What a generator task sends to a streaming body.
#[derive(Debug)]
pub enum StreamItem {
    Data(Bytes),
    Abort,
}

/// Frames buffered between generator and connection. Small, so that a
/// client that stops reading is noticed quickly.
const STREAM_BUFFER: usize = 8;

pub enum MockBody {
    Full(Option<Bytes>),
    Stream(StreamBody),
}

pub struct StreamBody {
    rx: mpsc::Receiver<StreamItem>,
    ended: bool,
    inflight: Inflight,
}

impl MockBody {
    pub fn empty() -> Self {
        MockBody::Full(None)
    }

    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        if bytes.is_empty() {
            MockBody::Full(None)
        } else {
            MockBody::Full(Some(bytes))
        }
    }

    /// A streaming body plus the sender its generator writes to. The
    /// request stays in flight until the body is dropped.
    pub fn channel(inflight: Inflight) -> (mpsc::Sender<StreamItem>, MockBody) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let body = StreamBody {
            rx,
            ended: false,
            inflight,
        };
        (tx, MockBody::Stream(body))
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Aborted>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(stream) => match stream.rx.poll_recv(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(StreamItem::Data(bytes))) => {
                    Poll::Ready(Some(Ok(Frame::data(bytes))))
                }
                Poll::Ready(Some(StreamItem::Abort)) => {
                    stream.ended = true;
                    Poll::Ready(Some(Err(Aborted)))
                }
                Poll::Ready(None) => {
                    stream.ended = true;
                    Poll::Ready(None)
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(bytes) => bytes.is_none(),
            MockBody::Stream(stream) => stream.ended,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        if !self.ended {
            self.inflight.stats().record_cancelled();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Stats;
    use http_body_util::BodyExt;
    use std::sync::Arc;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn full_body_yields_once() {
        rt().block_on(async {
            let body = MockBody::full("abc");
            assert_eq!(body.size_hint().exact(), Some(3));
            let bytes = body.collect().await.unwrap().to_bytes();
            assert_eq!(&bytes[..], b"abc");
            assert!(MockBody::empty().is_end_stream());
        });
    }

    #[test]
    fn stream_clean_end_is_not_cancelled() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let (tx, body) = MockBody::channel(Inflight::new(stats.clone()));
            tx.send(StreamItem::Data(Bytes::from_static(b"a")))
                .await
                .unwrap();
            drop(tx);
            let bytes = body.collect().await.unwrap().to_bytes();
            assert_eq!(&bytes[..], b"a");
            assert_eq!(stats.to_json()["cancelled"], 0);
            assert_eq!(stats.inflight(), 0);
        });
    }

    #[test]
    fn stream_abort_is_an_error_not_a_cancel() {
        rt().block_on(async {
            let stats = Arc::new(Stats::default());
            let (tx, body) = MockBody::channel(Inflight::new(stats.clone()));
            tx.send(StreamItem::Abort).await.unwrap();
            assert!(body.collect().await.is_err());
            assert_eq!(stats.to_json()["cancelled"], 0);
        });
    }

    #[test]
    fn early_drop_counts_as_cancelled_and_closes_sender() {
        let stats = Arc::new(Stats::default());
        let (tx, body) = MockBody::channel(Inflight::new(stats.clone()));
        assert_eq!(stats.inflight(), 1);
        drop(body);
        assert!(tx.is_closed());
        assert_eq!(stats.to_json()["cancelled"], 1);
        assert_eq!(stats.inflight(), 0);
    }
}
