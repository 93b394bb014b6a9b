//! Tiered storage's metadata (KIP-405's remote log metadata, kept in the metadata log rather
//! than in a `__remote_log_metadata` topic): which closed segments of a partition are in the
//! object store, and in which state of their copy or deletion.
//!
//! Only the partition's leader copies, and only under its current leader epoch: a copy starts
//! (`CopyStarted`) only when the image names its proposer leader at that epoch and the segment
//! begins past everything already copied, so two leaders never both own one range; an
//! unfinished copy it overlaps (a deposed leader's, a failed attempt) is marked for deletion
//! and its objects go. A segment is readable only once `CopyFinished`. Deletion is two steps,
//! as in KIP-405: `DeleteStarted` takes the segments out of what readers may use (and moves the
//! remote log start past them), the objects go, then `DeleteFinished` forgets them.

use serde::{Deserialize, Serialize};
use tributary_protocol::ErrorCode;

use crate::catalog::PartitionRegistration;
use crate::command::Outcome;
use crate::types::LeaderEpoch;

/// KIP-405's segment states; `DELETE_SEGMENT_FINISHED` is the segment's absence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteSegmentState {
    CopyStarted,
    CopyFinished,
    DeleteStarted,
}

/// One segment in the object store (Kafka's `RemoteLogSegmentMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    /// Unique per copy (a UUID): the objects' names carry it, so two copies of one range never
    /// share an object.
    pub id: String,
    pub base_offset: i64,
    /// The segment's last offset (inclusive, as Kafka's `endOffset`).
    pub end_offset: i64,
    pub max_timestamp: i64,
    /// Bytes of the log object.
    pub size: u64,
    pub log_crc32c: u32,
    /// Bytes and checksum of the index object (offsets, times, aborted transactions and the
    /// producer snapshot, in the local index file's format).
    pub index_size: u64,
    pub index_crc32c: u32,
    /// The leader epochs the segment's batches carry: (epoch, first offset), ascending.
    pub leader_epochs: Vec<(i32, i64)>,
    /// The broker that copied it, and its leader epoch then.
    pub broker: i32,
    pub leader_epoch: LeaderEpoch,
    pub state: RemoteSegmentState,
}

/// A partition's remote log: its segments by base offset, and where it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLog {
    /// The topic id the segments belong to: a topic deleted and created again under the same
    /// name starts a new remote log.
    pub topic_id: String,
    pub segments: Vec<RemoteSegment>,
    /// Offsets below this are gone from the remote log too (retention, DeleteRecords).
    pub log_start_offset: i64,
}

impl RemoteLog {
    /// One past the last offset copied (finished copies only) or gone from the remote log
    /// (below its start): where the next copy starts at the earliest. 0 when nothing was.
    pub fn copied_end(&self) -> i64 {
        self.readable()
            .map(|s| s.end_offset + 1)
            .max()
            .unwrap_or(0)
            .max(self.log_start_offset)
    }

    /// The segments a reader may use: copied and not being deleted, above the log start.
    pub fn readable(&self) -> impl Iterator<Item = &RemoteSegment> {
        self.segments
            .iter()
            .filter(|s| s.state == RemoteSegmentState::CopyFinished)
    }

    /// The readable segment holding `offset`.
    pub fn segment_for(&self, offset: i64) -> Option<&RemoteSegment> {
        if offset < self.log_start_offset {
            return None;
        }
        self.readable()
            .find(|s| s.base_offset <= offset && offset <= s.end_offset)
    }

    /// The first offset a reader may ask for: the first readable segment's, or none.
    pub fn start_offset(&self) -> Option<i64> {
        self.readable()
            .map(|s| s.base_offset.max(self.log_start_offset))
            .min()
    }

    /// The readable segments retention lets go of, oldest first, and where the remote log
    /// starts after them: those wholly below the remote log start, older than `retention_ms`
    /// (by their newest batch), or, for those the local log no longer holds (below
    /// `local_start`), beyond `retention_bytes` of the whole log (theirs and `local_bytes`).
    /// Negative limits: none.
    pub fn expired(
        &self,
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
        local_bytes: u64,
        local_start: i64,
    ) -> (Vec<String>, i64) {
        let mut segs: Vec<&RemoteSegment> = self.readable().collect();
        segs.sort_by_key(|s| s.base_offset);
        let only_remote = |s: &RemoteSegment| s.end_offset < local_start;
        let mut total = local_bytes as i64
            + segs
                .iter()
                .filter(|s| only_remote(s))
                .map(|s| s.size as i64)
                .sum::<i64>();
        let mut ids = Vec::new();
        let mut start = self.log_start_offset;
        for s in segs {
            let below_start = s.end_offset < self.log_start_offset;
            let too_old =
                retention_ms >= 0 && now_ms.saturating_sub(s.max_timestamp) > retention_ms;
            let too_big =
                retention_bytes >= 0 && only_remote(s) && total - s.size as i64 >= retention_bytes;
            if !(below_start || too_old || too_big) {
                break;
            }
            if only_remote(s) {
                total -= s.size as i64;
            }
            ids.push(s.id.clone());
            start = start.max(s.end_offset + 1);
        }
        (ids, start)
    }

    /// Segments whose objects are to be deleted.
    pub fn deleting(&self) -> impl Iterator<Item = &RemoteSegment> {
        self.segments
            .iter()
            .filter(|s| s.state == RemoteSegmentState::DeleteStarted)
    }
}

/// A change to one partition's remote log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum RemoteLogChange {
    /// `local_log_start`: the copier's local log start then. Offsets of the segment below it
    /// that were never copied are gone (DeleteRecords): the remote log starts there.
    CopyStarted {
        segment: RemoteSegment,
        #[serde(default)]
        local_log_start: i64,
    },
    /// `log_crc32c`: the log object's checksum, known once it is written.
    CopyFinished {
        id: String,
        log_crc32c: u32,
    },
    /// `log_start_offset`: the remote log starts there after these go.
    DeleteStarted {
        ids: Vec<String>,
        log_start_offset: i64,
    },
    DeleteFinished {
        ids: Vec<String>,
    },
}

/// Applies `change` to `log`, the remote log of a partition placed as `placed`.
pub fn apply(
    log: &mut RemoteLog,
    placed: &PartitionRegistration,
    change: RemoteLogChange,
) -> Outcome {
    match change {
        RemoteLogChange::CopyStarted {
            segment,
            local_log_start,
        } => copy_started(log, placed, segment, local_log_start),
        RemoteLogChange::CopyFinished { id, log_crc32c } => {
            let end = log.copied_end();
            match log.segments.iter_mut().find(|s| s.id == id) {
                Some(s) if s.state == RemoteSegmentState::CopyStarted && s.end_offset >= end => {
                    s.state = RemoteSegmentState::CopyFinished;
                    s.log_crc32c = log_crc32c;
                    Outcome::Done
                }
                _ => refused(format!(
                    "remote segment {id} is not being copied (superseded or already done)"
                )),
            }
        }
        RemoteLogChange::DeleteStarted {
            ids,
            log_start_offset,
        } => {
            for s in log.segments.iter_mut().filter(|s| ids.contains(&s.id)) {
                s.state = RemoteSegmentState::DeleteStarted;
            }
            log.log_start_offset = log.log_start_offset.max(log_start_offset);
            Outcome::Done
        }
        RemoteLogChange::DeleteFinished { ids } => {
            log.segments
                .retain(|s| !(s.state == RemoteSegmentState::DeleteStarted && ids.contains(&s.id)));
            Outcome::Done
        }
    }
}

fn copy_started(
    log: &mut RemoteLog,
    placed: &PartitionRegistration,
    seg: RemoteSegment,
    local_log_start: i64,
) -> Outcome {
    if placed.leader != seg.broker || placed.leader_epoch != seg.leader_epoch {
        return Outcome::Refused(
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            format!(
                "broker {} at leader epoch {} may not copy segments: the leader is {} at epoch {}",
                seg.broker, seg.leader_epoch.0, placed.leader, placed.leader_epoch.0
            ),
        );
    }
    // A replica's segments roll where its own did, so a new leader's next segment may begin
    // below what its predecessor copied: it must end past it. (Readers take any copied
    // segment holding an offset: below the high watermark the replicas hold the same batches.)
    if seg.end_offset < log.copied_end() || seg.end_offset < seg.base_offset {
        return refused(format!(
            "segment {}..={} does not reach past the copied end {}",
            seg.base_offset,
            seg.end_offset,
            log.copied_end()
        ));
    }
    if log.segments.iter().any(|s| s.id == seg.id) {
        return refused(format!("remote segment {} exists", seg.id));
    }
    // An unfinished copy this one overlaps will never finish as a readable segment: its
    // objects go.
    for s in log.segments.iter_mut() {
        let overlaps = s.base_offset <= seg.end_offset && seg.base_offset <= s.end_offset;
        if s.state == RemoteSegmentState::CopyStarted && overlaps {
            s.state = RemoteSegmentState::DeleteStarted;
        }
    }
    if local_log_start > log.copied_end() {
        log.log_start_offset = local_log_start;
    }
    let at = log
        .segments
        .partition_point(|s| s.base_offset <= seg.base_offset);
    log.segments.insert(at, seg);
    Outcome::Done
}

fn refused(why: String) -> Outcome {
    Outcome::Refused(ErrorCode::INVALID_REQUEST, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: &str, base: i64, end: i64, broker: i32, epoch: i32) -> RemoteSegment {
        RemoteSegment {
            id: id.into(),
            base_offset: base,
            end_offset: end,
            max_timestamp: 0,
            size: 100,
            log_crc32c: 0,
            index_size: 10,
            index_crc32c: 0,
            leader_epochs: vec![(epoch, base)],
            broker,
            leader_epoch: LeaderEpoch(epoch),
            state: RemoteSegmentState::CopyStarted,
        }
    }

    fn led_by(leader: i32, epoch: i32) -> PartitionRegistration {
        let mut p = PartitionRegistration::new(vec![1, 2, 3]);
        p.leader = leader;
        p.leader_epoch = LeaderEpoch(epoch);
        p
    }

    fn start(log: &mut RemoteLog, p: &PartitionRegistration, s: RemoteSegment) -> Outcome {
        apply(
            log,
            p,
            RemoteLogChange::CopyStarted {
                segment: s,
                local_log_start: 0,
            },
        )
    }

    fn finish(log: &mut RemoteLog, p: &PartitionRegistration, id: &str) -> Outcome {
        apply(
            log,
            p,
            RemoteLogChange::CopyFinished {
                id: id.into(),
                log_crc32c: 7,
            },
        )
    }

    #[test]
    fn only_the_current_leader_copies_and_a_segment_is_readable_once_finished() {
        let mut log = RemoteLog::default();
        let p = led_by(1, 3);
        let out = start(&mut log, &p, seg("a", 0, 99, 2, 3));
        assert!(matches!(
            out,
            Outcome::Refused(ErrorCode::NOT_LEADER_OR_FOLLOWER, _)
        ));
        let out = start(&mut log, &p, seg("a", 0, 99, 1, 2));
        assert!(matches!(
            out,
            Outcome::Refused(ErrorCode::NOT_LEADER_OR_FOLLOWER, _)
        ));
        assert_eq!(start(&mut log, &p, seg("a", 0, 99, 1, 3)), Outcome::Done);
        assert_eq!(log.segment_for(5), None, "not readable while copying");
        assert_eq!(log.copied_end(), 0);
        assert_eq!(finish(&mut log, &p, "a"), Outcome::Done);
        assert_eq!(log.segment_for(5).map(|s| s.id.as_str()), Some("a"));
        assert_eq!(log.copied_end(), 100);
        assert_eq!(log.start_offset(), Some(0));
        assert_eq!(log.segment_for(5).map(|s| s.log_crc32c), Some(7));
        // The same range again, or one inside it, is refused; one reaching past it is not (a
        // new leader's segments roll elsewhere).
        assert!(matches!(
            start(&mut log, &p, seg("b", 0, 99, 1, 3)),
            Outcome::Refused(ErrorCode::INVALID_REQUEST, _)
        ));
        assert!(matches!(
            start(&mut log, &p, seg("b", 50, 80, 1, 3)),
            Outcome::Refused(ErrorCode::INVALID_REQUEST, _)
        ));
        assert!(matches!(finish(&mut log, &p, "a"), Outcome::Refused(..)));
        assert_eq!(start(&mut log, &p, seg("c", 50, 150, 1, 3)), Outcome::Done);
        assert_eq!(finish(&mut log, &p, "c"), Outcome::Done);
        assert_eq!(log.copied_end(), 151);
        assert_eq!(log.segment_for(120).map(|s| s.id.as_str()), Some("c"));
    }

    #[test]
    fn records_deleted_locally_before_their_copy_stay_deleted() {
        // DeleteRecords moved the local log start to 150, inside the segment now copied.
        let mut log = RemoteLog::default();
        let p = led_by(1, 0);
        let out = apply(
            &mut log,
            &p,
            RemoteLogChange::CopyStarted {
                segment: seg("a", 100, 199, 1, 0),
                local_log_start: 150,
            },
        );
        assert_eq!(out, Outcome::Done);
        assert_eq!(finish(&mut log, &p, "a"), Outcome::Done);
        assert_eq!(log.start_offset(), Some(150));
        assert_eq!(log.segment_for(120), None);
        assert_eq!(log.segment_for(150).map(|s| s.id.as_str()), Some("a"));
        // A local start inside what is already copied moves nothing.
        let out = apply(
            &mut log,
            &p,
            RemoteLogChange::CopyStarted {
                segment: seg("b", 200, 299, 1, 0),
                local_log_start: 180,
            },
        );
        assert_eq!(out, Outcome::Done);
        assert_eq!(log.log_start_offset, 150);
    }

    #[test]
    fn once_retention_took_every_remote_segment_copies_go_on_from_the_remote_start() {
        let mut log = RemoteLog::default();
        let p = led_by(1, 0);
        assert_eq!(start(&mut log, &p, seg("a", 0, 99, 1, 0)), Outcome::Done);
        assert_eq!(finish(&mut log, &p, "a"), Outcome::Done);
        let out = apply(
            &mut log,
            &p,
            RemoteLogChange::DeleteStarted {
                ids: vec!["a".into()],
                log_start_offset: 100,
            },
        );
        assert_eq!(out, Outcome::Done);
        assert_eq!(
            log.copied_end(),
            100,
            "not 0: what expired is not copied again"
        );
        assert!(matches!(
            start(&mut log, &p, seg("again", 0, 99, 1, 0)),
            Outcome::Refused(ErrorCode::INVALID_REQUEST, _)
        ));
    }

    #[test]
    fn a_new_leaders_copy_supersedes_its_predecessors_unfinished_one() {
        let mut log = RemoteLog::default();
        assert_eq!(
            start(&mut log, &led_by(1, 3), seg("old", 0, 99, 1, 3)),
            Outcome::Done
        );
        let p = led_by(2, 4);
        assert_eq!(start(&mut log, &p, seg("new", 0, 99, 2, 4)), Outcome::Done);
        assert_eq!(
            log.deleting().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            vec!["old"]
        );
        // The deposed leader's upload ends after all: its finish changes nothing.
        assert!(matches!(finish(&mut log, &p, "old"), Outcome::Refused(..)));
        assert_eq!(finish(&mut log, &p, "new"), Outcome::Done);
        assert_eq!(log.segment_for(0).map(|s| s.id.as_str()), Some("new"));
        // Its objects go, then it is forgotten.
        let out = apply(
            &mut log,
            &p,
            RemoteLogChange::DeleteFinished {
                ids: vec!["old".into()],
            },
        );
        assert_eq!(out, Outcome::Done);
        assert_eq!(log.segments.len(), 1);
    }

    #[test]
    fn retention_lets_go_of_the_oldest_remote_segments() {
        let mut log = RemoteLog::default();
        let p = led_by(1, 0);
        for (id, base, ts) in [("a", 0, 1_000), ("b", 100, 2_000), ("c", 200, 3_000)] {
            let mut s = seg(id, base, base + 99, 1, 0);
            s.max_timestamp = ts;
            assert_eq!(start(&mut log, &p, s), Outcome::Done);
            assert_eq!(finish(&mut log, &p, id), Outcome::Done);
        }
        // Each is 100 bytes; the local log holds 200 bytes from offset 200.
        assert_eq!(log.expired(10_000, -1, -1, 200, 200), (vec![], 0));
        assert_eq!(
            log.expired(2_500, 1_000, -1, 200, 200),
            (vec!["a".to_string()], 100)
        );
        // 400 bytes in all: at most 200 lets both remote-only segments go.
        assert_eq!(
            log.expired(0, -1, 200, 200, 200),
            (vec!["a".to_string(), "b".to_string()], 200),
            "a and b are remote only; c is local too and not counted twice"
        );
        assert_eq!(
            log.expired(0, -1, 300, 200, 200),
            (vec!["a".to_string()], 100)
        );
        assert_eq!(log.expired(0, -1, 350, 200, 200), (vec![], 0));
    }

    #[test]
    fn deletion_hides_a_segment_first_and_moves_the_remote_log_start() {
        let mut log = RemoteLog::default();
        let p = led_by(1, 0);
        for (id, base) in [("a", 0), ("b", 100), ("c", 200)] {
            assert_eq!(
                start(&mut log, &p, seg(id, base, base + 99, 1, 0)),
                Outcome::Done
            );
            assert_eq!(finish(&mut log, &p, id), Outcome::Done);
        }
        let out = apply(
            &mut log,
            &p,
            RemoteLogChange::DeleteStarted {
                ids: vec!["a".into(), "b".into()],
                log_start_offset: 200,
            },
        );
        assert_eq!(out, Outcome::Done);
        assert_eq!(log.segment_for(150), None);
        assert_eq!(log.start_offset(), Some(200));
        assert_eq!(log.copied_end(), 300);
        apply(
            &mut log,
            &p,
            RemoteLogChange::DeleteFinished {
                ids: vec!["a".into(), "b".into(), "c".into()],
            },
        );
        // Only segments being deleted are forgotten.
        assert_eq!(
            log.segments
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>(),
            vec!["c"]
        );
    }
}
