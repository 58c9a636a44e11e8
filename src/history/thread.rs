//! The durable backends' own thread: one current-thread tokio runtime where their
//! connections live and every store call runs.
//!
//! The gateway's data-plane threads each run their own runtime (tokio-uring or epoll), and a
//! request handler on any of them may call the store. A database connection's driver must
//! be polled by a runtime that stays alive whichever thread calls, and its socket belongs to
//! the runtime that opened it; so the connections are opened here, and each call is handed
//! to this runtime as a task and awaited from the caller's side through its join handle
//! (which wakes across runtimes). The call's timeout runs here too, so it holds even when the
//! caller's runtime has no timer.

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::{StoreError, StoreFuture};

/// The thread and its runtime. Dropping it stops the runtime, which drops every task and
/// connection on it.
pub(crate) struct StoreThread {
    handle: Handle,
    timeout: Duration,
    /// Dropped with the store: the thread's `block_on` ends and its runtime with it.
    _stop: oneshot::Sender<()>,
}

impl StoreThread {
    /// Starts the thread, named `tollgate-<name>`. `timeout` bounds every call run on it.
    pub(crate) fn start(name: &str, timeout: Duration) -> Result<StoreThread, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| {
                StoreError::Unavailable(format!("cannot start {name}'s runtime: {err}"))
            })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("tollgate-{name}"))
            .spawn(move || {
                // Either the store was dropped or its sender vanished: both mean stop.
                let _ = runtime.block_on(stopped);
            })
            .map_err(|err| {
                StoreError::Unavailable(format!("cannot start {name}'s thread: {err}"))
            })?;
        Ok(StoreThread {
            handle,
            timeout,
            _stop: stop,
        })
    }

    /// Runs `call` on the store's runtime within the timeout. The call goes on even if the
    /// caller stops waiting, so a write either completes or is rolled back by the store, never
    /// half done by a dropped future.
    pub(crate) fn run<T, F>(&self, call: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let timeout = self.timeout;
        let task = self.handle.spawn(async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Timeout),
            }
        });
        Box::pin(async move {
            match task.await {
                Ok(result) => result,
                Err(err) => Err(StoreError::Unavailable(format!(
                    "the store's call did not finish: {err}"
                ))),
            }
        })
    }

    /// Runs `call` like [`StoreThread::run`] and blocks the calling thread until it ends:
    /// for startup (connect, migrate), where no runtime is running yet.
    pub(crate) fn block<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (done, result) = mpsc::sync_channel(1);
        let timeout = self.timeout;
        self.handle.spawn(async move {
            let outcome = match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Timeout),
            };
            let _ = done.send(outcome);
        });
        // The task answers within its own timeout; the margin covers a busy thread.
        match result.recv_timeout(timeout + Duration::from_secs(1)) {
            Ok(outcome) => outcome,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(StoreError::Timeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(StoreError::Unavailable("the store's thread stopped".into()))
            }
        }
    }
}
