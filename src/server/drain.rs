//! Shutdown as one data-plane thread's connections see it.
//!
//! A watch receiver per connection would take the channel's cross-thread mutex every time
//! a connection task wakes (its `changed()` future registers and unregisters a waiter).
//! Instead the thread's accept loop, which watches the gateway-wide channel anyway, fires
//! the thread's [`Drain`] when shutdown begins: a flag and the wakers of the connections
//! waiting on it, all on this thread, so a connection's look at it is a flag read and, when
//! its waker changed, one store.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One thread's shutdown signal; cheap to clone (all clones are the same signal).
#[derive(Clone, Default)]
pub struct Drain {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    fired: Cell<bool>,
    waiters: RefCell<Waiters>,
}

/// The wakers of the connections that wait, by slot; freed slots are reused, so the list
/// is as long as the most connections the thread has had waiting at once.
#[derive(Default)]
struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Drain {
    /// Begins shutdown for this thread: every waiting connection wakes.
    pub fn fire(&self) {
        self.inner.fired.set(true);
        let wakers: Vec<Waker> = {
            let mut waiters = self.inner.waiters.borrow_mut();
            waiters.slots.iter_mut().filter_map(Option::take).collect()
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// A connection's handle on the signal.
    pub fn waiter(&self) -> DrainWait {
        DrainWait {
            inner: self.inner.clone(),
            slot: None,
            registered: None,
        }
    }
}

/// One connection's wait for its thread's [`Drain`]; frees its slot when dropped.
pub struct DrainWait {
    inner: Rc<Inner>,
    slot: Option<usize>,
    /// The waker last put in the slot. A connection is polled with the same waker every
    /// time, so a look at the signal compares against this copy in the connection's own
    /// state and leaves the thread's shared list alone (it was a borrow and a lookup in
    /// the list on every wake of every connection).
    registered: Option<Waker>,
}

impl DrainWait {
    pub fn is_fired(&self) -> bool {
        self.inner.fired.get()
    }

    /// Ready once shutdown has begun.
    pub fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.inner.fired.get() {
            return Poll::Ready(());
        }
        let waker = cx.waker();
        if self.registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return Poll::Pending;
        }
        self.registered = Some(waker.clone());
        let mut waiters = self.inner.waiters.borrow_mut();
        match self.slot {
            Some(slot) => waiters.slots[slot] = Some(waker.clone()),
            None => {
                let slot = match waiters.free.pop() {
                    Some(slot) => {
                        waiters.slots[slot] = Some(waker.clone());
                        slot
                    }
                    None => {
                        waiters.slots.push(Some(waker.clone()));
                        waiters.slots.len() - 1
                    }
                };
                self.slot = Some(slot);
            }
        }
        Poll::Pending
    }

    /// Resolves once shutdown has begun.
    pub async fn fired(&mut self) {
        poll_fn(|cx| self.poll_fired(cx)).await
    }
}

impl Drop for DrainWait {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let mut waiters = self.inner.waiters.borrow_mut();
            waiters.slots[slot] = None;
            waiters.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::wake_count::WakeCount;

    #[test]
    fn firing_wakes_every_waiting_connection_once_and_slots_are_reused() {
        let drain = Drain::default();
        let (count, waker) = WakeCount::waker();
        let mut cx = Context::from_waker(&waker);
        let mut a = drain.waiter();
        let mut b = drain.waiter();
        assert!(a.poll_fired(&mut cx).is_pending());
        assert!(
            a.poll_fired(&mut cx).is_pending(),
            "polled again: same slot"
        );
        assert!(b.poll_fired(&mut cx).is_pending());
        drop(b);
        let mut c = drain.waiter();
        assert!(c.poll_fired(&mut cx).is_pending());
        assert_eq!(
            drain.inner.waiters.borrow().slots.len(),
            2,
            "b's slot reused"
        );
        drain.fire();
        assert_eq!(count.get(), 2);
        assert!(a.poll_fired(&mut cx).is_ready());
        assert!(c.is_fired());
        let mut late = drain.waiter();
        assert!(late.poll_fired(&mut cx).is_ready());
    }

    #[test]
    fn a_new_waker_replaces_the_registered_one() {
        let drain = Drain::default();
        let (first, first_waker) = WakeCount::waker();
        let (second, second_waker) = WakeCount::waker();
        let mut wait = drain.waiter();
        assert!(wait
            .poll_fired(&mut Context::from_waker(&first_waker))
            .is_pending());
        assert!(wait
            .poll_fired(&mut Context::from_waker(&second_waker))
            .is_pending());
        drain.fire();
        assert_eq!((first.get(), second.get()), (0, 1));
    }
}
