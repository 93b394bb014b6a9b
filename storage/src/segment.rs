//! One segment of a partition log: its file, summary and sparse index; scanning it on open; and
//! its index file (`<base>.index`), written once the segment is closed and durable, or for the
//! active segment at a clean shutdown.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use tracing::warn;

use crate::index::{IndexFile, SegmentIndex};
use crate::io::{ReadBuf, SegmentFile};
use crate::producer_state::ProducerStateTable;
use crate::scan::{scan_chunk_with, BatchEntry, ScanEnd};
use crate::txn::{batch_kind, AbortedTxn};

/// Bytes read per step while scanning a segment.
pub const SCAN_READ_BYTES: usize = 1 << 20;

pub struct Segment {
    pub base_offset: i64,
    pub file: Rc<SegmentFile>,
    /// Logical size: bytes of valid batches. The file may be longer by block padding.
    pub size: u64,
    /// One past the last offset in the segment; the base offset while it is empty.
    pub next_offset: i64,
    /// Max timestamp of the first batch: `segment.ms` counts from it.
    pub first_timestamp: Option<i64>,
    /// Newest batch timestamp in the segment; retention by time compares against it.
    pub max_timestamp: i64,
    pub index: SegmentIndex,
    /// The aborted transactions whose ABORT markers are in this segment, in marker order
    /// (Kafka's `.txnindex`; 32 bytes each, kept in the index file).
    pub aborted: Vec<AbortedTxn>,
}

impl Segment {
    pub fn empty(base_offset: i64, file: Rc<SegmentFile>) -> Self {
        Self {
            base_offset,
            file,
            size: 0,
            next_offset: base_offset,
            first_timestamp: None,
            max_timestamp: -1,
            index: SegmentIndex::default(),
            aborted: Vec::new(),
        }
    }

    pub fn from_index(base_offset: i64, file: Rc<SegmentFile>, f: IndexFile) -> Self {
        Self {
            base_offset,
            file,
            size: f.size,
            next_offset: f.next_offset,
            first_timestamp: (f.size > 0).then_some(f.first_timestamp),
            max_timestamp: f.max_timestamp,
            index: f.index,
            aborted: f.aborted,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Heap bytes of the in-memory indexes: the sparse index and the aborted transactions.
    pub fn heap_bytes(&self) -> usize {
        self.index.heap_bytes() + self.aborted.capacity() * crate::txn::ABORTED_TXN_BYTES
    }

    /// Notes a batch appended at the end of the segment.
    pub fn on_batch(&mut self, e: &BatchEntry, index_interval_bytes: u64) {
        debug_assert_eq!(e.position, self.size);
        self.index.on_batch(
            self.relative(e.base_offset),
            e.position as u32,
            e.size,
            e.max_timestamp,
            index_interval_bytes,
        );
        self.size = e.position + u64::from(e.size);
        self.next_offset = e.last_offset + 1;
        self.first_timestamp.get_or_insert(e.max_timestamp);
        self.max_timestamp = self.max_timestamp.max(e.max_timestamp);
    }

    /// `offset` relative to the base; segments roll before it could overflow.
    pub fn relative(&self, offset: i64) -> u32 {
        u32::try_from(offset - self.base_offset).expect("offset within the segment's range")
    }

    /// Where to start reading for `offset`: `(position, base offset of the batch there)`.
    pub fn locate(&self, offset: i64) -> (u64, i64) {
        if offset <= self.base_offset {
            return (0, self.base_offset);
        }
        let (rel, pos) = self
            .index
            .lookup_offset(self.relative(offset.min(self.next_offset)));
        (u64::from(pos), self.base_offset + i64::from(rel))
    }

    pub fn index_file(&self, producers: Option<&ProducerStateTable>) -> IndexFile {
        IndexFile {
            size: self.size,
            next_offset: self.next_offset,
            first_timestamp: self.first_timestamp.unwrap_or(-1),
            max_timestamp: self.max_timestamp,
            index: self.index.clone(),
            producers: producers.cloned(),
            aborted: self.aborted.clone(),
        }
    }
}

pub fn segment_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

pub fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.index"))
}

/// The base offsets of the segments in `dir`, in order. On the calling thread: a shard runs it
/// through [`crate::io::blocking`].
pub fn list_segments(dir: &Path) -> std::io::Result<Vec<i64>> {
    let mut bases = Vec::new();
    for name in crate::io::now::read_dir_names(dir)? {
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Writes the index file of a segment: a temporary file renamed into place. With `durable` the
/// file and the directory are synced (a clean-shutdown marker is about to rely on it); otherwise
/// a torn index file fails its checksum and the segment is scanned instead.
pub async fn write_index(
    dir: &Path,
    base: i64,
    f: &IndexFile,
    durable: bool,
) -> std::io::Result<()> {
    let name = format!("{base:020}.index");
    crate::io::write_file_atomic(dir, &name, f.encode(), durable).await
}

/// The index file of a segment whose file is `file_size` bytes, if it is intact and describes
/// exactly that many bytes. An index is written only after its segment was trimmed to its
/// logical size, and a segment's file only grows while it is written to, so an index that was
/// true once and has gone stale (appends after a clean start, a roll whose index never made it
/// to disk) always disagrees on the size, and the segment is scanned instead.
pub async fn read_index(dir: &Path, base: i64, file_size: u64) -> Option<IndexFile> {
    let path = index_path(dir, base);
    let bytes = crate::io::read_file(&path).await.ok()??;
    let f = IndexFile::decode(&bytes);
    let fits = |f: &IndexFile| {
        f.next_offset >= base && (f.size == 0 || f.next_offset > base) && f.size == file_size
    };
    match f {
        Some(f) if fits(&f) => Some(f),
        _ => {
            warn!(path = %path.display(), "index file is damaged or stale; scanning the segment");
            None
        }
    }
}

/// Removes a segment's index file, if it has one.
pub async fn remove_index(dir: &Path, base: i64) -> std::io::Result<()> {
    crate::io::remove_file_if_exists(&index_path(dir, base))
        .await
        .map(drop)
}

/// [`remove_index`] on the calling thread, for work already running on the blocking thread.
pub fn remove_index_now(dir: &Path, base: i64) -> std::io::Result<()> {
    crate::io::now::remove_file_if_exists(&index_path(dir, base)).map(drop)
}

/// Scans a segment file batch by batch, building its index and, if given, replaying its
/// producer batches (and then rebuilding its aborted transactions from its ABORT markers,
/// which needs the producer state before the segment). Returns the segment and whether anything after the valid prefix had to be
/// left out.
pub async fn recover_segment(
    file: Rc<SegmentFile>,
    base: i64,
    mut producers: Option<&mut ProducerStateTable>,
    index_interval_bytes: u64,
    gaps: bool,
) -> std::io::Result<(Segment, bool)> {
    let file_size = file.file_size().await?;
    let mut seg = Segment::empty(base, file.clone());
    let mut position = 0u64;
    let mut want = SCAN_READ_BYTES;
    let valid_end = loop {
        if position >= file_size {
            break position;
        }
        let len = want.min((file_size - position) as usize);
        let buf = file.read_at(position, len).await?;
        let chunk = scan_chunk_with(&buf, position, seg.next_offset, gaps);
        for (entry, header) in &chunk.batches {
            if let Some(producers) = producers.as_deref_mut() {
                let at = (entry.position - position) as usize;
                let bytes = &buf[at..at + entry.size as usize];
                if let Some(aborted) = producers.apply(header, batch_kind(header, bytes)) {
                    seg.aborted.push(aborted);
                }
            }
            seg.on_batch(entry, index_interval_bytes);
        }
        match chunk.end {
            ScanEnd::NeedMore {
                position: p,
                needed,
            } => {
                if p + needed as u64 > file_size {
                    if p < file_size && !all_zero(&buf[(p - position) as usize..]) {
                        warn!(path = %file.path().display(), position = p, "torn batch at the end of the segment");
                    }
                    break p;
                }
                want = needed.max(SCAN_READ_BYTES);
                position = p;
            }
            ScanEnd::Stop {
                position: p,
                reason,
            } => {
                let rest = &buf[(p - position) as usize..];
                if !all_zero(rest) {
                    warn!(path = %file.path().display(), position = p, %reason, "invalid data after the valid log");
                }
                break p;
            }
        }
    };
    seg.index.shrink_to_fit();
    Ok((seg, valid_end < file_size))
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

/// Reads a segment's valid batches chunk by chunk, up to `limit`.
pub struct SegmentReader {
    file: Rc<SegmentFile>,
    position: u64,
    limit: u64,
    expect: i64,
    gaps: bool,
    want: usize,
}

/// One chunk of a segment: its bytes from file position `position`, and the whole batches in it.
pub struct Chunk {
    pub data: ReadBuf,
    pub position: u64,
    pub batches: Vec<BatchEntry>,
}

impl Chunk {
    pub fn bytes_of(&self, e: &BatchEntry) -> &[u8] {
        let at = (e.position - self.position) as usize;
        &self.data[at..at + e.size as usize]
    }
}

impl SegmentReader {
    pub fn new(file: Rc<SegmentFile>, base: i64, limit: u64, gaps: bool) -> Self {
        Self::starting_at(file, 0, base, limit, gaps)
    }

    /// Reads from `position`, where a batch starting at offset `expect` lies.
    pub fn starting_at(
        file: Rc<SegmentFile>,
        position: u64,
        expect: i64,
        limit: u64,
        gaps: bool,
    ) -> Self {
        Self {
            file,
            position,
            limit,
            expect,
            gaps,
            want: SCAN_READ_BYTES,
        }
    }

    /// The next chunk, or `None` at the limit. Invalid data before the limit is an
    /// `InvalidData` error; a failed or short read is any other error.
    pub async fn next(&mut self) -> std::io::Result<Option<Chunk>> {
        if self.position >= self.limit {
            return Ok(None);
        }
        let len = self.want.min((self.limit - self.position) as usize);
        let data = self.file.read_at(self.position, len).await?;
        if data.len() < len {
            return Err(std::io::Error::other(format!(
                "short read of {}: {} of {len} bytes at {}",
                self.file.path().display(),
                data.len(),
                self.position
            )));
        }
        let scan = scan_chunk_with(&data, self.position, self.expect, self.gaps);
        let chunk_at = self.position;
        match scan.end {
            ScanEnd::NeedMore { position, needed } => {
                if scan.batches.is_empty() && position + needed as u64 > self.limit {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "batch at {position} of {} runs past the end of the log",
                            self.file.path().display()
                        ),
                    ));
                }
                self.position = position;
                self.want = needed.max(SCAN_READ_BYTES);
            }
            ScanEnd::Stop { position, reason } => {
                if position < self.limit {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "corrupt batch at {position} of {}: {reason}",
                            self.file.path().display()
                        ),
                    ));
                }
                self.position = self.limit;
            }
        }
        if let Some((last, _)) = scan.batches.last() {
            self.expect = last.last_offset + 1;
        }
        Ok(Some(Chunk {
            data,
            position: chunk_at,
            batches: scan.batches.into_iter().map(|(e, _)| e).collect(),
        }))
    }
}

/// Bytes buffered before a whole-block write while building a segment.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// Writes a new segment file from batches in offset order (the cleaner's output), building its
/// index on the way. Whole blocks are written as they fill; `finish` pads, trims and syncs.
pub struct SegmentWriter {
    seg: Segment,
    pending: Vec<u8>,
    /// File position of `pending[0]`, block-aligned.
    written: u64,
    interval: u64,
}

impl SegmentWriter {
    pub async fn create(path: &Path, base: i64, interval: u64) -> std::io::Result<Self> {
        let file = Rc::new(SegmentFile::open(path, true).await?);
        file.truncate(0).await?;
        Ok(Self {
            seg: Segment::empty(base, file),
            pending: Vec::with_capacity(WRITE_CHUNK_BYTES + (64 << 10)),
            written: 0,
            interval,
        })
    }

    /// Appends one valid batch whose offsets follow those already written.
    pub async fn push(&mut self, batch: &[u8], entry: &BatchEntry) -> std::io::Result<()> {
        let e = BatchEntry {
            position: self.seg.size,
            size: batch.len() as u32,
            ..*entry
        };
        self.seg.on_batch(&e, self.interval);
        self.pending.extend_from_slice(batch);
        if self.pending.len() >= WRITE_CHUNK_BYTES {
            let file = &self.seg.file;
            let whole = self.pending.len() / file.alignment() as usize * file.alignment() as usize;
            file.write_image(file.block_image(&self.pending[..whole]), self.written)
                .await?;
            self.pending.drain(..whole);
            self.written += whole as u64;
        }
        Ok(())
    }

    /// Writes the rest, trims the file to its logical size and syncs it.
    pub async fn finish(self) -> std::io::Result<Segment> {
        let file = &self.seg.file;
        if !self.pending.is_empty() {
            file.write_image(file.block_image(&self.pending), self.written)
                .await?;
        }
        file.truncate(self.seg.size).await?;
        file.fdatasync().await?;
        Ok(self.seg)
    }
}
