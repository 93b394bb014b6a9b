//! One partition's log: an ordered list of segment files named by base offset, written through
//! aligned direct-I/O buffers and recovered batch by batch on open.
//!
//! Writes: an append copies the batch into the active segment's unflushed tail (the bytes from the
//! last block boundary to the end of the log) and assigns its offsets; a flush writes that tail as
//! whole aligned blocks — rewriting the partial last block each time — then `fdatasync`s. One
//! flush runs at a time per partition, and every waiter whose data it covered is released by it
//! (group commit). The high watermark is the durable end: nothing is visible to readers, and
//! nothing is acknowledged, before it is on disk.
//!
//! A partition is owned by one shard; it is `!Send` and no `RefCell` borrow is held across an
//! `.await`.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use event_listener::{Event, EventListener};
use glommio::sync::Semaphore;
use tracing::{info, warn};
use tributary_protocol::record_batch::{self, BatchHeader};

use crate::io::{sync_dir, SegmentFile};
use crate::producer_state::{ProducerBatch, ProducerStateTable, SequenceCheck, SequenceError};
use crate::scan::{scan_chunk, BatchEntry, ScanEnd};

/// Bytes read per step while scanning a segment on open.
const RECOVERY_READ_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would grow past this (`segment.bytes`).
    pub segment_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "storage error in {dir}: {detail}; the partition is offline until the broker restarts"
    )]
    Storage { dir: String, detail: String },
    #[error("offset {offset} is out of range: log start {log_start_offset}, high watermark {high_watermark}")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
    #[error("corrupt batch in {dir} at position {position}: {detail}; it is not served")]
    Corrupt {
        dir: String,
        position: u64,
        detail: String,
    },
    #[error(transparent)]
    Sequence(#[from] SequenceError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batch was a retry of one already in the log; nothing was written.
    pub duplicate: bool,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    /// Whole batches starting with the one that contains the fetch offset.
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

struct Segment {
    base_offset: i64,
    file: Rc<SegmentFile>,
    /// Logical size: bytes of valid batches. The file may be longer by block padding.
    size: u64,
    entries: Vec<BatchEntry>,
}

/// Bytes of a segment not yet durable, from the aligned position `start` to the log end.
struct Tail {
    segment_base: i64,
    file: Rc<SegmentFile>,
    start: u64,
    bytes: Vec<u8>,
}

struct LogState {
    segments: Vec<Segment>,
    next_offset: i64,
    durable_offset: i64,
    log_start_offset: i64,
    active_tail: Tail,
    /// Tails of segments rolled away from but not yet flushed.
    sealed_tails: Vec<Tail>,
    producers: ProducerStateTable,
    failed: Option<String>,
}

pub struct Partition {
    dir: PathBuf,
    config: Cell<LogConfig>,
    state: RefCell<LogState>,
    append_lock: Semaphore,
    flushing: Cell<bool>,
    flushed: Event,
    advanced: Event,
}

fn segment_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

fn storage_err(dir: &Path, detail: impl std::fmt::Display) -> PartitionError {
    PartitionError::Storage {
        dir: dir.display().to_string(),
        detail: detail.to_string(),
    }
}

fn align_down(v: u64, align: u64) -> u64 {
    v / align * align
}

impl Partition {
    /// Opens the partition in `dir`, creating it if needed and recovering every segment.
    pub async fn open(dir: PathBuf, config: LogConfig) -> Result<Rc<Self>, PartitionError> {
        if !dir.exists() {
            std::fs::create_dir_all(&dir).map_err(|e| storage_err(&dir, e))?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent).map_err(|e| storage_err(&dir, e))?;
            }
        }
        let mut bases = list_segments(&dir).map_err(|e| storage_err(&dir, e))?;
        if bases.is_empty() {
            bases.push(0);
            SegmentFile::open(&segment_path(&dir, 0), true)
                .await
                .map_err(|e| storage_err(&dir, e))?
                .close()
                .await
                .map_err(|e| storage_err(&dir, e))?;
            sync_dir(&dir).map_err(|e| storage_err(&dir, e))?;
        }
        let mut segments: Vec<Segment> = Vec::new();
        let mut producers = ProducerStateTable::default();
        let log_start_offset = bases[0];
        let mut next_offset = log_start_offset;
        // Only the active (last) segment can hold a torn write; it is cut back to its valid
        // prefix. A closed segment that stops early holds a damaged batch: what precedes it is
        // kept, and the offsets after it are skipped rather than dropping later segments.
        let last = bases.len() - 1;
        for (i, base) in bases.iter().copied().enumerate() {
            let path = segment_path(&dir, base);
            if i > 0 && base < next_offset {
                warn!(path = %path.display(), next_offset, "removing a segment that overlaps the one before it");
                std::fs::remove_file(&path).map_err(|e| storage_err(&dir, e))?;
                continue;
            }
            let file = SegmentFile::open(&path, false)
                .await
                .map_err(|e| storage_err(&dir, e))?;
            let (entries, size, torn) = recover_segment(&file, base, &mut producers)
                .await
                .map_err(|e| storage_err(&dir, e))?;
            if i > 0 && base > next_offset {
                if i == last && entries.is_empty() {
                    // Rolled to, but the end of the segment before it never reached the disk:
                    // drop the empty segment so the log ends where its data does.
                    warn!(path = %path.display(), next_offset, "removing an empty segment after a torn one");
                    file.close().await.map_err(|e| storage_err(&dir, e))?;
                    std::fs::remove_file(&path).map_err(|e| storage_err(&dir, e))?;
                    sync_dir(&dir).map_err(|e| storage_err(&dir, e))?;
                    continue;
                }
                // Data after a short segment was written after it, so it was never acknowledged
                // unless the short segment was whole when synced and damaged later; either way
                // readers skip the missing offsets to the next batch.
                warn!(path = %path.display(), next_offset, "offsets before this segment are missing; they are skipped");
            }
            next_offset = base;
            if torn && i == last {
                file.truncate(size)
                    .await
                    .map_err(|e| storage_err(&dir, e))?;
                file.fdatasync().await.map_err(|e| storage_err(&dir, e))?;
            }
            if let Some(last) = entries.last() {
                next_offset = last.last_offset + 1;
            }
            segments.push(Segment {
                base_offset: base,
                file: Rc::new(file),
                size,
                entries,
            });
        }
        let active = segments.last().expect("at least one segment");
        let align = active.file.alignment();
        let start = align_down(active.size, align);
        let bytes = if active.size > start {
            let r = active
                .file
                .read_at(start, (active.size - start) as usize)
                .await
                .map_err(|e| storage_err(&dir, e))?;
            r.to_vec()
        } else {
            Vec::new()
        };
        let active_tail = Tail {
            segment_base: active.base_offset,
            file: active.file.clone(),
            start,
            bytes,
        };
        info!(dir = %dir.display(), segments = segments.len(), log_start_offset, next_offset, "partition opened");
        Ok(Rc::new(Self {
            dir,
            config: Cell::new(config),
            state: RefCell::new(LogState {
                segments,
                next_offset,
                durable_offset: next_offset,
                log_start_offset,
                active_tail,
                sealed_tails: Vec::new(),
                producers,
                failed: None,
            }),
            append_lock: Semaphore::new(1),
            flushing: Cell::new(false),
            flushed: Event::new(),
            advanced: Event::new(),
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_config(&self, config: LogConfig) {
        self.config.set(config);
    }

    pub fn high_watermark(&self) -> i64 {
        self.state.borrow().durable_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.state.borrow().next_offset
    }

    pub fn log_start_offset(&self) -> i64 {
        self.state.borrow().log_start_offset
    }

    pub fn is_offline(&self) -> bool {
        self.state.borrow().failed.is_some()
    }

    /// A listener woken whenever the high watermark moves; create it before checking.
    pub fn listen_advance(&self) -> EventListener {
        self.advanced.listen()
    }

    fn check_online(&self) -> Result<(), PartitionError> {
        match &self.state.borrow().failed {
            Some(detail) => Err(storage_err(&self.dir, detail)),
            None => Ok(()),
        }
    }

    /// Appends one validated batch, assigning its offsets. The batch is not durable until
    /// [`Partition::sync_to`] returns for its last offset + 1.
    pub async fn append(&self, batch: &[u8]) -> Result<AppendOutcome, PartitionError> {
        let _guard = self
            .append_lock
            .acquire_permit(1)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        self.check_online()?;
        let header = record_batch::parse_header(batch, 0).map_err(|e| storage_err(&self.dir, e))?;
        assert_eq!(header.size(), batch.len(), "append takes exactly one batch");
        if let Some(dup) = self.check_sequence(&header)? {
            return Ok(dup);
        }
        let needs_roll = {
            let st = self.state.borrow();
            let active = st.segments.last().expect("active segment");
            !active.entries.is_empty()
                && active.size + batch.len() as u64 > self.config.get().segment_bytes
        };
        if needs_roll {
            self.roll().await?;
        }
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let base_offset = st.next_offset;
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        let tail = &mut st.active_tail;
        let at = tail.bytes.len();
        tail.bytes.extend_from_slice(batch);
        record_batch::assign_offset(&mut tail.bytes[at..], base_offset, 0);
        let active = st.segments.last_mut().expect("active segment");
        assert_eq!(active.base_offset, st.active_tail.segment_base);
        let position = active.size;
        active.size += batch.len() as u64;
        active.entries.push(BatchEntry {
            base_offset,
            last_offset,
            position,
            size: batch.len() as u32,
            max_timestamp: header.max_timestamp,
        });
        assert_eq!(
            st.active_tail.start + st.active_tail.bytes.len() as u64,
            active.size
        );
        st.next_offset = last_offset + 1;
        if header.has_producer_id() {
            st.producers.record(
                header.producer_id,
                header.producer_epoch,
                ProducerBatch {
                    first_seq: header.base_sequence,
                    last_seq: header.last_sequence(),
                    base_offset,
                    last_offset,
                },
            );
        }
        Ok(AppendOutcome {
            base_offset,
            last_offset,
            duplicate: false,
            log_start_offset: st.log_start_offset,
        })
    }

    fn check_sequence(
        &self,
        header: &BatchHeader,
    ) -> Result<Option<AppendOutcome>, PartitionError> {
        if !header.has_producer_id() {
            return Ok(None);
        }
        let st = self.state.borrow();
        match st.producers.check(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence(),
        )? {
            SequenceCheck::Append => Ok(None),
            SequenceCheck::Duplicate {
                base_offset,
                last_offset,
            } => Ok(Some(AppendOutcome {
                base_offset,
                last_offset,
                duplicate: true,
                log_start_offset: st.log_start_offset,
            })),
        }
    }

    async fn roll(&self) -> Result<(), PartitionError> {
        let base = self.state.borrow().next_offset;
        let path = segment_path(&self.dir, base);
        let file = Rc::new(
            SegmentFile::open(&path, true)
                .await
                .map_err(|e| storage_err(&self.dir, e))?,
        );
        sync_dir(&self.dir).map_err(|e| storage_err(&self.dir, e))?;
        let mut st = self.state.borrow_mut();
        let old = std::mem::replace(
            &mut st.active_tail,
            Tail {
                segment_base: base,
                file: file.clone(),
                start: 0,
                bytes: Vec::new(),
            },
        );
        st.sealed_tails.push(old);
        st.segments.push(Segment {
            base_offset: base,
            file,
            size: 0,
            entries: Vec::new(),
        });
        info!(dir = %self.dir.display(), base_offset = base, "rolled to a new segment");
        Ok(())
    }

    /// Waits until every offset below `offset` is durable, flushing if no flush is running.
    pub async fn sync_to(&self, offset: i64) -> Result<(), PartitionError> {
        loop {
            let listener = self.flushed.listen();
            self.check_online()?;
            if self.state.borrow().durable_offset >= offset {
                return Ok(());
            }
            if self.flushing.get() {
                listener.await;
            } else {
                self.flush().await?;
            }
        }
    }

    async fn flush(&self) -> Result<(), PartitionError> {
        assert!(!self.flushing.get());
        self.flushing.set(true);
        let result = self.flush_once().await;
        if let Err(PartitionError::Storage { detail, .. }) = &result {
            self.go_offline(format!("flush failed: {detail}"));
        }
        self.flushing.set(false);
        self.flushed.notify(usize::MAX);
        if result.is_ok() {
            self.advanced.notify(usize::MAX);
        }
        result
    }

    async fn flush_once(&self) -> Result<(), PartitionError> {
        // The active tail is copied once, straight into the aligned DMA buffer, while the
        // state is borrowed; appends that arrive during the write stay for the next flush.
        let (sealed, active_file, active_start, active_len, active_image, active_base, target) = {
            let mut st = self.state.borrow_mut();
            let sealed = std::mem::take(&mut st.sealed_tails);
            let t = &st.active_tail;
            let image = (!t.bytes.is_empty()).then(|| t.file.block_image(&t.bytes));
            (
                sealed,
                t.file.clone(),
                t.start,
                t.bytes.len(),
                image,
                t.segment_base,
                st.next_offset,
            )
        };
        for tail in sealed {
            tail.file
                .write_image(tail.file.block_image(&tail.bytes), tail.start)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
            tail.file
                .fdatasync()
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
            let end = tail.start + tail.bytes.len() as u64;
            tail.file
                .truncate(end)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        if let Some(image) = active_image {
            active_file
                .write_image(image, active_start)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        active_file
            .fdatasync()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        let mut st = self.state.borrow_mut();
        st.durable_offset = st.durable_offset.max(target);
        let align = active_file.alignment();
        let tail = &mut st.active_tail;
        if tail.segment_base == active_base && tail.start == active_start {
            let flushed_end = active_start + active_len as u64;
            let keep_from = align_down(flushed_end, align);
            let drop = (keep_from - tail.start) as usize;
            tail.bytes.drain(..drop);
            tail.start = keep_from;
        }
        Ok(())
    }

    /// Reads whole batches from the one containing `offset`, up to `max_bytes` (at least one
    /// batch), never past the high watermark.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, PartitionError> {
        self.check_online()?;
        let (hw, lso, plan) = {
            let st = self.state.borrow();
            let hw = st.durable_offset;
            let lso = st.log_start_offset;
            if offset < lso || offset > hw {
                return Err(PartitionError::OffsetOutOfRange {
                    offset,
                    log_start_offset: lso,
                    high_watermark: hw,
                });
            }
            (hw, lso, plan_read(&st.segments, offset, hw, max_bytes))
        };
        let Some(ReadPlan {
            file,
            position,
            len,
            base_offset,
        }) = plan
        else {
            return Ok(ReadOutcome {
                records: Bytes::new(),
                high_watermark: hw,
                log_start_offset: lso,
            });
        };
        let data = match file.read_at(position, len).await {
            Ok(d) if d.len() == len => d,
            Ok(d) => {
                let detail = format!(
                    "short read at position {position}: {} of {len} bytes",
                    d.len()
                );
                return Err(self.go_offline(detail));
            }
            Err(e) => return Err(self.go_offline(e)),
        };
        // Batches are checked (length, CRC32C, offsets) on every read, so a batch damaged on
        // disk after it was written is never served; the batches before it still are.
        let scan = scan_chunk(&data, position, base_offset);
        let valid: usize = scan.batches.iter().map(|(e, _)| e.size as usize).sum();
        if valid < len {
            let at = position + valid as u64;
            warn!(dir = %self.dir.display(), position = at, "corrupt batch found on read");
            if valid == 0 {
                let detail = match scan.end {
                    ScanEnd::Stop { reason, .. } => reason,
                    ScanEnd::NeedMore { .. } => "batch runs past its indexed size".into(),
                };
                return Err(PartitionError::Corrupt {
                    dir: self.dir.display().to_string(),
                    position: at,
                    detail,
                });
            }
        }
        Ok(ReadOutcome {
            records: Bytes::copy_from_slice(&data[..valid]),
            high_watermark: hw,
            log_start_offset: lso,
        })
    }

    /// Takes the partition offline after an I/O error: nothing more is appended, acknowledged
    /// or served until the broker restarts and recovery has checked the log.
    fn go_offline(&self, detail: impl std::fmt::Display) -> PartitionError {
        let detail = detail.to_string();
        warn!(dir = %self.dir.display(), error = %detail, "partition offline");
        self.state
            .borrow_mut()
            .failed
            .get_or_insert_with(|| detail.clone());
        storage_err(&self.dir, detail)
    }

    /// The first offset whose batch has a timestamp at or after `timestamp`, with that batch's
    /// max timestamp; `None` if no durable batch qualifies.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        let st = self.state.borrow();
        let hw = st.durable_offset;
        st.segments
            .iter()
            .flat_map(|s| s.entries.iter())
            .take_while(|e| e.last_offset < hw)
            .find(|e| e.max_timestamp >= timestamp)
            .map(|e| (e.base_offset, e.max_timestamp))
    }

    /// Flushes what is buffered and trims the active file to its logical size.
    pub async fn close(&self) -> Result<(), PartitionError> {
        let end = self.state.borrow().next_offset;
        self.sync_to(end).await?;
        let (file, size) = {
            let st = self.state.borrow();
            let active = st.segments.last().expect("active segment");
            (active.file.clone(), active.size)
        };
        file.truncate(size)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        file.fdatasync()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        Ok(())
    }

    /// Takes the partition offline and removes its directory.
    pub async fn delete(&self) -> Result<(), PartitionError> {
        let _guard = self
            .append_lock
            .acquire_permit(1)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        while self.flushing.get() {
            let l = self.flushed.listen();
            if self.flushing.get() {
                l.await;
            }
        }
        {
            let mut st = self.state.borrow_mut();
            st.failed = Some("the topic was deleted".into());
            st.sealed_tails.clear();
        }
        let segments = self.state.borrow().segments.len();
        info!(dir = %self.dir.display(), segments, "deleting partition");
        std::fs::remove_dir_all(&self.dir).map_err(|e| storage_err(&self.dir, e))?;
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent).map_err(|e| storage_err(&self.dir, e))?;
        }
        self.advanced.notify(usize::MAX);
        Ok(())
    }
}

/// Whole batches to read: `len` bytes at `position`, the first starting at `base_offset`.
struct ReadPlan {
    file: Rc<SegmentFile>,
    position: u64,
    len: usize,
    base_offset: i64,
}

fn plan_read(segments: &[Segment], offset: i64, hw: i64, max_bytes: usize) -> Option<ReadPlan> {
    let seg_idx = segments
        .partition_point(|s| s.base_offset <= offset)
        .checked_sub(1)?;
    for seg in &segments[seg_idx..] {
        let first = seg.entries.partition_point(|e| e.last_offset < offset);
        let entries = &seg.entries[first..];
        let Some(start) = entries.first() else {
            continue;
        };
        if start.last_offset >= hw {
            return None;
        }
        let mut len = 0usize;
        for e in entries {
            if e.last_offset >= hw || (len > 0 && len + e.size as usize > max_bytes) {
                break;
            }
            len += e.size as usize;
        }
        return Some(ReadPlan {
            file: seg.file.clone(),
            position: start.position,
            len,
            base_offset: start.base_offset,
        });
    }
    None
}

fn list_segments(dir: &Path) -> std::io::Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Scans one segment file; returns its batch entries, its valid size, and whether anything after
/// the valid prefix had to be cut off.
async fn recover_segment(
    file: &SegmentFile,
    base: i64,
    producers: &mut ProducerStateTable,
) -> std::io::Result<(Vec<BatchEntry>, u64, bool)> {
    let file_size = file.file_size().await?;
    let mut entries = Vec::new();
    let mut position = 0u64;
    let mut next_offset = base;
    let mut want = RECOVERY_READ_BYTES;
    let valid_end = loop {
        if position >= file_size {
            break position;
        }
        let len = want.min((file_size - position) as usize);
        let buf = file.read_at(position, len).await?;
        let chunk = scan_chunk(&buf, position, next_offset);
        for (entry, header) in &chunk.batches {
            if header.has_producer_id() {
                producers.record(
                    header.producer_id,
                    header.producer_epoch,
                    ProducerBatch {
                        first_seq: header.base_sequence,
                        last_seq: header.last_sequence(),
                        base_offset: entry.base_offset,
                        last_offset: entry.last_offset,
                    },
                );
            }
            next_offset = entry.last_offset + 1;
            entries.push(*entry);
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
                want = needed.max(RECOVERY_READ_BYTES);
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
    Ok((entries, valid_end, valid_end < file_size))
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}
