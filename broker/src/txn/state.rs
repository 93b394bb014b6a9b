//! One transactional id's state and Kafka's rules for moving it (the transaction
//! coordinator's `TransactionMetadata` / `TransactionStateManager` transitions, transaction
//! protocol version 1: the epoch is bumped by InitProducerId and by a timeout abort, not per
//! transaction). Pure: every decision takes the current time and returns what to write and
//! what to answer; the coordinator persists and then applies.

use std::collections::BTreeSet;

use tributary_metadata::types::{ProducerEpoch, ProducerId, TopicPartition};
use tributary_protocol::txn_records::TxnValue;
use tributary_protocol::ErrorCode;

/// Kafka's `TransactionState`, with its ids in `__transaction_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's names, as DescribeTransactions and ListTransactions show them.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// Markers are being written: the producer waits (CONCURRENT_TRANSACTIONS).
    pub fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// A transactional id's metadata, as held in memory and written to `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
}

impl TxnMeta {
    pub fn to_value(&self) -> TxnValue {
        let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
        for TopicPartition { topic, partition } in &self.partitions {
            match by_topic.last_mut().filter(|(name, _)| name == topic) {
                Some((_, ps)) => ps.push(*partition),
                None => by_topic.push((topic.clone(), vec![*partition])),
            }
        }
        TxnValue {
            producer_id: self.producer_id.0,
            producer_epoch: self.producer_epoch.0,
            timeout_ms: self.timeout_ms,
            status: self.state.id(),
            partitions: by_topic,
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
        }
    }

    /// The metadata a `__transaction_state` record holds; `None` for an unknown status.
    pub fn from_value(transactional_id: &str, v: &TxnValue) -> Option<TxnMeta> {
        Some(TxnMeta {
            transactional_id: transactional_id.to_string(),
            producer_id: ProducerId(v.producer_id),
            producer_epoch: ProducerEpoch(v.producer_epoch),
            timeout_ms: v.timeout_ms,
            state: TxnState::from_id(v.status)?,
            partitions: v
                .partitions
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
                .collect(),
            start_ms: v.start_ms,
            last_update_ms: v.last_update_ms,
        })
    }

    /// Whether a request names this producer at its current epoch: INVALID_PRODUCER_ID_MAPPING
    /// for another producer id, PRODUCER_FENCED for another epoch (an older instance).
    pub fn check_producer(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
    ) -> Result<(), ErrorCode> {
        if producer_id != self.producer_id {
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != self.producer_epoch {
            return Err(ErrorCode::PRODUCER_FENCED);
        }
        Ok(())
    }
}

/// What InitProducerId does to an existing id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// Write this (epoch bumped, state Empty) and answer with its producer id and epoch.
    Ready(TxnMeta),
    /// Its epoch is exhausted: a new producer id is needed (then epoch 0).
    NewProducerId,
    /// An open transaction of the previous instance: write this (epoch bumped, PrepareAbort),
    /// abort it, and answer CONCURRENT_TRANSACTIONS (the client retries).
    AbortFirst(TxnMeta),
    Refuse(ErrorCode),
}

/// InitProducerId for an existing transactional id (KIP-98, with KIP-360's producer id and
/// epoch from v3: `given` is (-1, -1) otherwise).
pub fn init(
    meta: &TxnMeta,
    timeout_ms: i32,
    (given_id, given_epoch): (ProducerId, ProducerEpoch),
    now_ms: i64,
) -> InitDecision {
    let given = given_id.0 >= 0;
    if given && (given_id != meta.producer_id || given_epoch != meta.producer_epoch) {
        return InitDecision::Refuse(ErrorCode::PRODUCER_FENCED);
    }
    match meta.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            InitDecision::Refuse(ErrorCode::CONCURRENT_TRANSACTIONS)
        }
        TxnState::Ongoing => {
            let mut next = meta.clone();
            next.producer_epoch = bumped(meta.producer_epoch);
            next.state = TxnState::PrepareAbort;
            next.last_update_ms = now_ms;
            InitDecision::AbortFirst(next)
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead => {
            if meta.producer_epoch.0 >= i16::MAX - 1 {
                return InitDecision::NewProducerId;
            }
            let mut next = meta.clone();
            next.producer_epoch = bumped(meta.producer_epoch);
            next.timeout_ms = timeout_ms;
            next.state = TxnState::Empty;
            next.partitions.clear();
            next.start_ms = -1;
            next.last_update_ms = now_ms;
            InitDecision::Ready(next)
        }
    }
}

fn bumped(epoch: ProducerEpoch) -> ProducerEpoch {
    ProducerEpoch(epoch.0.saturating_add(1))
}

/// A new transactional id, or one whose epoch ran out, at epoch 0 of `producer_id`.
pub fn fresh(id: &str, producer_id: ProducerId, timeout_ms: i32, now_ms: i64) -> TxnMeta {
    TxnMeta {
        transactional_id: id.to_string(),
        producer_id,
        producer_epoch: ProducerEpoch(0),
        timeout_ms,
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        start_ms: -1,
        last_update_ms: now_ms,
    }
}

/// AddPartitionsToTxn / AddOffsetsToTxn: `Ok(None)` when every partition is in the
/// transaction already (nothing to write), `Ok(Some(next))` to write.
pub fn add_partitions(
    meta: &TxnMeta,
    producer: (ProducerId, ProducerEpoch),
    partitions: &[TopicPartition],
    now_ms: i64,
) -> Result<Option<TxnMeta>, ErrorCode> {
    meta.check_producer(producer.0, producer.1)?;
    match meta.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            return Err(ErrorCode::CONCURRENT_TRANSACTIONS)
        }
        TxnState::Dead => return Err(ErrorCode::INVALID_TXN_STATE),
        _ => {}
    }
    let ongoing = meta.state == TxnState::Ongoing;
    if ongoing && partitions.iter().all(|p| meta.partitions.contains(p)) {
        return Ok(None);
    }
    let mut next = meta.clone();
    if !ongoing {
        next.partitions.clear();
        next.start_ms = now_ms;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.last_update_ms = now_ms;
    Ok(Some(next))
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// Write this (PrepareCommit / PrepareAbort), answer, then write the markers.
    Prepare(TxnMeta),
    /// A retry of an EndTxn already completed: answer NONE.
    Done,
    Refuse(ErrorCode),
}

pub fn end(
    meta: &TxnMeta,
    producer: (ProducerId, ProducerEpoch),
    commit: bool,
    now_ms: i64,
) -> EndDecision {
    if let Err(e) = meta.check_producer(producer.0, producer.1) {
        return EndDecision::Refuse(e);
    }
    match (meta.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = meta.clone();
            next.state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            next.last_update_ms = now_ms;
            EndDecision::Prepare(next)
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => EndDecision::Done,
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            EndDecision::Refuse(ErrorCode::CONCURRENT_TRANSACTIONS)
        }
        // An empty transaction (nothing added) ends at once, as Kafka's does.
        (TxnState::Empty, _) => EndDecision::Refuse(ErrorCode::INVALID_TXN_STATE),
        _ => EndDecision::Refuse(ErrorCode::INVALID_TXN_STATE),
    }
}

/// The state once every marker of a prepared transaction is written.
pub fn complete(meta: &TxnMeta, now_ms: i64) -> Option<TxnMeta> {
    let state = match meta.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = meta.clone();
    next.state = state;
    next.partitions.clear();
    next.last_update_ms = now_ms;
    Some(next)
}

/// An ongoing transaction past its timeout: the coordinator aborts it, bumping the epoch so the
/// producer that let it expire is fenced (Kafka's `abortTimedOutTransactions`).
pub fn expire(meta: &TxnMeta, now_ms: i64) -> Option<TxnMeta> {
    if meta.state != TxnState::Ongoing || now_ms < meta.start_ms + i64::from(meta.timeout_ms) {
        return None;
    }
    let mut next = meta.clone();
    next.producer_epoch = bumped(meta.producer_epoch);
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = now_ms;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str, n: i32) -> TopicPartition {
        TopicPartition::new(t, n)
    }

    /// Producer `id` at `epoch`.
    fn pr(id: i64, epoch: i16) -> (ProducerId, ProducerEpoch) {
        (ProducerId(id), ProducerEpoch(epoch))
    }

    #[test]
    fn a_transaction_runs_empty_ongoing_prepare_complete() {
        let m = fresh("tx", ProducerId(7), 60_000, 1);
        assert_eq!(m.producer_epoch, ProducerEpoch(0));
        let m = add_partitions(&m, pr(7, 0), &[p("t", 0)], 10)
            .unwrap()
            .unwrap();
        assert_eq!((m.state, m.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(add_partitions(&m, pr(7, 0), &[p("t", 0)], 11), Ok(None));
        let m = add_partitions(&m, pr(7, 0), &[p("u", 1)], 12)
            .unwrap()
            .unwrap();
        assert_eq!(m.partitions.len(), 2);
        let EndDecision::Prepare(m) = end(&m, pr(7, 0), true, 13) else {
            panic!()
        };
        assert_eq!(m.state, TxnState::PrepareCommit);
        assert_eq!(
            add_partitions(&m, pr(7, 0), &[p("t", 0)], 14),
            Err(ErrorCode::CONCURRENT_TRANSACTIONS)
        );
        assert_eq!(
            end(&m, pr(7, 0), true, 14),
            EndDecision::Refuse(ErrorCode::CONCURRENT_TRANSACTIONS)
        );
        let m = complete(&m, 15).unwrap();
        assert_eq!(m.state, TxnState::CompleteCommit);
        assert!(m.partitions.is_empty());
        assert_eq!(end(&m, pr(7, 0), true, 16), EndDecision::Done, "a retry");
        assert_eq!(
            end(&m, pr(7, 0), false, 16),
            EndDecision::Refuse(ErrorCode::INVALID_TXN_STATE)
        );
        // The next transaction starts afresh.
        let m = add_partitions(&m, pr(7, 0), &[p("v", 2)], 20)
            .unwrap()
            .unwrap();
        assert_eq!(m.partitions.len(), 1);
        assert_eq!(m.start_ms, 20);
    }

    #[test]
    fn an_older_instance_is_fenced_and_its_open_transaction_aborted() {
        let m = fresh("tx", ProducerId(7), 60_000, 1);
        let m = add_partitions(&m, pr(7, 0), &[p("t", 0)], 10)
            .unwrap()
            .unwrap();
        // A second instance initialises: the first one's transaction is aborted at a new epoch.
        let InitDecision::AbortFirst(aborting) = init(&m, 60_000, pr(-1, -1), 20) else {
            panic!()
        };
        assert_eq!(
            (aborting.state, aborting.producer_epoch),
            (TxnState::PrepareAbort, ProducerEpoch(1))
        );
        assert_eq!(
            init(&aborting, 60_000, pr(-1, -1), 21),
            InitDecision::Refuse(ErrorCode::CONCURRENT_TRANSACTIONS)
        );
        let done = complete(&aborting, 22).unwrap();
        let InitDecision::Ready(ready) = init(&done, 30_000, pr(-1, -1), 23) else {
            panic!()
        };
        assert_eq!(
            (ready.producer_epoch, ready.state),
            (ProducerEpoch(2), TxnState::Empty)
        );
        assert_eq!(ready.timeout_ms, 30_000);
        // The old instance at epoch 0 is fenced everywhere.
        assert_eq!(
            add_partitions(&ready, pr(7, 0), &[p("t", 0)], 24),
            Err(ErrorCode::PRODUCER_FENCED)
        );
        assert_eq!(
            end(&ready, pr(7, 0), true, 24),
            EndDecision::Refuse(ErrorCode::PRODUCER_FENCED)
        );
        assert_eq!(
            add_partitions(&ready, pr(8, 2), &[p("t", 0)], 24),
            Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
        );
        assert_eq!(
            init(&ready, 30_000, pr(7, 1), 25),
            InitDecision::Refuse(ErrorCode::PRODUCER_FENCED),
            "KIP-360: an old epoch cannot re-initialise"
        );
        assert!(matches!(
            init(&ready, 30_000, pr(7, 2), 25),
            InitDecision::Ready(_)
        ));
    }

    #[test]
    fn ending_nothing_is_invalid_and_an_exhausted_epoch_needs_a_new_id() {
        let m = fresh("tx", ProducerId(7), 60_000, 1);
        assert_eq!(
            end(&m, pr(7, 0), true, 2),
            EndDecision::Refuse(ErrorCode::INVALID_TXN_STATE)
        );
        let mut old = m.clone();
        old.producer_epoch = ProducerEpoch(i16::MAX - 1);
        assert_eq!(init(&old, 1000, pr(-1, -1), 3), InitDecision::NewProducerId);
    }

    #[test]
    fn a_transaction_past_its_timeout_is_aborted_at_a_new_epoch() {
        let m = fresh("tx", ProducerId(7), 1_000, 0);
        let m = add_partitions(&m, pr(7, 0), &[p("t", 0)], 100)
            .unwrap()
            .unwrap();
        assert_eq!(expire(&m, 1_099), None);
        let e = expire(&m, 1_100).unwrap();
        assert_eq!(
            (e.state, e.producer_epoch),
            (TxnState::PrepareAbort, ProducerEpoch(1))
        );
        assert_eq!(
            expire(&fresh("x", ProducerId(1), 1, 0), 10_000),
            None,
            "nothing open"
        );
    }

    #[test]
    fn metadata_round_trips_through_its_record() {
        let m = fresh("tx", ProducerId(7), 60_000, 1);
        let m = add_partitions(&m, pr(7, 0), &[p("b", 1), p("a", 0), p("a", 3)], 5)
            .unwrap()
            .unwrap();
        let v = m.to_value();
        assert_eq!(
            v.partitions,
            vec![("a".into(), vec![0, 3]), ("b".into(), vec![1])]
        );
        assert_eq!(TxnMeta::from_value("tx", &v), Some(m));
    }
}
