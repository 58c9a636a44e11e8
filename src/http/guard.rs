//! What a body keeps until it is done, opaque to the HTTP layer.
//!
//! A response holds the worker's load, the request's admission ticket and the connection's
//! activity until its last byte; a held request prefix holds its share of the body budget
//! until it is handed on. Those belong to modules above this one, so a body sees each as a
//! [`Guard`]: something released exactly once, by being dropped.

use std::fmt;
use std::sync::Arc;

/// A count on something shared, taken back by [`Release::release`] when its [`Guard`] goes.
pub trait Release: Send + Sync + 'static {
    fn release(&self);
}

/// Something held until the body carrying it ends, fails or is dropped.
pub struct Guard(Held);

enum Held {
    /// Owned bookkeeping whose own `Drop` releases it.
    Owned { _held: Box<dyn Send> },
    /// A count on something already shared: the `Arc` the holder has anyway, so no
    /// allocation.
    Counted(Arc<dyn Release>),
}

impl Guard {
    /// Holds `held` (one small allocation; a tuple holds several things in one).
    pub fn new(held: impl Send + 'static) -> Guard {
        Guard(Held::Owned {
            _held: Box::new(held),
        })
    }

    /// Calls `count.release()` once, when this guard is dropped.
    pub fn counted(count: Arc<dyn Release>) -> Guard {
        Guard(Held::Counted(count))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Held::Counted(count) = &self.0 {
            count.release();
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Guard")
    }
}
