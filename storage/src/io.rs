//! The thin seam between the log and glommio's file API: segment files for direct I/O, the
//! file-system calls io_uring has no form for (directory syncs and listings, removals, renames,
//! small whole files), run on the executor's blocking thread by [`blocking`] so that no shard
//! thread ever waits on the disk, priming an executor's io-polling probe, and the fault injection
//! that tests use to make a file operation fail. Nothing outside this module names a glommio file
//! type but [`ReadBuf`].

use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::{DmaFile, OpenOptions};

/// Bytes read from a segment, in the aligned buffer the read landed in.
pub type ReadBuf = glommio::io::ReadResult;

/// Name of the small file every shard opens first; see [`prime_executor_io`].
pub const IO_PROBE_FILE: &str = ".io-probe";
const IO_PROBE_BYTES: usize = 4096;

/// glommio decides whether a filesystem supports io-polled reads from the first `DmaFile` an
/// executor opens; if that file is empty the probe misfires and every later DMA read on the
/// executor fails with EOPNOTSUPP. So each shard opens a non-empty file on the data filesystem
/// before any segment.
pub async fn prime_executor_io(data_dir: &Path) -> std::io::Result<()> {
    now::mark_shard_thread();
    let path = data_dir.join(IO_PROBE_FILE);
    let probe = path.clone();
    blocking(move || {
        let ok = std::fs::metadata(&probe).map(|m| m.len() as usize >= IO_PROBE_BYTES);
        if !matches!(ok, Ok(true)) {
            // Written aside and renamed into place: the shards of a first start all find the
            // file missing, and one writing it in place (truncate, then write) left another
            // that had just written it reading an empty file.
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let aside = probe.with_extension(format!("{}.{n}.tmp", std::process::id()));
            std::fs::write(&aside, vec![0u8; IO_PROBE_BYTES])?;
            std::fs::rename(&aside, &probe)?;
        }
        Ok(())
    })
    .await?;
    let file = DmaFile::open(&path).await.map_err(std::io::Error::from)?;
    let read = file
        .read_at(0, IO_PROBE_BYTES)
        .await
        .map_err(std::io::Error::from)?;
    assert_eq!(
        read.len(),
        IO_PROBE_BYTES,
        "probe file shorter than written"
    );
    file.close().await.map_err(std::io::Error::from)?;
    Ok(())
}

/// When what is written to a segment file is durable (`log.flush.write.through`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteDurability {
    /// Once the file is synced: the partition asks the shard's sync rounds
    /// ([`crate::group_commit`]) for an `fdatasync` (or a shared `syncfs`) after its writes.
    #[default]
    OnSync,
    /// Once each write completes: the file is opened `O_DSYNC`, so the kernel makes a write's
    /// data, and the metadata needed to read it back, durable before it reports the write done.
    /// A pure overwrite of written blocks inside the file, with no inode change pending, is one
    /// FUA write on a device that has FUA; anything else (no FUA, as on many virtual disks, a
    /// write that extends the file or lands on blocks whose allocation is not committed yet)
    /// runs the equivalent of an `fdatasync` in the kernel before the write completes, on its
    /// own workqueue. Either way a flush needs no separate sync from the shard: one submission
    /// instead of a write, its completion, and an `fdatasync` that io_uring always hands to a
    /// worker thread. Every write through such a handle is durable, the zeros ahead of the
    /// log's end too, so none of this handle's writes can be left in a device cache that a FUA
    /// write bypasses; what an earlier process wrote is synced once when recovery scans it.
    EachWrite,
}

/// One segment file opened for direct I/O. Every operation passes `faults::check` first.
pub struct SegmentFile {
    file: DmaFile,
    path: PathBuf,
    durability: WriteDurability,
    /// The file's size as this handle's writes and truncations left it; `None` until
    /// [`SegmentFile::zero_ahead`] first needs it.
    size: std::cell::Cell<Option<u64>>,
}

/// Bytes of each write of zeros by [`SegmentFile::zero_ahead`]: every one is this long, from one
/// buffer of zeros per shard that all of them share (a write only reads its buffer), so zeroing
/// ahead of many partitions at once costs no memory per partition.
const ZERO_WRITE_BYTES: usize = 256 << 10;

thread_local! {
    static ZEROS: std::cell::RefCell<Option<Rc<glommio::io::DmaBuffer>>> =
        const { std::cell::RefCell::new(None) };
}

impl SegmentFile {
    /// Opens (creating if asked) a segment file for direct reads and writes, made durable by
    /// a sync ([`WriteDurability::OnSync`]).
    pub async fn open(path: &Path, create: bool) -> std::io::Result<Self> {
        Self::open_with(path, create, WriteDurability::OnSync).await
    }

    /// Opens a segment file whose writes are durable as `durability` says.
    pub async fn open_with(
        path: &Path,
        create: bool,
        durability: WriteDurability,
    ) -> std::io::Result<Self> {
        let flags = match durability {
            WriteDurability::OnSync => 0,
            // glommio adds O_DIRECT to these; the kernel keeps O_DSYNC beside it. libc's, not
            // rustix's: on Linux rustix's `OFlags::DSYNC` is O_SYNC, which also makes every
            // write wait for the inode's timestamps.
            WriteDurability::EachWrite => libc::O_DSYNC,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .custom_flags(flags)
            .dma_open(path)
            .await
            .map_err(std::io::Error::from)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            durability,
            size: std::cell::Cell::new(None),
        })
    }

    /// The file descriptor, for what the kernel reports about it (`/proc/self/fdinfo`).
    pub fn descriptor(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// Whether every completed write to this file is already durable
    /// ([`WriteDurability::EachWrite`]), so a flush needs no sync after it.
    pub fn writes_are_durable(&self) -> bool {
        self.durability == WriteDurability::EachWrite
    }

    /// Makes sure the file extends, with zeros written to disk, at least `ahead / 2` bytes past
    /// `end`; when it does not, it writes zeros up to `ahead` bytes past `end`.
    ///
    /// Why: a direct write past the end of the file changes its size (metadata), so on ext4
    /// and XFS it cannot be issued without blocking — io_uring hands it to a worker thread —
    /// and the `fdatasync` after it must commit that metadata too. A write over blocks already
    /// written inside the file is a plain overwrite: issued at once from the shard's ring, and
    /// the sync after it only flushes the device cache. Zeros past the log's end are what a
    /// torn write leaves anyway: recovery cuts the active segment back to its last whole batch,
    /// and sealing or closing a segment trims it to its data.
    pub async fn zero_ahead(&self, end: u64, ahead: u64) -> std::io::Result<()> {
        if ahead == 0 {
            return Ok(());
        }
        let size = match self.size.get() {
            Some(s) => s,
            None => self.file_size().await?,
        };
        self.size.set(Some(size));
        if end.saturating_add(ahead / 2) <= size {
            return Ok(());
        }
        let align = self.alignment();
        let mut at = size.div_ceil(align) * align;
        let to = end + ahead;
        let zeros = ZEROS.with(|z| {
            z.borrow_mut()
                .get_or_insert_with(|| {
                    let mut b = self.file.alloc_dma_buffer(ZERO_WRITE_BYTES);
                    b.as_bytes_mut().fill(0);
                    Rc::new(b)
                })
                .clone()
        });
        while at < to {
            self.write_blocks(zeros.clone(), at).await?;
            at += ZERO_WRITE_BYTES as u64;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The block size direct writes must be aligned to.
    pub fn alignment(&self) -> u64 {
        self.file.alignment()
    }

    pub async fn file_size(&self) -> std::io::Result<u64> {
        self.file.file_size().await.map_err(std::io::Error::from)
    }

    /// Reads `len` bytes at `position`; fewer only at the end of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> std::io::Result<ReadBuf> {
        faults::check(&self.path, faults::FileOp::Read)?;
        self.file
            .read_at(position, len)
            .await
            .map_err(std::io::Error::from)
    }

    /// `bytes` copied into an aligned buffer and zero-padded to whole blocks. Building the image
    /// is synchronous so the caller can copy from borrowed state without holding it across the
    /// write.
    pub fn block_image(&self, bytes: &[u8]) -> BlockImage {
        let align = self.alignment() as usize;
        let padded = bytes.len().div_ceil(align) * align;
        let mut buf = self.file.alloc_dma_buffer(padded);
        let out = buf.as_bytes_mut();
        out[..bytes.len()].copy_from_slice(bytes);
        out[bytes.len()..].fill(0);
        BlockImage { buf }
    }

    /// Writes an image at the aligned `position`; its partial last block is rewritten by the
    /// next image that extends it.
    pub async fn write_image(&self, image: BlockImage, position: u64) -> std::io::Result<()> {
        self.write_blocks(Rc::new(image.buf), position).await
    }

    /// Writes whole aligned blocks at the aligned `position`. A short write — which the kernel
    /// may return for a large direct write, e.g. when it cannot pin every page at once — is
    /// continued from the last whole block it wrote, with the rest copied to a new buffer; a
    /// write that makes no progress is an error.
    async fn write_blocks(
        &self,
        buf: Rc<glommio::io::DmaBuffer>,
        position: u64,
    ) -> std::io::Result<()> {
        let align = self.alignment();
        assert_eq!(
            position % align,
            0,
            "direct writes start on a block boundary"
        );
        faults::check(&self.path, faults::FileOp::Write)?;
        if self.writes_are_durable() {
            // The write is also the sync: a failing device flush fails it.
            faults::check(&self.path, faults::FileOp::Sync)?;
        }
        let padded = buf.len();
        let first = if padded as u64 > align
            && faults::check(&self.path, faults::FileOp::ShortWrite).is_err()
        {
            let mut one = self.file.alloc_dma_buffer(align as usize);
            one.as_bytes_mut()
                .copy_from_slice(&buf.as_bytes()[..align as usize]);
            Rc::new(one)
        } else {
            buf.clone()
        };
        let mut written = self
            .file
            .write_rc_at(first, position)
            .await
            .map_err(std::io::Error::from)?;
        while written < padded {
            // Blocks past the last whole one written are written again: same bytes, same place.
            let done = (written as u64 / align * align) as usize;
            let rest = &buf.as_bytes()[done..];
            let mut tail = self.file.alloc_dma_buffer(rest.len());
            tail.as_bytes_mut().copy_from_slice(rest);
            let at = position + done as u64;
            let more = self
                .file
                .write_rc_at(Rc::new(tail), at)
                .await
                .map_err(std::io::Error::from)?;
            if more == 0 {
                return Err(std::io::Error::other(format!(
                    "direct write made no progress at position {at}: {done} of {padded} bytes written"
                )));
            }
            written = done + more;
        }
        if let Some(size) = self.size.get() {
            self.size.set(Some(size.max(position + padded as u64)));
        }
        Ok(())
    }

    /// The filesystem's device (major, minor): files on one filesystem can share a `syncfs`.
    pub fn device(&self) -> (u32, u32) {
        (self.file.dev_major(), self.file.dev_minor())
    }

    pub async fn fdatasync(&self) -> std::io::Result<()> {
        faults::check(&self.path, faults::FileOp::Sync)?;
        self.file.fdatasync().await.map_err(std::io::Error::from)
    }

    pub async fn truncate(&self, size: u64) -> std::io::Result<()> {
        faults::check(&self.path, faults::FileOp::Write)?;
        // Unknown until the truncation is done: a failed one may have changed it or not.
        self.size.set(None);
        self.file
            .truncate(size)
            .await
            .map_err(std::io::Error::from)?;
        self.size.set(Some(size));
        Ok(())
    }

    pub async fn close(self) -> std::io::Result<()> {
        self.file.close().await.map_err(std::io::Error::from)
    }
}

/// `range` of a DMA read as `Bytes`, without a copy: a fetch response is written to the socket
/// straight from the buffer the disk read into, on whichever shard holds the connection. The
/// buffer is released on the shard that read it (see [`release_returned_buffers`]).
pub fn read_bytes(buf: ReadBuf, range: std::ops::Range<usize>) -> bytes::Bytes {
    let _ = home_bound::release_returned();
    bytes::Bytes::from_owner(home_bound::HomeBound::new(buf)).slice(range)
}

/// Releases the read buffers other shards have finished with; returns how many. Reads do this
/// as they go; a shard's periodic tick calls it too, so an idle shard does not hold them.
pub fn release_returned_buffers() -> usize {
    home_bound::release_returned()
}

/// A glommio read buffer is tied to the executor thread that read it (it holds that reactor's
/// reference-counted source). `HomeBound` lets it travel inside `Bytes` to another shard, which
/// only reads its bytes; when the last `Bytes` is dropped away from home, the buffer is sent back
/// over a channel and dropped by its own thread.
mod home_bound {
    #![allow(unsafe_code)]

    use std::cell::RefCell;
    use std::sync::mpsc::{channel, Receiver, Sender};

    use super::ReadBuf;

    thread_local! {
        /// This thread's return channel, created on its first read handed out.
        static RETURNS: RefCell<Option<Returns>> = const { RefCell::new(None) };
        /// Its address tells threads apart, also while thread-locals are being torn down.
        static MARK: u8 = const { 0 };
    }

    struct Returns {
        tx: Sender<HomeBound>,
        rx: Receiver<HomeBound>,
    }

    impl Drop for Returns {
        fn drop(&mut self) {
            // The thread is exiting and its executor is gone: buffers still coming back are let
            // go without touching the reactor.
            while let Ok(mut b) = self.rx.try_recv() {
                std::mem::forget(b.buf.take());
            }
        }
    }

    fn mark() -> Option<usize> {
        MARK.try_with(|m| m as *const u8 as usize).ok()
    }

    pub(super) fn release_returned() -> usize {
        RETURNS
            .try_with(|r| {
                let mut released = 0;
                if let Some(r) = r.borrow().as_ref() {
                    while let Ok(b) = r.rx.try_recv() {
                        drop(b); // at home: the buffer is released here
                        released += 1;
                    }
                }
                released
            })
            .unwrap_or(0)
    }

    pub(super) struct HomeBound {
        buf: Option<ReadBuf>,
        home: usize,
        returns: Sender<HomeBound>,
    }

    impl HomeBound {
        pub(super) fn new(buf: ReadBuf) -> Self {
            let returns = RETURNS.with(|r| {
                r.borrow_mut()
                    .get_or_insert_with(|| {
                        let (tx, rx) = channel();
                        Returns { tx, rx }
                    })
                    .tx
                    .clone()
            });
            Self {
                buf: Some(buf),
                home: mark().expect("a live thread"),
                returns,
            }
        }
    }

    impl AsRef<[u8]> for HomeBound {
        fn as_ref(&self) -> &[u8] {
            self.buf.as_deref().unwrap_or_default()
        }
    }

    impl Drop for HomeBound {
        fn drop(&mut self) {
            if mark() == Some(self.home) {
                return; // `buf` is dropped at home, as usual
            }
            let Some(buf) = self.buf.take() else {
                return;
            };
            let back = HomeBound {
                buf: Some(buf),
                home: self.home,
                returns: self.returns.clone(),
            };
            if let Err(failed) = self.returns.send(back) {
                // Home has exited: never drop its buffer here.
                let mut back = failed.0;
                std::mem::forget(back.buf.take());
            }
        }
    }

    // SAFETY: `ReadBuf` is `!Send` because it holds a reference-counted handle (`Rc`) to its
    // executor's I/O source. Away from its home thread a `HomeBound` is only moved, read through
    // `as_ref` (which reads the immutable bytes the buffer points at, not the handle), and
    // dropped — and `Drop` never drops the buffer there: it moves it into a `HomeBound` sent
    // back over the home thread's channel (or leaks it if that thread is gone). The handle is
    // therefore only ever cloned or dropped on its home thread. The bytes are written by the
    // disk read before the buffer is handed out and never again, and the channel send that moves
    // it orders those writes before any read on another thread.
    unsafe impl Send for HomeBound {}
}

/// Bytes padded to whole blocks in a buffer aligned for direct I/O.
pub struct BlockImage {
    buf: glommio::io::DmaBuffer,
}

impl SegmentFile {
    /// An empty aligned buffer of `capacity` bytes (a whole number of blocks) for appends.
    pub fn append_buf(&self, capacity: usize) -> AppendBuf {
        assert_eq!(capacity as u64 % self.alignment(), 0, "whole blocks");
        AppendBuf {
            buf: self.file.alloc_dma_buffer(capacity),
            len: 0,
        }
    }

    /// Writes a frozen buffer's blocks at the aligned `position`; the buffer stays readable.
    pub async fn write_frozen(&self, frozen: &FrozenBuf, position: u64) -> std::io::Result<()> {
        self.write_blocks(frozen.buf.clone(), position).await
    }
}

/// An aligned buffer that appends copy into directly, so the bytes a write sends to the disk
/// are the bytes the append copied, with no second copy.
pub struct AppendBuf {
    buf: glommio::io::DmaBuffer,
    len: usize,
}

impl AppendBuf {
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies as much of `bytes` as fits; returns how much did.
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.capacity() - self.len);
        self.buf.as_bytes_mut()[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        n
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_bytes()[..self.len]
    }

    /// The filled bytes, zero-padded to whole blocks of `alignment`, ready to be written and
    /// read from; nothing more can be appended.
    pub fn freeze(mut self, alignment: usize) -> FrozenBuf {
        let padded = self.len.div_ceil(alignment) * alignment;
        self.buf.as_bytes_mut()[self.len..padded].fill(0);
        self.buf.trim_to_size(padded);
        FrozenBuf {
            buf: Rc::new(self.buf),
            len: self.len,
        }
    }
}

/// Bytes that no longer change, in an aligned buffer padded to whole blocks: written to a segment
/// and kept for readers while they are wanted.
#[derive(Clone)]
pub struct FrozenBuf {
    buf: Rc<glommio::io::DmaBuffer>,
    len: usize,
}

impl FrozenBuf {
    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_bytes()[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Injected I/O errors, so tests can watch the log fail the way a real disk makes it fail (EIO,
/// ENOSPC) without a real failing disk. Disarmed, a check costs one relaxed atomic load; the
/// lock is only taken while a test has rules armed.
pub mod faults {
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FileOp {
        Read,
        /// Writes and truncations.
        Write,
        /// `fdatasync`, and the sync inside each write to a written-through file.
        Sync,
        /// A `syncfs` of the filesystem holding a directory (the rule matches the directory).
        SyncFs,
        /// A direct write of more than one block writes only its first block, as the kernel
        /// may (the rule's errno is not used).
        ShortWrite,
    }

    struct Rule {
        path_contains: String,
        op: FileOp,
        errno: i32,
        remaining: Option<u32>,
    }

    static ARMED: AtomicBool = AtomicBool::new(false);
    static RULES: Mutex<Vec<Rule>> = Mutex::new(Vec::new());

    /// Makes `op` on every segment file whose path contains `path_contains` fail with the OS
    /// error `errno`, `times` times (forever with `None`).
    pub fn inject(path_contains: &str, op: FileOp, errno: i32, times: Option<u32>) {
        let mut rules = RULES.lock().unwrap_or_else(|p| p.into_inner());
        rules.push(Rule {
            path_contains: path_contains.to_string(),
            op,
            errno,
            remaining: times,
        });
        ARMED.store(true, Ordering::Release);
    }

    /// Removes the rules whose pattern is `path_contains`.
    pub fn clear(path_contains: &str) {
        let mut rules = RULES.lock().unwrap_or_else(|p| p.into_inner());
        rules.retain(|r| r.path_contains != path_contains);
        ARMED.store(!rules.is_empty(), Ordering::Release);
    }

    pub(crate) fn check(path: &Path, op: FileOp) -> std::io::Result<()> {
        if !ARMED.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut rules = RULES.lock().unwrap_or_else(|p| p.into_inner());
        let path = path.to_string_lossy();
        let Some(rule) = rules
            .iter_mut()
            .find(|r| r.op == op && r.remaining != Some(0) && path.contains(&r.path_contains))
        else {
            return Ok(());
        };
        if let Some(n) = &mut rule.remaining {
            *n -= 1;
        }
        Err(std::io::Error::from_raw_os_error(rule.errno))
    }
}

/// Makes everything written to the filesystem holding `dir` durable — file data, sizes, and
/// the device's write cache — with one `syncfs`. It is not an io_uring operation, so it runs on
/// the executor's blocking thread; the shard goes on meanwhile.
pub async fn syncfs(dir: &Path) -> std::io::Result<()> {
    faults::check(dir, faults::FileOp::SyncFs)?;
    let dir = dir.to_path_buf();
    blocking(move || {
        let handle = std::fs::File::open(&dir)?;
        rustix::fs::syncfs(&handle).map_err(std::io::Error::from)
    })
    .await
}

/// Runs `f` on the executor's blocking thread and waits for it; the shard goes on meanwhile.
/// For file-system calls with no io_uring form (directory listings and fsyncs, removals,
/// renames, small whole-file reads and writes): made on a shard thread they would stall every
/// partition and connection of the shard for as long as the disk takes. Must be called on an
/// executor.
pub async fn blocking<R, F>(f: F) -> std::io::Result<R>
where
    F: FnOnce() -> std::io::Result<R> + Send + 'static,
    R: Send + 'static,
{
    glommio::executor().spawn_blocking(f).await
}

/// Makes a directory entry change (a created, renamed or removed file) durable.
pub async fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    blocking(move || now::sync_dir(&dir)).await
}

/// Removes a file; a missing file is an error (`NotFound`).
pub async fn remove_file(path: &Path) -> std::io::Result<()> {
    let path = path.to_path_buf();
    blocking(move || std::fs::remove_file(&path)).await
}

/// Removes a file if it exists; returns whether it did.
pub async fn remove_file_if_exists(path: &Path) -> std::io::Result<bool> {
    let path = path.to_path_buf();
    blocking(move || now::remove_file_if_exists(&path)).await
}

/// Renames a file, replacing `to` if it exists. Not durable until the directory is synced.
pub async fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    blocking(move || std::fs::rename(&from, &to)).await
}

/// Removes `dir` and everything in it, and makes the removal durable in its parent.
pub async fn remove_dir_all(dir: &Path) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    blocking(move || {
        std::fs::remove_dir_all(&dir)?;
        match dir.parent() {
            Some(parent) => now::sync_dir(parent),
            None => Ok(()),
        }
    })
    .await
}

/// A whole (small) file; `None` if it does not exist.
pub async fn read_file(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let path = path.to_path_buf();
    blocking(move || now::read_file(&path)).await
}

/// Replaces `dir/name` with `bytes` atomically: written to `name.tmp`, renamed over `name`. With
/// `durable` the temporary file is synced before the rename and the directory after it, so the
/// new content survives a power loss once this returns; without, a crash may leave the old
/// content or a torn new one (readers must check).
pub async fn write_file_atomic(
    dir: &Path,
    name: &str,
    bytes: Vec<u8>,
    durable: bool,
) -> std::io::Result<()> {
    let (dir, name) = (dir.to_path_buf(), name.to_string());
    blocking(move || now::write_file_atomic(&dir, &name, &bytes, durable)).await
}

/// The same file-system operations, run on the calling thread: for the blocking thread (the
/// async helpers above call these there), and for start-up, before any shard runs.
///
/// Debug builds check that none of them runs on a shard thread (one that primed its io with
/// [`prime_executor_io`], as every shard does first).
pub mod now {
    use std::cell::Cell;
    use std::io::Write;
    use std::path::Path;

    thread_local! {
        static SHARD_THREAD: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn mark_shard_thread() {
        SHARD_THREAD.with(|s| s.set(true));
    }

    /// Panics in a debug build when called on a shard thread: a blocking file-system call
    /// there stalls the whole shard.
    pub fn assert_off_shard() {
        debug_assert!(
            !SHARD_THREAD.with(Cell::get),
            "a blocking file-system call on a shard thread; run it through io::blocking"
        );
    }

    pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
        assert_off_shard();
        std::fs::File::open(dir)?.sync_all()
    }

    pub fn remove_file_if_exists(path: &Path) -> std::io::Result<bool> {
        assert_off_shard();
        match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
        assert_off_shard();
        if dir.try_exists()? {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        match dir.parent() {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        }
    }

    pub fn read_dir_names(dir: &Path) -> std::io::Result<Vec<String>> {
        assert_off_shard();
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    pub fn read_file(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        assert_off_shard();
        match std::fs::read(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn write_file_atomic(
        dir: &Path,
        name: &str,
        bytes: &[u8],
        durable: bool,
    ) -> std::io::Result<()> {
        assert_off_shard();
        let tmp = dir.join(format!("{name}.tmp"));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            if durable {
                f.sync_all()?;
            }
        }
        std::fs::rename(&tmp, dir.join(name))?;
        if durable {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::faults::{self, FileOp};
    use std::path::Path;

    #[test]
    fn fault_rules_match_path_and_operation_and_count_down() {
        let p = Path::new("/data/rules-test-0/00000000000000000000.log");
        faults::inject("rules-test-0", FileOp::Sync, 5, Some(2));
        assert!(faults::check(p, FileOp::Write).is_ok(), "other operation");
        assert!(
            faults::check(Path::new("/data/other-0/0.log"), FileOp::Sync).is_ok(),
            "other path"
        );
        for _ in 0..2 {
            let e = faults::check(p, FileOp::Sync).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(5));
        }
        assert!(faults::check(p, FileOp::Sync).is_ok(), "used up after 2");
        faults::inject("rules-test-0", FileOp::Read, 28, None);
        for _ in 0..10 {
            assert!(faults::check(p, FileOp::Read).is_err(), "forever");
        }
        faults::clear("rules-test-0");
        assert!(faults::check(p, FileOp::Read).is_ok(), "cleared");
    }
}
