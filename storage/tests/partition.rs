//! Partition log against real files with direct I/O, on a real glommio executor.

mod common;

use common::{on_executor, sorted_segments};
use tributary_protocol::fuzzing::SeededRng;
use tributary_protocol::record_batch::{build_batch, validate_all};
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
    ..LogConfig::DEFAULT
};

async fn offsets_in(p: &Partition, from: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.expect("read");
        let batches = validate_all(&r.records).expect("valid batches");
        assert!(!batches.is_empty());
        for (_, h) in batches {
            out.push(h.base_offset);
            offset = h.last_offset() + 1;
        }
    }
    out
}

#[test]
fn append_sync_read_roll_and_reopen() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..300 {
            let out = p.append(&batch(i, None)).await.unwrap();
            assert_eq!(out.base_offset, 2 * i as i64);
            // Nothing is visible before it is durable.
            assert!(p.high_watermark() <= out.base_offset);
            if i % 7 == 0 {
                p.sync_to(out.last_offset + 1).await.unwrap();
                assert_eq!(p.high_watermark(), out.last_offset + 1);
            }
        }
        p.sync_to(600).await.unwrap();
        let offsets = offsets_in(&p, 0).await;
        assert_eq!(offsets, (0..300).map(|i| 2 * i).collect::<Vec<i64>>());
        // A fetch from the middle of a batch starts with that batch.
        let r = p.read(5, 1).await.unwrap();
        assert_eq!(validate_all(&r.records).unwrap()[0].1.base_offset, 4);
        assert!(matches!(
            p.read(601, 10).await,
            Err(PartitionError::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.read(600, 10).await.unwrap().records.len(), 0);
        p.close().await.unwrap();
        drop(p);
        let segments = std::fs::read_dir(&pdir).unwrap().count();
        assert!(segments > 3, "expected rolls, found {segments} segments");

        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.high_watermark(), 600);
        assert_eq!(offsets_in(&p, 0).await.len(), 300);
        let out = p.append(&batch(300, None)).await.unwrap();
        assert_eq!(out.base_offset, 600);
        p.sync_to(602).await.unwrap();
    });
}

#[test]
fn torn_tail_and_garbage_are_truncated_keeping_every_synced_batch() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(
            pdir.clone(),
            LogConfig {
                segment_bytes: 1 << 30,
                ..LogConfig::DEFAULT
            },
        )
        .await
        .unwrap();
        for i in 0..50 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(100).await.unwrap();
        drop(p);
        // Simulate a crash mid-write: half a batch, then garbage, after the synced data.
        let seg = sorted_segments(&pdir).pop().unwrap();
        let synced = std::fs::metadata(&seg).unwrap().len();
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes.truncate(synced as usize);
        let half = batch(50, None);
        bytes.extend_from_slice(&half[..half.len() / 2]);
        bytes.extend((0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        std::fs::write(&seg, &bytes).unwrap();

        let p = Partition::open(
            pdir.clone(),
            LogConfig {
                segment_bytes: 1 << 30,
                ..LogConfig::DEFAULT
            },
        )
        .await
        .unwrap();
        assert_eq!(p.high_watermark(), 100);
        assert_eq!(offsets_in(&p, 0).await.len(), 50);
        let out = p.append(&batch(50, None)).await.unwrap();
        assert_eq!(out.base_offset, 100);
        p.sync_to(102).await.unwrap();
        assert_eq!(offsets_in(&p, 0).await.len(), 51);
    });
}

#[test]
fn idempotent_producer_state_survives_reopen() {
    // These batches carry 1970 timestamps, which expire a producer at once; expiry is tested
    // below.
    const CONFIG: LogConfig = LogConfig {
        producer_id_expiration_ms: i64::MAX,
        ..self::CONFIG
    };
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let first = p.append(&batch(0, Some((42, 0, 0)))).await.unwrap();
        let second = p.append(&batch(1, Some((42, 0, 2)))).await.unwrap();
        p.sync_to(4).await.unwrap();
        let dup = p.append(&batch(0, Some((42, 0, 0)))).await.unwrap();
        assert!(dup.duplicate);
        assert_eq!(dup.base_offset, first.base_offset);
        assert!(matches!(
            p.append(&batch(9, Some((42, 0, 9)))).await,
            Err(PartitionError::Sequence(_))
        ));
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(pdir, CONFIG).await.unwrap();
        let dup = p.append(&batch(1, Some((42, 0, 2)))).await.unwrap();
        assert!(dup.duplicate);
        assert_eq!(dup.base_offset, second.base_offset);
        assert_eq!(p.log_end_offset(), 4);
        let next = p.append(&batch(2, Some((42, 0, 4)))).await.unwrap();
        assert_eq!(next.base_offset, 4);
    });
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A one-record batch with timestamp `ts` from `producer` (id, epoch, sequence).
fn producer_batch(ts: i64, producer: (i64, i16, i32)) -> Vec<u8> {
    build_batch(&[(None, Some(b"idempotent"))], ts, Some(producer)).to_vec()
}

#[test]
fn an_idle_producer_expires_and_stays_gone_after_a_restart() {
    const EXPIRATION_MS: i64 = 60_000;
    const CONFIG: LogConfig = LogConfig {
        producer_id_expiration_ms: EXPIRATION_MS,
        ..self::CONFIG
    };
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let now = now_ms();
        // Producer 42's last batch is two expirations old; producer 43's is current.
        let idle = |seq| producer_batch(now - 2 * EXPIRATION_MS, (42, 0, seq));
        let busy = |seq| producer_batch(now, (43, 0, seq));
        p.append(&idle(0)).await.unwrap();
        p.append(&idle(1)).await.unwrap();
        let busy_first = p.append(&busy(0)).await.unwrap();
        // Roll past them, so older segments' index files hold snapshots naming both.
        for i in 0..200 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(p.log_end_offset()).await.unwrap();
        assert!(sorted_segments(&pdir).len() > 3);
        assert_eq!(p.producer_count(), 2);
        assert!(
            p.append(&idle(1)).await.unwrap().duplicate,
            "known: a retry"
        );

        // Idle for one millisecond less than the expiration: kept.
        assert_eq!(p.expire_producers(now - EXPIRATION_MS - 1), 0);
        assert_eq!(p.expire_producers(now), 1);
        assert_eq!(p.producer_count(), 1);

        // Neither a clean restart nor a crash brings producer 42 back from a snapshot or the
        // replayed log.
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(p.open_stats().clean);
        assert_eq!(p.producer_count(), 1);
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(!p.open_stats().clean);
        assert_eq!(p.producer_count(), 1);

        // Producer 43 still has its history; producer 42 is unknown, so its retry is appended
        // as a new batch (Kafka accepts any sequence from a producer it holds no state for).
        let again = p.append(&busy(0)).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(again.base_offset, busy_first.base_offset);
        let end = p.log_end_offset();
        let retried = p.append(&idle(1)).await.unwrap();
        assert!(!retried.duplicate);
        assert_eq!(retried.base_offset, end);
    });
}

#[test]
fn a_partition_keeps_state_for_at_most_max_producers() {
    const CONFIG: LogConfig = LogConfig {
        producer_state_max_producers: 3,
        ..self::CONFIG
    };
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let now = now_ms();
        let first = |id| producer_batch(now, (id, 0, 0));
        for id in 1..=5 {
            p.append(&first(id)).await.unwrap();
            assert!(p.producer_count() <= 3);
        }
        assert_eq!(p.producer_count(), 3);
        // Producers 1 and 2 were the least recently used: evicted, their retry is new data.
        let end = p.log_end_offset();
        let retried = p.append(&first(1)).await.unwrap();
        assert!(!retried.duplicate);
        assert_eq!(retried.base_offset, end);
        // Producer 5 is still known.
        assert!(p.append(&first(5)).await.unwrap().duplicate);
        p.sync_to(p.log_end_offset()).await.unwrap();
        drop(p);

        // A crash replays the log under the same bound: producers 4, 5 and 1 remain.
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.producer_count(), 3);
        for id in [4, 5, 1] {
            assert!(
                p.append(&first(id)).await.unwrap().duplicate,
                "producer {id}"
            );
        }
        // A lower bound applies at once.
        p.set_config(LogConfig {
            producer_state_max_producers: 1,
            ..CONFIG
        });
        assert_eq!(p.producer_count(), 1);
    });
}

#[test]
fn a_primed_executor_reads_files_created_empty() {
    on_executor(move |path| async move {
        // The first segment of a new partition is created empty; reads must still work.
        let p = Partition::open(path.join("fresh-0"), CONFIG).await.unwrap();
        p.append(&batch(0, None)).await.unwrap();
        p.sync_to(2).await.unwrap();
        assert_eq!(offsets_in(&p, 0).await, vec![0]);
    });
}

#[test]
fn full_blocks_are_written_ahead_but_nothing_is_visible_before_the_sync() {
    on_executor(move |path| async move {
        let pdir = path.join("wa-0");
        let config = LogConfig {
            segment_bytes: 1 << 30,
            write_ahead_bytes: 8192,
            ..LogConfig::DEFAULT
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        let big = "w".repeat(3000);
        let mut last = 0;
        for _ in 0..20 {
            let b = build_batch(&[(None, Some(big.as_bytes()))], 1, None);
            last = p.append(&b).await.unwrap().last_offset;
            glommio::yield_if_needed().await;
        }
        // Let the write-ahead run: the file grows, the high watermark does not move.
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        let on_disk = std::fs::metadata(sorted_segments(&pdir).pop().unwrap())
            .unwrap()
            .len();
        assert!(on_disk >= 8192, "{on_disk} bytes written ahead");
        assert_eq!(p.high_watermark(), 0);
        assert_eq!(p.durable_offset(), 0);
        p.sync_to(last + 1).await.unwrap();
        assert_eq!(p.high_watermark(), 20);
        assert_eq!(offsets_in(&p, 0).await, (0..20).collect::<Vec<i64>>());
        drop(p);
        let p = Partition::open(pdir, config).await.unwrap();
        assert_eq!(offsets_in(&p, 0).await.len(), 20);
    });
}

#[test]
fn sequential_reads_with_read_ahead_see_exactly_what_reads_without_it_see() {
    on_executor(move |path| async move {
        // No tail cache: every read goes to the disk or to a chunk read ahead.
        let with = LogConfig {
            segment_bytes: 64 * 1024,
            tail_cache_budget_bytes: 0,
            ..LogConfig::DEFAULT
        };
        let without = LogConfig {
            read_ahead_budget_bytes: 0,
            ..with
        };
        let p = Partition::open(path.join("ra-0"), with).await.unwrap();
        for i in 0..2000 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(4000).await.unwrap();
        let mut runs = Vec::new();
        for config in [with, without, with] {
            p.set_config(config);
            let hits = p.read_ahead_hits();
            let mut reads = 0u64;
            let mut seen = Vec::new();
            let mut offset = 0;
            while offset < p.high_watermark() {
                // Small fetches, so most of them land on a chunk read ahead.
                let r = p.read(offset, 700).await.unwrap();
                reads += 1;
                let batches = validate_all(&r.records).unwrap();
                for (pos, h) in &batches {
                    seen.push((h.base_offset, r.records[*pos..*pos + h.size()].to_vec()));
                    offset = h.last_offset() + 1;
                }
            }
            let served_ahead = p.read_ahead_hits() - hits;
            if config.read_ahead_budget_bytes > 0 {
                // All but the first read and those crossing into a new segment.
                assert!(
                    served_ahead * 10 > reads * 9,
                    "{served_ahead} of {reads} reads ahead"
                );
            } else {
                assert_eq!(served_ahead, 0);
            }
            runs.push(seen);
        }
        assert_eq!(runs[0].len(), 2000);
        assert_eq!(runs[0], runs[1]);
        assert_eq!(runs[1], runs[2]);
    });
}

#[test]
fn readers_at_the_tail_are_served_from_memory_within_the_budget() {
    on_executor(move |path| async move {
        let config = LogConfig {
            segment_bytes: 1 << 30,
            tail_cache_partition_bytes: 64 * 1024,
            ..LogConfig::DEFAULT
        };
        let p = Partition::open(path.join("tc-0"), config).await.unwrap();
        // A reader following a writer: every batch is read right after it is committed.
        let mut next = 0;
        for i in 0..3000 {
            let out = p.append(&batch(i, None)).await.unwrap();
            p.sync_to(out.last_offset + 1).await.unwrap();
            let r = p.read(next, 1 << 20).await.unwrap();
            let got = validate_all(&r.records).unwrap();
            assert_eq!(got[0].1.base_offset, next);
            next = got.last().unwrap().1.last_offset() + 1;
        }
        assert_eq!(next, 6000);
        // 3000 batches of ~100 bytes are ~300 KiB: the 64 KiB share was let go and refilled.
        let hits = p.tail_cache_hits();
        assert!(hits > 2000, "{hits} of 3000 reads from memory");
        // Every read, from memory or disk, returns what was written.
        assert_eq!(
            offsets_in(&p, 0).await,
            (0..3000).map(|i| 2 * i).collect::<Vec<i64>>()
        );
        // With no budget the tail keeps only its last partial block.
        p.set_config(LogConfig {
            tail_cache_budget_bytes: 0,
            ..config
        });
        for i in 3000..3100 {
            let out = p.append(&batch(i, None)).await.unwrap();
            p.sync_to(out.last_offset + 1).await.unwrap();
        }
        let before = p.tail_cache_hits();
        let _ = p.read(6000, 1 << 20).await.unwrap();
        assert_eq!(p.tail_cache_hits(), before, "read from disk");
    });
}

#[test]
fn batches_of_any_size_straddling_append_buffers_read_back_exactly_from_memory_and_disk() {
    on_executor(move |path| async move {
        let pdir = path.join("chunks-0");
        // Small append buffers and tail share: batches span buffers, buffers fill mid-batch,
        // the tail is let go and refilled, segments roll.
        let config = LogConfig {
            segment_bytes: 200 * 1024,
            write_ahead_bytes: 8192,
            tail_cache_partition_bytes: 24 * 1024,
            ..LogConfig::DEFAULT
        };
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        let mut rng = SeededRng::from_env("append buffers");
        let mut expected: Vec<(i64, Vec<u8>)> = Vec::new();
        for i in 0..600 {
            // Mostly small, some larger than an append buffer.
            let len = match rng.below(10) {
                0 => 8192 + rng.below(12_000),
                1..=3 => 1000 + rng.below(3000),
                _ => 1 + rng.below(300),
            };
            let value = vec![b'a' + (i % 26) as u8; len];
            let b = build_batch(&[(None, Some(&value))], 1_000 + i as i64, None).to_vec();
            let out = p.append(&b).await.unwrap();
            let mut stored = b.clone();
            stored[..8].copy_from_slice(&out.base_offset.to_be_bytes());
            expected.push((out.base_offset, stored));
            if rng.below(4) == 0 {
                p.sync_to(out.last_offset + 1).await.unwrap();
                // A reader at a random committed offset gets exactly the batches from there.
                let k = rng.below(expected.len());
                let r = p.read(expected[k].0, 1 << 20).await.unwrap();
                let got = validate_all(&r.records).unwrap();
                for (n, (pos, h)) in got.iter().enumerate() {
                    assert_eq!(h.base_offset, expected[k + n].0);
                    assert_eq!(&r.records[*pos..*pos + h.size()], &expected[k + n].1[..]);
                }
            }
            glommio::yield_if_needed().await;
        }
        p.sync_to(expected.last().unwrap().0 + 1).await.unwrap();
        let check = |p: std::rc::Rc<Partition>, expected: Vec<(i64, Vec<u8>)>| async move {
            let mut k = 0;
            while k < expected.len() {
                let r = p.read(expected[k].0, 64 * 1024).await.unwrap();
                for (pos, h) in validate_all(&r.records).unwrap() {
                    assert_eq!(h.base_offset, expected[k].0);
                    assert_eq!(&r.records[pos..pos + h.size()], &expected[k].1[..]);
                    k += 1;
                }
            }
        };
        assert!(sorted_segments(&pdir).len() > 3, "segments rolled");
        check(p.clone(), expected.clone()).await;
        drop(p);
        // What reached the disk, read back after a crash (no clean close).
        let p = Partition::open(pdir, config).await.unwrap();
        check(p, expected).await;
    });
}

#[test]
fn read_buffers_travel_to_other_threads_without_a_copy_and_are_released_at_home() {
    on_executor(move |path| async move {
        let pdir = path.join("home-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        for i in 0..200 {
            p.append(&batch(i, None)).await.unwrap();
        }
        p.sync_to(400).await.unwrap();
        p.close().await.unwrap();
        // Reopened: nothing is in memory, every read comes from the disk.
        let p = Partition::open(pdir, CONFIG).await.unwrap();
        let mut reads = Vec::new();
        let mut offset = 0;
        while offset < p.high_watermark() {
            let r = p.read(offset, 1 << 20).await.unwrap();
            offset = validate_all(&r.records)
                .unwrap()
                .last()
                .unwrap()
                .1
                .last_offset()
                + 1;
            reads.push(r.records);
        }
        let n = reads.len();
        assert!(n > 1, "several segments read");
        let before = tributary_storage::io::release_returned_buffers();
        assert_eq!(before, 0);
        // Another thread checks the bytes and drops them: the buffers come back to be released
        // here, by the executor that read them.
        let seen = std::thread::spawn(move || {
            reads
                .iter()
                .map(|r| validate_all(r).unwrap().len())
                .sum::<usize>()
        })
        .join()
        .unwrap();
        assert_eq!(seen, 200);
        assert_eq!(tributary_storage::io::release_returned_buffers(), n);
        assert_eq!(tributary_storage::io::release_returned_buffers(), 0);
    });
}

#[test]
fn visible_bytes_count_what_the_high_watermark_uncovered_and_hard_limits_hold() {
    on_executor(move |path| async move {
        let p = Partition::open(path.join("v-0"), CONFIG).await.unwrap();
        assert_eq!(p.visible_bytes(), 0);
        let sizes: Vec<usize> = (0..40).map(|i| batch(i, None).len()).collect();
        let mut appended = 0;
        for (i, size) in sizes.iter().enumerate() {
            let out = p.append(&batch(i, None)).await.unwrap();
            appended += size;
            // Appended is not visible: the count moves with the high watermark only.
            assert_eq!(p.visible_bytes() as usize, appended - size);
            p.sync_to(out.last_offset + 1).await.unwrap();
            assert_eq!(p.visible_bytes() as usize, appended);
        }
        // Across segment rolls (4 KiB segments), the count is the bytes a read from the start
        // returns.
        let mut read = 0;
        let mut offset = 0;
        while offset < p.high_watermark() {
            let r = p.read(offset, 1 << 20).await.unwrap();
            read += r.records.len();
            offset = validate_all(&r.records)
                .unwrap()
                .last()
                .unwrap()
                .1
                .last_offset()
                + 1;
        }
        assert_eq!(read as u64, p.visible_bytes());
        // A hard limit below the first batch returns nothing; `read` returns that batch anyway.
        let first = sizes[0];
        assert!(p
            .read_within(0, first - 1)
            .await
            .unwrap()
            .records
            .is_empty());
        assert_eq!(p.read(0, first - 1).await.unwrap().records.len(), first);
        let two = p.read_within(0, first + sizes[1]).await.unwrap();
        assert_eq!(two.records.len(), first + sizes[1]);
        assert!(p.read_within(0, 0).await.unwrap().records.is_empty());
    });
}
