//! `Quorum`, the handle the broker holds: opening (recovery, listener, tasks), proposing and
//! waiting for the outcome, reading the state machine and raft's view of leadership, and
//! shutdown. It also owns the state shared with the driver: the state machine, the pending
//! proposals table, the applied index and the published role. No borrow of any of it is held
//! across an await.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use event_listener::Event;
use futures::channel::oneshot;
use glommio::{Latency, Shares};
use raft::eraftpb::{Entry, HardState};
use raft::RawNode;

use crate::config::{node_id, raft_id, QuorumConfig, Role};
use crate::core::{Core, Evidence, Input, INBOX_MAX};
use crate::driver::{decode_context, is_command, voters_conf_state, Driver};
use crate::mem_log::MemLog;
use crate::storage::{DiskLog, Recovered};
use crate::transport;
use crate::{ProposeError, StateMachine};

/// The largest command [`Quorum::propose`] accepts. Metadata records are small; the bound keeps
/// one proposal far below the transport's frame limit.
pub const COMMAND_BYTES_MAX: usize = 1 << 20;
/// How much sooner the quorum's tasks are scheduled than the data path's (glommio preempts
/// other task queues to meet it), so heavy data-path load does not delay heartbeats.
const TASK_QUEUE_LATENCY: Duration = Duration::from_millis(10);

/// See [`Quorum::shutdown`].
const LISTENER_RELEASE_WAIT: Duration = Duration::from_millis(1);

type Waiter<O> = oneshot::Sender<Result<(u64, O), ProposeError>>;

pub(crate) struct Shared<S: StateMachine> {
    pub core: Rc<Core>,
    pub sm: RefCell<S>,
    pending: RefCell<HashMap<u64, Waiter<S::Outcome>>>,
    next_seq: Cell<u64>,
    pub incarnation: u64,
    applied: Cell<u64>,
    pub leader: Cell<Option<i32>>,
    pub is_leader: Cell<bool>,
    pub term: Cell<u64>,
    /// The commit index, and each voter's matched index as the leader sees it (this node's
    /// own: its last index; empty on followers).
    pub commit: Cell<u64>,
    pub progress: RefCell<Vec<(i32, u64)>>,
    /// Fires when the applied index, the role, the leader or the term changes, and at close.
    pub changed: Event,
    /// Set when storage failed and the driver stopped.
    pub failure: RefCell<Option<String>>,
}

impl<S: StateMachine> Shared<S> {
    fn new(core: Rc<Core>, sm: S, applied: u64) -> Shared<S> {
        Shared {
            core,
            sm: RefCell::new(sm),
            pending: RefCell::new(HashMap::new()),
            next_seq: Cell::new(0),
            incarnation: incarnation(),
            applied: Cell::new(applied),
            leader: Cell::new(None),
            is_leader: Cell::new(false),
            term: Cell::new(0),
            commit: Cell::new(0),
            progress: RefCell::new(Vec::new()),
            changed: Event::new(),
            failure: RefCell::new(None),
        }
    }

    /// Applies one committed entry and answers its proposer if that is this process.
    pub fn apply_entry(&self, entry: &Entry) {
        if !is_command(entry) {
            if entry.get_entry_type() != raft::eraftpb::EntryType::EntryNormal {
                tracing::warn!(index = entry.index, "ignoring a conf-change entry");
            }
            return;
        }
        let outcome = self.sm.borrow_mut().apply(entry.index, &entry.data);
        if let Some((node, incarnation, seq)) = decode_context(&entry.context) {
            if node == self.core.node_id && incarnation == self.incarnation {
                self.resolve(seq, Ok((entry.index, outcome)));
            }
        }
    }

    pub fn resolve(&self, seq: u64, result: Result<(u64, S::Outcome), ProposeError>) {
        let waiter = self.pending.borrow_mut().remove(&seq);
        if let Some(waiter) = waiter {
            // The proposer may have timed out and gone; then nobody needs the answer.
            let _ = waiter.send(result);
        }
    }

    pub fn fail_pending(&self, error: ProposeError) {
        let waiters: Vec<_> = self.pending.borrow_mut().drain().collect();
        for (_, waiter) in waiters {
            let _ = waiter.send(Err(error.clone()));
        }
    }

    pub fn applied_index(&self) -> u64 {
        self.applied.get()
    }

    /// On an observer: the leader, term and commit index a voter reported.
    pub fn set_view(&self, leader: Option<i32>, term: u64, commit: u64) {
        let moved = self.leader.get() != leader || self.term.get() != term;
        self.leader.set(leader);
        self.term.set(term);
        self.commit.set(commit);
        if moved {
            self.changed.notify(usize::MAX);
        }
    }

    pub fn set_applied(&self, index: u64) {
        if index != self.applied.get() {
            self.applied.set(index);
            self.changed.notify(usize::MAX);
        }
    }

    fn closed_error(&self) -> ProposeError {
        match &*self.failure.borrow() {
            Some(text) => ProposeError::Io(text.clone()),
            None => ProposeError::Shutdown,
        }
    }
}

/// A node of the metadata quorum. See the crate documentation.
pub struct Quorum<S: StateMachine> {
    shared: Rc<Shared<S>>,
    local_addr: Option<SocketAddr>,
    proposal_timeout: Duration,
}

/// What recovery hands the driver.
struct Restored {
    log: MemLog,
    applied: u64,
    last_index: u64,
}

/// Rebuilds the state machine and the in-memory log from what was read from disk: restores the
/// snapshot, then applies every entry up to the persisted commit index.
fn restore<S: StateMachine>(
    cfg: &QuorumConfig,
    recovered: Recovered,
    sm: &mut S,
) -> anyhow::Result<Restored> {
    let voters = cfg.voter_raft_ids();
    let (mut hs, stored) = recovered
        .hard_state
        .unwrap_or_else(|| (HardState::default(), voters_conf_state(voters.clone())));
    let mut stored_voters = stored.voters.clone();
    stored_voters.sort_unstable();
    anyhow::ensure!(
        stored_voters == voters,
        "the metadata log in {} belongs to a quorum with voters {:?} (raft ids), but \
         controller.quorum.voters gives {:?}; membership changes are not supported, so restore \
         the old voter list or start from an empty directory",
        cfg.dir.display(),
        stored_voters,
        voters
    );
    let snapshot = recovered.snapshot.unwrap_or_default();
    let snapshot_index = snapshot.get_metadata().index;
    if snapshot_index > 0 {
        sm.restore(&snapshot.data)
            .context("restoring the state machine from the snapshot")?;
    }
    let entries = recovered.entries;
    let last_index = entries.last().map_or(snapshot_index, |e| e.index);
    if hs.commit > last_index {
        tracing::warn!(
            commit = hs.commit,
            last_index,
            "quorum hard state commits past the log's end; lowering it"
        );
    }
    hs.commit = hs.commit.clamp(snapshot_index, last_index);
    let mut applied_commands = 0usize;
    for entry in entries.iter().take_while(|e| e.index <= hs.commit) {
        if is_command(entry) {
            sm.apply(entry.index, &entry.data);
            applied_commands += 1;
        }
    }
    tracing::info!(
        node = cfg.node_id,
        snapshot_index,
        commit = hs.commit,
        last_index,
        applied_commands,
        "quorum state recovered"
    );
    let applied = hs.commit;
    let log = MemLog::new(hs, voters_conf_state(voters), snapshot, entries);
    Ok(Restored {
        log,
        applied,
        last_index,
    })
}

impl<S: StateMachine> Quorum<S> {
    /// Opens the log in `cfg.dir` (restores the snapshot into `sm`, then applies every entry up
    /// to the persisted commit index), binds the peer listener, and spawns the driver and
    /// transport tasks on the current glommio executor, in a task queue of their own. With one
    /// voter it campaigns at once and returns once it is leader and has applied its whole log.
    pub async fn open(cfg: QuorumConfig, mut sm: S) -> anyhow::Result<Rc<Self>> {
        cfg.validate()?;
        if cfg.role == Role::Observer {
            return Ok(Self::open_observer(cfg, sm).await);
        }
        let (disk, recovered) = DiskLog::open(&cfg.dir)
            .await
            .with_context(|| format!("opening the quorum log in {}", cfg.dir.display()))?;
        let restored = restore(&cfg, recovered, &mut sm)?;
        let raft_cfg = cfg.raft_config(restored.applied)?;
        let logger = crate::logger::raft_logger(cfg.node_id);
        let mut raw = RawNode::new(&raft_cfg, restored.log, &logger).context("starting raft")?;
        let single = cfg.voters.len() == 1;
        if single {
            raw.campaign().context("campaigning as the only voter")?;
        }
        // Every step that can fail comes before the first task is spawned, so a failed open
        // leaves no task behind.
        let (listener, local_addr) = match cfg.listen {
            Some(addr) => {
                let (listener, bound) = transport::bind(addr)
                    .with_context(|| format!("binding the quorum listener on {addr}"))?;
                (Some(listener), Some(bound))
            }
            None => (None, None),
        };
        let (core, inbox_rx) = new_core(&cfg);
        let shared = Rc::new(Shared::new(core.clone(), sm, restored.applied));
        let peers = transport::start(&core, listener);
        let driver = Driver::new(
            shared.clone(),
            raw,
            disk,
            peers,
            inbox_rx,
            cfg.heartbeat_interval,
            cfg.snapshot_every_entries,
        );
        core.spawn_counted(driver.run());
        let quorum = Rc::new(Quorum {
            shared,
            local_addr,
            proposal_timeout: cfg.proposal_timeout,
        });
        if single {
            let limit = cfg.election_timeout.max(cfg.proposal_timeout);
            let ready = quorum.wait_until(limit, |q| {
                q.is_leader() && q.applied_index() >= restored.last_index
            });
            if !ready.await {
                tracing::warn!(
                    node = cfg.node_id,
                    "single-voter quorum not leader with its log applied after {limit:?}"
                );
            }
        }
        Ok(quorum)
    }

    /// An observer: nothing on disk, no listener; it fetches the committed log from the voters
    /// (see `observer`). Returns once it has applied the commit index the first voter to answer
    /// reported, or after the election timeout (then it keeps catching up in the background).
    async fn open_observer(cfg: QuorumConfig, sm: S) -> Rc<Self> {
        let (core, inbox_rx) = new_core(&cfg);
        let shared = Rc::new(Shared::new(core, sm, 0));
        crate::observer::start(&shared, inbox_rx);
        let quorum = Rc::new(Quorum {
            shared,
            local_addr: None,
            proposal_timeout: cfg.proposal_timeout,
        });
        let limit = cfg.election_timeout.max(cfg.proposal_timeout);
        let caught_up = quorum.wait_until(limit, |q| {
            q.leader().is_some() && q.applied_index() >= q.commit_index()
        });
        if !caught_up.await {
            tracing::warn!(
                node = cfg.node_id,
                "observer has not caught up with the metadata log after {limit:?}; no voter \
                 answered yet (are controller.quorum.voters running and reachable?)"
            );
        }
        quorum
    }

    /// Waits until `done(self)` holds or the quorum closes (false) or `limit` passes (false).
    async fn wait_until(&self, limit: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.shared.core.is_closed() {
                return false;
            }
            let listener = self.shared.changed.listen();
            if done(self) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            futures_lite::future::or(listener, glommio::timer::sleep(left)).await;
        }
    }

    /// Proposes a command; resolves once its entry is committed and applied on this node, with
    /// its raft index and what `apply` returned for it. Works on followers too (raft forwards the
    /// proposal to the leader). A proposal that is lost (a leader change) fails with `Timeout`
    /// after the proposal timeout — it may still be applied later.
    pub async fn propose(&self, command: Vec<u8>) -> Result<(u64, S::Outcome), ProposeError> {
        self.submit(command, None).await
    }

    /// Proposes a command only if this node is the leader at `term` when the driver takes it
    /// (`NotLeader` otherwise; never forwarded): for decisions only the leader may take, made
    /// from what it saw as the leader of that term. An entry appended this way commits only if
    /// that term's log wins, so a deposed leader's late decision is never applied.
    pub async fn propose_as_leader(
        &self,
        command: Vec<u8>,
        term: u64,
    ) -> Result<(u64, S::Outcome), ProposeError> {
        self.submit(command, Some(term)).await
    }

    async fn submit(
        &self,
        command: Vec<u8>,
        leader_term: Option<u64>,
    ) -> Result<(u64, S::Outcome), ProposeError> {
        let shared = &self.shared;
        if shared.core.is_closed() {
            return Err(shared.closed_error());
        }
        if command.len() > COMMAND_BYTES_MAX {
            return Err(ProposeError::TooLarge {
                len: command.len(),
                max: COMMAND_BYTES_MAX,
            });
        }
        if shared.leader.get().is_none() {
            return Err(ProposeError::NoLeader);
        }
        let seq = shared.next_seq.get();
        shared.next_seq.set(seq + 1);
        let (tx, rx) = oneshot::channel();
        shared.pending.borrow_mut().insert(seq, tx);
        let _forget = ForgetOnDrop {
            shared: shared.as_ref(),
            seq,
        };
        let work = async {
            let input = Input::Propose {
                seq,
                data: command,
                leader_term,
            };
            if shared.core.inbox.send(input).await.is_err() {
                return Err(shared.closed_error());
            }
            match rx.await {
                Ok(result) => result,
                Err(_) => Err(shared.closed_error()),
            }
        };
        let limit = self.proposal_timeout;
        futures_lite::future::or(work, async move {
            glommio::timer::sleep(limit).await;
            Err(ProposeError::Timeout)
        })
        .await
    }

    /// Runs `f` on the state machine. The borrow lasts for the call only; `f` must not await.
    pub fn with_state<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.shared.sm.borrow())
    }

    /// The raft index of the last entry applied to the state machine.
    pub fn applied_index(&self) -> u64 {
        self.shared.applied.get()
    }

    /// Resolves when `applied_index() >= index`, or when the quorum closes.
    pub async fn wait_applied(&self, index: u64) {
        loop {
            if self.applied_index() >= index || self.shared.core.is_closed() {
                return;
            }
            let listener = self.shared.changed.listen();
            if self.applied_index() >= index || self.shared.core.is_closed() {
                return;
            }
            listener.await;
        }
    }

    /// Resolves once `applied_index()` differs from `seen` (or the quorum closes), returning
    /// the new applied index. The broker keeps the value it last saw and loops:
    /// `seen = quorum.changed(seen).await` and republishes its image each time. Nothing is missed:
    /// an apply between two calls makes the next call return at once.
    pub async fn changed(&self, seen: u64) -> u64 {
        loop {
            let now = self.applied_index();
            if now != seen || self.shared.core.is_closed() {
                return now;
            }
            let listener = self.shared.changed.listen();
            let now = self.applied_index();
            if now != seen || self.shared.core.is_closed() {
                return now;
            }
            listener.await;
        }
    }

    /// The node id of the current leader, if known.
    pub fn leader(&self) -> Option<i32> {
        self.shared.leader.get()
    }

    pub fn is_leader(&self) -> bool {
        self.shared.is_leader.get()
    }

    pub fn term(&self) -> u64 {
        self.shared.term.get()
    }

    /// The quorum's commit index as this node knows it.
    pub fn commit_index(&self) -> u64 {
        self.shared.commit.get()
    }

    /// On the leader: each voter's log end as replicated to it (the leader's own last index for
    /// itself), for DescribeQuorum. Empty on followers.
    pub fn voter_progress(&self) -> Vec<(i32, u64)> {
        self.shared.progress.borrow().clone()
    }

    /// On the leader: for each other voter, how long since a message from it arrived (`None`:
    /// never, in this process), and for each observer it has heard from, how long since its
    /// last fetch. Empty on followers and observers.
    pub fn peer_silence(&self) -> Vec<(i32, Option<Duration>)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let core = &self.shared.core;
        let voters = core
            .voters
            .iter()
            .filter(|(id, _)| *id != core.node_id)
            .map(|(id, _)| {
                let heard = core.last_heard(raft_id(*id));
                (*id, heard.map(|at| at.elapsed()))
            });
        let observers = core
            .observers_heard()
            .into_iter()
            .map(|(id, at)| (id, Some(at.elapsed())));
        voters.chain(observers).collect()
    }

    /// On the leader: the peers (voters and observers) with evidence that their process is
    /// gone, newer than their last message. Empty on followers and observers.
    pub fn peer_evidence(&self) -> Vec<(i32, Evidence)> {
        if !self.is_leader() {
            return Vec::new();
        }
        self.shared
            .core
            .gone_peers()
            .into_iter()
            .filter_map(|(raft, evidence)| Some((node_id(raft)?, evidence)))
            .collect()
    }

    /// Resolves once the quorum's leader or term differs from `leader` and `term` (or the
    /// quorum closes): a node that just became the leader acts at once.
    pub async fn leadership_changed(&self, leader: Option<i32>, term: u64) {
        loop {
            let moved = || self.leader() != leader || self.term() != term;
            if moved() || self.shared.core.is_closed() {
                return;
            }
            let listener = self.shared.changed.listen();
            if moved() || self.shared.core.is_closed() {
                return;
            }
            listener.await;
        }
    }

    /// How many pieces of evidence that a peer is gone have arrived so far.
    pub fn evidence_count(&self) -> u64 {
        self.shared.core.evidence_count.get()
    }

    /// Resolves once [`Self::evidence_count`] differs from `seen` (see [`Self::peer_evidence`]).
    pub async fn evidence_arrived(&self, seen: u64) {
        let core = &self.shared.core;
        loop {
            if core.evidence_count.get() != seen {
                return;
            }
            let listener = core.evidence_arrived.listen();
            if core.evidence_count.get() != seen {
                return;
            }
            listener.await;
        }
    }

    /// Whether this node is an observer (outside the voters).
    pub fn is_observer(&self) -> bool {
        !self.shared.core.is_voter(self.shared.core.node_id)
    }

    /// The bound peer listener address (useful with port 0); `None` without a listener.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stops the driver and transport tasks, closes the listener and peer connections, and
    /// waits for them to end. Pending proposals fail with `Shutdown`. Idempotent.
    pub async fn shutdown(&self) {
        let shared = &self.shared;
        shared.core.close();
        shared.changed.notify(usize::MAX);
        shared.core.tasks_ended().await;
        shared.fail_pending(shared.closed_error());
        // The kernel keeps a listening socket open while io_uring holds an accept on it; the
        // accept's cancellation goes out on the reactor's next poll, which a short timer forces,
        // so the port is released when this returns.
        glommio::timer::sleep(LISTENER_RELEASE_WAIT).await;
    }
}

impl<S: StateMachine> Drop for Quorum<S> {
    fn drop(&mut self) {
        // Without a shutdown call the tasks still stop, on their next turn.
        self.shared.core.close();
    }
}

/// Removes a proposal's waiter when `propose` returns or is cancelled, so timed-out proposals
/// do not pile up in the table.
struct ForgetOnDrop<'a, S: StateMachine> {
    shared: &'a Shared<S>,
    seq: u64,
}

impl<S: StateMachine> Drop for ForgetOnDrop<'_, S> {
    fn drop(&mut self) {
        self.shared.pending.borrow_mut().remove(&self.seq);
    }
}

/// The state every task of a quorum member shares, in a task queue of its own, and the
/// driver's (or observer's) end of its inbox.
fn new_core(cfg: &QuorumConfig) -> (Rc<Core>, async_channel::Receiver<Input>) {
    let task_queue = glommio::executor().create_task_queue(
        Shares::default(),
        Latency::Matters(TASK_QUEUE_LATENCY),
        "quorum",
    );
    let (inbox_tx, inbox_rx) = async_channel::bounded(INBOX_MAX);
    let core = Rc::new(Core::new(
        cfg.node_id,
        cfg.voters.clone(),
        inbox_tx,
        task_queue,
        cfg.doubts.clone(),
    ));
    (core, inbox_rx)
}

/// A number that tells this process's proposals from an earlier run's: nanoseconds since the
/// epoch at open, made strictly increasing within the process so two opens never share one.
fn incarnation() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}
