//! The leader's side of replication on the shard owning a partition: roles taken from each
//! metadata image, followers' fetches answered (with the divergence check that tells a
//! returning replica where to truncate), the high watermark moved over the ISR, acks=all
//! answered once the ISR holds a batch, and ISR changes proposed to the metadata quorum.

use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{info, warn};
use tributary_metadata::types::{NodeId, Offset, TopicPartition};
use tributary_protocol::requests::fetch::FetchPartitionResponse;
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

use crate::config::BrokerConfig;

use super::{Follow, LeaderEpoch, LeaderState, ReplicaFetchItem};
use crate::catalog::Catalog;
use crate::cluster::command::{isr_eligible, MetadataCommand};
use crate::group::OFFSETS_TOPIC;
use crate::shard::Shard;
use tributary_replication::{self as replication, AcksAll};

/// A partition of a follower's fetch answered with `error` alone.
pub(crate) fn answer(partition: i32, error: ErrorCode) -> FetchPartitionResponse {
    FetchPartitionResponse {
        partition,
        error,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        aborted_transactions: Vec::new(),
        records: Bytes::new(),
        diverging_epoch: None,
        current_leader: None,
        preferred_read_replica: -1,
    }
}

/// A partition about to lead: its key, its log, and its registration in the image.
type NewLeader = (
    TopicPartition,
    Rc<Partition>,
    crate::catalog::PartitionRegistration,
);

/// What an image changes for a shard's partitions, to be carried out after deciding it.
#[derive(Default)]
struct RoleChanges {
    /// Leaders this shard now fetches from.
    start_fetchers: Vec<i32>,
    follows_changed: bool,
    /// Unreplicated partitions led at a new epoch.
    new_epochs: Vec<(Rc<Partition>, i32)>,
    new_leaders: Vec<NewLeader>,
}

/// A partition with one replica: nothing to replicate, but its epoch cache follows the image (a
/// fenced and returning broker leads at a new epoch), so OffsetForLeaderEpoch answers for the
/// epoch clients see in Metadata.
fn unreplicated_role(
    part: &Rc<Partition>,
    reg: &crate::catalog::PartitionRegistration,
    me: i32,
    changes: &mut RoleChanges,
) {
    if reg.leader == me && part.leader_epoch() < reg.leader_epoch.0 {
        changes.new_epochs.push((part.clone(), reg.leader_epoch.0));
    }
    if reg.leader == me && part.is_replicated() {
        // Reassigned down to this one replica: what it holds durably is replicated enough,
        // and from now on its flushes move the watermark.
        part.set_high_watermark(part.durable_offset());
        part.set_replicated(false);
    }
}

impl Shard {
    /// Takes each owned replicated partition's role from `catalog`: leader (tracking its
    /// followers from this epoch on) or follower (fetching from the leader).
    pub async fn apply_replica_roles(self: &Rc<Self>, catalog: &Catalog) {
        let now = Instant::now();
        let changes = self.role_changes(catalog, now);
        if changes.follows_changed {
            self.replicas.follows_changed.notify(usize::MAX);
        }
        // The new epoch begins at the log end, before anything is appended in it.
        for (part, epoch) in changes.new_epochs {
            if let Err(e) = part.set_leader_epoch(epoch).await {
                warn!(dir = %part.dir().display(), error = %e, "recording the new leader epoch failed");
            }
        }
        self.start_leading(changes.new_leaders, now).await;
        let keys: Vec<TopicPartition> = self.replicas.leading.borrow().keys().cloned().collect();
        for key in keys {
            self.advance_high_watermark(&key.topic, key.partition);
        }
        self.load_led_groups(catalog).await;
        self.load_led_txns(catalog).await;
        let mut start_fetchers = changes.start_fetchers;
        start_fetchers.sort_unstable();
        start_fetchers.dedup();
        for leader in start_fetchers {
            if self.replicas.fetchers.borrow_mut().insert(leader) {
                glommio::spawn_local(super::fetcher::run(self.clone(), leader)).detach();
            }
        }
    }

    /// What `catalog` changes for this shard's partitions, decided without waiting: deposed
    /// leaders are dropped (their waiting writes answered), follows updated, and what must be
    /// written before a partition leads is returned.
    fn role_changes(&self, catalog: &Catalog, now: Instant) -> RoleChanges {
        let me = self.config.node_id;
        let mut changes = RoleChanges::default();
        let mut leading = self.replicas.leading.borrow_mut();
        let mut following = self.replicas.following.borrow_mut();
        // Writes waiting on a partition this node no longer leads are answered at once
        // (NOT_LEADER_OR_FOLLOWER): an idempotent producer moves to the new leader only
        // once every request to the old one came back.
        let mut deposed: Vec<TopicPartition> = Vec::new();
        leading.retain(|key, l| {
            let kept = catalog
                .partition(&key.topic, key.partition)
                .is_some_and(|r| r.leader == me && r.leader_epoch == l.leader_epoch);
            if !kept {
                deposed.push(key.clone());
            }
            kept
        });
        for key in &deposed {
            if let Some(part) = self.partition(&key.topic, key.partition) {
                part.wake_waiters();
            }
        }
        following.retain(|key, _| {
            catalog
                .partition(&key.topic, key.partition)
                .is_some_and(|r| r.leader != me && r.leader >= 0 && r.replicas.contains(&me))
        });
        for (key, part) in self.owned_partitions() {
            // The key moves into the maps below; the log lines after it name the partition.
            let (topic, p) = (key.topic.clone(), key.partition);
            let Some(reg) = catalog.partition(&topic, p) else {
                continue;
            };
            if reg.replicas.len() < 2 {
                unreplicated_role(&part, reg, me, &mut changes);
                continue;
            }
            part.set_replicated(true);
            if reg.leader == me {
                following.remove(&key);
                match leading.get_mut(&key) {
                    Some(l) if l.leader_epoch == reg.leader_epoch => {
                        l.take_image(
                            reg.partition_epoch,
                            reg.isr_nodes(),
                            reg.replica_nodes(),
                            now,
                        );
                    }
                    _ => {
                        info!(topic = %topic, partition = p, epoch = %reg.leader_epoch, isr = ?reg.isr, "leading partition");
                        // Not leading until the epoch is in the partition's epoch cache: a
                        // follower's fetch answered before would be checked against the
                        // old epochs (and could be told to drop its whole log).
                        leading.remove(&key);
                        changes.new_leaders.push((key, part.clone(), reg.clone()));
                    }
                }
            } else if reg.leader >= 0 {
                let follow = Follow {
                    leader: reg.leader,
                    leader_epoch: reg.leader_epoch,
                };
                if following.insert(key, follow) != Some(follow) {
                    changes.follows_changed = true;
                    info!(topic = %topic, partition = p, leader = reg.leader, epoch = %reg.leader_epoch, "following partition");
                }
                if !self.replicas.fetchers.borrow().contains(&reg.leader) {
                    changes.start_fetchers.push(reg.leader);
                }
            }
        }
        changes
    }

    /// Leads each of `new_leaders` once its epoch is recorded, if the image still says so.
    async fn start_leading(&self, new_leaders: Vec<NewLeader>, now: Instant) {
        let me = self.config.node_id;
        for (key, part, reg) in new_leaders {
            if let Err(e) = part.set_leader_epoch(reg.leader_epoch.0).await {
                warn!(dir = %part.dir().display(), error = %e, "recording the new leader epoch failed; not leading");
                continue;
            }
            // The image may have moved on while the epoch was written.
            let still = self
                .catalog()
                .partition(&key.topic, key.partition)
                .is_some_and(|r| r.leader == me && r.leader_epoch == reg.leader_epoch);
            if still {
                let state = LeaderState::new(
                    reg.leader_epoch,
                    reg.partition_epoch,
                    reg.replica_nodes(),
                    reg.isr_nodes(),
                    Offset(part.log_end_offset()),
                    now,
                );
                self.replicas.leading.borrow_mut().insert(key, state);
            }
        }
    }

    /// Loads the groups of the `__consumer_offsets` partitions this node now leads and forgets
    /// those of the ones it no longer leads: the group coordinator moves with leadership.
    async fn load_led_groups(&self, catalog: &Catalog) {
        let (load, unload) = self.coordinator_changes(catalog, OFFSETS_TOPIC, &self.groups_loaded);
        for (p, part) in load {
            self.groups.load(p, &part, &catalog.group_configs).await;
            self.groups_loaded.borrow_mut().insert(p);
        }
        for p in unload {
            self.groups_loaded.borrow_mut().remove(&p);
            let n = self.groups.unload(p);
            info!(
                partition = p,
                groups = n,
                "no longer coordinating the groups of an offsets partition"
            );
        }
    }

    /// The same for the transaction coordinator and `__transaction_state`; transactions a
    /// previous coordinator left prepared get their markers written again.
    async fn load_led_txns(self: &Rc<Self>, catalog: &Catalog) {
        let topic = crate::txn::TXN_TOPIC;
        let (load, unload) = self.coordinator_changes(catalog, topic, &self.txns_loaded);
        for (p, part) in load {
            let prepared = self.txns.load(&part).await;
            self.txns_loaded.borrow_mut().insert(p);
            for txn in prepared {
                info!(transactional_id = %txn.transactional_id, state = txn.state.name(), "resuming a prepared transaction");
                glommio::spawn_local(crate::txn::markers::finish(self.clone(), txn)).detach();
            }
        }
        for p in unload {
            self.txns_loaded.borrow_mut().remove(&p);
            let n = self.txns.unload(p);
            info!(
                partition = p,
                ids = n,
                "no longer coordinating the transactions of a transaction-state partition"
            );
        }
    }

    /// For a coordinator over internal `topic`: the partitions this shard owns and this node
    /// now leads whose state is not `loaded` yet, and the loaded ones it no longer leads. Loaded
    /// partitions this shard no longer owns are forgotten.
    fn coordinator_changes(
        &self,
        catalog: &Catalog,
        topic: &str,
        loaded: &std::cell::RefCell<HashSet<i32>>,
    ) -> (Vec<(i32, Rc<Partition>)>, Vec<i32>) {
        let me = self.config.node_id;
        let owned: Vec<(i32, Rc<Partition>)> = self
            .owned_partitions()
            .into_iter()
            .filter(|(key, _)| key.topic == topic)
            .map(|(key, part)| (key.partition, part))
            .collect();
        let mut set = loaded.borrow_mut();
        set.retain(|p| owned.iter().any(|(o, _)| o == p));
        let (mut load, mut unload) = (Vec::new(), Vec::new());
        for (p, part) in owned {
            let led = catalog.partition(topic, p).is_some_and(|r| r.leader == me);
            match (led, set.contains(&p)) {
                (true, false) => load.push((p, part)),
                (false, true) => unload.push(p),
                _ => {}
            }
        }
        (load, unload)
    }

    /// Lets the group and transaction coordinators' writes to their replicated internal
    /// partitions wait for the ISR.
    pub fn install_coordinator_write_waits(self: &Rc<Self>) {
        let hook = |weak: std::rc::Weak<Self>| -> crate::coordinator_log::ReplicatedWrite {
            Box::new(move |part, end, written_in| {
                let weak = weak.clone();
                Box::pin(async move {
                    match weak.upgrade() {
                        Some(shard) => shard.wait_internal_write(&part, end, written_in).await,
                        None => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
                    }
                })
            })
        };
        *self.groups.replicated_write.borrow_mut() = Some(hook(Rc::downgrade(self)));
        *self.txns.replicated_write.borrow_mut() = Some(hook(Rc::downgrade(self)));
    }

    /// Waits until a coordinator's write to internal partition `part`, up to `end`, made in
    /// leader epoch `written_in`, is held by the ISR (within `offsets.commit.timeout.ms`):
    /// NOT_COORDINATOR once that epoch no longer leads here, COORDINATOR_NOT_AVAILABLE when the
    /// ISR does not follow in time.
    async fn wait_internal_write(
        &self,
        part: &Rc<Partition>,
        end: i64,
        written_in: LeaderEpoch,
    ) -> Result<(), ErrorCode> {
        let key = self
            .owned_partitions()
            .into_iter()
            .find(|(_, p)| Rc::ptr_eq(p, part))
            .map(|(k, _)| k);
        let Some(TopicPartition { topic, partition }) = key else {
            return Err(ErrorCode::NOT_COORDINATOR);
        };
        let timeout = Duration::from_millis(self.config.offsets_commit_timeout_ms);
        self.wait_replicated(part, &topic, partition, end, written_in, timeout)
            .await
            .map_err(|e| {
                if e == ErrorCode::NOT_LEADER_OR_FOLLOWER {
                    ErrorCode::NOT_COORDINATOR
                } else {
                    ErrorCode::COORDINATOR_NOT_AVAILABLE
                }
            })
    }

    /// The leader epoch of a partition this shard leads with replicas, if it does.
    pub fn leader_epoch_of(&self, topic: &str, partition: i32) -> Option<LeaderEpoch> {
        self.replicas
            .leading
            .borrow()
            .get(&TopicPartition::new(topic, partition))
            .map(|l| l.leader_epoch)
    }

    /// Moves a led partition's high watermark to what its ISR holds.
    pub fn advance_high_watermark(&self, topic: &str, partition: i32) {
        let Some(part) = self.partition(topic, partition) else {
            return;
        };
        let hw = match self
            .replicas
            .leading
            .borrow()
            .get(&TopicPartition::new(topic, partition))
        {
            Some(l) => l.high_watermark(NodeId(self.config.node_id), Offset(part.durable_offset())),
            None => return,
        };
        part.set_high_watermark(hw.0);
    }

    /// Before an acks=all append: refuses when the ISR is smaller than `min.insync.replicas`.
    /// The ISR is the leader's, or the image's when that is smaller: a shrink the image holds
    /// is committed, and this shard may take the image's replica roles a moment after the
    /// image itself (opening partitions comes between), while Metadata already answers from it.
    pub fn check_min_isr(&self, topic: &str, partition: i32) -> Result<(), ErrorCode> {
        let image = self
            .catalog()
            .partition(topic, partition)
            .map(|r| r.isr.len());
        let isr = self
            .with_leading(topic, partition, |l| l.isr.len())
            .map(|n| image.map_or(n, |i| n.min(i)));
        match isr {
            Some(n) if (n as i32) < self.min_insync_replicas(topic) => {
                Err(ErrorCode::NOT_ENOUGH_REPLICAS)
            }
            _ => Ok(()),
        }
    }

    /// Where an acks=all write to a partition this shard owns stands now
    /// ([`replication::acks_all`]).
    fn acks_all_now(
        &self,
        part: &Partition,
        tp: (&str, i32),
        end: Offset,
        written_in: LeaderEpoch,
    ) -> AcksAll {
        let min_insync = self.min_insync_replicas(tp.0);
        let hw = Offset(part.high_watermark());
        let leading = self.replicas.leading.borrow();
        let l = leading.get(&TopicPartition::new(tp.0, tp.1));
        replication::acks_all(l, written_in, end, hw, min_insync)
    }

    /// The answer to an acks=all produce whose wait timed out: REQUEST_TIMED_OUT, or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below `min.insync.replicas` by then
    /// ([`replication::acks_all_timed_out`]).
    pub fn acks_all_timed_out(&self, topic: &str, partition: i32) -> ErrorCode {
        let min_insync = self.min_insync_replicas(topic);
        let leading = self.replicas.leading.borrow();
        let l = leading.get(&TopicPartition::new(topic, partition));
        match replication::acks_all_timed_out(l, min_insync) {
            AcksAll::TooFewReplicas => ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            _ => ErrorCode::REQUEST_TIMED_OUT,
        }
    }

    fn with_leading<T>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&LeaderState) -> T,
    ) -> Option<T> {
        let leading = self.replicas.leading.borrow();
        leading.get(&TopicPartition::new(topic, partition)).map(f)
    }

    /// `min.insync.replicas` of `topic`: its own, or the broker's.
    fn min_insync_replicas(&self, topic: &str) -> i32 {
        let default = self.broker_config().min_insync_replicas;
        self.catalog()
            .topics
            .get(topic)
            .map_or(1, |t| t.config_or("min.insync.replicas", default))
    }

    /// Before an acks=all append of `len` bytes to a partition this shard leads at `epoch`:
    /// waits, in arrival order, until the bytes above its high watermark leave room
    /// (`replica.backlog.max.bytes`), at most until `deadline` (REQUEST_TIMED_OUT, nothing
    /// appended); a batch that waited checks `min.insync.replicas` again. The turn returned lets
    /// the next batch in when dropped: after the append.
    pub async fn append_turn(
        &self,
        part: &Partition,
        topic: &str,
        partition: i32,
        len: usize,
        epoch: LeaderEpoch,
        deadline: Instant,
    ) -> Result<AppendTurn, ErrorCode> {
        let key = TopicPartition::new(topic, partition);
        let Some(turns) = self
            .replicas
            .leading
            .borrow()
            .get(&key)
            .map(|l| l.turns.clone())
        else {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        };
        let ticket = turns.take();
        // A batch that waited, behind others or for room, checks the ISR again.
        let mut waited = !turns.serves(ticket);
        turns.wait(ticket).await;
        let turn = AppendTurn(turns);
        let max = replica_backlog_max_bytes(&self.config);
        loop {
            let advanced = part.listen_advance();
            let epoch_now = self
                .replicas
                .leading
                .borrow()
                .get(&key)
                .map(|l| l.leader_epoch);
            if epoch_now != Some(epoch) {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            }
            if crate::replica::backlog_admits(part.bytes_above_high_watermark(), len as u64, max) {
                if waited {
                    self.check_min_isr(topic, partition)?;
                }
                return Ok(turn);
            }
            advance_or_deadline(advanced, deadline).await?;
            waited = true;
        }
    }

    /// After an acks=all append is durable here: waits until the ISR holds it (the high
    /// watermark passes `end`), at most `timeout`.
    /// `epoch` is the leader epoch the batch was written in: a leader deposed meanwhile (even
    /// if re-elected) may have had it truncated, so only that epoch may acknowledge it — and a
    /// shard that leads no longer answers NOT_LEADER_OR_FOLLOWER, never success.
    pub async fn wait_replicated(
        &self,
        part: &Rc<Partition>,
        topic: &str,
        partition: i32,
        end: i64,
        epoch: LeaderEpoch,
        timeout: Duration,
    ) -> Result<(), ErrorCode> {
        self.advance_high_watermark(topic, partition);
        let deadline = Instant::now() + timeout;
        loop {
            let advanced = part.listen_advance();
            match self.acks_all_now(part, (topic, partition), Offset(end), epoch) {
                AcksAll::Waiting => advance_or_deadline(advanced, deadline).await?,
                decided => return acks_all_answer(decided),
            }
        }
    }

    /// A follower's fetch of one partition this shard owns.
    pub async fn replica_fetch_local(
        self: &Rc<Self>,
        item: ReplicaFetchItem,
    ) -> FetchPartitionResponse {
        let key = TopicPartition::new(item.topic.clone(), item.partition);
        let Some(part) = self.partition(&item.topic, item.partition) else {
            return answer(item.partition, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        };
        let Some(epoch) = self.leader_epoch_of(&item.topic, item.partition) else {
            return answer(item.partition, ErrorCode::NOT_LEADER_OR_FOLLOWER);
        };
        // -1: a follower that names no epoch is not checked.
        let current = LeaderEpoch(item.current_leader_epoch);
        if item.current_leader_epoch >= 0 && current < epoch {
            return answer(item.partition, ErrorCode::FENCED_LEADER_EPOCH);
        }
        if current > epoch {
            return answer(item.partition, ErrorCode::UNKNOWN_LEADER_EPOCH);
        }
        let mut out = answer(item.partition, ErrorCode::NONE);
        out.log_start_offset = part.log_start_offset();
        let diverging = (item.last_fetched_epoch >= 0)
            .then(|| {
                let (epoch, end) = part.end_offset_for(item.last_fetched_epoch);
                crate::replica::divergence(
                    item.last_fetched_epoch,
                    Offset(item.fetch_offset),
                    (epoch, Offset(end)),
                    Offset(part.log_start_offset()),
                )
            })
            .flatten()
            .map(|(epoch, end)| (epoch, end.0));
        if diverging.is_some() {
            out.diverging_epoch = diverging;
            out.high_watermark = part.high_watermark();
            out.last_stable_offset = part.last_stable_offset();
            return out;
        }
        let leo = part.log_end_offset();
        if item.fetch_offset > leo || item.fetch_offset < part.log_start_offset() {
            out.error = ErrorCode::OFFSET_OUT_OF_RANGE;
            out.high_watermark = part.high_watermark();
            return out;
        }
        let outside_isr = match self.replicas.leading.borrow_mut().get_mut(&key) {
            Some(l) => {
                let follower = NodeId(item.follower);
                let offset = Offset(item.fetch_offset);
                l.record_fetch(follower, offset, Offset(leo), item.link, Instant::now());
                !l.isr.contains(&follower) && !l.isr_change_pending
            }
            None => false,
        };
        self.advance_high_watermark(&item.topic, item.partition);
        if outside_isr {
            // A follower outside the ISR that caught up joins at once, as Kafka's leader
            // expands the ISR on the fetch; only shrinking waits for the periodic check.
            let changes = self.isr_changes(Some(&key));
            if !changes.is_empty() {
                let shard = self.clone();
                glommio::spawn_local(async move { shard.propose_isr_changes(changes).await })
                    .detach();
            }
        }
        if item.fetch_offset < leo && item.max_bytes > 0 {
            match part.read_replica(item.fetch_offset, item.max_bytes).await {
                Ok(read) => out.records = read.records,
                Err(e) => {
                    out.error = crate::shard::partition_error_code(&e);
                }
            }
        }
        out.high_watermark = part.high_watermark();
        out.last_stable_offset = part.last_stable_offset();
        out.log_start_offset = part.log_start_offset();
        out
    }

    /// Waits until a led partition's log grows past `offset`, its log start moves (DeleteRecords
    /// or retention: the follower learns it from the answer, so what was deleted is gone on
    /// every replica soon after, not a fetch wait later), or `deadline`.
    pub async fn replica_wait_local(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        deadline: Instant,
    ) {
        let Some(part) = self.partition(topic, partition) else {
            return;
        };
        let log_start = part.log_start_offset();
        loop {
            // Woken when either end of the log moves.
            let grew = part.listen_append();
            if part.log_end_offset() > offset || part.log_start_offset() != log_start {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            futures_lite::future::or(
                async {
                    grew.await;
                },
                async {
                    glommio::timer::sleep(left).await;
                },
            )
            .await;
        }
    }

    /// Proposes the ISR changes this shard's led partitions need; run every
    /// [`isr_check_interval_ms`].
    pub async fn check_isr(self: &Rc<Self>) {
        let changes = self.isr_changes(None);
        self.propose_isr_changes(changes).await;
    }

    /// The connection `link` that carried `follower`'s fetches to this node failed (the
    /// network no longer reaches it): every partition this shard leads whose last fetch by it
    /// came over that link leaves the ISR now, without waiting for the next check.
    pub fn replica_link_lost(self: &Rc<Self>, follower: i32, link: crate::replica::LinkId) {
        // Every partition is marked: no short circuit.
        let mut marked = false;
        for l in self.replicas.leading.borrow_mut().values_mut() {
            marked |= l.link_lost(NodeId(follower), link);
        }
        if marked {
            let shard = self.clone();
            glommio::spawn_local(async move { shard.check_isr().await }).detach();
        }
    }

    /// Writes the high watermark checkpoints of replicated partitions, as Kafka does every few
    /// seconds: a restart starts from them instead of the log end. Run every half
    /// `replica.lag.time.max.ms`.
    pub async fn checkpoint_high_watermarks(self: &Rc<Self>) {
        for (_, part) in self.owned_partitions() {
            if let Err(e) = part.checkpoint_high_watermark().await {
                warn!(dir = %part.dir().display(), error = %e, "writing the high watermark checkpoint failed");
            }
        }
    }

    /// The ISR changes this shard's led partitions (or only `only`, looked up directly: a
    /// catching-up follower's fetch asks on the fetch path) need now, each marked pending.
    fn isr_changes(&self, only: Option<&TopicPartition>) -> Vec<MetadataCommand> {
        let rules = isr_rules(&self.config);
        let now = Instant::now();
        let catalog = self.catalog();
        let mut leading = self.replicas.leading.borrow_mut();
        match only {
            Some(key) => leading
                .get_mut(key)
                .and_then(|l| self.isr_change(key, l, rules, now, &catalog))
                .into_iter()
                .collect(),
            None => leading
                .iter_mut()
                .filter_map(|(key, l)| self.isr_change(key, l, rules, now, &catalog))
                .collect(),
        }
    }

    /// The ISR change led partition `key` needs now, if any, marked pending.
    fn isr_change(
        &self,
        key: &TopicPartition,
        l: &mut LeaderState,
        rules: crate::replica::IsrRules,
        now: Instant,
        catalog: &Catalog,
    ) -> Option<MetadataCommand> {
        if l.isr_change_pending {
            return None;
        }
        // The high watermark only decides whether a replica outside the ISR may join: a full
        // ISR, the usual case, needs no partition lookup.
        let hw = if l.isr.len() < l.replicas.len() {
            self.partition(&key.topic, key.partition)
                .map_or(Offset(-1), |part| Offset(part.high_watermark()))
        } else {
            Offset(-1)
        };
        let eligible = |r: NodeId| isr_eligible(&catalog.brokers, r);
        let isr = l.wanted_isr(NodeId(self.config.node_id), hw, rules, now, eligible)?;
        // Each member leaving, with why: a healthy broker must never be one.
        let leaving: Vec<(NodeId, Option<crate::replica::OutOfSync>)> = l
            .isr
            .iter()
            .filter(|r| !isr.contains(r))
            .map(|&r| {
                (
                    r,
                    l.followers.get(&r).and_then(|f| rules.out_of_sync(f, now)),
                )
            })
            .collect();
        info!(topic = %key.topic, partition = key.partition, from = ?l.isr, to = ?isr, ?leaving, "changing the ISR");
        l.isr_proposed(&isr);
        Some(MetadataCommand::ChangeIsr {
            topic: key.topic.clone(),
            partition: key.partition,
            leader_epoch: l.leader_epoch,
            partition_epoch: l.partition_epoch,
            isr: isr.iter().map(|r| r.0).collect(),
        })
    }

    /// Proposes ISR changes through the controller; a refused one is no longer pending.
    async fn propose_isr_changes(self: &Rc<Self>, changes: Vec<MetadataCommand>) {
        for cmd in changes {
            let MetadataCommand::ChangeIsr {
                topic,
                partition,
                partition_epoch,
                ..
            } = &cmd
            else {
                continue;
            };
            let proposed_at = *partition_epoch;
            let key = TopicPartition::new(topic.clone(), *partition);
            let command = cmd.clone();
            let out =
                crate::controller::ask(self, |_, c| async move { c.answer(command).await }).await;
            let code = out.as_ref().map(|(code, _)| *code);
            if code == Some(ErrorCode::NONE) {
                continue;
            }
            if code == Some(ErrorCode::INELIGIBLE_REPLICA) {
                // KIP-841: the controller knows a joining replica is fenced or shutting
                // down before this node's image does. Not now: the replica stays out, and
                // the next check (half a lag window on) asks again from a newer image.
                info!(topic = %key.topic, partition = key.partition, outcome = ?out, "ISR change refused for now: a joining replica is not eligible");
            } else {
                warn!(topic = %key.topic, partition = key.partition, outcome = ?out, "ISR change not made");
            }
            let mut leading = self.replicas.leading.borrow_mut();
            let Some(l) = leading.get_mut(&key) else {
                continue;
            };
            if code.is_some_and(isr_change_decided) {
                l.isr_change_refused(proposed_at);
            } else {
                l.isr_change_unknown(proposed_at);
            }
        }
    }
}

/// Whether a failed ISR change proposal was decided (the controller refused it), as opposed to
/// one whose outcome is unknown — it timed out, or the controller changed while it waited
/// (REQUEST_TIMED_OUT, NOT_CONTROLLER, UNKNOWN_SERVER_ERROR) — and may still be applied.
fn isr_change_decided(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::REQUEST_TIMED_OUT | ErrorCode::NOT_CONTROLLER | ErrorCode::UNKNOWN_SERVER_ERROR
    )
}

/// An acks=all decision as the produce answers it.
fn acks_all_answer(decided: AcksAll) -> Result<(), ErrorCode> {
    match decided {
        AcksAll::Acknowledged => Ok(()),
        AcksAll::TooFewReplicas => Err(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND),
        AcksAll::Deposed => Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
        AcksAll::TimedOut | AcksAll::Waiting => Err(ErrorCode::REQUEST_TIMED_OUT),
    }
}

/// Waits for `advanced` (the partition moved, or its leadership changed), at most 100 ms and
/// never past `deadline`: REQUEST_TIMED_OUT once it has passed.
async fn advance_or_deadline(
    advanced: event_listener::EventListener,
    deadline: Instant,
) -> Result<(), ErrorCode> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ErrorCode::REQUEST_TIMED_OUT);
    }
    futures_lite::future::or(
        async {
            advanced.await;
        },
        async {
            glommio::timer::sleep(left.min(Duration::from_millis(100))).await;
        },
    )
    .await;
    Ok(())
}

/// An acks=all batch's turn to be appended; the next one's comes when it is dropped.
pub struct AppendTurn(Rc<crate::replica::Turns>);

impl Drop for AppendTurn {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// `replica.backlog.max.bytes`, `replica.fetch.max.bytes` when unset: what one follower fetch
/// takes of a partition.
pub fn replica_backlog_max_bytes(config: &BrokerConfig) -> u64 {
    config
        .replica_backlog_max_bytes
        .unwrap_or(u64::from(config.replica_fetch_max_bytes.unsigned_abs()))
}

/// The ISR rules of a broker's config. The silence window is at least twice
/// `replica.fetch.wait.max.ms`: an idle follower's fetch is held at the leader that long.
pub fn isr_rules(config: &BrokerConfig) -> crate::replica::IsrRules {
    let held = 2 * u64::from(config.replica_fetch_wait_max_ms.unsigned_abs());
    let silence = match config.replica_fetch_silence_max_ms {
        0 => 0,
        s => s.max(held),
    };
    crate::replica::IsrRules {
        lag_max: Duration::from_millis(config.replica_lag_time_max_ms),
        silence_max: (silence > 0).then(|| Duration::from_millis(silence)),
    }
}

/// How often leaders check their followers: twice per lag window (as Kafka), and four times
/// per silence window when that rule is on, so a cut follower leaves within 1.25 of it.
pub fn isr_check_interval_ms(config: &BrokerConfig) -> u64 {
    let lag = config.replica_lag_time_max_ms / 2;
    let rules = isr_rules(config);
    match rules.silence_max {
        Some(s) => lag.min(s.as_millis() as u64 / 4),
        None => lag,
    }
    .max(1)
}
