//! The two timeouts of a client connection outside its requests:
//!
//! * the header-read timeout (`--header-read-timeout-secs`) bounds the wait for a complete
//!   request head: from accept for the first request (so a client that never sends a byte,
//!   or stalls in the TLS handshake or the h2c preface, is closed too), and from a head's
//!   first byte for later ones;
//! * the keep-alive timeout (`--keep-alive-timeout-secs`) bounds the wait between requests
//!   (HTTP/1 keep-alive and idle h2 connections alike);
//!
//! and the park of an idle HTTP/1.1 connection, which gives back its hyper state and buffers
//! until its next request arrives: the connection lists itself with its thread's
//! [`park_sweep`] when it goes idle, and the sweep says when the park is due.
//!
//! The connection's IO adapter publishes where the byte stream stands ([`Phase`]), and the
//! requests count themselves in and out ([`ConnState`]). [`Timeouts`] looks at both each
//! time the connection task wakes, which is cheap (three relaxed loads compared with the
//! last ones) and reads the clock only when a stage begins. One `Sleep` serves every stage:
//! it is only ever moved later, never earlier, because it never sleeps past the nearest
//! deadline that a stage beginning meanwhile could have (`step`, the shorter timeout), so a
//! request touches no timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::h1_framing::Phase;
use super::park_sweep::{self, PARK_AFTER};
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

/// Where the connection stands with its thread's [`park_sweep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Park {
    /// Not an HTTP/1.1 connection (yet), or its keep-alive timeout is no longer than
    /// [`PARK_AFTER`]: it never parks.
    Off,
    /// Listed with the sweep whenever it goes idle between requests.
    On,
    /// Parked in this idle stage; listed again in the next one.
    Parked,
}

pub struct Timeouts {
    header: Duration,
    keep_alive: Duration,
    /// The longest single sleep: the shorter of the two timeouts.
    step: Duration,
    accepted: Instant,
    stage: Stage,
    park: Park,
    /// The sleep holds the connection task's waker (polled pending since it last fired).
    armed: bool,
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
            park: Park::Off,
            armed: false,
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
        if self.park == Park::Off && PARK_AFTER < self.keep_alive {
            self.park = Park::On;
        }
    }

    /// The connection was asked to close after [`Expiry::Idle`].
    pub fn closing(&mut self) {
        self.stage = Stage::Closing(Instant::now());
    }

    /// Takes in what changed since the last look; lists a connection that just went idle
    /// between requests with the sweep (`task` is woken when its park is due).
    fn observe(&mut self, state: &Arc<ConnState>, task: &Waker) {
        if matches!(self.stage, Stage::Closing(_)) {
            return;
        }
        let seen = (
            state.epoch.load(Ordering::Relaxed),
            state.phase(),
            state.active.load(Ordering::Relaxed) > 0,
        );
        if seen == self.seen {
            return;
        }
        let (epoch, phase, busy) = seen;
        let same_epoch = epoch == self.seen.0;
        let mut idle_from = None;
        self.stage = match (busy, phase, self.stage) {
            (true, _, _) => Stage::Busy,
            (false, Phase::NoHead | Phase::InHead | Phase::InBody, _) if epoch == 0 => Stage::First,
            (false, Phase::InHead, Stage::Head(since)) if same_epoch => Stage::Head(since),
            (false, Phase::InHead, _) => Stage::Head(Instant::now()),
            (false, _, Stage::Idle(since)) if same_epoch => Stage::Idle(since),
            (false, _, _) => {
                let now = Instant::now();
                idle_from = Some(now);
                Stage::Idle(now)
            }
        };
        self.seen = seen;
        if self.park == Park::Parked && !same_epoch {
            self.park = Park::On;
        }
        // Listed only between requests: the rest of an unwanted request body may still be
        // arriving after its response. A request that just ended tells the sweep even when
        // its connection is still listed from an earlier idle stage: the sweeps ride on
        // requests ending (`park_sweep`), at the time just read.
        if self.park == Park::On && matches!(self.stage, Stage::Idle(_)) && phase == Phase::NoHead {
            match idle_from {
                Some(now) => park_sweep::idle(state, task, now),
                None if !state.listed.load(Ordering::Relaxed) => {
                    park_sweep::idle(state, task, Instant::now());
                }
                None => {}
            }
        }
    }

    /// The deadline of the current stage and what its passing means.
    fn deadline(&self) -> Option<(Instant, Expiry)> {
        match self.stage {
            Stage::First => Some((self.accepted + self.header, Expiry::Header)),
            Stage::Busy => None,
            Stage::Idle(since) => Some((since + self.keep_alive, Expiry::Idle)),
            Stage::Head(since) => Some((since + self.header, Expiry::Header)),
            Stage::Closing(since) => Some((since + self.header, Expiry::Idle)),
        }
    }

    /// Resolves when a timeout has run out. Poll it after the connection itself, so what
    /// the connection just read is seen.
    pub fn poll_expired(
        &mut self,
        state: &Arc<ConnState>,
        mut sleep: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Expiry> {
        self.observe(state, cx.waker());
        // The sweep let go of the connection; it parks if it is still idle between requests
        // (a request may have begun since the sweep looked; it lists itself again when it
        // next goes idle).
        if state.take_park_due()
            && self.park == Park::On
            && matches!(self.stage, Stage::Idle(_))
            && self.seen.1 == Phase::NoHead
        {
            self.park = Park::Parked;
            return Poll::Ready(Expiry::Park);
        }
        // A sleep polled once holds this task's waker until it fires, however often it
        // is moved: polling it again on every wake would only register the same waker.
        if self.armed && !sleep.is_elapsed() {
            return Poll::Pending;
        }
        self.armed = false;
        loop {
            if sleep.as_mut().poll(cx).is_pending() {
                self.armed = true;
                return Poll::Pending;
            }
            let now = Instant::now();
            let next_look = now + self.step;
            match self.deadline() {
                Some((at, expiry)) if at <= now => return Poll::Ready(expiry),
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
        let state = Arc::new(ConnState::default());
        let task = Waker::noop();
        t.observe(&state, task);
        assert_eq!(t.deadline(), Some((t.accepted + h, Expiry::Header)));
        // A first head trickling in still counts from accept.
        set(&state, 0, 1, 0);
        t.observe(&state, task);
        assert_eq!(t.stage, Stage::First);
        set(&state, 1, 0, 1);
        t.observe(&state, task);
        assert_eq!(t.deadline(), None);
        set(&state, 2, 0, 0);
        t.observe(&state, task);
        let Some((idle_until, Expiry::Idle)) = t.deadline() else {
            panic!("idle after the request: {:?}", t.stage);
        };
        assert!(idle_until >= t.accepted + k);
        assert_eq!(t.park, Park::Off, "not HTTP/1.1: never listed");
        set(&state, 2, 1, 0);
        t.observe(&state, task);
        assert!(matches!(t.deadline(), Some((_, Expiry::Header))));
        // HTTP/2 before any stream: idle, not the first-request deadline.
        let mut t = Timeouts::new(Instant::now(), h, k);
        set(&state, 0, 2, 0);
        t.observe(&state, task);
        assert!(matches!(t.deadline(), Some((_, Expiry::Idle))));
        assert_eq!(t.step, h);
    }

    /// What `poll_expired` says now, with a sleep far in the future.
    fn look(t: &mut Timeouts, state: &Arc<ConnState>) -> Poll<Expiry> {
        let sleep = tokio::time::sleep(Duration::from_secs(60));
        tokio::pin!(sleep);
        t.poll_expired(state, sleep, &mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn an_http1_connection_lists_itself_when_idle_and_parks_only_between_requests() {
        let (h, k) = (Duration::from_secs(2), Duration::from_secs(7));
        let mut t = Timeouts::new(Instant::now(), h, k);
        t.enable_parking();
        let state = Arc::new(ConnState::default());
        let listed = |state: &ConnState| state.listed.load(Ordering::Relaxed);
        set(&state, 1, 0, 1);
        assert!(look(&mut t, &state).is_pending());
        assert!(!listed(&state), "busy: not listed");
        // The response is out while the rest of the request body still arrives: not listed.
        set(&state, 2, 3, 0);
        assert!(look(&mut t, &state).is_pending());
        assert!(!listed(&state));
        // The body ended: between requests.
        set(&state, 2, 0, 0);
        assert!(look(&mut t, &state).is_pending());
        assert!(listed(&state));
        // The sweep says the park is due (and lets go): asked once.
        state.listed.store(false, Ordering::Relaxed);
        state.park_due.store(true, Ordering::Relaxed);
        assert_eq!(look(&mut t, &state), Poll::Ready(Expiry::Park));
        assert_eq!(t.park, Park::Parked);
        assert!(
            look(&mut t, &state).is_pending(),
            "parked: not listed again"
        );
        assert!(!listed(&state));
        // The next idle stage lists again.
        set(&state, 3, 0, 1);
        assert!(look(&mut t, &state).is_pending());
        set(&state, 4, 0, 0);
        assert!(look(&mut t, &state).is_pending());
        assert!(listed(&state));
        // A head began after the sweep looked: no park; listed again when idle.
        state.listed.store(false, Ordering::Relaxed);
        set(&state, 4, 1, 0);
        state.park_due.store(true, Ordering::Relaxed);
        assert!(look(&mut t, &state).is_pending());
        assert_eq!(t.park, Park::On);
        set(&state, 6, 0, 0);
        assert!(look(&mut t, &state).is_pending());
        assert!(listed(&state));
        // A keep-alive timeout no longer than the park delay never parks.
        let mut t = Timeouts::new(Instant::now(), h, PARK_AFTER);
        t.enable_parking();
        state.listed.store(false, Ordering::Relaxed);
        set(&state, 7, 0, 0);
        assert!(look(&mut t, &state).is_pending());
        assert_eq!(t.park, Park::Off);
        assert!(!listed(&state));
    }

    /// The sleep is polled once and then left alone until it fires: the header-read
    /// timeout still ends the first stage, then the keep-alive timeout an idle one.
    #[tokio::test]
    async fn a_sleep_polled_once_still_wakes_the_connection() {
        let (h, k) = (Duration::from_millis(40), Duration::from_millis(120));
        let accepted = Instant::now();
        let mut t = Timeouts::new(accepted, h, k);
        let state = Arc::new(ConnState::default());
        let sleep = tokio::time::sleep_until(t.first_check());
        tokio::pin!(sleep);
        let mut looks = 0;
        let expiry = std::future::poll_fn(|cx| {
            looks += 1;
            t.poll_expired(&state, sleep.as_mut(), cx)
        });
        assert_eq!(expiry.await, Expiry::Header);
        assert!(accepted.elapsed() >= h);
        assert!(looks >= 2, "pending first, then woken by the sleep");
        // A request came and went: the idle stage ends at the keep-alive timeout.
        set(&state, 2, 0, 0);
        let idle_from = Instant::now();
        let expiry = std::future::poll_fn(|cx| t.poll_expired(&state, sleep.as_mut(), cx));
        assert_eq!(expiry.await, Expiry::Idle);
        assert!(idle_from.elapsed() >= k);
    }
}
