//! The epoll engine's connection IO: a tokio `TcpStream` with the framing check in its read
//! path, which also tells the connection's timers where the stream stands. hyper sees it
//! through `hyper_util::rt::TokioIo`.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::smuggling_guard::SmugglingGuard;
use super::PhaseReport;

pub struct CheckedStream {
    inner: TcpStream,
    guard: SmugglingGuard,
    report: PhaseReport,
}

impl CheckedStream {
    pub fn new(inner: TcpStream, report: PhaseReport) -> CheckedStream {
        CheckedStream {
            inner,
            guard: SmugglingGuard::default(),
            report,
        }
    }

    /// Writes the 400 for a conflicting request, then reports end of stream to hyper.
    fn poll_reject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let rest = self.guard.pending_reply();
            if rest.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            self.guard.reply_written(n);
        }
    }
}

impl AsyncRead for CheckedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.guard.is_rejecting() {
            return this.poll_reject(cx);
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.guard.admit(&buf.filled()[before..]) {
            this.report.update(this.guard.phase());
            return Poll::Ready(Ok(()));
        }
        buf.set_filled(before);
        this.poll_reject(cx)
    }
}

impl AsyncWrite for CheckedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
