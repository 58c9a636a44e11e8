//! Decode rooms: how many generations the gateway has placed on one decode worker of a
//! gRPC prefill/decode fleet, against how many that worker takes at once (its window).
//!
//! A decode engine reserves KV-cache room for every generation it is handed; past its
//! capacity a new one waits inside the engine with a prefill's KV cache held for it on
//! the other side. The gateway keeps that wait on its own side instead (the `pd_admission`
//! stage): a dispatch takes a room per sequence before its prefill leg starts, and gives
//! them back when its answer has been relayed. Taking and giving back are atomic
//! operations; a dispatch that finds the window full waits for a release.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The window of a decode worker whose engine does not report `max_running_requests`.
pub const DEFAULT_WINDOW: u32 = 256;

/// One decode worker's rooms in use.
#[derive(Debug, Default)]
pub struct RoomWindow {
    held: AtomicU32,
    freed: Notify,
}

impl RoomWindow {
    /// `count` rooms when `window` has them free now.
    pub fn try_take(self: &Arc<Self>, count: u32, window: u32) -> Option<RoomsHeld> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(count).filter(|&after| after <= window)
            })
            .ok()
            .map(|_| RoomsHeld {
                window: self.clone(),
                count,
            })
    }

    /// `count` rooms as soon as `window` has them free; the caller bounds the wait.
    pub async fn take(self: &Arc<Self>, count: u32, window: u32) -> RoomsHeld {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(held) = self.try_take(count, window) {
                return held;
            }
            freed.await;
        }
    }

    /// Rooms in use now.
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Acquire)
    }
}

/// Rooms taken on a decode worker, given back when dropped.
#[derive(Debug)]
pub struct RoomsHeld {
    window: Arc<RoomWindow>,
    count: u32,
}

impl Drop for RoomsHeld {
    fn drop(&mut self) {
        self.window.held.fetch_sub(self.count, Ordering::AcqRel);
        self.window.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rooms_are_taken_within_the_window_and_given_back() {
        let w = Arc::new(RoomWindow::default());
        let a = w.try_take(2, 3).unwrap();
        assert!(w.try_take(2, 3).is_none());
        let b = w.try_take(1, 3).unwrap();
        assert_eq!(w.held(), 3);
        drop(a);
        assert_eq!(w.held(), 1);
        assert!(w.try_take(3, 3).is_none());
        drop(b);
        assert!(w.try_take(3, 3).is_some());
        assert_eq!(w.held(), 0);
    }

    #[tokio::test]
    async fn a_waiter_gets_the_rooms_a_release_frees() {
        let w = Arc::new(RoomWindow::default());
        let first = w.try_take(1, 1).unwrap();
        let waiter = {
            let w = w.clone();
            tokio::spawn(async move { w.take(1, 1).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(first);
        let held = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.held(), 1);
        drop(held);
        assert_eq!(w.held(), 0);
    }
}
