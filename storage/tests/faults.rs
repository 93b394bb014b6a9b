//! How the log fails and recovers: injected write and sync errors (EIO, ENOSPC), simulated power
//! loss, and batches damaged on disk. Every test names its own directory in the fault rules, so
//! the tests of this binary can run in parallel.

mod common;

use common::{on_executor, segment_base, sorted_segments};
use tributary_protocol::fuzzing::SeededRng;
use tributary_protocol::record_batch::{build_batch, validate_all};
use tributary_storage::io::faults::{self, FileOp};
use tributary_storage::io::WriteDurability;
use tributary_storage::scan::scan_chunk;
use tributary_storage::{LogConfig, Partition, PartitionError};

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

fn value(i: u64) -> String {
    format!("value-{i:08}-{}", "x".repeat((i % 97) as usize))
}

fn batch(i: u64) -> Vec<u8> {
    build_batch(&[(None, Some(value(i).as_bytes()))], 1_000 + i as i64, None).to_vec()
}

const CONFIG: LogConfig = LogConfig {
    segment_bytes: 16 * 1024,
    ..LogConfig::DEFAULT
};

/// Reads every batch from `from` to the high watermark: (offset, value) pairs.
async fn contents(p: &Partition, from: i64) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.expect("read");
        let batches = validate_all(&r.records).expect("valid batches");
        assert!(!batches.is_empty(), "empty read at {offset}");
        for (position, h) in batches {
            let bytes = &r.records[position..position + h.size()];
            let records = tributary_protocol::record_batch::records(bytes).expect("records decode");
            for (k, rec) in records.iter().enumerate() {
                let v = rec.value.as_ref().expect("value");
                out.push((
                    h.base_offset + k as i64,
                    String::from_utf8(v.to_vec()).unwrap(),
                ));
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

fn sync_or_write_failure_is_never_acknowledged(op: FileOp, errno: i32, config: LogConfig) {
    on_executor(move |path| async move {
        let failing = path.join("failing-0");
        let healthy = path.join("healthy-0");
        let p = Partition::open(failing.clone(), config).await.unwrap();
        let q = Partition::open(healthy.clone(), config).await.unwrap();
        for i in 0..10 {
            p.append(&batch(i)).await.unwrap();
        }
        p.sync_to(10).await.unwrap();

        let pattern = failing.display().to_string();
        faults::inject(&pattern, op, errno, None);
        let out = p.append(&batch(10)).await.unwrap();
        let err = p.sync_to(out.last_offset + 1).await.unwrap_err();
        assert!(matches!(err, PartitionError::Storage { .. }), "{err}");
        assert_eq!(p.high_watermark(), 10, "the failed batch is never visible");
        assert!(p.is_offline());
        assert!(matches!(
            p.append(&batch(11)).await,
            Err(PartitionError::Storage { .. })
        ));
        assert!(matches!(
            p.read(0, 100).await,
            Err(PartitionError::Storage { .. })
        ));
        // The other partition on the same executor keeps working.
        q.append(&batch(0)).await.unwrap();
        q.sync_to(1).await.unwrap();
        assert_eq!(contents(&q, 0).await.len(), 1);
        faults::clear(&pattern);
        drop(p);

        // After a restart everything acknowledged is there, intact and contiguous.
        let p = Partition::open(failing, config).await.unwrap();
        let got = contents(&p, 0).await;
        assert!(got.len() >= 10);
        for (i, (offset, v)) in got.iter().enumerate().take(10) {
            assert_eq!((*offset, v.as_str()), (i as i64, value(i as u64).as_str()));
        }
        let next = p.append(&batch(99)).await.unwrap();
        p.sync_to(next.last_offset + 1).await.unwrap();
    });
}

const WRITE_THROUGH: LogConfig = LogConfig {
    write_durability: WriteDurability::EachWrite,
    ..CONFIG
};

#[test]
fn eio_on_sync_takes_only_that_partition_offline() {
    sync_or_write_failure_is_never_acknowledged(FileOp::Sync, EIO, CONFIG);
}

/// With writes through, the sync is part of each write: a failing device flush fails the write.
#[test]
fn eio_on_a_written_through_sync_takes_only_that_partition_offline() {
    sync_or_write_failure_is_never_acknowledged(FileOp::Sync, EIO, WRITE_THROUGH);
}

#[test]
fn enospc_on_write_takes_only_that_partition_offline() {
    sync_or_write_failure_is_never_acknowledged(FileOp::Write, ENOSPC, CONFIG);
    sync_or_write_failure_is_never_acknowledged(FileOp::Write, ENOSPC, WRITE_THROUGH);
}

#[test]
fn eio_on_read_takes_the_partition_offline() {
    on_executor(move |path| async move {
        let pdir = path.join("readfail-0");
        // No tail cache, and more than a block written: offset 0 is read from the disk.
        let config = LogConfig {
            tail_cache_budget_bytes: 0,
            ..CONFIG
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        let mut end = 0;
        for i in 0..100 {
            end = p.append(&batch(i)).await.unwrap().last_offset + 1;
        }
        p.sync_to(end).await.unwrap();
        let pattern = pdir.display().to_string();
        faults::inject(&pattern, FileOp::Read, EIO, Some(1));
        assert!(matches!(
            p.read(0, 100).await,
            Err(PartitionError::Storage { .. })
        ));
        assert!(p.is_offline());
        faults::clear(&pattern);
    });
}

/// Power loss: the disk keeps what was synced and, past it, any mix of the unsynced bytes and
/// garbage. Each round cuts the active segment back to its last synced size, appends a random
/// part of what followed and random bytes, and reopens: every synced record must be there with
/// the same value at the same offset, and appending continues without a gap.
#[test]
fn power_loss_keeps_every_synced_record() {
    power_loss(CONFIG, "powerloss-0");
}

/// The same with zeros written ahead of the active segment's end: a cut may keep some of them,
/// with garbage after.
#[test]
fn power_loss_with_zeros_written_ahead_keeps_every_synced_record() {
    let config = LogConfig {
        zero_ahead_bytes: 64 * 1024,
        ..CONFIG
    };
    power_loss(config, "powerloss-zeros-0");
}

/// The same with every write durable as it completes (`O_DSYNC`) and zeros ahead: the
/// acknowledged records are the ones whose writes completed.
#[test]
fn power_loss_with_writes_through_keeps_every_acknowledged_record() {
    let config = LogConfig {
        zero_ahead_bytes: 64 * 1024,
        write_durability: WriteDurability::EachWrite,
        ..CONFIG
    };
    power_loss(config, "powerloss-through-0");
}

fn power_loss(config: LogConfig, name: &'static str) {
    let mut rng = SeededRng::from_env("power loss");
    on_executor(move |path| async move {
        let pdir = path.join(name);
        let mut next_value = 0u64;
        let mut acknowledged: Vec<(i64, String)> = Vec::new();
        for round in 0..40 {
            let p = Partition::open(pdir.clone(), config).await.unwrap();
            let got = contents(&p, 0).await;
            assert!(
                got.len() >= acknowledged.len(),
                "round {round}: {} records, {} acknowledged",
                got.len(),
                acknowledged.len()
            );
            assert_eq!(
                &got[..acknowledged.len()],
                &acknowledged[..],
                "round {round}"
            );
            // Records recovered beyond the acknowledged ones were written, just not synced
            // before the cut; they count as acknowledged from now on.
            acknowledged = got;
            for _ in 0..1 + rng.below(30) {
                let v = next_value;
                next_value += 1;
                let out = p.append(&batch(v)).await.unwrap();
                assert_eq!(out.base_offset, p.log_end_offset() - 1);
                acknowledged.push((out.base_offset, value(v)));
                if rng.below(4) == 0 {
                    p.sync_to(out.last_offset + 1).await.unwrap();
                }
            }
            let hw = p.high_watermark();
            acknowledged.retain(|(offset, _)| *offset < hw);
            // Unsynced appends: written to disk or not, the cut decides.
            for _ in 0..rng.below(5) {
                p.append(&batch(next_value)).await.unwrap();
                next_value += 1;
            }
            if rng.below(2) == 0 {
                let end = p.log_end_offset();
                // Writes the unsynced tail (its sync may or may not "happen").
                p.sync_to(end).await.unwrap();
            }
            drop(p);
            let active = sorted_segments(&pdir).pop().unwrap();
            let bytes = std::fs::read(&active).unwrap();
            let scan = scan_chunk(&bytes, 0, segment_base(&active));
            let synced_len: usize = scan
                .batches
                .iter()
                .filter(|(e, _)| e.last_offset < hw)
                .map(|(e, _)| e.size as usize)
                .sum();
            let keep = synced_len + rng.below(bytes.len() - synced_len + 1);
            let mut crashed = bytes[..keep].to_vec();
            crashed.extend((0..rng.below(6000)).map(|_| rng.next_u64() as u8));
            std::fs::write(&active, &crashed).unwrap();
        }
    });
}

/// A bit flipped inside a closed segment: the damaged batch is never served, the batches
/// around it are, and later segments are kept.
#[test]
fn a_corrupt_batch_in_a_closed_segment_is_never_served() {
    on_executor(move |path| async move {
        let pdir = path.join("corrupt-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..400 {
            p.append(&batch(i)).await.unwrap();
        }
        p.sync_to(400).await.unwrap();
        let segments = sorted_segments(&pdir);
        assert!(segments.len() >= 3);
        // Damage the 3rd batch of the first segment while the partition is open: the read
        // that reaches it stops before it, and a read starting at it is refused.
        let first = std::fs::read(&segments[0]).unwrap();
        let scan = scan_chunk(&first, 0, 0);
        let victim = scan.batches[2].0;
        let mut damaged = first.clone();
        damaged[(victim.position + u64::from(victim.size) - 3) as usize] ^= 0x40;
        std::fs::write(&segments[0], &damaged).unwrap();
        let r = p.read(0, 1 << 20).await.unwrap();
        let served = validate_all(&r.records).unwrap();
        assert_eq!(served.len(), 2, "stops before the damaged batch");
        assert!(matches!(
            p.read(victim.base_offset, 1 << 20).await,
            Err(PartitionError::Corrupt { .. })
        ));
        p.close().await.unwrap();
        drop(p);

        // Reopened with the closed segment's index file intact, as Kafka reopens it: the
        // segment is not rescanned, and the damage is still caught on read.
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let r = p.read(0, 1 << 20).await.unwrap();
        assert_eq!(validate_all(&r.records).unwrap().len(), 2);
        assert!(matches!(
            p.read(victim.base_offset, 1 << 20).await,
            Err(PartitionError::Corrupt { .. })
        ));
        let second_base = segment_base(&segments[1]);
        assert_eq!(
            contents(&p, second_base).await.len() as i64,
            400 - second_base
        );
        p.close().await.unwrap();
        drop(p);

        // Without its index file the segment is scanned on open: the damaged batch and the
        // rest of its segment are skipped; every later segment is still served, and appends
        // continue after the last offset.
        std::fs::remove_file(segments[0].with_extension("index")).unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(sorted_segments(&pdir).len(), segments.len());
        assert_eq!(p.high_watermark(), 400);
        let got = contents(&p, 0).await;
        assert_eq!(got[..2], [(0, value(0)), (1, value(1))]);
        assert!(got.iter().all(|(o, _)| *o != victim.base_offset));
        let tail: Vec<_> = got.iter().filter(|(o, _)| *o >= second_base).collect();
        assert_eq!(tail.len() as i64, 400 - second_base);
        for (o, v) in tail {
            assert_eq!(v, &value(*o as u64));
        }
        let out = p.append(&batch(400)).await.unwrap();
        assert_eq!(out.base_offset, 400);
    });
}

#[test]
fn short_direct_writes_are_continued_and_nothing_is_lost() {
    on_executor(|path| async move {
        let dir = path.join("short-0");
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        let pattern = dir.display().to_string();
        // Every write of more than one block writes only its first block.
        faults::inject(&pattern, FileOp::ShortWrite, 0, None);
        // Batches of a few KiB each: every flush writes several blocks.
        let big = |i: u64| {
            let v = format!("{}-{}", value(i), "y".repeat(5000 + (i as usize % 7) * 300));
            build_batch(&[(None, Some(v.as_bytes()))], 1_000 + i as i64, None).to_vec()
        };
        for i in 0..12 {
            let out = p.append(&big(i)).await.unwrap();
            p.sync_to(out.last_offset + 1).await.unwrap();
        }
        faults::clear(&pattern);
        assert!(!p.is_offline());
        let before = contents(&p, 0).await;
        assert_eq!(before.len(), 12);
        p.close().await.unwrap();
        // What is on disk is what was acknowledged: reopened, the log holds every batch.
        let p = Partition::open(dir, CONFIG).await.unwrap();
        assert_eq!(contents(&p, 0).await, before);
        for (i, (offset, v)) in before.iter().enumerate() {
            assert_eq!(*offset, i as i64);
            assert!(v.starts_with(&value(i as u64)), "{v:.40}");
        }
    });
}

/// The bytes of a partition's segment files on disk.
fn file_bytes(dir: &std::path::Path) -> u64 {
    sorted_segments(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

#[test]
fn zeros_written_ahead_are_recovered_past_and_trimmed() {
    on_executor(|path| async move {
        let dir = path.join("zeroahead-0");
        const AHEAD: u64 = 256 * 1024;
        let config = LogConfig {
            zero_ahead_bytes: AHEAD,
            ..CONFIG
        };
        let p = Partition::open(dir.clone(), config).await.unwrap();
        let mut acknowledged = 0;
        for i in 0..20 {
            let out = p.append(&batch(i)).await.unwrap();
            p.sync_to(out.last_offset + 1).await.unwrap();
            acknowledged += 1;
        }
        // Small synced flushes run ahead of the data with zeros.
        assert!(
            file_bytes(&dir) >= p.size_bytes() + AHEAD / 2,
            "{} on disk for {} of data",
            file_bytes(&dir),
            p.size_bytes()
        );
        let before = contents(&p, 0).await;
        assert_eq!(before.len(), acknowledged);
        // A crash: no close, the zeros stay; recovery cuts the file back to its last batch.
        drop(p);
        let p = Partition::open(dir.clone(), config).await.unwrap();
        assert_eq!(contents(&p, 0).await, before);
        assert_eq!(file_bytes(&dir), p.size_bytes(), "trimmed by recovery");
        // Enough more to roll segments (16 KiB each): sealed ones are trimmed to their data,
        // and so is the active one at close.
        for i in 20..400 {
            let out = p.append(&batch(i)).await.unwrap();
            p.sync_to(out.last_offset + 1).await.unwrap();
        }
        assert!(sorted_segments(&dir).len() > 3);
        let all = contents(&p, 0).await;
        assert_eq!(all.len(), 400);
        p.close().await.unwrap();
        assert_eq!(
            file_bytes(&dir),
            {
                let q = Partition::open(dir.clone(), config).await.unwrap();
                assert_eq!(contents(&q, 0).await, all);
                let size = q.size_bytes();
                q.close().await.unwrap();
                size
            },
            "every segment trimmed to its data"
        );
    });
}
