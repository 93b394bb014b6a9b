//! One partition's log: an ordered list of segment files named by base offset, written through
//! aligned direct-I/O buffers and recovered batch by batch on open.
//!
//! Writes: an append copies the batch into the active segment's tail, aligned DMA buffers
//! (`tail.rs`), and assigns its offsets; a flush writes those buffers as whole blocks, rewriting
//! the partial last block each time, then makes them durable in the shard's next sync round
//! (`group_commit`: one round, and often one `syncfs`, for every partition of the shard whose
//! flush is waiting). One flush runs at a time per partition, and every waiter whose data it
//! covered is released by it.
//!
//! Durability follows `flush.messages` / `flush.ms`. With `flush.messages=1` (the default) the
//! high watermark is the durable end: nothing is visible to readers, and nothing is acknowledged,
//! before it is `fdatasync`ed. With a larger value a commit waits only for the write (the data
//! survives a process crash, not a power loss), and the `fdatasync` follows once that many
//! messages or that much time have gone unsynced — Kafka's page-cache behaviour.
//!
//! Retention deletes whole segments from the front of the log and moves the log start offset,
//! which is checkpointed in the partition directory before any file is removed.
//!
//! A partition is owned by one shard; it is `!Send` and no `RefCell` borrow is held across an
//! `.await`.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use event_listener::{Event, EventListener};
use glommio::sync::{Permit, Semaphore};
use tracing::{info, warn};
use tributary_protocol::record_batch::{self, BatchHeader};

use crate::cleaner::{self, KeyMap};
use crate::group_commit::{self, SyncPolicy};
use crate::io::{sync_dir, SegmentFile};
use crate::log_start;
use crate::producer_state::{ProducerBatch, ProducerStateTable, SequenceCheck, SequenceError};
use crate::scan::{first_record_at, scan_chunk_with, BatchEntry, ScanEnd};
use crate::segment::{
    list_segments, read_index, recover_segment, remove_index, segment_path, write_index, Segment,
    SegmentReader, SegmentWriter,
};
use crate::tail::{align_down, Tail};

/// Written after a clean close, once every segment has an up-to-date index file; its presence
/// lets the next open skip scanning the active segment.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would grow past this (`segment.bytes`).
    pub segment_bytes: u64,
    /// Roll when a batch's timestamp is more than this many milliseconds after the active
    /// segment's first batch (`segment.ms`), as Kafka does.
    pub segment_ms: i64,
    /// Delete a closed segment once its newest timestamp is older than this (`retention.ms`);
    /// negative: never.
    pub retention_ms: i64,
    /// Delete the oldest segments while the partition stays at least this large without them
    /// (`retention.bytes`); negative: no size limit.
    pub retention_bytes: i64,
    /// `fdatasync` once this many messages are unsynced (`flush.messages`). 1: every commit
    /// waits for its `fdatasync`.
    pub flush_messages: i64,
    /// `fdatasync` at most this many milliseconds after a write (`flush.ms`), when
    /// `flush.messages` is above 1.
    pub flush_ms: i64,
    /// Bytes of log between sparse index entries (`index.interval.bytes`).
    pub index_interval_bytes: u64,
    /// `cleanup.policy` includes `compact`: the cleaner keeps the latest record per key, and
    /// the log may have offset gaps.
    pub compact: bool,
    /// Tombstones are kept this long after their batch's timestamp (`delete.retention.ms`).
    pub delete_retention_ms: i64,
    /// Clean once this share of the closed log is new since the last cleaning
    /// (`min.cleanable.dirty.ratio`).
    pub min_cleanable_dirty_ratio: f64,
    /// Memory for the cleaner's key → latest offset map (`log.cleaner.dedupe.buffer.size`).
    pub cleaner_buffer_bytes: u64,
    /// Largest records section the cleaner decompresses to read a compressed batch's keys
    /// (`log.cleaner.batch.inflated.max.bytes`); a batch that inflates past it is kept whole.
    pub cleaner_batch_inflated_max_bytes: u64,
    /// Largest append buffer (`log.write.ahead.bytes`): appends copy into aligned buffers sized
    /// to hold a flush interval, up to this; a buffer that fills is written ahead of the commit.
    pub write_ahead_bytes: u64,
    /// Bytes a shard may hold in chunks read ahead for sequential readers, over all its
    /// partitions (`log.read.ahead.budget.bytes`); 0 turns read-ahead off.
    pub read_ahead_budget_bytes: u64,
    /// Flushed bytes of its active segment a partition may keep in memory to serve readers at
    /// the tail (`log.tail.cache.partition.bytes`); past it they are let go.
    pub tail_cache_partition_bytes: u64,
    /// Bytes a shard's partitions may keep that way between them (`log.tail.cache.bytes`).
    pub tail_cache_budget_bytes: u64,
    /// When the shard's sync rounds make their files durable with one `syncfs` instead of an
    /// `fdatasync` each (`log.flush.syncfs.min.files`, `log.flush.syncfs.max.dirty.bytes`). See
    /// [`crate::group_commit`].
    pub sync_policy: SyncPolicy,
}

impl LogConfig {
    pub const DEFAULT: LogConfig = LogConfig {
        segment_bytes: 1 << 30,
        segment_ms: 7 * 24 * 3600 * 1000,
        retention_ms: 7 * 24 * 3600 * 1000,
        retention_bytes: -1,
        flush_messages: 1,
        flush_ms: i64::MAX,
        index_interval_bytes: 4096,
        compact: false,
        delete_retention_ms: 24 * 3600 * 1000,
        min_cleanable_dirty_ratio: 0.5,
        cleaner_buffer_bytes: 128 << 20,
        cleaner_batch_inflated_max_bytes: 64 << 20,
        write_ahead_bytes: 1 << 20,
        read_ahead_budget_bytes: 64 << 20,
        tail_cache_partition_bytes: 1 << 20,
        tail_cache_budget_bytes: 64 << 20,
        sync_policy: SyncPolicy {
            syncfs_min_files: 2,
            syncfs_max_dirty_bytes: 16 << 20,
        },
    };

    /// Whether every commit waits for its data to be `fdatasync`ed.
    pub fn sync_every_commit(&self) -> bool {
        self.flush_messages <= 1 || self.flush_ms == 0
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
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

/// What one cleaning pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments in the cleaned range, and how many were rewritten (they had records to remove,
    /// or were merged with their neighbours).
    pub segments: usize,
    pub rewritten: usize,
    /// Segments that no longer exist because they were merged into the one before them.
    pub merged: usize,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// What opening a partition found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenStats {
    pub segments: usize,
    /// Segments read batch by batch because no trusted index file described them.
    pub scanned: usize,
    /// The last shutdown was clean, so the active segment was not scanned.
    pub clean: bool,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    /// Whole batches starting with the one that contains the fetch offset.
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

struct LogState {
    segments: Vec<Segment>,
    next_offset: i64,
    /// Offsets below this are visible to readers and acknowledged.
    high_watermark: i64,
    /// Offsets below this are `fdatasync`ed.
    durable_offset: i64,
    /// Where the data below the high watermark ends: `(segment base offset, position)`.
    /// Readers never go past it.
    visible_end: (i64, u64),
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
    /// Held by retention, DeleteRecords and the cleaner, which change closed segments; taken
    /// before `append_lock` when both are needed.
    maintenance: Semaphore,
    /// Offsets below this were in the range of the last cleaning pass.
    cleaned_through: Cell<i64>,
    flushing: Cell<bool>,
    flushed: Event,
    advanced: Event,
    /// A timed `fdatasync` (`flush.ms`) is pending.
    sync_timer_armed: Cell<bool>,
    /// A write-ahead of full blocks is spawned and has not started.
    write_ahead: Cell<bool>,
    /// The chunk after the last read, read ahead for a reader going through the log in order.
    prefetch: RefCell<Option<Prefetch>>,
    /// Reads served from a read-ahead chunk.
    read_ahead_hits: Cell<u64>,
    /// Reads served from the tail kept in memory.
    tail_cache_hits: Cell<u64>,
    opened: OpenStats,
}

fn storage_err(dir: &Path, detail: impl std::fmt::Display) -> PartitionError {
    PartitionError::Storage {
        dir: dir.display().to_string(),
        detail: detail.to_string(),
    }
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
        complete_swaps(&dir).map_err(|e| storage_err(&dir, e))?;
        remove_leftovers(&dir).map_err(|e| storage_err(&dir, e))?;
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
        // Closed segments come back from their index files; the active one is scanned unless
        // the last shutdown was clean. Producer state starts from the snapshot in the last
        // trusted index file and replays only the segments scanned after it.
        let clean_marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = clean_marker.exists();
        let interval = config.index_interval_bytes;
        let last = bases.len() - 1;
        let mut files = Vec::with_capacity(bases.len());
        for (i, &base) in bases.iter().enumerate() {
            let file = SegmentFile::open(&segment_path(&dir, base), false)
                .await
                .map_err(|e| storage_err(&dir, e))?;
            let size = file.file_size().await.map_err(|e| storage_err(&dir, e))?;
            let index = if i < last || clean {
                read_index(&dir, base, size)
            } else {
                None
            };
            files.push((base, Rc::new(file), index));
        }
        let snapshot_at = files
            .iter()
            .rposition(|f| f.2.as_ref().is_some_and(|x| x.producers.is_some()));
        let mut producers = snapshot_at
            .and_then(|i| files[i].2.as_ref()?.producers.clone())
            .unwrap_or_default();
        let mut segments: Vec<Segment> = Vec::new();
        let log_start_offset = bases[0];
        let mut next_offset = log_start_offset;
        let mut scanned = 0usize;
        // Only the active (last) segment can hold a torn write; it is cut back to its valid
        // prefix. A closed segment that stops early holds a damaged batch: what precedes it is
        // kept, and the offsets after it are skipped rather than dropping later segments.
        for (i, (base, file, index)) in files.into_iter().enumerate() {
            let path = segment_path(&dir, base);
            // After the newest snapshot, producer batches must be replayed: scan.
            let index = index.filter(|_| snapshot_at.is_some_and(|s| i <= s));
            if i > 0 && base < next_offset {
                warn!(path = %path.display(), next_offset, "removing a segment that overlaps the one before it");
                drop(file);
                std::fs::remove_file(&path).map_err(|e| storage_err(&dir, e))?;
                remove_index(&dir, base).map_err(|e| storage_err(&dir, e))?;
                continue;
            }
            let (seg, torn) = match index {
                Some(f) => (Segment::from_index(base, file, f), false),
                None => {
                    scanned += 1;
                    let replay = snapshot_at.is_none_or(|s| i > s);
                    let (seg, torn) = recover_segment(
                        file,
                        base,
                        replay.then_some(&mut producers),
                        interval,
                        config.compact,
                    )
                    .await
                    .map_err(|e| storage_err(&dir, e))?;
                    if i < last {
                        // Rebuilt: save it so the next open need not scan this segment again.
                        let f = seg.index_file(replay.then_some(&producers));
                        if let Err(e) = write_index(&dir, base, &f, false) {
                            warn!(path = %path.display(), error = %e, "writing a rebuilt index failed");
                        }
                    }
                    (seg, torn)
                }
            };
            if i > 0 && base > next_offset {
                if i == last && seg.is_empty() {
                    // Rolled to, but the end of the segment before it never reached the disk:
                    // drop the empty segment so the log ends where its data does.
                    warn!(path = %path.display(), next_offset, "removing an empty segment after a torn one");
                    drop(seg);
                    std::fs::remove_file(&path).map_err(|e| storage_err(&dir, e))?;
                    sync_dir(&dir).map_err(|e| storage_err(&dir, e))?;
                    continue;
                }
                // Data after a short segment was written after it, so it was never acknowledged
                // unless the short segment was whole when synced and damaged later; either way
                // readers skip the missing offsets to the next batch.
                warn!(path = %path.display(), next_offset, "offsets before this segment are missing; they are skipped");
            }
            if torn && i == last {
                seg.file
                    .truncate(seg.size)
                    .await
                    .map_err(|e| storage_err(&dir, e))?;
                seg.file
                    .fdatasync()
                    .await
                    .map_err(|e| storage_err(&dir, e))?;
            }
            next_offset = seg.next_offset;
            segments.push(seg);
        }
        // The active segment's index file is only true until its next append: remove it, and
        // the marker that vouched for it, before anything is appended.
        let active_base = segments.last().expect("at least one segment").base_offset;
        remove_index(&dir, active_base).map_err(|e| storage_err(&dir, e))?;
        // Not synced: should the removals be lost, the index's exact size check still refuses it
        // once anything has been appended (see `read_index`).
        if clean {
            std::fs::remove_file(&clean_marker).map_err(|e| storage_err(&dir, e))?;
        }
        // The checkpointed log start may be past the first segments: they were due for deletion
        // when the broker stopped. It never passes the end of what recovery found.
        let checkpoint = log_start::read(&dir).map_err(|e| storage_err(&dir, e))?;
        let log_start_offset = checkpoint
            .map_or(log_start_offset, |c| c.max(log_start_offset))
            .min(next_offset);
        // Where the last cleaning pass ended; only when to clean depends on it.
        let cleaned_through = log_start::read_named(&dir, log_start::CLEANER_FILE)
            .map_err(|e| storage_err(&dir, e))?
            .map_or(log_start_offset, |c| c.clamp(log_start_offset, next_offset));
        let below = segments_below(&segments, log_start_offset);
        for seg in segments.drain(..below) {
            warn!(path = %seg.file.path().display(), log_start_offset, "removing a segment below the log start offset");
            std::fs::remove_file(seg.file.path()).map_err(|e| storage_err(&dir, e))?;
            remove_index(&dir, seg.base_offset).map_err(|e| storage_err(&dir, e))?;
        }
        if below > 0 {
            sync_dir(&dir).map_err(|e| storage_err(&dir, e))?;
        }
        let active = segments.last().expect("at least one segment");
        let align = active.file.alignment();
        let start = align_down(active.size, align);
        let partial = if active.size > start {
            Some(
                active
                    .file
                    .read_at(start, (active.size - start) as usize)
                    .await
                    .map_err(|e| storage_err(&dir, e))?,
            )
        } else {
            None
        };
        let active_tail = Tail::new(
            active.base_offset,
            active.file.clone(),
            start,
            partial.as_deref().unwrap_or_default(),
        );
        let visible_end = (active.base_offset, active.size);
        let opened = OpenStats {
            segments: segments.len(),
            scanned,
            clean,
        };
        info!(dir = %dir.display(), segments = segments.len(), scanned, clean, log_start_offset, next_offset, "partition opened");
        Ok(Rc::new(Self {
            dir,
            config: Cell::new(config),
            state: RefCell::new(LogState {
                segments,
                next_offset,
                high_watermark: next_offset,
                durable_offset: next_offset,
                visible_end,
                log_start_offset,
                active_tail,
                sealed_tails: Vec::new(),
                producers,
                failed: None,
            }),
            append_lock: Semaphore::new(1),
            maintenance: Semaphore::new(1),
            cleaned_through: Cell::new(cleaned_through),
            flushing: Cell::new(false),
            flushed: Event::new(),
            advanced: Event::new(),
            sync_timer_armed: Cell::new(false),
            write_ahead: Cell::new(false),
            prefetch: RefCell::new(None),
            read_ahead_hits: Cell::new(0),
            tail_cache_hits: Cell::new(0),
            opened,
        }))
    }

    pub fn open_stats(&self) -> OpenStats {
        self.opened
    }

    /// How many reads were served from a chunk read ahead.
    pub fn read_ahead_hits(&self) -> u64 {
        self.read_ahead_hits.get()
    }

    /// How many reads were served from the tail kept in memory.
    pub fn tail_cache_hits(&self) -> u64 {
        self.tail_cache_hits.get()
    }

    /// Heap bytes of the in-memory indexes of this partition's segments.
    pub fn index_heap_bytes(&self) -> usize {
        let st = self.state.borrow();
        st.segments.iter().map(|s| s.index.heap_bytes()).sum()
    }

    /// Takes the append lock or the maintenance lock (never closed while the partition exists).
    async fn lock<'a>(&self, which: &'a Semaphore) -> Result<Permit<'a>, PartitionError> {
        which
            .acquire_permit(1)
            .await
            .map_err(|e| storage_err(&self.dir, e))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_config(&self, config: LogConfig) {
        self.config.set(config);
    }

    pub fn high_watermark(&self) -> i64 {
        self.state.borrow().high_watermark
    }

    /// Offsets below this are `fdatasync`ed; equal to the high watermark with `flush.messages=1`.
    pub fn durable_offset(&self) -> i64 {
        self.state.borrow().durable_offset
    }

    pub fn config(&self) -> LogConfig {
        self.config.get()
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
    pub async fn append(self: &Rc<Self>, batch: &[u8]) -> Result<AppendOutcome, PartitionError> {
        let _guard = self.lock(&self.append_lock).await?;
        self.check_online()?;
        let header = record_batch::parse_header(batch, 0).map_err(|e| storage_err(&self.dir, e))?;
        assert_eq!(header.size(), batch.len(), "append takes exactly one batch");
        if let Some(dup) = self.check_sequence(&header)? {
            return Ok(dup);
        }
        let config = self.config.get();
        let needs_roll = {
            let st = self.state.borrow();
            let active = st.segments.last().expect("active segment");
            let last_offset = st.next_offset + i64::from(header.last_offset_delta);
            active.first_timestamp.is_some_and(|first| {
                active.size + batch.len() as u64 > config.segment_bytes
                    || header.max_timestamp.saturating_sub(first) > config.segment_ms
                    // Offsets are stored relative to the base in 32 bits, as in Kafka.
                    || last_offset - active.base_offset > i64::from(i32::MAX)
            })
        };
        if needs_roll {
            self.roll().await?;
        }
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let base_offset = st.next_offset;
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        // The batch goes straight into the aligned buffers a flush writes; only its header,
        // whose base offset the broker assigns, is copied on the way.
        let mut head = [0u8; record_batch::RECORD_BATCH_HEADER_BYTES];
        head.copy_from_slice(&batch[..record_batch::RECORD_BATCH_HEADER_BYTES]);
        record_batch::assign_offset(&mut head, base_offset, 0);
        let tail = &mut st.active_tail;
        tail.push(
            &[&head, &batch[head.len()..]],
            config.write_ahead_bytes as usize,
        );
        let active = st.segments.last_mut().expect("active segment");
        assert_eq!(active.base_offset, st.active_tail.segment_base);
        let entry = BatchEntry {
            base_offset,
            last_offset,
            position: active.size,
            size: batch.len() as u32,
            max_timestamp: header.max_timestamp,
        };
        active.on_batch(&entry, config.index_interval_bytes);
        assert_eq!(st.active_tail.end(), active.size);
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
        let outcome = AppendOutcome {
            base_offset,
            last_offset,
            duplicate: false,
            log_start_offset: st.log_start_offset,
        };
        let full_chunk = st.active_tail.has_full_chunk();
        drop(guard);
        if full_chunk && !self.write_ahead.replace(true) {
            // A full append buffer goes to disk at once, overlapping the appends still coming;
            // the next commit then writes only the rest before its fdatasync.
            let part = self.clone();
            glommio::spawn_local(async move {
                // Until no full buffer is left unwritten: buffers fill while a flush runs.
                loop {
                    let listener = part.flushed.listen();
                    if part.flushing.get() {
                        listener.await;
                        continue;
                    }
                    if part.is_offline() || !part.state.borrow().active_tail.has_full_chunk() {
                        break;
                    }
                    if let Err(e) = part.flush(Flush::FullChunks).await {
                        warn!(dir = %part.dir.display(), error = %e, "write-ahead failed");
                        break;
                    }
                }
                part.write_ahead.set(false);
            })
            .detach();
        }
        Ok(outcome)
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
        let mut old = std::mem::replace(&mut st.active_tail, Tail::new(base, file.clone(), 0, &[]));
        // The producer state now is the state at the end of the closed segment.
        let index = st
            .segments
            .last()
            .expect("active segment")
            .index_file(Some(&st.producers));
        // A sealed tail is flushed by the next flush (written if need be, trimmed and synced)
        // before any later offset can count as durable; its index file is written after that.
        old.sealed_index = Some(index);
        st.sealed_tails.push(old);
        st.segments.push(Segment::empty(base, file));
        info!(dir = %self.dir.display(), base_offset = base, "rolled to a new segment");
        Ok(())
    }

    /// Waits until every offset below `offset` is durable, flushing if no flush is running.
    pub async fn sync_to(&self, offset: i64) -> Result<(), PartitionError> {
        self.flush_until(offset, true).await
    }

    /// Makes every offset below `offset` acknowledged and visible according to the durability
    /// policy: synced with `flush.messages=1`; otherwise written, with the `fdatasync` following
    /// after `flush.messages` unsynced messages or `flush.ms`.
    pub async fn commit(self: &Rc<Self>, offset: i64) -> Result<(), PartitionError> {
        let config = self.config.get();
        if config.sync_every_commit() {
            return self.sync_to(offset).await;
        }
        self.flush_until(offset, false).await?;
        let (hw, durable) = {
            let st = self.state.borrow();
            (st.high_watermark, st.durable_offset)
        };
        if hw - durable >= config.flush_messages {
            return self.sync_to(hw).await;
        }
        if hw > durable && config.flush_ms < i64::MAX && !self.sync_timer_armed.replace(true) {
            let part = self.clone();
            let delay = std::time::Duration::from_millis(config.flush_ms as u64);
            glommio::spawn_local(async move {
                glommio::timer::sleep(delay).await;
                part.sync_timer_armed.set(false);
                let end = part.high_watermark();
                if let Err(e) = part.sync_to(end).await {
                    warn!(dir = %part.dir.display(), error = %e, "timed flush failed");
                }
            })
            .detach();
        }
        Ok(())
    }

    async fn flush_until(&self, offset: i64, durable: bool) -> Result<(), PartitionError> {
        loop {
            let listener = self.flushed.listen();
            self.check_online()?;
            {
                let st = self.state.borrow();
                let reached = if durable {
                    st.durable_offset
                } else {
                    st.high_watermark
                };
                // A durable flush also finishes closed segments still waiting to be trimmed.
                let sealed_done = !durable || st.sealed_tails.is_empty();
                if reached >= offset && sealed_done {
                    return Ok(());
                }
            }
            if self.flushing.get() {
                listener.await;
            } else {
                self.flush(if durable {
                    Flush::Durable
                } else {
                    Flush::Written
                })
                .await?;
            }
        }
    }

    async fn flush(&self, kind: Flush) -> Result<(), PartitionError> {
        assert!(!self.flushing.get());
        self.flushing.set(true);
        let result = self.flush_once(kind).await;
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

    /// Writes what `kind` asks for and, for [`Flush::Durable`], makes it durable. With
    /// `flush.messages=1` the high watermark moves only after the `fdatasync`, so nothing unsynced
    /// becomes visible in that mode.
    async fn flush_once(&self, kind: Flush) -> Result<(), PartitionError> {
        let sync = kind == Flush::Durable;
        let sync_policy = self.config.get().sync_policy;
        // The chunks to write are frozen while the state is borrowed; appends that arrive during
        // the write go into new chunks for the next flush.
        let (mut sealed, active_file, active_writes, active_base, active_end, target) = {
            let mut st = self.state.borrow_mut();
            let sealed = std::mem::take(&mut st.sealed_tails);
            let t = &mut st.active_tail;
            let writes = t.take_unwritten(kind == Flush::FullChunks);
            let end = match (kind, writes.last()) {
                (Flush::FullChunks, Some((at, buf))) => at + buf.len() as u64,
                (Flush::FullChunks, None) => t.written_end,
                _ => t.end(),
            };
            (
                sealed,
                t.file.clone(),
                writes,
                t.segment_base,
                end,
                st.next_offset,
            )
        };
        for tail in &mut sealed {
            let file = tail.file.clone();
            self.write_chunks(&file, tail.take_unwritten(false)).await?;
            // Trimmed before the sync, so the index written next matches the synced size.
            file.truncate(tail.end())
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
            group_commit::sync(file, sync_policy)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
            if let Some(index) = &tail.sealed_index {
                if let Err(e) = write_index(&self.dir, tail.segment_base, index, false) {
                    warn!(dir = %self.dir.display(), error = %e, "writing a segment index failed; it will be rebuilt on open");
                }
            }
        }
        drop(sealed);
        self.write_chunks(&active_file, active_writes).await?;
        if sync {
            group_commit::sync(active_file.clone(), sync_policy)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        let mut st = self.state.borrow_mut();
        if sync {
            st.durable_offset = st.durable_offset.max(target);
        }
        let config = self.config.get();
        // With flush.messages=1 only a synced flush makes data visible; a write-ahead never does.
        let visible = sync || (kind == Flush::Written && !config.sync_every_commit());
        if visible && target > st.high_watermark {
            st.high_watermark = target;
            st.visible_end = (active_base, active_end);
        }
        let tail = &mut st.active_tail;
        if tail.segment_base == active_base {
            tail.written_to(active_end);
            // Flushed chunks stay in memory for readers at the tail while the partition's share
            // and the shard's budget allow; then they all go at once but the partial last block.
            let kept = tail.kept_bytes();
            tail.cached = None;
            if kept <= config.tail_cache_partition_bytes {
                tail.cached = Reservation::try_new(
                    &TAIL_CACHE_RESERVED,
                    kept,
                    config.tail_cache_budget_bytes,
                );
            }
            if tail.cached.is_none() {
                tail.release_written();
            }
        }
        Ok(())
    }

    /// Writes frozen chunks in file order. One at a time: writes that extend a file are
    /// serialized by the filesystem anyway.
    async fn write_chunks(
        &self,
        file: &SegmentFile,
        chunks: Vec<(u64, crate::io::FrozenBuf)>,
    ) -> Result<(), PartitionError> {
        for (at, buf) in &chunks {
            file.write_frozen(buf, *at)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        Ok(())
    }

    /// Reads whole batches from the one containing `offset`, up to `max_bytes` (at least one
    /// batch), never past the high watermark. The sparse index gives a position at most about
    /// `index.interval.bytes` before the batch; the scan from there checks every batch it passes
    /// (length, CRC32C, offsets), so a batch damaged on disk after it was written is never
    /// served: a read gets the batches before it, or CORRUPT_MESSAGE if it starts there.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, PartitionError> {
        self.check_online()?;
        let config = self.config.get();
        let (slack, gaps) = (config.index_interval_bytes, config.compact);
        let mut after = i64::MIN;
        loop {
            let (hw, lso, plan) = {
                let st = self.state.borrow();
                let hw = st.high_watermark;
                let lso = st.log_start_offset;
                if offset < lso || offset > hw {
                    return Err(PartitionError::OffsetOutOfRange {
                        offset,
                        log_start_offset: lso,
                        high_watermark: hw,
                    });
                }
                (hw, lso, plan_read(&st, offset, after))
            };
            let empty = ReadOutcome {
                records: Bytes::new(),
                high_watermark: hw,
                log_start_offset: lso,
            };
            let Some(mut plan) = plan else {
                return Ok(empty);
            };
            // A reader continuing where its last read ended starts at the chunk read ahead for
            // it, not at the index entry before it.
            if let Some(p) = self.prefetch.borrow().as_ref() {
                if Rc::ptr_eq(&p.file, &plan.file)
                    && p.next_offset == offset
                    && (plan.position..plan.limit).contains(&p.position)
                {
                    plan.position = p.position;
                    plan.expect = offset;
                }
            }
            match self
                .read_in_segment(&plan, offset, max_bytes, slack, gaps)
                .await?
            {
                Some(records) => return Ok(ReadOutcome { records, ..empty }),
                // Nothing at or after `offset` in this segment (a compacted log's gap at its
                // end, or a segment the cleaner emptied): go on to the next one.
                None if plan.whole_segment => after = plan.segment_base,
                None => return Ok(empty),
            }
        }
    }

    /// The batches a read wants from one segment, or `None` if none is there.
    async fn read_in_segment(
        &self,
        plan: &ReadPlan,
        offset: i64,
        max_bytes: usize,
        slack: u64,
        gaps: bool,
    ) -> Result<Option<Bytes>, PartitionError> {
        let (limit, mut position, mut expect) = (plan.limit, plan.position, plan.expect);
        let mut len = (max_bytes as u64 + slack).min(limit - position);
        loop {
            let data = self.read_chunk(&plan.file, position, len as usize).await?;
            let scan = scan_chunk_with(&data, position, expect, gaps);
            let first = scan
                .batches
                .iter()
                .position(|(e, _)| e.last_offset >= offset);
            if let Some(first) = first {
                let wanted = &scan.batches[first..];
                let from = (wanted[0].0.position - position) as usize;
                let mut to = from + wanted[0].0.size as usize;
                for (e, _) in &wanted[1..] {
                    if to - from + e.size as usize > max_bytes {
                        break;
                    }
                    to += e.size as usize;
                }
                if let ScanEnd::Stop { position: at, .. } = scan.end {
                    if position + to as u64 == at {
                        warn!(dir = %self.dir.display(), position = at, "corrupt batch found on read; serving the batches before it");
                    }
                }
                let end = position + to as u64;
                if end < limit {
                    let next = scan.batches[first..]
                        .iter()
                        .take_while(|(e, _)| e.position < end)
                        .last()
                        .map_or(offset, |(e, _)| e.last_offset + 1);
                    let len = (max_bytes as u64 + slack).min(limit - end) as usize;
                    self.read_ahead(&plan.file, end, next, len);
                }
                return Ok(Some(data.into_bytes(from..to)));
            }
            // Nothing wanted in this chunk yet: the batch holding `offset` starts further on,
            // or is larger than the chunk.
            let corrupt = |at: u64, detail: String| {
                warn!(dir = %self.dir.display(), position = at, %detail, "corrupt batch found on read");
                PartitionError::Corrupt {
                    dir: self.dir.display().to_string(),
                    position: at,
                    detail,
                }
            };
            match scan.end {
                ScanEnd::NeedMore { position: at, .. } if at >= limit => return Ok(None),
                ScanEnd::NeedMore {
                    position: at,
                    needed,
                } => {
                    if at + needed as u64 > limit {
                        return Err(corrupt(at, "batch runs past the end of the log".into()));
                    }
                    expect = scan
                        .batches
                        .last()
                        .map_or(expect, |(e, _)| e.last_offset + 1);
                    position = at;
                    len = (needed as u64)
                        .max(max_bytes as u64 + slack)
                        .min(limit - at);
                }
                ScanEnd::Stop {
                    position: at,
                    reason,
                } => return Err(corrupt(at, reason)),
            }
        }
    }

    /// Starts reading `len` bytes at `position` (where offset `next_offset` starts) for the next
    /// read, if the shard's read-ahead budget has room; replaces any earlier read-ahead.
    fn read_ahead(&self, file: &Rc<SegmentFile>, position: u64, next_offset: i64, len: usize) {
        let budget = self.config.get().read_ahead_budget_bytes;
        // Free the slot's reservation first: it is being replaced.
        self.prefetch.borrow_mut().take();
        if self.state.borrow().active_tail.holds(file, position, len) {
            return; // the next read is served from memory
        }
        let Some(reserved) = Reservation::try_new(&READ_AHEAD_RESERVED, len as u64, budget) else {
            return;
        };
        let result: Rc<RefCell<Option<std::io::Result<crate::io::ReadBuf>>>> = Rc::default();
        let done = Rc::new(Event::new());
        let (f, r, d) = (file.clone(), result.clone(), done.clone());
        glommio::spawn_local(async move {
            let read = f.read_at(position, len).await;
            *r.borrow_mut() = Some(read);
            d.notify(usize::MAX);
        })
        .detach();
        *self.prefetch.borrow_mut() = Some(Prefetch {
            file: file.clone(),
            position,
            next_offset,
            result,
            done,
            _reserved: reserved,
        });
    }

    /// `len` bytes at `position` — from the read-ahead if it is for exactly there (it may be
    /// shorter than `len` when more has become readable since; callers scan what they get),
    /// otherwise read now.
    async fn read_chunk(
        &self,
        file: &Rc<SegmentFile>,
        position: u64,
        len: usize,
    ) -> Result<ChunkBytes, PartitionError> {
        {
            let st = self.state.borrow();
            let t = &st.active_tail;
            if t.holds(file, position, len) {
                self.tail_cache_hits.set(self.tail_cache_hits.get() + 1);
                return Ok(ChunkBytes::Memory(t.copy(position, len)));
            }
        }
        let taken = {
            let mut slot = self.prefetch.borrow_mut();
            match slot.as_ref() {
                Some(p) if Rc::ptr_eq(&p.file, file) && p.position == position => slot.take(),
                _ => None,
            }
        };
        if let Some(p) = taken {
            loop {
                let listener = p.done.listen();
                if let Some(read) = p.result.borrow_mut().take() {
                    match read {
                        Ok(buf) if !buf.is_empty() => {
                            self.read_ahead_hits.set(self.read_ahead_hits.get() + 1);
                            return Ok(ChunkBytes::Disk(buf));
                        }
                        // Failed or empty: read again below, which reports the error.
                        _ => break,
                    }
                }
                listener.await;
            }
        }
        Ok(ChunkBytes::Disk(
            self.read_exact(file, position, len).await?,
        ))
    }

    /// Reads exactly `len` bytes; a short read or an I/O error takes the partition offline.
    async fn read_exact(
        &self,
        file: &SegmentFile,
        position: u64,
        len: usize,
    ) -> Result<crate::io::ReadBuf, PartitionError> {
        match file.read_at(position, len).await {
            Ok(d) if d.len() == len => Ok(d),
            Ok(d) => Err(self.go_offline(format!(
                "short read at position {position}: {} of {len} bytes",
                d.len()
            ))),
            Err(e) => Err(self.go_offline(e)),
        }
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

    /// The first offset whose record has a timestamp at or after `timestamp`, with that
    /// timestamp; `None` if no record below the high watermark qualifies. The first segment whose
    /// newest timestamp reaches `timestamp` is searched through its time index; in a compressed
    /// batch the answer is the batch's first offset and max timestamp.
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, PartitionError> {
        self.check_online()?;
        let mut after = i64::MIN;
        loop {
            let (lso, plan) = {
                let st = self.state.borrow();
                let lso = st.log_start_offset;
                let seg = st.segments.iter().find(|s| {
                    s.base_offset > after && s.next_offset > lso && s.max_timestamp >= timestamp
                });
                let Some(seg) = seg else {
                    return Ok(None);
                };
                after = seg.base_offset;
                let from = seg.base_offset + i64::from(seg.index.lookup_time(timestamp));
                (lso, plan_segment(&st, seg, from.max(lso)))
            };
            let Some(plan) = plan else {
                return Ok(None);
            };
            let mut reader = SegmentReader::starting_at(
                plan.file.clone(),
                plan.position,
                plan.expect,
                plan.limit,
                self.config.get().compact,
            );
            while let Some(chunk) = reader.next().await.map_err(|e| self.read_error(e))? {
                let hit = chunk
                    .batches
                    .iter()
                    .find(|e| e.last_offset >= lso && e.max_timestamp >= timestamp);
                if let Some(e) = hit {
                    // Kafka answers with the first record, not the first batch, at the timestamp.
                    let record = first_record_at(chunk.bytes_of(e), timestamp, lso);
                    return Ok(Some(
                        record.unwrap_or((e.base_offset.max(lso), e.max_timestamp)),
                    ));
                }
            }
        }
    }

    /// A read error: corruption is reported as such; an I/O failure takes the partition offline.
    fn read_error(&self, e: std::io::Error) -> PartitionError {
        if e.kind() == std::io::ErrorKind::InvalidData {
            warn!(dir = %self.dir.display(), error = %e, "corrupt batch found on read");
            PartitionError::Corrupt {
                dir: self.dir.display().to_string(),
                position: 0,
                detail: e.to_string(),
            }
        } else {
            self.go_offline(e)
        }
    }

    /// Deletes the segments `retention.ms` and `retention.bytes` allow, oldest first, and those
    /// wholly below the log start offset. Only segments wholly below the high watermark go; if
    /// every segment is due, the log rolls first so it keeps an (empty) active segment, as Kafka
    /// does. Returns how many segments were deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize, PartitionError> {
        let _maintenance = self.lock(&self.maintenance).await?;
        let _guard = self.lock(&self.append_lock).await?;
        self.check_online()?;
        let (due, all) = {
            let st = self.state.borrow();
            let due = retention_due(&st, self.config.get(), now_ms);
            (due, due == st.segments.len())
        };
        if due == 0 {
            return Ok(0);
        }
        if all {
            self.roll().await?;
        }
        self.remove_front_segments(due, i64::MIN).await?;
        Ok(due)
    }

    /// DeleteRecords: moves the log start offset up to `offset` (-1: the high watermark) and
    /// deletes the segments wholly below it. Returns the new log start offset (Kafka's low
    /// watermark). An offset past the high watermark is out of range.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, PartitionError> {
        let _maintenance = self.lock(&self.maintenance).await?;
        let _guard = self.lock(&self.append_lock).await?;
        self.check_online()?;
        let (target, lso, below) = {
            let st = self.state.borrow();
            let target = if offset == -1 {
                st.high_watermark
            } else {
                offset
            };
            if target < 0 || target > st.high_watermark {
                return Err(PartitionError::OffsetOutOfRange {
                    offset,
                    log_start_offset: st.log_start_offset,
                    high_watermark: st.high_watermark,
                });
            }
            (
                target,
                st.log_start_offset,
                segments_below(&st.segments, target),
            )
        };
        if target > lso {
            self.remove_front_segments(below, target).await?;
        }
        Ok(self.log_start_offset())
    }

    /// Drops the first `count` segments and moves the log start offset to at least `new_start`
    /// and the first remaining segment's base. The new log start is checkpointed before any file
    /// is removed, so a crash in between deletes the rest on the next open.
    async fn remove_front_segments(
        &self,
        count: usize,
        new_start: i64,
    ) -> Result<(), PartitionError> {
        let (removed, lso) = {
            let mut st = self.state.borrow_mut();
            let removed: Vec<Segment> = st.segments.drain(..count).collect();
            let first = st
                .segments
                .first()
                .expect("the active segment stays")
                .base_offset;
            st.sealed_tails.retain(|t| t.segment_base >= first);
            st.log_start_offset = st.log_start_offset.max(new_start).max(first);
            (removed, st.log_start_offset)
        };
        if let Err(e) = log_start::write(&self.dir, lso) {
            return Err(self.go_offline(format!("writing the log start checkpoint: {e}")));
        }
        for seg in &removed {
            // By name, not by the file's own path: a cleaned segment was written under another
            // name and renamed into place.
            let path = segment_path(&self.dir, seg.base_offset);
            let gone =
                std::fs::remove_file(&path).and_then(|()| remove_index(&self.dir, seg.base_offset));
            if let Err(e) = gone {
                return Err(self.go_offline(format!("removing {}: {e}", path.display())));
            }
        }
        if !removed.is_empty() {
            sync_dir(&self.dir).map_err(|e| self.go_offline(e))?;
            info!(dir = %self.dir.display(), segments = removed.len(), log_start_offset = lso, "deleted segments");
        }
        for seg in removed {
            // A read in flight may still hold the file; it is closed when that read drops it.
            if let Ok(file) = Rc::try_unwrap(seg.file) {
                if let Err(e) = file.close().await {
                    warn!(dir = %self.dir.display(), error = %e, "closing a deleted segment failed");
                }
            }
        }
        self.advanced.notify(usize::MAX);
        Ok(())
    }

    /// Whether a compacted partition has enough new closed data since the last cleaning pass:
    /// at least `min.cleanable.dirty.ratio` of its closed segments' bytes.
    pub fn needs_cleaning(&self) -> bool {
        let config = self.config.get();
        if !config.compact || self.is_offline() {
            return false;
        }
        let st = self.state.borrow();
        let closed = &st.segments[..st.segments.len() - 1];
        let total: u64 = closed.iter().map(|s| s.size).sum();
        let dirty: u64 = closed
            .iter()
            .filter(|s| s.base_offset >= self.cleaned_through.get())
            .map(|s| s.size)
            .sum();
        dirty > 0 && dirty as f64 >= config.min_cleanable_dirty_ratio * total as f64
    }

    /// One cleaning pass over the closed, durable segments of a compacted partition: build the
    /// key → latest offset map, then rewrite each segment that holds superseded records or
    /// expired tombstones, keeping every other record at its offset, and merge neighbours that
    /// fit in one segment together. Appends and reads go on
    /// meanwhile; the work is done in chunks with a yield between them. A rewritten segment
    /// replaces the old one by rename after it is synced; its old index file goes first, so a
    /// crash in between leaves a segment that is scanned on open, never a stale index.
    pub async fn clean(&self, now_ms: i64) -> Result<Option<CleanStats>, PartitionError> {
        let config = self.config.get();
        if !config.compact {
            return Ok(None);
        }
        let _maintenance = self.lock(&self.maintenance).await?;
        self.check_online()?;
        // (base offset, file, size, offset after its last) of each closed, durable segment.
        let mut targets: Vec<(i64, Rc<SegmentFile>, u64, i64)> = {
            let st = self.state.borrow();
            st.segments
                .windows(2)
                .take_while(|w| w[1].base_offset <= st.durable_offset)
                .map(|w| {
                    (
                        w[0].base_offset,
                        w[0].file.clone(),
                        w[0].size,
                        w[0].next_offset,
                    )
                })
                .collect()
        };
        if targets.is_empty() {
            return Ok(None);
        }
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        // Pass 1: the latest offset of every key, over as many whole segments as the map holds,
        // noting which segments hold a superseded record or an expired tombstone: only those
        // are rewritten.
        let horizon = now_ms.saturating_sub(config.delete_retention_ms);
        let mut map = KeyMap::with_budget(config.cleaner_buffer_bytes);
        let max_inflated = config.cleaner_batch_inflated_max_bytes as usize;
        let mut scratch = Vec::new();
        let mut garbage = vec![false; targets.len()];
        let mut covered = 0;
        'segments: for (i, (base, file, size, _)) in targets.iter().enumerate() {
            let mut reader = SegmentReader::new(file.clone(), *base, *size, true);
            while let Some(chunk) = reader.next().await.map_err(io)? {
                for e in &chunk.batches {
                    let batch = chunk.bytes_of(e);
                    let records = match cleaner::batch_records(batch, &mut scratch, max_inflated) {
                        Ok(records) => records,
                        Err(detail) => {
                            // Kept whole, its keys unknown.
                            warn!(dir = %self.dir.display(), offset = e.base_offset, %detail, "a batch's records cannot be read for cleaning; it is kept whole");
                            continue;
                        }
                    };
                    for r in records {
                        let Some(key) = r.key else { continue };
                        let offset = e.base_offset + i64::from(r.offset_delta);
                        let Ok(superseded) = map.insert(key, offset) else {
                            break 'segments;
                        };
                        if let Some(old) = superseded {
                            let holder = targets.partition_point(|t| t.0 <= old) - 1;
                            garbage[holder] = true;
                        }
                        if r.value.is_none() && e.max_timestamp < horizon {
                            garbage[i] = true;
                        }
                    }
                }
                glommio::yield_if_needed().await;
            }
            covered += 1;
        }
        if covered == 0 {
            warn!(dir = %self.dir.display(), keys = map.len(), "one segment holds more keys than log.cleaner.dedupe.buffer.size allows; not cleaned");
            return Ok(None);
        }
        targets.truncate(covered);
        // Pass 2: rewrite what has something to drop, merging neighbours that together fit in
        // one segment (as Kafka's cleaner groups them) so cleaned segments do not pile up.
        let mut stats = CleanStats {
            segments: targets.len(),
            ..CleanStats::default()
        };
        for group in merge_groups(&targets, config.segment_bytes) {
            let members = &targets[group.clone()];
            let sizes: u64 = members.iter().map(|t| t.2).sum();
            stats.bytes_before += sizes;
            if members.len() == 1 && !garbage[group.start] {
                stats.bytes_after += sizes;
                continue;
            }
            let base = members[0].0;
            let tmp = segment_path(&self.dir, base).with_extension("cleaned");
            let mut out = SegmentWriter::create(&tmp, base, config.index_interval_bytes)
                .await
                .map_err(io)?;
            let mut removed = 0u64;
            for (seg_base, file, size, _) in members {
                let mut reader = SegmentReader::new(file.clone(), *seg_base, *size, true);
                while let Some(chunk) = reader.next().await.map_err(io)? {
                    for e in &chunk.batches {
                        let batch = chunk.bytes_of(e);
                        let keep = |r: &record_batch::RecordView<'_>| {
                            let offset = e.base_offset + i64::from(r.offset_delta);
                            cleaner::keep(
                                &map,
                                r.key,
                                r.value.is_none(),
                                offset,
                                e.max_timestamp,
                                horizon,
                            )
                        };
                        let compressed = record_batch::parse_header(batch, 0)
                            .is_ok_and(|h| h.compression() != 0);
                        if compressed {
                            // Decompressed, judged, and recompressed if only some records stay;
                            // kept whole if it cannot be read.
                            let count = record_batch::parse_header(batch, 0)
                                .map_or(0, |h| h.records_count.max(0) as u64);
                            let mut kept_records = 0u64;
                            let retained = cleaner::retain_compressed(batch, max_inflated, |r| {
                                let k = keep(r);
                                kept_records += u64::from(k);
                                k
                            });
                            match retained {
                                Ok(cleaner::Retained::None) => removed += count,
                                Ok(cleaner::Retained::Some(b)) => {
                                    removed += count - kept_records;
                                    out.push(&b, e).await.map_err(io)?;
                                }
                                Ok(cleaner::Retained::All) | Err(_) => {
                                    out.push(batch, e).await.map_err(io)?
                                }
                            }
                            continue;
                        }
                        let kept = record_batch::retain_records(batch, |r| {
                            let k = keep(r);
                            removed += u64::from(!k);
                            k
                        });
                        match kept {
                            Ok(Some(b)) => out.push(&b, e).await.map_err(io)?,
                            Ok(None) => {}
                            Err(_) => out.push(batch, e).await.map_err(io)?,
                        }
                    }
                    glommio::yield_if_needed().await;
                }
            }
            if removed == 0 && members.len() == 1 {
                drop(out);
                std::fs::remove_file(&tmp).map_err(io)?;
                stats.bytes_after += sizes;
                continue;
            }
            let mut cleaned = out.finish().await.map_err(io)?;
            stats.bytes_after += cleaned.size;
            if members.len() == 1 {
                self.replace_segment(base, sizes, &tmp, &mut cleaned)?;
            } else {
                self.merge_segments(members, &tmp, cleaned)?;
                stats.merged += members.len() - 1;
            }
            stats.rewritten += members.len();
            stats.records_removed += removed;
        }
        let last_base = targets.last().expect("covered > 0").0;
        let through = {
            let st = self.state.borrow();
            st.segments
                .iter()
                .find(|s| s.base_offset > last_base)
                .map_or(st.next_offset, |s| s.base_offset)
        };
        self.cleaned_through.set(through);
        if let Err(e) = log_start::write_named(&self.dir, log_start::CLEANER_FILE, through) {
            warn!(dir = %self.dir.display(), error = %e, "writing the cleaner checkpoint failed; the next start cleans the whole log again");
        }
        info!(dir = %self.dir.display(), ?stats, "cleaned");
        Ok(Some(stats))
    }

    /// Swaps a cleaned segment in for the one at `base` (whose size was `old_size`): the old
    /// index file goes, the new file is renamed over the old one, and the new index (keeping
    /// the old producer snapshot, which cleaning does not change) is written.
    fn replace_segment(
        &self,
        base: i64,
        old_size: u64,
        tmp: &Path,
        cleaned: &mut Segment,
    ) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let producers = read_index(&self.dir, base, old_size).and_then(|f| f.producers);
        remove_index(&self.dir, base).map_err(io)?;
        std::fs::rename(tmp, segment_path(&self.dir, base)).map_err(io)?;
        sync_dir(&self.dir).map_err(io)?;
        let mut st = self.state.borrow_mut();
        let Some(seg) = st.segments.iter_mut().find(|s| s.base_offset == base) else {
            return Ok(());
        };
        // The segment keeps its offset range and timestamps; only its bytes shrank.
        cleaned.next_offset = seg.next_offset;
        cleaned.first_timestamp = seg.first_timestamp;
        cleaned.max_timestamp = seg.max_timestamp;
        if let Err(e) = write_index(
            &self.dir,
            base,
            &cleaned.index_file(producers.as_ref()),
            false,
        ) {
            warn!(dir = %self.dir.display(), error = %e, "writing a cleaned segment's index failed; it will be rebuilt on open");
        }
        std::mem::swap(seg, cleaned);
        Ok(())
    }

    /// Swaps a cleaned copy of several neighbouring segments in for them. The copy is renamed to
    /// `<first>-<end>.swap` (and the directory synced) before any old file goes: from then on
    /// the swap is committed, and an open that finds the `.swap` finishes it (`finish_swap`).
    fn merge_segments(
        &self,
        members: &[(i64, Rc<SegmentFile>, u64, i64)],
        tmp: &Path,
        mut merged: Segment,
    ) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let (first, last) = (&members[0], &members[members.len() - 1]);
        let end = last.3;
        // The producer state at the end of the last member is the merged segment's.
        let producers = read_index(&self.dir, last.0, last.2).and_then(|f| f.producers);
        std::fs::rename(tmp, swap_path(&self.dir, first.0, end)).map_err(io)?;
        sync_dir(&self.dir).map_err(io)?;
        finish_swap(&self.dir, first.0, end).map_err(io)?;
        let mut st = self.state.borrow_mut();
        let Some(i) = st.segments.iter().position(|s| s.base_offset == first.0) else {
            return Ok(());
        };
        let j = i + members.len() - 1;
        assert_eq!(
            st.segments[j].base_offset, last.0,
            "merged segments are neighbours"
        );
        merged.next_offset = st.segments[j].next_offset;
        merged.first_timestamp = st.segments[i].first_timestamp;
        merged.max_timestamp = st.segments[i..=j]
            .iter()
            .map(|s| s.max_timestamp)
            .max()
            .unwrap_or(merged.max_timestamp);
        if let Err(e) = write_index(
            &self.dir,
            first.0,
            &merged.index_file(producers.as_ref()),
            false,
        ) {
            warn!(dir = %self.dir.display(), error = %e, "writing a merged segment's index failed; it will be rebuilt on open");
        }
        st.segments.splice(i..=j, [merged]);
        Ok(())
    }

    /// Flushes what is buffered, trims the active file to its logical size, and records a clean
    /// shutdown: the active segment's index file (with the producer state), then the marker
    /// that lets the next open trust it instead of scanning.
    pub async fn close(&self) -> Result<(), PartitionError> {
        let end = self.state.borrow().next_offset;
        self.sync_to(end).await?;
        let (file, size, base, index) = {
            let st = self.state.borrow();
            let active = st.segments.last().expect("active segment");
            (
                active.file.clone(),
                active.size,
                active.base_offset,
                active.index_file(Some(&st.producers)),
            )
        };
        file.truncate(size)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        file.fdatasync()
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        let marked = write_index(&self.dir, base, &index, true).and_then(|()| {
            std::fs::write(self.dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
            sync_dir(&self.dir)
        });
        if let Err(e) = marked {
            warn!(dir = %self.dir.display(), error = %e, "recording a clean shutdown failed; the next start scans the active segment");
        }
        Ok(())
    }

    /// Takes the partition offline and removes its directory.
    pub async fn delete(&self) -> Result<(), PartitionError> {
        let _guard = self.lock(&self.append_lock).await?;
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

/// What a flush writes, and whether it syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    /// The append buffers that filled up: full blocks written ahead of the commit.
    FullChunks,
    /// Everything appended, written.
    Written,
    /// Everything appended, written and `fdatasync`ed.
    Durable,
}

/// A chunk read ahead of a sequential reader: `position` in `file`, where the batch starting at
/// `next_offset` lies — the offset its next fetch will ask for.
struct Prefetch {
    file: Rc<SegmentFile>,
    position: u64,
    next_offset: i64,
    result: Rc<RefCell<Option<std::io::Result<crate::io::ReadBuf>>>>,
    done: Rc<Event>,
    _reserved: Reservation,
}

thread_local! {
    /// Bytes held by read-aheads on this thread: one shard's partitions share the budget.
    static READ_AHEAD_RESERVED: Cell<u64> = const { Cell::new(0) };
    /// Bytes of flushed tails kept in memory on this thread, likewise.
    static TAIL_CACHE_RESERVED: Cell<u64> = const { Cell::new(0) };
}

/// A share of one of the shard's memory budgets, returned when dropped, so readers far behind
/// or many partitions never hold more than the budget between them.
pub(crate) struct Reservation {
    pool: &'static std::thread::LocalKey<Cell<u64>>,
    bytes: u64,
}

impl Reservation {
    fn try_new(
        pool: &'static std::thread::LocalKey<Cell<u64>>,
        bytes: u64,
        budget: u64,
    ) -> Option<Self> {
        pool.with(|r| {
            (r.get() + bytes <= budget).then(|| {
                r.set(r.get() + bytes);
                Self { pool, bytes }
            })
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.with(|r| r.set(r.get() - self.bytes));
    }
}

/// Bytes of a read: read from the disk, or copied from the tail kept in memory.
enum ChunkBytes {
    Disk(crate::io::ReadBuf),
    Memory(Vec<u8>),
}

impl ChunkBytes {
    /// The bytes of `range`: the DMA buffer itself, or the memory copy itself.
    fn into_bytes(self, range: std::ops::Range<usize>) -> Bytes {
        match self {
            ChunkBytes::Disk(b) => crate::io::read_bytes(b, range),
            ChunkBytes::Memory(v) => Bytes::from(v).slice(range),
        }
    }
}

impl std::ops::Deref for ChunkBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ChunkBytes::Disk(b) => b,
            ChunkBytes::Memory(v) => v,
        }
    }
}

/// Where to scan for an offset: from `position` in `file`, where a batch starting at `expect`
/// lies, up to `limit` (the end of the segment's data below the high watermark).
struct ReadPlan {
    file: Rc<SegmentFile>,
    segment_base: i64,
    position: u64,
    expect: i64,
    limit: u64,
    /// `limit` is the end of the segment, not the high watermark inside it.
    whole_segment: bool,
}

/// The first segment after base `after` that holds offsets at or after `offset` (skipping the
/// missing offsets after a damaged closed segment), located through its index.
fn plan_read(st: &LogState, offset: i64, after: i64) -> Option<ReadPlan> {
    let from = st
        .segments
        .partition_point(|s| s.base_offset <= offset)
        .saturating_sub(1);
    let seg = st.segments[from..]
        .iter()
        .find(|s| s.base_offset > after && s.next_offset > offset)?;
    plan_segment(st, seg, offset)
}

fn plan_segment(st: &LogState, seg: &Segment, offset: i64) -> Option<ReadPlan> {
    let (visible_base, visible_pos) = st.visible_end;
    let (limit, whole_segment) = match seg.base_offset.cmp(&visible_base) {
        std::cmp::Ordering::Less => (seg.size, true),
        std::cmp::Ordering::Equal => (visible_pos.min(seg.size), false),
        std::cmp::Ordering::Greater => return None,
    };
    let (position, expect) = seg.locate(offset);
    if position >= limit && whole_segment {
        // Nothing here to scan (an emptied segment): plan the next one.
        let next = st
            .segments
            .iter()
            .find(|s| s.base_offset > seg.base_offset)?;
        return plan_segment(st, next, offset);
    }
    (position < limit).then(|| ReadPlan {
        file: seg.file.clone(),
        segment_base: seg.base_offset,
        position,
        expect,
        limit,
        whole_segment,
    })
}

/// Removes what an interrupted cleaning pass or index write left behind: `*.cleaned` segment
/// copies and `*.tmp` files. The segments they were for are intact.
/// Neighbouring segments to clean into one, in order: as many as fit in `segment_bytes`
/// together (by their size before cleaning) with offsets a 32-bit relative offset can hold.
fn merge_groups(
    targets: &[(i64, Rc<SegmentFile>, u64, i64)],
    segment_bytes: u64,
) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < targets.len() {
        let (base, _, mut size, _) = targets[start];
        let mut end = start + 1;
        while end < targets.len()
            && size + targets[end].2 <= segment_bytes
            && targets[end].3 - 1 - base <= i64::from(i32::MAX)
        {
            size += targets[end].2;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Where a committed merge of the segments from `base` up to offset `end` waits to be swapped in.
fn swap_path(dir: &Path, base: i64, end: i64) -> PathBuf {
    dir.join(format!("{base:020}-{end:020}.swap"))
}

/// Completes a committed merge: removes every segment (and index file) from `base` up to `end`
/// and renames the merged copy into `base`'s place. Safe to repeat after a crash part-way.
fn finish_swap(dir: &Path, base: i64, end: i64) -> std::io::Result<()> {
    for b in list_segments(dir)? {
        if (base..end).contains(&b) {
            remove_index(dir, b)?;
            std::fs::remove_file(segment_path(dir, b))?;
        }
    }
    std::fs::rename(swap_path(dir, base, end), segment_path(dir, base))?;
    sync_dir(dir)
}

/// Finishes merges a crash interrupted after they were committed (see `merge_segments`).
fn complete_swaps(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_suffix(".swap") else {
            continue;
        };
        let range = stem
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)));
        match range {
            Some((base, end)) if base < end => {
                warn!(dir = %dir.display(), base, end, "finishing an interrupted segment merge");
                finish_swap(dir, base, end)?;
            }
            _ => {
                warn!(dir = %dir.display(), file = %name, "ignoring a .swap file whose name is not <base>-<end>.swap")
            }
        }
    }
    Ok(())
}

fn remove_leftovers(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .extension()
            .is_some_and(|x| x == "cleaned" || x == "tmp")
        {
            warn!(path = %path.display(), "removing a leftover from an interrupted write");
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// How many segments at the front of the log are due for deletion: wholly below the high
/// watermark (an empty active segment never is), and past `retention.ms`, beyond
/// `retention.bytes`, or wholly below the log start offset.
fn retention_due(st: &LogState, config: LogConfig, now_ms: i64) -> usize {
    let n = st.segments.len();
    let mut total: i64 = st.segments.iter().map(|s| s.size as i64).sum();
    let mut due = 0;
    for (i, seg) in st.segments.iter().enumerate() {
        let next_base = st.segments.get(i + 1).map(|s| s.base_offset);
        let upper = next_base.unwrap_or(st.next_offset);
        if upper > st.high_watermark || (i + 1 == n && seg.is_empty()) {
            break;
        }
        let below_start = next_base.is_some_and(|b| b <= st.log_start_offset);
        let too_old = config.retention_ms >= 0
            && now_ms.saturating_sub(seg.max_timestamp) > config.retention_ms;
        let too_big =
            config.retention_bytes >= 0 && total - seg.size as i64 >= config.retention_bytes;
        if !(below_start || too_old || too_big) {
            break;
        }
        total -= seg.size as i64;
        due += 1;
    }
    due
}

/// How many segments lie wholly below `offset` (the active segment never does).
fn segments_below(segments: &[Segment], offset: i64) -> usize {
    segments
        .windows(2)
        .take_while(|w| w[1].base_offset <= offset)
        .count()
}
