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
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let (due, all) = {
            let st = self.state.borrow();
            let due = retention_due(&st, self.config.get(), now_ms, self.remote_copied_end.get());
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
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let target = {
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
            target
        };
        self.advance_log_start(target).await?;
        Ok(self.log_start_offset())
    }

    /// A follower takes its leader's log start offset, which every fetch answer carries
    /// (KIP-107): what the leader deleted — DeleteRecords, retention — must not come back when
    /// this replica leads. Moves the log start up to `leader_log_start_offset` as DeleteRecords
    /// does, but never past this replica's own high watermark (what it knows the leader holds
    /// too; the next answer carries the rest), deleting the segments wholly below it. A smaller
    /// offset changes nothing. A partition whose maintenance lock is taken (a cleaning pass can
    /// hold it for long) is left for the next answer, which carries the leader's log start
    /// again: one partition must not stall a fetcher that fetches many. Returns the log start
    /// offset now.
    pub async fn follow_log_start(
        &self,
        leader_log_start_offset: i64,
    ) -> Result<i64, PartitionError> {
        if leader_log_start_offset <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        let Ok(_maintenance) = self.maintenance.try_acquire_permit(1) else {
            return Ok(self.log_start_offset());
        };
        let _guard = self.append_lock.lock().await;
        self.check_online()?;
        let target = leader_log_start_offset.min(self.high_watermark());
        self.advance_log_start(target).await?;
        Ok(self.log_start_offset())
    }

    /// Moves the log start offset up to `target` and deletes the segments wholly below it;
    /// nothing when it is not above the log start. The caller holds the maintenance and append
    /// locks and has checked `target` against the high watermark.
    async fn advance_log_start(&self, target: i64) -> Result<(), PartitionError> {
        let (start_offset, below, hw) = {
            let st = self.state.borrow();
            (
                st.log_start_offset,
                segments_below(&st.segments, target),
                st.high_watermark,
            )
        };
        assert!(
            target <= hw,
            "the log start never passes the high watermark"
        );
        if target > start_offset {
            self.remove_front_segments(below, target).await?;
        }
        Ok(())
    }

    /// Drops the first `count` segments and moves the log start offset to at least `new_start`
    /// and the first remaining segment's base. The new log start is checkpointed before any file
    /// is removed, so a crash in between deletes the rest on the next open.
    async fn remove_front_segments(
        &self,
        count: usize,
        new_start: i64,
    ) -> Result<(), PartitionError> {
        let (removed, start_offset, epochs_moved) = {
            let mut st = self.state.borrow_mut();
            let removed: Vec<Segment> = st.segments.drain(..count).collect();
            let first = st
                .segments
                .first()
                .expect("the active segment stays")
                .base_offset;
            st.sealed_tails.retain(|t| t.segment_base >= first);
            st.log_start_offset = st.log_start_offset.max(new_start).max(first);
            let start_offset = st.log_start_offset;
            let epochs_moved = st.epochs.truncate_from_start(start_offset);
            (removed, start_offset, epochs_moved)
        };
        if let Err(e) = log_start::write(&self.dir, start_offset).await {
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
            info!(dir = %self.dir.display(), segments = removed.len(), log_start_offset = start_offset, "deleted segments");
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
        // A follower's fetch held at the leader answers at once with the new log start.
        self.appended.notify(usize::MAX);
        Ok(())
    }
}

/// How many segments at the front of the log are due for deletion: wholly below the high
/// watermark (an empty active segment never is), and past `retention.ms`, beyond
/// `retention.bytes`, or wholly below the log start offset. With tiered storage, only segments
/// wholly below `copied_end` (the object store holds them), by the local retention limits.
fn retention_due(st: &LogState, config: LogConfig, now_ms: i64, copied_end: i64) -> usize {
    let (retention_ms, retention_bytes) = match config.remote_storage {
        true => (config.local_retention_ms, config.local_retention_bytes),
        false => (config.retention_ms, config.retention_bytes),
    };
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
        if config.remote_storage && upper > copied_end && !below_start {
            break;
        }
        let too_old = retention_ms >= 0 && now_ms.saturating_sub(seg.max_timestamp) > retention_ms;
        let too_big = retention_bytes >= 0 && total - seg.size as i64 >= retention_bytes;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_protocol::record_batch::{assign_offset, build_batch};

    /// About ten one-record batches to a segment.
    const CONFIG: LogConfig = LogConfig {
        segment_bytes: 1024,
        ..LogConfig::DEFAULT
    };

    /// One record at `base`, as a leader's fetch answer carries it.
    fn leader_batch(base: i64) -> Vec<u8> {
        let mut b =
            build_batch(&[(None, Some(b"a record's value".as_slice()))], 1_000, None).to_vec();
        assign_offset(&mut b, base, 0);
        b
    }

    #[test]
    fn a_follower_takes_the_leaders_log_start_up_to_its_own_high_watermark() {
        crate::partition::on_executor(|path| async move {
            let pdir = path.join("t-0");
            let p = Partition::open_replicated(pdir.clone(), CONFIG)
                .await
                .unwrap();
            for base in 0..100 {
                let end = p.append_as_follower(&leader_batch(base)).await.unwrap();
                p.sync_to(end).await.unwrap();
            }
            let segments = p.state.borrow().segments.len();
            assert!(segments > 5, "{segments} segments");
            assert_eq!(p.set_high_watermark(60), 60);
            // Not past what this replica knows the leader holds.
            assert_eq!(p.follow_log_start(80).await.unwrap(), 60);
            let first = p.state.borrow().segments[0].base_offset;
            assert!(first > 0 && first <= 60, "the segments below go: {first}");
            assert_eq!(p.follow_log_start(10).await.unwrap(), 60, "never back");
            assert_eq!(p.set_high_watermark(100), 100);
            // Busy with maintenance: left for the next fetch answer, without waiting.
            let held = p.maintenance.try_acquire_permit(1).unwrap();
            assert_eq!(p.follow_log_start(80).await.unwrap(), 60);
            drop(held);
            assert_eq!(p.follow_log_start(80).await.unwrap(), 80);
            p.close().await.unwrap();
            drop(p);
            let p = Partition::open_replicated(pdir, CONFIG).await.unwrap();
            assert_eq!(p.log_start_offset(), 80, "checkpointed");
            p.close().await.unwrap();
        });
    }

    #[test]
    fn a_tiered_log_deletes_locally_only_what_the_store_holds() {
        crate::partition::on_executor(|path| async move {
            let config = LogConfig {
                remote_storage: true,
                local_retention_bytes: 0,
                retention_bytes: -1,
                ..CONFIG
            };
            let p = Partition::open_replicated(path.join("t-0"), config)
                .await
                .unwrap();
            for base in 0..100 {
                let end = p.append_as_follower(&leader_batch(base)).await.unwrap();
                p.sync_to(end).await.unwrap();
            }
            assert_eq!(p.set_high_watermark(100), 100);
            let now = 2_000;
            assert_eq!(p.enforce_retention(now).await.unwrap(), 0, "nothing copied");
            let copy = p.next_segment_to_copy(0).expect("a closed segment");
            assert_eq!(copy.base_offset, 0);
            assert_eq!(copy.leader_epochs, vec![(0, 0)]);
            let second = p.next_segment_to_copy(copy.last_offset + 1).unwrap();
            assert_eq!(second.base_offset, copy.last_offset + 1);
            // The store holds the first segment and half the second: only the first goes.
            p.set_remote_copied_end(second.last_offset);
            assert_eq!(p.enforce_retention(now).await.unwrap(), 1);
            assert_eq!(p.log_start_offset(), second.base_offset);
            p.set_remote_copied_end(100);
            let due = p.enforce_retention(now).await.unwrap();
            assert!(due > 3, "every closed segment is copied: {due} go");
            assert!(
                p.next_segment_to_copy(0).is_none(),
                "the active one is never copied"
            );
            p.close().await.unwrap();
        });
    }
}
