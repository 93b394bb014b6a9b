//! # tributary-replication
//!
//! Kafka's ISR protocol as decisions, pure: no runtime, no I/O, no clock (time is passed in as
//! an `Instant`, so a simulation drives it with its own). What a leader keeps of its followers
//! — each one's log end offset (the offset of its next fetch, which it sends only once what it
//! fetched before is durable) and when it was last caught up — the high watermark over the
//! ISR, the ISR it should propose (shrink a follower out of sync, grow it back once caught
//! up), the backlog bound of acks=all appends, and where a follower's log diverges from its
//! leader's and how far it truncates. The broker's tasks (`broker/src/replica`) only move
//! bytes and call these; the simulator calls the same functions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use tributary_metadata::types::{LeaderEpoch, NodeId, Offset, PartitionEpoch};

/// A connection that carried a follower's fetches to this node: unique in the process, so the
/// partitions fetched over a link that died can be told from those fetched over another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkId(u64);

impl LinkId {
    /// A link id no connection of this process had before.
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A follower as its leader sees it.
#[derive(Debug, Clone, Copy)]
pub struct FollowerState {
    /// The offset of its last fetch: everything below is durable on it.
    pub log_end_offset: Offset,
    /// The last moment it held everything the leader had then.
    pub last_caught_up: Instant,
    /// The leader's log end offset when it answered the follower's previous fetch, and when.
    pub last_fetch_leader_end: Offset,
    pub last_fetch_at: Instant,
    /// The connection its last fetch came over.
    pub link: Option<LinkId>,
    /// That connection timed out in the kernel (`replica.link.timeout.ms`: the follower's
    /// side stopped answering) and no fetch has come since.
    pub unreachable: bool,
}

impl FollowerState {
    /// A follower that has not fetched yet, given a full lag window from `now`.
    fn new(now: Instant) -> Self {
        Self {
            log_end_offset: Offset(-1),
            last_caught_up: now,
            last_fetch_leader_end: Offset(i64::MAX),
            last_fetch_at: now,
            link: None,
            unreachable: false,
        }
    }
}

/// When a follower counts as in sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsrRules {
    /// `replica.lag.time.max.ms`: it held everything the leader had at most this long ago.
    pub lag_max: Duration,
    /// `replica.fetch.silence.max.ms`: and a fetch of its reached the leader at most this long
    /// ago (none: fetches are not timed). A cut link stops the fetches at once, and the lag
    /// window alone would keep the follower in the ISR, holding every acks=all write, for
    /// all of it.
    pub silence_max: Option<Duration>,
}

/// Why a follower is out of sync, for the log line of the ISR change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfSync {
    /// Not caught up for longer than `replica.lag.time.max.ms`.
    Lagging,
    /// No fetch for longer than `replica.fetch.silence.max.ms`.
    Silent,
    /// The connection its fetches came over timed out in the kernel, and none came since.
    Unreachable,
}

impl IsrRules {
    pub fn in_sync(&self, f: &FollowerState, now: Instant) -> bool {
        self.out_of_sync(f, now).is_none()
    }

    /// Whether, and why, follower `f` is out of sync at `now`.
    pub fn out_of_sync(&self, f: &FollowerState, now: Instant) -> Option<OutOfSync> {
        if f.unreachable {
            return Some(OutOfSync::Unreachable);
        }
        let silent = self
            .silence_max
            .is_some_and(|s| now.saturating_duration_since(f.last_fetch_at) > s);
        if silent {
            Some(OutOfSync::Silent)
        } else if now.saturating_duration_since(f.last_caught_up) > self.lag_max {
            Some(OutOfSync::Lagging)
        } else {
            None
        }
    }
}

/// Whether an acks=all batch of `len` bytes may be appended while `outstanding` bytes of its
/// partition are above the high watermark, under `max` (`replica.backlog.max.bytes`; 0: no
/// bound). With at most one follower fetch outstanding, an in-sync follower's next fetch takes
/// all it lacks, so it stays caught up however fast producers send. One batch always may when
/// nothing is outstanding, however large.
pub fn backlog_admits(outstanding: u64, len: u64, max: u64) -> bool {
    max == 0 || outstanding == 0 || outstanding + len <= max
}

/// A partition this shard leads with more than one replica.
#[derive(Debug, Clone)]
pub struct LeaderState {
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
    /// Where this leader's epoch began: a follower joins the ISR only once it holds this much
    /// (Kafka's `leaderEpochStartOffset` check).
    pub epoch_start_offset: Offset,
    pub followers: HashMap<NodeId, FollowerState>,
    /// An ISR change is proposed and its outcome not known yet: no other is proposed.
    pub isr_change_pending: bool,
    /// The members of every ISR proposed at this partition epoch and not yet decided (Kafka's
    /// "maximal ISR"): the high watermark counts them too, since any such proposal may still
    /// be applied — and once a new member may be in the committed ISR, the high watermark must
    /// not pass what it holds. Decided only when the partition epoch moves (the change, or
    /// another, was applied: the controller refuses one of an older partition epoch) or the
    /// controller refused it; never by a timeout or an unrelated image change.
    pub pending_isr: Option<Vec<NodeId>>,
    /// A change proposed at this partition epoch may still be applied: its outcome is unknown.
    pub pending_unknown: bool,
    /// The acks=all appends waiting for room in the backlog, in arrival order.
    pub turns: std::rc::Rc<Turns>,
}

/// Hands out turns in arrival order: a producer's batches to one partition arrive in
/// sequence, and must be appended in it (an idempotent producer's sequence numbers).
#[derive(Debug, Default)]
pub struct Turns {
    next: std::cell::Cell<u64>,
    serving: std::cell::Cell<u64>,
    moved: event_listener::Event,
}

impl Turns {
    /// A place in the line.
    pub fn take(&self) -> u64 {
        let t = self.next.get();
        self.next.set(t + 1);
        t
    }

    /// Whether `ticket` is being served now (no earlier one is still waiting or appending).
    pub fn serves(&self, ticket: u64) -> bool {
        self.serving.get() == ticket
    }

    /// Resolves once `ticket` is served; [`Turns::done`] then serves the next.
    pub async fn wait(&self, ticket: u64) {
        while !self.serves(ticket) {
            let moved = self.moved.listen();
            if self.serves(ticket) {
                break;
            }
            moved.await;
        }
    }

    pub fn done(&self) {
        self.serving.set(self.serving.get() + 1);
        self.moved.notify(usize::MAX);
    }
}

impl LeaderState {
    pub fn new(
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
        replicas: Vec<NodeId>,
        isr: Vec<NodeId>,
        epoch_start_offset: Offset,
        now: Instant,
    ) -> Self {
        // Every follower starts caught up: a new leader gives each a full lag window.
        let followers = replicas
            .iter()
            .map(|&r| (r, FollowerState::new(now)))
            .collect();
        Self {
            leader_epoch,
            partition_epoch,
            replicas,
            isr,
            epoch_start_offset,
            followers,
            isr_change_pending: false,
            pending_isr: None,
            pending_unknown: false,
            turns: Default::default(),
        }
    }

    /// Takes a new replica set at the same leader epoch (a reassignment started, completed or
    /// was cancelled): a replica being added is tracked from now on — its fetches count, and it
    /// joins the ISR once caught up — and a replica gone is forgotten.
    pub fn set_replicas(&mut self, replicas: Vec<NodeId>, now: Instant) {
        if replicas == self.replicas {
            return;
        }
        self.followers.retain(|r, _| replicas.contains(r));
        for &r in &replicas {
            self.followers
                .entry(r)
                .or_insert_with(|| FollowerState::new(now));
        }
        self.replicas = replicas;
    }

    /// The image holds the partition at this leader epoch with `partition_epoch`, `isr` and
    /// `replicas`. A pending ISR change is decided once the partition epoch moved; until then
    /// (the image changed for another reason) its members keep holding the high watermark.
    pub fn take_image(
        &mut self,
        partition_epoch: PartitionEpoch,
        isr: Vec<NodeId>,
        replicas: Vec<NodeId>,
        now: Instant,
    ) {
        // Images apply in log order: at one leader epoch the partition epoch never goes back
        // (a topic deleted and recreated under its name is a new leadership, not this one).
        // Debug only: a client's delete and create reach here, and must never stop a broker.
        debug_assert!(
            partition_epoch >= self.partition_epoch,
            "partition epoch {partition_epoch} after {}",
            self.partition_epoch
        );
        if partition_epoch != self.partition_epoch {
            self.isr_change_pending = false;
            self.pending_isr = None;
            self.pending_unknown = false;
        }
        self.partition_epoch = partition_epoch;
        self.isr = isr;
        self.set_replicas(replicas, now);
    }

    /// `isr` is proposed: pending, and its members hold the high watermark (with those of any
    /// earlier proposal at this partition epoch whose outcome is unknown).
    pub fn isr_proposed(&mut self, isr: &[NodeId]) {
        self.isr_change_pending = true;
        let pending = self.pending_isr.get_or_insert_with(Vec::new);
        for &r in isr {
            if !pending.contains(&r) {
                pending.push(r);
            }
        }
        debug_assert!(isr.iter().all(|r| pending.contains(r)));
    }

    /// The controller refused the change proposed at `proposed_at` (a partition epoch):
    /// decided. A refusal of one proposed at an older partition epoch says nothing of the one
    /// pending now, and one proposed at this epoch whose fate is unknown may still be applied:
    /// their members keep holding the high watermark.
    pub fn isr_change_refused(&mut self, proposed_at: PartitionEpoch) {
        if proposed_at != self.partition_epoch {
            return;
        }
        self.isr_change_pending = false;
        if !self.pending_unknown {
            self.pending_isr = None;
        }
    }

    /// The outcome of the change proposed at `proposed_at` is unknown (the proposal timed
    /// out, or the controller changed while it waited): it may still be applied, so its
    /// members keep holding the high watermark until the partition epoch moves; another
    /// change may be proposed meanwhile.
    pub fn isr_change_unknown(&mut self, proposed_at: PartitionEpoch) {
        if proposed_at != self.partition_epoch {
            return;
        }
        self.isr_change_pending = false;
        self.pending_unknown = true;
    }

    /// Records a follower's fetch at `offset`, over `link`, when the leader's log ends at
    /// `leader_end`. As Kafka's `updateFetchState`: a follower at the leader's end is caught up
    /// now; one that reached where the leader ended at its previous fetch was caught up as of
    /// that fetch — so a follower keeping pace with a steady stream of appends stays in sync.
    pub fn record_fetch(
        &mut self,
        follower: NodeId,
        offset: Offset,
        leader_end: Offset,
        link: LinkId,
        now: Instant,
    ) {
        if let Some(f) = self.followers.get_mut(&follower) {
            // A fetch still held here when its link failed is answered into the dead link:
            // only one over another link says the follower is reachable again.
            if f.link != Some(link) {
                f.link = Some(link);
                f.unreachable = false;
            }
            f.log_end_offset = offset;
            if offset >= leader_end {
                f.last_caught_up = now;
            } else if offset >= f.last_fetch_leader_end {
                f.last_caught_up = f.last_caught_up.max(f.last_fetch_at);
            }
            f.last_fetch_leader_end = leader_end;
            f.last_fetch_at = now;
        }
    }

    /// The connection `link` that carried `follower`'s fetches timed out: if its last fetch of
    /// this partition came over it, it is out of sync until it fetches again. Whether it was.
    pub fn link_lost(&mut self, follower: NodeId, link: LinkId) -> bool {
        match self.followers.get_mut(&follower) {
            Some(f) if f.link == Some(link) => {
                f.unreachable = true;
                true
            }
            _ => false,
        }
    }

    /// How many replicas an acknowledged write is on once the high watermark covers it: the
    /// ISR and every member proposed to join it (Kafka's maximal ISR). Below
    /// `min.insync.replicas`, acks=all answers NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    pub fn maximal_isr_size(&self) -> usize {
        let pending = self.pending_isr.iter().flatten();
        let joining = pending.filter(|r| !self.isr.contains(r)).count();
        self.isr.len() + joining
    }

    /// The high watermark: the leader's durable end, held to the log end offset of every other
    /// ISR member. A follower that has not fetched yet in this epoch holds it where it is.
    pub fn high_watermark(&self, me: NodeId, leader_durable: Offset) -> Offset {
        let pending = self.pending_isr.iter().flatten();
        let hw = self
            .isr
            .iter()
            .chain(pending)
            .filter(|&&r| r != me)
            .map(|r| {
                self.followers
                    .get(r)
                    .map_or(Offset(-1), |f| f.log_end_offset)
            })
            .fold(leader_durable, Offset::min);
        assert!(
            hw <= leader_durable,
            "high watermark {hw} above the durable end {leader_durable}"
        );
        hw
    }

    /// The ISR this leader should propose, if it differs: members out of sync by `rules` leave;
    /// replicas that caught up with the high watermark (and this epoch's start) join — if
    /// `eligible` (KIP-841: the leader's image says they are registered, unfenced and not
    /// shutting down; the controller refuses any other with INELIGIBLE_REPLICA).
    pub fn wanted_isr(
        &self,
        me: NodeId,
        hw: Offset,
        rules: IsrRules,
        now: Instant,
        eligible: impl Fn(NodeId) -> bool,
    ) -> Option<Vec<NodeId>> {
        let in_sync = |r: &NodeId| self.followers.get(r).is_some_and(|f| rules.in_sync(f, now));
        let mut isr: Vec<NodeId> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r == me || in_sync(r))
            .collect();
        for &r in &self.replicas {
            if isr.contains(&r) || r == me || !eligible(r) {
                continue;
            }
            let Some(f) = self.followers.get(&r) else {
                continue;
            };
            if f.log_end_offset >= hw.max(self.epoch_start_offset) && in_sync(&r) {
                isr.push(r);
            }
        }
        if !isr.contains(&me) {
            isr.insert(0, me);
        }
        assert!(
            isr.contains(&me),
            "the leader {me} left its own ISR {isr:?}"
        );
        debug_assert!(
            {
                let mut members = isr.clone();
                members.sort_unstable();
                members.dedup();
                members.len() == isr.len()
            },
            "a member twice in {isr:?}"
        );
        (isr != self.isr).then_some(isr)
    }
}

/// Where an acks=all write stands: Kafka's `checkEnoughReplicasReachOffset`, decided in one
/// place for the broker's waiting produce and the simulator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcksAll {
    /// The high watermark has not reached the write's end yet: it waits.
    Waiting,
    /// Covered by the high watermark, on at least `min.insync.replicas` replicas.
    Acknowledged,
    /// Covered, but the ISR shrank below `min.insync.replicas` meanwhile: the write is on
    /// fewer replicas than the producer asked (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    TooFewReplicas,
    /// The leader epoch that wrote it no longer leads here (NOT_LEADER_OR_FOLLOWER). Checked
    /// first: a deposed leader's log may be truncated and refilled by the new leader up to
    /// the same offsets, so its high watermark says nothing about this write. Kafka fails a
    /// waiting produce the moment its broker stops leading, whatever the high watermark.
    Deposed,
    /// The request's timeout passed first (REQUEST_TIMED_OUT).
    TimedOut,
}

/// The acks=all decision for a write that ends at `end`, appended by `written_in`, when this
/// node's leader state for the partition is `leading` (none: it does not lead it) and the
/// partition's high watermark is `high_watermark`.
pub fn acks_all(
    leading: Option<&LeaderState>,
    written_in: LeaderEpoch,
    end: Offset,
    high_watermark: Offset,
    min_insync_replicas: i32,
) -> AcksAll {
    let Some(l) = leading.filter(|l| l.leader_epoch == written_in) else {
        return AcksAll::Deposed;
    };
    if high_watermark < end {
        return AcksAll::Waiting;
    }
    match (l.maximal_isr_size() as i64) < i64::from(min_insync_replicas) {
        true => AcksAll::TooFewReplicas,
        false => AcksAll::Acknowledged,
    }
}

/// The answer to an acks=all write whose timeout passed while it waited: timed out, or, when
/// the ISR is below `min.insync.replicas` by then, too few replicas — the reason it waited.
pub fn acks_all_timed_out(leading: Option<&LeaderState>, min_insync_replicas: i32) -> AcksAll {
    match leading {
        Some(l) if (l.isr.len() as i64) < i64::from(min_insync_replicas) => AcksAll::TooFewReplicas,
        _ => AcksAll::TimedOut,
    }
}

/// The leader's side of a follower's fetch at `fetch_offset` whose last fetched batch was of
/// `last_fetched_epoch` (negative: none, nothing to compare): where the logs diverge, as the
/// Fetch response's `diverging_epoch` (Kafka's KIP-320), or none. `leaders_end` is the leader's
/// `(epoch, end offset)` for that epoch (`LeaderEpochCache::end_offset_for`). They diverge when
/// the leader never had that epoch, or its epoch ended before the follower's fetch offset. An
/// undefined answer cannot travel (-1 reads as "no divergence"): the logs then agree at most up
/// to the leader's log start.
pub fn divergence(
    last_fetched_epoch: i32,
    fetch_offset: Offset,
    leaders_end: (i32, Offset),
    log_start: Offset,
) -> Option<(i32, Offset)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end) = leaders_end;
    if epoch == last_fetched_epoch && end >= fetch_offset {
        return None;
    }
    Some(if epoch < 0 {
        (0, log_start)
    } else {
        (epoch, end)
    })
}

/// The follower's side (Kafka's `getOffsetTruncationState`): the leader says its `epoch` (the
/// largest it has at or below the follower's) ends at `end`. If this replica has that epoch too
/// (`mine`, its own `(epoch, end offset)` for it), the logs agree up to the smaller of the two
/// ends; if not, up to where this replica's largest epoch below it ends — and the next fetch
/// asks again from there. Never past this replica's log end `leo`, never below its log start.
pub fn truncation_target(
    epoch: i32,
    end: Offset,
    mine: (i32, Offset),
    leo: Offset,
    log_start: Offset,
) -> Offset {
    let (my_epoch, my_end) = mine;
    let target = if my_epoch == epoch {
        end.min(my_end).min(leo)
    } else {
        my_end.min(leo)
    };
    target.max(log_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkId = LinkId(1);

    fn any(_: NodeId) -> bool {
        true
    }

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().map(|&r| NodeId(r)).collect()
    }

    fn lag_only(lag: Duration) -> IsrRules {
        IsrRules {
            lag_max: lag,
            silence_max: None,
        }
    }

    fn leader(isr: &[i32]) -> (LeaderState, Instant) {
        let now = Instant::now();
        (
            LeaderState::new(
                LeaderEpoch(1),
                PartitionEpoch(0),
                nodes(&[1, 2, 3]),
                nodes(isr),
                Offset(100),
                now,
            ),
            now,
        )
    }

    #[test]
    fn acks_all_waits_for_the_high_watermark_and_answers_as_kafka_does() {
        let (l, _) = leader(&[1, 2]);
        let decide = |l: Option<&LeaderState>, epoch: i32, hw: i64| {
            acks_all(l, LeaderEpoch(epoch), Offset(120), Offset(hw), 2)
        };
        assert_eq!(decide(Some(&l), 1, 119), AcksAll::Waiting);
        assert_eq!(decide(Some(&l), 1, 120), AcksAll::Acknowledged);
        // Another epoch leads, or none: deposed, even where the high watermark covers it.
        assert_eq!(decide(Some(&l), 0, 200), AcksAll::Deposed);
        assert_eq!(decide(None, 1, 200), AcksAll::Deposed);
        // The ISR shrank below min.insync.replicas: covered, but on too few replicas.
        let (alone, _) = leader(&[1]);
        assert_eq!(decide(Some(&alone), 1, 119), AcksAll::Waiting);
        assert_eq!(decide(Some(&alone), 1, 120), AcksAll::TooFewReplicas);
        // A member proposed to join counts (the maximal ISR).
        let mut joining = alone.clone();
        joining.pending_isr = Some(nodes(&[1, 3]));
        assert_eq!(decide(Some(&joining), 1, 120), AcksAll::Acknowledged);
        // Timed out: too few replicas if that is why it waited.
        assert_eq!(acks_all_timed_out(Some(&l), 2), AcksAll::TimedOut);
        assert_eq!(acks_all_timed_out(Some(&alone), 2), AcksAll::TooFewReplicas);
        assert_eq!(acks_all_timed_out(None, 2), AcksAll::TimedOut);
    }

    #[test]
    fn the_high_watermark_waits_for_every_isr_member() {
        let (mut l, now) = leader(&[1, 2, 3]);
        assert_eq!(
            l.high_watermark(NodeId(1), Offset(150)),
            Offset(-1),
            "no follower fetched yet"
        );
        l.record_fetch(NodeId(2), Offset(140), Offset(150), LINK, now);
        l.record_fetch(NodeId(3), Offset(120), Offset(150), LINK, now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(120));
        l.record_fetch(NodeId(3), Offset(150), Offset(150), LINK, now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(140));
        // Never past what the leader itself made durable.
        l.record_fetch(NodeId(2), Offset(160), Offset(160), LINK, now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(150));
        // A member out of the ISR does not hold it back.
        l.isr = nodes(&[1, 2]);
        l.record_fetch(NodeId(3), Offset(0), Offset(160), LINK, now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(160)), Offset(160));
        // A member being added does, from the moment it is proposed.
        l.pending_isr = Some(nodes(&[1, 2, 3]));
        assert_eq!(l.high_watermark(NodeId(1), Offset(160)), Offset(0));
    }

    #[test]
    fn a_follower_keeping_pace_with_appends_counts_as_caught_up() {
        let (mut l, start) = leader(&[1, 2]);
        let lag = lag_only(Duration::from_secs(10));
        // Each fetch reaches where the leader ended at the previous one, never its end now.
        let mut end = Offset(100);
        let mut t = start;
        for _ in 0..30 {
            t += Duration::from_secs(1);
            l.record_fetch(NodeId(2), end, end + 10, LINK, t);
            end += 10;
        }
        assert_eq!(
            l.followers[&NodeId(2)].last_caught_up,
            t - Duration::from_secs(1)
        );
        assert_eq!(
            l.wanted_isr(NodeId(1), end, lag, t, any),
            None,
            "it stays in sync"
        );
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_and_a_caught_up_one_joins() {
        let (mut l, start) = leader(&[1, 2, 3]);
        let lag = lag_only(Duration::from_secs(10));
        l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, start);
        l.record_fetch(NodeId(3), Offset(150), Offset(150), LINK, start);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), lag, start + lag.lag_max, any),
            None
        );
        // 3 stops catching up; 2 keeps up.
        let later = start + lag.lag_max + Duration::from_secs(1);
        l.record_fetch(NodeId(2), Offset(200), Offset(200), LINK, later);
        l.record_fetch(NodeId(3), Offset(160), Offset(200), LINK, later);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(200), lag, later, any),
            Some(nodes(&[1, 2]))
        );
        l.isr = nodes(&[1, 2]);
        // It comes back: caught up to the high watermark and the epoch start.
        let back = later + Duration::from_secs(1);
        l.record_fetch(NodeId(3), Offset(200), Offset(200), LINK, back);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(200), lag, back, any),
            Some(nodes(&[1, 2, 3]))
        );
        // Not while the image says it is fenced or shutting down (KIP-841); leaving the ISR
        // does not wait for that.
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(200), lag, back, |r| r != NodeId(3)),
            None
        );
        l.isr = nodes(&[1, 2, 3]);
        let gone = back + lag.lag_max + Duration::from_secs(1);
        l.record_fetch(NodeId(2), Offset(200), Offset(200), LINK, gone);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(200), lag, gone, |r| r != NodeId(3)),
            Some(nodes(&[1, 2]))
        );
        l.isr = nodes(&[1, 2]);
        // Not before it reaches the epoch's start, even at the high watermark.
        l.epoch_start_offset = Offset(300);
        assert_eq!(l.wanted_isr(NodeId(1), Offset(200), lag, back, any), None);
    }

    #[test]
    fn a_replica_added_by_a_reassignment_is_tracked_and_joins_once_caught_up() {
        let (mut l, start) = leader(&[1, 2, 3]);
        let lag = lag_only(Duration::from_secs(10));
        for r in [2, 3] {
            l.record_fetch(NodeId(r), Offset(150), Offset(150), LINK, start);
        }
        // 4 is added (replicas [4,1,2,3]): unknown before, its fetches count now.
        l.set_replicas(nodes(&[4, 1, 2, 3]), start);
        l.record_fetch(NodeId(4), Offset(0), Offset(150), LINK, start);
        assert_eq!(l.followers[&NodeId(4)].log_end_offset, Offset(0));
        assert_eq!(
            l.high_watermark(NodeId(1), Offset(150)),
            Offset(150),
            "not in the ISR: it holds nothing back"
        );
        assert_eq!(l.wanted_isr(NodeId(1), Offset(150), lag, start, any), None);
        let t = start + Duration::from_secs(1);
        l.record_fetch(NodeId(4), Offset(150), Offset(150), LINK, t);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), lag, t, any),
            Some(nodes(&[1, 2, 3, 4]))
        );
        // The reassignment completes without 3: it is forgotten.
        l.set_replicas(nodes(&[4, 1, 2]), t);
        assert!(!l.followers.contains_key(&NodeId(3)));
        assert_eq!(
            l.followers[&NodeId(4)].log_end_offset,
            Offset(150),
            "a kept replica keeps its state"
        );
    }

    #[test]
    fn a_follower_whose_fetches_stopped_leaves_before_its_lag_window_ends() {
        let (mut l, start) = leader(&[1, 2, 3]);
        let rules = IsrRules {
            lag_max: Duration::from_secs(30),
            silence_max: Some(Duration::from_secs(2)),
        };
        l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, start);
        l.record_fetch(NodeId(3), Offset(150), Offset(150), LINK, start);
        // Idle: both fetch every half second (the leader holds each), nothing new arrives.
        let mut t = start;
        for _ in 0..6 {
            t += Duration::from_millis(500);
            l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, t);
            if t <= start + Duration::from_secs(1) {
                l.record_fetch(NodeId(3), Offset(150), Offset(150), LINK, t);
            }
        }
        // 3's last fetch came 2 s ago: still in.
        assert_eq!(l.wanted_isr(NodeId(1), Offset(150), rules, t, any), None);
        t += Duration::from_millis(1);
        l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, t);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), rules, t, any),
            Some(nodes(&[1, 2]))
        );
        assert_eq!(
            rules.out_of_sync(&l.followers[&NodeId(3)], t),
            Some(OutOfSync::Silent)
        );
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), lag_only(rules.lag_max), t, any),
            None,
            "the lag window alone keeps it for 30 s"
        );
        l.isr = nodes(&[1, 2]);
        // Its fetches arrive again, caught up: it joins.
        t += Duration::from_millis(100);
        l.record_fetch(NodeId(3), Offset(150), Offset(150), LINK, t);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), rules, t, any),
            Some(nodes(&[1, 2, 3]))
        );
    }

    #[test]
    fn a_follower_whose_link_timed_out_leaves_at_once_unless_it_fetched_over_another() {
        let (mut l, start) = leader(&[1, 2, 3]);
        let rules = IsrRules {
            lag_max: Duration::from_secs(30),
            silence_max: Some(Duration::from_secs(5)),
        };
        let (old, new) = (LinkId(7), LinkId(8));
        l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, start);
        l.record_fetch(NodeId(3), Offset(150), Offset(150), old, start);
        // Another follower's link, or one this partition was not fetched over: nothing.
        assert!(!l.link_lost(NodeId(2), old));
        assert!(!l.link_lost(NodeId(3), LINK));
        assert!(!l.link_lost(NodeId(9), old), "not a replica");
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), rules, start, any),
            None
        );
        // 3's own link: out at once, long before the silence window.
        assert!(l.link_lost(NodeId(3), old));
        let t = start + Duration::from_millis(10);
        assert_eq!(
            rules.out_of_sync(&l.followers[&NodeId(3)], t),
            Some(OutOfSync::Unreachable)
        );
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), rules, t, any),
            Some(nodes(&[1, 2]))
        );
        l.isr = nodes(&[1, 2]);
        // A fetch that was held here when the link failed, answered late into it, changes
        // nothing.
        l.record_fetch(NodeId(3), Offset(150), Offset(150), old, t);
        assert_eq!(l.wanted_isr(NodeId(1), Offset(150), rules, t, any), None);
        // It reconnects and fetches, caught up: back in, and the old link no longer counts.
        l.record_fetch(NodeId(3), Offset(150), Offset(150), new, t);
        assert_eq!(
            l.wanted_isr(NodeId(1), Offset(150), rules, t, any),
            Some(nodes(&[1, 2, 3]))
        );
        l.isr = nodes(&[1, 2, 3]);
        assert!(!l.link_lost(NodeId(3), old));
        assert_eq!(l.wanted_isr(NodeId(1), Offset(150), rules, t, any), None);
    }

    #[test]
    fn the_backlog_admits_a_batch_while_one_fetch_would_take_all_it_holds() {
        assert!(
            backlog_admits(0, 5_000_000, 1000),
            "nothing outstanding: any batch"
        );
        assert!(backlog_admits(600, 400, 1000));
        assert!(!backlog_admits(600, 401, 1000));
        assert!(!backlog_admits(1000, 1, 1000));
        assert!(backlog_admits(10_000, 10_000, 0), "0: no bound");
    }

    #[test]
    fn logs_diverge_where_the_leaders_epoch_ended_before_the_followers_fetch() {
        // No batch fetched yet: nothing to compare.
        assert_eq!(divergence(-1, Offset(0), (-1, Offset(-1)), Offset(0)), None);
        // Same epoch, the leader's reaches at least as far: no divergence.
        assert_eq!(
            divergence(3, Offset(100), (3, Offset(100)), Offset(0)),
            None
        );
        assert_eq!(
            divergence(3, Offset(100), (3, Offset(150)), Offset(0)),
            None
        );
        // The leader's epoch 3 ended at 90: the follower's 90..100 is not the leader's.
        assert_eq!(
            divergence(3, Offset(100), (3, Offset(90)), Offset(0)),
            Some((3, Offset(90)))
        );
        // The leader never had epoch 4: its largest below, 3, ended at 80.
        assert_eq!(
            divergence(4, Offset(100), (3, Offset(80)), Offset(0)),
            Some((3, Offset(80)))
        );
        // Unknown to the leader altogether: agree at most up to its log start.
        assert_eq!(
            divergence(2, Offset(100), (-1, Offset(-1)), Offset(40)),
            Some((0, Offset(40)))
        );
    }

    #[test]
    fn a_follower_truncates_to_where_both_logs_still_agree() {
        // Both have epoch 3; the leader's ends at 90, this replica's at 100.
        assert_eq!(
            truncation_target(3, Offset(90), (3, Offset(100)), Offset(100), Offset(0)),
            Offset(90)
        );
        // This replica's epoch 3 ends first: keep all of it.
        assert_eq!(
            truncation_target(3, Offset(120), (3, Offset(100)), Offset(110), Offset(0)),
            Offset(100)
        );
        // This replica lacks epoch 3: its largest below ends at 70.
        assert_eq!(
            truncation_target(3, Offset(90), (2, Offset(70)), Offset(100), Offset(0)),
            Offset(70)
        );
        // Never past its own end nor below its log start.
        assert_eq!(
            truncation_target(3, Offset(90), (3, Offset(200)), Offset(50), Offset(0)),
            Offset(50)
        );
        assert_eq!(
            truncation_target(3, Offset(10), (3, Offset(200)), Offset(100), Offset(30)),
            Offset(30)
        );
    }

    #[test]
    fn a_proposed_member_holds_the_high_watermark_until_the_partition_epoch_moves() {
        let (mut l, now) = leader(&[1, 2]);
        l.record_fetch(NodeId(2), Offset(150), Offset(150), LINK, now);
        l.record_fetch(NodeId(3), Offset(120), Offset(150), LINK, now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(150));
        l.isr_proposed(&nodes(&[1, 2, 3]));
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(120));
        // An unrelated image change (same partition epoch): still pending, still holding.
        l.take_image(PartitionEpoch(0), nodes(&[1, 2]), nodes(&[1, 2, 3]), now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(120));
        // The proposal timed out: it may still be applied. Another may be proposed, and the
        // members of both hold the high watermark.
        l.isr_change_unknown(PartitionEpoch(0));
        assert!(!l.isr_change_pending);
        l.isr_proposed(&nodes(&[1]));
        assert_eq!(l.pending_isr, Some(nodes(&[1, 2, 3])));
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(120));
        // Decided: the partition epoch moved (one of them was applied).
        l.take_image(PartitionEpoch(1), nodes(&[1]), nodes(&[1, 2, 3]), now);
        assert_eq!(l.pending_isr, None);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(150));
        assert_eq!(l.maximal_isr_size(), 1);
        // A refusal decides too.
        l.isr_proposed(&nodes(&[1, 3]));
        assert_eq!(l.maximal_isr_size(), 2, "a member proposed to join counts");
        l.isr_change_refused(PartitionEpoch(1));
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(150));
        // The refusal of a change proposed at an older partition epoch, arriving after a new
        // one was proposed, leaves the new one pending.
        l.isr_proposed(&nodes(&[1, 3]));
        l.isr_change_refused(PartitionEpoch(0));
        assert!(l.isr_change_pending);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(120));
        // One whose fate is unknown keeps holding after another at its epoch is refused.
        l.isr_change_unknown(PartitionEpoch(1));
        l.isr_proposed(&nodes(&[1]));
        l.isr_change_refused(PartitionEpoch(1));
        assert_eq!(
            l.high_watermark(NodeId(1), Offset(150)),
            Offset(120),
            "the unknown one may still be applied"
        );
        l.take_image(PartitionEpoch(2), nodes(&[1]), nodes(&[1, 2, 3]), now);
        assert_eq!(l.high_watermark(NodeId(1), Offset(150)), Offset(150));
    }
}
