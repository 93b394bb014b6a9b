//! Appending to a partition: a leader's batches get their offsets and leader epoch here, a
//! follower's keep theirs (`replica`); both go into the active segment's tail through the same
//! steps, rolling to a new segment when the active one is full. Appends never write to disk
//! themselves, but for a full append buffer written ahead of the commit.

use super::*;
use crate::txn::BatchKind;

impl Partition {
    /// Appends one validated batch, assigning its offsets and stamping the partition's current
    /// leader epoch (0 unless [`Partition::set_leader_epoch`] changed it). The batch is not
    /// durable until [`Partition::sync_to`] returns for its last offset + 1.
    pub async fn append(self: &Rc<Self>, batch: &[u8]) -> Result<AppendOutcome, PartitionError> {
        let epoch = self.state.borrow().leader_epoch;
        self.append_with_epoch(batch, epoch).await
    }

    /// [`Partition::append`] stamping `leader_epoch` into the batch's `partition_leader_epoch`
    /// (outside the CRC), and recording in the epoch cache that `leader_epoch` begins at this
    /// batch when it is newer than the latest epoch there.
    pub async fn append_with_epoch(
        self: &Rc<Self>,
        batch: &[u8],
        leader_epoch: i32,
    ) -> Result<AppendOutcome, PartitionError> {
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let header = record_batch::parse_header(batch, 0).map_err(|e| storage_err(&self.dir, e))?;
        assert_eq!(header.size(), batch.len(), "append takes exactly one batch");
        if let Some(dup) = self.check_sequence(&header)? {
            return Ok(dup);
        }
        self.append_locked(batch, header, leader_epoch).await
    }

    /// Appends an end-transaction marker for `producer_id` — what the transaction coordinator
    /// has each partition leader write to complete a transaction (`WriteTxnMarkers`): a control
    /// batch (magic 2, attributes control | transactional, the producer's id and epoch, base
    /// sequence -1, both timestamps now, CRC32C) holding one COMMIT (`commit`) or ABORT record
    /// with `coordinator_epoch`, stamped with the partition's current leader epoch as
    /// [`Partition::append`] stamps batches. It ends the producer's open transaction; an ABORT
    /// is recorded in the aborted transaction index of the segment it lands in. A producer with
    /// no transaction open still gets its marker, as in Kafka.
    ///
    /// Refused, with nothing written, when the producer is known here at a newer epoch
    /// ([`SequenceError::StaleEpoch`], Kafka's INVALID_PRODUCER_EPOCH) or its last marker came
    /// from a newer coordinator epoch ([`SequenceError::CoordinatorFenced`]).
    ///
    /// Returns once the marker is appended, like [`Partition::append`]: it is durable once
    /// [`Partition::commit`] (or [`Partition::sync_to`]) returns for `last_offset + 1`, and, in
    /// replicated mode, committed once the high watermark passes `last_offset` — the marker's
    /// offset (`base_offset == last_offset`).
    ///
    /// # Panics
    ///
    /// If `producer_id` is negative: the coordinator writes markers only for producer ids it
    /// allocated.
    pub async fn append_marker(
        self: &Rc<Self>,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<AppendOutcome, PartitionError> {
        assert!(producer_id >= 0, "a marker names a producer");
        let marker = crate::txn::TxnMarker {
            commit,
            coordinator_epoch,
        };
        let batch = crate::txn::marker_batch(producer_id, producer_epoch, marker, wall_clock_ms());
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        self.state.borrow().producers.check_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
        )?;
        let header =
            record_batch::parse_header(&batch, 0).map_err(|e| storage_err(&self.dir, e))?;
        let leader_epoch = self.state.borrow().leader_epoch;
        let outcome = self.append_locked(&batch, header, leader_epoch).await?;
        assert_eq!(
            outcome.base_offset, outcome.last_offset,
            "a marker is one record"
        );
        Ok(outcome)
    }

    /// The common end of leader appends, under the append lock once the batch was checked:
    /// rolls if needed, assigns the offsets and the leader epoch, and copies the batch in.
    async fn append_locked(
        self: &Rc<Self>,
        batch: &[u8],
        header: BatchHeader,
        leader_epoch: i32,
    ) -> Result<AppendOutcome, PartitionError> {
        let base_offset = self.state.borrow().next_offset;
        if self.needs_roll(&header, base_offset) {
            self.roll().await?;
        }
        let new_epoch = self.assign_epoch(leader_epoch, base_offset);
        if new_epoch {
            self.persist_epochs(true).await?;
        }
        // The batch goes straight into the aligned buffers a flush writes; only its header,
        // whose base offset and leader epoch the broker assigns, is copied on the way.
        let mut head = [0u8; record_batch::RECORD_BATCH_HEADER_BYTES];
        head.copy_from_slice(&batch[..record_batch::RECORD_BATCH_HEADER_BYTES]);
        record_batch::assign_offset(&mut head, base_offset, leader_epoch);
        let header = BatchHeader {
            base_offset,
            partition_leader_epoch: leader_epoch,
            ..header
        };
        self.push_batch(&header, &[&head, &batch[head.len()..]]);
        let outcome = AppendOutcome {
            base_offset,
            last_offset: header.last_offset(),
            duplicate: false,
            log_start_offset: self.state.borrow().log_start_offset,
        };
        self.after_append();
        Ok(outcome)
    }

    /// Whether the active segment must roll before a batch with `header` at `base_offset`.
    pub(super) fn needs_roll(&self, header: &BatchHeader, base_offset: i64) -> bool {
        let config = self.config.get();
        let st = self.state.borrow();
        let active = st.segments.last().expect("active segment");
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        active.first_timestamp.is_some_and(|first| {
            active.size + header.size() as u64 > config.segment_bytes
                || header.max_timestamp.saturating_sub(first) > config.segment_ms
                // Offsets are stored relative to the base in 32 bits, as in Kafka.
                || last_offset - active.base_offset > i64::from(i32::MAX)
        })
    }

    /// Copies one batch (`parts`, whose header is `header` with its final offsets) into the
    /// active tail and notes it in the segment, the producer state and, in replicated mode, the
    /// pending batch ends.
    pub(super) fn push_batch(&self, header: &BatchHeader, parts: &[&[u8]]) {
        let config = self.config.get();
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let base_offset = header.base_offset;
        let last_offset = header.last_offset();
        assert!(base_offset >= st.next_offset, "batches only go forward");
        st.active_tail
            .push(parts, config.write_ahead_bytes as usize);
        let active = st.segments.last_mut().expect("active segment");
        assert_eq!(active.base_offset, st.active_tail.segment_base);
        let entry = BatchEntry {
            base_offset,
            last_offset,
            position: active.size,
            size: header.size() as u32,
            max_timestamp: header.max_timestamp,
        };
        active.on_batch(&entry, config.index_interval_bytes);
        assert_eq!(st.active_tail.end(), active.size);
        let (segment_base, position) = (active.base_offset, active.size);
        st.next_offset = last_offset + 1;
        st.appended_bytes += u64::from(entry.size);
        if st.replicated {
            let end = BatchEnd {
                end_offset: st.next_offset,
                segment_base,
                position,
                appended_bytes: st.appended_bytes,
            };
            replica::push_end(&mut st.pending_ends, end);
        }
        if header.has_producer_id() {
            // Only a control batch's record is read: it is one small record, copied whole.
            let kind = if header.is_control() {
                crate::txn::batch_kind(header, &parts.concat())
            } else {
                BatchKind::Data {
                    transactional: header.is_transactional(),
                }
            };
            let hw = st.high_watermark;
            st.producers.on_high_watermark(hw);
            if let Some(aborted) = st.producers.apply(header, kind) {
                let active = st.segments.last_mut().expect("active segment");
                active.aborted.push(aborted);
            }
        }
    }

    /// After appends: wakes replica fetches, and writes a full append buffer ahead of the commit.
    pub(super) fn after_append(self: &Rc<Self>) {
        self.appended.notify(usize::MAX);
        let full_chunk = self.state.borrow().active_tail.has_full_chunk();
        if full_chunk && !self.write_ahead.replace(true) {
            // A full append buffer goes to disk at once, overlapping the appends still coming;
            // the next commit then writes only the rest before its fdatasync.
            let part = self.clone();
            glommio::spawn_local(async move {
                // Until no full buffer is left unwritten (buffers fill while a flush runs), or
                // until a commit waits for the flush slot: its flush writes them all, and under
                // a steady flood of appends write-aheads back to back would hold it off for as
                // long as the flood lasts.
                loop {
                    let listener = part.flushed.listen();
                    if part.flushing.get() {
                        listener.await;
                        continue;
                    }
                    if !part.write_ahead_due() {
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
    }

    /// Whether the write-ahead writes another full buffer now: not while a commit waits for
    /// the flush slot (see [`Partition::after_append`]).
    pub(super) fn write_ahead_due(&self) -> bool {
        !self.is_offline()
            && self.flush_waiters.get() == 0
            && self.state.borrow().active_tail.has_full_chunk()
    }

    pub(super) fn check_sequence(
        &self,
        header: &BatchHeader,
    ) -> Result<Option<AppendOutcome>, PartitionError> {
        // A control batch carries no sequence: its checks are `append_marker`'s.
        if !header.has_producer_id() || header.is_control() {
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

    pub(super) async fn roll(&self) -> Result<(), PartitionError> {
        let base = self.state.borrow().next_offset;
        self.roll_at(base).await
    }

    /// Rolls to a new segment whose base offset is `base`: the log end, or for a follower the
    /// base offset of the next batch, which may be past it in a compacted log.
    pub(super) async fn roll_at(&self, base: i64) -> Result<(), PartitionError> {
        assert!(base >= self.state.borrow().next_offset);
        let path = segment_path(&self.dir, base);
        let durability = self.config.get().active_durability();
        let file = Rc::new(
            SegmentFile::open_with(&path, true, durability)
                .await
                .map_err(|e| storage_err(&self.dir, e))?,
        );
        io::sync_dir(&self.dir)
            .await
            .map_err(|e| storage_err(&self.dir, e))?;
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
}
