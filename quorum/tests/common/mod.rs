//! Shared pieces of the quorum integration tests: a tiny state machine, a bounded executor
//! runner, fast timings, free loopback ports and polling helpers.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use tributary_quorum::{Quorum, QuorumConfig, Role, StateMachine};

/// Appends each command as a string; the outcome is the new length.
#[derive(Default)]
pub struct Names(pub Vec<String>);

impl StateMachine for Names {
    type Outcome = usize;

    fn apply(&mut self, _index: u64, command: &[u8]) -> usize {
        self.0.push(String::from_utf8_lossy(command).into_owned());
        self.0.len()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0.join("\n").into_bytes()
    }

    fn restore(&mut self, snapshot: &[u8]) -> anyhow::Result<()> {
        let text = std::str::from_utf8(snapshot)?;
        self.0 = if text.is_empty() {
            Vec::new()
        } else {
            text.split('\n').map(str::to_string).collect()
        };
        Ok(())
    }
}

pub type Node = Rc<Quorum<Names>>;

/// Runs `body` on a fresh glommio executor; fails (panics) if it takes longer than `limit`.
pub fn run<F, Fut>(limit: Duration, body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            futures_lite::future::or(body(), async move {
                glommio::timer::sleep(limit).await;
                panic!("test took longer than {limit:?}");
            })
            .await
        })
        .expect("executor starts")
        .join()
        .expect("test body panicked");
}

pub const HEARTBEAT: Duration = Duration::from_millis(20);
pub const ELECTION: Duration = Duration::from_millis(200);

/// A configuration with test timings.
pub fn config(
    node_id: i32,
    voters: &[(i32, SocketAddr)],
    listen: Option<SocketAddr>,
    dir: &Path,
) -> QuorumConfig {
    let mut cfg = QuorumConfig::new(node_id, voters.to_vec(), listen, dir);
    cfg.heartbeat_interval = HEARTBEAT;
    cfg.election_timeout = ELECTION;
    cfg.proposal_timeout = Duration::from_secs(3);
    cfg
}

/// A loopback address with a port that was free a moment ago (voters must know each other's
/// addresses before any of them binds).
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    l.local_addr().expect("probe address")
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// The leader all `nodes` agree on, once they do.
pub async fn agreed_leader(nodes: &[&Node], limit: Duration) -> i32 {
    let mut leader = None;
    eventually(limit, "all nodes agree on a leader", || {
        let first = nodes[0].leader();
        let agree = first.is_some() && nodes.iter().all(|n| n.leader() == first);
        let one_leads = nodes.iter().filter(|n| n.is_leader()).count() == 1;
        if agree && one_leads {
            leader = first;
        }
        agree && one_leads
    })
    .await;
    leader.expect("a leader")
}

pub fn names(node: &Node) -> Vec<String> {
    node.with_state(|s| s.0.clone())
}

/// Three voters' addresses and directories (ids 0–2), none opened.
pub struct Cluster {
    pub voters: Vec<(i32, SocketAddr)>,
    pub dirs: Vec<PathBuf>,
    pub tmp: tempfile::TempDir,
}

impl Cluster {
    pub fn new() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let voters: Vec<(i32, SocketAddr)> = (0..3).map(|id| (id, free_addr())).collect();
        let dirs = (0..3)
            .map(|id| tmp.path().join(format!("node-{id}")))
            .collect();
        Cluster { voters, dirs, tmp }
    }

    /// Voter `id`'s configuration, with test timings.
    pub fn config(&self, id: i32) -> QuorumConfig {
        let i = id as usize;
        config(id, &self.voters, Some(self.voters[i].1), &self.dirs[i])
    }

    /// An observer `id` (outside the voters) of this cluster.
    pub fn observer(&self, id: i32) -> QuorumConfig {
        let dir = self.tmp.path().join(format!("observer-{id}"));
        let mut cfg = config(id, &self.voters, None, &dir);
        cfg.role = Role::Observer;
        cfg
    }
}

pub async fn open(cfg: QuorumConfig) -> Node {
    Quorum::open(cfg, Names::default()).await.unwrap()
}
