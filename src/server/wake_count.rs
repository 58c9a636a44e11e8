//! A waker that counts its wakes, for the unit tests of what wakes connection tasks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

#[derive(Default)]
pub struct WakeCount(AtomicUsize);

impl WakeCount {
    /// A counter and a waker that bumps it.
    pub fn waker() -> (Arc<WakeCount>, Waker) {
        let count = Arc::new(WakeCount::default());
        (count.clone(), Waker::from(count))
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
