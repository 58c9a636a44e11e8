//! Sending on a TCP socket with the system call itself, not libc's `send`.
//!
//! libc's `send` is a thread-cancellation point: in a process with more than one thread
//! (every gateway has its data-plane threads beside the main one) it marks the thread
//! cancellable before the call and not after, two atomic updates of the thread's
//! cancellation state around every send. tollgate never cancels a thread, so they buy
//! nothing; on the measuring machine they were 1 % of a small request's CPU, for the two
//! sends it makes (the request to the worker, the answer to the client). `rustix` makes
//! the `sendto` call directly. Readiness stays tokio's: the send runs inside
//! [`TcpStream::try_io`], so a full socket clears the readiness and the next poll waits
//! for the reactor, exactly as tokio's own `poll_write` does.

use std::future::poll_fn;
use std::io;
use std::task::{ready, Context, Poll};

use rustix::net::SendFlags;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Sends what of `buf` the socket takes now; `Pending` while it takes nothing.
pub fn poll_send(stream: &TcpStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        ready!(stream.poll_write_ready(cx))?;
        // `NOSIGNAL`: a peer that went away is an error here, never a SIGPIPE (as std's
        // own send on Linux).
        let sent = stream.try_io(Interest::WRITABLE, || {
            rustix::net::send(stream, buf, SendFlags::NOSIGNAL).map_err(io::Error::from)
        });
        match sent {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            done => return Poll::Ready(done),
        }
    }
}

/// Sends all of `buf`.
pub async fn send_all(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| poll_send(stream, cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn everything_arrives_in_order_past_a_full_socket() {
        let (sender, mut receiver) = pair().await;
        // Far more than the socket buffers hold: the sender waits for the reader.
        let data: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            receiver.read_to_end(&mut got).await.unwrap();
            got
        });
        send_all(&sender, &data).await.unwrap();
        drop(sender);
        assert_eq!(reading.await.unwrap(), data);
    }

    #[tokio::test]
    async fn a_peer_that_went_away_is_an_error_not_a_signal() {
        let (sender, receiver) = pair().await;
        drop(receiver);
        let chunk = vec![0u8; 64 * 1024];
        let mut failed = None;
        for _ in 0..64 {
            if let Err(err) = send_all(&sender, &chunk).await {
                failed = Some(err.kind());
                break;
            }
        }
        assert!(
            matches!(
                failed,
                Some(io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset)
            ),
            "{failed:?}"
        );
    }
}
