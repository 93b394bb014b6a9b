//! The state the driver and the transport tasks share, none of it generic over the state machine:
//! the driver's inbox, the shutdown signal, when each peer was last heard from, and the count of
//! live connection tasks that shutdown waits for. Everything here is single-threaded (`Cell`,
//! `RefCell` borrowed only between awaits).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use event_listener::Event;
use glommio::TaskQueueHandle;
use raft::eraftpb::Message;
use raft::SnapshotStatus;

use crate::observer::FetchAnswer;

/// The driver's inbox capacity. Senders wait when it is full, which pushes back on the peer
/// connection that delivers faster than raft steps.
pub const INBOX_MAX: usize = 4096;

/// What the driver is told.
pub enum Input {
    /// A message from a peer, already checked to come from the voter it claims.
    Message(Message),
    /// A proposal from this node; `seq` finds its waiter in the pending table.
    /// With `leader_term`, only while this node leads at that term (never forwarded).
    Propose {
        seq: u64,
        data: Vec<u8>,
        leader_term: Option<u64>,
    },
    /// A send to this peer (raft id) failed.
    Unreachable(u64),
    /// This voter (raft id) is gone: its connection to this node ended and its port then
    /// refused a connection.
    VoterGone(u64),
    /// How a snapshot send to this peer (raft id) ended.
    SnapshotStatus(u64, SnapshotStatus),
    /// An observer asks for the committed log from raft index `from` on.
    ObserverFetch {
        from: u64,
        reply: futures::channel::oneshot::Sender<FetchAnswer>,
    },
    /// An observer's proposal, with the context its proposer recognises it by.
    Forward { context: Vec<u8>, data: Vec<u8> },
}

/// What shows that a peer's process is gone, as opposed to silent: a dead process leaves
/// evidence (the kernel closes its sockets and nothing listens on its port), a paused or
/// cut-off one leaves none, and only a timeout judges those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// Its quorum port refused a connection: nothing listens there, so the process that
    /// did is not running (it died, or restarts and has not bound the port yet).
    Refused,
    /// An observer's fetch connection ended and it has not fetched since. Not proof by
    /// itself (an observer also reconnects to another voter): the caller checks further.
    Closed,
}

pub struct Core {
    pub node_id: i32,
    pub raft_id: u64,
    pub voters: Vec<(i32, SocketAddr)>,
    pub inbox: async_channel::Sender<Input>,
    pub task_queue: TaskQueueHandle,
    closed: Cell<bool>,
    shutdown: Event,
    /// Raft id → when its last message arrived.
    last_heard: RefCell<HashMap<u64, Instant>>,
    /// Raft id → the newest evidence that its process is gone, and when it came.
    gone: RefCell<HashMap<u64, (Evidence, Instant)>>,
    /// Fires when evidence that a peer is gone arrives; `evidence_count` counts them, so a
    /// waiter that was busy when one fired still sees it.
    pub evidence_arrived: Event,
    pub evidence_count: Cell<u64>,
    live_tasks: Cell<usize>,
    tasks_done: Event,
    /// Fires when the commit index moves (observer fetches wait on it).
    pub commit_moved: Event,
    /// The transport's doubts about voters, shared with other threads.
    pub doubts: std::sync::Arc<crate::PeerDoubts>,
}

impl Core {
    pub fn new(
        node_id: i32,
        voters: Vec<(i32, SocketAddr)>,
        inbox: async_channel::Sender<Input>,
        task_queue: TaskQueueHandle,
        doubts: std::sync::Arc<crate::PeerDoubts>,
    ) -> Core {
        Core {
            node_id,
            raft_id: crate::config::raft_id(node_id),
            voters,
            inbox,
            task_queue,
            closed: Cell::new(false),
            shutdown: Event::new(),
            last_heard: RefCell::new(HashMap::new()),
            gone: RefCell::new(HashMap::new()),
            evidence_arrived: Event::new(),
            evidence_count: Cell::new(0),
            live_tasks: Cell::new(0),
            tasks_done: Event::new(),
            commit_moved: Event::new(),
            doubts,
        }
    }

    /// Voter `node_id`'s quorum address.
    pub fn voter_addr(&self, node_id: i32) -> Option<SocketAddr> {
        self.voters
            .iter()
            .find(|(id, _)| *id == node_id)
            .map(|(_, addr)| *addr)
    }

    pub fn is_voter(&self, node_id: i32) -> bool {
        self.voters.iter().any(|(id, _)| *id == node_id)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Tells every task to stop.
    pub fn close(&self) {
        self.closed.set(true);
        self.shutdown.notify(usize::MAX);
    }

    /// Resolves once [`close`](Self::close) has been called.
    pub async fn closed(&self) {
        loop {
            if self.closed.get() {
                return;
            }
            let listener = self.shutdown.listen();
            if self.closed.get() {
                return;
            }
            listener.await;
        }
    }

    /// Runs `work` until it ends or the quorum closes, whichever is first.
    pub async fn until_closed<F: Future<Output = ()>>(&self, work: F) {
        futures_lite::future::or(work, self.closed()).await
    }

    pub fn heard_from(&self, raft_id: u64) {
        self.last_heard.borrow_mut().insert(raft_id, Instant::now());
        if let Some(node) = crate::config::node_id(raft_id) {
            self.doubts.cleared(node);
        }
    }

    pub fn last_heard(&self, raft_id: u64) -> Option<Instant> {
        self.last_heard.borrow().get(&raft_id).copied()
    }

    /// Records evidence that the process of `raft_id` is gone; it stands until a message from
    /// that node arrives after it. Returns whether it is news: no evidence stood since the
    /// node was last heard (a peer that stays down is refused at every reconnect, and is news
    /// only once).
    pub fn peer_gone(&self, raft_id: u64, evidence: Evidence) -> bool {
        let standing = self.gone_peers().iter().any(|(id, _)| *id == raft_id);
        self.gone
            .borrow_mut()
            .insert(raft_id, (evidence, Instant::now()));
        if !standing {
            self.evidence_count.set(self.evidence_count.get() + 1);
            self.evidence_arrived.notify(usize::MAX);
        }
        !standing
    }

    /// Every peer whose newest evidence of death came after its last message.
    pub fn gone_peers(&self) -> Vec<(u64, Evidence)> {
        let heard = self.last_heard.borrow();
        self.gone
            .borrow()
            .iter()
            .filter(|(id, (_, at))| heard.get(id).is_none_or(|h| h < at))
            .map(|(id, (evidence, _))| (*id, *evidence))
            .collect()
    }

    /// Every node heard from that is not a voter (observers), with when.
    pub fn observers_heard(&self) -> Vec<(i32, Instant)> {
        self.last_heard
            .borrow()
            .iter()
            .filter_map(|(raft, at)| Some((crate::config::node_id(*raft)?, *at)))
            .filter(|(id, _)| !self.is_voter(*id))
            .collect()
    }

    /// Spawns a task counted until it ends, on the quorum's task queue.
    pub fn spawn_counted<F: Future<Output = ()> + 'static>(self: &Rc<Self>, work: F) {
        let guard = TaskGuard::new(self.clone());
        let task = glommio::spawn_local_into(
            async move {
                let _guard = guard;
                work.await;
            },
            self.task_queue,
        );
        match task {
            Ok(task) => {
                task.detach();
            }
            Err(e) => tracing::error!(error = %e, "cannot spawn a quorum task"),
        }
    }

    /// Resolves once every counted task has ended.
    pub async fn tasks_ended(&self) {
        loop {
            if self.live_tasks.get() == 0 {
                return;
            }
            let listener = self.tasks_done.listen();
            if self.live_tasks.get() == 0 {
                return;
            }
            listener.await;
        }
    }
}

/// Counts a live task; dropping it (the task ended or was cancelled) uncounts it.
struct TaskGuard(Rc<Core>);

impl TaskGuard {
    fn new(core: Rc<Core>) -> TaskGuard {
        core.live_tasks.set(core.live_tasks.get() + 1);
        TaskGuard(core)
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let live = self.0.live_tasks.get() - 1;
        self.0.live_tasks.set(live);
        if live == 0 {
            self.0.tasks_done.notify(usize::MAX);
        }
    }
}
