//! hyper IO over an io_uring socket (tokio-uring).
//!
//! io_uring operations own their buffers until the kernel completes them, so this adapter
//! keeps one read and one write buffer per connection, lends each to the in-flight
//! operation and gets it back on completion: no allocation per read or write beyond the
//! operation's future. Reads are copied into hyper's buffer (leftovers kept for the next
//! call); writes are gathered from hyper's queue of buffers (vectored: hyper does not
//! flatten them first) and completed before the next write or flush,
//! so a write error surfaces on the following call. On a cleartext connection the framing
//! check of [`crate::server::SmugglingGuard`] sits in the read path exactly as on the epoll
//! engine, and reports to the connection's timers through a [`PhaseReport`]. Under TLS the
//! adapter carries ciphertext and runs no check ([`UringIo::unchecked`]): the check reads the
//! decrypted stream above the TLS layer instead.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio_uring::net::TcpStream;

use crate::server::{PhaseReport, SmugglingGuard};

/// The read buffer adapts between these sizes: it doubles after a read that filled it
/// and halves after one that used less than a quarter. The buffer is lent to the read in
/// flight, which on an idle connection or an open stream (hyper keeps a read posted to see
/// the client leave) is most of the time, so a connection that only ever receives small
/// requests lends 2 KiB, not 16.
const READ_MIN: usize = 2 * 1024;
const READ_MAX: usize = 16 * 1024;
const WRITE_CHUNK: usize = 64 * 1024;
/// The write buffer's resting size: responses' heads and SSE events fit.
const WRITE_BUF: usize = 4 * 1024;

type ReadOp = Pin<Box<dyn Future<Output = (io::Result<usize>, Vec<u8>)>>>;
type WriteOp = Pin<Box<dyn Future<Output = (io::Result<()>, Vec<u8>)>>>;

enum ReadState {
    /// Buffer at rest; `pos..len` holds bytes read but not yet handed to hyper.
    Idle {
        buf: Vec<u8>,
        pos: usize,
    },
    Busy(ReadOp),
}

enum WriteState {
    Idle(Vec<u8>),
    Busy(WriteOp),
}

/// The framing check of the bytes read and its report to the connection's timers.
struct ReadCheck {
    guard: SmugglingGuard,
    report: PhaseReport,
}

pub struct UringIo {
    stream: Rc<TcpStream>,
    read: ReadState,
    /// The size of the next read, between [`READ_MIN`] and [`READ_MAX`].
    read_size: usize,
    write: WriteState,
    /// `None` under TLS (see the module's doc).
    check: Option<ReadCheck>,
}

impl UringIo {
    /// A cleartext connection's IO, checked and reporting to its timers.
    pub fn new(stream: TcpStream, report: PhaseReport) -> UringIo {
        UringIo::with_check(
            stream,
            Some(ReadCheck {
                guard: SmugglingGuard::default(),
                report,
            }),
        )
    }

    /// The IO under a TLS layer: bytes pass unchecked.
    pub fn unchecked(stream: TcpStream) -> UringIo {
        UringIo::with_check(stream, None)
    }

    fn with_check(stream: TcpStream, check: Option<ReadCheck>) -> UringIo {
        UringIo {
            stream: Rc::new(stream),
            read: ReadState::Idle {
                buf: Vec::with_capacity(READ_MIN),
                pos: 0,
            },
            read_size: READ_MIN,
            write: WriteState::Idle(Vec::with_capacity(WRITE_BUF)),
            check,
        }
    }

    /// Completes the in-flight write, if any.
    fn poll_write_done(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let WriteState::Busy(op) = &mut self.write {
            let (res, mut buf) = ready!(op.as_mut().poll(cx));
            buf.clear();
            // A large write leaves a large buffer; a connection that streams small events
            // afterwards must not hold it.
            buf.shrink_to(WRITE_BUF);
            self.write = WriteState::Idle(buf);
            res?;
        }
        Poll::Ready(Ok(()))
    }

    /// Starts writing `data` (gathered into the connection's write buffer, up to
    /// [`WRITE_CHUNK`] bytes); returns how much was taken.
    fn start_write(&mut self, data: &[IoSlice<'_>]) -> usize {
        let WriteState::Idle(buf) = &mut self.write else {
            return 0;
        };
        let mut buf = std::mem::take(buf);
        for slice in data {
            let room = WRITE_CHUNK - buf.len();
            if room == 0 {
                break;
            }
            buf.extend_from_slice(&slice[..slice.len().min(room)]);
        }
        let n = buf.len();
        let stream = self.stream.clone();
        self.write = WriteState::Busy(Box::pin(async move {
            let (res, buf) = stream.write_all(buf).await;
            (res, buf)
        }));
        n
    }

    /// Writes the 400 for a conflicting request, then reports end of stream to hyper.
    fn poll_reject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_write_done(cx))?;
            let Some(check) = &self.check else {
                return Poll::Ready(Ok(()));
            };
            let rest = check.guard.pending_reply();
            if rest.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let n = self.start_write(&[IoSlice::new(rest)]);
            if let Some(check) = &mut self.check {
                check.guard.reply_written(n);
            }
        }
    }

    fn is_rejecting(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.guard.is_rejecting())
    }
}

impl Drop for UringIo {
    /// An io_uring read in flight keeps the socket's descriptor alive until it completes,
    /// so dropping the adapter alone would leave an idle client connected until it sends
    /// something. Shutting the socket down completes that read and closes the connection
    /// now, as dropping an epoll socket does.
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// The size of the read after one of `size` bytes that brought `got` into a buffer of
/// `capacity`.
fn next_read_size(size: usize, got: usize, capacity: usize) -> usize {
    if got >= capacity {
        (size * 2).min(READ_MAX)
    } else if got < size / 4 {
        (size / 2).max(READ_MIN)
    } else {
        size
    }
}

impl Read for UringIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut cursor: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_rejecting() {
            return this.poll_reject(cx);
        }
        loop {
            match &mut this.read {
                ReadState::Idle { buf, pos } => {
                    if *pos < buf.len() {
                        let n = cursor.remaining().min(buf.len() - *pos);
                        cursor.put_slice(&buf[*pos..*pos + n]);
                        *pos += n;
                        return Poll::Ready(Ok(()));
                    }
                    let mut buf = std::mem::take(buf);
                    buf.clear();
                    if buf.capacity() < this.read_size {
                        buf.reserve_exact(this.read_size);
                    } else if buf.capacity() > this.read_size {
                        buf.shrink_to(this.read_size);
                    }
                    let stream = this.stream.clone();
                    this.read = ReadState::Busy(Box::pin(async move { stream.read(buf).await }));
                }
                ReadState::Busy(op) => {
                    let (res, buf) = ready!(op.as_mut().poll(cx));
                    if let Ok(n) = res {
                        this.read_size = next_read_size(this.read_size, n, buf.capacity());
                    }
                    let admitted = match (&res, &mut this.check) {
                        (Ok(n), Some(check)) => {
                            check.guard.admit(buf.get(..*n).unwrap_or_default())
                        }
                        _ => true,
                    };
                    this.read = ReadState::Idle { buf, pos: 0 };
                    match res {
                        Err(e) => return Poll::Ready(Err(e)),
                        // End of stream: hand hyper nothing.
                        Ok(0) => return Poll::Ready(Ok(())),
                        Ok(_) if !admitted => {
                            if let ReadState::Idle { buf, .. } = &mut this.read {
                                buf.clear();
                            }
                            return this.poll_reject(cx);
                        }
                        Ok(_) => {
                            if let Some(check) = &mut this.check {
                                check.report.update(check.guard.phase());
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Write for UringIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_write_done(cx))?;
        Poll::Ready(Ok(this.start_write(&[IoSlice::new(data)])))
    }

    /// hyper hands over its queue of buffers (head, chunk sizes, the body's frames) as they
    /// are; they are gathered straight into the operation's buffer, the one copy io_uring
    /// needs (hyper would otherwise flatten them into a buffer of its own first).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_write_done(cx))?;
        Poll::Ready(Ok(this.start_write(data)))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_write_done(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_done(cx))?;
        match this.stream.shutdown(std::net::Shutdown::Write) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_size_doubles_after_full_reads_and_halves_after_small_ones() {
        let mut size = READ_MIN;
        for _ in 0..5 {
            size = next_read_size(size, size, size);
        }
        assert_eq!(size, READ_MAX, "full reads grow it up to the cap");
        assert_eq!(
            next_read_size(size, size / 2, size),
            size,
            "half full: kept"
        );
        for _ in 0..5 {
            size = next_read_size(size, 100, size);
        }
        assert_eq!(size, READ_MIN, "small reads shrink it down to the floor");
        assert_eq!(next_read_size(READ_MIN, 0, READ_MIN), READ_MIN);
    }
}
