//! A single-voter quorum: leadership at open, ordered outcomes, restart recovery with and
//! without snapshots, and the proposal errors.

mod common;

use std::time::{Duration, Instant};

use common::{config, free_addr, names, run, Names, Node};
use tributary_quorum::{ProposeError, Quorum, COMMAND_BYTES_MAX};

fn single(dir: &std::path::Path) -> tributary_quorum::QuorumConfig {
    config(0, &[(0, free_addr())], None, dir)
}

#[test]
fn single_voter_leads_at_open_applies_in_order_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("meta");
    run(Duration::from_secs(60), move || async move {
        let started = Instant::now();
        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        assert!(q.is_leader(), "a single voter leads when open returns");
        assert_eq!(q.leader(), Some(0));
        assert!(q.term() >= 1);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(q.peer_silence().is_empty(), "no other voters");

        let mut last_index = 0;
        for i in 0..60 {
            let (index, outcome) = q.propose(format!("c{i}").into_bytes()).await.unwrap();
            assert_eq!(outcome, i + 1);
            assert!(index > last_index, "indexes increase");
            last_index = index;
        }
        // Concurrent proposals: each gets its own outcome, in log order.
        let futs: Vec<_> = (60..100)
            .map(|i| q.propose(format!("c{i}").into_bytes()))
            .collect();
        let mut results: Vec<(u64, usize)> = futures::future::join_all(futs)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        results.sort();
        let outcomes: Vec<usize> = results.iter().map(|r| r.1).collect();
        assert_eq!(outcomes, (61..=100).collect::<Vec<_>>());
        assert!(q.applied_index() >= results.last().unwrap().0);
        let before = names(&q);
        assert_eq!(before.len(), 100);
        assert_eq!(before[0], "c0");
        assert_eq!(before[59], "c59");
        q.shutdown().await;
        assert_eq!(
            q.propose(b"late".to_vec()).await,
            Err(ProposeError::Shutdown)
        );

        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        assert!(q.is_leader());
        assert_eq!(names(&q), before, "state restored at open");
        let (_, outcome) = q.propose(b"after".to_vec()).await.unwrap();
        assert_eq!(outcome, 101);
        q.shutdown().await;
    });
}

#[test]
fn single_voter_snapshots_compact_the_log_and_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("meta");
    run(Duration::from_secs(60), move || async move {
        let mut cfg = single(&dir);
        cfg.snapshot_every_entries = 10;
        let q: Node = Quorum::open(cfg.clone(), Names::default()).await.unwrap();
        for i in 0..35 {
            let (_, n) = q.propose(format!("s{i}").into_bytes()).await.unwrap();
            assert_eq!(n, i + 1);
        }
        let snapshot = tributary_storage::io::read_file(&dir.join("raft.snapshot"))
            .await
            .unwrap()
            .expect("a snapshot was written");
        let snapshot = tributary_quorum::storage::decode_snapshot(&snapshot).unwrap();
        assert!(
            snapshot.get_metadata().index >= 30,
            "{:?}",
            snapshot.get_metadata()
        );
        let log = tributary_storage::io::read_file(&dir.join("raft.log"))
            .await
            .unwrap()
            .unwrap();
        let replay = tributary_quorum::storage::replay_log(&log).unwrap();
        assert!(
            replay.entries.len() < 12,
            "the log keeps only entries after the snapshot: {}",
            replay.entries.len()
        );
        let before = names(&q);
        q.shutdown().await;

        let q: Node = Quorum::open(cfg, Names::default()).await.unwrap();
        assert_eq!(
            names(&q),
            before,
            "snapshot + remaining entries restore the state"
        );
        let (_, n) = q.propose(b"more".to_vec()).await.unwrap();
        assert_eq!(n, 36);
        q.shutdown().await;
    });
}

#[test]
fn proposal_errors_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(30), move || async move {
        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        let big = vec![0u8; COMMAND_BYTES_MAX + 1];
        let err = q.propose(big).await.unwrap_err();
        assert!(matches!(err, ProposeError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("split"), "{err}");
        q.shutdown().await;
        q.shutdown().await; // idempotent
        assert_eq!(q.propose(b"x".to_vec()).await, Err(ProposeError::Shutdown));
    });
}

#[test]
fn changed_and_wait_applied_follow_the_applied_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(30), move || async move {
        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        let seen = q.applied_index();
        let watcher = {
            let q = q.clone();
            glommio::spawn_local(async move { q.changed(seen).await })
        };
        let (index, _) = q.propose(b"one".to_vec()).await.unwrap();
        let now = watcher.await;
        assert!(now > seen && now <= index);
        q.wait_applied(index).await;
        assert!(q.applied_index() >= index);
        // A changed() call behind the current index returns at once.
        assert_eq!(q.changed(seen).await, q.applied_index());
        q.shutdown().await;
        // After shutdown neither waits.
        q.wait_applied(u64::MAX).await;
        q.changed(q.applied_index()).await;
    });
}

#[test]
fn open_refuses_a_changed_voter_list() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(30), move || async move {
        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        q.propose(b"x".to_vec()).await.unwrap();
        q.shutdown().await;
        let cfg = config(
            0,
            &[(0, free_addr()), (1, free_addr())],
            Some(free_addr()),
            &dir,
        );
        let err = Quorum::open(cfg, Names::default())
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("membership"), "{err:#}");
    });
}

#[test]
fn a_storage_failure_stops_the_quorum_with_io_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(30), move || async move {
        let q: Node = Quorum::open(single(&dir), Names::default()).await.unwrap();
        q.propose(b"fine".to_vec()).await.unwrap();
        // A directory where the hard-state file goes makes its next replacement fail.
        let state = dir.join("raft.state");
        tributary_storage::io::blocking(move || {
            std::fs::remove_file(&state)?;
            std::fs::create_dir(&state)
        })
        .await
        .unwrap();
        let started = Instant::now();
        let text = loop {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no failure seen"
            );
            match q.propose(b"more".to_vec()).await {
                Ok(_) => glommio::timer::sleep(Duration::from_millis(5)).await,
                Err(ProposeError::Io(text)) => break text,
                Err(other) => panic!("expected an Io error, got {other}"),
            }
        };
        assert!(text.contains("hard state"), "{text}");
        assert!(matches!(
            q.propose(b"again".to_vec()).await,
            Err(ProposeError::Io(_))
        ));
        q.shutdown().await;
    });
}
