//! # tributary-sim
//!
//! A deterministic simulation of a Tributary cluster, in the manner of TigerBeetle's VOPR: N
//! nodes run the *real* decisions — the metadata quorum (raft-rs `RawNode` stepping the
//! metadata image's `apply`), the active controller's fencing (`liveness::judge`) and the
//! elections `apply` makes, a leader's ISR and high-watermark bookkeeping, the divergence check
//! and the follower's truncation — over model logs, on one thread, driven by a seeded
//! scheduler with a simulated clock, network (delays, reordering, drops, one-way and two-way
//! cuts, link timeouts) and disk (a crash loses what no fsync covered). Clients are idempotent
//! acks=all producers, retrying each batch until it is acknowledged; the logs keep the real
//! producer state. After every step the [`check`] module checks the invariants; everything is a
//! function of the seed, so a failure replays exactly.
//!
//! Not modelled (yet): producer epochs and InitProducerId, transactions, consumer groups, reassignment,
//! DeleteRecords, the acks=all backlog bound, quorum snapshots.

pub mod check;
pub mod log;
pub mod node;
pub mod replica;
pub mod rng;
mod world;

use std::time::Duration;

use raft::prelude::Message;
use tributary_protocol::ErrorCode;
use tributary_replication::IsrRules;

pub use world::{run, Failure, Options, Report};

/// The topic the clients write.
pub const TOPIC: &str = "sim";

/// The cluster's settings: the real defaults where the broker has one.
#[derive(Debug, Clone)]
pub struct Limits {
    pub nodes: i32,
    pub partitions: i32,
    pub min_insync_replicas: i32,
    /// `controller.quorum.election.timeout.ms` / heartbeat interval (the raft tick).
    pub tick_ms: u64,
    pub election_ticks: usize,
    /// `broker.heartbeat.interval.ms`: the controller's round.
    pub controller_round_ms: u64,
    /// `broker.session.timeout.ms`.
    pub session_ms: u64,
    pub lag_max_ms: u64,
    pub fetch_silence_max_ms: u64,
    /// `replica.link.timeout.ms`: a cut link is closed by the kernel after this long.
    pub link_timeout_ms: u64,
    /// `isr_check_interval_ms` of the defaults.
    pub isr_check_ms: u64,
    pub request_timeout_ms: u64,
    pub proposal_timeout_ms: u64,
    pub fetch_records_max: usize,
    /// A rule broken on purpose, which must make the run fail.
    pub canary: Option<Canary>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            nodes: 3,
            partitions: 2,
            min_insync_replicas: 2,
            tick_ms: 100,
            election_ticks: 10,
            controller_round_ms: 250,
            session_ms: 2000,
            lag_max_ms: 30_000,
            fetch_silence_max_ms: 5000,
            link_timeout_ms: 2000,
            isr_check_ms: 1250,
            request_timeout_ms: 3000,
            proposal_timeout_ms: 5000,
            fetch_records_max: 20,
            canary: None,
        }
    }
}

impl Limits {
    pub fn isr_rules(&self) -> IsrRules {
        IsrRules {
            lag_max: Duration::from_millis(self.lag_max_ms),
            silence_max: Some(Duration::from_millis(self.fetch_silence_max_ms)),
        }
    }
}

/// A rule broken on purpose: the checks must catch each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// The high watermark is the leader's durable end, ignoring the ISR: an acknowledged
    /// record may be on no other replica.
    HighWatermarkIgnoresIsr,
    /// The leader appends every batch without its sequence check: a retry is written twice.
    NoSequenceCheck,
}

impl Canary {
    pub fn name(self) -> &'static str {
        match self {
            Canary::HighWatermarkIgnoresIsr => "hw",
            Canary::NoSequenceCheck => "dedup",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Canary::HighWatermarkIgnoresIsr, Canary::NoSequenceCheck]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

/// What a leader answers a follower's fetch.
#[derive(Debug, Clone)]
pub enum FetchAnswer {
    Error(ErrorCode),
    /// The logs diverge: the leader's `(epoch, end offset)`.
    Diverging((i32, i64)),
    /// Records from this offset, and the leader's high watermark.
    Records(i64, Vec<log::Record>, i64),
}

/// What travels between nodes and clients.
#[derive(Debug, Clone)]
pub enum Body {
    Raft(Message),
    Fetch {
        partition: i32,
        fetch: u64,
        offset: i64,
        current_epoch: i32,
        last_fetched_epoch: i32,
    },
    FetchReply {
        partition: i32,
        fetch: u64,
        answer: FetchAnswer,
    },
    /// An idempotent producer's batch: its producer id, first sequence and record ids.
    Produce {
        partition: i32,
        client: usize,
        request: u64,
        producer: i64,
        first_seq: i32,
        ids: Vec<u64>,
    },
    ProduceReply {
        client: usize,
        request: u64,
        result: Result<i64, ErrorCode>,
    },
}

/// Something that happens at a moment of simulated time. Node events carry the process
/// incarnation they belong to: those of a process that died are dropped.
#[derive(Debug, Clone)]
pub enum Event {
    Tick(i32, u64),
    ControllerRound(i32, u64),
    IsrCheck(i32, u64),
    FetchDue(i32, u64, i32),
    AckDeadline(i32, u64, i32),
    Synced {
        node: i32,
        incarnation: u64,
        partition: i32,
        upto: i64,
        generation: u64,
    },
    Deliver {
        from: i32,
        to: Target,
        to_incarnation: u64,
        body: Body,
    },
    Fault,
    /// SIGTERM: a controlled shutdown, then the process exits.
    Shutdown(i32),
    Heal(u64),
    Restart(i32),
    LinkTimeout(u64),
    ProduceDue(usize),
    ClientTimeout(usize, u64),
}

/// Where a message goes: a node or a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Node(i32),
    Client(usize),
}

/// What a node's step does to the world, carried out by the world after the step.
#[derive(Debug, Default)]
pub struct Effects {
    pub sends: Vec<(i32, Target, Body)>,
    /// Events after a delay in ms; `None`: a disk delay the world draws (it owns the generator).
    pub timers: Vec<(Option<u64>, Event)>,
    pub began_leading: Vec<(i32, i32)>,
    pub truncated: Vec<(i32, i32)>,
    pub hw_moved: Vec<(i32, i32)>,
    /// The node's controlled shutdown is done: its process exits.
    pub exit: Option<i32>,
}

impl Effects {
    pub fn send(&mut self, from: i32, to: i32, body: Body) {
        self.sends.push((from, Target::Node(to), body));
    }

    pub fn reply(
        &mut self,
        from: i32,
        client: usize,
        request: u64,
        result: Result<i64, ErrorCode>,
    ) {
        let body = Body::ProduceReply {
            client,
            request,
            result,
        };
        self.sends.push((from, Target::Client(client), body));
    }

    pub fn timer(&mut self, after_ms: u64, event: Event) {
        self.timers.push((Some(after_ms), event));
    }

    /// An fsync of `partition` as its log ends now, completing a little later.
    pub fn sync(&mut self, node: i32, incarnation: u64, partition: i32, log: &log::ReplicaLog) {
        let event = Event::Synced {
            node,
            incarnation,
            partition,
            upto: log.log_end_offset(),
            generation: log.generation(),
        };
        self.timers.push((None, event));
    }
}
