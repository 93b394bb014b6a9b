//! Truncating a partition from the end, as a follower does when its log diverged from its
//! leader's, and starting it over at another offset when its log is out of the leader's range.
//!
//! Both hold the maintenance lock, then the append lock, and mark a flush as running for their
//! whole length, so no flush, write-ahead or sync round can write or count bytes of the old log
//! after the cut. Segment files after the cut are removed newest first and the cut file is
//! `fdatasync`ed before anything new can be appended, so a crash at any point leaves a prefix
//! of the old log, never old batches stitched to new ones.

use super::*;

impl Partition {
    /// Removes every batch at and after `offset`, which must be a batch boundary: the base of
    /// a batch, or the log end. An offset at or past the log end changes nothing; one below
    /// the log start, or inside a batch, is out of range. The high watermark and the durable
    /// offset come down to the new end if they were past it; the epoch cache drops the epochs
    /// that started there or later; producer state is rebuilt as an open would, so
    /// transactions whose markers were cut are open again and those begun past the cut are
    /// gone, and the aborted index keeps only the markers before the cut. Returns the new
    /// log end offset (below `offset` when `offset` was in a compacted log's gap).
    pub async fn truncate_to(self: &Rc<Self>, offset: i64) -> Result<i64, PartitionError> {
        let _maintenance = self.lock(&self.maintenance).await?;
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let (leo, start_offset, hw) = {
            let st = self.state.borrow();
            (st.next_offset, st.log_start_offset, st.high_watermark)
        };
        if offset >= leo {
            // Nothing to cut from the log, but an epoch that begins here and holds no batch yet
            // (a leader's epoch started at its log end) goes, as Kafka's `truncateTo` does:
            // otherwise this replica would go on naming it as its last fetched epoch, one its
            // new leader never had, and be told of the same divergence forever.
            if self.state.borrow_mut().epochs.truncate_from_end(offset) {
                self.persist_epochs(true).await?;
            }
            return Ok(leo);
        }
        if offset < start_offset {
            return Err(PartitionError::OffsetOutOfRange {
                offset,
                log_start_offset: start_offset,
                high_watermark: hw,
            });
        }
        // Everything appended is written and synced first: no buffer or sealed tail is left to
        // write old bytes over the cut later.
        self.sync_to(leo).await?;
        let result = self.exclusive(self.truncate_locked(offset)).await;
        if result.is_ok() {
            info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset(), "truncated the log");
        }
        result
    }

    /// A follower whose fetch offset is out of its leader's range: removes every segment and
    /// starts an empty log at `offset`, which becomes the log start offset. The epoch cache and
    /// producer state are emptied.
    pub async fn truncate_fully_and_start_at(
        self: &Rc<Self>,
        offset: i64,
    ) -> Result<(), PartitionError> {
        assert!(offset >= 0, "a log starts at a non-negative offset");
        let _maintenance = self.lock(&self.maintenance).await?;
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let result = self.exclusive(self.start_over_locked(offset)).await;
        if result.is_ok() {
            info!(dir = %self.dir.display(), offset, "removed the log; it starts over");
        }
        result
    }

    /// Runs `work` with no flush running and none able to start: it holds the flush slot.
    async fn exclusive<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, PartitionError>>,
    ) -> Result<T, PartitionError> {
        while self.flushing.get() {
            let listener = self.flushed.listen();
            if self.flushing.get() {
                listener.await;
            }
        }
        self.flushing.set(true);
        let result = work.await;
        if let Err(PartitionError::Storage { detail, .. }) = &result {
            self.go_offline(format!("truncation failed: {detail}"));
        }
        self.flushing.set(false);
        self.flushed.notify(usize::MAX);
        self.appended.notify(usize::MAX);
        self.advanced.notify(usize::MAX);
        result
    }

    async fn truncate_locked(&self, offset: i64) -> Result<i64, PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        // Read once, so the scan for the cut and the rescan after it agree on the log's gaps.
        let gaps = self.config.get().compact;
        let (keep, cut) = self.cut_point(offset, gaps).await?;
        let removed = self.remove_segments_after(keep).await?;
        let (seg, tail, producers) = self.cut_kept_segment(keep, cut, gaps).await?;
        let leo = seg.next_offset;
        let (hw_to_write, epochs_changed) = self.install_truncated(keep, seg, tail, producers);
        self.cleaned_through
            .set(self.cleaned_through.get().min(leo));
        self.prefetch.borrow_mut().take();
        close_removed(&self.dir, removed).await;
        if epochs_changed {
            self.persist_epochs(true).await?;
        }
        if let Some(hw) = hw_to_write {
            // A checkpoint past the new end would show batches appended at these offsets later
            // as committed after a restart.
            log_start::write_named(&self.dir, replica::HW_CHECKPOINT_FILE, hw)
                .await
                .map_err(io)?;
            self.state.borrow_mut().hw_checkpointed = hw;
        }
        Ok(leo)
    }

    /// Where a truncation at `offset` cuts the log: the index of the segment kept as the new
    /// active one, and the position in it where its data is cut. The cut goes before the first
    /// batch that ends at or after `offset`; an `offset` inside a batch is out of range.
    async fn cut_point(&self, offset: i64, gaps: bool) -> Result<(usize, u64), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        // The segment holding `offset`, and where in it the scan for the cut starts.
        let (i, file, size, position, expect) = {
            let st = self.state.borrow();
            let i = st
                .segments
                .partition_point(|s| s.base_offset <= offset)
                .saturating_sub(1);
            let seg = &st.segments[i];
            let (position, expect) = seg.locate(offset);
            (i, seg.file.clone(), seg.size, position, expect)
        };
        // Every batch of the segment ends before `offset` unless the scan finds one that does
        // not: then the cut goes at the segment's end.
        let mut cut = size;
        let mut reader = SegmentReader::starting_at(file, position, expect, size, gaps);
        while let Some(chunk) = reader.next().await.map_err(io)? {
            match cut_in(&chunk.batches, offset) {
                None => continue,
                Some(Cut::Before(position)) => {
                    cut = position;
                    break;
                }
                Some(Cut::InsideBatch) => {
                    let hw = self.high_watermark();
                    return Err(PartitionError::OffsetOutOfRange {
                        offset,
                        log_start_offset: self.log_start_offset(),
                        high_watermark: hw,
                    });
                }
            }
        }
        // The reader yields only batches wholly below the segment's size.
        debug_assert!(cut <= size, "cut at {cut} past the segment's size {size}");
        Ok(kept_segment(&self.state.borrow().segments, i, cut))
    }

    /// Removes every segment after `keep`, newest first, so a crash part-way leaves a prefix of
    /// the log; returns them so their files can be closed once no read holds them.
    async fn remove_segments_after(&self, keep: usize) -> Result<Vec<Segment>, PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let removed: Vec<Segment> = self.state.borrow_mut().segments.drain(keep + 1..).collect();
        for seg in removed.iter().rev() {
            io::remove_file(&segment_path(&self.dir, seg.base_offset))
                .await
                .map_err(io)?;
            remove_index(&self.dir, seg.base_offset).await.map_err(io)?;
        }
        if !removed.is_empty() {
            io::sync_dir(&self.dir).await.map_err(io)?;
        }
        Ok(removed)
    }

    /// Cuts segment `keep`, the new active one, at position `cut` and makes the cut durable,
    /// then rescans it from the producer state before it: the segment as an open would
    /// recover it, its active tail, and the producer state at the new log end.
    async fn cut_kept_segment(
        &self,
        keep: usize,
        cut: u64,
        gaps: bool,
    ) -> Result<(Segment, Tail, ProducerStateTable), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let (kept_file, kept_base) = {
            let st = self.state.borrow();
            let seg = &st.segments[keep];
            (seg.file.clone(), seg.base_offset)
        };
        // The kept segment is the active one now: its index file would only be stale.
        remove_index(&self.dir, kept_base).await.map_err(io)?;
        kept_file.truncate(cut).await.map_err(io)?;
        kept_file.fdatasync().await.map_err(io)?;
        let mut producers = self.rebuild_producers(keep).await?;
        let (seg, _) = recover_segment(
            kept_file.clone(),
            kept_base,
            Some(&mut producers),
            self.config.get().index_interval_bytes,
            gaps,
        )
        .await
        .map_err(io)?;
        let tail = tail_of(&seg).await.map_err(io)?;
        Ok((seg, tail, producers))
    }

    /// Makes the rescanned segment `seg` the active one in place of segment `keep`, and brings
    /// every offset past the new log end down to it: the high watermark, the durable offset,
    /// the log start, the pending batch ends and the leader epochs. Returns the high watermark
    /// to checkpoint, if the checkpoint is now past it, and whether the epochs changed.
    fn install_truncated(
        &self,
        keep: usize,
        seg: Segment,
        tail: Tail,
        mut producers: ProducerStateTable,
    ) -> (Option<i64>, bool) {
        let leo = seg.next_offset;
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        st.segments.truncate(keep);
        let (seg_base, seg_size) = (seg.base_offset, seg.size);
        st.segments.push(seg);
        st.next_offset = leo;
        st.durable_offset = st.durable_offset.min(leo);
        if st.high_watermark >= leo {
            st.high_watermark = leo;
            st.visible_end = (seg_base, seg_size);
            st.visible_bytes = st.appended_bytes;
        }
        st.pending_ends.retain(|e| e.end_offset <= leo);
        st.log_start_offset = st.log_start_offset.min(leo);
        st.active_tail = tail;
        st.sealed_tails.clear();
        producers.set_max_producers(self.config.get().producer_state_max_producers);
        producers.on_high_watermark(st.high_watermark);
        st.producers = producers;
        let changed = st.epochs.truncate_from_end(leo);
        let hw =
            (st.replicated && st.hw_checkpointed > st.high_watermark).then_some(st.high_watermark);
        debug_assert_eq!(st.segments.len(), keep + 1, "the kept segment is the last");
        // Every offset that was past the new log end has come down to it.
        debug_assert!(
            st.log_start_offset <= leo && st.high_watermark <= leo && st.durable_offset <= leo,
            "log start {}, high watermark {}, durable offset {}, log end {leo}",
            st.log_start_offset,
            st.high_watermark,
            st.durable_offset
        );
        (hw, changed)
    }

    /// Producer state at the end of segment `keep - 1`: from the newest snapshot in a closed
    /// segment's index file before `keep`, then the segments after it replayed (segment `keep`
    /// itself is replayed by the caller's rescan of it).
    async fn rebuild_producers(&self, keep: usize) -> Result<ProducerStateTable, PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let gaps = self.config.get().compact;
        let closed: Vec<(i64, Rc<SegmentFile>, u64)> = {
            let st = self.state.borrow();
            st.segments[..keep]
                .iter()
                .map(|s| (s.base_offset, s.file.clone(), s.size))
                .collect()
        };
        let mut producers = ProducerStateTable::default();
        let mut replay_from = 0;
        for (k, (base, _, size)) in closed.iter().enumerate().rev() {
            if let Some(snapshot) = read_index(&self.dir, *base, *size)
                .await
                .and_then(|f| f.producers)
            {
                producers = snapshot;
                replay_from = k + 1;
                break;
            }
        }
        for (base, file, size) in &closed[replay_from..] {
            let mut reader = SegmentReader::new(file.clone(), *base, *size, gaps);
            while let Some(chunk) = reader.next().await.map_err(io)? {
                for e in &chunk.batches {
                    let bytes = chunk.bytes_of(e);
                    let header = record_batch::parse_header(bytes, 0)
                        .map_err(|e| storage_err(&self.dir, e))?;
                    // The segments' aborted indexes stand: only their producer state is wanted.
                    producers.apply(&header, crate::txn::batch_kind(&header, bytes));
                }
            }
        }
        Ok(producers)
    }

    async fn start_over_locked(&self, offset: i64) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let removed: Vec<Segment> = self.state.borrow_mut().segments.drain(..).collect();
        for seg in removed.iter().rev() {
            io::remove_file(&segment_path(&self.dir, seg.base_offset))
                .await
                .map_err(io)?;
            remove_index(&self.dir, seg.base_offset).await.map_err(io)?;
        }
        let path = segment_path(&self.dir, offset);
        let durability = self.config.get().active_durability();
        let file = SegmentFile::open_with(&path, true, durability).await;
        let file = Rc::new(file.map_err(io)?);
        io::sync_dir(&self.dir).await.map_err(io)?;
        log_start::write(&self.dir, offset).await.map_err(io)?;
        let replicated = {
            let mut guard = self.state.borrow_mut();
            let st = &mut *guard;
            st.segments.push(Segment::empty(offset, file.clone()));
            st.next_offset = offset;
            st.durable_offset = offset;
            st.high_watermark = offset;
            st.visible_end = (offset, 0);
            st.visible_bytes = st.appended_bytes;
            st.log_start_offset = offset;
            st.active_tail = Tail::new(offset, file, 0, &[]);
            st.sealed_tails.clear();
            st.pending_ends.clear();
            let mut producers = ProducerStateTable::default();
            producers.set_max_producers(self.config.get().producer_state_max_producers);
            st.producers = producers;
            st.epochs.clear();
            st.replicated
        };
        self.cleaned_through.set(offset);
        self.prefetch.borrow_mut().take();
        close_removed(&self.dir, removed).await;
        self.persist_epochs(true).await?;
        if replicated {
            log_start::write_named(&self.dir, replica::HW_CHECKPOINT_FILE, offset)
                .await
                .map_err(io)?;
            self.state.borrow_mut().hw_checkpointed = offset;
        }
        Ok(())
    }
}

/// Where a cut at `offset` goes in a run of batches, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Before the batch at this position: the first that ends at or after `offset`, and it
    /// starts there (or past it, in a compacted log's gap).
    Before(u64),
    /// `offset` is inside a batch: no cut can leave the batches below it whole.
    InsideBatch,
}

/// Where in `batches` a cut at `offset` goes; `None` when every one of them ends before it.
fn cut_in(batches: &[BatchEntry], offset: i64) -> Option<Cut> {
    let e = batches.iter().find(|e| e.last_offset >= offset)?;
    Some(if e.base_offset < offset {
        Cut::InsideBatch
    } else {
        Cut::Before(e.position)
    })
}

/// The segment kept as the new active one, and where it is cut, when the cut goes at `cut` in
/// segment `i`. A segment cut to nothing goes too (but the first), and the one before it is
/// kept whole, so the log never ends in an empty segment after a shorter one, which an open
/// would drop.
fn kept_segment(segments: &[Segment], i: usize, cut: u64) -> (usize, u64) {
    if cut == 0 && i > 0 {
        (i - 1, segments[i - 1].size)
    } else {
        (i, cut)
    }
}

/// The active tail of `seg` as an open builds it: the partial last block read back from disk.
pub(super) async fn tail_of(seg: &Segment) -> std::io::Result<Tail> {
    let align = seg.file.alignment();
    let start = align_down(seg.size, align);
    let partial = if seg.size > start {
        Some(seg.file.read_at(start, (seg.size - start) as usize).await?)
    } else {
        None
    };
    Ok(Tail::new(
        seg.base_offset,
        seg.file.clone(),
        start,
        partial.as_deref().unwrap_or_default(),
    ))
}

/// Closes the files of removed segments no read holds any more.
async fn close_removed(dir: &Path, removed: Vec<Segment>) {
    for seg in removed {
        if let Ok(file) = Rc::try_unwrap(seg.file) {
            if let Err(e) = file.close().await {
                warn!(dir = %dir.display(), error = %e, "closing a removed segment failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, last_offset: i64, position: u64) -> BatchEntry {
        BatchEntry {
            base_offset,
            last_offset,
            position,
            size: 100,
            max_timestamp: 0,
        }
    }

    #[test]
    fn a_cut_goes_before_the_first_batch_that_reaches_the_offset() {
        let batches = [batch(0, 4, 0), batch(5, 9, 100), batch(12, 14, 200)];
        assert_eq!(cut_in(&batches, 5), Some(Cut::Before(100)));
        assert_eq!(cut_in(&batches, 0), Some(Cut::Before(0)));
        // In a compacted log's gap: the cut goes before the batch after the gap.
        assert_eq!(cut_in(&batches, 11), Some(Cut::Before(200)));
        assert_eq!(cut_in(&batches, 7), Some(Cut::InsideBatch));
        assert_eq!(cut_in(&batches, 15), None, "every batch ends before it");
        assert_eq!(cut_in(&[], 3), None);
    }
}
