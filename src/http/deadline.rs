//! Deadlines that nearly every request beats, without a timer of each request's own.
//!
//! A request's deadline (`--request-timeout-secs`, half an hour by default) almost never
//! passes: the worker answers first. A tokio `Sleep` per request still goes into the
//! runtime's timer wheel when first polled and comes out when dropped, each time under the
//! driver's lock: about 470 instructions of a small relayed request (callgrind, 64
//! connections). Here a data-plane thread keeps one list of the deadlines its requests wait
//! on and one task, with one timer, that wakes the waiters whose deadline has passed.
//! Joining the list is a push and leaving it a clear; the timer moves only when a deadline
//! earlier than the one it is set for joins (with one timeout for all requests, only the
//! first after a quiet spell). When it fires, the task marks and wakes the waiters whose
//! deadline has passed and sets itself for the earliest one left, so it fires about once a
//! timeout period, not once a request.
//!
//! The list lives in a thread-local: a request's future and its thread's task never leave
//! the thread, so no lock. A thread that does not run [`run`] (outside the data plane)
//! gives each deadline a tokio `Sleep` of its own, as before.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::time::{Instant, Sleep};

/// One waiter's place in its thread's list.
struct Slot {
    at: Instant,
    /// `None` while the slot is free or its deadline has passed.
    waker: Option<Waker>,
    /// Bumped whenever the slot is freed, so a stale key finds nothing.
    generation: u32,
    passed: bool,
}

/// A thread's deadlines and its timer task.
#[derive(Default)]
struct List {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The timer task runs on this thread: deadlines may join the list.
    timer: Option<Waker>,
    /// When the timer task is set to wake.
    armed: Option<Instant>,
}

thread_local! {
    static LIST: RefCell<List> = RefCell::new(List::default());
}

/// Where a waiter stands in its thread's list.
#[derive(Clone, Copy)]
struct Key {
    index: u32,
    generation: u32,
}

/// How a [`Deadline`] is watched.
enum Watch {
    /// Not polled yet.
    Unwatched,
    /// On its thread's list.
    Listed(Key),
    /// Off the data plane: a timer of its own.
    Own(Pin<Box<Sleep>>),
}

/// A point in time one request must not outlive (tokio's clock, which is the system's
/// outside tests that pause it); poll it beside the work it bounds.
pub struct Deadline {
    at: Instant,
    watch: Watch,
}

impl Deadline {
    pub fn new(at: Instant) -> Deadline {
        Deadline {
            at,
            watch: Watch::Unwatched,
        }
    }

    /// Ready once the deadline has passed; until then, the task polling it is woken when it
    /// does.
    pub fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.watch {
            Watch::Listed(key) => LIST.with(|list| list.borrow_mut().poll(*key, cx.waker())),
            Watch::Own(sleep) => sleep.as_mut().poll(cx),
            Watch::Unwatched => {
                let at = self.at;
                match LIST.with(|list| list.borrow_mut().join(at, cx.waker())) {
                    Some(key) => {
                        self.watch = Watch::Listed(key);
                        Poll::Pending
                    }
                    None => {
                        let mut sleep = Box::pin(tokio::time::sleep_until(at));
                        let polled = sleep.as_mut().poll(cx);
                        self.watch = Watch::Own(sleep);
                        polled
                    }
                }
            }
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Watch::Listed(key) = self.watch {
            // A thread-local that is already gone (the thread is ending) has nothing to
            // clear.
            let _ = LIST.try_with(|list| list.borrow_mut().leave(key));
        }
    }
}

impl List {
    /// Puts a waiter for `at` on the list; `None` when no timer task runs on this thread.
    fn join(&mut self, at: Instant, waker: &Waker) -> Option<Key> {
        let timer = self.timer.as_ref()?;
        if self.armed.is_none_or(|armed| at < armed) {
            self.armed = Some(at);
            timer.wake_by_ref();
        }
        let slot = Slot {
            at,
            waker: Some(waker.clone()),
            generation: 0,
            passed: false,
        };
        let key = match self.free.pop() {
            Some(index) => {
                let entry = self.slots.get_mut(index as usize)?;
                let generation = entry.generation;
                *entry = Slot { generation, ..slot };
                Key { index, generation }
            }
            None => {
                let index = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(slot);
                Key {
                    index,
                    generation: 0,
                }
            }
        };
        Some(key)
    }

    fn slot(&mut self, key: Key) -> Option<&mut Slot> {
        self.slots
            .get_mut(key.index as usize)
            .filter(|slot| slot.generation == key.generation)
    }

    fn poll(&mut self, key: Key, waker: &Waker) -> Poll<()> {
        let Some(slot) = self.slot(key) else {
            return Poll::Pending;
        };
        if slot.passed {
            return Poll::Ready(());
        }
        match &mut slot.waker {
            Some(kept) if kept.will_wake(waker) => {}
            kept => *kept = Some(waker.clone()),
        }
        Poll::Pending
    }

    fn leave(&mut self, key: Key) {
        if let Some(slot) = self.slot(key) {
            slot.generation = slot.generation.wrapping_add(1);
            slot.waker = None;
            slot.passed = false;
            self.free.push(key.index);
        }
    }

    /// Marks and wakes the waiters whose deadline is not after `now`; sets the timer for
    /// the earliest deadline left.
    fn expire(&mut self, now: Instant) {
        let mut next: Option<Instant> = None;
        for slot in &mut self.slots {
            if slot.waker.is_none() {
                continue;
            }
            if slot.at > now {
                next = Some(next.map_or(slot.at, |next| next.min(slot.at)));
                continue;
            }
            slot.passed = true;
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
        self.armed = next;
    }
}

/// The thread's deadline timer; run it on every data-plane thread, beside its accept
/// loop, for as long as the thread serves.
pub async fn run() {
    let mut sleep = Box::pin(tokio::time::sleep_until(Instant::now()));
    loop {
        poll_fn(|cx| {
            let armed = LIST.with(|list| {
                let mut list = list.borrow_mut();
                match &list.timer {
                    Some(kept) if kept.will_wake(cx.waker()) => {}
                    _ => list.timer = Some(cx.waker().clone()),
                }
                list.armed
            });
            let Some(at) = armed else {
                return Poll::Pending;
            };
            // A sleep that already fired for `at` answers at once: the expiry below runs
            // again and finds what joined since.
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            sleep.as_mut().poll(cx)
        })
        .await;
        let now = Instant::now();
        LIST.with(|list| list.borrow_mut().expire(now));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Polls `deadline` once from the current task.
    async fn poll_once(deadline: &mut Deadline) -> Poll<()> {
        poll_fn(|cx| Poll::Ready(deadline.poll_passed(cx))).await
    }

    #[tokio::test]
    async fn without_the_timer_task_a_deadline_sleeps_on_its_own() {
        let mut deadline = Deadline::new(Instant::now() + Duration::from_millis(20));
        assert!(poll_once(&mut deadline).await.is_pending());
        assert!(matches!(deadline.watch, Watch::Own(_)));
        let started = Instant::now();
        poll_fn(|cx| deadline.poll_passed(cx)).await;
        assert!(started.elapsed() >= Duration::from_millis(10));
    }

    /// Runs `test` on a local task set beside the thread's timer task.
    async fn beside_the_timer(test: impl Future<Output = ()>) {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let timer = tokio::task::spawn_local(run());
                tokio::task::yield_now().await;
                test.await;
                timer.abort();
            })
            .await;
    }

    #[tokio::test]
    async fn listed_deadlines_pass_in_order_and_leave_no_trace() {
        beside_the_timer(async {
            let start = Instant::now();
            let late = tokio::task::spawn_local(async move {
                let mut deadline = Deadline::new(start + Duration::from_millis(90));
                poll_fn(|cx| deadline.poll_passed(cx)).await;
                Instant::now()
            });
            let early = tokio::task::spawn_local(async move {
                let mut deadline = Deadline::new(start + Duration::from_millis(40));
                poll_fn(|cx| deadline.poll_passed(cx)).await;
                Instant::now()
            });
            // One that is dropped before its time frees its place.
            let mut beaten = Deadline::new(start + Duration::from_millis(20));
            assert!(poll_once(&mut beaten).await.is_pending());
            assert!(matches!(beaten.watch, Watch::Listed(_)));
            drop(beaten);
            let early = early.await.expect("early waiter");
            let late = late.await.expect("late waiter");
            assert!(early >= start + Duration::from_millis(40));
            assert!(late >= start + Duration::from_millis(90));
            assert!(early < late, "each waiter woke at its own deadline");
            LIST.with(|list| {
                let list = list.borrow();
                assert_eq!(list.free.len(), list.slots.len(), "every place freed");
                assert!(list.armed.is_none());
            });
        })
        .await;
    }

    #[tokio::test]
    async fn an_earlier_deadline_sets_the_timer_back() {
        beside_the_timer(async {
            let start = Instant::now();
            // A far deadline sets the timer first; a near one joining later must not wait
            // for it.
            let mut far = Deadline::new(start + Duration::from_secs(600));
            assert!(poll_once(&mut far).await.is_pending());
            let mut near = Deadline::new(start + Duration::from_millis(30));
            poll_fn(|cx| near.poll_passed(cx)).await;
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(30), "{waited:?}");
            assert!(waited < Duration::from_secs(5), "{waited:?}");
            assert!(
                poll_once(&mut far).await.is_pending(),
                "the far one still waits"
            );
        })
        .await;
    }

    #[test]
    fn a_stale_key_finds_nothing() {
        let mut list = List::default();
        let waker = Waker::noop();
        list.timer = Some(waker.clone());
        let now = Instant::now();
        let first = list.join(now, waker).expect("listed");
        list.leave(first);
        let second = list
            .join(now + Duration::from_secs(1), waker)
            .expect("listed");
        assert_eq!(second.index, first.index, "the place is reused");
        list.leave(first);
        assert!(
            list.slot(second).is_some(),
            "leaving twice frees nothing of another's"
        );
        list.expire(now + Duration::from_secs(1));
        assert!(list.poll(second, waker).is_ready());
        assert!(list.poll(first, waker).is_pending());
    }
}
