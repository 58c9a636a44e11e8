//! The two timeouts of a client connection outside its requests:
//!
//! * the header-read timeout (`--header-read-timeout-secs`) bounds the wait for a complete
//!   request head: from accept for the first request (so a client that never sends a byte,
//!   or stalls in the TLS handshake or the h2c preface, is closed too), and from a head's
//!   first byte for later ones;
//! * the keep-alive timeout (`--keep-alive-timeout-secs`) bounds the wait between requests
//!   (HTTP/1 keep-alive and idle h2 connections alike);
//! * an HTTP/1.1 connection idle for [`PARK_AFTER`] is parked: it gives back its hyper
//!   state and buffers until its next request arrives.
//!
//! The connection's IO adapter publishes where the byte stream stands ([`Phase`]), and the
//! requests count themselves in and out ([`ConnState`]). [`Timeouts`] looks at both each
//! time the connection task wakes, which is cheap (three relaxed loads compared with the
//! last ones) and reads the clock only when a stage begins. One `Sleep` serves every stage:
//! it is only ever moved later, never earlier, because it never sleeps past the nearest
//! deadline that a stage beginning meanwhile could have (`step`, the shorter timeout). The
//! one exception is the park deadline, short by design: a new idle stage brings the sleep
//! forward to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::h1_framing::Phase;
use super::ConnState;

/// Which timeout ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request head in time: close now.
    Header,
    /// Idle past the keep-alive timeout (or past the goodbye after it).
    Idle,
    /// Idle for [`PARK_AFTER`]: time to give the connection's buffers back.
    Park,
}

/// How long an HTTP/1.1 connection stays idle before it is parked. A client that sends its
/// next request sooner (back-to-back requests, a tool loop) finds the connection as it
/// left it; one that waits longer costs a fresh hyper connection state (a few
/// allocations) when it comes back, instead of its buffers for as long as it stays away.
/// Short, because the connections not yet parked set the allocator's high-water mark: in
/// a burst of 10,000 new connections, 100 ms left 5.5 KiB per idle connection resident,
/// 10 ms 3.3 KiB (`perf/compare --scenario idle`).
pub const PARK_AFTER: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the first request: the header-read timeout runs from accept.
    First,
    /// Requests in flight: their own timeouts apply, none here.
    Busy,
    /// Waiting for the next request since then.
    Idle(Instant),
    /// A request head under way since its first byte was seen.
    Head(Instant),
    /// Closing after the keep-alive timeout since then; one header-read timeout more
    /// bounds the graceful goodbye.
    Closing(Instant),
}

/// The park of one idle stage: once per stage, only between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Park {
    /// Not between requests yet (or parking is off).
    NotYet,
    /// Between requests: ask at this instant.
    Due(Instant),
    /// Asked; the rest of the stage waits for the keep-alive timeout.
    Asked,
}

pub struct Timeouts {
    header: Duration,
    keep_alive: Duration,
    /// The longest single sleep: the shorter of the two timeouts.
    step: Duration,
    accepted: Instant,
    stage: Stage,
    /// [`PARK_AFTER`] on a connection that can park (HTTP/1.1, and a keep-alive timeout
    /// longer than it).
    park_after: Option<Duration>,
    /// Where the current idle stage stands with its park.
    park: Park,
    /// Request epoch, stream phase and "requests in flight" as last seen.
    seen: (u64, Phase, bool),
}

impl Timeouts {
    /// Timers of a connection accepted at `accepted`.
    pub fn new(accepted: Instant, header: Duration, keep_alive: Duration) -> Timeouts {
        Timeouts {
            header,
            keep_alive,
            step: header.min(keep_alive),
            accepted,
            stage: Stage::First,
            park_after: None,
            park: Park::NotYet,
            seen: (0, Phase::NoHead, false),
        }
    }

    /// When the connection's sleep should first wake.
    pub fn first_check(&self) -> Instant {
        self.accepted + self.step
    }

    /// The connection turned out to speak HTTP/1.1: its idle stages end in
    /// [`Expiry::Park`] first.
    pub fn enable_parking(&mut self) {
        self.park_after = Some(PARK_AFTER).filter(|park| *park < self.keep_alive);
    }

    /// The connection was asked to close after [`Expiry::Idle`].
    pub fn closing(&mut self) {
        self.stage = Stage::Closing(Instant::now());
    }

    /// Takes in what changed since the last look; whether a park deadline was set.
    fn observe(&mut self, state: &ConnState) -> bool {
        if matches!(self.stage, Stage::Closing(_)) {
            return false;
        }
        let seen = (
            state.epoch.load(Ordering::Relaxed),
            state.phase(),
            state.active.load(Ordering::Relaxed) > 0,
        );
        if seen == self.seen {
            return false;
        }
        let (epoch, phase, busy) = seen;
        let same_epoch = epoch == self.seen.0;
        let before = self.stage;
        self.stage = match (busy, phase, self.stage) {
            (true, _, _) => Stage::Busy,
            (false, Phase::NoHead | Phase::InHead | Phase::InBody, _) if epoch == 0 => Stage::First,
            (false, Phase::InHead, Stage::Head(since)) if same_epoch => Stage::Head(since),
            (false, Phase::InHead, _) => Stage::Head(Instant::now()),
            (false, _, Stage::Idle(since)) if same_epoch => Stage::Idle(since),
            (false, _, _) => Stage::Idle(Instant::now()),
        };
        self.seen = seen;
        // A connection parks once per idle stage, and only between requests: the rest of
        // an unwanted request body may still be arriving after its response.
        if !matches!(self.stage, Stage::Idle(_)) || self.stage != before {
            self.park = Park::NotYet;
        }
        if !matches!(self.stage, Stage::Idle(_)) || phase != Phase::NoHead {
            return false;
        }
        match (self.park_after, self.park) {
            (Some(after), Park::NotYet) => {
                self.park = Park::Due(Instant::now() + after);
                true
            }
            _ => false,
        }
    }

    /// The deadline of the current stage and what its passing means.
    fn deadline(&self) -> Option<(Instant, Expiry)> {
        match self.stage {
            Stage::First => Some((self.accepted + self.header, Expiry::Header)),
            Stage::Busy => None,
            Stage::Idle(since) => match self.park {
                Park::Due(at) => Some((at, Expiry::Park)),
                Park::NotYet | Park::Asked => Some((since + self.keep_alive, Expiry::Idle)),
            },
            Stage::Head(since) => Some((since + self.header, Expiry::Header)),
            Stage::Closing(since) => Some((since + self.header, Expiry::Idle)),
        }
    }

    /// Resolves when a timeout has run out. Poll it after the connection itself, so what
    /// the connection just read is seen.
    pub fn poll_expired(
        &mut self,
        state: &ConnState,
        mut sleep: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Expiry> {
        if self.observe(state) {
            if let Park::Due(at) = self.park {
                if at < sleep.deadline() {
                    sleep.as_mut().reset(at);
                }
            }
        }
        loop {
            ready!(sleep.as_mut().poll(cx));
            let now = Instant::now();
            let next_look = now + self.step;
            match self.deadline() {
                Some((at, expiry)) if at <= now => {
                    if expiry == Expiry::Park {
                        self.park = Park::Asked;
                    }
                    return Poll::Ready(expiry);
                }
                Some((at, _)) => sleep.as_mut().reset(at.min(next_look)),
                None => sleep.as_mut().reset(next_look),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(state: &ConnState, epoch: u64, phase: u8, active: usize) {
        state.epoch.store(epoch, Ordering::Relaxed);
        state.phase.store(phase, Ordering::Relaxed);
        state.active.store(active, Ordering::Relaxed);
    }

    #[test]
    fn stages_follow_requests_and_heads() {
        let (h, k) = (Duration::from_secs(2), Duration::from_secs(7));
        let mut t = Timeouts::new(Instant::now(), h, k);
        let state = ConnState::default();
        t.observe(&state);
        assert_eq!(t.deadline(), Some((t.accepted + h, Expiry::Header)));
        // A first head trickling in still counts from accept.
        set(&state, 0, 1, 0);
        t.observe(&state);
        assert_eq!(t.stage, Stage::First);
        set(&state, 1, 0, 1);
        t.observe(&state);
        assert_eq!(t.deadline(), None);
        set(&state, 2, 0, 0);
        t.observe(&state);
        let Some((idle_until, Expiry::Idle)) = t.deadline() else {
            panic!("idle after the request: {:?}", t.stage);
        };
        assert!(idle_until >= t.accepted + k);
        set(&state, 2, 1, 0);
        t.observe(&state);
        assert!(matches!(t.deadline(), Some((_, Expiry::Header))));
        // HTTP/2 before any stream: idle, not the first-request deadline.
        let mut t = Timeouts::new(Instant::now(), h, k);
        set(&state, 0, 2, 0);
        t.observe(&state);
        assert!(matches!(t.deadline(), Some((_, Expiry::Idle))));
        assert_eq!(t.step, h);
    }

    #[test]
    fn an_http1_idle_stage_parks_once_and_only_between_requests() {
        let (h, k) = (Duration::from_secs(2), Duration::from_secs(7));
        let mut t = Timeouts::new(Instant::now(), h, k);
        t.enable_parking();
        let state = ConnState::default();
        set(&state, 1, 0, 1);
        assert!(!t.observe(&state));
        // The response is out while the rest of the request body still arrives: no park.
        set(&state, 2, 3, 0);
        assert!(!t.observe(&state));
        let Stage::Idle(since) = t.stage else {
            panic!("idle after the request: {:?}", t.stage);
        };
        assert_eq!(t.deadline(), Some((since + k, Expiry::Idle)));
        // The body ended: between requests, in the same idle stage.
        set(&state, 2, 0, 0);
        assert!(t.observe(&state), "a park deadline is set");
        let Some((at, Expiry::Park)) = t.deadline() else {
            panic!("park first: {:?}", t.deadline());
        };
        assert!(at >= since + PARK_AFTER);
        // Asked once; then the keep-alive deadline of the same stage.
        t.park = Park::Asked;
        assert_eq!(t.deadline(), Some((since + k, Expiry::Idle)));
        set(&state, 2, 1, 0);
        assert!(!t.observe(&state), "a head begins");
        set(&state, 3, 0, 1);
        t.observe(&state);
        set(&state, 4, 0, 0);
        assert!(t.observe(&state), "the next idle stage parks again");
        assert!(matches!(t.deadline(), Some((_, Expiry::Park))));
        // A keep-alive timeout no longer than the park delay never parks.
        let mut t = Timeouts::new(Instant::now(), h, PARK_AFTER);
        t.enable_parking();
        set(&state, 5, 0, 0);
        assert!(!t.observe(&state));
        assert!(matches!(t.deadline(), Some((_, Expiry::Idle))));
    }
}
