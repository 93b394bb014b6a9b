//! Transactions on the partition log against real files: transactional batches and markers, the
//! last stable offset, the aborted transaction index, READ_COMMITTED reads, recovery after a
//! crash and after a clean close, follower appends and truncation, retention and compaction.

mod common;

use std::rc::Rc;

use common::{all_batches, on_executor, sorted_segments};
use tributary_protocol::record_batch::{build_batch, validate_all, BatchHeader};
use tributary_storage::producer_state::SequenceError;
use tributary_storage::{LogConfig, Partition, PartitionError};

const CONFIG: LogConfig = LogConfig {
    segment_bytes: 4 * 1024,
    ..LogConfig::DEFAULT
};

/// A batch of two records from `producer` at sequence `seq`; transactional when `txn`.
fn batch(producer: i64, seq: i32, txn: bool, key: &str) -> Vec<u8> {
    let mut b = build_batch(
        &[
            (Some(key.as_bytes()), Some(b"one")),
            (Some(key.as_bytes()), Some(b"two")),
        ],
        1_000,
        Some((producer, 0, seq)),
    )
    .to_vec();
    if txn {
        b[22] |= 0x10;
        tributary_protocol::record_batch::reseal(&mut b, 2);
    }
    b
}

async fn sync(p: &Rc<Partition>) {
    p.sync_to(p.log_end_offset()).await.unwrap();
}

/// (base offset, producer id, is control) of every batch a READ_COMMITTED read returns from
/// `from`, batch after batch.
async fn committed_batches(p: &Partition, from: i64) -> Vec<(i64, i64, bool)> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let r = p.read_committed(offset, 1 << 20, false).await.unwrap();
        let batches = validate_all(&r.records).unwrap();
        let Some((_, last)) = batches.last() else {
            return out;
        };
        offset = last.last_offset() + 1;
        out.extend(
            batches
                .iter()
                .map(|(_, h)| (h.base_offset, h.producer_id, h.is_control())),
        );
    }
}

#[test]
fn the_last_stable_offset_waits_for_the_marker_across_a_crash() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        p.append(&batch(9, 0, false, "plain")).await.unwrap(); // 0..=1
        let first = p.append(&batch(1, 0, true, "a")).await.unwrap(); // 2..=3
        p.append(&batch(9, 2, false, "plain")).await.unwrap(); // 4..=5
        sync(&p).await;
        assert_eq!(first.base_offset, 2);
        assert_eq!(p.high_watermark(), 6);
        assert_eq!(p.last_stable_offset(), 2);
        assert_eq!(p.ongoing_transactions(), vec![(1, 0, 2)]);
        assert_eq!(committed_batches(&p, 0).await, vec![(0, 9, false)]);
        // A fetch between the LSO and the high watermark is not out of range: it is empty.
        assert!(p
            .read_committed(4, 1 << 20, false)
            .await
            .unwrap()
            .records
            .is_empty());
        drop(p); // a crash: no clean shutdown, the active segment is scanned

        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        assert!(!p.open_stats().clean);
        assert_eq!(p.last_stable_offset(), 2);
        assert_eq!(p.ongoing_transactions(), vec![(1, 0, 2)]);
        // A clean close and open: the open transaction comes back from the snapshot in the
        // active segment's index file, without a scan.
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        assert_eq!((p.open_stats().clean, p.open_stats().scanned), (true, 0));
        assert_eq!(p.ongoing_transactions(), vec![(1, 0, 2)]);
        assert_eq!(p.last_stable_offset(), 2);
        let m = p.append_marker(1, 0, true, 0).await.unwrap();
        assert_eq!((m.base_offset, m.last_offset), (6, 6));
        // Appended, not yet durable: the committed transaction still holds the LSO back.
        assert_eq!(p.last_stable_offset(), 2);
        p.commit(7).await.unwrap();
        assert_eq!(p.high_watermark(), 7);
        assert_eq!(p.last_stable_offset(), 7);
        assert!(p.ongoing_transactions().is_empty());
        assert!(p.aborted_transactions(0, 7).is_empty());
        assert_eq!(
            committed_batches(&p, 0).await,
            vec![(0, 9, false), (2, 1, false), (4, 9, false), (6, 1, true)]
        );
        drop(p);
        let p = Partition::open(dir, CONFIG).await.unwrap();
        assert_eq!(p.last_stable_offset(), 7);
    });
}

#[test]
fn aborted_transactions_are_indexed_per_segment_and_survive_restarts() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        let mut seq = [0i32; 4];
        let mut aborts = Vec::new();
        // Many rounds over three producers: 1 and 2 abort, 3 commits, interleaved, across
        // several segments (so closed segments carry markers in their index files).
        for round in 0..40 {
            for pid in 1..=3i64 {
                let s = &mut seq[pid as usize];
                let out = p.append(&batch(pid, *s, true, "k")).await.unwrap();
                *s += 2;
                if pid != 3 {
                    aborts.push((pid, out.base_offset));
                }
            }
            for pid in 1..=3i64 {
                let m = p.append_marker(pid, 0, pid == 3, round).await.unwrap();
                if pid != 3 {
                    let at = aborts
                        .iter()
                        .position(|a| a.0 == pid && a.1 < m.base_offset);
                    assert!(at.is_some());
                }
            }
        }
        sync(&p).await;
        let end = p.high_watermark();
        assert_eq!(p.last_stable_offset(), end);
        assert!(sorted_segments(&dir).len() > 3, "expected rolls");
        let all = p.aborted_transactions(0, end);
        assert_eq!(all, aborts);
        // A window returns only the transactions overlapping it.
        let (from, upto) = (aborts[10].1, aborts[12].1);
        let window = p.aborted_transactions(from, upto);
        assert!(window.contains(&aborts[10]) && window.contains(&aborts[11]));
        assert!(!window.contains(&aborts[12]) && !window.contains(&aborts[0]));
        // A READ_COMMITTED read returns the aborted batches too: the consumer drops them with
        // the list, as Kafka's does.
        assert_eq!(committed_batches(&p, 0).await.len(), 40 * 6);
        drop(p); // crash
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.aborted_transactions(0, end), aborts);
        p.close().await.unwrap();
        drop(p);
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        assert!(p.open_stats().clean);
        assert_eq!(p.aborted_transactions(0, end), aborts);
        // Retention's DeleteRecords removes the front segments and their entries with them.
        let cut = p.delete_records(end / 2).await.unwrap();
        let first_kept = sorted_segments(&dir)[0].clone();
        let first_base = common::segment_base(&first_kept);
        assert!(first_base > 0 && first_base <= cut);
        let left = p.aborted_transactions(0, end);
        assert!(left.len() < aborts.len());
        assert_eq!(left[..], aborts[aborts.len() - left.len()..]);
    });
}

#[test]
fn markers_from_an_older_producer_or_coordinator_epoch_are_refused() {
    on_executor(move |path| async move {
        let p = Partition::open(path.join("t-0"), CONFIG).await.unwrap();
        // A marker for a producer the partition never saw is written, as in Kafka.
        let m = p.append_marker(5, 0, false, 3).await.unwrap();
        assert_eq!(p.aborted_transactions(0, 10), vec![(5, m.base_offset)]);
        let mut b = batch(5, 0, true, "k");
        b[51..53].copy_from_slice(&2i16.to_be_bytes()); // producer epoch 2
        tributary_protocol::record_batch::reseal(&mut b, 2);
        p.append(&b).await.unwrap();
        let end = p.log_end_offset();
        assert!(matches!(
            p.append_marker(5, 1, true, 3).await,
            Err(PartitionError::Sequence(SequenceError::StaleEpoch {
                current: 2,
                got: 1,
                ..
            }))
        ));
        assert!(matches!(
            p.append_marker(5, 2, true, 2).await,
            Err(PartitionError::Sequence(
                SequenceError::CoordinatorFenced { .. }
            ))
        ));
        assert_eq!(p.log_end_offset(), end, "nothing written");
        assert_eq!(p.ongoing_transactions().len(), 1);
        p.append_marker(5, 2, true, 3).await.unwrap();
        assert!(p.ongoing_transactions().is_empty());
    });
}

#[test]
fn a_follower_rebuilds_the_same_state_and_truncation_reopens_transactions() {
    on_executor(move |path| async move {
        let leader = Partition::open(path.join("leader"), CONFIG).await.unwrap();
        let follower = Partition::open(path.join("follower"), CONFIG)
            .await
            .unwrap();
        leader.append(&batch(1, 0, true, "a")).await.unwrap(); // 0..=1
        leader.append(&batch(2, 0, true, "b")).await.unwrap(); // 2..=3
        let abort = leader.append_marker(1, 0, false, 0).await.unwrap(); // 4
        leader.append(&batch(3, 0, true, "c")).await.unwrap(); // 5..=6
        sync(&leader).await;
        while follower.log_end_offset() < leader.log_end_offset() {
            let r = leader
                .read_replica(follower.log_end_offset(), 1 << 20)
                .await
                .unwrap();
            follower.append_as_follower(&r.records).await.unwrap();
        }
        sync(&follower).await;
        assert_eq!(abort.base_offset, 4);
        assert_eq!(leader.aborted_transactions(0, 7), vec![(1, 0)]);
        assert_eq!(follower.aborted_transactions(0, 7), vec![(1, 0)]);
        assert_eq!(follower.ongoing_transactions(), vec![(2, 0, 2), (3, 0, 5)]);
        assert_eq!(follower.last_stable_offset(), 2);
        // Cutting the batch that began producer 3's transaction forgets it; cutting the marker
        // opens producer 1's transaction again and drops its aborted entry.
        follower.truncate_to(5).await.unwrap();
        assert_eq!(follower.ongoing_transactions(), vec![(2, 0, 2)]);
        follower.truncate_to(4).await.unwrap();
        assert_eq!(follower.ongoing_transactions(), vec![(1, 0, 0), (2, 0, 2)]);
        assert!(follower.aborted_transactions(0, 10).is_empty());
        assert_eq!(follower.last_stable_offset(), 0);
    });
}

#[test]
fn the_cleaner_drops_aborted_records_and_keeps_markers() {
    on_executor(move |path| async move {
        let config = LogConfig {
            compact: true,
            retention_ms: -1,
            min_cleanable_dirty_ratio: 0.0,
            ..CONFIG
        };
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), config).await.unwrap();
        let mut seqs = [0i32; 3];
        for round in 0..30 {
            // Producer 1 commits key "c{round}", producer 2 aborts key "c{round}" too: the
            // aborted record is later in the log, but must neither win nor survive.
            for pid in 1..=2i64 {
                let s = &mut seqs[pid as usize];
                p.append(&batch(pid, *s, true, &format!("c{round}")))
                    .await
                    .unwrap();
                *s += 2;
            }
            p.append_marker(1, 0, true, 0).await.unwrap();
            p.append_marker(2, 0, false, 0).await.unwrap();
        }
        // An open transaction at the end: nothing at or past it may be cleaned.
        p.append(&batch(1, seqs[1], true, "open")).await.unwrap();
        sync(&p).await;
        let lso = p.last_stable_offset();
        let stats = p.clean(i64::MAX / 2).await.unwrap().expect("cleaned");
        assert!(stats.records_removed > 0);
        let mut offset = 0;
        let (mut data, mut markers) = (Vec::new(), 0);
        while offset < p.high_watermark() {
            let r = p.read(offset, 1 << 20).await.unwrap();
            let batches = validate_all(&r.records).unwrap();
            let Some((_, last)) = batches.last() else {
                break;
            };
            offset = last.last_offset() + 1;
            for (_, h) in &batches {
                if h.is_control() {
                    markers += 1;
                } else {
                    data.push((h.base_offset, h.producer_id));
                }
            }
        }
        // In the cleaned segments (closed, below the LSO) no batch of producer 2 is left;
        // producer 1's batches and every marker are.
        let active = common::segment_base(sorted_segments(&dir).last().unwrap());
        assert!(active <= lso);
        assert!(data.iter().all(|&(o, pid)| pid == 1 || o >= active));
        let kept = data.iter().filter(|&&(o, _)| o < active).count();
        assert!(kept >= 10, "committed batches kept: {kept}");
        assert!(markers >= 40, "markers kept: {markers}");
        assert_eq!(p.last_stable_offset(), lso);
        // The index still names the aborted transactions (now empty of records), also after a
        // crash and an open.
        assert_eq!(p.aborted_transactions(0, lso).len(), 30);
        drop(p);
        let p = Partition::open(dir, config).await.unwrap();
        assert_eq!(p.aborted_transactions(0, lso).len(), 30);
        assert_eq!(p.last_stable_offset(), lso);
    });
}

#[test]
fn an_open_transaction_in_an_older_segment_comes_back_from_the_snapshots() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        let first = p.append(&batch(1, 0, true, "a")).await.unwrap().base_offset;
        for seq in 0..200 {
            p.append(&batch(2, seq * 2, false, "b")).await.unwrap();
        }
        sync(&p).await;
        assert!(sorted_segments(&dir).len() > 3, "expected rolls");
        // Nothing from the open transaction on is READ_COMMITTED, though all is below the
        // high watermark.
        assert_eq!(first, 0);
        assert!(p
            .read_committed(0, 1 << 20, false)
            .await
            .unwrap()
            .records
            .is_empty());
        assert!(p
            .read_committed(0, 1 << 20, true)
            .await
            .unwrap()
            .records
            .is_empty());
        assert!(!p.read(0, 1 << 20).await.unwrap().records.is_empty());
        drop(p); // crash: the closed segments' index files hold the open transaction
        let p = Partition::open(dir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.open_stats().scanned, 1, "only the active segment");
        assert_eq!(p.ongoing_transactions(), vec![(1, 0, first)]);
        assert_eq!(p.last_stable_offset(), first);
        p.append_marker(1, 0, false, 0).await.unwrap();
        sync(&p).await;
        assert_eq!(p.last_stable_offset(), p.high_watermark());
        assert_eq!(
            p.aborted_transactions(0, p.high_watermark()),
            vec![(1, first)]
        );
        // From an offset past the transaction's first batch, the entry is still named: its
        // marker is after that offset.
        assert_eq!(
            p.aborted_transactions(100, p.high_watermark()),
            vec![(1, first)]
        );
    });
}

/// A compacted log whose markers a pass may remove one second after it finds their
/// transactions empty.
const COMPACTED: LogConfig = LogConfig {
    segment_bytes: 4 * 1024,
    retention_ms: -1,
    compact: true,
    min_cleanable_dirty_ratio: 0.0,
    delete_retention_ms: 1_000,
    ..LogConfig::DEFAULT
};

/// (offset, producer id, delete horizon) of every control batch in the log.
async fn markers(p: &Partition) -> Vec<(i64, i64, Option<i64>)> {
    all_batches(p)
        .await
        .iter()
        .filter(|(h, _)| h.is_control())
        .map(|(h, _)| (h.base_offset, h.producer_id, h.delete_horizon_ms()))
        .collect()
}

/// What a READ_COMMITTED consumer gets from the log start, as Kafka's consumer filters a fetch:
/// (offset, key, value) of each record below the last stable offset, without the records of
/// the aborted transactions the partition names (from a transaction's first offset, its
/// producer's transactional batches are skipped up to that producer's next control batch).
async fn consumed_committed(p: &Partition) -> Vec<(i64, String, String)> {
    let lso = p.last_stable_offset();
    let mut offset = p.log_start_offset();
    let mut pending = p.aborted_transactions(offset, lso);
    pending.sort_by_key(|&(_, first)| first);
    let mut pending = std::collections::VecDeque::from(pending);
    let mut aborting = std::collections::HashSet::new();
    let mut out = Vec::new();
    loop {
        let r = p.read_committed(offset, 1 << 20, false).await.unwrap();
        let batches = validate_all(&r.records).unwrap();
        let Some((_, last)) = batches.last() else {
            return out;
        };
        offset = last.last_offset() + 1;
        for (at, h) in &batches {
            while pending
                .front()
                .is_some_and(|&(_, first)| first <= h.last_offset())
            {
                aborting.insert(pending.pop_front().unwrap().0);
            }
            if h.is_control() {
                aborting.remove(&h.producer_id);
                continue;
            }
            if h.is_transactional() && aborting.contains(&h.producer_id) {
                continue;
            }
            let bytes = &r.records[*at..*at + h.size()];
            let text =
                |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec()).unwrap();
            for rec in tributary_protocol::record_batch::records(bytes).unwrap() {
                out.push((
                    h.base_offset + i64::from(rec.offset_delta),
                    text(rec.key),
                    text(rec.value),
                ));
            }
        }
    }
}

/// The latest committed value of each key a READ_COMMITTED consumer sees.
async fn latest_committed(p: &Partition) -> std::collections::BTreeMap<String, String> {
    consumed_committed(p)
        .await
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect()
}

/// Plain batches overwriting `key` and filler keys, enough to roll a few segments.
async fn overwrite(p: &Rc<Partition>, key: &str, batches: usize) {
    for i in 0..batches {
        let filler = format!("f{}", i % 20);
        p.append(&build_batch(
            &[
                (Some(key.as_bytes()), Some(format!("new-{i}").as_bytes())),
                (Some(filler.as_bytes()), Some(b"x")),
            ],
            1_000,
            None,
        ))
        .await
        .unwrap();
    }
}

#[test]
fn the_cleaner_removes_markers_of_empty_transactions_after_delete_retention() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        // A: producer 1 commits "gone", whose records are overwritten below. B: producer 2
        // aborts "aborted". C: producer 3 commits "live", never overwritten.
        p.append(&batch(1, 0, true, "gone")).await.unwrap(); // 0..=1
        let a = p.append_marker(1, 0, true, 0).await.unwrap().base_offset; // 2
        p.append(&batch(2, 0, true, "aborted")).await.unwrap(); // 3..=4
        let b = p.append_marker(2, 0, false, 0).await.unwrap().base_offset; // 5
        p.append(&batch(3, 0, true, "live")).await.unwrap(); // 6..=7
        let c = p.append_marker(3, 0, true, 0).await.unwrap().base_offset; // 8
                                                                           // Each producer commits again, so none of A, B, C is its producer's last record.
        for pid in 1..=3 {
            p.append(&batch(pid, 2, true, &format!("p{pid}-later")))
                .await
                .unwrap();
            p.append_marker(pid, 0, true, 0).await.unwrap();
        }
        overwrite(&p, "gone", 200).await;
        sync(&p).await;
        assert!(sorted_segments(&dir).len() > 3, "expected rolls");
        let (hw, lso) = (p.high_watermark(), p.last_stable_offset());
        assert_eq!(lso, hw);
        let latest = latest_committed(&p).await;
        assert_eq!(latest["gone"], "new-199");
        assert_eq!(latest["live"], "two");
        assert!(!latest.contains_key("aborted"));
        assert_eq!(p.aborted_transactions(0, lso), vec![(2, 3)]);
        let at = |list: &[(i64, i64, Option<i64>)], offset| {
            list.iter().find(|m| m.0 == offset).map(|m| m.2)
        };

        // Pass 1 drops A's superseded records and B's aborted ones; their markers stay this
        // pass (it read their data), unstamped, and B keeps its aborted-index entry.
        let t = 10_000;
        let first = p.clean(t).await.unwrap().expect("a pass");
        assert!(first.records_removed > 0);
        assert_eq!(first.markers_removed, 0);
        let m = markers(&p).await;
        assert_eq!(m.len(), 6, "{m:?}");
        assert_eq!(
            (at(&m, a), at(&m, b), at(&m, c)),
            (Some(None), Some(None), Some(None))
        );
        assert_eq!(p.aborted_transactions(0, lso), vec![(2, 3)]);
        let data: Vec<i64> = all_batches(&p)
            .await
            .iter()
            .filter(|(h, _)| !h.is_control() && h.base_offset < 9)
            .map(|(h, _)| h.base_offset)
            .collect();
        assert_eq!(
            data,
            vec![6],
            "only C's data is left among the first transactions"
        );
        let consumed = consumed_committed(&p).await;
        assert_eq!(latest_committed(&p).await, latest);

        // Pass 2 finds A and B empty: stamped delete.retention.ms ahead; C is not.
        let second = p.clean(t).await.unwrap().expect("a pass");
        assert_eq!(second.markers_removed, 0);
        let m = markers(&p).await;
        let horizon = Some(Some(t + COMPACTED.delete_retention_ms));
        assert_eq!(
            (at(&m, a), at(&m, b), at(&m, c)),
            (horizon, horizon, Some(None))
        );
        // Before the horizon they stay, however often the cleaner runs.
        for _ in 0..2 {
            let s = p.clean(t + 999).await.unwrap().expect("a pass");
            assert_eq!(s.markers_removed, 0);
        }
        assert_eq!(markers(&p).await, m);
        assert_eq!(p.aborted_transactions(0, lso), vec![(2, 3)]);

        // At the horizon A's and B's markers go, and B's aborted-index entry with its marker;
        // C's marker stays while its records do, and so do the later transactions' markers.
        let third = p.clean(t + 1_000).await.unwrap().expect("a pass");
        assert_eq!(third.markers_removed, 2, "{third:?}");
        let m = markers(&p).await;
        assert_eq!((at(&m, a), at(&m, b), at(&m, c)), (None, None, Some(None)));
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(p.aborted_transactions(0, lso).is_empty());
        // Offsets, the high watermark and the last stable offset are unchanged, and a
        // READ_COMMITTED consumer gets the very records it got before the markers went.
        assert_eq!((p.high_watermark(), p.last_stable_offset()), (hw, lso));
        assert_eq!(consumed_committed(&p).await, consumed);
        assert_eq!(latest_committed(&p).await, latest);
        // C keeps its marker however late the cleaner runs.
        p.clean(i64::MAX / 2).await.unwrap().expect("a pass");
        assert_eq!(at(&markers(&p).await, c), Some(None));
        let m = markers(&p).await;

        // A crash and an open read the same log: from the index files, then with every index
        // file gone, scanning and replaying each segment's batches.
        drop(p);
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        assert_eq!(markers(&p).await, m);
        assert!(p.aborted_transactions(0, lso).is_empty());
        assert_eq!((p.high_watermark(), p.last_stable_offset()), (hw, lso));
        assert!(p.ongoing_transactions().is_empty());
        assert_eq!(consumed_committed(&p).await, consumed);
        p.close().await.unwrap();
        drop(p);
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "index") {
                std::fs::remove_file(f).unwrap();
            }
        }
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        let stats = p.open_stats();
        assert_eq!(
            stats.scanned, stats.segments,
            "every segment scanned: {stats:?}"
        );
        assert_eq!(markers(&p).await, m);
        assert!(p.aborted_transactions(0, lso).is_empty());
        assert!(p.ongoing_transactions().is_empty());
        assert_eq!(p.last_stable_offset(), p.high_watermark());
        assert_eq!(consumed_committed(&p).await, consumed);
    });
}

#[test]
fn a_producers_last_marker_stays_until_the_producer_is_forgotten() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        p.append(&batch(5, 0, true, "solo")).await.unwrap(); // 0..=1
        let marker = p.append_marker(5, 0, false, 0).await.unwrap().base_offset; // 2
        overwrite(&p, "solo", 200).await;
        sync(&p).await;
        let lso = p.last_stable_offset();
        // Its transaction is aborted, but its batch is producer 5's last data batch: it stays,
        // emptied of its records, for the producer's epoch and sequence; the marker carries
        // the producer's coordinator epoch. Both stay while the partition remembers the
        // producer, and so does the aborted-index entry.
        for now in [10_000, 10_000, 20_000, i64::MAX / 2] {
            let s = p.clean(now).await.unwrap().expect("a pass");
            assert_eq!(s.markers_removed, 0);
        }
        assert_eq!(markers(&p).await, vec![(marker, 5, None)]);
        assert_eq!(p.aborted_transactions(0, lso), vec![(5, 0)]);
        let producer_batches = |all: &[(BatchHeader, Vec<u8>)]| -> Vec<(i64, i64, i32)> {
            all.iter()
                .filter(|(h, _)| h.producer_id == 5 && !h.is_control())
                .map(|(h, _)| (h.base_offset, h.last_offset(), h.records_count))
                .collect()
        };
        assert_eq!(producer_batches(&all_batches(&p).await), vec![(0, 1, 0)]);
        // Forgotten (idle past producer.id.expiration.ms), it protects nothing: the next pass
        // removes the empty batch (the marker stays that pass, which read a batch of its
        // transaction), the one after stamps the marker, the first at its horizon removes it.
        let later = i64::MAX / 4;
        assert_eq!(p.expire_producers(later), 1);
        let s = p.clean(30_000).await.unwrap().expect("a pass");
        assert_eq!(s.empty_batches_removed, 1, "{s:?}");
        assert!(producer_batches(&all_batches(&p).await).is_empty());
        assert_eq!(markers(&p).await, vec![(marker, 5, None)]);
        p.clean(30_000).await.unwrap().expect("a pass");
        assert_eq!(markers(&p).await, vec![(marker, 5, Some(31_000))]);
        // New segments meanwhile, and room for them in one: the pass that removes the marker
        // merges its segment with them, and the merged segment's aborted index leaves the
        // entry out.
        overwrite(&p, "solo", 100).await;
        sync(&p).await;
        p.set_config(LogConfig {
            segment_bytes: 64 * 1024,
            ..COMPACTED
        });
        let lso = p.last_stable_offset();
        assert_eq!(p.aborted_transactions(0, lso), vec![(5, 0)]);
        let s = p.clean(31_000).await.unwrap().expect("a pass");
        assert_eq!(s.markers_removed, 1);
        assert!(s.merged > 0, "{s:?}");
        assert!(markers(&p).await.is_empty());
        assert!(p.aborted_transactions(0, lso).is_empty());
        let latest = latest_committed(&p).await;
        assert_eq!(latest["solo"], "new-99");
        drop(p);
        let p = Partition::open(dir, COMPACTED).await.unwrap();
        assert!(markers(&p).await.is_empty());
        assert!(p.aborted_transactions(0, lso).is_empty());
        assert_eq!(latest_committed(&p).await, latest);
    });
}

/// A committed transaction's batch that is its producer's last data batch stays, emptied of its
/// superseded records, and so its marker stays too (its transaction has data). Replaying the
/// log without index files opens the transaction at the empty batch and ends it at the marker:
/// nothing is left open, the last stable offset is the high watermark, and the producer's
/// epoch, last sequence and coordinator epoch come back.
#[test]
fn a_committed_producers_last_batch_stays_empty_with_its_marker() {
    on_executor(move |path| async move {
        let dir = path.join("t-0");
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        // Wall-clock timestamps: an open forgets producers idle past producer.id.expiration.ms.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let data = tributary_protocol::record_batch::build_transactional_batch(
            &[(Some(b"t"), Some(b"one")), (Some(b"t"), Some(b"two"))],
            now,
            (6, 1, 0),
        )
        .to_vec();
        let first = p.append(&data).await.unwrap(); // 0..=1
        let marker = p.append_marker(6, 1, true, 3).await.unwrap().base_offset; // 2
        overwrite(&p, "t", 200).await;
        sync(&p).await;
        let (hw, lso) = (p.high_watermark(), p.last_stable_offset());
        assert_eq!(lso, hw);
        for at in [10_000, 20_000, i64::MAX / 2] {
            let s = p.clean(at).await.unwrap().expect("a pass");
            assert_eq!(s.markers_removed, 0, "{s:?}");
        }
        let producer_batches = |all: &[(BatchHeader, Vec<u8>)]| -> Vec<(i64, i64, i32, bool)> {
            all.iter()
                .filter(|(h, _)| h.producer_id == 6 && !h.is_control())
                .map(|(h, _)| {
                    (
                        h.base_offset,
                        h.last_offset(),
                        h.records_count,
                        h.is_transactional(),
                    )
                })
                .collect()
        };
        assert_eq!(
            producer_batches(&all_batches(&p).await),
            vec![(first.base_offset, first.last_offset, 0, true)]
        );
        assert_eq!(markers(&p).await, vec![(marker, 6, None)]);
        let consumed = consumed_committed(&p).await;
        assert!(consumed.iter().all(|(o, _, _)| *o > marker));
        assert_eq!(latest_committed(&p).await["t"], "new-199");

        // A crash, then an open with every index file gone: every segment is replayed.
        drop(p);
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "index") {
                std::fs::remove_file(f).unwrap();
            }
        }
        let p = Partition::open(dir.clone(), COMPACTED).await.unwrap();
        assert_eq!(p.open_stats().scanned, p.open_stats().segments);
        assert!(p.ongoing_transactions().is_empty());
        assert_eq!((p.high_watermark(), p.last_stable_offset()), (hw, lso));
        let summary: Vec<_> = p
            .producers()
            .iter()
            .map(|s| (s.producer_id, s.epoch, s.last_sequence, s.coordinator_epoch))
            .collect();
        assert_eq!(summary, vec![(6, 1, 1, 3)]);
        assert_eq!(consumed_committed(&p).await, consumed);
        // Its retry is a duplicate; an older epoch is fenced.
        let retry = p.append(&data).await.unwrap();
        assert!(retry.duplicate);
        assert_eq!(retry.base_offset, first.base_offset);
        assert!(matches!(
            p.append_marker(6, 0, true, 3).await,
            Err(PartitionError::Sequence(SequenceError::StaleEpoch { .. }))
        ));
    });
}
