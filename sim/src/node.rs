//! One simulated node: a voter of the real metadata quorum (raft-rs `RawNode`, the metadata
//! image and its `apply`), the active controller's real liveness decisions when it leads, and
//! a broker holding a model log per partition. A node never touches another: what it does to
//! the world (messages, timers, acknowledgements) goes into an [`Effects`] the world carries out.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use raft::prelude::{ConfState, Entry, EntryType, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};
use tributary_metadata::catalog::{Catalog, PartitionRegistration, TopicMeta};
use tributary_metadata::command::{self, MetadataCommand, Outcome};
use tributary_metadata::liveness::{self, Tenure};

use crate::log::ReplicaLog;
use crate::replica::Part;
use crate::{Effects, Event, Limits, TOPIC};

/// Where the quorum is, what the broker holds, and what this process has heard.
pub struct Node {
    pub id: i32,
    pub alive: bool,
    /// Paused (SIGSTOP) until then: its events wait.
    pub paused_until: Option<u64>,
    /// Counts process starts: timers and messages of an older process are dropped.
    pub incarnation: u64,
    pub raw: RawNode<MemStorage>,
    store: MemStorage,
    pub image: Catalog,
    /// Per peer, when this process last heard its quorum traffic.
    pub last_heard: BTreeMap<i32, u64>,
    /// Per peer, when this process saw evidence that its process is gone.
    pub evidence: BTreeMap<i32, u64>,
    tenure: Tenure,
    /// When the last controller round ran, to tell a stall of this node's own.
    last_round: Option<u64>,
    pub parts: BTreeMap<i32, Part>,
    /// Print what it proposes and applies.
    pub trace: bool,
    /// In a controlled shutdown (SIGTERM) until then, at the latest.
    pub shutting_down: Option<u64>,
}

/// The raft configuration of the real quorum (`QuorumConfig::raft_config`), except that the
/// election timeout is fixed per process start (from the seed) instead of drawn by raft-rs
/// from the thread's random generator, which no seed controls.
fn raft_config(id: i32, election_ticks: usize) -> Config {
    Config {
        id: id as u64 + 1,
        election_tick: election_ticks,
        min_election_tick: election_ticks,
        max_election_tick: election_ticks + 1,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        ..Default::default()
    }
}

impl Node {
    pub fn new(id: i32, voters: &[i32], election_ticks: usize, partitions: i32) -> Self {
        let ids: Vec<u64> = voters.iter().map(|v| *v as u64 + 1).collect();
        let conf = ConfState::from((ids, vec![]));
        let store = MemStorage::new_with_conf_state(conf);
        let raw = Self::start_raft(id, &store, election_ticks);
        Self {
            id,
            alive: true,
            paused_until: None,
            incarnation: 0,
            raw,
            store,
            image: Catalog::empty(),
            last_heard: BTreeMap::new(),
            evidence: BTreeMap::new(),
            tenure: Tenure::default(),
            last_round: None,
            parts: (0..partitions).map(|p| (p, Part::default())).collect(),
            trace: false,
            shutting_down: None,
        }
    }

    fn start_raft(id: i32, store: &MemStorage, election_ticks: usize) -> RawNode<MemStorage> {
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let cfg = raft_config(id, election_ticks);
        RawNode::new(&cfg, store.clone(), &logger).expect("a valid raft configuration")
    }

    /// The process died: what its logs had not made durable is gone; its raft state was on
    /// disk before any message that depended on it left.
    pub fn crash(&mut self) {
        self.alive = false;
        self.paused_until = None;
        for part in self.parts.values_mut() {
            part.log.crash();
        }
    }

    /// A new process on the same disk: the quorum replays its log into a fresh image.
    pub fn restart(&mut self, election_ticks: usize) {
        self.alive = true;
        self.incarnation += 1;
        self.shutting_down = None;
        self.raw = Self::start_raft(self.id, &self.store, election_ticks);
        self.image = Catalog::empty();
        self.last_heard.clear();
        self.evidence.clear();
        self.tenure = Tenure::default();
        self.last_round = None;
        for part in self.parts.values_mut() {
            let log = std::mem::take(&mut part.log);
            *part = Part {
                log,
                ..Part::default()
            };
        }
    }

    pub fn incarnation_name(&self) -> String {
        format!("node-{}-process-{}", self.id, self.incarnation)
    }

    pub fn is_controller(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    pub fn step_raft(&mut self, from: i32, m: Message, now: u64) {
        self.last_heard.insert(from, now);
        // A message of an older term or one this node cannot use is refused by raft itself.
        let _ = self.raw.step(m);
    }

    pub fn tick(&mut self) {
        self.raw.tick();
    }

    pub fn propose(&mut self, cmd: &MetadataCommand) {
        // Dropped without a leader: the caller asks again at its next round.
        let taken = self.raw.propose(vec![], cmd.encode()).is_ok();
        if self.trace {
            eprintln!("  node {} proposes {cmd:?} (taken: {taken})", self.id);
        }
    }

    /// Handles every `Ready` as the quorum's driver does: send, persist, send what needed the
    /// persisting, apply, advance.
    pub fn handle_ready(&mut self, now: u64, base: Instant, limits: &Limits, fx: &mut Effects) {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            self.send_raft(rd.take_messages(), fx);
            let mut applied = self.apply(rd.take_committed_entries());
            let entries = rd.entries().clone();
            self.store
                .wl()
                .append(&entries)
                .expect("entries follow the log");
            if let Some(hs) = rd.hs() {
                self.store.wl().set_hardstate(hs.clone());
            }
            self.send_raft(rd.take_persisted_messages(), fx);
            let mut light = self.raw.advance(rd);
            if let Some(commit) = light.commit_index() {
                self.store.wl().mut_hard_state().set_commit(commit);
            }
            self.send_raft(light.take_messages(), fx);
            applied |= self.apply(light.take_committed_entries());
            self.raw.advance_apply();
            if applied {
                self.apply_roles(now, base, limits, fx);
            }
        }
    }

    fn send_raft(&self, msgs: Vec<Message>, fx: &mut Effects) {
        for m in msgs {
            let to = m.to as i32 - 1;
            fx.send(self.id, to, crate::Body::Raft(m));
        }
    }

    /// Applies committed entries to the image; whether any command was applied. A refused ISR
    /// change is no longer pending on the leader that proposed it (the real leader learns the
    /// outcome from its proposal).
    fn apply(&mut self, entries: Vec<Entry>) -> bool {
        let mut any = false;
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            let outcome = command::apply(&mut self.image, e.index, &e.data);
            if self.trace {
                let cmd = String::from_utf8_lossy(&e.data);
                eprintln!("  node {} applies {} {cmd}: {outcome:?}", self.id, e.index);
            }
            any = true;
            if let Outcome::Refused(..) = outcome {
                self.isr_change_refused(&e.data);
            }
        }
        any
    }

    fn isr_change_refused(&mut self, data: &[u8]) {
        let Ok(MetadataCommand::ChangeIsr {
            partition,
            leader_epoch,
            partition_epoch,
            ..
        }) = serde_json::from_slice::<MetadataCommand>(data)
        else {
            return;
        };
        if let Some(l) = self
            .parts
            .get_mut(&partition)
            .and_then(|p| p.leading.as_mut())
        {
            if l.leader_epoch == leader_epoch {
                l.isr_change_refused(partition_epoch);
            }
        }
    }

    /// Every `broker.heartbeat.interval.ms`: the broker registers its process if the image
    /// does not know it yet; the active controller judges every other broker as the real one
    /// does, and creates the topic once all brokers are in.
    pub fn controller_round(&mut self, now: u64, base: Instant, limits: &Limits, fx: &mut Effects) {
        if self.shutdown_done(now) {
            fx.exit = Some(self.id);
            return;
        }
        let me = self.incarnation_name();
        if self.image.brokers.get(&self.id).map(|b| &b.incarnation) != Some(&me) {
            self.propose(&MetadataCommand::RegisterBroker {
                id: self.id,
                incarnation: me,
                host: "127.0.0.1".into(),
                port: 9092 + self.id as u16,
                listeners: Vec::new(),
                rack: None,
            });
        }
        let late = self
            .last_round
            .map_or(0, |t| now.saturating_sub(t + limits.controller_round_ms));
        self.last_round = Some(now);
        if !self.is_controller() {
            let leader = self.raw.raft.leader_id;
            self.tenure
                .follow((leader != 0 && leader != self.id as u64 + 1).then(|| leader as i32 - 1));
            return;
        }
        let at = base + Duration::from_millis(now);
        self.tenure
            .lead(self.raw.raft.term, late > limits.session_ms / 2, at);
        for cmd in self.judge_brokers(now, at, limits) {
            self.propose(&cmd);
        }
        if let Some(cmd) = self.create_topic(limits) {
            self.propose(&cmd);
        }
        self.handle_ready(now, base, limits, fx);
    }

    /// SIGTERM (`MetadataNode::controlled_shutdown`): this broker fences itself, so its
    /// partitions move to other in-sync replicas before it stops; bounded by `deadline_ms`.
    pub fn begin_shutdown(&mut self, now: u64, deadline_ms: u64) {
        if self.shutting_down.is_some() {
            return;
        }
        self.shutting_down = Some(now + deadline_ms);
        self.propose(&MetadataCommand::FenceBroker {
            id: self.id,
            controlled: true,
            epoch: None,
            reason: tributary_metadata::command::FenceReason::ControlledShutdown,
        });
    }

    /// Whether the controlled shutdown is over: the image has this broker fenced, or the
    /// bound passed.
    fn shutdown_done(&self, now: u64) -> bool {
        let Some(deadline) = self.shutting_down else {
            return false;
        };
        let fenced = self
            .image
            .brokers
            .get(&self.id)
            .is_some_and(|b| b.fenced && b.in_controlled_shutdown);
        fenced || now >= deadline
    }

    /// The process exits after a controlled shutdown: what it wrote is flushed first.
    pub fn exit(&mut self) {
        for part in self.parts.values_mut() {
            let (end, generation) = (part.log.log_end_offset(), part.log.generation());
            part.log.synced(end, generation);
        }
        self.crash();
    }

    /// The fencing and unfencing the real controller would propose now.
    fn judge_brokers(&self, now: u64, at: Instant, limits: &Limits) -> Vec<MetadataCommand> {
        let session = Duration::from_millis(limits.session_ms);
        let age = self.tenure.age(at);
        let mut out = Vec::new();
        for b in self.image.brokers.values().filter(|b| b.id != self.id) {
            let heard = self.last_heard.get(&b.id).copied();
            let since = heard.map(|t| Duration::from_millis(now - t));
            let silence = liveness::silence(since, age, self.tenure.predecessor == Some(b.id));
            let gone = self
                .evidence
                .get(&b.id)
                .is_some_and(|&e| heard.is_none_or(|h| e > h));
            let registered = liveness::Registered {
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                fenced_as_gone: b.fenced_as_gone,
            };
            match liveness::judge(registered, liveness::Heard { silence, gone }, session) {
                liveness::Verdict::Fence(reason) => out.push(MetadataCommand::FenceBroker {
                    id: b.id,
                    controlled: false,
                    epoch: Some(b.epoch),
                    reason,
                }),
                liveness::Verdict::Unfence => out.push(MetadataCommand::UnfenceBroker { id: b.id }),
                liveness::Verdict::Keep => {}
            }
        }
        if self
            .image
            .brokers
            .get(&self.id)
            .is_some_and(|b| b.fenced && !b.in_controlled_shutdown)
        {
            out.push(MetadataCommand::UnfenceBroker { id: self.id });
        }
        out
    }

    /// The topic the clients write, replicated on every node, once all are registered.
    fn create_topic(&self, limits: &Limits) -> Option<MetadataCommand> {
        if self.image.topics.contains_key(TOPIC) {
            return None;
        }
        let live: Vec<i32> = self.image.live_brokers().map(|b| b.id).collect();
        if live.len() < limits.nodes as usize {
            return None;
        }
        let assignment = (0..limits.partitions)
            .map(|p| {
                let mut replicas = live.clone();
                replicas.rotate_left(p as usize % live.len());
                PartitionRegistration::new(replicas)
            })
            .collect();
        let configs = [(
            "min.insync.replicas".to_string(),
            limits.min_insync_replicas.to_string(),
        )]
        .into_iter()
        .collect();
        Some(MetadataCommand::CreateTopics {
            topics: vec![TopicMeta {
                name: TOPIC.into(),
                id: "00000000-0000-0000-0000-000000000001".into(),
                partitions: limits.partitions,
                configs,
                assignment,
            }],
        })
    }

    pub fn log(&self, partition: i32) -> &ReplicaLog {
        &self.parts[&partition].log
    }

    /// Timers this node runs from its start.
    pub fn start_timers(&self, fx: &mut Effects) {
        fx.timer(0, Event::Tick(self.id, self.incarnation));
        fx.timer(0, Event::ControllerRound(self.id, self.incarnation));
        fx.timer(0, Event::IsrCheck(self.id, self.incarnation));
    }
}
