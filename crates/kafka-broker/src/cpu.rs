//! The validation pool: CPU-heavy request work off the connections' async workers.
//!
//! Decompressing and walking produced batches, and scanning a partition by timestamp,
//! can take from microseconds to a good part of a second. Done on an async worker, a
//! slow one stalls every connection and timer scheduled there. Such work runs here
//! instead: on tokio's blocking threads, at most `validation_threads` jobs at once
//! (a semaphore, so a flood of heavy requests queues for the pool and never grows the
//! thread count). Light work stays inline, where the hop would cost more than the job.

use std::sync::Arc;
use tokio::sync::Semaphore;

/// A bounded pool for CPU-heavy jobs.
#[derive(Debug)]
pub(crate) struct CpuPool {
    permits: Arc<Semaphore>,
}

impl CpuPool {
    /// A pool running at most `threads` jobs at once (at least one).
    pub(crate) fn new(threads: usize) -> Self {
        CpuPool {
            permits: Arc::new(Semaphore::new(threads.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// Runs `job` on a blocking thread once a slot is free. `None` when the job panicked
    /// or the runtime is shutting down.
    pub(crate) async fn run<T, F>(&self, job: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let _slot = permit;
            job()
        })
        .await
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_pool_size_runs_at_once() {
        let pool = Arc::new(CpuPool::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut jobs = Vec::new();
        for _ in 0..8 {
            let (pool, running, peak) = (pool.clone(), running.clone(), peak.clone());
            jobs.push(tokio::spawn(async move {
                pool.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    7
                })
                .await
            }));
        }
        for j in jobs {
            assert_eq!(j.await.unwrap(), Some(7));
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!((1..=2).contains(&peak), "{peak}");
    }
}
