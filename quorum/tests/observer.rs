//! Observers (nodes outside the voters, Kafka's broker-only nodes) on one executor with three
//! voters over loopback TCP: catching up at open, proposing through the leader, being heard by
//! the leader, following a new leader after the old one stops, starting from a compacted log
//! (the voter's snapshot), and the admission rule for observer connections.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{agreed_leader, config, eventually, names, open, run, Cluster, Names, Node, ELECTION};
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tributary_quorum::{ProposeError, Quorum, QuorumConfig};

/// The cluster's voters, compacting their logs every 5 entries.
fn voter(cluster: &Cluster, id: i32) -> QuorumConfig {
    let mut cfg = cluster.config(id);
    cfg.snapshot_every_entries = 5;
    cfg
}

#[test]
fn observers_follow_the_log_propose_and_survive_a_leader_change() {
    let cluster = Cluster::new();
    run(Duration::from_secs(90), move || async move {
        let mut voters: Vec<Option<Node>> = Vec::new();
        for id in 0..3 {
            voters.push(Some(open(voter(&cluster, id)).await));
        }
        let all: Vec<&Node> = voters.iter().flatten().collect();
        let leader = agreed_leader(&all, ELECTION * 20).await;
        let lnode = voters[leader as usize].clone().unwrap();
        for i in 0..12 {
            lnode
                .propose(format!("early-{i}").into_bytes())
                .await
                .unwrap();
        }

        // Opened after the voters compacted their logs (every 5 entries): it starts from a
        // snapshot and the entries after it, and open returns once it has caught up.
        for dir in &cluster.dirs {
            let snapshot = dir.join("raft.snapshot");
            eventually(ELECTION * 10, "every voter compacted its log", || {
                snapshot.exists()
            })
            .await;
        }
        let observer = open(cluster.observer(10)).await;
        assert!(observer.is_observer());
        assert!(!observer.is_leader());
        assert_eq!(observer.leader(), Some(leader));
        assert_eq!(names(&observer), names(&lnode));
        assert!(observer.local_addr().is_none());

        // Its proposals go through the leader; it resolves them when it applies them.
        let (index, outcome) = observer.propose(b"from-observer".to_vec()).await.unwrap();
        assert_eq!(outcome, 13);
        for v in &all {
            v.wait_applied(index).await;
            assert_eq!(names(v).last().map(String::as_str), Some("from-observer"));
        }
        assert_eq!(
            observer
                .propose_as_leader(b"x".to_vec(), lnode.term())
                .await,
            Err(ProposeError::NotLeader { term: lnode.term() }),
            "an observer never leads"
        );
        // What the voters commit reaches it.
        let (index, _) = lnode.propose(b"to-observer".to_vec()).await.unwrap();
        observer.wait_applied(index).await;
        assert_eq!(names(&observer), names(&lnode));

        // The leader hears from it through its fetches, as it hears from a voter.
        let heard = lnode
            .peer_silence()
            .into_iter()
            .find(|(id, _)| *id == 10)
            .and_then(|(_, s)| s)
            .expect("the leader lists the observer");
        assert!(heard < ELECTION * 5, "observer silent for {heard:?}");

        // Stop the leader: the observer follows the new one and keeps proposing.
        let old = voters[leader as usize].take().unwrap();
        old.shutdown().await;
        drop(old);
        let rest: Vec<&Node> = voters.iter().flatten().collect();
        let new_leader = agreed_leader(&rest, ELECTION * 15).await;
        eventually(ELECTION * 25, "the observer names the new leader", || {
            observer.leader() == Some(new_leader)
        })
        .await;
        let (index, _) = observer.propose(b"after-failover".to_vec()).await.unwrap();
        for v in &rest {
            v.wait_applied(index).await;
        }
        assert_eq!(names(&observer), names(rest[0]));
        let new_node = rest.iter().find(|n| n.is_leader()).unwrap();
        eventually(ELECTION * 10, "the new leader hears the observer", || {
            new_node
                .peer_silence()
                .iter()
                .any(|(id, s)| *id == 10 && s.is_some_and(|s| s < ELECTION * 5))
        })
        .await;

        // Stopped, the observer falls silent at the leader.
        observer.shutdown().await;
        drop(observer);
        glommio::timer::sleep(ELECTION * 3).await;
        let silent = new_node
            .peer_silence()
            .into_iter()
            .find(|(id, _)| *id == 10)
            .and_then(|(_, s)| s)
            .unwrap();
        assert!(
            silent >= ELECTION * 3,
            "stopped observer silent only {silent:?}"
        );
        for v in voters.iter().flatten() {
            v.shutdown().await;
        }
    });
}

#[test]
fn an_observer_without_voters_reachable_says_so_and_catches_up_later() {
    let cluster = Cluster::new();
    run(Duration::from_secs(60), move || async move {
        // No voter runs yet: open returns after its wait, with no leader.
        let observer = open(cluster.observer(7)).await;
        assert_eq!(observer.leader(), None);
        assert_eq!(
            observer.propose(b"x".to_vec()).await,
            Err(ProposeError::NoLeader)
        );
        let mut voters = Vec::new();
        for id in 0..3 {
            voters.push(open(voter(&cluster, id)).await);
        }
        let all: Vec<&Node> = voters.iter().collect();
        agreed_leader(&all, ELECTION * 20).await;
        eventually(ELECTION * 25, "the observer finds the leader", || {
            observer.leader().is_some()
        })
        .await;
        let (index, _) = observer.propose(b"late".to_vec()).await.unwrap();
        voters[0].wait_applied(index).await;
        assert_eq!(names(&voters[0]), ["late"]);
        observer.shutdown().await;
        for v in &voters {
            v.shutdown().await;
        }
    });
}

/// A handshake frame with `magic`, spelled out byte by byte.
fn handshake(magic: &[u8; 4], from: i32, to: i32) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 14];
    out.extend_from_slice(magic);
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&from.to_be_bytes());
    out.extend_from_slice(&to.to_be_bytes());
    out
}

/// Whether the node at `addr` answers `frame` with a handshake (true) or closes (false).
async fn admitted(addr: SocketAddr, frame: &[u8]) -> bool {
    let mut stream = TcpStream::connect_timeout(addr, Duration::from_secs(2))
        .await
        .unwrap();
    stream.write_all(frame).await.unwrap();
    let mut buf = vec![0u8; 64];
    let read = futures_lite::future::or(async { Some(stream.read(&mut buf).await) }, async {
        glommio::timer::sleep(Duration::from_secs(5)).await;
        None
    })
    .await
    .expect("answers or closes within 5 s");
    matches!(read, Ok(n) if n > 0)
}

#[test]
fn observer_connections_come_from_non_voters_and_bad_requests_close_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    run(Duration::from_secs(60), move || async move {
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let voters = [(0, listen)];
        let node: Node = Quorum::open(config(0, &voters, Some(listen), &dir), Names::default())
            .await
            .unwrap();
        let addr = node.local_addr().expect("bound");
        assert!(admitted(addr, &handshake(b"TRBF", 5, 0)).await);
        assert!(admitted(addr, &handshake(b"TRBP", 5, 0)).await);
        assert!(
            !admitted(addr, &handshake(b"TRBF", 0, 0)).await,
            "a voter id"
        );
        assert!(
            !admitted(addr, &handshake(b"TRBF", -3, 0)).await,
            "negative id"
        );
        assert!(
            !admitted(addr, &handshake(b"TRBF", 5, 1)).await,
            "another node"
        );
        assert!(
            !admitted(addr, &handshake(b"TRBQ", 5, 0)).await,
            "raft from a non-voter"
        );

        // A fetch request of the wrong size closes the connection; a good one is answered.
        let mut stream = TcpStream::connect_timeout(addr, Duration::from_secs(2))
            .await
            .unwrap();
        stream.write_all(&handshake(b"TRBF", 5, 0)).await.unwrap();
        let mut reply = [0u8; 18];
        stream.read_exact(&mut reply).await.unwrap();
        let mut request = vec![0, 0, 0, 12];
        request.extend_from_slice(&1u64.to_be_bytes());
        request.extend_from_slice(&10u32.to_be_bytes());
        stream.write_all(&request).await.unwrap();
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).await.unwrap();
        let mut answer = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(
            &answer[..4],
            &0i32.to_be_bytes(),
            "names voter 0 the leader"
        );
        stream.write_all(&[0, 0, 0, 3, 1, 2, 3]).await.unwrap();
        let mut rest = Vec::new();
        let closed = futures_lite::future::or(
            async { stream.read_to_end(&mut rest).await.is_ok() },
            async {
                glommio::timer::sleep(Duration::from_secs(5)).await;
                false
            },
        )
        .await;
        assert!(
            closed && rest.is_empty(),
            "a malformed request closes the connection"
        );

        // A proposal naming another proposer closes the connection and is not applied.
        let mut stream = TcpStream::connect_timeout(addr, Duration::from_secs(2))
            .await
            .unwrap();
        stream.write_all(&handshake(b"TRBP", 5, 0)).await.unwrap();
        stream.read_exact(&mut reply).await.unwrap();
        let mut context = vec![1u8]; // the context's version
        context.extend_from_slice(&9i32.to_be_bytes());
        context.extend_from_slice(&1u64.to_be_bytes());
        context.extend_from_slice(&1u64.to_be_bytes());
        let mut payload = (context.len() as u32).to_be_bytes().to_vec();
        payload.extend_from_slice(&context);
        payload.extend_from_slice(b"forged");
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        stream.write_all(&frame).await.unwrap();
        glommio::timer::sleep(Duration::from_millis(300)).await;
        assert!(names(&node).is_empty());
        node.shutdown().await;
    });
}
