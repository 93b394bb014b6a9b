//! Zeros written ahead of the active segment's end (`log.segment.zero.ahead.bytes`), in a task
//! of their own rather than inside the flush that found them due.
//!
//! Zeroing ahead keeps a light partition's writes pure overwrites of blocks already on disk,
//! but a round of it is several 256 KiB writes: 1.5–2 ms on a virtual disk, more when the
//! device stalls. Inside the flush it delayed every acknowledgement waiting on that flush and
//! held the flush slot meanwhile. Here it starts once the flush is published and runs beside
//! the next flushes, which write below where the zeros begin. What touches the file beyond
//! that waits for it: a flush whose writes reach the zeros, and anything that cuts the file
//! (sealing a segment, a truncation, a close, a delete). A round that fails leaves its error
//! for the next flush, which takes the partition offline as a failed write would.

use super::*;

/// The partition's zeros ahead: at most one round running at a time.
pub(super) struct ZerosAhead {
    running: RefCell<Option<Running>>,
    /// The partition is gone (dropped without a close, as tests simulate a crash): a round
    /// running writes nothing more to a file another open may now own.
    abandoned: Cell<bool>,
    done: Event,
    failed: RefCell<Option<String>>,
}

/// A round of zeros in flight: the file, and the offset at or after which they are written.
struct Running {
    file: Rc<SegmentFile>,
    from: u64,
}

impl ZerosAhead {
    pub(super) fn new() -> Rc<Self> {
        Rc::new(Self {
            running: RefCell::new(None),
            abandoned: Cell::new(false),
            done: Event::new(),
            failed: RefCell::new(None),
        })
    }

    /// Starts writing zeros up to `ahead` bytes past `end` in `file`, unless a round is
    /// running already. `file` must know its size (see [`SegmentFile::known_size`]): the zeros
    /// start at or after it.
    pub(super) fn start(self: &Rc<Self>, file: Rc<SegmentFile>, end: u64, ahead: u64) {
        let Some(from) = file.known_size() else {
            return;
        };
        if self.running.borrow().is_some() {
            return;
        }
        *self.running.borrow_mut() = Some(Running {
            file: file.clone(),
            from,
        });
        let me = self.clone();
        glommio::spawn_local(async move {
            let go_on = || !me.abandoned.get();
            if let Err(e) = file.zero_ahead_while(end, ahead, go_on).await {
                *me.failed.borrow_mut() = Some(format!("writing zeros ahead failed: {e}"));
            }
            me.running.borrow_mut().take();
            me.done.notify(usize::MAX);
        })
        .detach();
    }

    /// Waits until no round of zeros is running in `file` at or below `reaching`.
    pub(super) async fn clear_of(&self, file: &SegmentFile, reaching: u64) {
        self.wait_while(|r| std::ptr::eq(&*r.file, file) && r.from < reaching)
            .await
    }

    /// Waits until no round of zeros is running.
    pub(super) async fn idle(&self) {
        self.wait_while(|_| true).await
    }

    async fn wait_while(&self, blocks: impl Fn(&Running) -> bool) {
        loop {
            let listener = self.done.listen();
            if !self.running.borrow().as_ref().is_some_and(&blocks) {
                return;
            }
            listener.await;
        }
    }

    /// The partition is dropped: a running round stops before its next write.
    pub(super) fn abandon(&self) {
        self.abandoned.set(true);
    }

    /// The error of a round that failed since the last call.
    pub(super) fn take_failure(&self) -> Option<String> {
        self.failed.borrow_mut().take()
    }
}
