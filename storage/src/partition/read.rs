//! Reading a partition: fetches through the sparse index with read-ahead for sequential
//! readers and the tail kept in memory, and timestamp lookups through the time index. Reads
//! never move the log; an I/O error takes the partition offline, damage is reported as corrupt.

use super::*;

impl Partition {
    /// Reads whole batches from the one containing `offset`, up to `max_bytes` (at least one
    /// batch), never past the high watermark. The sparse index gives a position at most about
    /// `index.interval.bytes` before the batch; the scan from there checks every batch it passes
    /// (length, CRC32C, offsets), so a batch damaged on disk after it was written is never
    /// served: a read gets the batches before it, or CORRUPT_MESSAGE if it starts there.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, PartitionError> {
        self.read_batches(offset, max_bytes, true, false, i64::MAX)
            .await
    }

    /// A follower's fetch: [`Partition::read`] up to the log end offset instead of the high
    /// watermark, including batches appended but not yet written or synced (served from the
    /// tail buffers). An offset past the log end is out of range. Replica reads neither use nor
    /// start a read-ahead.
    pub async fn read_replica(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        self.read_batches(offset, max_bytes, true, true, i64::MAX)
            .await
    }

    /// [`Partition::read`] under a hard limit: when the first batch is larger than `max_bytes`
    /// nothing is returned, and no more than about `max_bytes` is read for it. A Fetch response
    /// lets only its first non-empty partition exceed the response's byte budget (KIP-74).
    pub async fn read_within(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        self.read_batches(offset, max_bytes, false, false, i64::MAX)
            .await
    }

    /// [`Partition::read`] (`first_whole`) or [`Partition::read_within`] returning only the
    /// batches that start below `upto` (a READ_COMMITTED read stops at the last stable offset,
    /// which is always a batch boundary).
    pub(super) async fn read_below(
        &self,
        offset: i64,
        max_bytes: usize,
        first_whole: bool,
        upto: i64,
    ) -> Result<ReadOutcome, PartitionError> {
        self.read_batches(offset, max_bytes, first_whole, false, upto)
            .await
    }

    async fn read_batches(
        &self,
        offset: i64,
        max_bytes: usize,
        first_whole: bool,
        replica: bool,
        upto: i64,
    ) -> Result<ReadOutcome, PartitionError> {
        self.check_online()?;
        let config = self.config.get();
        let (slack, gaps) = (config.index_interval_bytes, config.compact);
        let mut after = i64::MIN;
        loop {
            let (hw, log_start, plan) = {
                let st = self.state.borrow();
                let hw = st.high_watermark;
                let log_start = st.log_start_offset;
                let (bound, end) = if replica {
                    let active = st.segments.last().expect("active segment");
                    (st.next_offset, (active.base_offset, active.size))
                } else {
                    (hw, st.visible_end)
                };
                if offset < log_start || offset > bound {
                    return Err(PartitionError::OffsetOutOfRange {
                        offset,
                        log_start_offset: log_start,
                        high_watermark: hw,
                    });
                }
                (hw, log_start, plan_read(&st, end, offset, after))
            };
            let empty = ReadOutcome {
                records: Bytes::new(),
                high_watermark: hw,
                log_start_offset: log_start,
            };
            let Some(mut plan) = plan else {
                return Ok(empty);
            };
            // A reader continuing where its last read ended starts at the chunk read ahead for
            // it, not at the index entry before it.
            if let Some(p) = self.prefetch.borrow().as_ref().filter(|_| !replica) {
                if Rc::ptr_eq(&p.file, &plan.file)
                    && p.next_offset == offset
                    && (plan.position..plan.limit).contains(&p.position)
                {
                    plan.position = p.position;
                    plan.expect = offset;
                }
            }
            match self
                .read_in_segment(
                    &plan,
                    offset,
                    max_bytes,
                    (slack, gaps, upto),
                    first_whole,
                    replica,
                )
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
        (slack, gaps, upto): (u64, bool, i64),
        first_whole: bool,
        replica: bool,
    ) -> Result<Option<Bytes>, PartitionError> {
        let (limit, mut position, mut expect) = (plan.limit, plan.position, plan.expect);
        let mut len = (max_bytes as u64 + slack).min(limit - position);
        loop {
            let data = if replica {
                self.read_chunk_replica(&plan.file, position, len as usize)
                    .await?
            } else {
                self.read_chunk(&plan.file, position, len as usize).await?
            };
            let scan = scan_chunk_with(&data, position, expect, gaps);
            let first = scan
                .batches
                .iter()
                .position(|(e, _)| e.last_offset >= offset);
            if let Some(first) = first {
                let wanted = &scan.batches[first..];
                if wanted[0].0.base_offset >= upto
                    || (!first_whole && wanted[0].0.size as usize > max_bytes)
                {
                    return Ok(Some(Bytes::new()));
                }
                let from = (wanted[0].0.position - position) as usize;
                let mut to = from + wanted[0].0.size as usize;
                for (e, _) in &wanted[1..] {
                    if e.base_offset >= upto || to - from + e.size as usize > max_bytes {
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
                if end < limit && !replica {
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
                    // A batch larger than the limit: under a hard limit it is not read at all
                    // (it may precede the wanted one, which is then not served this time either).
                    if !first_whole && needed > max_bytes {
                        return Ok(Some(Bytes::new()));
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
        self.disk_chunk_reads.set(self.disk_chunk_reads.get() + 1);
        Ok(ChunkBytes::Disk(
            self.read_exact(file, position, len).await?,
        ))
    }

    /// `len` bytes at `position` for a replica read, which may reach past what is written: bytes
    /// not yet written are copied from the tail (active or sealed) of that file, the rest read
    /// from the disk.
    async fn read_chunk_replica(
        &self,
        file: &Rc<SegmentFile>,
        position: u64,
        len: usize,
    ) -> Result<ChunkBytes, PartitionError> {
        let (disk_len, memory) = {
            let st = self.state.borrow();
            let tail = std::iter::once(&st.active_tail)
                .chain(st.sealed_tails.iter())
                .find(|t| Rc::ptr_eq(&t.file, file));
            match tail {
                Some(t) if t.holds(file, position, len) => {
                    self.tail_cache_hits.set(self.tail_cache_hits.get() + 1);
                    return Ok(ChunkBytes::Memory(t.copy(position, len)));
                }
                Some(t) if position + len as u64 > t.written_end => {
                    // Everything before the tail's memory is written (a chunk is let go only
                    // once written), so the disk holds `[position, start)`.
                    let start = t.start();
                    if start > t.written_end || position + len as u64 > t.end() {
                        return Err(self.go_offline(format!(
                            "a replica read at position {position} of {len} bytes is outside the log"
                        )));
                    }
                    let at = start.max(position);
                    let memory = t.copy(at, (position + len as u64 - at) as usize);
                    ((at - position) as usize, Some(memory))
                }
                _ => (len, None),
            }
        };
        let Some(memory) = memory else {
            self.disk_chunk_reads.set(self.disk_chunk_reads.get() + 1);
            return Ok(ChunkBytes::Disk(
                self.read_exact(file, position, len).await?,
            ));
        };
        let mut out = Vec::with_capacity(len);
        if disk_len > 0 {
            self.disk_chunk_reads.set(self.disk_chunk_reads.get() + 1);
            out.extend_from_slice(&self.read_exact(file, position, disk_len).await?);
        }
        out.extend_from_slice(&memory);
        Ok(ChunkBytes::Memory(out))
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
            Ok(_) if !self.log_holds(file, position + len as u64) => {
                // The log was truncated under this read: the data asked for is gone, not damaged.
                let st = self.state.borrow();
                Err(PartitionError::OffsetOutOfRange {
                    offset: st.next_offset,
                    log_start_offset: st.log_start_offset,
                    high_watermark: st.high_watermark,
                })
            }
            Ok(d) => Err(self.go_offline(format!(
                "short read at position {position}: {} of {len} bytes",
                d.len()
            ))),
            Err(e) => Err(self.go_offline(e)),
        }
    }

    /// Whether a segment of the log still has `file` at least `end` bytes long.
    fn log_holds(&self, file: &SegmentFile, end: u64) -> bool {
        let st = self.state.borrow();
        st.segments
            .iter()
            .any(|s| s.file.path() == file.path() && s.size >= end)
    }

    /// The largest record timestamp of the segments holding data at or after the log start
    /// (ListOffsets MAX_TIMESTAMP looks up the first record that has it); `None` for an empty log.
    pub fn max_timestamp(&self) -> Option<i64> {
        let st = self.state.borrow();
        st.segments
            .iter()
            .filter(|s| s.next_offset > st.log_start_offset && s.next_offset > s.base_offset)
            .map(|s| s.max_timestamp)
            .max()
    }

    /// The first offset whose record has a timestamp at or after `timestamp`, with that
    /// timestamp; `None` if no record below the high watermark qualifies. The first segment whose
    /// newest timestamp reaches `timestamp` is searched through its time index; a compressed
    /// batch is decompressed (up to `cleaner_batch_inflated_max_bytes`) to find the record, and
    /// one that cannot be answers with its first offset and max timestamp. An empty batch (one
    /// the cleaner kept for its producer's state) has no record to answer with and is passed.
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, PartitionError> {
        self.check_online()?;
        let mut after = i64::MIN;
        loop {
            let (log_start, plan) = {
                let st = self.state.borrow();
                let log_start = st.log_start_offset;
                let seg = st.segments.iter().find(|s| {
                    s.base_offset > after
                        && s.next_offset > log_start
                        && s.max_timestamp >= timestamp
                });
                let Some(seg) = seg else {
                    return Ok(None);
                };
                after = seg.base_offset;
                let from = seg.base_offset + i64::from(seg.index.lookup_time(timestamp));
                (log_start, plan_segment(&st, seg, from.max(log_start)))
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
                let hits = chunk
                    .batches
                    .iter()
                    .filter(|e| e.last_offset >= log_start && e.max_timestamp >= timestamp);
                for e in hits {
                    let bytes = chunk.bytes_of(e);
                    if record_batch::parse_header(bytes, 0).is_ok_and(|h| h.records_count == 0) {
                        // Kept empty by the cleaner for its producer: no record to answer
                        // with, as Kafka's timestamp search finds none in it.
                        continue;
                    }
                    // Kafka answers with the first record, not the first batch, at the timestamp.
                    let inflated_max = self.config.get().cleaner_batch_inflated_max_bytes;
                    let inflated_max = usize::try_from(inflated_max).unwrap_or(usize::MAX);
                    let record = first_record_at(bytes, timestamp, log_start, inflated_max);
                    return Ok(Some(
                        record.unwrap_or((e.base_offset.max(log_start), e.max_timestamp)),
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
fn plan_read(st: &LogState, end: (i64, u64), offset: i64, after: i64) -> Option<ReadPlan> {
    let from = st
        .segments
        .partition_point(|s| s.base_offset <= offset)
        .saturating_sub(1);
    let seg = st.segments[from..]
        .iter()
        .find(|s| s.base_offset > after && s.next_offset > offset)?;
    plan_segment_to(st, end, seg, offset)
}

fn plan_segment(st: &LogState, seg: &Segment, offset: i64) -> Option<ReadPlan> {
    plan_segment_to(st, st.visible_end, seg, offset)
}

/// [`plan_segment`] reading up to `end` (`(segment base, position)`): the visible end, or the
/// log end for a replica.
fn plan_segment_to(st: &LogState, end: (i64, u64), seg: &Segment, offset: i64) -> Option<ReadPlan> {
    let (visible_base, visible_pos) = end;
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
        return plan_segment_to(st, end, next, offset);
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
