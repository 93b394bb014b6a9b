//! Tiered storage on a shard (KIP-405): the leader of a partition with `remote.storage.enable`
//! copies its closed segments to the remote log store, records each copy in the metadata log,
//! and deletes there what `retention.*` lets go; every replica deletes locally only what the
//! store holds (`Partition::set_remote_copied_end`) and `local.retention.*` lets go; a fetch
//! below the local log start is read from the store, on the owning shard, without blocking it
//! (the store runs on its own thread, `tributary_remote`).
//!
//! Objects: `TOPIC-TOPICID/PARTITION/BASEOFFSET-SEGMENTID.log` (the segment's batches, byte for
//! byte) and `.index` (the local index file's format: offsets, times, aborted transactions).
//! A copy is `CopyStarted` in the metadata log before its first byte is written and readable
//! only once `CopyFinished`; a failed copy is marked for deletion, its objects removed by the
//! next pass, and tried again under a new segment id.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;

use bytes::Bytes;
use tracing::{info, warn};
use tributary_metadata::remote_log::{
    RemoteLog, RemoteLogChange, RemoteSegment, RemoteSegmentState,
};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::ErrorCode;
use tributary_remote::{RemoteError, RemoteStore};
use tributary_storage::index::IndexFile;
use tributary_storage::{remote_slice, Partition, RemoteSlice, SegmentCopy};

use crate::catalog::Catalog;
use crate::cluster::command::MetadataCommand;
use crate::config::RemoteReader;
use chunks::ChunkCache;

mod chunks;
use crate::shard::{now_ms, FetchRead, FetchResult, Shard};

/// Segments one partition copies at most per pass: a backlog drains over several passes, and
/// one partition does not hold the shard's other partitions back for long.
const COPIES_PER_PASS: usize = 16;

/// A remote read starts this far before the index's position for the offset is reached at
/// most (`index.interval.bytes` of batches below the offset), plus the batch header.
const READ_SLACK_BYTES: u64 = 4096 + 64;

/// A shard's tiered storage: the store handle, the remote indexes it keeps, and its counts.
pub struct RemoteLogs {
    store: RemoteStore,
    indexes: RefCell<IndexCache>,
    chunks: RefCell<ChunkCache>,
    /// A pass is under way (passes do not overlap).
    passing: Cell<bool>,
    pub counts: RemoteCounts,
}

/// What the shard's tiered storage did, for `/metrics`.
#[derive(Default)]
pub struct RemoteCounts {
    pub segments_copied: Cell<u64>,
    pub bytes_copied: Cell<u64>,
    pub segments_deleted: Cell<u64>,
    pub read_bytes: Cell<u64>,
    pub reads: Cell<u64>,
    pub read_micros: Cell<u64>,
    pub store_errors: Cell<u64>,
}

impl RemoteLogs {
    pub fn new(store: RemoteStore, index_cache_bytes: u64, chunks: RemoteReader) -> Self {
        RemoteLogs {
            store,
            indexes: RefCell::new(IndexCache::new(index_cache_bytes)),
            chunks: RefCell::new(ChunkCache::new(chunks)),
            passing: Cell::new(false),
            counts: RemoteCounts::default(),
        }
    }

    /// `range` of the log object `object` (of `size` bytes), from the chunks read ahead or
    /// the store.
    async fn read_object(
        &self,
        object: &str,
        size: u64,
        range: Range<u64>,
    ) -> Result<Bytes, RemoteError> {
        let chunks = self
            .chunks
            .borrow_mut()
            .chunks_for(&self.store, object, size, &range);
        let numbers = chunks.iter().map(|(n, _)| *n);
        let bytes = futures::future::join_all(chunks.iter().map(|(_, c)| c.clone())).await;
        let got: Vec<(u64, Bytes)> = numbers
            .zip(bytes)
            .map(|(n, b)| b.map(|b| (n, b)))
            .collect::<Result<_, _>>()?;
        let chunk_bytes = self.chunks.borrow().chunk_bytes();
        Ok(chunks::assemble(chunk_bytes, &range, &got))
    }
}

/// Adds `n` to one of the counts.
fn count(cell: &Cell<u64>, n: u64) {
    cell.set(cell.get() + n);
}

/// Remote segments' indexes, decoded, kept up to a byte budget; the oldest go first.
struct IndexCache {
    budget: u64,
    held: u64,
    entries: HashMap<String, (Rc<IndexFile>, u64)>,
    order: VecDeque<String>,
}

impl IndexCache {
    fn new(budget: u64) -> Self {
        IndexCache {
            budget,
            held: 0,
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, id: &str) -> Option<Rc<IndexFile>> {
        self.entries.get(id).map(|(f, _)| f.clone())
    }

    fn put(&mut self, id: String, f: Rc<IndexFile>, bytes: u64) {
        // Two reads that missed at once both bring it: it is kept once. One larger than the
        // whole budget is not kept, and evicts nothing.
        if self.entries.contains_key(&id) || bytes > self.budget {
            return;
        }
        while self.held + bytes > self.budget {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, b)) = self.entries.remove(&old) {
                self.held -= b;
            }
        }
        self.held += bytes;
        self.order.push_back(id.clone());
        self.entries.insert(id, (f, bytes));
    }
}

/// The object holding `seg`'s `kind` ("log" or "index").
fn object_key(
    log: &RemoteLog,
    topic: &str,
    partition: i32,
    seg: &RemoteSegment,
    kind: &str,
) -> String {
    format!(
        "{topic}-{}/{partition}/{:020}-{}.{kind}",
        log.topic_id, seg.base_offset, seg.id
    )
}

/// Why a remote read failed: the partition answers KAFKA_STORAGE_ERROR, and the log names
/// the object.
struct ReadFailure {
    object: String,
    detail: String,
}

impl Shard {
    fn remote_logs(&self) -> Option<Rc<RemoteLogs>> {
        self.hosted::<RemoteLogs>()
    }

    /// Tiered storage's counts for `/metrics`; `None` when it is off.
    pub(crate) fn remote_stats(&self) -> Option<crate::metrics::RemoteStats> {
        let logs = self.remote_logs()?;
        let c = &logs.counts;
        let catalog = self.catalog();
        let lag = self
            .owned_partitions()
            .iter()
            .filter(|(key, p)| {
                p.config().remote_storage
                    && catalog
                        .partition(&key.topic, key.partition)
                        .is_some_and(|r| r.leader == self.config.node_id)
            })
            .map(|(key, p)| {
                let copied = catalog
                    .remote_log(&key.topic, key.partition)
                    .map_or(0, RemoteLog::copied_end);
                (p.last_stable_offset() - copied.max(p.log_start_offset())).max(0)
            })
            .sum();
        Some(crate::metrics::RemoteStats {
            segments_copied: c.segments_copied.get(),
            bytes_copied: c.bytes_copied.get(),
            segments_deleted: c.segments_deleted.get(),
            reads: c.reads.get(),
            read_bytes: c.read_bytes.get(),
            read_seconds: c.read_micros.get() as f64 / 1e6,
            store_errors: c.store_errors.get(),
            copy_lag_offsets: lag,
        })
    }

    /// The first offset of `topic`-`partition` (`part`) a reader may ask for: below the local
    /// log start when the remote log holds more. Every fetch asks: an untiered partition
    /// (remote storage cannot be turned off once on) answers without a lookup.
    pub(crate) fn log_start_with_remote(
        &self,
        topic: &str,
        partition: i32,
        part: &Partition,
    ) -> i64 {
        let local = part.log_start_offset();
        // A broker without a store cannot read what the metadata says is remote.
        if !part.config().remote_storage || self.remote_logs().is_none() {
            return local;
        }
        let catalog = self.catalog();
        catalog
            .remote_log(topic, partition)
            .and_then(RemoteLog::start_offset)
            .map_or(local, |remote| remote.min(local))
    }

    /// One pass over the partitions this shard owns with remote storage: every replica learns
    /// how far the store reaches; the leader copies what is due, deletes what retention let go
    /// of, and removes the objects of deleted or failed copies. Every
    /// `remote.log.manager.task.interval.ms`.
    pub async fn tier_segments(self: &Rc<Self>) {
        let Some(logs) = self.remote_logs() else {
            return;
        };
        if logs.passing.replace(true) {
            return;
        }
        for (key, part) in self.owned_partitions() {
            if self.draining.get() {
                break;
            }
            if !part.config().remote_storage || part.is_offline() {
                continue;
            }
            if let Err(e) = self.tier_partition(&logs, &key, &part).await {
                count(&logs.counts.store_errors, 1);
                warn!(topic = %key.topic, partition = key.partition, error = %e, "tiered storage: copying or deleting failed; local data is kept and the next pass tries again");
            }
        }
        logs.passing.set(false);
    }

    async fn tier_partition(
        self: &Rc<Self>,
        logs: &RemoteLogs,
        key: &TopicPartition,
        part: &Rc<Partition>,
    ) -> Result<(), String> {
        let catalog = self.catalog();
        if let Some(log) = catalog.remote_log(&key.topic, key.partition) {
            part.set_remote_copied_end(log.copied_end());
        }
        let leads = catalog
            .partition(&key.topic, key.partition)
            .is_some_and(|p| p.leader == self.config.node_id);
        if !leads {
            return Ok(());
        }
        self.remove_deleted_objects(logs, key).await?;
        for _ in 0..COPIES_PER_PASS {
            let started = std::time::Instant::now();
            let Some(bytes) = self.copy_next_segment(logs, key, part).await? else {
                break;
            };
            self.pace_copies(bytes, started).await;
        }
        self.expire_remote_segments(key, part).await
    }

    /// Waits out what copying `bytes` in the time since `started` took beyond this shard's
    /// share of `remote.log.manager.copy.max.bytes.per.second`.
    async fn pace_copies(&self, bytes: u64, started: std::time::Instant) {
        let total = self.config.tiered.copy_max_bytes_per_second;
        // Kafka's default, Long.MAX_VALUE: no limit.
        if total >= i64::MAX as u64 {
            return;
        }
        let limit = (total / self.shards.max(1) as u64).max(1);
        let due = std::time::Duration::from_secs_f64(bytes as f64 / limit as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            glommio::timer::sleep(wait).await;
        }
    }

    /// Copies the next closed segment past what the store holds: its bytes, or `None` when
    /// none is due.
    async fn copy_next_segment(
        self: &Rc<Self>,
        logs: &RemoteLogs,
        key: &TopicPartition,
        part: &Rc<Partition>,
    ) -> Result<Option<u64>, String> {
        let catalog = self.catalog();
        let (Some(placed), Some(topic)) = (
            catalog.partition(&key.topic, key.partition),
            catalog.topics.get(&key.topic),
        ) else {
            return Ok(None);
        };
        let mut log = catalog
            .remote_log(&key.topic, key.partition)
            .cloned()
            .unwrap_or_default();
        log.topic_id = topic.id.clone();
        let from = log.copied_end().max(part.log_start_offset());
        let Some(copy) = part.next_segment_to_copy(from) else {
            return Ok(None);
        };
        let seg = segment_of(&copy, self.config.node_id, placed.leader_epoch);
        let id = seg.id.clone();
        self.change_remote_log(
            key,
            RemoteLogChange::CopyStarted {
                segment: seg.clone(),
                local_log_start: part.log_start_offset(),
            },
        )
        .await?;
        match self.upload(logs, &log, key, &seg, copy).await {
            Ok(log_crc32c) => {
                self.change_remote_log(key, RemoteLogChange::CopyFinished { id, log_crc32c })
                    .await?;
                count(&logs.counts.segments_copied, 1);
                count(&logs.counts.bytes_copied, seg.size);
                part.set_remote_copied_end(seg.end_offset + 1);
                info!(topic = %key.topic, partition = key.partition, base_offset = seg.base_offset, end_offset = seg.end_offset, bytes = seg.size, segment = %seg.id, "copied a segment to the remote log store");
                Ok(Some(seg.size))
            }
            Err(e) => {
                // Its objects, if any were written, go at the next pass.
                let gone = RemoteLogChange::DeleteStarted {
                    ids: vec![id],
                    log_start_offset: log.log_start_offset,
                };
                let _ = self.change_remote_log(key, gone).await;
                Err(e.to_string())
            }
        }
    }

    /// Writes the segment's index and log objects; the log object's CRC32C.
    async fn upload(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
        copy: SegmentCopy,
    ) -> Result<u32, RemoteError> {
        let index_key = object_key(log, &key.topic, key.partition, seg, "index");
        logs.store.put(index_key, Bytes::from(copy.index)).await?;
        let log_key = object_key(log, &key.topic, key.partition, seg, "log");
        let up = logs
            .store
            .put_file(log_key, copy.log_path, copy.size)
            .await?;
        Ok(up.crc32c)
    }

    /// Removes the objects of segments being deleted, then forgets them.
    async fn remove_deleted_objects(
        self: &Rc<Self>,
        logs: &RemoteLogs,
        key: &TopicPartition,
    ) -> Result<(), String> {
        let catalog = self.catalog();
        let Some(log) = catalog.remote_log(&key.topic, key.partition) else {
            return Ok(());
        };
        let mut ids = Vec::new();
        for seg in log.deleting() {
            for kind in ["log", "index"] {
                let object = object_key(log, &key.topic, key.partition, seg, kind);
                logs.store.delete(object).await.map_err(|e| e.to_string())?;
            }
            ids.push(seg.id.clone());
        }
        if ids.is_empty() {
            return Ok(());
        }
        let n = ids.len() as u64;
        self.change_remote_log(key, RemoteLogChange::DeleteFinished { ids })
            .await?;
        count(&logs.counts.segments_deleted, n);
        Ok(())
    }

    /// Marks the remote segments `retention.ms` / `retention.bytes` let go of for deletion
    /// (their objects go at the next pass).
    async fn expire_remote_segments(
        self: &Rc<Self>,
        key: &TopicPartition,
        part: &Partition,
    ) -> Result<(), String> {
        let catalog = self.catalog();
        let Some(log) = catalog.remote_log(&key.topic, key.partition) else {
            return Ok(());
        };
        let config = part.config();
        let (ids, log_start_offset) = log.expired(
            now_ms(),
            config.retention_ms,
            config.retention_bytes,
            part.size_bytes(),
            part.log_start_offset(),
        );
        if ids.is_empty() {
            return Ok(());
        }
        info!(topic = %key.topic, partition = key.partition, segments = ids.len(), log_start_offset, "deleting remote segments past retention");
        self.change_remote_log(
            key,
            RemoteLogChange::DeleteStarted {
                ids,
                log_start_offset,
            },
        )
        .await
    }

    async fn change_remote_log(
        self: &Rc<Self>,
        key: &TopicPartition,
        change: RemoteLogChange,
    ) -> Result<(), String> {
        let cmd = MetadataCommand::RemoteLogSegment {
            topic: key.topic.clone(),
            partition: key.partition,
            change,
        };
        match crate::controller::ask(self, |_, c| async move { c.answer(cmd).await }).await {
            Some((ErrorCode::NONE, _)) => Ok(()),
            Some((code, why)) => Err(format!(
                "the metadata log refused a remote log change: {code:?} {}",
                why.unwrap_or_default()
            )),
            None => Err("the controller did not answer a remote log change".into()),
        }
    }

    /// DeleteRecords on a partition with a remote log, after the local log took it (`low` its
    /// log start now): the remote log starts at the target too, and the segments wholly below
    /// it are deleted from the store. The answer: the error and the log start offset.
    pub(crate) async fn delete_remote_records(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        part: &Partition,
        offset: i64,
        low: i64,
    ) -> (ErrorCode, i64) {
        let catalog = self.catalog();
        // A tiered partition with nothing copied yet still records its start: a copy under
        // way, of the segment holding it, must not make the deleted records readable.
        let empty = RemoteLog::default();
        let log = match catalog.remote_log(topic, partition) {
            Some(log) => log,
            None if part.config().remote_storage && self.remote_logs().is_some() => &empty,
            None => return (ErrorCode::NONE, low),
        };
        let target = match offset {
            -1 => part.high_watermark(),
            o => o,
        };
        let start = self.log_start_with_remote(topic, partition, part);
        if target <= start {
            return (ErrorCode::NONE, start);
        }
        let ids = log
            .readable()
            .filter(|s| s.end_offset < target)
            .map(|s| s.id.clone())
            .collect();
        let key = TopicPartition::new(topic.to_string(), partition);
        let change = RemoteLogChange::DeleteStarted {
            ids,
            log_start_offset: target,
        };
        match self.change_remote_log(&key, change).await {
            Ok(()) => (ErrorCode::NONE, target),
            Err(e) => {
                warn!(topic, partition, error = %e, "DeleteRecords: moving the remote log start failed");
                (ErrorCode::KAFKA_STORAGE_ERROR, -1)
            }
        }
    }

    /// A deleted topic's partition this node led: its objects are deleted from the store (in
    /// the background; the metadata went with the topic). A partition only moved elsewhere
    /// keeps them.
    pub(crate) fn delete_remote_objects(
        &self,
        old: &Catalog,
        catalog: &Catalog,
        key: &TopicPartition,
    ) {
        let id = |c: &Catalog| c.topics.get(&key.topic).map(|t| t.id.clone());
        let (Some(logs), Some(log)) = (
            self.remote_logs(),
            old.remote_log(&key.topic, key.partition),
        ) else {
            return;
        };
        let led = old
            .partition(&key.topic, key.partition)
            .is_some_and(|p| p.leader == self.config.node_id);
        if !led || id(old) == id(catalog) {
            return;
        }
        let prefix = format!("{}-{}/{}", key.topic, log.topic_id, key.partition);
        let key = key.clone();
        glommio::spawn_local(async move {
            let deleted = async {
                let objects = logs.store.list(prefix.clone()).await?;
                for (object, _) in &objects {
                    logs.store.delete(object.clone()).await?;
                }
                Ok::<usize, RemoteError>(objects.len())
            };
            match deleted.await {
                Ok(n) => info!(topic = %key.topic, partition = key.partition, objects = n, "deleted a deleted topic's remote log"),
                Err(e) => warn!(topic = %key.topic, partition = key.partition, error = %e, prefix, "deleting a deleted topic's remote log failed; its objects stay in the store"),
            }
        })
        .detach();
    }

    /// A fetch below the local log start, read from the remote segment holding its offset;
    /// `None` when no copied segment holds it (the local read then answers, out of range).
    pub(crate) async fn fetch_remote(
        &self,
        topic: &str,
        partition: i32,
        part: &Partition,
        read: FetchRead,
    ) -> Option<FetchResult> {
        let logs = self.remote_logs()?;
        let catalog = self.catalog();
        let log = catalog.remote_log(topic, partition)?;
        let seg = log.segment_for(read.offset)?;
        let mut out = FetchResult {
            error: ErrorCode::NONE,
            records: Bytes::new(),
            high_watermark: part.high_watermark(),
            log_start_offset: self.log_start_with_remote(topic, partition, part),
            last_stable_offset: part.last_stable_offset(),
            aborted_transactions: Vec::new(),
            visible_bytes: part.visible_bytes(),
        };
        if read.hard_limit && read.max_bytes == 0 {
            return Some(out);
        }
        let started = std::time::Instant::now();
        let key = TopicPartition::new(topic.to_string(), partition);
        match self
            .read_with_aborted(&logs, log, &key, seg, read, part)
            .await
        {
            Ok((records, aborted)) => {
                let c = &logs.counts;
                count(&c.reads, 1);
                count(&c.read_bytes, records.len() as u64);
                count(&c.read_micros, started.elapsed().as_micros() as u64);
                out.records = records;
                out.aborted_transactions = aborted;
            }
            Err(f) => {
                count(&logs.counts.store_errors, 1);
                warn!(topic, partition, offset = read.offset, object = %f.object, error = %f.detail, "remote read failed; answering KAFKA_STORAGE_ERROR for this partition");
                out.error = ErrorCode::KAFKA_STORAGE_ERROR;
            }
        }
        Some(out)
    }

    /// The batches at `read.offset` in `seg` and, for READ_COMMITTED, the aborted
    /// transactions among them: records without their whole aborted list would show aborted
    /// records as committed, so failing to read it fails the read.
    async fn read_with_aborted(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
        read: FetchRead,
        part: &Partition,
    ) -> Result<(Bytes, Vec<(i64, i64)>), ReadFailure> {
        let (records, index) = self.read_remote(logs, log, key, seg, read).await?;
        if !read.read_committed {
            return Ok((records, Vec::new()));
        }
        let aborted = self
            .remote_aborted(logs, log, key, seg, &index, read.offset, &records, part)
            .await?;
        Ok((records, aborted))
    }

    /// The batches at `read.offset` in `seg`, and its index.
    async fn read_remote(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
        read: FetchRead,
    ) -> Result<(Bytes, Rc<IndexFile>), ReadFailure> {
        let index = self.remote_index(logs, log, key, seg).await?;
        let object = object_key(log, &key.topic, key.partition, seg, "log");
        let (mut position, mut first) = locate(&index, seg.base_offset, read.offset);
        let want = (read.max_bytes as u64).max(1) + READ_SLACK_BYTES;
        let mut len = want;
        let fail = |detail: String| ReadFailure {
            object: object.clone(),
            detail,
        };
        // Each round either returns or moves on: past batches below the offset (a sparser
        // index than the slack assumes), or to read the batch it stopped in whole.
        while position < seg.size {
            let end = (position + len).min(seg.size);
            let bytes = logs
                .read_object(&object, seg.size, position..end)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let slice = remote_slice(
                &bytes,
                position,
                first,
                read.offset,
                read.max_bytes,
                read.hard_limit,
            );
            match slice {
                RemoteSlice::Batches(r) => return Ok((bytes.slice(r), index)),
                RemoteSlice::Corrupt(why) => return Err(fail(format!("damaged batches: {why}"))),
                RemoteSlice::NeedMore {
                    position: at,
                    needed,
                    offset,
                } => {
                    if at >= seg.size || end >= seg.size && at <= position {
                        return Err(fail(format!(
                            "the object ends at {} before offset {}",
                            seg.size, read.offset
                        )));
                    }
                    position = at;
                    first = offset;
                    len = want.max(needed as u64);
                }
            }
        }
        Err(fail(format!(
            "the object ends at {} before offset {}",
            seg.size, read.offset
        )))
    }

    /// The index of `seg`, from the cache or the store (checked against the CRC32C and size
    /// its metadata records).
    async fn remote_index(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
    ) -> Result<Rc<IndexFile>, ReadFailure> {
        if let Some(f) = logs.indexes.borrow().get(&seg.id) {
            return Ok(f);
        }
        let object = object_key(log, &key.topic, key.partition, seg, "index");
        let fail = |detail: String| ReadFailure {
            object: object.clone(),
            detail,
        };
        let bytes = logs
            .store
            .get(object.clone())
            .await
            .map_err(|e| fail(e.to_string()))?;
        if bytes.len() as u64 != seg.index_size || crc32c::crc32c(&bytes) != seg.index_crc32c {
            return Err(fail(format!(
                "index object of {} bytes does not match its metadata ({} bytes, CRC32C {:#010x})",
                bytes.len(),
                seg.index_size,
                seg.index_crc32c
            )));
        }
        let f = IndexFile::decode(&bytes).ok_or_else(|| fail("undecodable index object".into()))?;
        let f = Rc::new(f);
        logs.indexes
            .borrow_mut()
            .put(seg.id.clone(), f.clone(), bytes.len() as u64);
        Ok(f)
    }

    /// The aborted transactions a READ_COMMITTED fetch of `records` at `from` in remote
    /// segment `seg` carries: from its index and, until an entry shows every transaction that
    /// began below the records' end has ended, the later remote segments' and the local log's.
    #[allow(clippy::too_many_arguments)]
    async fn remote_aborted(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
        index: &Rc<IndexFile>,
        from: i64,
        records: &[u8],
        part: &Partition,
    ) -> Result<Vec<(i64, i64)>, ReadFailure> {
        let Some(upto) = crate::shard::end_of_batches(records) else {
            return Ok(Vec::new());
        };
        let mut lists = vec![index.clone()];
        let done = |f: &IndexFile| f.aborted.iter().any(|t| t.last_stable_offset >= upto);
        let mut complete = done(index);
        let mut next_base = seg.end_offset + 1;
        while !complete {
            let Some(next) = log
                .readable()
                .filter(|s| s.end_offset >= next_base)
                .min_by_key(|s| s.base_offset)
            else {
                break;
            };
            if next.base_offset >= part.log_start_offset() {
                break; // the local log has it
            }
            let f = self.remote_index(logs, log, key, next).await?;
            complete = done(&f);
            next_base = next.end_offset + 1;
            lists.push(f);
        }
        let mut out = tributary_storage::txn::collect_aborted(
            lists.iter().map(|f| f.aborted.as_slice()),
            from,
            upto,
        );
        if !complete {
            for t in part.aborted_transactions(part.log_start_offset(), upto) {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        Ok(out)
    }
}

/// Bytes a remote timestamp lookup reads at a time.
const TIMESTAMP_READ_BYTES: u64 = 1 << 20;

impl Shard {
    /// ListOffsets by timestamp in the remote log: the first record at or after `timestamp`
    /// in the first copied segment whose newest batch reaches it, searched from its time
    /// index, as the local lookup does. `None` when no remote segment reaches it (the local
    /// log is searched then).
    pub(crate) async fn remote_offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        local_start: i64,
        inflated_max: usize,
    ) -> Option<Result<(i64, i64), ErrorCode>> {
        let logs = self.remote_logs()?;
        let catalog = self.catalog();
        let log = catalog.remote_log(topic, partition)?;
        let start = log.start_offset()?;
        let mut segs: Vec<&RemoteSegment> = log
            .readable()
            .filter(|s| s.end_offset >= start && s.max_timestamp >= timestamp)
            .collect();
        segs.sort_by_key(|s| s.base_offset);
        let key = TopicPartition::new(topic.to_string(), partition);
        for seg in segs {
            if seg.base_offset >= local_start {
                return None; // the local log holds all of it: no GET
            }
            let found = self
                .remote_time_lookup(&logs, log, &key, seg, timestamp, start, inflated_max)
                .await;
            match found {
                Ok(Some(hit)) => return Some(Ok(hit)),
                // Its batches that reach the timestamp are below the log start.
                Ok(None) => continue,
                Err(f) => {
                    warn!(topic, partition, object = %f.object, error = %f.detail, "remote timestamp lookup failed; answering KAFKA_STORAGE_ERROR");
                    return Some(Err(ErrorCode::KAFKA_STORAGE_ERROR));
                }
            }
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    async fn remote_time_lookup(
        &self,
        logs: &RemoteLogs,
        log: &RemoteLog,
        key: &TopicPartition,
        seg: &RemoteSegment,
        timestamp: i64,
        log_start: i64,
        inflated_max: usize,
    ) -> Result<Option<(i64, i64)>, ReadFailure> {
        let index = self.remote_index(logs, log, key, seg).await?;
        let object = object_key(log, &key.topic, key.partition, seg, "log");
        let fail = |detail: String| ReadFailure {
            object: object.clone(),
            detail,
        };
        let from = seg.base_offset + i64::from(index.index.lookup_time(timestamp));
        let (mut position, mut expect) = locate(&index, seg.base_offset, from.max(log_start));
        let mut want = TIMESTAMP_READ_BYTES;
        while position < seg.size {
            let end = (position + want).min(seg.size);
            let bytes = logs
                .store
                .get_range(object.clone(), position..end)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let chunk = tributary_storage::scan::scan_chunk(&bytes, position, expect);
            for (e, h) in &chunk.batches {
                if e.last_offset < log_start || e.max_timestamp < timestamp || h.records_count == 0
                {
                    continue;
                }
                let at = (e.position - position) as usize;
                let batch = &bytes[at..at + e.size as usize];
                let record = tributary_storage::scan::first_record_at(
                    batch,
                    timestamp,
                    log_start,
                    inflated_max,
                );
                return Ok(Some(
                    record.unwrap_or((e.base_offset.max(log_start), e.max_timestamp)),
                ));
            }
            match chunk.end {
                // The rest of the segment from the batch that did not fit, at least that batch.
                tributary_storage::scan::ScanEnd::NeedMore {
                    position: at,
                    needed,
                } if end < seg.size => {
                    expect = chunk
                        .batches
                        .last()
                        .map_or(expect, |(e, _)| e.last_offset + 1);
                    position = at;
                    want = TIMESTAMP_READ_BYTES.max(needed as u64);
                }
                tributary_storage::scan::ScanEnd::NeedMore { .. } => break,
                tributary_storage::scan::ScanEnd::Stop { reason, .. } => {
                    return Err(fail(format!("damaged batches: {reason}")))
                }
            }
        }
        Ok(None)
    }
}

/// Where to start reading `offset` in a segment based at `base` with index `f`: (position, the
/// base offset of the batch there).
fn locate(f: &IndexFile, base: i64, offset: i64) -> (u64, i64) {
    if offset <= base {
        return (0, base);
    }
    let rel = u32::try_from((offset - base).min(i64::from(u32::MAX))).unwrap_or(u32::MAX);
    let (rel_base, pos) = f.index.lookup_offset(rel);
    (u64::from(pos), base + i64::from(rel_base))
}

/// The metadata of a copy about to start.
fn segment_of(
    copy: &SegmentCopy,
    broker: i32,
    leader_epoch: tributary_metadata::types::LeaderEpoch,
) -> RemoteSegment {
    RemoteSegment {
        id: uuid::Uuid::new_v4().to_string(),
        base_offset: copy.base_offset,
        end_offset: copy.last_offset,
        max_timestamp: copy.max_timestamp,
        size: copy.size,
        log_crc32c: 0,
        index_size: copy.index.len() as u64,
        index_crc32c: crc32c::crc32c(&copy.index),
        leader_epochs: copy.leader_epochs.clone(),
        broker,
        leader_epoch,
        state: RemoteSegmentState::CopyStarted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_file() -> Rc<IndexFile> {
        Rc::new(IndexFile {
            size: 0,
            next_offset: 0,
            first_timestamp: 0,
            max_timestamp: 0,
            index: Default::default(),
            producers: None,
            aborted: Vec::new(),
        })
    }

    #[test]
    fn an_index_brought_twice_is_kept_and_counted_once() {
        let mut cache = IndexCache::new(100);
        cache.put("a".into(), index_file(), 40);
        cache.put("a".into(), index_file(), 40);
        assert_eq!(cache.held, 40);
        assert_eq!(cache.order.len(), 1);
        // The budget still holds a second one, and the oldest goes for a third.
        cache.put("b".into(), index_file(), 40);
        assert!(cache.get("a").is_some() && cache.get("b").is_some());
        cache.put("c".into(), index_file(), 40);
        assert!(cache.get("a").is_none());
        assert_eq!(cache.held, 80);
        // One larger than the whole budget is not kept.
        cache.put("huge".into(), index_file(), 1_000);
        assert!(cache.get("huge").is_none());
        assert!(
            cache.get("b").is_some() && cache.get("c").is_some(),
            "nothing evicted for it"
        );
    }
}
