//! Retention, DeleteRecords, time-based rolls and the durability policy, against real segment
//! files on a real glommio executor.

mod common;

use std::rc::Rc;

use common::{on_executor, segment_base, sorted_segments};
use tributary_protocol::record_batch::{build_batch, validate_all};
use tributary_storage::{log_start, LogConfig, Partition, PartitionError};

/// One batch of two records at `timestamp`; each takes 2 offsets.
fn batch_at(i: usize, timestamp: i64) -> Vec<u8> {
    let v = format!("value-{i:06}-{}", "x".repeat(200));
    build_batch(
        &[(None, Some(v.as_bytes())), (Some(b"k"), Some(b"second"))],
        timestamp,
        None,
    )
    .to_vec()
}

const SMALL_SEGMENTS: LogConfig = LogConfig {
    segment_bytes: 4 * 1024,
    retention_ms: -1,
    ..LogConfig::DEFAULT
};

async fn fill(p: &Rc<Partition>, from: usize, n: usize, timestamp: impl Fn(usize) -> i64) {
    for i in from..from + n {
        let out = p.append(&batch_at(i, timestamp(i))).await.unwrap();
        p.commit(out.last_offset + 1).await.unwrap();
    }
}

/// The base offsets of every batch readable from `from` to the high watermark.
async fn readable(p: &Partition, from: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.expect("read");
        for (_, h) in validate_all(&r.records).expect("valid batches") {
            out.push(h.base_offset);
            offset = h.last_offset() + 1;
        }
    }
    out
}

fn out_of_range(r: Result<impl Sized, PartitionError>) -> bool {
    matches!(r, Err(PartitionError::OffsetOutOfRange { .. }))
}

#[test]
fn retention_bytes_deletes_the_oldest_segments_and_the_start_survives_reopen() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        fill(&p, 0, 200, |_| 1_000).await;
        let before = sorted_segments(&pdir);
        assert!(before.len() > 6, "{} segments", before.len());
        let total: u64 = before
            .iter()
            .map(|s| std::fs::metadata(s).unwrap().len())
            .sum();

        // Nothing is due without a limit.
        assert_eq!(p.enforce_retention(i64::MAX / 2).await.unwrap(), 0);
        let limit = (total / 2) as i64;
        p.set_config(LogConfig {
            retention_bytes: limit,
            ..SMALL_SEGMENTS
        });
        let deleted = p.enforce_retention(0).await.unwrap();
        assert!(deleted > 0);
        let after = sorted_segments(&pdir);
        assert_eq!(after.len(), before.len() - deleted);
        let kept: u64 = after
            .iter()
            .map(|s| std::fs::metadata(s).unwrap().len())
            .sum();
        assert!(kept as i64 >= limit, "kept {kept} of limit {limit}");
        let start = p.log_start_offset();
        assert_eq!(start, segment_base(&after[0]));
        assert!(out_of_range(p.read(start - 1, 100).await));
        assert!(out_of_range(p.read(0, 100).await));
        let expected: Vec<i64> = (start / 2..200).map(|i| 2 * i).collect();
        assert_eq!(readable(&p, start).await, expected);
        // A second pass finds nothing more to delete.
        assert_eq!(p.enforce_retention(0).await.unwrap(), 0);
        p.close().await.unwrap();
        drop(p);

        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        assert_eq!(p.log_start_offset(), start);
        assert_eq!(readable(&p, start).await, expected);
        assert_eq!(
            p.append(&batch_at(200, 1_000)).await.unwrap().base_offset,
            400
        );
    });
}

#[test]
fn retention_ms_deletes_old_segments_and_rolls_when_every_segment_is_due() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let config = LogConfig {
            retention_ms: 60_000,
            ..SMALL_SEGMENTS
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        // The first 100 batches are an hour old at "now", the next 100 are fresh.
        let now = 10_000_000i64;
        fill(&p, 0, 100, |_| now - 3_600_000).await;
        fill(&p, 100, 100, |_| now - 1_000).await;
        let deleted = p.enforce_retention(now).await.unwrap();
        assert!(deleted > 0);
        let start = p.log_start_offset();
        // Every deleted segment held only old data; the segment straddling the boundary stays.
        assert!(
            start <= 200,
            "log start {start} passed the first fresh offset"
        );
        assert!(out_of_range(p.read(start - 1, 1).await));
        assert_eq!(readable(&p, start).await.last(), Some(&398));

        // An hour later everything is due: the log rolls so it keeps an empty active segment.
        let later = now + 3_600_000;
        p.enforce_retention(later).await.unwrap();
        assert_eq!(p.log_start_offset(), 400);
        assert_eq!(p.high_watermark(), 400);
        let left = sorted_segments(&pdir);
        assert_eq!(left.len(), 1);
        assert_eq!(segment_base(&left[0]), 400);
        assert!(out_of_range(p.read(398, 1).await));
        assert!(p.read(400, 1).await.unwrap().records.is_empty());
        // An empty log is not rolled again.
        assert_eq!(p.enforce_retention(later).await.unwrap(), 0);
        fill(&p, 200, 3, |_| later).await;
        assert_eq!(readable(&p, 400).await, vec![400, 402, 404]);
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(pdir, config).await.unwrap();
        assert_eq!(p.log_start_offset(), 400);
        assert_eq!(readable(&p, 400).await, vec![400, 402, 404]);
    });
}

#[test]
fn delete_records_moves_the_start_inside_a_segment_and_deletes_segments_below_it() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        fill(&p, 0, 100, |_| 1_000).await;
        let segments = sorted_segments(&pdir);
        let third = segment_base(&segments[2]);
        // Past the high watermark is out of range; below the start is a no-op.
        assert!(out_of_range(p.delete_records(201).await));
        assert_eq!(p.delete_records(0).await.unwrap(), 0);

        let target = third + 3;
        assert_eq!(p.delete_records(target).await.unwrap(), target);
        assert_eq!(p.log_start_offset(), target);
        assert_eq!(sorted_segments(&pdir).len(), segments.len() - 2);
        assert!(out_of_range(p.read(target - 1, 1).await));
        // A fetch at the start gets the batch that contains it.
        let first = readable(&p, target).await[0];
        assert_eq!(first, target - 1);
        // A lower offset later does not move the start back.
        assert_eq!(p.delete_records(4).await.unwrap(), target);
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        assert_eq!(p.log_start_offset(), target);
        // -1 means the high watermark.
        assert_eq!(p.delete_records(-1).await.unwrap(), 200);
        assert_eq!(sorted_segments(&pdir).len(), 1);
        assert!(out_of_range(p.read(199, 1).await));
        fill(&p, 100, 1, |_| 1_000).await;
        assert_eq!(readable(&p, 200).await, vec![200]);
    });
}

#[test]
fn a_checkpoint_written_before_a_crash_deletes_the_rest_on_open() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        fill(&p, 0, 100, |_| 1_000).await;
        p.close().await.unwrap();
        drop(p);
        let segments = sorted_segments(&pdir);
        let fourth = segment_base(&segments[3]);
        // The broker checkpointed a new start, then died before removing the files.
        log_start::write(&pdir, fourth + 1).await.unwrap();
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        assert_eq!(p.log_start_offset(), fourth + 1);
        assert_eq!(sorted_segments(&pdir).len(), segments.len() - 3);
        assert_eq!(readable(&p, fourth + 1).await.last(), Some(&198));
        // A checkpoint past the end of the log (the log lost its tail) is capped at the end.
        p.close().await.unwrap();
        drop(p);
        log_start::write(&pdir, 10_000).await.unwrap();
        let p = Partition::open(pdir.clone(), SMALL_SEGMENTS).await.unwrap();
        assert_eq!(p.log_start_offset(), 200);
        assert_eq!(p.log_end_offset(), 200);
    });
}

#[test]
fn segment_ms_rolls_when_timestamps_span_more_than_it() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let config = LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 10_000,
            ..SMALL_SEGMENTS
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        // 5 s apart: a roll every third batch (a span of 10 s is still within segment.ms).
        fill(&p, 0, 9, |i| 1_000_000 + 5_000 * i as i64).await;
        let bases: Vec<i64> = sorted_segments(&pdir)
            .iter()
            .map(|s| segment_base(s))
            .collect();
        assert_eq!(bases, vec![0, 6, 12]);
        assert_eq!(readable(&p, 0).await.len(), 9);
    });
}

#[test]
fn flush_messages_acknowledges_written_data_and_syncs_every_n_messages() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let config = LogConfig {
            flush_messages: 6,
            ..SMALL_SEGMENTS
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        fill(&p, 0, 2, |_| 1_000).await;
        // Written and visible, not yet synced.
        assert_eq!(p.high_watermark(), 4);
        assert_eq!(p.durable_offset(), 0);
        assert_eq!(readable(&p, 0).await, vec![0, 2]);
        // The third batch brings the unsynced count to 6: that commit syncs.
        fill(&p, 2, 1, |_| 1_000).await;
        assert_eq!(p.durable_offset(), 6);
        fill(&p, 3, 1, |_| 1_000).await;
        assert_eq!((p.high_watermark(), p.durable_offset()), (8, 6));
        // Rolls in this mode keep every batch.
        fill(&p, 4, 60, |_| 1_000).await;
        assert!(sorted_segments(&pdir).len() > 2);
        p.close().await.unwrap();
        assert_eq!(p.durable_offset(), 128);
        drop(p);
        let p = Partition::open(pdir, config).await.unwrap();
        assert_eq!(readable(&p, 0).await.len(), 64);
    });
}

#[test]
fn flush_ms_syncs_written_data_after_the_interval() {
    on_executor(move |path| async move {
        let config = LogConfig {
            flush_messages: i64::MAX,
            flush_ms: 50,
            ..SMALL_SEGMENTS
        };
        let p = Partition::open(path.join("t-0"), config).await.unwrap();
        fill(&p, 0, 3, |_| 1_000).await;
        assert_eq!((p.high_watermark(), p.durable_offset()), (6, 0));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while p.durable_offset() < 6 {
            assert!(
                std::time::Instant::now() < deadline,
                "flush.ms never synced"
            );
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Without flush.ms nothing syncs until flush.messages or close.
        p.set_config(LogConfig {
            flush_ms: i64::MAX,
            ..config
        });
        fill(&p, 3, 1, |_| 1_000).await;
        glommio::timer::sleep(std::time::Duration::from_millis(150)).await;
        assert_eq!((p.high_watermark(), p.durable_offset()), (8, 6));
    });
}
