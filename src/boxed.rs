//! Boxing a large future without copying it.
//!
//! `Box::pin(future)` builds the future on the stack and then copies all of it into the new
//! box: the type's whole size, although a future that has not started holds only its
//! arguments. The request's future is kilobytes (its state is as large as its largest
//! branch): sampled under load (small relayed chats on 64 connections), that one copy
//! took 2.6 % of the gateway's CPU time, a twelfth of its user time. Taking the box first
//! and writing the future into it lets the compiler build the future in place (the copy
//! left the profile; nothing guarantees it, so `perf/instructions` and a profile are the
//! check).

use std::pin::Pin;

/// The future `make` builds, pinned in a box it is written straight into.
#[inline(always)]
pub fn pinned<F>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_boxed_future_runs_as_built() {
        let words = ["in", "place"];
        let fut = pinned(|| async move { words.join(" ") });
        assert_eq!(fut.await, "in place");
    }
}
