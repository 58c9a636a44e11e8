//! Shared fixtures for the policy tests.

use std::sync::Arc;

use crate::fleet::{Status, Worker};

/// `n` ready workers on distinct ports (`http://127.0.0.1:1000`, `:1001`, …).
pub(crate) fn workers(n: usize) -> Vec<Arc<Worker>> {
    (0..n)
        .map(|i| {
            let worker = Worker::for_url(&format!("http://127.0.0.1:{}", 1000 + i))
                .expect("test worker url");
            worker.set_status(Status::Ready);
            Arc::new(worker)
        })
        .collect()
}

/// Puts `n` requests in flight on `worker`; the guards keep them there until dropped.
pub(crate) fn load(worker: &Arc<Worker>, n: usize) -> Vec<crate::fleet::LoadGuard> {
    (0..n).map(|_| worker.track()).collect()
}
