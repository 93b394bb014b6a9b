//! Sparse indexes, index files and clean shutdown, against real segment files.

mod common;

use std::rc::Rc;

use common::{on_executor, sorted_segments};
use tributary_protocol::record_batch::{build_batch, validate_all};
use tributary_storage::{LogConfig, Partition};

/// Batch `i`: `1 + i % 3` records of ~100 bytes, and its max timestamp; timestamps go up and
/// down from batch to batch.
fn batch(i: usize, producer: Option<(i64, i16, i32)>) -> (Vec<u8>, i64) {
    let ts = 1_000_000 + (i as i64 * 7919) % 5000;
    let v = format!("v{i:05}-{}", "y".repeat(90));
    let n = 1 + i % 3;
    let records: Vec<_> = (0..n).map(|_| (None, Some(v.as_bytes()))).collect();
    // Each record's timestamp delta is its index.
    (
        build_batch(&records, ts, producer).to_vec(),
        ts + n as i64 - 1,
    )
}

const CONFIG: LogConfig = LogConfig {
    segment_bytes: 16 * 1024,
    index_interval_bytes: 1024,
    retention_ms: -1,
    ..LogConfig::DEFAULT
};

/// Appends `n` batches; returns (base offset, last offset, timestamp) per batch.
async fn fill(p: &Rc<Partition>, n: usize) -> Vec<(i64, i64, i64)> {
    let mut out = Vec::new();
    for i in 0..n {
        let (b, ts) = batch(i, None);
        let o = p.append(&b).await.unwrap();
        out.push((o.base_offset, o.last_offset, ts));
    }
    p.sync_to(out.last().unwrap().1 + 1).await.unwrap();
    out
}

/// Every offset, read with a small and a large limit, starts with the batch holding it.
async fn check_reads(p: &Partition, batches: &[(i64, i64, i64)]) {
    for &(base, last, _) in batches {
        for offset in base..=last {
            for max in [1, 1 << 20] {
                let r = p.read(offset, max).await.unwrap();
                let got = validate_all(&r.records).unwrap();
                assert_eq!(got[0].1.base_offset, base, "offset {offset} max {max}");
                if max == 1 {
                    assert_eq!(got.len(), 1);
                }
            }
        }
    }
}

/// What a scan of every record would answer for a timestamp lookup: record `k` of a batch has
/// timestamp `max - (last - base) + k`.
fn expected_for(batches: &[(i64, i64, i64)], target: i64) -> Option<(i64, i64)> {
    batches.iter().find_map(|&(base, last, max)| {
        (base..=last)
            .map(|o| (o, max - (last - o)))
            .find(|&(_, ts)| ts >= target)
    })
}

#[test]
fn reads_and_timestamp_lookups_go_through_the_sparse_index() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let batches = fill(&p, 300).await;
        assert!(sorted_segments(&pdir).len() > 3);
        check_reads(&p, &batches).await;
        for target in (999_000..1_006_000).step_by(97) {
            assert_eq!(
                p.offset_for_timestamp(target).await.unwrap(),
                expected_for(&batches, target),
                "timestamp {target}"
            );
        }
        // About one entry per KiB of log, not one per batch.
        let bytes: u64 = sorted_segments(&pdir)
            .iter()
            .map(|s| std::fs::metadata(s).unwrap().len())
            .sum();
        assert!(p.index_heap_bytes() < (bytes as usize / 1024 + 16) * 48);
    });
}

#[test]
fn closed_segments_reopen_from_index_files_and_a_clean_shutdown_skips_the_scan() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let batches = fill(&p, 300).await;
        let segments = sorted_segments(&pdir).len();
        let indexes = std::fs::read_dir(&pdir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "index")
            })
            .count();
        assert_eq!(
            indexes,
            segments - 1,
            "every closed segment has an index file"
        );
        drop(p); // a crash: no clean shutdown

        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let stats = p.open_stats();
        assert_eq!(
            (stats.segments, stats.scanned, stats.clean),
            (segments, 1, false)
        );
        check_reads(&p, &batches).await;
        p.close().await.unwrap();
        drop(p);

        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let stats = p.open_stats();
        assert_eq!((stats.scanned, stats.clean), (0, true));
        check_reads(&p, &batches).await;
        assert_eq!(
            p.offset_for_timestamp(1_002_500).await.unwrap(),
            expected_for(&batches, 1_002_500)
        );
        // Appends after a clean start, then a crash: the old active index must not be trusted.
        let (b, _) = batch(300, None);
        let extra = p.append(&b).await.unwrap();
        p.sync_to(extra.last_offset + 1).await.unwrap();
        drop(p);
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(!p.open_stats().clean);
        assert_eq!(p.high_watermark(), extra.last_offset + 1);
        let r = p.read(extra.base_offset, 1 << 20).await.unwrap();
        assert_eq!(validate_all(&r.records).unwrap().len(), 1);
    });
}

#[test]
fn a_damaged_index_file_is_rebuilt_by_scanning() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let batches = fill(&p, 200).await;
        p.close().await.unwrap();
        drop(p);
        let index = sorted_segments(&pdir)[1].with_extension("index");
        let mut bytes = std::fs::read(&index).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&index, &bytes).unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        // The damaged segment and every one after it are scanned: producer state (and with it
        // the first offsets of aborted transactions) is replayed from the snapshot before it.
        let segments = sorted_segments(&pdir).len();
        assert_eq!(p.open_stats().scanned, segments - 1);
        check_reads(&p, &batches).await;
        drop(p);
        // The rebuilt file was saved: the next open trusts it.
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(
            p.open_stats().scanned,
            1,
            "only the active segment (unclean)"
        );
    });
}

#[test]
fn producer_state_comes_back_from_the_snapshot_in_an_index_file() {
    // These batches carry 1970 timestamps, which expire a producer at once; expiry is tested in
    // partition.rs.
    const CONFIG: LogConfig = LogConfig {
        producer_id_expiration_ms: i64::MAX,
        ..self::CONFIG
    };
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        // Producer 7's batches all land in the first segments; other data rolls past them.
        let mut seq = 0;
        let mut last = (0, None);
        for i in 0..5 {
            let (b, _) = batch(i, Some((7, 0, seq)));
            last = (seq, Some(p.append(&b).await.unwrap()));
            seq += (1 + i % 3) as i32;
        }
        let (last_seq, last_out) = (last.0, last.1.unwrap());
        let retry = || batch(4, Some((7, 0, last_seq))).0;
        let last_dup = p.append(&retry()).await.unwrap();
        assert!(last_dup.duplicate);
        assert_eq!(last_dup.base_offset, last_out.base_offset);
        fill(&p, 300).await;
        assert!(sorted_segments(&pdir).len() > 3);
        drop(p); // a crash: the active segment is scanned, the rest comes from index files
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert_eq!(p.open_stats().scanned, 1);
        let dup = p.append(&retry()).await.unwrap();
        assert!(dup.duplicate, "retry recognised after restart");
        assert_eq!(dup.base_offset, last_dup.base_offset);
        let (b, _) = batch(5, Some((7, 0, seq)));
        assert!(!p.append(&b).await.unwrap().duplicate);
        let (b, _) = batch(6, Some((7, 0, seq + 50)));
        assert!(p.append(&b).await.is_err(), "a gap is still refused");
    });
}

#[test]
fn a_stale_index_file_is_refused_by_its_size() {
    on_executor(move |path| async move {
        let pdir = path.join("t-0");
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let mut batches = fill(&p, 20).await;
        p.close().await.unwrap();
        drop(p);
        // The clean shutdown's index of the active segment, kept aside.
        let active = sorted_segments(&pdir)
            .pop()
            .unwrap()
            .with_extension("index");
        let stale = std::fs::read(&active).unwrap();
        // Reopen, append until that segment is closed, sync; then put the stale index back, as
        // if the removal at open and the index written at the roll had both been lost.
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        let before = sorted_segments(&pdir).len();
        while sorted_segments(&pdir).len() == before {
            let (b, ts) = batch(batches.len(), None);
            let o = p.append(&b).await.unwrap();
            batches.push((o.base_offset, o.last_offset, ts));
        }
        p.sync_to(batches.last().unwrap().1 + 1).await.unwrap();
        drop(p);
        std::fs::write(&active, &stale).unwrap();
        std::fs::write(pdir.join("clean-shutdown"), b"").unwrap();
        let p = Partition::open(pdir.clone(), CONFIG).await.unwrap();
        assert!(
            p.open_stats().scanned >= 1,
            "the stale index is not trusted"
        );
        check_reads(&p, &batches).await;
    });
}
