//! The fold pool: the runtime's own threads for CPU-heavy work (folding,
//! serialising), so the actors' thread only ever routes control messages.

use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads running jobs in submission order.
pub struct FoldPool {
    tx: Option<flume::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
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
        })
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

impl Drop for FoldPool {
    fn drop(&mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
