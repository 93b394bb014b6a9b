//! Group commit across the partitions of one shard: files that ask to be synced together share
//! one round, and from `syncfs_min_files` files on one filesystem one `syncfs`; errors stay with
//! the file that has them. Each test runs on its own executor, whose sync statistics start at 0.

mod common;

use std::path::Path;
use std::rc::Rc;

use common::on_executor;
use futures::future::join_all;
use tributary_protocol::record_batch::build_batch;
use tributary_storage::group_commit::{self, SyncPolicy, SyncStats};
use tributary_storage::io::faults::{self, FileOp};
use tributary_storage::io::{SegmentFile, WriteDurability};
use tributary_storage::{LogConfig, Partition};

const EIO: i32 = 5;

/// Rounds of `min_files` use syncfs whatever the page cache holds (the tests of this binary run
/// in parallel with builds and each other; the dirty-data bound has its own test).
fn policy(min_files: usize) -> SyncPolicy {
    SyncPolicy {
        syncfs_min_files: min_files,
        syncfs_max_dirty_bytes: u64::MAX,
    }
}

/// `n` segment files in `dir`, each with one block written.
async fn written_files(dir: &Path, n: usize) -> Vec<Rc<SegmentFile>> {
    std::fs::create_dir_all(dir).unwrap();
    let mut files = Vec::new();
    for i in 0..n {
        let f = SegmentFile::open(&dir.join(format!("{i:020}.log")), true)
            .await
            .unwrap();
        let image = f.block_image(format!("file {i}").as_bytes());
        f.write_image(image, 0).await.unwrap();
        files.push(Rc::new(f));
    }
    files
}

async fn sync_all(files: &[Rc<SegmentFile>], policy: SyncPolicy) -> Vec<std::io::Result<()>> {
    join_all(files.iter().map(|f| group_commit::sync(f.clone(), policy))).await
}

fn stats(rounds: u64, files: u64, syncfs: u64, fdatasyncs: u64) -> SyncStats {
    SyncStats {
        rounds,
        files,
        syncfs,
        fdatasyncs,
        syncfs_skipped_dirty: 0,
        written_through: 0,
    }
}

#[test]
fn files_that_ask_together_share_one_round_and_one_syncfs() {
    on_executor(|path| async move {
        let files = written_files(&path.join("shared"), 8).await;
        assert!(sync_all(&files, policy(2)).await.iter().all(|r| r.is_ok()));
        assert_eq!(group_commit::stats(), stats(1, 8, 1, 0));
        // Below the threshold: one round still, an fdatasync per file.
        assert!(sync_all(&files, policy(9)).await.iter().all(|r| r.is_ok()));
        assert_eq!(group_commit::stats(), stats(2, 16, 1, 8));
        // One file alone is synced with its own fdatasync.
        group_commit::sync(files[0].clone(), policy(2))
            .await
            .unwrap();
        assert_eq!(group_commit::stats(), stats(3, 17, 1, 9));
        // Turned off: no rounds, an fdatasync per file at once.
        assert!(sync_all(&files, policy(0)).await.iter().all(|r| r.is_ok()));
        assert_eq!(group_commit::stats(), stats(3, 25, 1, 17));
    });
}

#[test]
fn too_much_dirty_page_cache_makes_a_round_sync_each_file() {
    on_executor(|path| async move {
        let files = written_files(&path.join("dirty"), 4).await;
        let never = SyncPolicy {
            syncfs_min_files: 2,
            syncfs_max_dirty_bytes: 0,
        };
        assert!(sync_all(&files, never).await.iter().all(|r| r.is_ok()));
        let s = group_commit::stats();
        assert_eq!(
            (s.rounds, s.syncfs, s.fdatasyncs, s.syncfs_skipped_dirty),
            (1, 0, 4, 1)
        );
        // A bound no machine reaches: syncfs again.
        assert!(sync_all(&files, policy(2)).await.iter().all(|r| r.is_ok()));
        let s = group_commit::stats();
        assert_eq!(
            (s.rounds, s.syncfs, s.fdatasyncs, s.syncfs_skipped_dirty),
            (2, 1, 4, 1)
        );
    });
}

#[test]
fn dirty_bytes_reads_dirty_and_writeback_from_meminfo() {
    let meminfo = "MemTotal:       24554488 kB\nDirty:               116 kB\nWriteback:            12 kB\nWritebackTmp:          0 kB\n";
    assert_eq!(group_commit::dirty_bytes(meminfo), Some(128 * 1024));
    assert_eq!(
        group_commit::dirty_bytes("Dirty: 1 kB\n"),
        None,
        "no Writeback line"
    );
    assert_eq!(
        group_commit::dirty_bytes("Dirty: x kB\nWriteback: 0 kB\n"),
        None
    );
    let real = std::fs::read_to_string("/proc/meminfo").unwrap();
    assert!(
        group_commit::dirty_bytes(&real).is_some(),
        "this machine's meminfo parses"
    );
}

#[test]
fn a_file_that_asks_during_a_round_is_synced_by_the_next() {
    on_executor(|path| async move {
        let files = written_files(&path.join("next"), 2).await;
        let first = glommio::spawn_local(group_commit::sync(files[0].clone(), policy(2)));
        // Wait until the first round has taken its file and is syncing it.
        while group_commit::stats().rounds == 0 {
            futures_lite::future::yield_now().await;
        }
        group_commit::sync(files[1].clone(), policy(2))
            .await
            .unwrap();
        first.await.unwrap();
        let s = group_commit::stats();
        assert_eq!((s.rounds, s.files), (2, 2), "{s:?}");
        // And the rounds stop when nobody waits: a later sync starts a new one.
        group_commit::sync(files[1].clone(), policy(2))
            .await
            .unwrap();
        assert_eq!(group_commit::stats().rounds, 3);
    });
}

#[test]
fn a_sync_error_in_a_shared_round_fails_only_its_file() {
    on_executor(|path| async move {
        let files = written_files(&path.join("one-fails"), 3).await;
        let failing = files[1].path().display().to_string();
        faults::inject(&failing, FileOp::Sync, EIO, Some(1));
        let results = sync_all(&files, policy(2)).await;
        faults::clear(&failing);
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert_eq!(results[1].as_ref().unwrap_err().raw_os_error(), Some(EIO));
        assert_eq!(group_commit::stats(), stats(1, 3, 1, 0));
    });
}

#[test]
fn a_failed_syncfs_falls_back_to_an_fdatasync_per_file() {
    on_executor(|path| async move {
        let dir = path.join("syncfs-fails");
        let files = written_files(&dir, 3).await;
        let pattern = dir.display().to_string();
        faults::inject(&pattern, FileOp::SyncFs, EIO, Some(1));
        let results = sync_all(&files, policy(2)).await;
        faults::clear(&pattern);
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        assert_eq!(group_commit::stats(), stats(1, 3, 1, 3));

        // When the files' own syncs fail too, each reports its own error.
        faults::inject(&pattern, FileOp::SyncFs, EIO, Some(1));
        let second = files[2].path().display().to_string();
        faults::inject(&second, FileOp::Sync, EIO, Some(2));
        let results = sync_all(&files, policy(2)).await;
        faults::clear(&pattern);
        faults::clear(&second);
        // files[2]'s first error is taken before the syncfs, so it alone fails.
        assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
        assert!(results[2].is_err());
    });
}

/// Partitions committed concurrently, as a shard does for produce requests to different
/// partitions: every commit is durable after a reopen without a clean shutdown, and the rounds
/// covered several partitions each (one round per partition would fail it).
#[test]
fn concurrent_commits_to_different_partitions_share_rounds_and_survive_a_crash() {
    on_executor(|path| async move {
        let dirs: Vec<_> = (0..8).map(|i| path.join(format!("shared-{i}"))).collect();
        let config = LogConfig {
            sync_policy: policy(2),
            ..LogConfig::DEFAULT
        };
        let mut parts = Vec::new();
        for d in &dirs {
            parts.push(Partition::open(d.clone(), config).await.unwrap());
        }
        let rounds = 50;
        for r in 0..rounds {
            join_all(parts.iter().enumerate().map(|(i, p)| async move {
                let v = format!("partition {i} round {r}");
                let b = build_batch(&[(None, Some(v.as_bytes()))], r, None);
                let out = p.append(&b).await.unwrap();
                p.commit(out.last_offset + 1).await.unwrap();
                assert_eq!(p.durable_offset(), out.last_offset + 1);
            }))
            .await;
        }
        let s = group_commit::stats();
        assert_eq!(s.files, 8 * rounds as u64, "{s:?}");
        assert!(
            s.rounds * 2 <= s.files,
            "rounds should cover two or more partitions on average: {s:?}"
        );
        assert!(s.syncfs > 0, "{s:?}");
        // A crash: no close, no clean-shutdown marker.
        drop(parts);
        for d in &dirs {
            let p = Partition::open(d.clone(), LogConfig::DEFAULT)
                .await
                .unwrap();
            assert_eq!(p.high_watermark(), rounds);
        }
    });
}

/// With `WriteDurability::EachWrite` a commit is durable once its writes complete: no sync
/// round and no `fdatasync` for the active segment, for concurrent commits to several
/// partitions; a closed segment is still trimmed and synced. After a crash every committed
/// record is there.
#[test]
fn write_through_commits_need_no_sync_and_survive_a_crash() {
    on_executor(|path| async move {
        let dirs: Vec<_> = (0..4).map(|i| path.join(format!("through-{i}"))).collect();
        let config = LogConfig {
            segment_bytes: 1024,
            sync_policy: policy(2),
            write_durability: WriteDurability::EachWrite,
            zero_ahead_bytes: 64 << 10,
            ..LogConfig::DEFAULT
        };
        let mut parts = Vec::new();
        for d in &dirs {
            parts.push(Partition::open(d.clone(), config).await.unwrap());
        }
        let rounds = 30;
        for r in 0..rounds {
            join_all(parts.iter().enumerate().map(|(i, p)| async move {
                let v = format!("partition {i} round {r}");
                let b = build_batch(&[(None, Some(v.as_bytes()))], r, None);
                let out = p.append(&b).await.unwrap();
                p.commit(out.last_offset + 1).await.unwrap();
                assert_eq!(p.durable_offset(), out.last_offset + 1);
            }))
            .await;
        }
        let s = group_commit::stats();
        assert_eq!(s.written_through, 4 * rounds as u64, "{s:?}");
        let closed: usize = dirs
            .iter()
            .map(|d| common::sorted_segments(d).len() - 1)
            .sum();
        assert!(
            closed >= 4,
            "every partition rolled: {closed} closed segments"
        );
        assert_eq!(
            s.files, closed as u64,
            "only closed segments were synced: {s:?}"
        );
        // A crash: no close, no clean-shutdown marker.
        drop(parts);
        for (i, d) in dirs.iter().enumerate() {
            let p = Partition::open(d.clone(), LogConfig::DEFAULT)
                .await
                .unwrap();
            assert_eq!(p.high_watermark(), rounds, "partition {i}");
        }
    });
}

/// Write-through is only for partitions whose every flush is durable: with `flush.messages`
/// above 1 the active segment keeps plain writes and a durable flush goes through a sync round.
#[test]
fn write_through_is_left_out_where_flushes_need_no_durability() {
    on_executor(|path| async move {
        let config = LogConfig {
            flush_messages: 10,
            sync_policy: policy(2),
            write_durability: WriteDurability::EachWrite,
            ..LogConfig::DEFAULT
        };
        assert_eq!(config.active_durability(), WriteDurability::OnSync);
        let p = Partition::open(path.join("batched"), config).await.unwrap();
        let b = build_batch(&[(None, Some(b"v".as_slice()))], 0, None);
        let out = p.append(&b).await.unwrap();
        p.sync_to(out.last_offset + 1).await.unwrap();
        let s = group_commit::stats();
        assert_eq!((s.written_through, s.files), (0, 1), "{s:?}");
    });
}
