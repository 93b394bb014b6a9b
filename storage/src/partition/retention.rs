//! Deleting from the front of a partition: `retention.ms` / `retention.bytes` and DeleteRecords.
//! The log start offset is checkpointed before any segment file is removed.

use super::*;

impl Partition {
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
        let (removed, lso, epochs_moved) = {
            let mut st = self.state.borrow_mut();
            let removed: Vec<Segment> = st.segments.drain(..count).collect();
            let first = st
                .segments
                .first()
                .expect("the active segment stays")
                .base_offset;
            st.sealed_tails.retain(|t| t.segment_base >= first);
            st.log_start_offset = st.log_start_offset.max(new_start).max(first);
            let lso = st.log_start_offset;
            let epochs_moved = st.epochs.truncate_from_start(lso);
            (removed, lso, epochs_moved)
        };
        if let Err(e) = log_start::write(&self.dir, lso).await {
            return Err(self.go_offline(format!("writing the log start checkpoint: {e}")));
        }
        for seg in &removed {
            // By name, not by the file's own path: a cleaned segment was written under another
            // name and renamed into place.
            let path = segment_path(&self.dir, seg.base_offset);
            let mut gone = io::remove_file(&path).await;
            if gone.is_ok() {
                gone = remove_index(&self.dir, seg.base_offset).await;
            }
            if let Err(e) = gone {
                return Err(self.go_offline(format!("removing {}: {e}", path.display())));
            }
        }
        if !removed.is_empty() {
            io::sync_dir(&self.dir)
                .await
                .map_err(|e| self.go_offline(e))?;
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
        // The epochs below the log start are gone; a stale file is corrected on open.
        if epochs_moved {
            self.persist_epochs(false).await?;
        }
        self.advanced.notify(usize::MAX);
        Ok(())
    }
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
pub(super) fn segments_below(segments: &[Segment], offset: i64) -> usize {
    segments
        .windows(2)
        .take_while(|w| w[1].base_offset <= offset)
        .count()
}
