//! Connection IO over a tokio stream with the framing check in its read path, which also
//! tells the connection's timers where the stream stands. hyper sees it through
//! `hyper_util::rt::TokioIo`.
//!
//! On the epoll engine the stream is the socket itself ([`PlainTcp`]: tokio's `TcpStream`,
//! its sends made directly). Over TLS (either engine) it is the TLS stream, so the check
//! reads the decrypted request bytes.
//!
//! A small answer that hyper hands over in pieces (the head and the body, or a chunk's
//! size line, data and CRLF) goes out gathered into one buffer and one `send` (over TLS,
//! one write into the TLS stream), not a `writev`: the kernel's vectored path (copying in
//! and checking the iovec array, its per-segment walk) costs more than copying a few
//! hundred bytes here. Anything larger than [`GATHER_MAX`] goes out vectored, as it came,
//! with no copy.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::http::raw_send;

use super::smuggling_guard::SmugglingGuard;
use super::PhaseReport;

/// The most a vectored write may hold to be gathered into one buffer: a small relayed
/// answer, head and body, or a streamed event with its chunk framing.
const GATHER_MAX: usize = 1024;

thread_local! {
    /// Where pieces are gathered: one per thread, its memory kept from write to write.
    static GATHER: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(GATHER_MAX));
}

/// A client's plain TCP connection: tokio's stream, with each plain write one `sendto`
/// made directly ([`raw_send`]: libc's `send` would wrap it in a thread-cancellation
/// point's bookkeeping). Reads, vectored writes and readiness are tokio's.
pub struct PlainTcp(TcpStream);

impl PlainTcp {
    pub fn new(stream: TcpStream) -> PlainTcp {
        PlainTcp(stream)
    }
}

impl AsyncRead for PlainTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        raw_send::poll_send(&self.0, cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

pub struct CheckedStream<S = PlainTcp> {
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
        let inner = Pin::new(&mut self.get_mut().inner);
        let total = bufs.iter().map(|b| b.len()).sum::<usize>();
        if bufs.len() < 2 || total > GATHER_MAX {
            return inner.poll_write_vectored(cx, bufs);
        }
        // What the one write takes is a prefix of the pieces in order, as a `writev`'s
        // would be: hyper advances its buffers by the count either way.
        GATHER.with_borrow_mut(|flat| {
            flat.clear();
            for b in bufs {
                flat.extend_from_slice(b);
            }
            inner.poll_write(cx, flat)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;
    use std::task::Waker;

    /// A stream that records each write and takes at most `take` bytes of it.
    #[derive(Default)]
    struct Recorder {
        plain: Vec<Vec<u8>>,
        vectored: Vec<Vec<Vec<u8>>>,
        take: Option<usize>,
    }

    impl Recorder {
        fn taken(&self, len: usize) -> usize {
            self.take.map_or(len, |take| take.min(len))
        }
    }

    impl AsyncRead for Recorder {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.plain.push(buf.to_vec());
            Poll::Ready(Ok(this.taken(buf.len())))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.vectored
                .push(bufs.iter().map(|b| b.to_vec()).collect());
            let len = bufs.iter().map(|b| b.len()).sum();
            Poll::Ready(Ok(this.taken(len)))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn stream(take: Option<usize>) -> CheckedStream<Recorder> {
        let report = PhaseReport::new(std::sync::Arc::default());
        CheckedStream::new(
            Recorder {
                take,
                ..Recorder::default()
            },
            report,
        )
    }

    fn write(stream: &mut CheckedStream<Recorder>, pieces: &[&[u8]]) -> usize {
        let bufs: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(stream).poll_write_vectored(&mut cx, &bufs) {
            Poll::Ready(Ok(n)) => n,
            other => panic!("the write did not complete: {other:?}"),
        }
    }

    #[test]
    fn small_pieces_go_out_as_one_buffer_in_order() {
        let mut s = stream(None);
        let n = write(&mut s, &[b"HTTP/1.1 200 OK\r\n\r\n", b"{\"a\":1}", b"\r\n"]);
        assert_eq!(n, 28);
        assert_eq!(
            s.inner.plain,
            vec![b"HTTP/1.1 200 OK\r\n\r\n{\"a\":1}\r\n".to_vec()]
        );
        assert!(s.inner.vectored.is_empty());
    }

    #[test]
    fn a_short_write_of_gathered_pieces_counts_from_the_first() {
        let mut s = stream(Some(5));
        assert_eq!(write(&mut s, &[b"abc", b"defgh"]), 5);
        // hyper comes back with what is left, from the sixth byte on.
        assert_eq!(write(&mut s, &[b"fgh"]), 3);
        assert_eq!(s.inner.plain, vec![b"abcdefgh".to_vec()]);
        assert_eq!(s.inner.vectored, vec![vec![b"fgh".to_vec()]]);
    }

    #[test]
    fn large_or_single_writes_go_out_as_they_came() {
        let mut s = stream(None);
        let big = vec![b'x'; GATHER_MAX];
        assert_eq!(write(&mut s, &[b"head", &big]), GATHER_MAX + 4);
        assert_eq!(write(&mut s, &[b"one"]), 3);
        assert!(s.inner.plain.is_empty());
        assert_eq!(s.inner.vectored.len(), 2);
        // Exactly at the limit still gathers.
        let at_limit = vec![b'y'; GATHER_MAX - 2];
        assert_eq!(write(&mut s, &[b"ab", &at_limit]), GATHER_MAX);
        assert_eq!(s.inner.plain.len(), 1);
    }
}
