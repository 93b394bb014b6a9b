//! A node's partitions: the roles the image gives them, a leader's real ISR and
//! high-watermark bookkeeping (`tributary_replication::LeaderState`) and divergence check, a
//! follower's fetch loop with the real truncation rule, and acks=all produce. Each rule is the
//! broker's (`broker/src/replica`), in the order it applies them; only the bytes are models.

use std::time::{Duration, Instant};

use tributary_protocol::ErrorCode;
use tributary_replication::{
    acks_all, acks_all_timed_out, divergence, truncation_target, AcksAll, LeaderEpoch, LeaderState,
    LinkId, NodeId, Offset,
};
use tributary_storage::producer_state::SequenceCheck;

use crate::log::{Record, ReplicaLog};
use crate::node::Node;
use crate::{Body, Effects, Event, FetchAnswer, Limits, TOPIC};

/// Whom a follower fetches from, at which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follow {
    pub leader: i32,
    pub leader_epoch: LeaderEpoch,
}

/// An acks=all batch appended here, waiting for the ISR.
#[derive(Debug, Clone)]
pub struct PendingAck {
    pub client: usize,
    pub request: u64,
    pub base: i64,
    pub end: i64,
    pub epoch: LeaderEpoch,
    pub deadline: u64,
}

#[derive(Debug, Default)]
pub struct Part {
    pub log: ReplicaLog,
    pub leading: Option<LeaderState>,
    pub following: Option<Follow>,
    /// The follower's fetch in flight: its id, to whom and at which epoch, and when it left.
    pub fetch: Option<(u64, Follow, u64)>,
    /// The high watermark the leader last sent this follower.
    pub leader_hw: i64,
    pub acks: Vec<PendingAck>,
    /// When the pending ISR change was proposed (a proposal not applied within the quorum's
    /// proposal timeout fails, and is no longer pending).
    pub isr_proposed_at: u64,
}

fn at(base: Instant, now: u64) -> Instant {
    base + Duration::from_millis(now)
}

impl Node {
    /// Takes each partition's role from the image (`Shard::apply_replica_roles`).
    pub fn apply_roles(&mut self, now: u64, base: Instant, limits: &Limits, fx: &mut Effects) {
        let me = self.id;
        // A broker starts serving only once its registration is in the image (the real one
        // registers before its shards take the image): until then the image may still say it
        // leads at an epoch its previous process led.
        let registered = self.image.brokers.get(&me).map(|b| &b.incarnation);
        if registered != Some(&self.incarnation_name()) {
            return;
        }
        let Some(topic) = self.image.topics.get(TOPIC).cloned() else {
            return;
        };
        for (p, reg) in topic.assignment.iter().enumerate() {
            let p = p as i32;
            let part = self.parts.get_mut(&p).expect("every partition is modelled");
            let kept = reg.leader == me
                && part
                    .leading
                    .as_ref()
                    .is_some_and(|l| l.leader_epoch == reg.leader_epoch);
            if !kept && part.leading.take().is_some() {
                // Deposed: every write waiting here is answered NOT_LEADER_OR_FOLLOWER.
                for a in part.acks.drain(..) {
                    fx.reply(
                        me,
                        a.client,
                        a.request,
                        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
                    );
                }
            }
            if reg.leader == me {
                part.following = None;
                match part.leading.as_mut() {
                    Some(l) => {
                        let (isr, replicas) = (reg.isr_nodes(), reg.replica_nodes());
                        l.take_image(reg.partition_epoch, isr, replicas, at(base, now));
                    }
                    None => {
                        part.log.begin_epoch(reg.leader_epoch.0);
                        part.leading = Some(LeaderState::new(
                            reg.leader_epoch,
                            reg.partition_epoch,
                            reg.replica_nodes(),
                            reg.isr_nodes(),
                            Offset(part.log.log_end_offset()),
                            at(base, now),
                        ));
                        fx.began_leading.push((p, reg.leader_epoch.0));
                    }
                }
            } else if reg.leader >= 0 && reg.replicas.contains(&me) {
                let follow = Follow {
                    leader: reg.leader,
                    leader_epoch: reg.leader_epoch,
                };
                if part.following.replace(follow) != Some(follow) {
                    fx.timer(0, Event::FetchDue(me, self.incarnation, p));
                }
            } else {
                part.following = None;
            }
        }
        for p in 0..limits.partitions {
            self.advance_high_watermark(p, limits, fx);
        }
    }

    /// The leader's high watermark over its ISR, and the acknowledgements it releases.
    pub fn advance_high_watermark(&mut self, p: i32, limits: &Limits, fx: &mut Effects) {
        let me = self.id;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let Some(l) = part.leading.as_ref() else {
            return;
        };
        let durable = part.log.durable_offset();
        let hw = if limits.canary == Some(crate::Canary::HighWatermarkIgnoresIsr) {
            durable
        } else {
            l.high_watermark(NodeId(me), Offset(durable)).0
        };
        part.log.advance_high_watermark(hw);
        let hw = Offset(part.log.high_watermark());
        let min_insync = limits.min_insync_replicas;
        part.acks.retain(|a| {
            let decided = acks_all(Some(l), a.epoch, Offset(a.end), hw, min_insync);
            let answer = match decided {
                AcksAll::Waiting => return true,
                AcksAll::Acknowledged => Ok(a.base),
                AcksAll::TooFewReplicas => Err(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND),
                AcksAll::Deposed => Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
                AcksAll::TimedOut => Err(ErrorCode::REQUEST_TIMED_OUT),
            };
            fx.reply(me, a.client, a.request, answer);
            false
        });
        fx.hw_moved.push((me, p));
    }

    /// An idempotent acks=all produce of `ids` (`batch`: producer id and first sequence) to
    /// partition `p` (`produce_local` with `wait_replicated`).
    #[allow(clippy::too_many_arguments)]
    pub fn produce(
        &mut self,
        p: i32,
        client: usize,
        request: u64,
        batch: (i64, i32),
        ids: &[u64],
        now: u64,
        limits: &Limits,
        fx: &mut Effects,
    ) {
        let me = self.id;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let Some(l) = part.leading.as_ref() else {
            fx.reply(me, client, request, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
            return;
        };
        if (l.isr.len() as i32) < limits.min_insync_replicas {
            fx.reply(me, client, request, Err(ErrorCode::NOT_ENOUGH_REPLICAS));
            return;
        }
        let epoch = l.leader_epoch;
        let (producer, first_seq) = batch;
        let last_seq = first_seq + ids.len() as i32 - 1;
        let check = match limits.canary {
            Some(crate::Canary::NoSequenceCheck) => Ok(SequenceCheck::Append),
            _ => part.log.check_sequence(producer, first_seq, last_seq),
        };
        let (base, end) = match check {
            Ok(SequenceCheck::Append) => {
                let base = part.log.log_end_offset();
                let records: Vec<Record> = ids
                    .iter()
                    .map(|&id| Record {
                        epoch: epoch.0,
                        id,
                        producer,
                        first_seq,
                        last_seq,
                    })
                    .collect();
                part.log.append(&records);
                fx.sync(me, self.incarnation, p, &part.log);
                (base, part.log.log_end_offset())
            }
            // A retry of a batch this log holds: answered with its offsets once replicated.
            Ok(SequenceCheck::Duplicate {
                base_offset,
                last_offset,
            }) => (base_offset, last_offset + 1),
            Err(_) => {
                let code = ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER;
                fx.reply(me, client, request, Err(code));
                return;
            }
        };
        part.acks.push(PendingAck {
            client,
            request,
            base,
            end,
            epoch,
            deadline: now + limits.request_timeout_ms,
        });
        self.advance_high_watermark(p, limits, fx);
        fx.timer(
            limits.request_timeout_ms,
            Event::AckDeadline(me, self.incarnation, p),
        );
    }

    /// Answers the writes whose deadline passed: REQUEST_TIMED_OUT, or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below the minimum by then
    /// (`acknowledge_replicated`).
    pub fn expire_acks(&mut self, p: i32, now: u64, limits: &Limits, fx: &mut Effects) {
        let me = self.id;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let timed_out = acks_all_timed_out(part.leading.as_ref(), limits.min_insync_replicas);
        let code = match timed_out {
            AcksAll::TooFewReplicas => ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            _ => ErrorCode::REQUEST_TIMED_OUT,
        };
        part.acks.retain(|a| {
            if a.deadline > now {
                return true;
            }
            fx.reply(me, a.client, a.request, Err(code));
            false
        });
    }

    /// A follower's fetch, on the leader (`replica_fetch_local`).
    #[allow(clippy::too_many_arguments)]
    pub fn answer_fetch(
        &mut self,
        p: i32,
        follower: i32,
        fetch: (u64, i64, i32, i32),
        link: LinkId,
        now: u64,
        base: Instant,
        limits: &Limits,
        fx: &mut Effects,
    ) {
        let (id, offset, current_epoch, last_fetched_epoch) = fetch;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let answer = |a: FetchAnswer| Body::FetchReply {
            partition: p,
            fetch: id,
            answer: a,
        };
        let Some(l) = part.leading.as_mut() else {
            let a = answer(FetchAnswer::Error(ErrorCode::NOT_LEADER_OR_FOLLOWER));
            fx.send(self.id, follower, a);
            return;
        };
        let current_epoch = LeaderEpoch(current_epoch);
        if current_epoch != l.leader_epoch {
            let code = if current_epoch < l.leader_epoch {
                ErrorCode::FENCED_LEADER_EPOCH
            } else {
                ErrorCode::UNKNOWN_LEADER_EPOCH
            };
            fx.send(self.id, follower, answer(FetchAnswer::Error(code)));
            return;
        }
        let log = &part.log;
        let (epoch, end) = log.end_offset_for(last_fetched_epoch);
        let leaders_end = (epoch, Offset(end));
        if let Some((epoch, end)) =
            divergence(last_fetched_epoch, Offset(offset), leaders_end, Offset(0))
        {
            let a = answer(FetchAnswer::Diverging((epoch, end.0)));
            fx.send(self.id, follower, a);
            return;
        }
        let leo = log.log_end_offset();
        if offset > leo || offset < 0 {
            let a = answer(FetchAnswer::Error(ErrorCode::OFFSET_OUT_OF_RANGE));
            fx.send(self.id, follower, a);
            return;
        }
        let follower_id = NodeId(follower);
        l.record_fetch(
            follower_id,
            Offset(offset),
            Offset(leo),
            link,
            at(base, now),
        );
        let outside_isr = !l.isr.contains(&follower_id) && !l.isr_change_pending;
        self.advance_high_watermark(p, limits, fx);
        if outside_isr {
            self.check_isr(Some(p), now, base, limits);
        }
        let log = &self.parts[&p].log;
        let records = log.read(offset, limits.fetch_records_max);
        let a = answer(FetchAnswer::Records(offset, records, log.high_watermark()));
        fx.send(self.id, follower, a);
    }

    /// Proposes the ISR changes the led partitions (or only `only`) need now
    /// (`Shard::isr_changes`), each marked pending.
    pub fn check_isr(&mut self, only: Option<i32>, now: u64, base: Instant, limits: &Limits) {
        let rules = limits.isr_rules();
        let me = self.id;
        let mut proposals = Vec::new();
        for (&p, part) in self.parts.iter_mut() {
            if only.is_some_and(|o| o != p) {
                continue;
            }
            let hw = Offset(part.log.high_watermark());
            let Some(l) = part.leading.as_mut() else {
                continue;
            };
            if l.isr_change_pending {
                // The quorum's proposal timeout: a proposal never applied fails.
                if now.saturating_sub(part.isr_proposed_at) < limits.proposal_timeout_ms {
                    continue;
                }
                let proposed_at = l.partition_epoch;
                l.isr_change_unknown(proposed_at);
            }
            let brokers = &self.image.brokers;
            let eligible = |r: NodeId| tributary_metadata::command::isr_eligible(brokers, r);
            let Some(isr) = l.wanted_isr(NodeId(me), hw, rules, at(base, now), eligible) else {
                continue;
            };
            l.isr_proposed(&isr);
            part.isr_proposed_at = now;
            proposals.push(tributary_metadata::command::MetadataCommand::ChangeIsr {
                topic: TOPIC.into(),
                partition: p,
                leader_epoch: l.leader_epoch,
                partition_epoch: l.partition_epoch,
                isr: isr.iter().map(|r| r.0).collect(),
            });
        }
        for cmd in proposals {
            self.propose(&cmd);
        }
    }

    /// The follower's next fetch of `p`, once what it fetched before is durable.
    pub fn fetch_due(&mut self, p: i32, now: u64, fetch_id: u64, fx: &mut Effects) -> bool {
        let me = self.id;
        let inc = self.incarnation;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let Some(follow) = part.following else {
            return false;
        };
        if part
            .fetch
            .is_some_and(|(_, f, sent)| f == follow && now < sent + 1000)
        {
            return false;
        }
        if part.log.durable_offset() < part.log.log_end_offset() {
            fx.timer(1, Event::FetchDue(me, inc, p));
            return false;
        }
        part.fetch = Some((fetch_id, follow, now));
        fx.send(
            me,
            follow.leader,
            Body::Fetch {
                partition: p,
                fetch: fetch_id,
                offset: part.log.log_end_offset(),
                current_epoch: follow.leader_epoch.0,
                last_fetched_epoch: part.log.latest_epoch().unwrap_or(-1),
            },
        );
        // Asked again if no answer comes (a lost message, a leader gone).
        fx.timer(1000, Event::FetchDue(me, inc, p));
        true
    }

    /// The leader's answer to this follower's fetch `id` of `p` (the fetcher's
    /// `handle_partition`): truncate where the logs diverge, or append and sync.
    pub fn fetched(&mut self, p: i32, id: u64, answer: FetchAnswer, rng_ms: u64, fx: &mut Effects) {
        let me = self.id;
        let inc = self.incarnation;
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        let Some((sent, follow, _)) = part.fetch else {
            return;
        };
        if sent != id || part.following != Some(follow) {
            return;
        }
        part.fetch = None;
        match answer {
            FetchAnswer::Error(_) => fx.timer(50, Event::FetchDue(me, inc, p)),
            FetchAnswer::Diverging((epoch, end)) => {
                let log = &mut part.log;
                let leo = log.log_end_offset();
                let (my_epoch, my_end) = log.end_offset_for(epoch);
                let mine = (my_epoch, Offset(my_end));
                let target = truncation_target(epoch, Offset(end), mine, Offset(leo), Offset(0)).0;
                log.truncate_to(target.min(leo));
                fx.truncated.push((me, p));
                fx.timer(0, Event::FetchDue(me, inc, p));
            }
            FetchAnswer::Records(offset, records, hw) => {
                if offset != part.log.log_end_offset() || records.is_empty() {
                    part.leader_hw = hw;
                    part.log.advance_high_watermark(hw);
                    // Nothing new: the leader would have held the fetch for a while.
                    fx.timer(rng_ms, Event::FetchDue(me, inc, p));
                    return;
                }
                part.log.append(&records);
                part.leader_hw = hw;
                part.log.advance_high_watermark(hw);
                fx.sync(me, inc, p, &part.log);
                fx.timer(0, Event::FetchDue(me, inc, p));
            }
        }
    }

    /// An fsync of `p` completed.
    pub fn synced(
        &mut self,
        p: i32,
        upto: i64,
        generation: u64,
        limits: &Limits,
        fx: &mut Effects,
    ) {
        let part = self.parts.get_mut(&p).expect("every partition is modelled");
        part.log.synced(upto, generation);
        if part.leading.is_some() {
            self.advance_high_watermark(p, limits, fx);
        } else {
            let hw = part.leader_hw;
            part.log.advance_high_watermark(hw);
        }
    }
}
