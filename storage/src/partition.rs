//! One partition's log: an ordered list of segment files named by base offset, written through
//! aligned direct-I/O buffers and recovered batch by batch on open.
//!
//! Writes: an append copies the batch into the active segment's tail, aligned DMA buffers
//! (`tail.rs`), and assigns its offsets; a flush writes those buffers as whole blocks, rewriting
//! the partial last block each time, then makes them durable in the shard's next sync round
//! (`group_commit`: one round, and often one `syncfs`, for every partition of the shard whose
//! flush is waiting) — or, with `log.flush.write.through`, the writes themselves are durable
//! (`O_DSYNC`, see `io::WriteDurability`) and no round is needed. One flush runs at a time per
//! partition, and every waiter whose data it covered is released by it.
//!
//! Durability follows `flush.messages` / `flush.ms`. With `flush.messages=1` (the default) the
//! high watermark is the durable end: nothing is visible to readers, and nothing is acknowledged,
//! before it is durable. With a larger value a commit waits only for the write (the data
//! survives a process crash, not a power loss, unless written through), and the sync follows
//! once that many messages or that much time have gone unsynced — Kafka's page-cache behaviour.
//!
//! Retention deletes whole segments from the front of the log and moves the log start offset,
//! which is checkpointed in the partition directory before any file is removed.
//!
//! Replication (see `replica` and `truncate`): appends stamp the partition's leader epoch, and a
//! follower appends its leader's batches with their offsets and epochs kept; a leader epoch
//! cache answers OffsetForLeaderEpoch. In replicated mode a flush moves only the durable offset,
//! and the high watermark moves when the broker sets it (never past the durable offset), so
//! nothing is visible before the replicas have it; unreplicated, nothing of this changes.
//!
//! This file holds the state, appends, flushes and close; `open` (open and recovery), `read`
//! (fetches, read-ahead, timestamp lookups, replica reads), `retention` (retention and
//! DeleteRecords), `clean` (compaction), `replica` (epochs, follower appends, the replicated high
//! watermark) and `truncate` (truncation from the end) add their methods to [`Partition`] from
//! submodules.
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
use crate::fair_lock::FairLock;
use crate::group_commit::{self, SyncPolicy};
use crate::io::{self, SegmentFile, WriteDurability};
use crate::leader_epoch::{self, LeaderEpochCache};
use crate::log_start;
use crate::producer_state::{ProducerStateTable, SequenceCheck, SequenceError};
use crate::scan::{first_record_at, scan_chunk_with, BatchEntry, ScanEnd};
use crate::segment::{
    list_segments, read_index, recover_segment, remove_index, remove_index_now, segment_path,
    write_index, Segment, SegmentReader, SegmentWriter,
};
use crate::tail::{align_down, Tail};

mod append;
mod clean;
mod open;
mod read;
mod replica;
mod retention;
mod tiered;
mod truncate;
mod txn;

pub use tiered::{remote_slice, RemoteSlice, SegmentCopy};

use clean::{complete_swaps, remove_leftovers};
use replica::{BatchEnd, ReplicaOpen};
use retention::segments_below;

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
    /// Zeros written ahead of the active segment's end (`log.segment.zero.ahead.bytes`), so
    /// appends overwrite blocks inside the file rather than extend it; see
    /// [`crate::io::SegmentFile::zero_ahead`]. 0: off.
    pub zero_ahead_bytes: u64,
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
    /// When the active segment's writes are durable (`log.flush.write.through`): after a sync
    /// round, or as each write completes (`O_DSYNC`), so a durable flush needs no sync. Only
    /// where every flush is made durable anyway (`flush.messages` 1, see
    /// [`LogConfig::active_durability`]). Takes effect for the active segment when it is
    /// opened or rolled to; a closed segment made active again by a truncation keeps the handle
    /// it was opened with, and is synced as that handle needs.
    pub write_durability: WriteDurability,
    /// A producer whose last batch's timestamp is this long ago is forgotten
    /// (`producer.id.expiration.ms`); see [`crate::producer_state`].
    pub producer_id_expiration_ms: i64,
    /// Idempotent producers a partition keeps state for; a new one evicts the least recently
    /// used (`producer.state.partition.max.producers`).
    pub producer_state_max_producers: usize,
    /// Tiered storage (`remote.storage.enable`): closed segments are copied to an object store,
    /// and a local segment goes only once the store holds all of it
    /// ([`Partition::set_remote_copied_end`]) and `local_retention_*` lets it go;
    /// `retention_*` then bound the remote log, which its copier enforces.
    pub remote_storage: bool,
    /// How long a copied segment stays on local disk (`local.retention.ms`, resolved: its -2
    /// is `retention.ms`); negative: for ever. Only with `remote_storage`.
    pub local_retention_ms: i64,
    /// Local bytes kept of copied segments (`local.retention.bytes`, resolved); negative: no
    /// limit. Only with `remote_storage`.
    pub local_retention_bytes: i64,
}

impl LogConfig {
    /// How a new active segment is opened: written through only where every commit is made
    /// durable anyway ([`LogConfig::sync_every_commit`]). With a larger `flush.messages` most
    /// writes need no durability, and `O_DSYNC` would make each of them pay for it. (A
    /// replicated partition syncs every commit whatever its `flush.messages`; it keeps sync
    /// rounds then, since whether it is replicated is decided after its segment is opened.)
    pub fn active_durability(&self) -> WriteDurability {
        match self.sync_every_commit() {
            true => self.write_durability,
            false => WriteDurability::OnSync,
        }
    }

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
        zero_ahead_bytes: 0,
        read_ahead_budget_bytes: 64 << 20,
        tail_cache_partition_bytes: 1 << 20,
        tail_cache_budget_bytes: 64 << 20,
        sync_policy: SyncPolicy {
            syncfs_min_files: 2,
            syncfs_max_dirty_bytes: 16 << 20,
        },
        write_durability: WriteDurability::OnSync,
        producer_id_expiration_ms: 24 * 3600 * 1000,
        producer_state_max_producers: 10_000,
        remote_storage: false,
        local_retention_ms: -1,
        local_retention_bytes: -1,
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
    /// End-transaction markers removed (counted in `records_removed` too).
    pub markers_removed: u64,
    /// Data batches none of whose records stayed but kept empty, each holding its producer's
    /// last data offset (their records are counted in `records_removed`), and empty batches
    /// removed once their producer was forgotten.
    pub batches_emptied: u64,
    pub empty_batches_removed: u64,
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
    /// Bytes appended since the partition was opened, and how many of them were below the high
    /// watermark when it last moved: a waiting fetch counts new data by the difference, without
    /// reading it.
    appended_bytes: u64,
    visible_bytes: u64,
    active_tail: Tail,
    /// Tails of segments rolled away from but not yet flushed.
    sealed_tails: Vec<Tail>,
    producers: ProducerStateTable,
    failed: Option<String>,
    /// Which leader epoch began at which offset (`leader-epoch-checkpoint`).
    epochs: LeaderEpochCache,
    /// The epoch [`Partition::append`] stamps into batches.
    leader_epoch: i32,
    /// Replicated mode: flushes move `durable_offset` only; the high watermark moves through
    /// [`Partition::set_high_watermark`].
    replicated: bool,
    /// In replicated mode, where each batch between the high watermark and the log end ends,
    /// oldest first, so the high watermark can move to any of them with `visible_end` and
    /// `visible_bytes` exact.
    pending_ends: std::collections::VecDeque<BatchEnd>,
    /// The high watermark last written to the checkpoint file (replicated mode).
    hw_checkpointed: i64,
}

pub struct Partition {
    dir: PathBuf,
    config: Cell<LogConfig>,
    state: RefCell<LogState>,
    /// Appends, truncations, retention and close, one at a time in the order they asked
    /// (see [`crate::fair_lock`]).
    append_lock: FairLock,
    /// Held by retention, DeleteRecords and the cleaner, which change closed segments; taken
    /// before `append_lock` when both are needed.
    maintenance: Semaphore,
    /// Offsets below this were in the range of the last cleaning pass.
    cleaned_through: Cell<i64>,
    flushing: Cell<bool>,
    /// Whether the last flush of the active segment was small (see
    /// [`ZERO_AHEAD_SMALL_FLUSH_DIVISOR`]).
    last_flush_small: Cell<bool>,
    flushed: Event,
    advanced: Event,
    /// Fired whenever either end of the log moves (appends, truncations, the log start):
    /// replica fetches wait on it.
    appended: Event,
    /// A timed `fdatasync` (`flush.ms`) is pending.
    sync_timer_armed: Cell<bool>,
    /// A write-ahead of full blocks is spawned and has not started.
    write_ahead: Cell<bool>,
    /// Commits and syncs waiting for the running flush to end: a write-ahead gives way to
    /// them rather than start another write of full blocks.
    flush_waiters: Cell<usize>,
    /// The chunk after the last read, read ahead for a reader going through the log in order.
    prefetch: RefCell<Option<Prefetch>>,
    /// Reads served from a read-ahead chunk.
    read_ahead_hits: Cell<u64>,
    /// Reads served from the tail kept in memory.
    tail_cache_hits: Cell<u64>,
    /// Chunk reads that went to the disk (neither the tail nor a read-ahead held them).
    disk_chunk_reads: Cell<u64>,
    opened: OpenStats,
    /// Tiered storage: the object store holds every offset below this (see
    /// [`LogConfig::remote_storage`]).
    remote_copied_end: Cell<i64>,
}

/// Milliseconds since the Unix epoch by the system clock (0 if it is before the epoch).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A flush of at most `zero_ahead_bytes / this` bytes is small (16 KiB with the 1 MiB default);
/// zeros are written ahead of a small flush that follows another small one.
pub const ZERO_AHEAD_SMALL_FLUSH_DIVISOR: u64 = 64;

fn storage_err(dir: &Path, detail: impl std::fmt::Display) -> PartitionError {
    PartitionError::Storage {
        dir: dir.display().to_string(),
        detail: detail.to_string(),
    }
}

impl Partition {
    /// Opens the partition in `dir`, creating it if needed and recovering every segment.
    pub async fn open(dir: PathBuf, config: LogConfig) -> Result<Rc<Self>, PartitionError> {
        Self::open_with(dir, config, false).await
    }

    /// Opens the partition in replicated mode (see [`Partition::set_replicated`]): the high
    /// watermark starts at the checkpointed one, bounded by the log end, or at the log start
    /// without a checkpoint, never at the log end.
    pub async fn open_replicated(
        dir: PathBuf,
        config: LogConfig,
    ) -> Result<Rc<Self>, PartitionError> {
        Self::open_with(dir, config, true).await
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

    /// How many reads went to the disk: neither the tail nor a read-ahead held their bytes.
    pub fn disk_chunk_reads(&self) -> u64 {
        self.disk_chunk_reads.get()
    }

    /// Bytes of valid batches in this partition's segments (their logical sizes; the files may
    /// be longer by block padding). Kafka's `Log` `Size` metric.
    pub fn size_bytes(&self) -> u64 {
        let st = self.state.borrow();
        st.segments.iter().map(|s| s.size).sum()
    }

    /// Heap bytes of the in-memory indexes of this partition's segments (sparse indexes and
    /// aborted transactions).
    pub fn index_heap_bytes(&self) -> usize {
        let st = self.state.borrow();
        st.segments.iter().map(|s| s.heap_bytes()).sum()
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
        self.state
            .borrow_mut()
            .producers
            .set_max_producers(config.producer_state_max_producers);
    }

    /// Forgets the producers idle for `producer.id.expiration.ms` at `now_ms`; returns how many.
    /// The shard calls it on its periodic retention pass.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expiration_ms = self.config.get().producer_id_expiration_ms;
        let expired = self
            .state
            .borrow_mut()
            .producers
            .remove_expired(now_ms, expiration_ms);
        if expired > 0 {
            info!(dir = %self.dir.display(), expired, "expired idle producers");
        }
        expired
    }

    /// Idempotent producers this partition holds state for.
    pub fn producer_count(&self) -> usize {
        self.state.borrow().producers.len()
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

    /// Bytes made visible (below the high watermark) since the partition was opened. A waiting
    /// fetch takes the difference between two values as the new data it could read.
    pub fn visible_bytes(&self) -> u64 {
        self.state.borrow().visible_bytes
    }

    /// Bytes appended above the high watermark: what the in-sync replicas do not hold yet (the
    /// leader's replication backlog).
    pub fn bytes_above_high_watermark(&self) -> u64 {
        let st = self.state.borrow();
        st.appended_bytes.saturating_sub(st.visible_bytes)
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

    /// Waits until every offset below `offset` is durable, flushing if no flush is running.
    pub async fn sync_to(&self, offset: i64) -> Result<(), PartitionError> {
        self.flush_until(offset, true).await
    }

    /// Makes every offset below `offset` acknowledged and visible according to the durability
    /// policy: synced with `flush.messages=1`; otherwise written, with the `fdatasync` following
    /// after `flush.messages` unsynced messages or `flush.ms`.
    pub async fn commit(self: &Rc<Self>, offset: i64) -> Result<(), PartitionError> {
        let config = self.config.get();
        // In replicated mode only the durable end is the local commit: the high watermark waits
        // for the followers, so a written flush could not be waited for through it.
        if config.sync_every_commit() || self.is_replicated() {
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
                if offset > st.next_offset {
                    // The log was truncated below `offset` while this waited: it never comes.
                    return Err(PartitionError::OffsetOutOfRange {
                        offset,
                        log_start_offset: st.log_start_offset,
                        high_watermark: st.high_watermark,
                    });
                }
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
                let _waiting = FlushWaiter::new(&self.flush_waiters);
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
        let FlushPlan {
            sealed,
            active_file,
            active_writes,
            active_base,
            active_end,
            target,
            appended,
        } = self.freeze_flush(kind);
        for tail in sealed {
            self.finish_sealed(tail, sync_policy).await?;
        }
        let ahead = self.config.get().zero_ahead_bytes;
        if self.zero_ahead_due(&active_writes, ahead) {
            active_file
                .zero_ahead(active_end, ahead)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        self.write_chunks(&active_file, active_writes).await?;
        if sync && active_file.writes_are_durable() {
            group_commit::written_through();
        } else if sync {
            group_commit::sync(active_file.clone(), sync_policy)
                .await
                .map_err(|e| storage_err(&self.dir, e))?;
        }
        self.publish_flush(kind, target, (active_base, active_end), appended);
        Ok(())
    }

    /// Freezes what a flush of `kind` writes: every sealed tail's unwritten chunks and the
    /// active tail's (only the full ones for [`Flush::FullChunks`]), with the log end and the
    /// bytes appended at this moment. Appends that arrive during the write go into new chunks
    /// for the next flush.
    fn freeze_flush(&self, kind: Flush) -> FlushPlan {
        let mut st = self.state.borrow_mut();
        // Sealed tails stay in place, their bytes readable by replicas, until they are written
        // and synced.
        let sealed: Vec<SealedWrite> = st
            .sealed_tails
            .iter_mut()
            .map(|t| SealedWrite {
                file: t.file.clone(),
                chunks: t.take_unwritten(false),
                end: t.end(),
                segment_base: t.segment_base,
                index: t.sealed_index.take(),
            })
            .collect();
        let t = &mut st.active_tail;
        let writes = t.take_unwritten(kind == Flush::FullChunks);
        let last_write = writes.last().map(|(at, buf)| (*at, buf.len()));
        let active_end = flushed_end(kind, last_write, t.written_end, t.end());
        let (active_file, active_base) = (t.file.clone(), t.segment_base);
        FlushPlan {
            sealed,
            active_file,
            active_writes: writes,
            active_base,
            active_end,
            target: st.next_offset,
            appended: st.appended_bytes,
        }
    }

    /// Writes a sealed tail's last chunks, trims its file to the segment's size and syncs it,
    /// then saves its index file; only then does the tail stop holding the segment's last bytes
    /// for readers.
    async fn finish_sealed(
        &self,
        tail: SealedWrite,
        sync_policy: SyncPolicy,
    ) -> Result<(), PartitionError> {
        let file = tail.file.clone();
        self.write_chunks(&file, tail.chunks).await?;
        // Trimmed before the sync, so the index written next matches the synced size.
        file.truncate(tail.end)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        group_commit::sync(file, sync_policy)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        if let Some(index) = &tail.index {
            if let Err(e) = write_index(&self.dir, tail.segment_base, index, false).await {
                warn!(dir = %self.dir.display(), error = %e, "writing a segment index failed; it will be rebuilt on open");
            }
        }
        self.state
            .borrow_mut()
            .sealed_tails
            .retain(|t| !Rc::ptr_eq(&t.file, &tail.file));
        Ok(())
    }

    /// Whether `ahead` bytes of zeros (`log.segment.zero.ahead.bytes`) are written ahead of this
    /// flush of the active segment, remembering whether it was small for the next one. Zeros go ahead only where flushes stay small: a partition
    /// written a few requests per sync round, whose latency is the point, and where zeroing
    /// costs little bandwidth. A busy partition's flushes are large, or alternate large and
    /// small (the rest of a large batch), and would pay for the zeros in disk bandwidth and in
    /// data held while flushes take longer, for little gain.
    fn zero_ahead_due(&self, writes: &[(u64, crate::io::FrozenBuf)], ahead: u64) -> bool {
        let flushing: usize = writes.iter().map(|(_, b)| b.len()).sum();
        let small = (flushing as u64) <= ahead / ZERO_AHEAD_SMALL_FLUSH_DIVISOR;
        let after_small = self.last_flush_small.replace(small && !writes.is_empty());
        ahead > 0 && small && after_small
    }

    /// Records what a finished flush of `kind` achieved: a synced flush moves the durable
    /// offset to `target`, a flush that makes data visible moves the high watermark there (its
    /// data ending at `visible_end`, with `appended` bytes appended up to it), and the active
    /// tail learns what is written.
    fn publish_flush(&self, kind: Flush, target: i64, visible_end: (i64, u64), appended: u64) {
        let mut st = self.state.borrow_mut();
        if kind == Flush::Durable {
            st.durable_offset = st.durable_offset.max(target);
        }
        let config = self.config.get();
        // In replicated mode the high watermark moves only through `set_high_watermark`.
        if flush_makes_visible(kind, &config) && !st.replicated && target > st.high_watermark {
            st.high_watermark = target;
            st.visible_end = visible_end;
            st.visible_bytes = appended;
        }
        // A flush holds the flush slot, so no truncation lowered the log end below `target`.
        debug_assert!(
            st.high_watermark <= st.next_offset && st.durable_offset <= st.next_offset,
            "high watermark {} or durable offset {} past the log end {}",
            st.high_watermark,
            st.durable_offset,
            st.next_offset
        );
        let (active_base, active_end) = visible_end;
        let tail = &mut st.active_tail;
        if tail.segment_base == active_base {
            tail.written_to(active_end);
            keep_or_release_flushed(tail, &config);
        }
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

    /// Takes the partition offline after an I/O error: nothing more is appended, acknowledged
    /// or served until the broker restarts and recovery has checked the log.
    fn go_offline(&self, detail: impl std::fmt::Display) -> PartitionError {
        let detail = detail.to_string();
        warn!(dir = %self.dir.display(), error = %detail, "partition offline");
        self.state
            .borrow_mut()
            .failed
            .get_or_insert_with(|| detail.clone());
        // Waiting fetches end: the partition answers with an error now.
        self.advanced.notify(usize::MAX);
        storage_err(&self.dir, detail)
    }

    /// Flushes what is buffered, trims the active file to its logical size, and records a clean
    /// shutdown: the active segment's index file (with the producer state), then the marker
    /// that lets the next open trust it instead of scanning. A truncation or an append in
    /// progress ends first, and none runs after (the partition is offline once closed): one
    /// that cut the file while a close read its size made the close extend it again with
    /// zeros, under a clean marker and an index the file no longer had (a replica fetcher
    /// truncating the old leader's unreplicated tail during a controlled shutdown did).
    pub async fn close(&self) -> Result<(), PartitionError> {
        let _guard = self.append_lock.lock().await;
        let closed = self.close_locked().await;
        self.state
            .borrow_mut()
            .failed
            .get_or_insert_with(|| "the partition is closed: the broker is stopping".into());
        self.advanced.notify(usize::MAX);
        closed
    }

    async fn close_locked(&self) -> Result<(), PartitionError> {
        self.check_online()?;
        let end = self.state.borrow().next_offset;
        self.sync_to(end).await?;
        self.checkpoint_high_watermark().await?;
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
        let mut marked = write_index(&self.dir, base, &index, true).await;
        if marked.is_ok() {
            let dir = self.dir.clone();
            marked = io::blocking(move || {
                std::fs::write(dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
                io::now::sync_dir(&dir)
            })
            .await;
        }
        if let Err(e) = marked {
            warn!(dir = %self.dir.display(), error = %e, "recording a clean shutdown failed; the next start scans the active segment");
        }
        Ok(())
    }

    /// Takes the partition offline and removes its directory.
    pub async fn delete(&self) -> Result<(), PartitionError> {
        let _guard = self.append_lock.lock().await;
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
        io::remove_dir_all(&self.dir)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        self.advanced.notify(usize::MAX);
        Ok(())
    }
}

/// Counts a task waiting for the flush slot while it waits, and stops counting it if its
/// future is dropped mid-wait.
struct FlushWaiter<'a>(&'a Cell<usize>);

impl<'a> FlushWaiter<'a> {
    fn new(count: &'a Cell<usize>) -> Self {
        count.set(count.get() + 1);
        Self(count)
    }
}

impl Drop for FlushWaiter<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// A sealed tail's share of a flush: its unwritten chunks, where it ends, and its index file.
struct SealedWrite {
    file: Rc<SegmentFile>,
    chunks: Vec<(u64, crate::io::FrozenBuf)>,
    end: u64,
    segment_base: i64,
    index: Option<crate::index::IndexFile>,
}

/// What one flush writes, frozen while the state is borrowed.
struct FlushPlan {
    sealed: Vec<SealedWrite>,
    active_file: Rc<SegmentFile>,
    active_writes: Vec<(u64, crate::io::FrozenBuf)>,
    active_base: i64,
    /// Where the active segment's written data ends once these writes are done.
    active_end: u64,
    /// The log end when the flush began: what it makes durable, or visible.
    target: i64,
    /// Bytes appended since open when the flush began.
    appended: u64,
}

/// Where the active segment's written data ends after a flush of `kind`, given its last chunk
/// to write (`(position, length)`), where its written data ends now, and where its appended
/// data ends. A write-ahead of full chunks stops after its last chunk, or where the written
/// data already ends if it has none; every other flush writes everything appended.
fn flushed_end(kind: Flush, last_write: Option<(u64, usize)>, written_end: u64, end: u64) -> u64 {
    match (kind, last_write) {
        (Flush::FullChunks, Some((at, len))) => at + len as u64,
        (Flush::FullChunks, None) => written_end,
        _ => end,
    }
}

/// Whether a finished flush of `kind` makes its data visible (and acknowledged). With
/// `flush.messages=1` only a synced flush does; a write-ahead never does.
fn flush_makes_visible(kind: Flush, config: &LogConfig) -> bool {
    kind == Flush::Durable || (kind == Flush::Written && !config.sync_every_commit())
}

/// After a flush of the active segment: the flushed chunks stay in memory for readers at the
/// tail while the partition's share and the shard's budget allow; then they all go at once but
/// the partial last block.
fn keep_or_release_flushed(tail: &mut Tail, config: &LogConfig) {
    let kept = tail.kept_bytes();
    tail.cached = None;
    if kept <= config.tail_cache_partition_bytes {
        tail.cached =
            Reservation::try_new(&TAIL_CACHE_RESERVED, kept, config.tail_cache_budget_bytes);
    }
    if tail.cached.is_none() {
        tail.release_written();
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

/// Runs `f` on a fresh executor whose io-polling probe is primed, with a scratch directory that
/// lives until the executor has finished: the in-crate partition tests' harness (the integration
/// tests have their own in `tests/common`).
#[cfg(test)]
fn on_executor<F, Fut>(f: F)
where
    F: FnOnce(PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            crate::io::prime_executor_io(&path).await.unwrap();
            f(path).await;
        })
        .expect("executor")
        .join()
        .expect("join");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_ahead_ends_after_its_last_full_chunk_and_other_flushes_at_the_end() {
        assert_eq!(
            flushed_end(Flush::FullChunks, Some((4096, 8192)), 100, 20_000),
            12_288
        );
        assert_eq!(flushed_end(Flush::FullChunks, None, 100, 20_000), 100);
        assert_eq!(
            flushed_end(Flush::Written, Some((4096, 8192)), 100, 20_000),
            20_000
        );
        assert_eq!(flushed_end(Flush::Durable, None, 100, 20_000), 20_000);
    }

    #[test]
    fn only_a_synced_flush_makes_data_visible_when_every_commit_syncs() {
        let every = LogConfig::DEFAULT;
        let batched = LogConfig {
            flush_messages: 100,
            ..LogConfig::DEFAULT
        };
        assert!(flush_makes_visible(Flush::Durable, &every));
        assert!(!flush_makes_visible(Flush::Written, &every));
        assert!(!flush_makes_visible(Flush::FullChunks, &every));
        assert!(flush_makes_visible(Flush::Written, &batched));
        assert!(!flush_makes_visible(Flush::FullChunks, &batched));
    }

    #[test]
    fn a_write_ahead_gives_way_to_a_commit_waiting_for_the_flush_slot() {
        crate::partition::on_executor(|path| async move {
            let config = LogConfig {
                segment_bytes: 1 << 30,
                write_ahead_bytes: 8192,
                ..LogConfig::DEFAULT
            };
            let p = Partition::open(path.join("wa-0"), config).await.unwrap();
            let value = "w".repeat(3000);
            for _ in 0..3 {
                let b = record_batch::build_batch(&[(None, Some(value.as_bytes()))], 1, None);
                p.append(&b).await.unwrap();
            }
            assert!(p.write_ahead_due(), "9,000 bytes fill an 8 KiB buffer");
            {
                let _waiting = FlushWaiter::new(&p.flush_waiters);
                assert!(!p.write_ahead_due(), "a waiting commit goes first");
            }
            assert!(
                p.write_ahead_due(),
                "a commit that gave up waiting counts no more"
            );
            p.sync_to(p.log_end_offset()).await.unwrap();
            assert!(!p.write_ahead_due(), "the commit wrote every buffer");
            assert_eq!(p.flush_waiters.get(), 0);
        });
    }
}
