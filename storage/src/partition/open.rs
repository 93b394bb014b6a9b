//! Opening a partition: finishing what a crash interrupted, recovering every segment from its
//! index file or by scanning it, and deciding where the recovered log starts and ends, where its
//! producer state comes from, and where the high watermark starts.
//!
//! Recovery never drops an acknowledged batch: only the active segment can hold a torn write and
//! is cut back to its valid prefix; a closed segment that stops early keeps what precedes the
//! damage, and the offsets after it are skipped rather than dropping later segments.

use super::*;
use crate::index::IndexFile;

/// A segment file as an open finds it: its base offset, the open file, and its index file when
/// that is trusted to describe the file.
struct FoundSegment {
    base: i64,
    file: Rc<SegmentFile>,
    index: Option<IndexFile>,
}

/// What recovering the segment files left: the segments in offset order and the log end.
struct RecoveredSegments {
    segments: Vec<Segment>,
    next_offset: i64,
    /// Segments read batch by batch because no trusted index file described them.
    scanned: usize,
}

/// The log as recovery leaves it, before anything runtime (tails, epochs, the high watermark)
/// is built on it.
struct RecoveredLog {
    segments: Vec<Segment>,
    next_offset: i64,
    log_start_offset: i64,
    cleaned_through: i64,
    producers: ProducerStateTable,
    stats: OpenStats,
}

/// Where a segment's base offset stands against the end of the log recovered before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// It starts where the log so far ends, or it is the first segment.
    Follows,
    /// It starts before the log so far ends: a leftover that overlaps the segment before it.
    Overlaps,
    /// It starts after the log so far ends: the offsets in between are missing.
    AfterGap,
}

impl Partition {
    pub(super) async fn open_with(
        dir: PathBuf,
        config: LogConfig,
        replicated: bool,
    ) -> Result<Rc<Self>, PartitionError> {
        let RecoveredLog {
            segments,
            next_offset,
            log_start_offset,
            cleaned_through,
            mut producers,
            stats,
        } = recover_log(&dir, &config).await?;
        let active = segments.last().expect("at least one segment");
        let active_tail = truncate::tail_of(active)
            .await
            .map_err(|e| storage_err(&dir, e))?;
        let epochs = replica::load_epochs(
            &dir,
            &segments,
            log_start_offset,
            next_offset,
            config.compact,
        )
        .await
        .map_err(|e| storage_err(&dir, e))?;
        let ReplicaOpen {
            high_watermark,
            visible_end,
            pending_ends,
            pending_bytes,
        } = starting_high_watermark(
            &dir,
            &segments,
            log_start_offset,
            next_offset,
            &config,
            replicated,
        )
        .await?;
        // Both ways of starting the high watermark bound it by the two ends of the log.
        debug_assert!(
            log_start_offset <= high_watermark && high_watermark <= next_offset,
            "high watermark {high_watermark} outside [{log_start_offset}, {next_offset}]"
        );
        producers.on_high_watermark(high_watermark);
        // One line per partition only when it recovered records after an unclean stop: a
        // clean or empty open is the shard's summary line's business.
        if !stats.clean && next_offset > 0 {
            info!(dir = %dir.display(), segments = segments.len(), scanned = stats.scanned, log_start_offset, next_offset, "partition recovered");
        } else {
            tracing::debug!(dir = %dir.display(), segments = segments.len(), scanned = stats.scanned, clean = stats.clean, log_start_offset, next_offset, "partition opened");
        }
        let state = LogState {
            segments,
            next_offset,
            high_watermark,
            durable_offset: next_offset,
            visible_end,
            log_start_offset,
            appended_bytes: pending_bytes,
            visible_bytes: 0,
            active_tail,
            sealed_tails: Vec::new(),
            producers,
            failed: None,
            epochs,
            leader_epoch: 0,
            replicated,
            pending_ends,
            hw_checkpointed: high_watermark,
        };
        Ok(Rc::new(Self::from_recovered(
            dir,
            config,
            state,
            cleaned_through,
            stats,
        )))
    }

    /// A partition over a recovered log with nothing in flight: no flush, no waiter, no
    /// read-ahead, and both locks free.
    fn from_recovered(
        dir: PathBuf,
        config: LogConfig,
        state: LogState,
        cleaned_through: i64,
        opened: OpenStats,
    ) -> Self {
        Self {
            dir,
            config: Cell::new(config),
            state: RefCell::new(state),
            append_lock: FairLock::new(),
            maintenance: Semaphore::new(1),
            cleaned_through: Cell::new(cleaned_through),
            remote_copied_end: Cell::new(0),
            flushing: Cell::new(false),
            last_flush_small: Cell::new(false),
            flushed: Event::new(),
            advanced: Event::new(),
            appended: Event::new(),
            sync_timer_armed: Cell::new(false),
            write_ahead: Cell::new(false),
            flush_waiters: Cell::new(0),
            prefetch: RefCell::new(None),
            read_ahead_hits: Cell::new(0),
            tail_cache_hits: Cell::new(0),
            disk_chunk_reads: Cell::new(0),
            opened,
        }
    }
}

/// Recovers the log in `dir`: its segments, where it starts and ends, where the last cleaning
/// pass ended, and its producer state. Closed segments come back from their index files; the
/// active one is scanned unless the last shutdown was clean. Producer state starts from the
/// snapshot in the last trusted index file and replays only the segments scanned after it.
async fn recover_log(dir: &Path, config: &LogConfig) -> Result<RecoveredLog, PartitionError> {
    let clean_marker = dir.join(CLEAN_SHUTDOWN_FILE);
    let (bases, clean) = list_or_create_segments(dir, &clean_marker).await?;
    let found = open_segment_files(dir, &bases, clean, config.active_durability()).await?;
    let snapshot_at = newest_usable_snapshot(&found);
    let mut producers = snapshot_at
        .and_then(|i| found[i].index.as_ref()?.producers.clone())
        .unwrap_or_default();
    producers.set_max_producers(config.producer_state_max_producers);
    let RecoveredSegments {
        mut segments,
        next_offset,
        scanned,
    } = recover_segments(dir, found, snapshot_at, &mut producers, config).await?;
    forget_active_index(dir, &segments, clean.then_some(clean_marker.as_path())).await?;
    // The checkpointed log start may be past the first segments: they were due for deletion
    // when the broker stopped.
    let checkpoint = log_start::read(dir)
        .await
        .map_err(|e| storage_err(dir, e))?;
    let log_start_offset = recovered_log_start(bases[0], checkpoint, next_offset);
    debug_assert!(
        log_start_offset <= next_offset,
        "the log start {log_start_offset} is past the log end {next_offset}"
    );
    // Where the last cleaning pass ended; only when to clean depends on it.
    let cleaned_through = log_start::read_named(dir, log_start::CLEANER_FILE)
        .await
        .map_err(|e| storage_err(dir, e))?
        .map_or(log_start_offset, |c| c.clamp(log_start_offset, next_offset));
    remove_segments_below(dir, &mut segments, log_start_offset).await?;
    // Producers idle past the expiration are dropped now, by the same rule the shard's periodic
    // pass applies, so one that expired before the restart stays gone even when the snapshot or
    // the replayed segments still hold it.
    let expired = producers.remove_expired(wall_clock_ms(), config.producer_id_expiration_ms);
    if expired > 0 {
        info!(dir = %dir.display(), expired, "expired idle producers on open");
    }
    let stats = OpenStats {
        segments: segments.len(),
        scanned,
        clean,
    };
    Ok(RecoveredLog {
        segments,
        next_offset,
        log_start_offset,
        cleaned_through,
        producers,
        stats,
    })
}

/// Creates the directory if needed, finishes the merges a crash interrupted and removes what
/// interrupted writes left, then lists the segments' base offsets (creating the first segment
/// of a new partition) and says whether the last shutdown was clean.
async fn list_or_create_segments(
    dir: &Path,
    clean_marker: &Path,
) -> Result<(Vec<i64>, bool), PartitionError> {
    // Listing, and finishing what a crash interrupted, in one trip to the blocking thread.
    let (mut bases, clean) = {
        let (d, marker) = (dir.to_path_buf(), clean_marker.to_path_buf());
        io::blocking(move || {
            io::now::create_dir_all(&d)?;
            complete_swaps(&d)?;
            remove_leftovers(&d)?;
            Ok((list_segments(&d)?, marker.try_exists()?))
        })
        .await
        .map_err(|e| storage_err(dir, e))?
    };
    if bases.is_empty() {
        bases.push(0);
        SegmentFile::open(&segment_path(dir, 0), true)
            .await
            .map_err(|e| storage_err(dir, e))?
            .close()
            .await
            .map_err(|e| storage_err(dir, e))?;
        io::sync_dir(dir).await.map_err(|e| storage_err(dir, e))?;
    }
    debug_assert!(!bases.is_empty(), "a partition has at least one segment");
    Ok((bases, clean))
}

/// Opens every segment file and reads the index files that can be trusted: every closed
/// segment's, and the active segment's only after a clean shutdown, since its index file is
/// stale from its first append after that.
async fn open_segment_files(
    dir: &Path,
    bases: &[i64],
    clean: bool,
    active_durability: WriteDurability,
) -> Result<Vec<FoundSegment>, PartitionError> {
    let last = bases.len() - 1;
    let mut found = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        // Only the last segment is written to: the active one.
        let durability = match i == last {
            true => active_durability,
            false => WriteDurability::OnSync,
        };
        let file = SegmentFile::open_with(&segment_path(dir, base), false, durability)
            .await
            .map_err(|e| storage_err(dir, e))?;
        let size = file.file_size().await.map_err(|e| storage_err(dir, e))?;
        let index = if i < last || clean {
            read_index(dir, base, size).await
        } else {
            None
        };
        found.push(FoundSegment {
            base,
            file: Rc::new(file),
            index,
        });
    }
    Ok(found)
}

/// Which segment's producer snapshot recovery starts from: the newest before the first segment
/// without a trusted index. Every segment scanned is then replayed from a known producer state,
/// which the aborted transactions of its ABORT markers need (their first offsets). `None`: no
/// usable snapshot, so every segment is scanned and replayed.
fn newest_usable_snapshot(found: &[FoundSegment]) -> Option<usize> {
    let trusted = found
        .iter()
        .position(|f| f.index.is_none())
        .unwrap_or(found.len());
    found[..trusted]
        .iter()
        .rposition(|f| f.index.as_ref().is_some_and(|x| x.producers.is_some()))
}

/// Whether segment `i` is loaded from its index file rather than scanned: only segments up to
/// the snapshot recovery starts from, since every one after it must be scanned to replay its
/// producer batches.
fn loads_from_index(i: usize, snapshot_at: Option<usize>) -> bool {
    snapshot_at.is_some_and(|s| i <= s)
}

/// Where segment `i`, at `base_offset`, stands against the end of the log recovered before it.
fn placement(i: usize, base_offset: i64, next_offset: i64) -> Placement {
    if i > 0 && base_offset < next_offset {
        Placement::Overlaps
    } else if i > 0 && base_offset > next_offset {
        Placement::AfterGap
    } else {
        Placement::Follows
    }
}

/// The log start offset after recovery: the first segment's base offset, or the checkpointed
/// log start when that is past it, but never past the end of what recovery found.
fn recovered_log_start(first_base: i64, checkpoint: Option<i64>, next_offset: i64) -> i64 {
    checkpoint
        .map_or(first_base, |c| c.max(first_base))
        .min(next_offset)
}

/// Recovers each segment in offset order, deciding which survive: an overlapping leftover is
/// removed, an empty active segment after a gap is removed, and a torn active segment is cut
/// back to its valid prefix.
async fn recover_segments(
    dir: &Path,
    found: Vec<FoundSegment>,
    snapshot_at: Option<usize>,
    producers: &mut ProducerStateTable,
    config: &LogConfig,
) -> Result<RecoveredSegments, PartitionError> {
    let last = found.len() - 1;
    let mut segments: Vec<Segment> = Vec::with_capacity(found.len());
    let mut next_offset = found[0].base;
    let mut scanned = 0usize;
    for (i, FoundSegment { base, file, index }) in found.into_iter().enumerate() {
        let path = segment_path(dir, base);
        let placement = placement(i, base, next_offset);
        if placement == Placement::Overlaps {
            warn!(path = %path.display(), next_offset, "removing a segment that overlaps the one before it");
            drop(file);
            io::remove_file(&path)
                .await
                .map_err(|e| storage_err(dir, e))?;
            remove_index(dir, base)
                .await
                .map_err(|e| storage_err(dir, e))?;
            continue;
        }
        let from_index = loads_from_index(i, snapshot_at);
        // Every segment up to the snapshot has a trusted index (the snapshot is chosen before
        // the first one without), so none of them is scanned without replaying.
        debug_assert!(!from_index || index.is_some());
        let index = index.filter(|_| from_index);
        let scanning = index.is_none();
        if scanning {
            scanned += 1;
        }
        let this = FoundSegment { base, file, index };
        let (seg, torn) = load_segment(dir, this, i < last, !from_index, producers, config).await?;
        if placement == Placement::AfterGap {
            if i == last && seg.is_empty() {
                // Rolled to, but the end of the segment before it never reached the disk: drop
                // the empty segment so the log ends where its data does.
                warn!(path = %path.display(), next_offset, "removing an empty segment after a torn one");
                drop(seg);
                io::remove_file(&path)
                    .await
                    .map_err(|e| storage_err(dir, e))?;
                io::sync_dir(dir).await.map_err(|e| storage_err(dir, e))?;
                continue;
            }
            // Data after a short segment was written after it, so it was never acknowledged
            // unless the short segment was whole when synced and damaged later; either way
            // readers skip the missing offsets to the next batch.
            warn!(path = %path.display(), next_offset, "offsets before this segment are missing; they are skipped");
        }
        if torn && i == last {
            // Only the active segment can hold a torn write: it is cut back to its valid prefix
            // before anything is appended after it.
            cut_torn_tail(dir, &seg).await?;
        } else if scanning {
            // A segment without a trusted index was not synced since its last write, or not
            // known to be: a process that died left its writes in the device's cache, not yet
            // on the medium. They count as durable from here on, so they are made so, whatever
            // this process's handle does with its own writes (`WriteDurability`).
            seg.file
                .fdatasync()
                .await
                .map_err(|e| storage_err(dir, e))?;
        }
        next_offset = seg.next_offset;
        segments.push(seg);
    }
    Ok(RecoveredSegments {
        segments,
        next_offset,
        scanned,
    })
}

/// Builds one segment from its index file when it has one, or by scanning it, replaying its
/// producer batches into `producers` when `replay`. A rebuilt closed segment's index file is
/// saved so the next open need not scan it again. Returns the segment and whether the scan left
/// out anything after its valid prefix.
async fn load_segment(
    dir: &Path,
    found: FoundSegment,
    closed: bool,
    replay: bool,
    producers: &mut ProducerStateTable,
    config: &LogConfig,
) -> Result<(Segment, bool), PartitionError> {
    let FoundSegment { base, file, index } = found;
    if let Some(f) = index {
        return Ok((Segment::from_index(base, file, f), false));
    }
    let (seg, torn) = recover_segment(
        file,
        base,
        replay.then_some(&mut *producers),
        config.index_interval_bytes,
        config.compact,
    )
    .await
    .map_err(|e| storage_err(dir, e))?;
    if closed {
        let f = seg.index_file(replay.then_some(&*producers));
        if let Err(e) = write_index(dir, base, &f, false).await {
            warn!(path = %segment_path(dir, base).display(), error = %e, "writing a rebuilt index failed");
        }
    }
    Ok((seg, torn))
}

/// Trims a torn active segment's file to its valid prefix and makes the cut durable.
async fn cut_torn_tail(dir: &Path, seg: &Segment) -> Result<(), PartitionError> {
    seg.file
        .truncate(seg.size)
        .await
        .map_err(|e| storage_err(dir, e))?;
    seg.file.fdatasync().await.map_err(|e| storage_err(dir, e))
}

/// Removes the active segment's index file, and the clean-shutdown marker (`clean_marker`, when
/// there was one) that vouched for it: the index file is only true until the next append, so
/// both go before anything is appended.
async fn forget_active_index(
    dir: &Path,
    segments: &[Segment],
    clean_marker: Option<&Path>,
) -> Result<(), PartitionError> {
    let active_base = segments.last().expect("at least one segment").base_offset;
    remove_index(dir, active_base)
        .await
        .map_err(|e| storage_err(dir, e))?;
    // Not synced: should the removals be lost, the index's exact size check still refuses it
    // once anything has been appended (see `read_index`).
    if let Some(marker) = clean_marker {
        io::remove_file(marker)
            .await
            .map_err(|e| storage_err(dir, e))?;
    }
    Ok(())
}

/// Removes the segments wholly below the log start offset, which retention had decided to
/// delete before the broker stopped. The active segment never goes.
async fn remove_segments_below(
    dir: &Path,
    segments: &mut Vec<Segment>,
    log_start_offset: i64,
) -> Result<(), PartitionError> {
    let below = segments_below(segments, log_start_offset);
    for seg in segments.drain(..below) {
        warn!(path = %seg.file.path().display(), log_start_offset, "removing a segment below the log start offset");
        io::remove_file(seg.file.path())
            .await
            .map_err(|e| storage_err(dir, e))?;
        remove_index(dir, seg.base_offset)
            .await
            .map_err(|e| storage_err(dir, e))?;
    }
    if below > 0 {
        io::sync_dir(dir).await.map_err(|e| storage_err(dir, e))?;
    }
    debug_assert!(!segments.is_empty(), "the active segment is never below");
    Ok(())
}

/// The high watermark an open starts with: in replicated mode the checkpointed one (bounded by
/// the log), so nothing the followers may lack becomes visible; otherwise the log end, since
/// everything recovered was written by this broker alone.
async fn starting_high_watermark(
    dir: &Path,
    segments: &[Segment],
    log_start_offset: i64,
    next_offset: i64,
    config: &LogConfig,
    replicated: bool,
) -> Result<ReplicaOpen, PartitionError> {
    if !replicated {
        let active = segments.last().expect("at least one segment");
        return Ok(ReplicaOpen::at_end(
            active.base_offset,
            active.size,
            next_offset,
        ));
    }
    replica::open_high_watermark(dir, segments, log_start_offset, next_offset, config.compact)
        .await
        .map_err(|e| storage_err(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_start_is_the_first_base_or_a_later_checkpoint_but_never_past_the_end() {
        assert_eq!(recovered_log_start(10, None, 50), 10);
        assert_eq!(
            recovered_log_start(10, Some(5), 50),
            10,
            "never before the data"
        );
        assert_eq!(recovered_log_start(10, Some(30), 50), 30);
        assert_eq!(
            recovered_log_start(10, Some(80), 50),
            50,
            "never past the end"
        );
        assert_eq!(recovered_log_start(10, None, 0), 0);
    }

    #[test]
    fn a_segment_is_placed_against_the_end_of_the_log_before_it() {
        assert_eq!(
            placement(0, 7, 0),
            Placement::Follows,
            "the first one follows"
        );
        assert_eq!(placement(1, 10, 10), Placement::Follows);
        assert_eq!(placement(1, 9, 10), Placement::Overlaps);
        assert_eq!(placement(1, 11, 10), Placement::AfterGap);
    }

    #[test]
    fn only_segments_up_to_the_snapshot_load_from_their_index() {
        assert!(!loads_from_index(0, None));
        assert!(loads_from_index(0, Some(2)));
        assert!(loads_from_index(2, Some(2)));
        assert!(!loads_from_index(3, Some(2)));
    }
}
