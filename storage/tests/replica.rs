//! The storage side of follower replication against real files: leader epochs, follower
//! appends, the replicated high watermark, truncation and replica reads.

mod common;

use std::path::Path;
use std::rc::Rc;

use common::{on_executor, sorted_segments};
use tributary_protocol::fuzzing::SeededRng;
use tributary_protocol::record_batch::{build_batch, validate_all};
use tributary_storage::leader_epoch::{EpochEntry, FILE as EPOCH_FILE};
use tributary_storage::{LogConfig, Partition, PartitionError};

fn batch(i: usize, producer: Option<(i64, i16, i32)>) -> Vec<u8> {
    let v = format!("value-{i:06}");
    build_batch(
        &[(None, Some(v.as_bytes())), (Some(b"k"), Some(b"second"))],
        1_000 + i as i64,
        producer,
    )
    .to_vec()
}

const CONFIG: LogConfig = LogConfig {
    segment_bytes: 4 * 1024,
    producer_id_expiration_ms: i64::MAX,
    ..LogConfig::DEFAULT
};

fn entries(pairs: &[(i32, i64)]) -> Vec<EpochEntry> {
    pairs
        .iter()
        .map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        })
        .collect()
}

/// Every batch up to the log end, read as a follower does: (base offset, leader epoch, CRC).
async fn replica_batches(p: &Partition) -> Vec<(i64, i32, u32)> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    while offset < p.log_end_offset() {
        let r = p.read_replica(offset, 1000).await.expect("replica read");
        let batches = validate_all(&r.records).expect("whole, valid batches");
        assert!(!batches.is_empty(), "a read below the log end returns data");
        for (_, h) in batches {
            out.push((h.base_offset, h.partition_leader_epoch, h.crc));
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// The values of the first record of every batch below the high watermark, by offset.
async fn visible_offsets(p: &Partition) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.expect("read");
        let batches = validate_all(&r.records).expect("valid");
        assert!(!batches.is_empty());
        for (_, h) in batches {
            out.push(h.base_offset);
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// Copies everything `leader` has past `follower`'s log end, in fetches of `max_bytes`, the
/// last batch of each fetch sometimes cut short (a partial batch is left out by the follower).
async fn replicate(leader: &Partition, follower: &Rc<Partition>, max_bytes: usize, cut: bool) {
    while follower.log_end_offset() < leader.log_end_offset() {
        let from = follower.log_end_offset();
        let r = leader
            .read_replica(from, max_bytes)
            .await
            .expect("leader read");
        let mut records = r.records.to_vec();
        if cut && records.len() > 200 {
            records.truncate(records.len() - 7);
        }
        let leo = follower
            .append_as_follower(&records)
            .await
            .expect("follower append");
        assert!(leo > from, "every fetch makes progress");
        follower.sync_to(leo).await.expect("follower sync");
    }
}

fn remove(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(name)).unwrap();
}

#[test]
fn appends_stamp_the_leader_epoch_and_the_cache_survives_reopen_and_rebuild() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.latest_epoch(), None);
        assert_eq!(p.end_offset_for(0), (-1, -1));
        for i in 0..3 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.set_leader_epoch(3).await.unwrap();
        assert_eq!(p.leader_epoch(), 3);
        for i in 3..5 {
            p.append(&batch(i, None)).await.unwrap();
        }
        let out = p.append_with_epoch(&batch(5, None), 5).await.unwrap();
        assert_eq!(out.base_offset, 10);
        p.sync_to(12).await.unwrap();
        let want = entries(&[(0, 0), (3, 6), (5, 10)]);
        assert_eq!(p.epoch_entries(), want);
        assert_eq!(p.latest_epoch(), Some(5));
        assert_eq!(p.end_offset_for(0), (0, 6));
        assert_eq!(p.end_offset_for(3), (3, 10));
        assert_eq!(p.end_offset_for(4), (3, 10));
        assert_eq!(p.end_offset_for(5), (5, 12));
        assert_eq!(p.end_offset_for(6), (-1, -1));
        // Stamped in the batches, which still pass their CRC.
        let epochs: Vec<i32> = replica_batches(&p).await.iter().map(|b| b.1).collect();
        assert_eq!(epochs, vec![0, 0, 0, 3, 3, 5]);
        p.close().await.unwrap();
        drop(p);
        let text = std::fs::read_to_string(pdir.join(EPOCH_FILE)).unwrap();
        assert_eq!(text, "0\n3\n0 0\n3 6\n5 10\n");

        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.epoch_entries(), want);
        p.close().await.unwrap();
        drop(p);
        // Without the checkpoint the cache is rebuilt from the batch headers.
        remove(&pdir, EPOCH_FILE);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.epoch_entries(), want);
        assert!(pdir.join(EPOCH_FILE).exists(), "the rebuilt cache is saved");
        drop(p);
        // A checkpoint with entries past the log end (a crash before the data was durable)
        // loses them on open.
        std::fs::write(pdir.join(EPOCH_FILE), "0\n4\n0 0\n3 6\n5 10\n7 40\n").unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.epoch_entries(), want);
    });
}

#[test]
fn a_log_written_before_epochs_starts_at_epoch_zero_from_the_log_start() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..200 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(400).await.unwrap();
        assert_eq!(p.delete_records(150).await.unwrap(), 150);
        assert_eq!(
            p.epoch_entries(),
            entries(&[(0, 150)]),
            "moved with the log start"
        );
        p.close().await.unwrap();
        drop(p);
        remove(&pdir, EPOCH_FILE);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.epoch_entries(), entries(&[(0, 150)]));
        assert_eq!(p.end_offset_for(0), (0, 400));
    });
}

#[test]
fn follower_replicates_the_leader_and_converges_after_divergence() {
    let mut rng = SeededRng::from_env("follower_replicates_the_leader");
    on_executor(move |path| async move {
        let (ldir, fdir) = (path.join("leader-0"), path.join("follower-0"));
        let l = Partition::open(ldir.clone(), CONFIG).await.unwrap();
        let f = Partition::open_replicated(fdir.clone(), CONFIG)
            .await
            .unwrap();
        l.set_leader_epoch(1).await.unwrap();
        for i in 0..120 {
            let producer = (i % 3 == 0).then_some((7, 0, (i / 3 * 2) as i32));
            l.append(&batch(i, producer)).await.unwrap();
            if rng.below(5) == 0 {
                l.sync_to(l.log_end_offset()).await.unwrap();
            }
        }
        // Read from the leader up to its log end, unsynced tail included.
        let max_bytes = 100 + rng.below(3000);
        replicate(&l, &f, max_bytes, rng.below(2) == 0).await;
        l.sync_to(l.log_end_offset()).await.unwrap();
        let leader = replica_batches(&l).await;
        assert_eq!(leader.len(), 120);
        assert_eq!(replica_batches(&f).await, leader);
        assert_eq!(f.epoch_entries(), entries(&[(1, 0)]));
        assert_eq!(f.producer_count(), 1);
        f.close().await.unwrap();
        drop(f);
        let f = Partition::open_replicated(fdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(replica_batches(&f).await, leader, "after reopen");

        // Divergence: the follower got epoch-2 batches the leader never had.
        for i in 0..40 {
            f.append_with_epoch(&batch(1000 + i, None), 2)
                .await
                .unwrap();
        }
        f.sync_to(f.log_end_offset()).await.unwrap();
        assert_eq!(f.latest_epoch(), Some(2));
        // The leader moves on in epoch 3 (the follower's epoch 2 was a leadership the cluster
        // never committed); the follower asks where its latest epoch ends on the leader.
        l.set_leader_epoch(3).await.unwrap();
        let (epoch, end) = l.end_offset_for(f.latest_epoch().unwrap());
        assert_eq!((epoch, end), (1, 240), "the leader never saw epoch 2");
        f.truncate_to(end).await.unwrap();
        assert_eq!(f.log_end_offset(), 240);
        assert_eq!(f.latest_epoch(), Some(1));
        for i in 120..160 {
            l.append(&batch(i, None)).await.unwrap();
        }
        replicate(&l, &f, max_bytes, false).await;
        l.sync_to(l.log_end_offset()).await.unwrap();
        let leader = replica_batches(&l).await;
        assert_eq!(replica_batches(&f).await, leader);
        assert_eq!(f.epoch_entries(), l.epoch_entries());
        assert_eq!(f.epoch_entries(), entries(&[(1, 0), (3, 240)]));
        drop(f);
        // A crash, not a close: the follower's synced log is the leader's.
        let f = Partition::open_replicated(fdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(
            replica_batches(&f).await,
            leader,
            "after a crash and reopen"
        );
        assert_eq!(f.epoch_entries(), l.epoch_entries());
    });
}

#[test]
fn follower_append_refuses_bad_batches_and_ignores_a_partial_one() {
    on_executor(move |path| async move {
        let l = Partition::open(path.join("l-0"), CONFIG).await.unwrap();
        let f = Partition::open_replicated(path.join("f-0"), CONFIG)
            .await
            .unwrap();
        for i in 0..4 {
            l.append(&batch(i, None)).await.unwrap();
        }
        let all = l.read_replica(0, 1 << 20).await.unwrap().records.to_vec();
        let one = validate_all(&all).unwrap()[1].0;
        // A partial trailing batch is left out.
        assert_eq!(f.append_as_follower(&all[..one + 30]).await.unwrap(), 2);
        // Offsets below the log end are refused.
        assert!(matches!(
            f.append_as_follower(&all).await,
            Err(PartitionError::Corrupt { .. })
        ));
        // A damaged batch is refused, and nothing of the fetch is appended.
        let mut bad = all[one..].to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        assert!(matches!(
            f.append_as_follower(&bad).await,
            Err(PartitionError::Corrupt { .. })
        ));
        assert_eq!(f.log_end_offset(), 2);
        assert_eq!(f.append_as_follower(&all[one..]).await.unwrap(), 8);
        // Gaps are refused without compaction, kept with it (a compacted leader).
        let mut gap = batch(9, None);
        gap[..8].copy_from_slice(&20i64.to_be_bytes());
        assert!(matches!(
            f.append_as_follower(&gap).await,
            Err(PartitionError::Corrupt { .. })
        ));
        f.set_config(LogConfig {
            compact: true,
            ..CONFIG
        });
        assert_eq!(f.append_as_follower(&gap).await.unwrap(), 22);
        f.sync_to(22).await.unwrap();
        let bases: Vec<i64> = replica_batches(&f).await.iter().map(|b| b.0).collect();
        assert_eq!(bases, vec![0, 2, 4, 6, 20]);
    });
}

#[test]
fn replicated_high_watermark_moves_only_when_set_and_is_checkpointed() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        for i in 0..10 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.commit(20).await.unwrap();
        assert_eq!(p.durable_offset(), 20);
        assert_eq!(p.high_watermark(), 0, "a flush does not move it");
        assert_eq!(p.read(0, 1 << 20).await.unwrap().records.len(), 0);
        let before = p.visible_bytes();
        let one = batch(0, None).len() as u64;
        assert_eq!(p.bytes_above_high_watermark(), 10 * one);
        let listener = p.listen_advance();
        // Only to a batch end, at or below the one asked for.
        assert_eq!(p.set_high_watermark(5), 4);
        listener.await;
        assert_eq!(visible_offsets(&p).await, vec![0, 2]);
        assert_eq!(p.visible_bytes() - before, 2 * one);
        assert_eq!(p.bytes_above_high_watermark(), 8 * one);
        assert_eq!(p.set_high_watermark(1), 4, "never backwards");
        // Never past the durable offset.
        for i in 10..20 {
            p.append(&batch(i, None)).await.unwrap();
        }
        assert_eq!(p.set_high_watermark(40), 20);
        assert_eq!(p.visible_bytes() - before, 10 * one);
        assert_eq!(
            p.bytes_above_high_watermark(),
            10 * one,
            "the appends past the durable end"
        );
        assert!(matches!(
            p.read(22, 10).await,
            Err(PartitionError::OffsetOutOfRange { .. })
        ));
        p.sync_to(40).await.unwrap();
        assert_eq!(p.high_watermark(), 20);
        assert_eq!(p.set_high_watermark(30), 30);
        assert_eq!(visible_offsets(&p).await.len(), 15);
        // Retention and DeleteRecords stay below it.
        assert!(p.delete_records(32).await.is_err());
        p.close().await.unwrap();
        drop(p);

        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(p.high_watermark(), 30, "from the checkpoint");
        assert_eq!(visible_offsets(&p).await.len(), 15);
        assert_eq!(p.log_end_offset(), 40);
        assert_eq!(p.set_high_watermark(40), 40);
        assert_eq!(visible_offsets(&p).await.len(), 20);
        drop(p);
        // Without a checkpoint: the log start, and everything still readable by replicas.
        remove(&pdir, "replication-offset-checkpoint");
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(p.high_watermark(), 0);
        assert_eq!(replica_batches(&p).await.len(), 20);
        assert_eq!(p.set_high_watermark(40), 40);
        assert_eq!(visible_offsets(&p).await.len(), 20);
        drop(p);
        // Not replicated: the log end, as always.
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.high_watermark(), 40);
    });
}

#[test]
fn replica_reads_reach_the_unwritten_tail_and_wake_on_append() {
    on_executor(move |path| async move {
        let p = Partition::open(path.join("t-0"), CONFIG).await.unwrap();
        let listener = p.listen_append();
        // Enough to roll several segments without any flush: sealed tails hold them.
        for i in 0..100 {
            p.append(&batch(i, None)).await.unwrap();
        }
        listener.await;
        assert_eq!(p.high_watermark(), 0);
        assert_eq!(replica_batches(&p).await.len(), 100);
        p.sync_to(100).await.unwrap();
        for i in 100..130 {
            p.append(&batch(i, None)).await.unwrap();
        }
        let all = replica_batches(&p).await;
        assert_eq!(all.len(), 130);
        assert!(all.windows(2).all(|w| w[1].0 == w[0].0 + 2));
        assert!(matches!(
            p.read_replica(261, 10).await,
            Err(PartitionError::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.read_replica(260, 10).await.unwrap().records.len(), 0);
    });
}

#[test]
fn truncation_into_the_tail_buffer_then_appends_survive_a_crash() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let config = LogConfig {
            segment_bytes: 1 << 30,
            ..CONFIG
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        for i in 0..10 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(10).await.unwrap();
        for i in 10..20 {
            p.append(&batch(i, None)).await.unwrap();
        }
        // Inside a batch: refused.
        assert!(matches!(
            p.truncate_to(15).await,
            Err(PartitionError::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.truncate_to(16).await.unwrap(), 16);
        assert_eq!(p.log_end_offset(), 16);
        assert_eq!(p.high_watermark(), 16);
        for i in 100..103 {
            let out = p.append(&batch(i, None)).await.unwrap();
            assert_eq!(out.base_offset, 16 + 2 * (i as i64 - 100));
        }
        p.sync_to(22).await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        assert_eq!(p.log_end_offset(), 22);
        let r = p.read(16, 1 << 20).await.unwrap();
        let first = validate_all(&r.records).unwrap()[0].0;
        assert!(
            r.records[first..].windows(12).any(|w| w == b"value-000100"),
            "the batch at 16 is the new one"
        );
        assert_eq!(visible_offsets(&p).await.len(), 11);
    });
}

#[test]
fn truncation_across_segments_rebuilds_producer_state_and_survives_reopen() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..200 {
            p.append(&batch(i, Some((42, 0, 2 * i as i32))))
                .await
                .unwrap();
            if i % 9 == 0 {
                p.sync_to(p.log_end_offset()).await.unwrap();
            }
        }
        p.sync_to(400).await.unwrap();
        let segments = sorted_segments(&pdir).len();
        assert!(segments > 3, "rolled: {segments}");
        // A leader epoch change on the way, dropped by the truncation.
        p.set_leader_epoch(4).await.unwrap();
        p.append(&batch(200, Some((42, 0, 400)))).await.unwrap();
        assert_eq!(p.truncate_to(100).await.unwrap(), 100);
        assert!(sorted_segments(&pdir).len() < segments);
        assert_eq!(p.epoch_entries(), entries(&[(0, 0)]));
        assert_eq!(p.high_watermark(), 100);
        // The retry of a truncated batch is appended again, not answered as a duplicate.
        let out = p.append(&batch(50, Some((42, 0, 100)))).await.unwrap();
        assert!(!out.duplicate);
        assert_eq!(out.base_offset, 100);
        // A batch still in the log is a duplicate.
        let dup = p.append(&batch(49, Some((42, 0, 98)))).await.unwrap();
        assert!(dup.duplicate);
        assert_eq!(dup.base_offset, 98);
        p.sync_to(102).await.unwrap();
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.log_end_offset(), 102);
        let offsets = visible_offsets(&p).await;
        assert_eq!(offsets, (0..51).map(|i| 2 * i).collect::<Vec<i64>>());
        let dup = p.append(&batch(50, Some((42, 0, 100)))).await.unwrap();
        assert!(dup.duplicate, "producer state after reopen");
        // Truncating at a segment's base removes that segment.
        let bases: Vec<i64> = sorted_segments(&pdir)
            .iter()
            .map(|s| common::segment_base(s))
            .collect();
        let at = bases[bases.len() / 2];
        assert_eq!(p.truncate_to(at).await.unwrap(), at);
        assert_eq!(
            common::segment_base(sorted_segments(&pdir).last().unwrap()),
            bases[bases.len() / 2 - 1]
        );
        let out = p.append(&batch(300, None)).await.unwrap();
        assert_eq!(out.base_offset, at);
        p.sync_to(at + 2).await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.log_end_offset(), at + 2);
        assert_eq!(visible_offsets(&p).await.len() as i64, at / 2 + 1);
    });
}

#[test]
fn replicated_truncation_below_the_checkpointed_high_watermark_lowers_it() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        for i in 0..10 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(20).await.unwrap();
        assert_eq!(p.set_high_watermark(20), 20);
        p.checkpoint_high_watermark().await.unwrap();
        assert_eq!(p.truncate_to(10).await.unwrap(), 10);
        assert_eq!(p.high_watermark(), 10);
        for i in 10..15 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(20).await.unwrap();
        drop(p);
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(p.high_watermark(), 10, "the new batches are not committed");
        assert_eq!(p.log_end_offset(), 20);
    });
}

/// A leader's epoch starts at its log end; deposed before it appended anything, the replica
/// names that epoch as its last until a truncation at the log end drops it (as Kafka's does),
/// or its new leader, which never had it, reports the same divergence on every fetch.
#[test]
fn truncation_at_the_log_end_drops_an_epoch_without_batches() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        for i in 0..3 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.set_leader_epoch(2).await.unwrap();
        p.append(&batch(3, None)).await.unwrap();
        p.sync_to(8).await.unwrap();
        p.set_leader_epoch(4).await.unwrap();
        assert_eq!(p.latest_epoch(), Some(4));
        // Past the end: nothing changes.
        assert_eq!(p.truncate_to(9).await.unwrap(), 8);
        assert_eq!(p.latest_epoch(), Some(4));
        assert_eq!(p.truncate_to(8).await.unwrap(), 8);
        assert_eq!(p.latest_epoch(), Some(2));
        assert_eq!(p.epoch_entries(), entries(&[(0, 0), (2, 6)]));
        assert_eq!(p.log_end_offset(), 8);
        drop(p);
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(p.epoch_entries(), entries(&[(0, 0), (2, 6)]));
    });
}

#[test]
fn truncate_fully_starts_an_empty_log_at_the_offset() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        for i in 0..100 {
            p.append_with_epoch(&batch(i, Some((9, 0, 2 * i as i32))), 2)
                .await
                .unwrap();
        }
        p.truncate_fully_and_start_at(1000).await.unwrap();
        assert_eq!(p.log_start_offset(), 1000);
        assert_eq!(p.log_end_offset(), 1000);
        assert_eq!(p.high_watermark(), 1000);
        assert_eq!(p.latest_epoch(), None);
        assert_eq!(p.producer_count(), 0);
        assert_eq!(sorted_segments(&pdir).len(), 1);
        let out = p.append_with_epoch(&batch(0, None), 3).await.unwrap();
        assert_eq!(out.base_offset, 1000);
        p.sync_to(1002).await.unwrap();
        drop(p);
        let p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        assert_eq!(p.log_start_offset(), 1000);
        assert_eq!(p.log_end_offset(), 1002);
        assert_eq!(p.high_watermark(), 1000);
        assert_eq!(p.epoch_entries(), entries(&[(3, 1000)]));
        assert_eq!(replica_batches(&p).await.len(), 1);
    });
}

/// `(base offset, value of its first record)` of every batch up to the log end.
async fn replica_values(p: &Partition) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    while offset < p.log_end_offset() {
        let r = p.read_replica(offset, 700).await.expect("replica read");
        let batches = validate_all(&r.records).expect("whole, valid batches");
        assert!(!batches.is_empty());
        for (at, h) in batches {
            let bytes = &r.records[at..at + h.size()];
            let records = tributary_protocol::record_batch::records(bytes).expect("records");
            let value = records[0].value.as_ref().expect("value");
            out.push((h.base_offset, String::from_utf8(value.to_vec()).unwrap()));
            offset = h.last_offset() + 1;
        }
    }
    out
}

#[test]
fn random_appends_truncations_and_restarts_match_a_model() {
    let mut rng = SeededRng::from_env("random_appends_truncations_and_restarts");
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let mut p = Partition::open_replicated(pdir.clone(), CONFIG)
            .await
            .unwrap();
        // The batches the log should hold: (base offset, value).
        let mut model: Vec<(i64, String)> = Vec::new();
        let mut next_value = 0usize;
        for step in 0..80 {
            match rng.below(10) {
                0..=4 => {
                    for _ in 0..1 + rng.below(15) {
                        let epoch = 1 + step / 10;
                        let out = p
                            .append_with_epoch(&batch(next_value, None), epoch)
                            .await
                            .unwrap();
                        model.push((out.base_offset, format!("value-{next_value:06}")));
                        next_value += 1;
                    }
                    if rng.below(2) == 0 {
                        p.sync_to(p.log_end_offset()).await.unwrap();
                    }
                }
                5..=7 => {
                    if model.is_empty() {
                        continue;
                    }
                    let keep = rng.below(model.len() + 1);
                    let at = model.get(keep).map_or(p.log_end_offset(), |b| b.0);
                    assert_eq!(p.truncate_to(at).await.unwrap(), at, "step {step}");
                    model.truncate(keep);
                }
                8 => {
                    p.close().await.unwrap();
                    drop(p);
                    p = Partition::open_replicated(pdir.clone(), CONFIG)
                        .await
                        .unwrap();
                }
                _ => {
                    // A crash after everything was synced.
                    p.sync_to(p.log_end_offset()).await.unwrap();
                    drop(p);
                    p = Partition::open_replicated(pdir.clone(), CONFIG)
                        .await
                        .unwrap();
                }
            }
            let end = model.last().map_or(0, |b| b.0 + 2);
            assert_eq!(p.log_end_offset(), end, "step {step}");
            assert_eq!(replica_values(&p).await, model, "step {step}");
            if rng.below(2) == 0 {
                let hw = p.set_high_watermark(p.durable_offset());
                assert_eq!(
                    hw,
                    p.durable_offset(),
                    "step {step}: every batch end is known"
                );
            }
            let hw = p.high_watermark();
            let visible: Vec<i64> = model.iter().map(|b| b.0).filter(|b| b + 2 <= hw).collect();
            assert_eq!(visible_offsets(&p).await, visible, "step {step}");
            // The epoch cache never names an offset past the log end.
            assert!(p
                .epoch_entries()
                .iter()
                .all(|e| e.start_offset < end.max(1)));
        }
    });
}

#[test]
fn a_failed_truncation_takes_the_partition_offline_and_reopen_finds_a_prefix() {
    use tributary_storage::io::faults::{self, FileOp};
    on_executor(move |path| async move {
        let pdir = path.join("truncfault-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..100 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(200).await.unwrap();
        let before = replica_batches(&p).await;
        let pattern = pdir.display().to_string();
        faults::inject(&pattern, FileOp::Sync, 5, None);
        let err = p.truncate_to(60).await.unwrap_err();
        assert!(matches!(err, PartitionError::Storage { .. }), "{err}");
        assert!(p.is_offline());
        faults::clear(&pattern);
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let after = replica_batches(&p).await;
        assert!(after.len() >= 30, "at least what the truncation kept");
        assert_eq!(after[..], before[..after.len()], "a prefix of the old log");
    });
}
