//! Three voters on one executor over loopback TCP: election, proposals from a follower,
//! fail-over when the leader stops, and a stopped node catching up — by entries, and by a
//! snapshot when the leader has compacted past it.

mod common;

use std::time::{Duration, Instant};

use common::{agreed_leader, eventually, names, open, run, Cluster, Node, ELECTION};
use tributary_quorum::ProposeError;

#[test]
fn three_voters_elect_replicate_fail_over_and_catch_up() {
    let cluster = Cluster::new();
    run(Duration::from_secs(90), move || async move {
        let mut nodes: Vec<Option<Node>> = Vec::new();
        for id in 0..3 {
            nodes.push(Some(open(cluster.config(id)).await));
        }
        let all: Vec<&Node> = nodes.iter().flatten().collect();
        let leader = agreed_leader(&all, ELECTION * 20).await;
        let follower = (0..3).find(|id| *id != leader).unwrap();
        let fnode = nodes[follower as usize].clone().unwrap();
        assert!(
            fnode.peer_silence().is_empty(),
            "followers report no silences"
        );

        // A proposal made on a follower is applied on all three with the same outcome.
        let (index, outcome) = fnode.propose(b"from-follower".to_vec()).await.unwrap();
        assert_eq!(outcome, 1);
        for n in nodes.iter().flatten() {
            n.wait_applied(index).await;
            assert_eq!(names(n), ["from-follower"]);
        }
        let lnode = nodes[leader as usize].clone().unwrap();
        let (_, outcome) = lnode.propose(b"from-leader".to_vec()).await.unwrap();
        assert_eq!(outcome, 2);
        // Leader-only proposals: refused on a follower and for a term that is not the leader's
        // own, applied on the leader at its term.
        let term = lnode.term();
        assert_eq!(
            fnode.propose_as_leader(b"x".to_vec(), term).await,
            Err(ProposeError::NotLeader { term })
        );
        assert_eq!(
            lnode.propose_as_leader(b"x".to_vec(), term - 1).await,
            Err(ProposeError::NotLeader { term: term - 1 })
        );
        let (index, outcome) = lnode
            .propose_as_leader(b"leader-only".to_vec(), term)
            .await
            .unwrap();
        assert_eq!(outcome, 3);
        fnode.wait_applied(index).await;
        assert_eq!(
            names(&fnode),
            ["from-follower", "from-leader", "leader-only"]
        );
        let silences = lnode.peer_silence();
        assert_eq!(silences.len(), 2);
        for (id, silence) in &silences {
            let silence = silence.expect("each follower has been heard");
            assert!(silence < ELECTION * 5, "node {id} silent for {silence:?}");
        }

        // Stop the leader: another is elected within a few election timeouts.
        let old = nodes[leader as usize].take().unwrap();
        old.shutdown().await;
        drop(old);
        let rest: Vec<&Node> = nodes.iter().flatten().collect();
        let new_leader = agreed_leader(&rest, ELECTION * 15).await;
        assert_ne!(new_leader, leader);
        let mut last = 0;
        for (i, n) in rest.iter().enumerate() {
            let (index, outcome) = n.propose(format!("after-{i}").into_bytes()).await.unwrap();
            assert_eq!(outcome, 4 + i);
            last = index;
        }
        for n in &rest {
            n.wait_applied(last).await;
        }
        let expected = names(rest[0]);
        assert_eq!(names(rest[1]), expected);

        // The new leader sees the stopped node fall silent while the live one keeps talking.
        glommio::timer::sleep(ELECTION * 2).await;
        let new_leader_node = rest.iter().find(|n| n.is_leader()).expect("a leader");
        let silences = new_leader_node.peer_silence();
        let of = |id: i32| {
            silences
                .iter()
                .find(|(n, _)| *n == id)
                .and_then(|(_, s)| *s)
        };
        let stopped = of(leader).expect("the stopped node was heard before it stopped");
        assert!(
            stopped >= ELECTION * 2,
            "stopped node silent only {stopped:?}"
        );
        let current = new_leader_node.leader().expect("it knows itself");
        let live = 3 - leader - current;
        let live = of(live).expect("the live follower is heard");
        assert!(live < ELECTION, "live follower silent for {live:?}");
        assert_eq!(expected.len(), 5);

        // The stopped node reopens from its directory and catches up.
        let back = open(cluster.config(leader)).await;
        let target = rest[0].applied_index();
        eventually(ELECTION * 25, "the reopened node catches up", || {
            back.applied_index() >= target
        })
        .await;
        assert_eq!(names(&back), expected);
        nodes[leader as usize] = Some(back);
        let all: Vec<&Node> = nodes.iter().flatten().collect();
        let final_leader = agreed_leader(&all, ELECTION * 20).await;
        let (_, outcome) = nodes[final_leader as usize]
            .as_ref()
            .unwrap()
            .propose(b"last".to_vec())
            .await
            .unwrap();
        assert_eq!(outcome, 6);
        for n in nodes.iter().flatten() {
            n.shutdown().await;
        }
    });
}

#[test]
fn a_voter_behind_the_compacted_log_catches_up_by_snapshot() {
    let cluster = Cluster::new();
    run(Duration::from_secs(90), move || async move {
        let small = |id: i32| {
            let mut cfg = cluster.config(id);
            cfg.snapshot_every_entries = 5;
            cfg
        };
        let mut nodes: Vec<Option<Node>> = Vec::new();
        for id in 0..3 {
            nodes.push(Some(open(small(id)).await));
        }
        let all: Vec<&Node> = nodes.iter().flatten().collect();
        let leader = agreed_leader(&all, ELECTION * 20).await;
        let lagger = (0..3).find(|id| *id != leader).unwrap();
        let (index, _) = all[0].propose(b"before".to_vec()).await.unwrap();
        for n in &all {
            n.wait_applied(index).await;
        }
        let stopped = nodes[lagger as usize].take().unwrap();
        stopped.shutdown().await;
        drop(stopped);

        let lnode = nodes[leader as usize].clone().unwrap();
        for i in 0..30 {
            lnode
                .propose(format!("while-down-{i}").into_bytes())
                .await
                .unwrap();
        }
        let expected = names(&lnode);
        assert_eq!(expected.len(), 31);

        // Reopened with compaction effectively off, so a snapshot file can only come from the
        // leader.
        let mut cfg = cluster.config(lagger);
        cfg.snapshot_every_entries = 1_000_000;
        let snapshot_path = cfg.dir.join("raft.snapshot");
        assert!(
            tributary_storage::io::read_file(&snapshot_path)
                .await
                .unwrap()
                .is_none(),
            "the lagger took no snapshot of its own before stopping"
        );
        let back = open(cfg).await;
        let target = lnode.applied_index();
        eventually(ELECTION * 25, "the lagging node catches up", || {
            back.applied_index() >= target
        })
        .await;
        assert_eq!(names(&back), expected);
        let snapshot = tributary_storage::io::read_file(&snapshot_path)
            .await
            .unwrap()
            .expect("the leader's snapshot was installed");
        let snapshot = tributary_quorum::storage::decode_snapshot(&snapshot).unwrap();
        assert!(snapshot.get_metadata().index > index);

        // And it survives its own restart from that snapshot.
        back.shutdown().await;
        drop(back);
        let mut cfg = cluster.config(lagger);
        cfg.snapshot_every_entries = 1_000_000;
        let back = open(cfg).await;
        assert!(
            names(&back).len() >= 5,
            "restored from the installed snapshot"
        );
        eventually(ELECTION * 25, "the restarted node catches up again", || {
            back.applied_index() >= target
        })
        .await;
        assert_eq!(names(&back), expected);
        back.shutdown().await;
        for n in nodes.iter().flatten() {
            n.shutdown().await;
        }
    });
}

#[test]
fn proposals_without_a_leader_fail_at_once_and_lost_ones_time_out() {
    let cluster = Cluster::new();
    run(Duration::from_secs(60), move || async move {
        // Alone of three, node 0 never learns a leader.
        let alone = open(cluster.config(0)).await;
        let started = Instant::now();
        assert_eq!(
            alone.propose(b"x".to_vec()).await,
            Err(ProposeError::NoLeader)
        );
        assert!(started.elapsed() < Duration::from_millis(100), "at once");

        let mut nodes = vec![alone];
        for id in 1..3 {
            nodes.push(open(cluster.config(id)).await);
        }
        let all: Vec<&Node> = nodes.iter().collect();
        let leader = agreed_leader(&all, ELECTION * 20).await as usize;
        // Both followers stop: the leader appends the entry but it can never commit.
        for (i, n) in nodes.iter().enumerate() {
            if i != leader {
                n.shutdown().await;
            }
        }
        let started = Instant::now();
        let result = nodes[leader].propose(b"lost".to_vec()).await;
        assert_eq!(result, Err(ProposeError::Timeout));
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "after the proposal timeout"
        );
        nodes[leader].shutdown().await;
    });
}
