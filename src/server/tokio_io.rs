//! Connection IO over a tokio stream with the framing check in its read path, which also
//! tells the connection's timers where the stream stands. hyper sees it through
//! `hyper_util::rt::TokioIo`.
//!
//! On the epoll engine the stream is the `TcpStream` itself. Over TLS (either engine) it is
//! the TLS stream, so the check reads the decrypted request bytes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::smuggling_guard::SmugglingGuard;
use super::PhaseReport;

pub struct CheckedStream<S = TcpStream> {
    inner: S,
    guard: SmugglingGuard,
    report: PhaseReport,
}

impl<S: AsyncRead + AsyncWrite + Unpin> CheckedStream<S> {
    pub fn new(inner: S, report: PhaseReport) -> CheckedStream<S> {
        CheckedStream {
            inner,
            guard: SmugglingGuard::default(),
            report,
        }
    }

    /// Writes the 400 for a conflicting request, then reports end of stream to hyper.
    /// The flush pushes it out of a TLS stream's buffer (a no-op on a socket).
    fn poll_reject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let rest = self.guard.pending_reply();
            if rest.is_empty() {
                return Pin::new(&mut self.inner).poll_flush(cx);
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            self.guard.reply_written(n);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for CheckedStream<S> {
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

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for CheckedStream<S> {
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
