//! A response stream the gateway produces itself (SSE built from engine output): a task
//! sends frames through a [`FrameSender`] over a bounded channel, so a client that reads
//! slowly holds the producer back instead of growing a buffer.
//!
//! The stream ends cleanly only when the producer says so: a producer that fails, or that
//! is dropped without finishing (a panic, an early return), ends the client's stream with
//! an error, so a cut-short answer never looks complete.

use std::error::Error as StdError;
use std::fmt;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use tokio::sync::mpsc;

use super::BoxError;

/// What a producer sends down the channel.
pub(super) enum Msg {
    Frame(Bytes),
    Finish,
    Fail(BoxError),
}

/// The producer's end of a stream made by [`super::RespBody::generated`].
pub struct FrameSender {
    tx: mpsc::Sender<Msg>,
}

/// The client's body is gone (it went away, or its stream already ended): stop producing.
#[derive(Debug)]
pub struct StreamClosed;

impl fmt::Display for StreamClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response stream is closed")
    }
}

impl StdError for StreamClosed {}

/// The producer went away without finishing the stream.
#[derive(Debug)]
pub struct Unfinished;

impl fmt::Display for Unfinished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the gateway's response stream stopped before its end")
    }
}

impl StdError for Unfinished {}

impl FrameSender {
    pub(super) fn new(tx: mpsc::Sender<Msg>) -> FrameSender {
        FrameSender { tx }
    }

    /// Sends `data` as the next frame, waiting while the client's side is full.
    pub async fn send(&self, data: Bytes) -> Result<(), StreamClosed> {
        self.tx
            .send(Msg::Frame(data))
            .await
            .map_err(|_| StreamClosed)
    }

    /// Resolves once the client's side is gone, so a producer waiting on its source can
    /// stop at once instead of at its next frame.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Ends the stream cleanly after the frames sent. Nothing to report if the client has
    /// gone already.
    pub async fn finish(self) {
        let _ = self.tx.send(Msg::Finish).await;
    }

    /// Ends the stream with `err`: the client's stream breaks off instead of ending.
    pub async fn fail(self, err: impl Into<BoxError>) {
        let _ = self.tx.send(Msg::Fail(err.into())).await;
    }
}

/// The next frame of a generated stream; `rx` is dropped once the stream has ended.
pub(super) fn poll(
    rx: &mut Option<mpsc::Receiver<Msg>>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    let Some(recv) = rx.as_mut() else {
        return Poll::Ready(None);
    };
    let ended = match ready!(recv.poll_recv(cx)) {
        Some(Msg::Frame(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
        Some(Msg::Finish) => None,
        Some(Msg::Fail(err)) => Some(Err(err)),
        None => Some(Err(Box::new(Unfinished) as BoxError)),
    };
    *rx = None;
    Poll::Ready(ended)
}
