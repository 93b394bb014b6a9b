//! Log compaction against real segment files: the latest record per key survives at its offset,
//! tombstones go after delete.retention.ms, and the log reads and reopens across the gaps.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use common::{all_batches, on_executor, sorted_segments};
use tributary_protocol::record_batch::{build_batch, validate_all};
use tributary_storage::producer_state::SequenceError;
use tributary_storage::{LogConfig, Partition, PartitionError};

const CONFIG: LogConfig = LogConfig {
    segment_bytes: 4 * 1024,
    retention_ms: -1,
    compact: true,
    delete_retention_ms: 60_000,
    ..LogConfig::DEFAULT
};

/// Every record from the log start: offset → (key, value), and the batch timestamps seen.
async fn contents(p: &Partition) -> BTreeMap<i64, (Option<String>, Option<String>)> {
    let mut out = BTreeMap::new();
    let mut offset = p.log_start_offset();
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.expect("read");
        let batches = validate_all(&r.records).expect("valid batches");
        if batches.is_empty() {
            break;
        }
        for (pos, h) in &batches {
            let bytes = &r.records[*pos..*pos + h.size()];
            let mut scratch = Vec::new();
            let recs = tributary_storage::cleaner::batch_records(bytes, &mut scratch, 1 << 20)
                .expect("readable records");
            for rec in recs {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                out.insert(
                    h.base_offset + i64::from(rec.offset_delta),
                    (text(rec.key), text(rec.value)),
                );
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// Writes `n` batches of 3 records over 10 keys; record j of batch i has value `i-j`. Returns
/// what was written at each offset.
async fn fill(
    p: &Rc<Partition>,
    n: usize,
    ts: i64,
) -> BTreeMap<i64, (Option<String>, Option<String>)> {
    let mut written = BTreeMap::new();
    for i in 0..n {
        let keys: Vec<String> = (0..3).map(|j| format!("k{}", (i * 3 + j) % 10)).collect();
        let values: Vec<String> = (0..3).map(|j| format!("{i}-{j}")).collect();
        let recs: Vec<_> = (0..3)
            .map(|j| (Some(keys[j].as_bytes()), Some(values[j].as_bytes())))
            .collect();
        let out = p.append(&build_batch(&recs, ts, None)).await.unwrap();
        for j in 0..3 {
            written.insert(
                out.base_offset + j as i64,
                (Some(keys[j].clone()), Some(values[j].clone())),
            );
        }
        p.sync_to(out.last_offset + 1).await.unwrap();
    }
    written
}

/// Checks a cleaned log against what was written: every record left is unchanged at its offset,
/// each key's last record overall is there, and below `clean_end` no key appears twice.
fn check_compacted(
    got: &BTreeMap<i64, (Option<String>, Option<String>)>,
    written: &BTreeMap<i64, (Option<String>, Option<String>)>,
    clean_end: i64,
) {
    for (o, rec) in got {
        assert_eq!(written.get(o), Some(rec), "offset {o} changed");
    }
    let mut last: HashMap<&Option<String>, i64> = HashMap::new();
    for (o, (k, _)) in written {
        last.insert(k, *o);
    }
    for (k, o) in &last {
        assert!(got.contains_key(o), "latest record of {k:?} at {o} is gone");
    }
    let mut seen = HashMap::new();
    for (o, (k, _)) in got.range(..clean_end) {
        assert!(
            seen.insert(k.clone(), *o).is_none(),
            "key {k:?} twice below {clean_end}"
        );
    }
}

#[test]
fn cleaning_keeps_the_latest_record_per_key_at_its_offset() {
    on_executor(move |path| async move {
        let pdir = path.join("c-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let written = fill(&p, 400, 1_000).await;
        let segments = sorted_segments(&pdir).len();
        assert!(segments > 4);
        assert!(p.needs_cleaning());
        let stats = p.clean(2_000).await.unwrap().expect("a pass");
        assert_eq!(stats.segments, segments - 1, "every closed segment");
        assert!(
            stats.rewritten > 0 && stats.records_removed > 0,
            "{stats:?}"
        );
        assert!(stats.bytes_after < stats.bytes_before / 2, "{stats:?}");
        assert!(!p.needs_cleaning(), "nothing new since the pass");
        // The cleaned segments are small now: the next pass merges them into one, removing
        // nothing; the one after has nothing to do.
        let closed = sorted_segments(&pdir).len() - 1;
        let again = p.clean(2_000).await.unwrap().expect("a pass");
        assert_eq!(again.records_removed, 0, "{again:?}");
        assert_eq!(again.merged, closed - 1, "{again:?}");
        assert_eq!(again.bytes_after, again.bytes_before, "{again:?}");
        assert_eq!(
            sorted_segments(&pdir).len(),
            2,
            "one closed segment and the active one"
        );
        let third = p.clean(2_000).await.unwrap().expect("a pass");
        assert_eq!(
            third.rewritten, 0,
            "a clean log is not rewritten: {third:?}"
        );
        let active_base = common::segment_base(sorted_segments(&pdir).last().unwrap());
        let got = contents(&p).await;
        check_compacted(&got, &written, active_base);
        assert_eq!(p.high_watermark(), 1200);

        // Appends go on after cleaning; a crash and reopen (index files) reads the same, and
        // what the pass cleaned is not dirty again (the cleaner checkpoint).
        let more = fill(&p, 5, 1_000).await;
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(!p.needs_cleaning(), "cleaned before the restart");
        let mut all = written.clone();
        all.extend(more);
        let reopened = contents(&p).await;
        check_compacted(&reopened, &all, active_base);
        assert_eq!(
            reopened.range(..active_base).count(),
            got.range(..active_base).count()
        );
        p.close().await.unwrap();
        drop(p);

        // Without index files every segment is scanned, across the offset gaps.
        for f in std::fs::read_dir(&pdir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "index") {
                std::fs::remove_file(f).unwrap();
            }
        }
        std::fs::remove_file(pdir.join("clean-shutdown")).unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(
            p.open_stats().scanned,
            p.open_stats().segments,
            "every segment"
        );
        assert_eq!(contents(&p).await, reopened);
        assert_eq!(
            p.append(&build_batch(&[(Some(b"k1"), Some(b"x"))], 1, None))
                .await
                .unwrap()
                .base_offset,
            1215
        );
    });
}

#[test]
fn tombstones_stay_for_delete_retention_then_go() {
    on_executor(move |path| async move {
        let p = Partition::open(path.join("c-0"), CONFIG).await.unwrap();
        let put =
            |k: &'static [u8], v: Option<&'static [u8]>| build_batch(&[(Some(k), v)], 10_000, None);
        p.append(&put(b"gone", Some(b"v1"))).await.unwrap();
        p.append(&put(b"gone", None)).await.unwrap();
        p.append(&put(b"kept", Some(b"v"))).await.unwrap();
        fill(&p, 60, 10_000).await; // roll the tombstone into a closed segment
                                    // Within delete.retention.ms of the tombstone's timestamp: the value goes, it stays.
        p.clean(10_000 + 59_000).await.unwrap().expect("a pass");
        let got = contents(&p).await;
        assert!(!got.contains_key(&0), "superseded value");
        assert_eq!(got.get(&1), Some(&(Some("gone".into()), None)));
        assert!(got.contains_key(&2));
        // Later: the tombstone itself goes.
        fill(&p, 60, 10_000).await;
        p.clean(10_000 + 61_000).await.unwrap().expect("a pass");
        let got = contents(&p).await;
        assert!(!got.contains_key(&1), "expired tombstone");
        assert_eq!(got.get(&2), Some(&(Some("kept".into()), Some("v".into()))));
        // A read from offset 0 starts at the first record still there.
        let r = p.read(0, 1).await.unwrap();
        assert_eq!(validate_all(&r.records).unwrap()[0].1.base_offset, 2);
    });
}

#[test]
fn a_segment_emptied_by_cleaning_is_read_past() {
    on_executor(move |path| async move {
        let pdir = path.join("c-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        // The first segments hold only key "x"; everything after overwrites it.
        let big = "z".repeat(1500);
        for _ in 0..6 {
            let o = p
                .append(&build_batch(&[(Some(b"x"), Some(big.as_bytes()))], 1, None))
                .await
                .unwrap();
            p.sync_to(o.last_offset + 1).await.unwrap();
        }
        let o = p
            .append(&build_batch(&[(Some(b"x"), Some(b"last"))], 1, None))
            .await
            .unwrap();
        p.sync_to(o.last_offset + 1).await.unwrap();
        fill(&p, 40, 1).await;
        let stats = p.clean(2).await.unwrap().expect("a pass");
        assert!(stats.rewritten >= 2, "{stats:?}");
        // Offset 0's segment is empty now: a fetch there gets the next record left.
        let r = p.read(0, 1 << 20).await.unwrap();
        let first = validate_all(&r.records).unwrap()[0].1.base_offset;
        assert_eq!(first, 6, "x's last value");
        // A crash after the pass: reopening keeps the same view.
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let r = p.read(0, 1 << 20).await.unwrap();
        assert_eq!(validate_all(&r.records).unwrap()[0].1.base_offset, 6);
    });
}

#[test]
fn an_interrupted_pass_leaves_the_log_as_it_was() {
    on_executor(move |path| async move {
        let pdir = path.join("c-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let written = fill(&p, 60, 1).await;
        drop(p);
        // A crash mid-pass leaves a half-written copy beside the segment it was cleaning.
        let first = &sorted_segments(&pdir)[0];
        std::fs::write(first.with_extension("cleaned"), b"half a segment").unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(!first.with_extension("cleaned").exists());
        assert_eq!(contents(&p).await, written);
    });
}

#[test]
fn a_topic_without_compaction_is_never_cleaned() {
    on_executor(move |path| async move {
        let config = LogConfig {
            compact: false,
            ..CONFIG
        };
        let p = Partition::open(path.join("d-0"), config).await.unwrap();
        let written = fill(&p, 60, 1).await;
        assert!(!p.needs_cleaning());
        assert!(p.clean(i64::MAX).await.unwrap().is_none());
        assert_eq!(contents(&p).await, written);
    });
}

#[test]
fn retention_deletes_segments_the_cleaner_rewrote() {
    on_executor(move |path| async move {
        // compact,delete: cleaned segments are later removed by retention like any other.
        let config = LogConfig {
            retention_bytes: 1,
            retention_ms: -1,
            ..CONFIG
        };
        let pdir = path.join("cd-0");
        let p = Partition::open(pdir.clone(), config).await.unwrap();
        fill(&p, 400, 1_000).await;
        let stats = p.clean(2_000).await.unwrap().expect("a pass");
        assert!(stats.rewritten > 0, "{stats:?}");
        let removed = p.enforce_retention(2_000).await.unwrap();
        assert!(removed > 0, "retention removed cleaned segments");
        assert!(!p.is_offline());
        assert!(p.log_start_offset() > 0);
        let got = contents(&p).await;
        assert!(!got.is_empty());
        assert!(got.keys().all(|o| *o >= p.log_start_offset()));
        drop(p);
        let p = Partition::open(pdir, config).await.unwrap();
        assert_eq!(contents(&p).await, got);
    });
}

#[test]
fn a_merge_interrupted_after_its_commit_is_finished_on_open() {
    on_executor(move |path| async move {
        let pdir = path.join("m-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        fill(&p, 400, 1_000).await;
        p.clean(2_000).await.unwrap().expect("a pass");
        let before_merge = contents(&p).await;
        drop(p);
        // The log as the merging pass finds it, kept aside.
        let copy = path.join("m-1");
        std::fs::create_dir(&copy).unwrap();
        for f in std::fs::read_dir(&pdir).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
        }
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let merge = p.clean(2_000).await.unwrap().expect("a pass");
        assert!(merge.merged > 2, "{merge:?}");
        let merged = contents(&p).await;
        assert_eq!(
            merged, before_merge,
            "merging keeps every record at its offset"
        );
        drop(p);
        let after = sorted_segments(&pdir);
        assert_eq!(after.len(), 2);
        // A crash right after the commit (the merged copy renamed to its .swap name) and after
        // two of the old segments were already removed.
        let (first, end) = (
            common::segment_base(&after[0]),
            common::segment_base(&after[1]),
        );
        std::fs::copy(&after[0], copy.join(format!("{first:020}-{end:020}.swap"))).unwrap();
        let old = sorted_segments(&copy);
        assert!(old.len() > 3);
        std::fs::remove_file(&old[0]).unwrap();
        std::fs::remove_file(&old[1]).unwrap();
        let p = Partition::open(copy.clone(), CONFIG).await.unwrap();
        assert_eq!(sorted_segments(&copy).len(), 2, "the merge was finished");
        assert!(std::fs::read_dir(&copy).unwrap().all(|f| !f
            .unwrap()
            .path()
            .to_string_lossy()
            .ends_with(".swap")));
        assert_eq!(contents(&p).await, merged);
    });
}

/// `batch` (uncompressed, from `build_batch`) with its records section compressed by `codec`, as
/// a producer with `compression.type` set sends it.
fn compressed(batch: &[u8], codec: i16) -> Vec<u8> {
    const HEADER: usize = tributary_protocol::record_batch::RECORD_BATCH_HEADER_BYTES;
    let packed = tributary_storage::codec::compress(codec, &batch[HEADER..], b"").unwrap();
    let mut out = batch[..HEADER].to_vec();
    let attributes = i16::from_be_bytes([out[21], out[22]]) | codec;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&packed);
    let count = tributary_protocol::record_batch::parse_header(batch, 0)
        .unwrap()
        .records_count;
    tributary_protocol::record_batch::reseal(&mut out, count);
    out
}

#[test]
fn compressed_batches_keep_only_their_latest_records() {
    on_executor(move |path| async move {
        for codec in 1..=4i16 {
            let pdir = path.join(format!("z{codec}-0"));
            let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
            // Batches of 3 records over 10 keys, each batch compressed: all but the last few
            // are wholly superseded by later ones.
            let mut latest: HashMap<String, (i64, String)> = HashMap::new();
            for i in 0..400 {
                let keys: Vec<String> = (0..3).map(|j| format!("k{}", (i * 3 + j) % 10)).collect();
                let values: Vec<String> = (0..3)
                    .map(|j| format!("{i}-{j}-{}", "v".repeat(40)))
                    .collect();
                let recs: Vec<_> = (0..3)
                    .map(|j| (Some(keys[j].as_bytes()), Some(values[j].as_bytes())))
                    .collect();
                let b = compressed(&build_batch(&recs, 1_000, None), codec);
                let out = p.append(&b).await.unwrap();
                p.sync_to(out.last_offset + 1).await.unwrap();
                for j in 0..3 {
                    latest.insert(
                        keys[j].clone(),
                        (out.base_offset + j as i64, values[j].clone()),
                    );
                }
            }
            let before = contents(&p).await;
            assert_eq!(before.len(), 1200, "codec {codec}");
            let stats = p.clean(2_000).await.unwrap().expect("a pass");
            assert!(stats.records_removed > 900, "codec {codec}: {stats:?}");
            let active_base = common::segment_base(sorted_segments(&pdir).last().unwrap());
            let check = |got: &BTreeMap<i64, (Option<String>, Option<String>)>| {
                // Every latest record is there at its offset, and below the active segment
                // (the cleaned range) each key once: batches that kept some records were
                // recompressed without the others.
                for (key, (offset, value)) in &latest {
                    assert_eq!(
                        got.get(offset),
                        Some(&(Some(key.clone()), Some(value.clone()))),
                        "codec {codec}"
                    );
                }
                let mut seen = std::collections::HashSet::new();
                for (offset, (key, _)) in got.range(..active_base) {
                    assert!(seen.insert(key), "codec {codec}: {key:?} again at {offset}");
                }
                for (offset, rec) in got {
                    assert_eq!(before.get(offset), Some(rec), "codec {codec}: unchanged");
                }
            };
            let got = contents(&p).await;
            check(&got);
            drop(p);
            let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
            assert_eq!(contents(&p).await, got, "codec {codec}: reopened");
        }
    });
}

/// Milliseconds since the epoch: an open forgets producers idle past
/// `producer.id.expiration.ms` by the wall clock, so batches that must outlive a reopen carry it.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A batch of idempotent producer `pid` at `epoch` from sequence `seq`, one record per key,
/// timestamps `ts`, `ts + 1`, ...
fn produced(pid: i64, epoch: i16, seq: i32, keys: &[&str], ts: i64) -> Vec<u8> {
    let recs: Vec<_> = keys
        .iter()
        .map(|k| (Some(k.as_bytes()), Some(&b"produced"[..])))
        .collect();
    build_batch(&recs, ts, Some((pid, epoch, seq))).to_vec()
}

/// Every batch from the log start, by header.
async fn headers(p: &Partition) -> Vec<tributary_protocol::record_batch::BatchHeader> {
    all_batches(p).await.into_iter().map(|(h, _)| h).collect()
}

/// Kafka's cleaner keeps the batch holding each remembered producer's last offset, as an empty
/// batch when none of its records survives, so that the producer's epoch and last sequence
/// survive in the log: a rebuild of the producer state from it (index files lost, or a replica
/// copying it) still recognises the producer's retry and refuses a gap.
#[test]
fn a_remembered_producers_last_batch_stays_empty_and_keeps_its_sequence() {
    on_executor(move |path| async move {
        let pdir = path.join("c-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let now = wall_clock_ms();
        // Producer 7 (epoch 2): two batches; its last, gzip-compressed, at sequences 2..=4.
        // Producer 8: one batch, idle long enough to be forgotten.
        let a = p
            .append(&produced(7, 2, 0, &["x", "y"], now))
            .await
            .unwrap();
        let last = compressed(&produced(7, 2, 2, &["x", "y", "z"], now), 1);
        let b = p.append(&last).await.unwrap();
        let c = p.append(&produced(8, 0, 0, &["u"], 1_000)).await.unwrap();
        // Later records from no producer supersede every one of theirs, rolling segments.
        for i in 0..150 {
            let key = ["x", "y", "z", "u"][i % 4];
            let value = format!("later-{i}");
            let filler = format!("f{}", i % 10);
            let recs = [
                (Some(key.as_bytes()), Some(value.as_bytes())),
                (Some(filler.as_bytes()), Some(&b"pad"[..])),
            ];
            p.append(&build_batch(&recs, now + 1, None)).await.unwrap();
        }
        p.sync_to(p.log_end_offset()).await.unwrap();
        assert!(sorted_segments(&pdir).len() > 3, "expected rolls");
        assert_eq!(p.expire_producers(now), 1, "producer 8 is idle");

        let stats = p.clean(now).await.unwrap().expect("a pass");
        assert_eq!(stats.batches_emptied, 1, "{stats:?}");
        let kept: Vec<_> = headers(&p)
            .await
            .into_iter()
            .filter(|h| h.has_producer_id())
            .collect();
        assert_eq!(kept.len(), 1, "only producer 7's last batch: {kept:?}");
        let e = kept[0];
        assert_eq!(
            (e.base_offset, e.last_offset()),
            (b.base_offset, b.last_offset)
        );
        assert_eq!(
            (e.producer_id, e.producer_epoch, e.base_sequence),
            (7, 2, 2)
        );
        assert_eq!((e.records_count, e.compression()), (0, 0));
        assert_eq!(e.max_timestamp, now + 2, "the batch's max timestamp stays");
        // Its records went, as removed records; none is read back.
        assert!(stats.records_removed >= 6, "{stats:?}");
        let got = contents(&p).await;
        assert!((a.base_offset..=c.last_offset).all(|o| !got.contains_key(&o)));
        // Reads: a removed offset before it gets the empty batch, the next offset there is; an
        // offset inside it gets it too.
        for at in [a.base_offset, b.base_offset + 1] {
            let r = p.read(at, 1 << 20).await.unwrap();
            assert_eq!(validate_all(&r.records).unwrap()[0].1, e, "read at {at}");
        }
        // A timestamp lookup passes it (its max timestamp is no record's) for the first record
        // left, all of whose timestamps are later.
        let first_left = *got.keys().next().unwrap();
        assert!(first_left > b.last_offset);
        let (offset, ts) = p.offset_for_timestamp(now).await.unwrap().expect("found");
        assert_eq!(offset, first_left, "({offset}, {ts})");
        assert!(ts > now);
        // A second pass keeps it, counting nothing.
        let again = p.clean(now).await.unwrap().expect("a pass");
        assert_eq!((again.batches_emptied, again.empty_batches_removed), (0, 0));
        assert_eq!(
            headers(&p)
                .await
                .iter()
                .filter(|h| h.has_producer_id())
                .count(),
            1
        );

        // A replica copying the cleaned log learns producer 7's epoch and last sequence.
        let replica = Partition::open(path.join("r-0"), CONFIG).await.unwrap();
        let mut offset = 0;
        while offset < p.log_end_offset() {
            let r = p.read_replica(offset, 1 << 20).await.unwrap();
            offset = replica.append_as_follower(&r.records).await.unwrap();
        }
        let state = |p: &Partition| {
            p.producers()
                .iter()
                .map(|s| (s.producer_id, s.epoch, s.last_sequence))
                .collect::<Vec<_>>()
        };
        assert_eq!(state(&replica), vec![(7, 2, 4)]);

        // A crash, then an open with every index file gone: the producer state is rebuilt by
        // replaying the segments, the empty batch among them.
        drop(p);
        for f in std::fs::read_dir(&pdir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "index") {
                std::fs::remove_file(f).unwrap();
            }
        }
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.open_stats().scanned, p.open_stats().segments);
        assert_eq!(state(&p), vec![(7, 2, 4)]);
        // Producer 7's retry of its last batch is a duplicate, answered with its offsets; a gap
        // is refused; its next batch in order is appended.
        let retry = p.append(&last).await.unwrap();
        assert!(retry.duplicate);
        assert_eq!(
            (retry.base_offset, retry.last_offset),
            (b.base_offset, b.last_offset)
        );
        let gap = p.append(&produced(7, 2, 6, &["x"], now)).await;
        assert!(
            matches!(
                gap,
                Err(PartitionError::Sequence(SequenceError::OutOfOrder {
                    expected: 5,
                    ..
                }))
            ),
            "{gap:?}"
        );
        let next = p.append(&produced(7, 2, 5, &["x"], now)).await.unwrap();
        assert!(!next.duplicate);
        p.sync_to(p.log_end_offset()).await.unwrap();

        // Its last batch is now a later one: the next pass removes the empty batch.
        let stats = p.clean(now).await.unwrap().expect("a pass");
        assert_eq!(stats.empty_batches_removed, 1, "{stats:?}");
        let left: Vec<i64> = headers(&p)
            .await
            .iter()
            .filter(|h| h.has_producer_id())
            .map(|h| h.base_offset)
            .collect();
        assert_eq!(left, vec![next.base_offset]);
    });
}
