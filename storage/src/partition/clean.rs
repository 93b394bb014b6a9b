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
        // (base offset, file, size, offset after its last) of each closed, durable segment
        // wholly below the last stable offset: an undecided transaction is never cleaned, as
        // Kafka's cleaner stops at the first unstable offset.
        let last_stable = self.last_stable_offset();
        let (mut targets, aborted, active): (Vec<CleanTarget>, _, _) = {
            let st = self.state.borrow();
            let aborted = cleaner::AbortedRanges::new(st.segments.iter().flat_map(|s| &s.aborted));
            let active = cleaner::ActiveProducers::new(st.producers.last_records());
            let targets = st
                .segments
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
                .collect();
            (targets, aborted, active)
        };
        if targets.is_empty() {
            return Ok(None);
        }
        let io = |e: std::io::Error| storage_err(&self.dir, e);
        let io_batch = |e: record_batch::BatchError| storage_err(&self.dir, e);
        // Pass 1: the latest offset of every key, over as many whole segments as the map holds,
        // noting which segments hold a superseded record, an expired tombstone, aborted data or
        // a marker to act on: only those are rewritten. Markers are decided here, where the
        // whole log before them is read, and acted on in pass 2 (`markers`, by offset).
        let horizon = now_ms.saturating_sub(config.delete_retention_ms);
        let mut map = KeyMap::with_budget(config.cleaner_buffer_bytes);
        let max_inflated = config.cleaner_batch_inflated_max_bytes as usize;
        let mut scratch = Vec::new();
        let mut garbage = vec![false; targets.len()];
        let mut txns = cleaner::TxnTracker::default();
        // (offset, action) of each marker to stamp or remove, in offset order.
        let mut markers: Vec<(i64, cleaner::MarkerAction)> = Vec::new();
        let mut covered = 0;
        'segments: for (i, (base, file, size, _)) in targets.iter().enumerate() {
            let mut reader = SegmentReader::new(file.clone(), *base, *size, true);
            while let Some(chunk) = reader.next().await.map_err(io)? {
                for e in &chunk.batches {
                    let batch = chunk.bytes_of(e);
                    let header = record_batch::parse_header(batch, 0).map_err(io_batch)?;
                    if header.is_control() {
                        if let BatchKind::Marker(_) = batch_kind(&header, batch) {
                            let action = cleaner::marker_action(
                                txns.on_marker(header.producer_id),
                                active.protects(&header),
                                header.delete_horizon_ms(),
                                now_ms,
                                config.delete_retention_ms,
                            );
                            if action != cleaner::MarkerAction::Keep {
                                markers.push((e.base_offset, action));
                                garbage[i] = true;
                            }
                        }
                        continue;
                    }
                    txns.on_data(&header);
                    let last_of_producer = active.holds_last_data(&header);
                    let empty = header.records_count == 0;
                    if aborted.contains(&header) {
                        // Its records go, and the batch unless it is already the empty one its
                        // producer's state keeps.
                        garbage[i] |= !(last_of_producer && empty);
                        continue;
                    }
                    if empty {
                        // Kept for a producer by an earlier pass: goes once that is forgotten.
                        garbage[i] |= !last_of_producer;
                        continue;
                    }
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
            // Offsets of the markers removed (the aborted-index entries of ABORT ones go too),
            // and whether one was stamped.
            let mut gone_markers: Vec<i64> = Vec::new();
            let mut stamped = false;
            // Batches kept empty for their producer, and empty ones removed.
            let (mut emptied, mut empties_removed) = (0u64, 0u64);
            for (seg_base, file, size, _) in members {
                let mut reader = SegmentReader::new(file.clone(), *seg_base, *size, true);
                while let Some(chunk) = reader.next().await.map_err(io)? {
                    for e in &chunk.batches {
                        let batch = chunk.bytes_of(e);
                        let header = record_batch::parse_header(batch, 0).map_err(io_batch)?;
                        if header.is_control() {
                            let action = markers
                                .binary_search_by_key(&e.base_offset, |m| m.0)
                                .map_or(cleaner::MarkerAction::Keep, |at| markers[at].1);
                            match action {
                                cleaner::MarkerAction::Keep => {
                                    out.push(batch, e).await.map_err(io)?
                                }
                                cleaner::MarkerAction::Remove => {
                                    removed += header.records_count.max(0) as u64;
                                    gone_markers.push(e.base_offset);
                                }
                                cleaner::MarkerAction::SetHorizon(horizon) => {
                                    match record_batch::set_delete_horizon(batch, horizon) {
                                        Ok(b) => {
                                            out.push(&b, e).await.map_err(io)?;
                                            stamped = true;
                                        }
                                        Err(error) => {
                                            // Pass 1 read its marker, so this is not expected;
                                            // kept as it is, it is judged again next pass.
                                            warn!(dir = %self.dir.display(), offset = e.base_offset, %error, "a transaction marker cannot be stamped with its delete horizon; it is kept as it is");
                                            out.push(batch, e).await.map_err(io)?;
                                        }
                                    }
                                }
                            }
                            continue;
                        }
                        let (retained, dropped) = if aborted.contains(&header) {
                            (cleaner::Retained::None, header.records_count.max(0) as u64)
                        } else {
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
                            // Unreadable batches were reported by the first pass; kept whole.
                            cleaner::retain(batch, max_inflated, keep)
                                .unwrap_or((cleaner::Retained::All, 0))
                        };
                        removed += dropped;
                        let last_of_producer = active.holds_last_data(&header);
                        match cleaner::keep_producer_state(batch, retained, last_of_producer) {
                            cleaner::Retained::All => out.push(batch, e).await.map_err(io)?,
                            cleaner::Retained::None => {
                                if header.records_count == 0 {
                                    empties_removed += 1;
                                }
                            }
                            cleaner::Retained::Some(b) => out.push(&b, e).await.map_err(io)?,
                            cleaner::Retained::Empty(b) => {
                                emptied += 1;
                                out.push(&b, e).await.map_err(io)?;
                            }
                        }
                    }
                    glommio::yield_if_needed().await;
                }
            }
            if removed == 0 && empties_removed == 0 && !stamped && members.len() == 1 {
                drop(out);
                crate::io::remove_file(&tmp).await.map_err(io)?;
                stats.bytes_after += sizes;
                continue;
            }
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
        if let Err(e) = log_start::write_named(&self.dir, log_start::CLEANER_FILE, through).await {
            warn!(dir = %self.dir.display(), error = %e, "writing the cleaner checkpoint failed; the next start cleans the whole log again");
        }
        info!(dir = %self.dir.display(), ?stats, "cleaned");
        Ok(Some(stats))
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
