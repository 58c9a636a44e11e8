//! Idle keep-alive connections, for memory per connection: open N HTTP/1.1 connections,
//! use each once (so the target has set it up completely), hold them all, then close.
//! The caller reads the target's memory while `IDLE_READY` is up.

use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::client::{self, Target};

/// Connections opened at once; more would overflow the target's listen backlog.
const BATCH: usize = 128;

/// What the idle run achieved.
pub struct Idle {
    pub opened: usize,
    pub failed: usize,
    pub open_time: Duration,
}

pub async fn hold(target: Target, count: usize, hold_for: Duration, timeout: Duration) -> Idle {
    let started = Instant::now();
    let mut held = Vec::with_capacity(count);
    let mut failed = 0;
    let mut remaining = count;
    while remaining > 0 {
        let batch = remaining.min(BATCH);
        remaining -= batch;
        let mut set = JoinSet::new();
        for _ in 0..batch {
            let target = target.clone();
            set.spawn(async move { client::open_idle(&target, timeout).await });
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(Ok(sender)) => held.push(sender),
                _ => failed += 1,
            }
        }
    }
    let open_time = started.elapsed();
    eprintln!("IDLE_READY {}", held.len());
    tokio::time::sleep(hold_for).await;
    Idle {
        opened: held.len(),
        failed,
        open_time,
    }
}
