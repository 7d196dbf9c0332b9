//! An endpoint outside the job, for the transport's tests (hidden, not
//! part of the API): it opens the same provider as a rank, learns a
//! rank's endpoint name (names are no secret: any process on the fabric
//! may find them), and sends it tagged messages or reads its memory with
//! guessed keys — what a stranger on the fabric can do. See the book's
//! Security chapter, The fabric path.

use super::fi::{
    AddressVector, Completion, CompletionQueue, CqRead, Domain, Endpoint, Fabric, FabricError,
    FiAddr, Posted, RawContext,
};
use super::open::find;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A foreign endpoint of one provider.
pub struct Intruder {
    ep: Endpoint,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
    _domain: Arc<Domain>,
    _fabric: Arc<Fabric>,
}

/// What one operation came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It completed.
    Done,
    /// It failed, with libfabric's message.
    Failed(String),
    /// No completion within the wait.
    Silent,
}

impl Intruder {
    /// Opens an endpoint of `provider` on 127.0.0.1.
    pub fn open(provider: &str) -> Result<Intruder, FabricError> {
        let list = find(&Some(provider.to_string()), Some("127.0.0.1".into()))?;
        let info = list.first();
        let fabric = Fabric::open(info)?;
        let domain = Domain::open(&fabric, info)?;
        let cq = CompletionQueue::open(&domain, 64, false)?;
        let av = AddressVector::open(&domain, 4)?;
        let ep = Endpoint::open(&domain, info, &cq, &av)?;
        Ok(Intruder {
            ep,
            cq,
            av,
            _domain: domain,
            _fabric: fabric,
        })
    }

    /// Inserts a rank's endpoint name.
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr, FabricError> {
        self.av.insert(name)
    }

    /// Sends `bytes` to `dest` with `tag`, and waits (at most `wait`) for
    /// the send's completion.
    pub fn send(&self, dest: FiAddr, tag: u64, bytes: &[u8], wait: Duration) -> Outcome {
        let keep = bytes.to_vec();
        let mut ctx: Box<RawContext> = Box::default();
        let ctx_ptr: *mut RawContext = &mut *ctx;
        // SAFETY: `keep` and `ctx` outlive the operation: `finish` waits for
        // its completion, and on a timeout leaks both (the endpoint may
        // still use them until it is closed).
        let post = || unsafe {
            self.ep.tsend(
                keep.as_ptr(),
                keep.len(),
                std::ptr::null_mut(),
                dest,
                tag,
                ctx_ptr.cast(),
            )
        };
        let out = self.finish(&post, ctx_ptr as usize, wait);
        if out == Outcome::Silent {
            std::mem::forget(ctx);
            std::mem::forget(keep);
        }
        out
    }

    /// Reads `len` bytes at `(addr, key)` of `src`: what came of it, and
    /// the bytes if the read completed.
    pub fn read(
        &self,
        src: FiAddr,
        addr: u64,
        key: u64,
        len: usize,
        wait: Duration,
    ) -> (Outcome, Vec<u8>) {
        let mut buf = vec![0u8; len];
        let buf_ptr = buf.as_mut_ptr();
        let mut ctx: Box<RawContext> = Box::default();
        let ctx_ptr: *mut RawContext = &mut *ctx;
        // SAFETY: as in `send`; `buf` is writable for `len` bytes.
        let post = || unsafe {
            self.ep.read(
                buf_ptr,
                len,
                std::ptr::null_mut(),
                src,
                addr,
                key,
                ctx_ptr.cast(),
            )
        };
        let out = self.finish(&post, ctx_ptr as usize, wait);
        if out == Outcome::Done {
            return (out, buf);
        }
        if out == Outcome::Silent {
            std::mem::forget(ctx);
            std::mem::forget(buf);
        }
        (out, Vec::new())
    }

    /// Posts (again while the provider says so) and waits for the
    /// completion of context `want`.
    fn finish(
        &self,
        post: &dyn Fn() -> Result<Posted, FabricError>,
        want: usize,
        wait: Duration,
    ) -> Outcome {
        let end = Instant::now() + wait;
        let blank = Completion {
            context: 0,
            flags: 0,
            len: 0,
            tag: 0,
            src: libfabric_sys::FI_ADDR_NOTAVAIL,
        };
        let mut comps = [blank; 8];
        let mut posted = false;
        while Instant::now() < end {
            if !posted {
                match post() {
                    Ok(Posted::Yes) => posted = true,
                    Ok(Posted::Again) => {}
                    Err(e) => return Outcome::Failed(e.to_string()),
                }
            }
            match self.cq.read(&mut comps) {
                Ok(CqRead::Entries(n)) if comps[..n].iter().any(|c| c.context == want) => {
                    return Outcome::Done
                }
                Ok(CqRead::Failed(e)) if e.context == want => return Outcome::Failed(e.message),
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Outcome::Failed(e.to_string()),
            }
        }
        if posted {
            Outcome::Silent
        } else {
            Outcome::Failed("the provider never took the operation".into())
        }
    }
}
