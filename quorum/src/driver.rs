//! The driver: the one task that owns the `RawNode` (as its own state, so no borrow is ever held
//! across an await). It waits on the tick timer, its inbox (peer messages, proposals, transport
//! reports) and shutdown; steps raft; and handles each `Ready` in raft-rs's order — send
//! `messages()`, install the snapshot, make entries (and a changed term or vote) durable, only
//! then send `persisted_messages()`, apply `committed_entries()`, `advance()`, handle the
//! `LightReady`, `advance_apply()`. It also takes snapshots and compacts. It must not block: all
//! disk work is awaited through `DiskLog` on the blocking thread.
//!
//! A storage failure is fatal: raft cannot go on once it cannot trust its disk. The driver then
//! fails every pending proposal with `Io`, closes the quorum and exits.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use raft::{RawNode, SnapshotStatus, StateRole, Storage as _};

use crate::config::node_id;
use crate::core::Input;
use crate::mem_log::MemLog;
use crate::observer::FetchAnswer;
use crate::quorum::Shared;
use crate::storage::DiskLog;
use crate::transport::PeerQueue;
use crate::{ProposeError, StateMachine};

/// Inputs handled before the driver looks for a `Ready`: more batch proposals into one fsync,
/// fewer keep ticks on time.
const INPUT_BATCH_MAX: usize = 512;

/// `[version u8 = 1][node id i32BE][incarnation u64BE][seq u64BE]`: who proposed an entry.
const CONTEXT_BYTES: usize = 1 + 4 + 8 + 8;
const CONTEXT_VERSION: u8 = 1;

/// The `context` a proposal's entry carries, so its proposer recognises it when applying.
/// `incarnation` tells this process's proposals from those an earlier run of the same node left
/// in the log.
pub fn encode_context(node: i32, incarnation: u64, seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(CONTEXT_BYTES);
    out.push(CONTEXT_VERSION);
    out.extend_from_slice(&node.to_be_bytes());
    out.extend_from_slice(&incarnation.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

pub fn decode_context(ctx: &[u8]) -> Option<(i32, u64, u64)> {
    if ctx.len() != CONTEXT_BYTES || ctx[0] != CONTEXT_VERSION {
        return None;
    }
    let node = i32::from_be_bytes(ctx[1..5].try_into().ok()?);
    let incarnation = u64::from_be_bytes(ctx[5..13].try_into().ok()?);
    let seq = u64::from_be_bytes(ctx[13..21].try_into().ok()?);
    Some((node, incarnation, seq))
}

/// Whether a committed entry carries a command: raft's own empty entries (a new leader's) do not.
pub fn is_command(entry: &Entry) -> bool {
    entry.get_entry_type() == EntryType::EntryNormal
        && !(entry.data.is_empty() && entry.context.is_empty())
}

pub struct Driver<S: StateMachine> {
    shared: Rc<Shared<S>>,
    raw: RawNode<MemLog>,
    disk: DiskLog,
    peers: HashMap<u64, PeerQueue>,
    inbox: async_channel::Receiver<Input>,
    heartbeat: Duration,
    snapshot_every_entries: u64,
    /// The term and vote in the hard-state file.
    written_term_vote: (u64, u64),
    /// The commit index moved since the hard-state file was last written.
    commit_dirty: bool,
    hard_state_written: Instant,
}

impl<S: StateMachine> Driver<S> {
    pub fn new(
        shared: Rc<Shared<S>>,
        raw: RawNode<MemLog>,
        disk: DiskLog,
        peers: HashMap<u64, PeerQueue>,
        inbox: async_channel::Receiver<Input>,
        heartbeat: Duration,
        snapshot_every_entries: u64,
    ) -> Driver<S> {
        let hs = raw.store().hard_state();
        let written_term_vote = (hs.term, hs.vote);
        Driver {
            shared,
            raw,
            disk,
            peers,
            inbox,
            heartbeat,
            snapshot_every_entries,
            written_term_vote,
            commit_dirty: false,
            hard_state_written: Instant::now(),
        }
    }

    /// Runs until the quorum closes or storage fails.
    pub async fn run(mut self) {
        self.publish();
        let result = self.run_loop().await;
        let failure = match result {
            Ok(()) => self.flush_commit().await.err(),
            Err(e) => Some(e),
        };
        let outcome = match failure {
            Some(e) => {
                let text = format!("{e:#}");
                tracing::error!(node = self.shared.core.node_id, error = %text,
                    "quorum storage failed; the quorum stops");
                *self.shared.failure.borrow_mut() = Some(text.clone());
                ProposeError::Io(text)
            }
            None => ProposeError::Shutdown,
        };
        self.shared.core.close();
        self.shared.fail_pending(outcome);
        self.shared.changed.notify(usize::MAX);
        // Dropping the peer queues ends their sender tasks.
        self.peers.clear();
    }

    async fn run_loop(&mut self) -> anyhow::Result<()> {
        let mut next_tick = Instant::now() + self.heartbeat;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let first = futures_lite::future::or(
                futures_lite::future::or(async { self.inbox.recv().await.ok() }, async {
                    glommio::timer::sleep(wait).await;
                    None
                }),
                async {
                    self.shared.core.closed().await;
                    None
                },
            )
            .await;
            if self.shared.core.is_closed() {
                return Ok(());
            }
            if let Some(input) = first {
                self.handle(input);
                for _ in 1..INPUT_BATCH_MAX {
                    match self.inbox.try_recv() {
                        Ok(input) => self.handle(input),
                        Err(_) => break,
                    }
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                self.raw.tick();
                next_tick += self.heartbeat;
                if next_tick <= now {
                    next_tick = now + self.heartbeat;
                }
            }
            while self.raw.has_ready() {
                self.handle_ready().await?;
            }
            self.publish();
            self.maybe_compact().await?;
            if self.commit_dirty && self.hard_state_written.elapsed() >= self.heartbeat {
                self.flush_commit().await?;
            }
        }
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Message(msg) => {
                let kind = msg.get_msg_type();
                if let Err(e) = self.raw.step(msg) {
                    tracing::debug!(?kind, error = %e, "raft refused a peer message");
                }
            }
            Input::Propose {
                seq,
                data,
                leader_term,
            } => {
                let shared = &self.shared;
                if let Some(term) = leader_term {
                    let raft = &self.raw.raft;
                    if raft.state != StateRole::Leader || raft.term != term {
                        shared.resolve(seq, Err(ProposeError::NotLeader { term }));
                        return;
                    }
                }
                let context = encode_context(shared.core.node_id, shared.incarnation, seq);
                if let Err(e) = self.raw.propose(context, data) {
                    tracing::debug!(error = %e, "proposal dropped by raft");
                    shared.resolve(seq, Err(ProposeError::NoLeader));
                }
            }
            Input::ObserverFetch { from, reply } => {
                let _ = reply.send(self.observer_answer(from));
            }
            Input::Forward { context, data } => {
                if let Err(e) = self.raw.propose(context, data) {
                    tracing::debug!(error = %e, "an observer's proposal dropped by raft");
                }
            }
            Input::Unreachable(peer) => self.raw.report_unreachable(peer),
            Input::VoterGone(peer) => self.leader_gone(peer),
            Input::SnapshotStatus(peer, status) => self.raw.report_snapshot(peer, status),
        }
    }

    /// A voter is gone (its port refuses connections). When it is the leader this follower
    /// follows, waiting out the election timeout would only lengthen the outage: the lease
    /// this node grants the leader (check_quorum) ends now, and it campaigns after
    /// `1 + 2 × rank` ticks, its rank among the surviving voters by id, so survivors that saw
    /// the same evidence campaign one after another instead of splitting their votes. A
    /// survivor that saw no evidence still grants its vote once its own lease runs out, as
    /// before.
    fn leader_gone(&mut self, peer: u64) {
        let rank = campaign_rank(&self.shared.core.voters, self.shared.core.node_id, peer);
        let raft = &mut self.raw.raft;
        if raft.state == StateRole::Leader || raft.leader_id != peer {
            return;
        }
        let timeout = raft.election_timeout();
        raft.election_elapsed = timeout;
        let ticks = (timeout + 1 + 2 * rank).min(2 * timeout - 1);
        raft.set_randomized_election_timeout(ticks);
        tracing::info!(
            leader = ?node_id(peer),
            after_ticks = ticks - timeout,
            "the quorum leader is gone; campaigning early"
        );
    }

    /// The committed log from raft index `from` for an observer: this node's snapshot when its
    /// log no longer holds `from`, the committed entries otherwise (only those this node's log
    /// holds: raft may know a commit index past what it has stored yet).
    fn observer_answer(&self, from: u64) -> FetchAnswer {
        let raft = &self.raw.raft;
        let store = self.raw.store();
        let mut answer = FetchAnswer {
            leader: node_id(raft.leader_id),
            term: raft.term,
            commit: raft.raft_log.committed,
            ..FetchAnswer::default()
        };
        let snapshot = store.last_snapshot();
        let snapshot_index = snapshot.get_metadata().index;
        if snapshot_index > 0 && from <= snapshot_index {
            answer.snapshot = Some((snapshot_index, snapshot.data.to_vec()));
            answer.upto = snapshot_index;
            return answer;
        }
        let stored = store.entries_slice();
        let last = stored.last().map_or(snapshot_index, |e| e.index);
        answer.take_entries(stored, from, raft.raft_log.committed.min(last));
        answer
    }

    /// One `Ready`, in the order raft-rs requires.
    async fn handle_ready(&mut self) -> anyhow::Result<()> {
        let mut rd = self.raw.ready();
        self.send(rd.take_messages());
        if !rd.snapshot().is_empty() {
            self.install_snapshot(rd.snapshot().clone()).await?;
        }
        let entries = rd.take_entries();
        if !entries.is_empty() {
            self.disk
                .append(&entries)
                .await
                .context("appending to the quorum log")?;
            self.raw.mut_store().append(&entries);
        }
        if let Some(hs) = rd.hs() {
            self.raw.mut_store().set_hard_state(hs.clone());
            // Term and vote must be durable before any vote or acknowledgement goes out; the
            // commit index need not be (Raft relearns it), so a commit-only change waits for
            // the next periodic write instead of costing two more fsyncs per commit.
            if (hs.term, hs.vote) != self.written_term_vote {
                self.write_hard_state().await?;
            } else {
                self.commit_dirty = true;
            }
        }
        self.send(rd.take_persisted_messages());
        self.apply(rd.take_committed_entries());
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
            self.commit_dirty = true;
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries());
        self.raw.advance_apply();
        Ok(())
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for msg in msgs {
            let to = msg.to;
            let snapshot = msg.get_msg_type() == MessageType::MsgSnapshot;
            let Some(peer) = self.peers.get(&to) else {
                tracing::warn!(to, "raft addressed a node that is not a peer");
                continue;
            };
            if peer.tx.try_send(msg).is_err() {
                tracing::debug!(to, "peer queue full; dropping a raft message");
                if snapshot {
                    // Reported through the inbox: raft may not be stepped mid-Ready.
                    let status = Input::SnapshotStatus(to, SnapshotStatus::Failure);
                    let _ = self.shared.core.inbox.try_send(status);
                }
            }
        }
    }

    async fn install_snapshot(&mut self, snapshot: Snapshot) -> anyhow::Result<()> {
        let (index, term) = (snapshot.get_metadata().index, snapshot.get_metadata().term);
        tracing::info!(
            node = self.shared.core.node_id,
            index,
            term,
            bytes = snapshot.data.len(),
            "installing a quorum snapshot from the leader"
        );
        self.disk
            .write_snapshot(&snapshot)
            .await
            .context("writing the received snapshot")?;
        self.shared
            .sm
            .borrow_mut()
            .restore(&snapshot.data)
            .context("restoring the state machine from the leader's snapshot")?;
        self.raw.mut_store().install_snapshot(snapshot);
        self.disk
            .rewrite(&[])
            .await
            .context("resetting the quorum log after a snapshot")?;
        self.write_hard_state().await?;
        self.shared.set_applied(index);
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) {
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        for entry in entries {
            self.shared.apply_entry(&entry);
        }
        self.shared.set_applied(last);
    }

    async fn write_hard_state(&mut self) -> anyhow::Result<()> {
        let store = self.raw.store();
        self.disk
            .write_hard_state(store.hard_state(), store.conf_state())
            .await
            .context("writing the quorum hard state")?;
        self.written_term_vote = (store.hard_state().term, store.hard_state().vote);
        self.commit_dirty = false;
        self.hard_state_written = Instant::now();
        Ok(())
    }

    /// Writes a commit index that moved since the last hard-state write. It is not needed for
    /// safety (raft relearns the commit index) but lets a restart apply more before it returns.
    async fn flush_commit(&mut self) -> anyhow::Result<()> {
        if self.commit_dirty {
            self.write_hard_state().await?;
        }
        Ok(())
    }

    /// After `snapshot_every_entries` applied entries past the last snapshot: snapshot the state
    /// machine at the applied index, write it, drop the covered entries from memory, and rewrite
    /// the log file with the rest.
    async fn maybe_compact(&mut self) -> anyhow::Result<()> {
        let applied = self.raw.raft.raft_log.applied;
        let store = self.raw.store();
        if applied < store.snapshot_index() + self.snapshot_every_entries {
            return Ok(());
        }
        let term = store
            .term(applied)
            .context("term of the applied index for a snapshot")?;
        let mut snapshot = Snapshot::default();
        snapshot.data = self.shared.sm.borrow().snapshot().into();
        let meta = snapshot.mut_metadata();
        meta.index = applied;
        meta.term = term;
        meta.set_conf_state(store.conf_state().clone());
        self.disk
            .write_snapshot(&snapshot)
            .await
            .context("writing a quorum snapshot")?;
        self.raw.mut_store().compact_to(snapshot);
        let remaining = self.raw.store().entries_slice().to_vec();
        self.disk
            .rewrite(&remaining)
            .await
            .context("rewriting the compacted quorum log")?;
        tracing::info!(
            node = self.shared.core.node_id,
            index = applied,
            term,
            remaining = remaining.len(),
            "quorum snapshot taken; log compacted"
        );
        Ok(())
    }

    /// Copies raft's role, leader and term where `Quorum`'s getters read them.
    fn publish(&self) {
        let raft = &self.raw.raft;
        let leader = node_id(raft.leader_id);
        let is_leader = raft.state == StateRole::Leader;
        let shared = &self.shared;
        let moved = shared.leader.get() != leader
            || shared.is_leader.get() != is_leader
            || shared.term.get() != raft.term;
        shared.leader.set(leader);
        shared.is_leader.set(is_leader);
        shared.term.set(raft.term);
        if shared.commit.get() != raft.raft_log.committed {
            shared.commit.set(raft.raft_log.committed);
            shared.core.commit_moved.notify(usize::MAX);
        }
        let mut progress = shared.progress.borrow_mut();
        progress.clear();
        if is_leader {
            let last = raft.raft_log.last_index();
            for (id, pr) in raft.prs().iter() {
                if let Some(node) = node_id(*id) {
                    let matched = if *id == raft.id { last } else { pr.matched };
                    progress.push((node, matched));
                }
            }
            progress.sort_unstable();
        }
        if moved {
            tracing::debug!(
                node = shared.core.node_id,
                ?leader,
                term = raft.term,
                "quorum role"
            );
            shared.changed.notify(usize::MAX);
        }
    }
}

/// This node's place among the voters other than the `gone` one (raft id), by node id: who
/// campaigns first when the leader is gone.
pub fn campaign_rank(voters: &[(i32, std::net::SocketAddr)], me: i32, gone: u64) -> usize {
    let mut ids: Vec<i32> = voters
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| crate::config::raft_id(*id) != gone)
        .collect();
    ids.sort_unstable();
    ids.iter().position(|id| *id == me).unwrap_or(ids.len())
}

/// The ConfState every node starts with: all configured voters (static membership).
pub fn voters_conf_state(voters: Vec<u64>) -> ConfState {
    ConfState {
        voters,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survivors_campaign_in_node_id_order() {
        let a = |p| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        let voters = [(3, a(3)), (1, a(1)), (2, a(2))];
        // Node 1 (raft id 2) is gone: 2 goes first, then 3.
        assert_eq!(campaign_rank(&voters, 2, 2), 0);
        assert_eq!(campaign_rank(&voters, 3, 2), 1);
        // Node 3 (raft id 4) is gone: 1 first, then 2.
        assert_eq!(campaign_rank(&voters, 1, 4), 0);
        assert_eq!(campaign_rank(&voters, 2, 4), 1);
    }

    #[test]
    fn context_round_trips_and_rejects_other_shapes() {
        let ctx = encode_context(7, 0xdead_beef, 42);
        assert_eq!(decode_context(&ctx), Some((7, 0xdead_beef, 42)));
        for cut in 0..ctx.len() {
            assert_eq!(decode_context(&ctx[..cut]), None);
        }
        let mut other = ctx.clone();
        other[0] = 2;
        assert_eq!(decode_context(&other), None);
    }

    #[test]
    fn empty_leader_entries_are_not_commands() {
        let mut e = Entry::default();
        assert!(!is_command(&e));
        e.context = encode_context(1, 1, 1).into();
        assert!(is_command(&e), "an empty command is still a command");
        e.set_entry_type(EntryType::EntryConfChange);
        assert!(!is_command(&e));
    }
}
