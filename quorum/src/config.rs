//! The quorum's configuration, its validation, the raft-rs `Config` built from it, and the one
//! mapping between Kafka node ids and raft ids. Raft ids never leave this crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure};

/// Kafka's `controller.quorum.election.timeout.ms` default.
pub const DEFAULT_ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);
/// The tick length; the leader sends heartbeats every tick.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
pub const DEFAULT_PROPOSAL_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 10_000;

/// Upper bound of one append message's entry bytes (raft-rs `max_size_per_msg`).
const APPEND_BYTES_MAX: u64 = 1 << 20;
/// Append messages in flight per follower (raft-rs `max_inflight_msgs`).
const INFLIGHT_APPENDS_MAX: usize = 256;
/// Bytes of proposed but uncommitted entries a leader holds (raft-rs `max_uncommitted_size`);
/// past it, proposals are dropped (`ProposeError::NoLeader`) instead of growing memory while no
/// majority answers.
const UNCOMMITTED_BYTES_MAX: u64 = 64 << 20;

/// What a node is in the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// One of `controller.quorum.voters`: votes, keeps the log on disk, may lead.
    Voter,
    /// Not a voter (Kafka's observer: a broker-only node): follows the committed log by
    /// fetching it from the voters, keeps nothing on disk, and forwards its proposals to them.
    Observer,
}

#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// Kafka `node.id` (>= 0).
    pub node_id: i32,
    /// `Voter` unless this node is outside `voters`.
    pub role: Role,
    /// `controller.quorum.voters`; contains `node_id` exactly when the role is `Voter`. One voter
    /// is single-node mode.
    pub voters: Vec<(i32, SocketAddr)>,
    /// Where this node accepts peer connections (voters, and observers following the log);
    /// `None` only with one voter and no observers, and always on an observer. Port 0 binds any
    /// free port (see `Quorum::local_addr`).
    pub listen: Option<SocketAddr>,
    /// The metadata log directory, created if missing (a voter's only).
    pub dir: PathBuf,
    pub election_timeout: Duration,
    /// The tick length: election ticks = `election_timeout / heartbeat_interval`, at least 2.
    pub heartbeat_interval: Duration,
    /// A proposal not applied by then fails with `ProposeError::Timeout`.
    pub proposal_timeout: Duration,
    /// After this many applied entries past the last snapshot: snapshot and compact.
    pub snapshot_every_entries: u64,
    /// Where the transport records its doubts about other voters' processes, for readers on
    /// other threads (see [`PeerDoubts`](crate::PeerDoubts)).
    pub doubts: std::sync::Arc<crate::PeerDoubts>,
}

impl QuorumConfig {
    /// A configuration with the default timings.
    pub fn new(
        node_id: i32,
        voters: Vec<(i32, SocketAddr)>,
        listen: Option<SocketAddr>,
        dir: impl Into<PathBuf>,
    ) -> QuorumConfig {
        QuorumConfig {
            node_id,
            role: Role::Voter,
            voters,
            listen,
            dir: dir.into(),
            election_timeout: DEFAULT_ELECTION_TIMEOUT,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            proposal_timeout: DEFAULT_PROPOSAL_TIMEOUT,
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            doubts: Default::default(),
        }
    }

    /// Ticks per election timeout.
    pub(crate) fn election_ticks(&self) -> usize {
        (self.election_timeout.as_nanos() / self.heartbeat_interval.as_nanos().max(1)) as usize
    }

    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.node_id >= 0,
            "node id {} is negative; use node.id >= 0",
            self.node_id
        );
        ensure!(
            !self.voters.is_empty(),
            "no quorum voters configured; set controller.quorum.voters"
        );
        let mut ids: Vec<i32> = self.voters.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            bail!("voter {} is listed twice in controller.quorum.voters", w[0]);
        }
        if let Some(id) = ids.iter().find(|id| **id < 0) {
            bail!("voter id {id} is negative");
        }
        match self.role {
            Role::Voter => {
                ensure!(
                    ids.contains(&self.node_id),
                    "node {} is not in controller.quorum.voters {:?}; add it or fix node.id",
                    self.node_id,
                    ids
                );
                ensure!(
                    self.listen.is_some() || self.voters.len() == 1,
                    "a quorum of {} voters needs a listen address for peer connections",
                    self.voters.len()
                );
            }
            Role::Observer => {
                ensure!(
                    !ids.contains(&self.node_id),
                    "node {} is in controller.quorum.voters {:?}, so it is a voter, not an \
                     observer; give a broker-only node a node.id outside the voters",
                    self.node_id,
                    ids
                );
                ensure!(
                    self.listen.is_none(),
                    "an observer accepts no quorum connections; it has no listen address"
                );
            }
        }
        ensure!(
            !self.heartbeat_interval.is_zero(),
            "heartbeat interval must be positive"
        );
        ensure!(
            self.election_ticks() >= 2,
            "election timeout {:?} must be at least twice the heartbeat interval {:?}",
            self.election_timeout,
            self.heartbeat_interval
        );
        ensure!(
            !self.proposal_timeout.is_zero(),
            "proposal timeout must be positive"
        );
        ensure!(
            self.snapshot_every_entries >= 1,
            "snapshot_every_entries must be at least 1"
        );
        Ok(())
    }

    /// The raft-rs configuration for this node, validated.
    pub(crate) fn raft_config(&self, applied: u64) -> anyhow::Result<raft::Config> {
        let cfg = raft::Config {
            id: raft_id(self.node_id),
            election_tick: self.election_ticks(),
            heartbeat_tick: 1,
            applied,
            max_size_per_msg: APPEND_BYTES_MAX,
            max_inflight_msgs: INFLIGHT_APPENDS_MAX,
            max_uncommitted_size: UNCOMMITTED_BYTES_MAX,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        cfg.validate()
            .map_err(|e| anyhow::anyhow!("raft configuration: {e}"))?;
        Ok(cfg)
    }

    /// The configured voters' raft ids, sorted.
    pub(crate) fn voter_raft_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.voters.iter().map(|(id, _)| raft_id(*id)).collect();
        ids.sort_unstable();
        ids
    }
}

/// raft-rs reserves id 0 (`INVALID_ID`), Kafka allows node id 0: raft id = node id + 1.
pub(crate) fn raft_id(node_id: i32) -> u64 {
    assert!(node_id >= 0, "negative node id {node_id}");
    node_id as u64 + 1
}

/// The inverse of [`raft_id`]; `None` for raft's "no node" (0) or an id no node id maps to.
pub(crate) fn node_id(raft_id: u64) -> Option<i32> {
    let id = raft_id.checked_sub(1)?;
    i32::try_from(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn ids_map_both_ways_and_zero_is_no_node() {
        assert_eq!(raft_id(0), 1);
        assert_eq!(node_id(1), Some(0));
        assert_eq!(node_id(0), None);
        assert_eq!(node_id(raft_id(i32::MAX)), Some(i32::MAX));
        assert_eq!(node_id(u64::MAX), None);
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let ok = QuorumConfig::new(1, vec![(1, addr(1)), (2, addr(2))], Some(addr(1)), "/x");
        ok.validate().unwrap();
        ok.raft_config(0).unwrap();

        let mut c = ok.clone();
        c.node_id = 3;
        assert!(c.validate().unwrap_err().to_string().contains("not in"));
        let mut c = ok.clone();
        c.voters.push((2, addr(3)));
        assert!(c.validate().unwrap_err().to_string().contains("twice"));
        let mut c = ok.clone();
        c.listen = None;
        assert!(c.validate().unwrap_err().to_string().contains("listen"));
        let mut c = ok.clone();
        c.election_timeout = c.heartbeat_interval;
        assert!(c.validate().unwrap_err().to_string().contains("twice"));
        let mut c = ok;
        c.node_id = -1;
        assert!(c.validate().is_err());

        let single = QuorumConfig::new(0, vec![(0, addr(1))], None, "/x");
        single.validate().unwrap();

        let mut observer = QuorumConfig::new(5, vec![(1, addr(1)), (2, addr(2))], None, "/x");
        observer.role = Role::Observer;
        observer.validate().unwrap();
        let mut c = observer.clone();
        c.node_id = 2;
        assert!(
            c.validate().unwrap_err().to_string().contains("is a voter")
                || c.validate()
                    .unwrap_err()
                    .to_string()
                    .contains("so it is a voter")
        );
        let mut c = observer;
        c.listen = Some(addr(9));
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("no listen address"));
    }
}
