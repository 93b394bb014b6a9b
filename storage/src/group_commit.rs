//! Group commit across a shard's partitions. A flush that has written its data asks for it to be
//! made durable here instead of calling `fdatasync` itself; the shard gathers such requests into
//! rounds, one running at a time. A round takes every file that asked while the previous one ran
//! (and those that ask in the same executor turn it starts in), so concurrent produce requests to
//! different partitions of a shard wait for one round, not one sync each.
//!
//! On this class of filesystem every `fdatasync` costs a device cache flush of its own, even when
//! several run at once (measured: 8 files synced concurrently, 757 flushes for 800 `fdatasync`s),
//! so a round that covers at least `syncfs_min_files` files on one filesystem makes them durable
//! with one `syncfs` (one journal commit, one flush) instead. `syncfs` also writes back every
//! other program's dirty page-cache data on that filesystem and waits for it, so it is only used
//! while the machine's dirty and under-writeback page cache (`/proc/meminfo`, checked at most
//! every [`DIRTY_CHECK_INTERVAL`]) is below `syncfs_max_dirty_bytes`; our own segment writes are
//! direct and dirty only some filesystem metadata (about 1.5 MB with 64 busy partitions). Should a `syncfs` fail — it also reports errors of files that are
//! not ours — each file falls back to its own `fdatasync`, so an error is only ever charged to
//! the file that has it. A file only joins a round after its writes
//! have completed, and a round only takes files that joined before it started: nothing is
//! reported durable by a sync that began before its write ended.

use std::cell::{Cell, RefCell};
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use tracing::warn;

use crate::io::{faults, syncfs, SegmentFile};

/// What the shard's sync rounds have done since the thread started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Rounds run.
    pub rounds: u64,
    /// Files made durable (or failed), by rounds or (with `syncfs_min_files` 0) directly.
    pub files: u64,
    /// `syncfs` calls (one per filesystem per round that used it).
    pub syncfs: u64,
    /// `fdatasync` calls.
    pub fdatasyncs: u64,
    /// Rounds that could have used `syncfs` but synced each file because the page cache held
    /// too much dirty data.
    pub syncfs_skipped_dirty: u64,
    /// Durable flushes that needed no sync: their file's writes are durable as each completes
    /// (`WriteDurability::EachWrite`).
    pub written_through: u64,
}

/// When a shard's sync rounds share a `syncfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPolicy {
    /// A round covering at least this many files on one filesystem uses one `syncfs`; 0: no
    /// rounds at all, every file is `fdatasync`ed at once (`log.flush.syncfs.min.files`).
    pub syncfs_min_files: usize,
    /// ... while the machine's dirty and under-writeback page cache is below this many bytes
    /// (`log.flush.syncfs.max.dirty.bytes`); 0: never.
    pub syncfs_max_dirty_bytes: u64,
}

/// How long a reading of the machine's dirty page cache is trusted.
pub const DIRTY_CHECK_INTERVAL: Duration = Duration::from_millis(10);

struct Member {
    file: Rc<SegmentFile>,
    done: oneshot::Sender<io::Result<()>>,
}

struct Rounds {
    running: bool,
    /// Files waiting for the next round. Bounded without a limit of its own: a partition runs
    /// one flush at a time and a flush waits on one file at a time, so this holds at most one
    /// file per partition of the shard.
    pending: Vec<Member>,
    policy: SyncPolicy,
    /// The last dirty page-cache reading: when, and the bytes (None: unreadable).
    dirty: Option<(Instant, Option<u64>)>,
}

thread_local! {
    static ROUNDS: RefCell<Rounds> = const {
        RefCell::new(Rounds {
            running: false,
            pending: Vec::new(),
            policy: SyncPolicy { syncfs_min_files: 0, syncfs_max_dirty_bytes: 0 },
            dirty: None,
        })
    };
    static STATS: Cell<SyncStats> = const {
        Cell::new(SyncStats {
            rounds: 0, files: 0, syncfs: 0, fdatasyncs: 0, syncfs_skipped_dirty: 0, written_through: 0,
        })
    };
}

/// Told each sync round's (or direct `fdatasync`'s) file count and duration, on the shard's
/// thread: how a shard's metrics see its rounds without this crate knowing about them.
pub type RoundObserver = Box<dyn Fn(usize, Duration)>;

thread_local! {
    static OBSERVER: RefCell<Option<RoundObserver>> = const { RefCell::new(None) };
}

/// Sets this thread's (shard's) round observer, replacing any earlier one.
pub fn observe_rounds(observer: RoundObserver) {
    OBSERVER.with(|o| *o.borrow_mut() = Some(observer));
}

fn observed(files: usize, elapsed: Duration) {
    OBSERVER.with(|o| {
        if let Some(f) = o.borrow().as_ref() {
            f(files, elapsed);
        }
    });
}

/// This thread's (shard's) sync statistics.
pub fn stats() -> SyncStats {
    STATS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut SyncStats)) {
    STATS.with(|s| {
        let mut v = s.get();
        f(&mut v);
        s.set(v);
    });
}

/// Counts a durable flush whose writes were durable as they completed, with no sync.
pub fn written_through() {
    count(|s| s.written_through += 1);
}

/// Makes what has been written to `file` durable in the shard's next sync round. Call it only
/// once the writes to be covered have completed. With `policy.syncfs_min_files` 0 there are no
/// rounds — the file is `fdatasync`ed at once, as waiting for a round would only delay it.
pub async fn sync(file: Rc<SegmentFile>, policy: SyncPolicy) -> io::Result<()> {
    if policy.syncfs_min_files == 0 {
        count(|s| {
            s.files += 1;
            s.fdatasyncs += 1;
        });
        let start = Instant::now();
        let result = file.fdatasync().await;
        observed(1, start.elapsed());
        return result;
    }
    let (done, result) = oneshot::channel();
    let start = ROUNDS.with(|r| {
        let mut r = r.borrow_mut();
        r.pending.push(Member { file, done });
        r.policy = policy;
        !std::mem::replace(&mut r.running, true)
    });
    if start {
        glommio::spawn_local(drive()).detach();
    }
    result
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the shard stopped before the sync ran")))
}

/// Runs rounds while files are waiting. It first lets the tasks that are ready in this executor
/// turn run, so flushes whose writes completed together join the same round.
async fn drive() {
    loop {
        futures_lite::future::yield_now().await;
        let (members, policy) = ROUNDS.with(|r| {
            let mut r = r.borrow_mut();
            let members = std::mem::take(&mut r.pending);
            if members.is_empty() {
                r.running = false;
            }
            (members, r.policy)
        });
        if members.is_empty() {
            return;
        }
        let mut syncfs_min_files = policy.syncfs_min_files;
        if members.len() >= syncfs_min_files && !page_cache_allows_syncfs(policy) {
            count(|s| s.syncfs_skipped_dirty += 1);
            syncfs_min_files = usize::MAX;
        }
        count(|s| {
            s.rounds += 1;
            s.files += members.len() as u64;
        });
        let files = members.len();
        let round_start = Instant::now();
        let mut by_device: Vec<((u32, u32), Vec<Member>)> = Vec::new();
        for m in members {
            let device = m.file.device();
            match by_device.iter_mut().find(|(d, _)| *d == device) {
                Some((_, group)) => group.push(m),
                None => by_device.push((device, vec![m])),
            }
        }
        futures::future::join_all(
            by_device
                .into_iter()
                .map(|(_, group)| sync_filesystem_group(group, syncfs_min_files)),
        )
        .await;
        observed(files, round_start.elapsed());
    }
}

/// Whether the machine's dirty and under-writeback page cache is below the policy's bound,
/// from a reading at most [`DIRTY_CHECK_INTERVAL`] old. Unreadable counts as too much.
fn page_cache_allows_syncfs(policy: SyncPolicy) -> bool {
    if policy.syncfs_max_dirty_bytes == 0 {
        return false;
    }
    let now = Instant::now();
    let dirty = ROUNDS.with(|r| {
        let mut r = r.borrow_mut();
        match r.dirty {
            Some((at, bytes)) if now.duration_since(at) < DIRTY_CHECK_INTERVAL => bytes,
            _ => {
                // procfs is answered from memory: a short read, not disk I/O.
                let bytes = std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|m| dirty_bytes(&m));
                r.dirty = Some((now, bytes));
                bytes
            }
        }
    });
    dirty.is_some_and(|d| d < policy.syncfs_max_dirty_bytes)
}

/// `Dirty` + `Writeback` of a `/proc/meminfo` text, in bytes.
pub fn dirty_bytes(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kib = rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
            Some(kib * 1024)
        })
    };
    Some(field("Dirty")? + field("Writeback")?)
}

/// Syncs the files of one round that live on one filesystem.
async fn sync_filesystem_group(group: Vec<Member>, syncfs_min_files: usize) {
    if group.len() < syncfs_min_files {
        return fdatasync_each(group).await;
    }
    // The fault seam is per file; a file whose sync is made to fail fails alone.
    let mut members = Vec::with_capacity(group.len());
    for m in group {
        match faults::check(m.file.path(), faults::FileOp::Sync) {
            Ok(()) => members.push(m),
            Err(e) => {
                let _ = m.done.send(Err(e));
            }
        }
    }
    let Some(dir) = members
        .first()
        .and_then(|m| m.file.path().parent().map(Path::to_path_buf))
    else {
        return fdatasync_each(members).await;
    };
    count(|s| s.syncfs += 1);
    match syncfs(&dir).await {
        Ok(()) => {
            for m in members {
                let _ = m.done.send(Ok(()));
            }
        }
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, files = members.len(), "syncfs failed; syncing each file on its own");
            fdatasync_each(members).await;
        }
    }
}

async fn fdatasync_each(members: Vec<Member>) {
    count(|s| s.fdatasyncs += members.len() as u64);
    let results = futures::future::join_all(members.iter().map(|m| m.file.fdatasync())).await;
    for (m, r) in members.into_iter().zip(results) {
        let _ = m.done.send(r);
    }
}
