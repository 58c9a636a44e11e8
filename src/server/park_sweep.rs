//! When to park an idle HTTP/1.1 connection, decided for all of a thread's connections by
//! one sweep every [`TICK`] instead of by a timer of each connection's own.
//!
//! A connection's own park timer had to move with every request (one timer-wheel removal
//! and insertion) or else wake its task every [`PARK_AFTER`] while the client kept it busy:
//! a connection serving a few requests every 10 ms was woken for a park it never needed
//! once every few requests, about 2 µs of CPU a request on one machine (`perf/compare --scenario small`).
//! Here a connection that goes idle between requests puts itself on its thread's list,
//! unless it is there already; the sweep reads its request count and asks it to park when
//! the count has not moved since the sweep before and no request is under way. One it
//! finds serving a request leaves the list (a long stream is not looked at every tick) and
//! lists itself again when it next goes idle. So a connection kept busy by back-to-back
//! requests costs a look and at most one listing a tick, not a timer per request, and an
//! idle one is parked after between one and two ticks.
//!
//! Sweeps follow the traffic: a connection whose request ends sweeps the list when the last
//! sweep is a tick old (it reads the clock then anyway, for its keep-alive timeout). A
//! timer that woke the thread every tick under load cost more than all the sweeping (about
//! 1 µs a small request with 64 busy connections, on a 2-core VM: each wake-up of a busy
//! thread, and each timed `epoll_wait` it makes the thread's waits into, costs far more
//! there than the few instructions it runs). The thread's sweep task
//! only covers quiet spells: when no request ended while it waited, it sweeps (a tick
//! after the first listing, in a quiet thread); while requests keep ending it leaves the
//! sweeping to them and waits twice as long each time (up to
//! [`LONGEST_WAIT`]), so a busy thread is woken for it about once a second. When traffic
//! stops, the connections still listed are parked within that wait.
//!
//! Each data-plane thread runs [`run`] beside its accept loop. The list lives in a
//! thread-local: the thread's connections and its sweep never leave the thread, so no lock.

use std::cell::RefCell;
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::h1_framing::Phase;
use super::ConnState;

/// How long an HTTP/1.1 connection stays idle, at most, before it is parked (at least half
/// of it). A client that sends its next request sooner (back-to-back requests, a tool loop)
/// finds the connection as it left it; one that waits longer costs a fresh hyper
/// connection state (a few allocations) when it comes back, instead of its buffers for as
/// long as it stays away. Short, because the connections not yet parked set the
/// allocator's high-water mark: in a burst of 10,000 new connections, 100 ms left 5.5 KiB
/// per idle connection resident, 10 ms 3.3 KiB (`perf/compare --scenario idle`).
pub const PARK_AFTER: Duration = Duration::from_millis(10);

/// The sweep's period: a connection idle through a whole tick is parked at the next.
pub const TICK: Duration = Duration::from_millis(PARK_AFTER.as_millis() as u64 / 2);

/// The longest the sweep task waits while traffic does the sweeping.
pub const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// One connection on the list.
struct Entry {
    /// Gone once the connection is over; the entry goes at the next sweep.
    conn: Weak<ConnState>,
    /// The connection's task, woken to park.
    task: Waker,
    /// The connection's request epoch at the last sweep (none before the first).
    seen: Option<u64>,
}

struct List {
    entries: Vec<Entry>,
    /// The sweep, waiting for a first entry.
    sweeper: Option<Waker>,
    /// A tick after the last sweep: when the next one is due.
    next_sweep: Instant,
    /// Requests ended so far: the sweep task tells by it whether traffic came while it
    /// waited.
    traffic: u64,
}

impl List {
    /// Looks at every entry, parking those idle since the sweep before.
    fn sweep(&mut self, now: Instant) {
        self.entries.retain_mut(sweep);
        self.next_sweep = now + TICK;
    }

    /// Sweeps if the last sweep is a tick old at `now`.
    fn sweep_if_due(&mut self, now: Instant) {
        if now >= self.next_sweep {
            self.sweep(now);
        }
    }
}

thread_local! {
    static LIST: RefCell<List> = RefCell::new(List {
        entries: Vec::new(),
        sweeper: None,
        next_sweep: Instant::now() + TICK,
        traffic: 0,
    });
}

/// An HTTP/1.1 connection is idle between requests at `now` (when its request ended, or
/// when the rest of a request body it did not want has arrived): it goes on its thread's
/// list unless it is there already, and the list is swept if the last sweep is a tick old.
pub fn idle(conn: &Arc<ConnState>, task: &Waker, now: Instant) {
    let sweeper = LIST.with_borrow_mut(|list| {
        list.traffic += 1;
        // Read before the swap: a busy connection ends most of its requests listed, and a
        // plain load is cheaper than a read-modify-write on every request.
        if !conn.listed.load(Ordering::Relaxed) && !conn.listed.swap(true, Ordering::Relaxed) {
            list.entries.push(Entry {
                conn: Arc::downgrade(conn),
                task: task.clone(),
                seen: None,
            });
        }
        list.sweep_if_due(now);
        list.sweeper.take()
    });
    if let Some(sweeper) = sweeper {
        sweeper.wake();
    }
}

/// The thread's sweep task for quiet spells (see the module's text): runs for the thread's
/// life, sleeping while its list is empty.
pub async fn run() {
    let mut wait = TICK;
    loop {
        poll_fn(|cx| {
            LIST.with_borrow_mut(|list| {
                if list.entries.is_empty() {
                    list.sweeper = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
        })
        .await;
        let before = LIST.with_borrow(|list| list.traffic);
        tokio::time::sleep(wait).await;
        let traffic = LIST.with_borrow_mut(|list| {
            let traffic = list.traffic != before;
            if !traffic {
                list.sweep_if_due(Instant::now());
            }
            traffic
        });
        wait = next_wait(wait, traffic);
    }
}

/// The sweep task's next wait: twice the last (up to [`LONGEST_WAIT`]) while requests keep
/// ending (their connections sweep), a tick once none did.
fn next_wait(wait: Duration, traffic: bool) -> Duration {
    if traffic {
        (wait * 2).min(LONGEST_WAIT)
    } else {
        TICK
    }
}

/// One entry's look; whether it stays listed. Waking a task only schedules it (it runs
/// after the sweep), so the list is not borrowed twice.
fn sweep(entry: &mut Entry) -> bool {
    let Some(conn) = entry.conn.upgrade() else {
        return false;
    };
    if conn.active.load(Ordering::Relaxed) > 0 {
        conn.listed.store(false, Ordering::Relaxed);
        return false;
    }
    let epoch = conn.epoch.load(Ordering::Relaxed);
    if conn.phase() == Phase::NoHead && entry.seen == Some(epoch) {
        conn.listed.store(false, Ordering::Relaxed);
        conn.park_due.store(true, Ordering::Relaxed);
        entry.task.wake_by_ref();
        return false;
    }
    entry.seen = Some(epoch);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::wake_count::WakeCount;

    fn listed() -> usize {
        LIST.with_borrow(|list| list.entries.len())
    }

    fn sweep_all() {
        LIST.with_borrow_mut(|list| list.sweep(Instant::now()));
    }

    /// Lists `conn` without the sweep a listing makes when the last one is a tick old.
    fn list(conn: &Arc<ConnState>, task: &Waker) {
        let now = LIST.with_borrow(|list| list.next_sweep) - TICK;
        idle(conn, task, now);
    }

    #[test]
    fn a_connection_idle_through_a_whole_tick_is_asked_to_park_once() {
        let (woken, task) = WakeCount::waker();
        let conn = Arc::new(ConnState::default());
        conn.epoch.store(2, Ordering::Relaxed);
        list(&conn, &task);
        // The first sweep only notes the epoch: the connection may have gone idle just now.
        sweep_all();
        assert!(!conn.take_park_due());
        assert_eq!(listed(), 1);
        sweep_all();
        assert!(conn.take_park_due(), "idle through a tick");
        assert_eq!(woken.get(), 1);
        assert_eq!(listed(), 0, "let go once asked");
        assert!(!conn.listed.load(Ordering::Relaxed));
        assert!(!conn.take_park_due(), "taken once");
    }

    #[test]
    fn a_busy_connection_leaves_the_list_and_a_closed_one_goes() {
        let (_, task) = WakeCount::waker();
        let busy = Arc::new(ConnState::default());
        let closed = Arc::new(ConnState::default());
        let trickling = Arc::new(ConnState::default());
        for conn in [&busy, &closed, &trickling] {
            list(conn, &task);
        }
        list(&busy, &task);
        assert_eq!(listed(), 3, "listed once");
        drop(closed);
        // The rest of an unwanted request body still arriving: looked at, not parked.
        trickling.phase.store(3, Ordering::Relaxed);
        busy.active.store(1, Ordering::Relaxed);
        sweep_all();
        assert_eq!(
            listed(),
            1,
            "the busy and the closed connection left the list"
        );
        assert!(!busy.listed.load(Ordering::Relaxed));
        sweep_all();
        assert!(!trickling.take_park_due());
        // The request ended: the connection lists itself again.
        busy.active.store(0, Ordering::Relaxed);
        busy.epoch.store(2, Ordering::Relaxed);
        list(&busy, &task);
        assert_eq!(listed(), 2);
        sweep_all();
        sweep_all();
        assert!(busy.take_park_due());
        trickling.phase.store(0, Ordering::Relaxed);
        sweep_all();
        assert!(trickling.take_park_due());
        assert_eq!(listed(), 0);
    }

    /// A request that ends a tick after the last sweep sweeps: the connection idle since
    /// that sweep is asked to park, the newly listed one only noted. Its own connection may
    /// be listed already; the sweep comes all the same.
    #[test]
    fn a_request_ending_a_tick_after_the_last_sweep_sweeps() {
        let (woken, task) = WakeCount::waker();
        let quiet = Arc::new(ConnState::default());
        let newly = Arc::new(ConnState::default());
        list(&quiet, &task);
        sweep_all();
        let last = LIST.with_borrow(|list| list.next_sweep) - TICK;
        // Sooner than a tick: listed, no sweep.
        idle(&newly, &task, last + TICK / 2);
        assert_eq!(LIST.with_borrow(|list| list.next_sweep), last + TICK);
        assert!(!quiet.take_park_due());
        // A tick on, a request ending on a listed connection sweeps.
        let other = Arc::new(ConnState::default());
        list(&other, &task);
        idle(&other, &task, last + TICK);
        assert_eq!(LIST.with_borrow(|list| list.next_sweep), last + TICK * 2);
        assert!(quiet.take_park_due(), "idle through a tick");
        assert!(!newly.take_park_due(), "noted at its first sweep");
        assert!(!other.take_park_due());
        assert_eq!(woken.get(), 1);
        assert_eq!(listed(), 2);
        sweep_all();
        sweep_all();
        assert!(newly.take_park_due() && other.take_park_due());
        assert_eq!(listed(), 0);
    }

    #[test]
    fn the_sweep_task_waits_longer_while_traffic_sweeps() {
        assert_eq!(next_wait(TICK, true), TICK * 2);
        assert_eq!(next_wait(TICK * 2, true), TICK * 4);
        assert_eq!(next_wait(LONGEST_WAIT, true), LONGEST_WAIT);
        assert_eq!(next_wait(Duration::from_millis(800), true), LONGEST_WAIT);
        assert_eq!(next_wait(LONGEST_WAIT, false), TICK);
    }

    #[tokio::test]
    async fn the_running_sweep_parks_a_connection_that_stays_idle() {
        let sweep = tokio::spawn(run());
        // Nothing listed: the sweep waits for a first entry.
        tokio::time::sleep(PARK_AFTER * 2).await;
        let (woken, task) = WakeCount::waker();
        let conn = Arc::new(ConnState::default());
        idle(&conn, &task, Instant::now());
        let listed_at = std::time::Instant::now();
        let due = tokio::time::timeout(Duration::from_secs(5), async {
            while !conn.take_park_due() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        due.await.expect("the park came due");
        assert!(
            listed_at.elapsed() >= TICK,
            "idle through a whole tick first"
        );
        assert_eq!(woken.get(), 1);
        sweep.abort();
    }
}
