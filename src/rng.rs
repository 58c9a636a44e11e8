//! The gateway's one random source: a per-thread xorshift64* generator, seeded per thread and
//! process. Load spreading (the random policy, rings) and retry jitter need speed and no
//! contention, not cryptographic quality.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    // Distinct per thread and per process; quality needs are modest (load spreading).
    let addr = &STATE as *const _ as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (addr ^ nanos.rotate_left(17)) | 1
}

/// xorshift64* on a per-thread state: a few instructions, good enough to spread load (and
/// retry jitter) evenly, and never contended.
pub fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A uniform-enough index below `n` (`n` > 0); the modulo bias is negligible for fleet sizes.
pub fn below(n: usize) -> usize {
    (next_u64() % n.max(1) as u64) as usize
}

/// Makes this thread's sequence repeatable, so policy tests are deterministic.
#[cfg(test)]
pub fn seed_this_thread(seed: u64) {
    STATE.with(|s| s.set(seed | 1));
}
