//! Each data-plane thread's idle connections to HTTP/1.1 workers.
//!
//! A thread's requests run on that thread only, so the pool is a thread-local map from a
//! worker's authority to its idle connections: a checkout is a hash lookup and a pop, with
//! no lock and no task of its own. The map hashes the authority's text with FNV-1a: the
//! keys are the operator's worker addresses, not client input, so a keyed hash buys
//! nothing, and `Authority`'s own `Hash` feeds SipHash one byte at a time (two lookups a
//! request cost more than parsing the worker's response head). Idle connections past their keep time are closed by a
//! sweep at most once a second, when a connection is checked in or out, and by the
//! thread's [`sweep`] tick (so a pool that sees no traffic still lets them go).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::uri::Authority;
use tokio::net::TcpStream;

/// How often the pool looks for expired connections at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A connection to a worker and its read buffer, which may hold the start of what the
/// worker sends next (nothing, for an idle one).
#[derive(Debug)]
pub struct Conn {
    pub stream: TcpStream,
    pub buf: BytesMut,
    /// How much the next buffer refill asks for: grows while reads fill what they are
    /// given (a large body), shrinks back while they do not (a stream of small events).
    pub read_size: usize,
}

/// How many idle connections a worker keeps per thread, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keep {
    pub max_idle: usize,
    /// `None`: kept until the worker closes them.
    pub idle_timeout: Option<Duration>,
}

struct Idle {
    conn: Conn,
    since: Instant,
    keep_for: Option<Duration>,
}

impl Idle {
    fn expired(&self, now: Instant) -> bool {
        self.keep_for
            .is_some_and(|keep| now.saturating_duration_since(self.since) >= keep)
    }
}

/// FNV-1a over the bytes written, for short trusted keys.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

struct Pool {
    /// Keyed by the authority as written (`host:port`).
    by_origin: HashMap<Box<str>, Vec<Idle>, BuildHasherDefault<Fnv>>,
    last_sweep: Instant,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool {
        by_origin: HashMap::default(),
        last_sweep: Instant::now(),
    });
}

/// A live idle connection to `origin`, the most recently used first; `None` when there is
/// none (connect a new one).
pub fn checkout(origin: &Authority) -> Option<Conn> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let now = Instant::now();
        pool.sweep_if_due(now);
        let idle = pool.by_origin.get_mut(origin.as_str())?;
        while let Some(entry) = idle.pop() {
            if !entry.expired(now) && still_open(&entry.conn.stream) {
                return Some(entry.conn);
            }
        }
        None
    })
}

/// Keeps `conn` for the next request to `origin`, unless `keep` says the worker has
/// enough idle connections already.
pub fn checkin(origin: &Authority, conn: Conn, keep: Keep) {
    if keep.max_idle == 0 || keep.idle_timeout == Some(Duration::ZERO) {
        return;
    }
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let now = Instant::now();
        pool.sweep_if_due(now);
        let idle = match pool.by_origin.get_mut(origin.as_str()) {
            Some(idle) => idle,
            None => pool.by_origin.entry(origin.as_str().into()).or_default(),
        };
        if idle.len() < keep.max_idle {
            idle.push(Idle {
                conn,
                since: now,
                keep_for: keep.idle_timeout,
            });
        }
    });
}

/// Closes this thread's expired idle connections once a second, for as long as the thread
/// runs (one of its companion tasks).
pub async fn sweep_forever() {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        POOL.with(|pool| pool.borrow_mut().sweep(Instant::now()));
    }
}

impl Pool {
    fn sweep_if_due(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: Instant) {
        self.last_sweep = now;
        self.by_origin.retain(|_, idle| {
            idle.retain(|entry| !entry.expired(now));
            !idle.is_empty()
        });
    }
}

/// Whether an idle connection has not been closed by the worker, as far as the reactor
/// already knows: no syscall unless it reported the socket readable, and an idle
/// connection that is readable has either closed or sent something unasked; neither is
/// usable.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
