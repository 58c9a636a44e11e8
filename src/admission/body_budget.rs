//! `--max-buffered-request-total-bytes`: a bound on the request-body bytes the gateway
//! holds at once, across all requests.
//!
//! Each request's own hold is bounded already (`--max-buffered-request-bytes` for a body
//! kept for replay, `--max-payload-size` for one routing must read whole), but nothing
//! bounded their sum: a few hundred clients each holding an unfinished upload could take
//! the gateway's memory. A request charges every byte it holds as it arrives, so a small
//! body never reserves more than it has; the charge returns when its [`Charge`] drops.
//!
//! The account is one atomic word updated with compare-and-swap: a charge either fits and
//! is taken whole, or leaves the account untouched (no transient overshoot that could
//! refuse another request). What a request does when its next bytes do not fit is the
//! caller's choice: `proxy` streams the body on instead of holding more, or refuses with
//! 503 `request_buffer_budget_full` when routing needs the whole body.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::http::upload::HoldBudget;

/// The shared account.
#[derive(Debug)]
pub struct BodyBudget {
    limit: u64,
    held: Arc<AtomicU64>,
}

/// One request's share of the budget, given back on drop.
#[derive(Debug)]
pub struct Charge {
    limit: u64,
    held: Arc<AtomicU64>,
    bytes: u64,
}

impl BodyBudget {
    pub fn new(limit: u64) -> BodyBudget {
        BodyBudget {
            limit,
            held: Arc::new(AtomicU64::new(0)),
        }
    }

    /// An empty charge, to grow as bytes arrive.
    pub fn charge(&self) -> Charge {
        Charge {
            limit: self.limit,
            held: self.held.clone(),
            bytes: 0,
        }
    }

    /// Bytes held by all requests right now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

impl Charge {
    /// Adds `bytes` to this charge if the budget has room; otherwise changes nothing and
    /// returns `false`.
    pub fn grow(&mut self, bytes: u64) -> bool {
        let limit = self.limit;
        let fits = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= limit)
            })
            .is_ok();
        if fits {
            self.bytes += bytes;
        }
        fits
    }

    /// Bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl HoldBudget for Charge {
    fn grow(&mut self, bytes: u64) -> bool {
        Charge::grow(self, bytes)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_or_change_nothing_and_return_on_drop() {
        let budget = BodyBudget::new(100);
        let mut a = budget.charge();
        assert!(a.grow(60));
        let mut b = budget.charge();
        assert!(!b.grow(41));
        assert_eq!((b.bytes(), budget.held()), (0, 60));
        assert!(b.grow(40));
        assert_eq!(budget.held(), 100);
        assert!(!a.grow(1));
        drop(a);
        assert_eq!(budget.held(), 40);
        assert!(!b.grow(u64::MAX));
        drop(b);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn concurrent_charges_never_pass_the_limit() {
        let budget = Arc::new(BodyBudget::new(1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let mut c = budget.charge();
                        for _ in 0..10 {
                            if !c.grow(37) {
                                break;
                            }
                            assert!(budget.held() <= 1000);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(budget.held(), 0);
    }
}
