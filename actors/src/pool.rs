//! The fold pool: the runtime's own threads for CPU-heavy work (folding,
//! serialising), so the actors' thread only ever routes control messages;
//! and, started the first time it is needed, a thread that makes the
//! buffer pool's buffers ahead ([`FoldPool::prefill`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads running jobs in submission order.
pub struct FoldPool {
    tx: Option<flume::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    rank: u32,
    filler: Option<Filler>,
}

/// The thread that makes reserved buffers, and how to stop it.
struct Filler {
    /// Requests: how many buffers of how many bytes.
    tx: Option<flume::Sender<(usize, usize)>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FoldPool {
    /// Starts `n` threads named `taskfold-fold-{rank}-{i}`.
    pub fn new(n: usize, rank: u32) -> std::io::Result<Self> {
        let (tx, rx) = flume::unbounded::<Job>();
        let threads = (0..n.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("taskfold-fold-{rank}-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(FoldPool {
            tx: Some(tx),
            threads,
            rank,
            filler: None,
        })
    }

    /// Makes `count` buffers of `capacity` bytes that the buffer pool
    /// reserved ([`taskfold_core::pool::reserve`]), one after the other on
    /// a thread of their own (`taskfold-fill-{rank}`), so that neither the
    /// actors nor the folds wait for the kernel to zero their pages. If the
    /// thread cannot be started, the reservation is given up and the pool
    /// grows on misses as before.
    pub fn prefill(&mut self, count: usize, capacity: usize) {
        if count == 0 {
            return;
        }
        if self.filler.is_none() {
            match Filler::start(self.rank) {
                Ok(f) => self.filler = Some(f),
                Err(e) => {
                    tracing::warn!(rank = self.rank, error = %e, "cannot start the buffer filler");
                    taskfold_core::pool::unreserve(count, capacity);
                    return;
                }
            }
        }
        let sent = self
            .filler
            .as_ref()
            .and_then(|f| f.tx.as_ref())
            .is_some_and(|tx| tx.send((count, capacity)).is_ok());
        if !sent {
            taskfold_core::pool::unreserve(count, capacity);
        }
    }

    /// Queues a job.
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.tx {
            // Only fails after drop began, when results are no longer wanted.
            let _ = tx.send(Box::new(job));
        }
    }

    /// A handle that queues jobs from any thread (a transport's, for the
    /// segments of a get).
    pub fn submitter(&self) -> Submitter {
        Submitter(self.tx.clone())
    }
}

/// Queues jobs on a [`FoldPool`] from any thread.
#[derive(Clone)]
pub struct Submitter(Option<flume::Sender<Job>>);

impl Submitter {
    /// Queues a job (dropped if the pool is gone).
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(Box::new(job));
        }
    }
}

impl Filler {
    fn start(rank: u32) -> std::io::Result<Filler> {
        let (tx, rx) = flume::unbounded::<(usize, usize)>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("taskfold-fill-{rank}"))
            .spawn(move || {
                while let Ok((count, capacity)) = rx.recv() {
                    for made in 0..count {
                        if stopped.load(Ordering::Relaxed) {
                            // Shutting down: what is left is not made.
                            taskfold_core::pool::unreserve(count - made, capacity);
                            break;
                        }
                        taskfold_core::pool::fill_one(capacity);
                    }
                }
            })?;
        Ok(Filler {
            tx: Some(tx),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        // At most the buffer being made is finished (milliseconds).
        self.stop.store(true, Ordering::Relaxed);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FoldPool {
    fn drop(&mut self) {
        self.filler = None;
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
