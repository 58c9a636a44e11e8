//! When to park an idle HTTP/1.1 connection, decided for all of a thread's connections by
//! one sweep every [`TICK`] instead of by a timer of each connection's own.
//!
//! A connection's own park timer had to move with every request (one timer-wheel removal
//! and insertion) or else wake its task every [`PARK_AFTER`] while the client kept it busy:
//! a connection serving a few requests every 10 ms was woken for a park it never needed
//! once every few requests, about 2 µs of CPU a request on one machine (`perf/compare --scenario small`).
//! Here a connection that goes idle between requests puts itself on its thread's list,
//! unless it is there already; the sweep reads its request count each tick and asks it to
//! park when the count has not moved for a whole tick and no request is under way. One it
//! finds serving a request leaves the list (a long stream is not looked at every tick) and
//! lists itself again when it next goes idle. So a connection kept busy by back-to-back
//! requests costs a look and at most one listing a tick, not a timer per request, and an
//! idle one is parked after between one and two ticks.
//!
//! Each data-plane thread runs [`run`] beside its accept loop. The list lives in a
//! thread-local: the thread's connections and its sweep never leave the thread, so no lock.

use std::cell::RefCell;
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

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

/// One connection on the list.
struct Entry {
    /// Gone once the connection is over; the entry goes at the next sweep.
    conn: Weak<ConnState>,
    /// The connection's task, woken to park.
    task: Waker,
    /// The connection's request epoch at the last sweep (none before the first).
    seen: Option<u64>,
}

#[derive(Default)]
struct List {
    entries: Vec<Entry>,
    /// The sweep, waiting for a first entry.
    sweeper: Option<Waker>,
}

thread_local! {
    static LIST: RefCell<List> = RefCell::new(List::default());
}

/// Puts an idle HTTP/1.1 connection on its thread's list, unless it is there already.
pub fn enlist(conn: &Arc<ConnState>, task: &Waker) {
    if conn.listed.swap(true, Ordering::Relaxed) {
        return;
    }
    let sweeper = LIST.with_borrow_mut(|list| {
        list.entries.push(Entry {
            conn: Arc::downgrade(conn),
            task: task.clone(),
            seen: None,
        });
        list.sweeper.take()
    });
    if let Some(sweeper) = sweeper {
        sweeper.wake();
    }
}

/// The thread's sweep: runs for the thread's life, sleeping while its list is empty.
pub async fn run() {
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
        tokio::time::sleep(TICK).await;
        LIST.with_borrow_mut(|list| list.entries.retain_mut(sweep));
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
        LIST.with_borrow_mut(|list| list.entries.retain_mut(sweep));
    }

    #[test]
    fn a_connection_idle_through_a_whole_tick_is_asked_to_park_once() {
        let (woken, task) = WakeCount::waker();
        let conn = Arc::new(ConnState::default());
        conn.epoch.store(2, Ordering::Relaxed);
        enlist(&conn, &task);
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
            enlist(conn, &task);
        }
        enlist(&busy, &task);
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
        enlist(&busy, &task);
        assert_eq!(listed(), 2);
        sweep_all();
        sweep_all();
        assert!(busy.take_park_due());
        trickling.phase.store(0, Ordering::Relaxed);
        sweep_all();
        assert!(trickling.take_park_due());
        assert_eq!(listed(), 0);
    }

    #[tokio::test]
    async fn the_running_sweep_parks_a_connection_that_stays_idle() {
        let sweep = tokio::spawn(run());
        // Nothing listed: the sweep waits for a first entry.
        tokio::time::sleep(PARK_AFTER * 2).await;
        let (woken, task) = WakeCount::waker();
        let conn = Arc::new(ConnState::default());
        enlist(&conn, &task);
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
