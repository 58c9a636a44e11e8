//! How much prompt text the gateway parses, renders and tokenizes at once, across every
//! request of the process, and how long a prompt may be before it is read at all.
//!
//! Tokenizing holds many times its text in memory (offsets, pre-token splits, the
//! encoding), so a few prompts of ten megabytes each took a gateway past a gigabyte. Two
//! bounds stop that: a prompt that cannot fit the model's context window is refused from
//! its length in bytes before it is tokenized ([`Language::tokens_at_least`]),
//! and the bodies being understood at once hold a share of one budget, [`BUDGET_BYTES`]; a
//! request that cannot get its share by its deadline is refused (503) rather than queued
//! without end.

use std::time::Instant;

use tokio::sync::{Semaphore, SemaphorePermit};

#[cfg(doc)]
use super::language::Language;

/// Request bytes being parsed, rendered and tokenized at once, process-wide.
pub const BUDGET_BYTES: usize = 16 << 20;

/// The budget is counted in KiB: one permit each.
const UNIT: usize = 1024;
const PERMITS: usize = BUDGET_BYTES / UNIT;

static BUDGET: Semaphore = Semaphore::const_new(PERMITS);

/// A request's share of the budget, given back when dropped.
pub struct Share {
    _permit: SemaphorePermit<'static>,
}

/// The budget was not free for this request by its deadline.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

/// Takes the share of a body of `bytes` (the whole budget for a body larger than it, so
/// such a body is understood alone), waiting until `until` at most.
pub async fn share(bytes: usize, until: Instant) -> Result<Share, Full> {
    let units = bytes.div_ceil(UNIT).clamp(1, PERMITS);
    let units = u32::try_from(units).unwrap_or(u32::MAX);
    match tokio::time::timeout_at(until.into(), BUDGET.acquire_many(units)).await {
        Ok(Ok(permit)) => Ok(Share { _permit: permit }),
        // The semaphore is never closed; a timeout is the only failure.
        Ok(Err(_)) | Err(_) => Err(Full),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn shares_wait_for_room_and_give_it_back() {
        let soon = || Instant::now() + Duration::from_millis(50);
        let whole = share(BUDGET_BYTES * 4, soon())
            .await
            .expect("the whole budget");
        // Nothing is left for anyone else until it is given back.
        assert_eq!(share(10, soon()).await.err(), Some(Full));
        drop(whole);
        let a = share(BUDGET_BYTES / 2, soon()).await.expect("half");
        let b = share(BUDGET_BYTES / 2, soon())
            .await
            .expect("the other half");
        assert_eq!(share(1, soon()).await.err(), Some(Full));
        drop((a, b));
        assert!(share(1, soon()).await.is_ok());
    }
}
