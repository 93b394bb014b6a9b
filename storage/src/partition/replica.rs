//! The storage side of follower replication: leader epochs (stamping, the epoch cache and its
//! checkpoint), appends of a leader's batches with their offsets kept, and the high watermark
//! in replicated mode, where it moves only when told to and is checkpointed
//! (`replication-offset-checkpoint`). Truncation is in `truncate`. Nothing here decides who
//! leads or what the followers acknowledged; the broker does, and tells the partition.

use std::collections::VecDeque;

use tributary_protocol::record_batch::BatchError;

use super::*;
use crate::leader_epoch::EpochEntry;

/// The high watermark checkpoint of a replicated partition (the `log_start` file layout).
pub const HW_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

/// Batch ends kept between the high watermark and the log end. Past it every other one is let
/// go: the high watermark then moves in coarser steps (always to a batch end at or below the
/// one asked for), which only shows data later, never too early.
pub const PENDING_BATCH_ENDS_MAX: usize = 1 << 16;

/// Where a batch ends: the offset after it, the segment and file position after it, and the
/// bytes appended since open up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchEnd {
    pub end_offset: i64,
    pub segment_base: i64,
    pub position: u64,
    pub appended_bytes: u64,
}

/// Adds a batch end, thinning the list to half when it is full (the newest end always stays).
pub(crate) fn push_end(ends: &mut VecDeque<BatchEnd>, end: BatchEnd) {
    if ends.len() >= PENDING_BATCH_ENDS_MAX {
        let mut i = 0usize;
        ends.retain(|_| {
            i += 1;
            i.is_multiple_of(2)
        });
    }
    ends.push_back(end);
}

/// The high watermark an open starts with, and what readers may see under it.
pub(crate) struct ReplicaOpen {
    pub high_watermark: i64,
    pub visible_end: (i64, u64),
    pub pending_ends: VecDeque<BatchEnd>,
    /// Bytes between the high watermark and the log end: the appended bytes counter starts there.
    pub pending_bytes: u64,
}

impl ReplicaOpen {
    /// Everything is visible (not replicated: the log end is the high watermark).
    pub fn at_end(segment_base: i64, size: u64, next_offset: i64) -> Self {
        Self {
            high_watermark: next_offset,
            visible_end: (segment_base, size),
            pending_ends: VecDeque::new(),
            pending_bytes: 0,
        }
    }
}

/// A replicated partition's high watermark on open: the checkpointed one, at most the log end,
/// or the log start without a checkpoint; then the batch ends from there to the log end, read
/// from the segments. A checkpoint inside a batch is moved down to that batch's start.
pub(crate) async fn open_high_watermark(
    dir: &Path,
    segments: &[Segment],
    log_start_offset: i64,
    next_offset: i64,
    gaps: bool,
) -> std::io::Result<ReplicaOpen> {
    let checkpoint = log_start::read_named(dir, HW_CHECKPOINT_FILE).await?;
    let mut hw = checkpoint
        .unwrap_or(log_start_offset)
        .clamp(log_start_offset, next_offset);
    let active = segments.last().expect("at least one segment");
    if hw >= next_offset {
        return Ok(ReplicaOpen::at_end(
            active.base_offset,
            active.size,
            next_offset,
        ));
    }
    let mut visible_end = None;
    let mut ends = VecDeque::new();
    let mut bytes = 0u64;
    let from = hw;
    for seg in segments
        .iter()
        .filter(|s| s.next_offset > from && s.size > 0)
    {
        let (position, expect) = seg.locate(from);
        let mut reader =
            SegmentReader::starting_at(seg.file.clone(), position, expect, seg.size, gaps);
        loop {
            let chunk = match reader.next().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    warn!(dir = %dir.display(), error = %e, "damaged batch while locating the high watermark; the rest of the segment stays invisible");
                    break;
                }
                Err(e) => return Err(e),
            };
            for e in chunk.batches.iter().filter(|e| e.last_offset >= from) {
                if visible_end.is_none() {
                    // The first batch not wholly below the high watermark starts what is hidden.
                    hw = hw.min(e.base_offset.max(log_start_offset));
                    visible_end = Some((seg.base_offset, e.position));
                }
                bytes += u64::from(e.size);
                let end = BatchEnd {
                    end_offset: e.last_offset + 1,
                    segment_base: seg.base_offset,
                    position: e.position + u64::from(e.size),
                    appended_bytes: bytes,
                };
                push_end(&mut ends, end);
            }
        }
    }
    let visible_end = visible_end.unwrap_or((active.base_offset, active.size));
    Ok(ReplicaOpen {
        high_watermark: hw,
        visible_end,
        pending_ends: ends,
        pending_bytes: bytes,
    })
}

/// The epoch cache on open: the checkpoint without entries at or past the log end and moved up
/// to the log start; without a usable checkpoint, rebuilt from the `partition_leader_epoch` of
/// every batch (a log written before epochs existed starts at `[(0, log start)]`) and saved.
pub(crate) async fn load_epochs(
    dir: &Path,
    segments: &[Segment],
    log_start_offset: i64,
    next_offset: i64,
    gaps: bool,
) -> std::io::Result<LeaderEpochCache> {
    if let Some(mut cache) = leader_epoch::read(dir).await? {
        let mut changed = cache.truncate_from_end(next_offset);
        changed |= cache.truncate_from_start(log_start_offset);
        if changed {
            leader_epoch::write(dir, &cache, false).await?;
        }
        return Ok(cache);
    }
    let mut cache = LeaderEpochCache::new();
    for seg in segments.iter().filter(|s| s.size > 0) {
        let mut reader = SegmentReader::new(seg.file.clone(), seg.base_offset, seg.size, gaps);
        loop {
            let chunk = match reader.next().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    warn!(dir = %dir.display(), error = %e, "damaged batch while rebuilding the leader epochs");
                    break;
                }
                Err(e) => return Err(e),
            };
            for e in &chunk.batches {
                cache.assign(batch_epoch(chunk.bytes_of(e)), e.base_offset);
            }
        }
    }
    cache.truncate_from_end(next_offset);
    cache.truncate_from_start(log_start_offset);
    if !cache.is_empty() {
        leader_epoch::write(dir, &cache, true).await?;
    }
    Ok(cache)
}

/// The `partition_leader_epoch` of a whole batch (header bytes 12..16).
pub(crate) fn batch_epoch(batch: &[u8]) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&batch[12..16]);
    i32::from_be_bytes(b)
}

/// The whole batches at the front of a leader's fetch response, validated for a follower's
/// append: `(position, header)` each. A trailing partial batch is left out, as Kafka does.
pub(crate) fn follower_batches(
    records: &[u8],
    log_end_offset: i64,
    gaps: bool,
) -> Result<Vec<(usize, BatchHeader)>, (usize, String)> {
    let mut out: Vec<(usize, BatchHeader)> = Vec::new();
    let mut position = 0usize;
    let mut next = log_end_offset;
    while position < records.len() {
        let rest = &records[position..];
        let header = match record_batch::validate(rest, position) {
            Ok(h) => h,
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => return Err((position, e.to_string())),
        };
        // Offset gaps only where compaction can have made them: recovery and reads of a log
        // without `compact` refuse them.
        if header.base_offset < next || (!gaps && header.base_offset != next) {
            return Err((
                position,
                format!(
                    "batch base_offset {} where {next} is expected",
                    header.base_offset
                ),
            ));
        }
        if let Some((_, last)) = out.last() {
            if header.partition_leader_epoch < last.partition_leader_epoch {
                return Err((
                    position,
                    format!(
                        "batch leader epoch {} is below the previous batch's {}",
                        header.partition_leader_epoch, last.partition_leader_epoch
                    ),
                ));
            }
        }
        next = header.last_offset() + 1;
        out.push((position, header));
        position += header.size();
    }
    Ok(out)
}

impl Partition {
    /// Replicated mode on or off. On: flushes advance the durable offset but not the high
    /// watermark, which moves only through [`Partition::set_high_watermark`]. Off (the
    /// default): the high watermark is the durable end (or the written end with
    /// `flush.messages` above 1), as without replication; it catches up at the next flush.
    pub fn set_replicated(&self, on: bool) {
        let mut st = self.state.borrow_mut();
        if st.replicated == on {
            return;
        }
        st.replicated = on;
        st.pending_ends.clear();
        if on && st.next_offset > st.high_watermark {
            // The batch ends already appended are not known one by one: the high watermark can
            // pass them only all at once, at the current log end.
            let active = st.segments.last().expect("active segment");
            let end = BatchEnd {
                end_offset: st.next_offset,
                segment_base: active.base_offset,
                position: active.size,
                appended_bytes: st.appended_bytes,
            };
            st.pending_ends.push_back(end);
        }
    }

    pub fn is_replicated(&self) -> bool {
        self.state.borrow().replicated
    }

    /// Wakes every task waiting for this partition to advance (a waiting fetch, an acks=all
    /// write): its leadership changed, and each must look again instead of waiting out its
    /// next poll.
    pub fn wake_waiters(&self) {
        self.advanced.notify(usize::MAX);
    }

    /// Moves the high watermark of a replicated partition up to `high_watermark`, never past the
    /// durable offset, and only to a batch end (the largest at or below it); it never moves
    /// back. Waiting fetches are woken when it moves. Returns the high watermark now. Without
    /// replicated mode this changes nothing.
    pub fn set_high_watermark(&self, high_watermark: i64) -> i64 {
        let moved = {
            let mut guard = self.state.borrow_mut();
            let st = &mut *guard;
            if !st.replicated {
                return st.high_watermark;
            }
            let target = high_watermark.min(st.durable_offset).min(st.next_offset);
            let k = st.pending_ends.partition_point(|e| e.end_offset <= target);
            if k == 0 {
                return st.high_watermark;
            }
            let end = st.pending_ends[k - 1];
            st.pending_ends.drain(..k);
            if end.end_offset > st.high_watermark {
                st.high_watermark = end.end_offset;
                st.visible_end = (end.segment_base, end.position);
                st.visible_bytes = end.appended_bytes;
                true
            } else {
                false
            }
        };
        if moved {
            self.advanced.notify(usize::MAX);
        }
        self.high_watermark()
    }

    /// Writes the high watermark checkpoint of a replicated partition if the high watermark moved
    /// since it was last written. Kafka writes it every few seconds; the broker calls this on its
    /// periodic pass, and [`Partition::close`] does.
    pub async fn checkpoint_high_watermark(&self) -> Result<(), PartitionError> {
        let hw = {
            let st = self.state.borrow();
            if !st.replicated || st.hw_checkpointed == st.high_watermark {
                return Ok(());
            }
            st.high_watermark
        };
        log_start::write_named(&self.dir, HW_CHECKPOINT_FILE, hw)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
        self.state.borrow_mut().hw_checkpointed = hw;
        Ok(())
    }

    /// A listener woken whenever either end of the log moves (appends, truncations, the log
    /// start): a replica's fetch waits on it. Create it before checking.
    pub fn listen_append(&self) -> EventListener {
        self.appended.listen()
    }

    /// The epoch [`Partition::append`] stamps.
    pub fn leader_epoch(&self) -> i32 {
        self.state.borrow().leader_epoch
    }

    /// Becoming leader in `epoch`: appends are stamped with it from now on, and the epoch cache
    /// records that it begins at the log end, before any batch of it is appended (so a follower
    /// can tell where the previous epoch ended even if nothing is written in this one). The
    /// cache file is written durably when it changes.
    pub async fn set_leader_epoch(&self, epoch: i32) -> Result<(), PartitionError> {
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let leo = {
            let mut st = self.state.borrow_mut();
            st.leader_epoch = epoch;
            st.next_offset
        };
        if self.assign_epoch(epoch, leo) {
            self.persist_epochs(true).await?;
        }
        Ok(())
    }

    /// The latest epoch in the epoch cache; `None` while it is empty.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.state.borrow().epochs.latest_epoch()
    }

    /// OffsetForLeaderEpoch for `epoch`: `(epoch, end_offset)` by Kafka's rules (see
    /// [`LeaderEpochCache::end_offset_for`]), with the log end offset for the latest epoch.
    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        let st = self.state.borrow();
        st.epochs.end_offset_for(epoch, st.next_offset)
    }

    /// The epoch cache's entries, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.state.borrow().epochs.entries().to_vec()
    }

    /// Assigns `(epoch, start_offset)` in the cache; whether it changed.
    pub(super) fn assign_epoch(&self, epoch: i32, start_offset: i64) -> bool {
        self.state.borrow_mut().epochs.assign(epoch, start_offset)
    }

    /// Writes the epoch cache's checkpoint; a failure takes the partition offline when it was to
    /// be durable (appends in the new epoch must not outrun it).
    pub(super) async fn persist_epochs(&self, durable: bool) -> Result<(), PartitionError> {
        let cache = self.state.borrow().epochs.clone();
        match leader_epoch::write(&self.dir, &cache, durable).await {
            Ok(()) => Ok(()),
            Err(e) if durable => {
                Err(self.go_offline(format!("writing the leader epoch checkpoint: {e}")))
            }
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "writing the leader epoch checkpoint failed; it is rebuilt on open");
                Ok(())
            }
        }
    }

    /// A follower's append of what its leader's fetch returned: whole RecordBatch v2 batches
    /// with their offsets and leader epochs kept (a trailing partial batch is left out). Each
    /// batch's CRC is checked, and offsets must start at or after the log end and increase
    /// (gaps are allowed: compacted logs). Producer state is recorded without sequence checks:
    /// the leader checked them. Nothing is appended if any batch is refused. Returns the new log
    /// end offset; the data is durable once [`Partition::sync_to`] returns for it.
    pub async fn append_as_follower(
        self: &Rc<Self>,
        records: &[u8],
    ) -> Result<i64, PartitionError> {
        self.start_at_straddling_batch(records).await?;
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let leo = self.log_end_offset();
        let gaps = self.config.get().compact;
        let batches = follower_batches(records, leo, gaps).map_err(|(position, detail)| {
            PartitionError::Corrupt {
                dir: self.dir.display().to_string(),
                position: position as u64,
                detail,
            }
        })?;
        // New epochs are on disk before any of their batches can be.
        let mut new_epoch = false;
        for (_, header) in &batches {
            new_epoch |= self.assign_epoch(header.partition_leader_epoch, header.base_offset);
        }
        if new_epoch {
            self.persist_epochs(true).await?;
        }
        for (position, header) in batches {
            let batch = &records[position..position + header.size()];
            let leo = self.log_end_offset();
            let active_base = self.state.borrow().active_tail.segment_base;
            let too_far = header.last_offset() - active_base > i64::from(i32::MAX);
            if too_far || self.needs_roll(&header, header.base_offset) {
                self.roll_at(header.base_offset.max(leo)).await?;
            }
            self.push_batch(&header, &[batch]);
        }
        self.after_append();
        Ok(self.log_end_offset())
    }

    /// An empty log whose leader's first batch begins below its log end and ends at or past it
    /// starts over at that batch's base, as Kafka's follower does: it started over at the
    /// leader's log start (its fetch was out of range), and DeleteRecords can put a log start
    /// inside a batch, which the leader returns whole. The leader's log start, which the
    /// follower takes after the append, moves the log start up again.
    async fn start_at_straddling_batch(
        self: &Rc<Self>,
        records: &[u8],
    ) -> Result<(), PartitionError> {
        let leo = self.log_end_offset();
        if leo != self.log_start_offset() {
            return Ok(());
        }
        // Only the offsets matter here; the append checks the batch's CRC itself.
        let Ok(first) = record_batch::parse_header(records, 0) else {
            return Ok(());
        };
        if first.base_offset < leo && first.last_offset() >= leo {
            info!(dir = %self.dir.display(), log_end_offset = leo, batch_base_offset = first.base_offset, "the leader's first batch begins below this empty log's start: starting at its base");
            self.truncate_fully_and_start_at(first.base_offset).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_protocol::record_batch::build_batch;

    fn end(end_offset: i64) -> BatchEnd {
        BatchEnd {
            end_offset,
            segment_base: 0,
            position: end_offset as u64 * 10,
            appended_bytes: end_offset as u64 * 10,
        }
    }

    #[test]
    fn batch_ends_thin_out_when_full_keeping_the_newest() {
        let mut ends = VecDeque::new();
        for i in 1..=PENDING_BATCH_ENDS_MAX as i64 {
            push_end(&mut ends, end(i));
        }
        assert_eq!(ends.len(), PENDING_BATCH_ENDS_MAX);
        push_end(&mut ends, end(PENDING_BATCH_ENDS_MAX as i64 + 1));
        assert_eq!(ends.len(), PENDING_BATCH_ENDS_MAX / 2 + 1);
        assert_eq!(ends[0].end_offset, 2);
        assert!(ends
            .iter()
            .zip(ends.iter().skip(1))
            .all(|(a, b)| a.end_offset < b.end_offset));
        assert_eq!(
            ends.back().map(|e| e.end_offset),
            Some(PENDING_BATCH_ENDS_MAX as i64 + 1)
        );
    }

    fn at(base: i64, epoch: i32) -> Vec<u8> {
        let mut b = build_batch(&[(None, Some(b"v")), (None, Some(b"w"))], 5, None).to_vec();
        record_batch::assign_offset(&mut b, base, epoch);
        b
    }

    #[test]
    fn follower_batches_checks_offsets_epochs_and_crc_and_drops_a_partial_tail() {
        let mut records = [at(10, 1), at(12, 1), at(14, 2)].concat();
        let whole = records.len();
        records.extend_from_slice(&at(16, 2)[..30]);
        let got = follower_batches(&records, 10, false).unwrap();
        let bases: Vec<i64> = got.iter().map(|(_, h)| h.base_offset).collect();
        assert_eq!(bases, vec![10, 12, 14]);
        assert_eq!(got[2].0 + got[2].1.size(), whole);
        assert!(
            follower_batches(&records, 11, false).is_err(),
            "below the log end"
        );
        assert!(follower_batches(&records, 8, false).is_err(), "a gap");
        assert_eq!(follower_batches(&records, 8, true).unwrap().len(), 3);
        let back = [at(10, 2), at(12, 1)].concat();
        assert!(
            follower_batches(&back, 10, false).is_err(),
            "epochs go back"
        );
        let mut bad = at(10, 1);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(follower_batches(&bad, 10, false).unwrap_err().0, 0);
        assert!(follower_batches(&[], 10, false).unwrap().is_empty());
    }

    #[test]
    fn an_empty_follower_takes_a_batch_its_start_falls_inside() {
        crate::partition::on_executor(|path| async move {
            let p = Partition::open_replicated(path.join("t-0"), LogConfig::DEFAULT)
                .await
                .unwrap();
            // Out of the leader's range: it starts over at the leader's log start, 11, and
            // the leader's batch there holds 10 and 11.
            p.truncate_fully_and_start_at(11).await.unwrap();
            let end = p.append_as_follower(&at(10, 1)).await.unwrap();
            assert_eq!((p.log_start_offset(), end), (10, 12));
            p.sync_to(end).await.unwrap();
            assert_eq!(p.set_high_watermark(12), 12);
            assert_eq!(p.follow_log_start(11).await.unwrap(), 11);
            let end = p.append_as_follower(&at(12, 1)).await.unwrap();
            assert_eq!((p.log_start_offset(), end), (11, 14), "not empty: appended");
            // A batch wholly below an empty log's end is still refused.
            p.truncate_fully_and_start_at(20).await.unwrap();
            assert!(p.append_as_follower(&at(14, 1)).await.is_err());
            assert_eq!(p.log_start_offset(), 20);
            p.close().await.unwrap();
        });
    }

    #[test]
    fn a_truncation_racing_a_close_leaves_a_log_the_next_open_trusts() {
        crate::partition::on_executor(|path| async move {
            let open = || Partition::open_replicated(path.join("t-0"), LogConfig::DEFAULT);
            let p = open().await.unwrap();
            let mut end = 0;
            for base in (0..40).step_by(2) {
                end = p.append_as_follower(&at(base, 1)).await.unwrap();
            }
            p.sync_to(end).await.unwrap();
            assert_eq!(p.set_high_watermark(30), 30);
            // A replica fetcher cuts the unreplicated tail while the broker closes the
            // partition (a controlled shutdown makes this node a follower of the new
            // leader as it stops): the close waits for the cut (or the cut finds it
            // closed), and whichever wins, the file, its index and the clean marker agree.
            let cut = glommio::spawn_local({
                let p = p.clone();
                async move { p.truncate_to(30).await }
            })
            .detach();
            p.close().await.unwrap();
            let cut = cut.await.expect("the cut task ran");
            // Closed, it takes no more cuts or appends: they would land after the clean
            // marker and make it lie.
            assert!(p.truncate_to(10).await.is_err(), "a cut after the close");
            assert!(p
                .append_as_follower(&at(p.log_end_offset(), 1))
                .await
                .is_err());
            drop(p);
            let again = open().await.unwrap();
            let want = if cut.is_ok() { 30 } else { 40 };
            assert_eq!(again.log_end_offset(), want);
            assert!(!again.is_offline());
            // Every batch up to the end reads back whole.
            let read = again.read(0, 1 << 20).await.unwrap();
            let mut at_offset = 0;
            let mut rest = &read.records[..];
            while !rest.is_empty() {
                let h = record_batch::parse_header(rest, 0).unwrap();
                assert_eq!(h.base_offset, at_offset);
                at_offset = h.last_offset() + 1;
                rest = &rest[h.size()..];
            }
            assert_eq!(at_offset, want.min(30), "read up to the high watermark");
            again.close().await.unwrap();
        });
    }
}
