//! Compaction of a partition: the cleaning pass that keeps the latest record per key, merges
//! neighbouring segments, and the recovery of a merge a crash interrupted. Only segments below
//! the last stable offset are cleaned. Aborted transactions' batches go; an end-transaction
//! marker goes as Kafka removes it (`cleaner::marker_action`): a pass that finds no data batch
//! of its transaction left stamps it with a delete horizon `delete.retention.ms` ahead (KIP-534),
//! and a pass at or after that horizon removes it — an ABORT marker with its aborted-index
//! entry, which no reader needs once nothing of the transaction is left. A producer's last
//! marker stays while the producer is remembered. Removal takes three passes after the data
//! goes (the data's, the stamping's, the removal's), as in Kafka; passes run when dirty data
//! calls for them, so a marker may outlive its horizon until the next one. The data batch
//! holding a remembered producer's last offset (the producer state table when the pass starts)
//! stays, as an empty batch if none of its records does (`cleaner::keep_producer_state`), so
//! its producer's epoch and last sequence survive in the log; it counts as data of its
//! transaction, whose marker then stays too, and it goes at the first pass after its producer is
//! forgotten or writes a later batch. It holds the maintenance lock, never the append lock, and
//! swaps a rewritten segment in by rename.

use super::*;
use crate::txn::{batch_kind, BatchKind};

impl Partition {
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
    /// key → latest offset map, then rewrite each segment that holds superseded records,
    /// expired tombstones, aborted data, or markers to stamp or remove, keeping every other
    /// record at its offset, and merge neighbours that fit in one segment together. Appends
    /// and reads go on meanwhile; the work is done in chunks with a yield between them. A rewritten segment
    /// replaces the old one by rename after it is synced; its old index file goes first, so a
    /// crash in between leaves a segment that is scanned on open, never a stale index.
    pub async fn clean(&self, now_ms: i64) -> Result<Option<CleanStats>, PartitionError> {
        let config = self.config.get();
        if !config.compact {
            return Ok(None);
        }
        let _maintenance = self.lock(&self.maintenance).await?;
        self.check_online()?;
        let last_stable = self.last_stable_offset();
        let (mut targets, rules) = {
            let st = self.state.borrow();
            let rules = PassRules {
                dir: &self.dir,
                aborted: cleaner::AbortedRanges::new(st.segments.iter().flat_map(|s| &s.aborted)),
                active: cleaner::ActiveProducers::new(st.producers.last_records()),
                now_ms,
                delete_retention_ms: config.delete_retention_ms,
                horizon: now_ms.saturating_sub(config.delete_retention_ms),
                max_inflated: config.cleaner_batch_inflated_max_bytes as usize,
                index_interval_bytes: config.index_interval_bytes,
            };
            (cleanable_segments(&st, last_stable), rules)
        };
        if targets.is_empty() {
            return Ok(None);
        }
        let plan = self.plan_cleaning(&targets, &rules, &config).await?;
        if plan.covered == 0 {
            warn!(dir = %self.dir.display(), keys = plan.map.len(), "one segment holds more keys than log.cleaner.dedupe.buffer.size allows; not cleaned");
            return Ok(None);
        }
        targets.truncate(plan.covered);
        // Pass 2: rewrite what has something to drop, merging neighbours that together fit in
        // one segment (as Kafka's cleaner groups them) so cleaned segments do not pile up.
        let mut stats = CleanStats {
            segments: targets.len(),
            ..CleanStats::default()
        };
        for group in merge_groups(&targets, config.segment_bytes) {
            let garbage = plan.garbage[group.start];
            self.clean_group(&targets[group], garbage, &plan, &rules, &mut stats)
                .await?;
        }
        debug_assert!(
            stats.rewritten <= stats.segments && stats.merged <= stats.rewritten,
            "{stats:?}"
        );
        let last_base = targets.last().expect("covered > 0").0;
        self.checkpoint_cleaned_through(last_base).await;
        info!(dir = %self.dir.display(), ?stats, "cleaned");
        Ok(Some(stats))
    }

    /// Pass 1: the latest offset of every key, over as many whole segments as the map holds,
    /// noting which segments hold a superseded record, an expired tombstone, aborted data or a
    /// marker to act on: only those are rewritten. Markers are decided here, where the whole
    /// log before them is read, and acted on in pass 2.
    async fn plan_cleaning(
        &self,
        targets: &[CleanTarget],
        rules: &PassRules<'_>,
        config: &LogConfig,
    ) -> Result<CleanPlan, PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let io_batch = |e: record_batch::BatchError| storage_err(&self.dir, e);
        let mut scan = KeyScan {
            bases: targets.iter().map(|t| t.0).collect(),
            map: KeyMap::with_budget(config.cleaner_buffer_bytes),
            garbage: vec![false; targets.len()],
            markers: Vec::new(),
            txns: cleaner::TxnTracker::default(),
            scratch: Vec::new(),
        };
        let mut covered = 0;
        'segments: for (i, (base, file, size, _)) in targets.iter().enumerate() {
            let mut reader = SegmentReader::new(file.clone(), *base, *size, true);
            while let Some(chunk) = reader.next().await.map_err(io)? {
                for e in &chunk.batches {
                    let batch = chunk.bytes_of(e);
                    let header = record_batch::parse_header(batch, 0).map_err(io_batch)?;
                    if header.is_control() {
                        scan.note_control(rules, i, e, &header, batch);
                        continue;
                    }
                    match scan.note_data(rules, i, e, &header, batch) {
                        DataNoted::Judged => {}
                        DataNoted::Unreadable(detail) => {
                            // Kept whole, its keys unknown.
                            warn!(dir = %self.dir.display(), offset = e.base_offset, %detail, "a batch's records cannot be read for cleaning; it is kept whole");
                        }
                        DataNoted::MapFull => break 'segments,
                    }
                }
                glommio::yield_if_needed().await;
            }
            covered += 1;
        }
        debug_assert!(covered <= targets.len());
        Ok(CleanPlan {
            map: scan.map,
            garbage: scan.garbage,
            markers: scan.markers,
            covered,
        })
    }

    /// Cleans one group of neighbouring segments into one: a lone segment with nothing to drop
    /// (`garbage` false) is left alone, and a copy that turns out to drop nothing is thrown
    /// away; otherwise the copy is swapped in for the group. Adds what it did to `stats`.
    async fn clean_group(
        &self,
        members: &[CleanTarget],
        garbage: bool,
        plan: &CleanPlan,
        rules: &PassRules<'_>,
        stats: &mut CleanStats,
    ) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let io_batch = |e: record_batch::BatchError| storage_err(&self.dir, e);
        let sizes: u64 = members.iter().map(|t| t.2).sum();
        stats.bytes_before += sizes;
        if members.len() == 1 && !garbage {
            stats.bytes_after += sizes;
            return Ok(());
        }
        let base = members[0].0;
        let tmp = segment_path(&self.dir, base).with_extension("cleaned");
        let out = SegmentWriter::create(&tmp, base, rules.index_interval_bytes)
            .await
            .map_err(io)?;
        let mut copy = Rewrite::new(out);
        for (seg_base, file, size, _) in members {
            let mut reader = SegmentReader::new(file.clone(), *seg_base, *size, true);
            while let Some(chunk) = reader.next().await.map_err(io)? {
                for e in &chunk.batches {
                    let batch = chunk.bytes_of(e);
                    let header = record_batch::parse_header(batch, 0).map_err(io_batch)?;
                    if header.is_control() {
                        let action = plan.marker_action(e.base_offset);
                        copy.marker(action, rules, e, &header, batch)
                            .await
                            .map_err(io)?;
                    } else {
                        let retained = data_retained(&plan.map, rules, e, &header, batch);
                        copy.data(retained, e, &header, batch).await.map_err(io)?;
                    }
                }
                glommio::yield_if_needed().await;
            }
        }
        if !copy.changed_anything() && members.len() == 1 {
            drop(copy);
            crate::io::remove_file(&tmp).await.map_err(io)?;
            stats.bytes_after += sizes;
            return Ok(());
        }
        let Rewrite {
            out,
            removed,
            gone_markers,
            emptied,
            empties_removed,
            ..
        } = copy;
        let mut cleaned = out.finish().await.map_err(io)?;
        stats.bytes_after += cleaned.size;
        if members.len() == 1 {
            self.replace_segment(base, sizes, &tmp, &mut cleaned, &gone_markers)
                .await?;
        } else {
            self.merge_segments(members, &tmp, cleaned, &gone_markers)
                .await?;
            stats.merged += members.len() - 1;
        }
        stats.rewritten += members.len();
        stats.records_removed += removed;
        stats.markers_removed += gone_markers.len() as u64;
        stats.batches_emptied += emptied;
        stats.empty_batches_removed += empties_removed;
        Ok(())
    }

    /// Records that cleaning reached the segment after the one at `last_base` (or the log end),
    /// in memory and in the cleaner checkpoint; only when the next pass runs depends on it.
    async fn checkpoint_cleaned_through(&self, last_base: i64) {
        let through = {
            let st = self.state.borrow();
            st.segments
                .iter()
                .find(|s| s.base_offset > last_base)
                .map_or(st.next_offset, |s| s.base_offset)
        };
        // The segment at `last_base` was closed, and the maintenance lock kept the log from
        // being truncated under the pass, so something lies past it.
        debug_assert!(
            through > last_base,
            "cleaned through {through} <= {last_base}"
        );
        self.cleaned_through.set(through);
        if let Err(e) = log_start::write_named(&self.dir, log_start::CLEANER_FILE, through).await {
            warn!(dir = %self.dir.display(), error = %e, "writing the cleaner checkpoint failed; the next start cleans the whole log again");
        }
    }

    /// Swaps a cleaned segment in for the one at `base` (whose size was `old_size`): the old
    /// index file goes, the new file is renamed over the old one, and the new index (keeping
    /// the old producer snapshot, which cleaning does not change, and the aborted-index
    /// entries but those of the markers at `gone_markers`, which were removed) is written.
    async fn replace_segment(
        &self,
        base: i64,
        old_size: u64,
        tmp: &Path,
        cleaned: &mut Segment,
        gone_markers: &[i64],
    ) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let producers = read_index(&self.dir, base, old_size)
            .await
            .and_then(|f| f.producers);
        remove_index(&self.dir, base).await.map_err(io)?;
        crate::io::rename(tmp, &segment_path(&self.dir, base))
            .await
            .map_err(io)?;
        crate::io::sync_dir(&self.dir).await.map_err(io)?;
        let index = {
            let mut st = self.state.borrow_mut();
            let Some(seg) = st.segments.iter_mut().find(|s| s.base_offset == base) else {
                return Ok(());
            };
            // The segment keeps its offset range and timestamps; only its bytes shrank.
            cleaned.next_offset = seg.next_offset;
            cleaned.first_timestamp = seg.first_timestamp;
            cleaned.max_timestamp = seg.max_timestamp;
            // The aborted transactions whose markers stay.
            cleaned.aborted = std::mem::take(&mut seg.aborted);
            cleaned
                .aborted
                .retain(|t| gone_markers.binary_search(&t.last_offset).is_err());
            let index = cleaned.index_file(producers.as_ref());
            std::mem::swap(seg, cleaned);
            index
        };
        if let Err(e) = write_index(&self.dir, base, &index, false).await {
            warn!(dir = %self.dir.display(), error = %e, "writing a cleaned segment's index failed; it will be rebuilt on open");
        }
        Ok(())
    }

    /// Swaps a cleaned copy of several neighbouring segments in for them. The copy is renamed to
    /// `<first>-<end>.swap` (and the directory synced) before any old file goes: from then on
    /// the swap is committed, and an open that finds the `.swap` finishes it (`finish_swap`).
    /// The merged segment keeps the members' aborted-index entries but those of the markers at
    /// `gone_markers`, which were removed.
    async fn merge_segments(
        &self,
        members: &[(i64, Rc<SegmentFile>, u64, i64)],
        tmp: &Path,
        mut merged: Segment,
        gone_markers: &[i64],
    ) -> Result<(), PartitionError> {
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let (first, last) = (&members[0], &members[members.len() - 1]);
        let (first_base, end) = (first.0, last.3);
        // The producer state at the end of the last member is the merged segment's.
        let producers = read_index(&self.dir, last.0, last.2)
            .await
            .and_then(|f| f.producers);
        crate::io::rename(tmp, &swap_path(&self.dir, first_base, end))
            .await
            .map_err(io)?;
        crate::io::sync_dir(&self.dir).await.map_err(io)?;
        let dir = self.dir.clone();
        crate::io::blocking(move || finish_swap(&dir, first_base, end))
            .await
            .map_err(io)?;
        let index = {
            let mut st = self.state.borrow_mut();
            let Some(i) = st.segments.iter().position(|s| s.base_offset == first_base) else {
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
            merged.aborted = st.segments[i..=j]
                .iter_mut()
                .flat_map(|s| std::mem::take(&mut s.aborted))
                .filter(|t| gone_markers.binary_search(&t.last_offset).is_err())
                .collect();
            let index = merged.index_file(producers.as_ref());
            st.segments.splice(i..=j, [merged]);
            index
        };
        if let Err(e) = write_index(&self.dir, first_base, &index, false).await {
            warn!(dir = %self.dir.display(), error = %e, "writing a merged segment's index failed; it will be rebuilt on open");
        }
        Ok(())
    }
}

/// What one cleaning pass judges batches by, fixed when it starts.
struct PassRules<'a> {
    dir: &'a Path,
    /// The aborted transactions of the whole log: their data batches go.
    aborted: cleaner::AbortedRanges,
    /// The producers remembered when the pass starts: each one's last batch and marker stay.
    active: cleaner::ActiveProducers,
    now_ms: i64,
    delete_retention_ms: i64,
    /// Tombstones in batches whose newest timestamp is before this go.
    horizon: i64,
    /// Largest records section decompressed to read a compressed batch's keys.
    max_inflated: usize,
    /// Bytes between sparse index entries in the segments written.
    index_interval_bytes: u64,
}

/// What pass 1 found, for pass 2 to act on.
struct CleanPlan {
    /// The latest offset of every key in the covered segments.
    map: KeyMap,
    /// Per target segment: whether it holds something to drop or a marker to act on.
    garbage: Vec<bool>,
    /// (offset, action) of each marker to stamp or remove, in offset order.
    markers: Vec<(i64, cleaner::MarkerAction)>,
    /// How many target segments, from the first, the key map covers: only those are cleaned.
    covered: usize,
}

impl CleanPlan {
    /// What pass 2 does with the marker at `offset`: what pass 1 decided, or keep it.
    fn marker_action(&self, offset: i64) -> cleaner::MarkerAction {
        self.markers
            .binary_search_by_key(&offset, |m| m.0)
            .map_or(cleaner::MarkerAction::Keep, |at| self.markers[at].1)
    }
}

/// Pass 1 while it reads the log: what it has learnt so far, and its working buffer.
struct KeyScan {
    /// The target segments' base offsets, to find which one holds a superseded record.
    bases: Vec<i64>,
    map: KeyMap,
    garbage: Vec<bool>,
    markers: Vec<(i64, cleaner::MarkerAction)>,
    txns: cleaner::TxnTracker,
    scratch: Vec<u8>,
}

/// What pass 1 made of a data batch.
enum DataNoted {
    Judged,
    /// Its records cannot be read (the detail says why): it is kept whole, its keys unknown.
    Unreadable(String),
    /// The key map is full: the pass covers only the segments before this one.
    MapFull,
}

impl KeyScan {
    /// Decides the fate of a control batch in target segment `i`: an end-transaction marker to
    /// stamp or remove is noted, and makes its segment one to rewrite.
    fn note_control(
        &mut self,
        rules: &PassRules<'_>,
        i: usize,
        e: &BatchEntry,
        header: &BatchHeader,
        batch: &[u8],
    ) {
        if let BatchKind::Marker(_) = batch_kind(header, batch) {
            let action = cleaner::marker_action(
                self.txns.on_marker(header.producer_id),
                rules.active.protects(header),
                header.delete_horizon_ms(),
                rules.now_ms,
                rules.delete_retention_ms,
            );
            if action != cleaner::MarkerAction::Keep {
                self.markers.push((e.base_offset, action));
                self.garbage[i] = true;
            }
        }
    }

    /// Notes a data batch in target segment `i`: its keys go into the map, and the segments
    /// holding records it supersedes, and its own when it holds aborted data, an expired
    /// tombstone or an empty batch no producer needs, become ones to rewrite.
    fn note_data(
        &mut self,
        rules: &PassRules<'_>,
        i: usize,
        e: &BatchEntry,
        header: &BatchHeader,
        batch: &[u8],
    ) -> DataNoted {
        self.txns.on_data(header);
        let last_of_producer = rules.active.holds_last_data(header);
        let empty = header.records_count == 0;
        if rules.aborted.contains(header) {
            // Its records go, and the batch unless it is already the empty one its producer's
            // state keeps.
            self.garbage[i] |= !(last_of_producer && empty);
            return DataNoted::Judged;
        }
        if empty {
            // Kept for a producer by an earlier pass: goes once that is forgotten.
            self.garbage[i] |= !last_of_producer;
            return DataNoted::Judged;
        }
        let records = match cleaner::batch_records(batch, &mut self.scratch, rules.max_inflated) {
            Ok(records) => records,
            Err(detail) => return DataNoted::Unreadable(detail),
        };
        for r in records {
            let Some(key) = r.key else { continue };
            let offset = e.base_offset + i64::from(r.offset_delta);
            let Ok(superseded) = self.map.insert(key, offset) else {
                return DataNoted::MapFull;
            };
            if let Some(old) = superseded {
                let holder = self.bases.partition_point(|b| *b <= old) - 1;
                self.garbage[holder] = true;
            }
            if r.value.is_none() && e.max_timestamp < rules.horizon {
                self.garbage[i] = true;
            }
        }
        DataNoted::Judged
    }
}

/// What stays of a data batch in pass 2, with how many of its records go: nothing of an
/// aborted transaction's batch, otherwise the records `cleaner::keep` keeps (a batch whose
/// records cannot be read is kept whole; pass 1 reported it), and in either case the empty
/// batch its producer's state needs.
fn data_retained(
    map: &KeyMap,
    rules: &PassRules<'_>,
    e: &BatchEntry,
    header: &BatchHeader,
    batch: &[u8],
) -> (cleaner::Retained, u64) {
    let (retained, dropped) = if rules.aborted.contains(header) {
        (cleaner::Retained::None, header.records_count.max(0) as u64)
    } else {
        let keep = |r: &record_batch::RecordView<'_>| {
            let offset = e.base_offset + i64::from(r.offset_delta);
            cleaner::keep(
                map,
                r.key,
                r.value.is_none(),
                offset,
                e.max_timestamp,
                rules.horizon,
            )
        };
        cleaner::retain(batch, rules.max_inflated, keep).unwrap_or((cleaner::Retained::All, 0))
    };
    let last_of_producer = rules.active.holds_last_data(header);
    (
        cleaner::keep_producer_state(batch, retained, last_of_producer),
        dropped,
    )
}

/// A cleaned copy being written in pass 2, and what it has left out so far.
struct Rewrite {
    out: SegmentWriter,
    /// Records removed, markers counted.
    removed: u64,
    /// Offsets of the markers removed (the aborted-index entries of ABORT ones go too).
    gone_markers: Vec<i64>,
    /// A marker was stamped with its delete horizon.
    stamped: bool,
    /// Batches kept empty for their producer, and empty ones removed.
    emptied: u64,
    empties_removed: u64,
}

impl Rewrite {
    fn new(out: SegmentWriter) -> Self {
        Self {
            out,
            removed: 0,
            gone_markers: Vec::new(),
            stamped: false,
            emptied: 0,
            empties_removed: 0,
        }
    }

    /// Whether the copy differs from the segment it was made of: a lone segment's copy that
    /// does not is thrown away.
    fn changed_anything(&self) -> bool {
        self.removed > 0 || self.empties_removed > 0 || self.stamped
    }

    /// Copies a control batch as pass 1 decided: kept, removed, or stamped with its delete
    /// horizon.
    async fn marker(
        &mut self,
        action: cleaner::MarkerAction,
        rules: &PassRules<'_>,
        e: &BatchEntry,
        header: &BatchHeader,
        batch: &[u8],
    ) -> std::io::Result<()> {
        match action {
            cleaner::MarkerAction::Keep => self.out.push(batch, e).await?,
            cleaner::MarkerAction::Remove => {
                self.removed += header.records_count.max(0) as u64;
                self.gone_markers.push(e.base_offset);
            }
            cleaner::MarkerAction::SetHorizon(horizon) => {
                match record_batch::set_delete_horizon(batch, horizon) {
                    Ok(b) => {
                        self.out.push(&b, e).await?;
                        self.stamped = true;
                    }
                    Err(error) => {
                        // Pass 1 read its marker, so this is not expected; kept as it is, it is
                        // judged again next pass.
                        warn!(dir = %rules.dir.display(), offset = e.base_offset, %error, "a transaction marker cannot be stamped with its delete horizon; it is kept as it is");
                        self.out.push(batch, e).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies what stays of a data batch (`retained`, with `dropped` records gone).
    async fn data(
        &mut self,
        (retained, dropped): (cleaner::Retained, u64),
        e: &BatchEntry,
        header: &BatchHeader,
        batch: &[u8],
    ) -> std::io::Result<()> {
        self.removed += dropped;
        match retained {
            cleaner::Retained::All => self.out.push(batch, e).await?,
            cleaner::Retained::None => {
                if header.records_count == 0 {
                    self.empties_removed += 1;
                }
            }
            cleaner::Retained::Some(b) => self.out.push(&b, e).await?,
            cleaner::Retained::Empty(b) => {
                self.emptied += 1;
                self.out.push(&b, e).await?;
            }
        }
        Ok(())
    }
}

/// The segments a pass may clean: each closed segment wholly below the durable offset, the
/// high watermark and the last stable offset. An undecided transaction is never cleaned, as
/// Kafka's cleaner stops at the first unstable offset.
fn cleanable_segments(st: &LogState, last_stable: i64) -> Vec<CleanTarget> {
    st.segments
        .windows(2)
        .take_while(|w| w[1].base_offset <= st.durable_offset.min(st.high_watermark))
        .take_while(|w| w[1].base_offset <= last_stable)
        .map(|w| {
            (
                w[0].base_offset,
                w[0].file.clone(),
                w[0].size,
                w[0].next_offset,
            )
        })
        .collect()
}

/// A segment the pass may clean: base offset, file, size, offset after its last batch.
type CleanTarget = (i64, Rc<SegmentFile>, u64, i64);

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
    // The groups are neighbours and cover every target, so each target is cleaned once.
    debug_assert_eq!(groups.last().map_or(0, |g| g.end), targets.len());
    groups
}

/// Where a committed merge of the segments from `base` up to offset `end` waits to be swapped in.
fn swap_path(dir: &Path, base: i64, end: i64) -> PathBuf {
    dir.join(format!("{base:020}-{end:020}.swap"))
}

/// Completes a committed merge: removes every segment (and index file) from `base` up to `end`
/// and renames the merged copy into `base`'s place. Safe to repeat after a crash part-way. Runs
/// on the blocking thread (`io::blocking`), as do the two functions below.
fn finish_swap(dir: &Path, base: i64, end: i64) -> std::io::Result<()> {
    crate::io::now::assert_off_shard();
    for b in list_segments(dir)? {
        if (base..end).contains(&b) {
            remove_index_now(dir, b)?;
            std::fs::remove_file(segment_path(dir, b))?;
        }
    }
    std::fs::rename(swap_path(dir, base, end), segment_path(dir, base))?;
    crate::io::now::sync_dir(dir)
}

/// Finishes merges a crash interrupted after they were committed (see `merge_segments`).
pub(super) fn complete_swaps(dir: &Path) -> std::io::Result<()> {
    for name in crate::io::now::read_dir_names(dir)? {
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

/// Removes what an interrupted cleaning pass or index write left behind: `*.cleaned` segment
/// copies and `*.tmp` files. The segments they were for are intact.
pub(super) fn remove_leftovers(dir: &Path) -> std::io::Result<()> {
    for name in crate::io::now::read_dir_names(dir)? {
        let path = dir.join(name);
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
