//! One `SO_REUSEPORT` listening socket per data-plane thread: the kernel spreads new
//! connections across them, so there is no accept lock and no cross-thread hand-off.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

const BACKLOG: i32 = 4096;

fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Binds `count` listeners on `addr`. With port 0 the first socket picks a free port and
/// the others join it, so `--port 0` works for tests.
pub fn bind_reuseport(
    addr: SocketAddr,
    count: usize,
) -> io::Result<(SocketAddr, Vec<TcpListener>)> {
    let first = bind_one(addr)?;
    let local = first.local_addr()?;
    let mut all = Vec::with_capacity(count.max(1));
    all.push(first);
    for _ in 1..count {
        all.push(bind_one(local)?);
    }
    Ok((local, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_zero_binds_all_sockets_to_one_port() {
        let (addr, socks) = bind_reuseport("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_ne!(addr.port(), 0);
        assert_eq!(socks.len(), 3);
        for s in &socks {
            assert_eq!(s.local_addr().unwrap(), addr);
        }
    }
}
