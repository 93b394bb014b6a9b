//! The transaction coordinator of one shard: every transactional id whose `__transaction_state`
//! partition this shard owns and leads (Kafka's `abs(hashCode(id)) % partitions`, as for
//! groups). It applies the rules in `state`, writes each transition to that partition in Kafka's
//! record format before acting on it, and rebuilds its ids from the partition when leadership
//! arrives. Writing the COMMIT/ABORT markers to the transaction's partitions is the shard's
//! (`markers`), which calls back into `complete` once every marker is written.
//!
//! At most one transition per id is in flight: a request for an id with a write pending is
//! answered CONCURRENT_TRANSACTIONS, as Kafka's coordinator does while a transition is pending.

pub mod markers;
pub mod state;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use bytes::Bytes;
use tracing::{info, warn};
use tributary_metadata::types::{ProducerEpoch, ProducerId, TopicPartition};
use tributary_protocol::txn_records::{TxnKey, TxnValue};
use tributary_protocol::ErrorCode;
use tributary_storage::Partition;

use crate::coordinator_log::{self, now_ms, ReplicatedWrite};
use state::{EndDecision, InitDecision, TxnMeta, TxnState};

pub use tributary_metadata::internal_topics::{partition_for_group, TXN_TOPIC};

#[derive(Debug, Clone, Copy)]
pub struct TxnConfig {
    pub max_timeout_ms: i32,
    pub partitions: i32,
    pub id_expiration_ms: i64,
}

/// One transaction as DescribeTransactions and ListTransactions show it.
pub type Described = TxnMeta;

pub struct TxnCoordinator {
    config: TxnConfig,
    /// Set by the shard: how a write to a replicated `__transaction_state` partition waits for
    /// its ISR.
    pub replicated_write: RefCell<Option<ReplicatedWrite>>,
    /// `__transaction_state`'s partition count once the topic exists.
    partitions: Cell<i32>,
    txns: RefCell<HashMap<String, TxnMeta>>,
    /// Ids with a transition being written.
    busy: RefCell<HashSet<String>>,
}

/// Marks an id busy for the life of a transition; dropping it (done, failed or cancelled)
/// frees the id.
struct Busy<'a> {
    set: &'a RefCell<HashSet<String>>,
    id: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.set.borrow_mut().remove(&self.id);
    }
}

impl TxnCoordinator {
    pub fn new(config: TxnConfig) -> Self {
        Self {
            partitions: Cell::new(config.partitions),
            config,
            replicated_write: RefCell::new(None),
            txns: RefCell::new(HashMap::new()),
            busy: RefCell::new(HashSet::new()),
        }
    }

    /// The `__transaction_state` partition holding `id`.
    pub fn partition_of(&self, id: &str) -> i32 {
        partition_for_group(id, self.partitions.get())
    }

    pub fn set_partitions(&self, n: i32) {
        self.partitions.set(n);
    }

    pub fn max_timeout_ms(&self) -> i32 {
        self.config.max_timeout_ms
    }

    fn claim(&self, id: &str) -> Result<Busy<'_>, ErrorCode> {
        if !self.busy.borrow_mut().insert(id.to_string()) {
            return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        Ok(Busy {
            set: &self.busy,
            id: id.to_string(),
        })
    }

    async fn persist(&self, log: &Rc<Partition>, meta: &TxnMeta) -> Result<(), ErrorCode> {
        let key = TxnKey {
            transactional_id: meta.transactional_id.clone(),
        }
        .encode();
        let records = [(key, Some(meta.to_value().encode()))];
        coordinator_log::append(log, &records, &self.replicated_write).await
    }

    /// Writes `next` and, once it is durable, makes it the id's state.
    async fn transition(&self, log: &Rc<Partition>, next: TxnMeta) -> Result<(), ErrorCode> {
        self.persist(log, &next).await?;
        self.txns
            .borrow_mut()
            .insert(next.transactional_id.clone(), next);
        Ok(())
    }

    // ---------------------------------------------------------------- loading

    /// Rebuilds the ids of one `__transaction_state` partition this node now leads. Returns
    /// the transactions left prepared (their markers must be written again).
    pub async fn load(&self, log: &Rc<Partition>) -> Vec<TxnMeta> {
        let mut loaded: HashMap<String, Option<TxnMeta>> = HashMap::new();
        coordinator_log::replay(log, |item| {
            let coordinator_log::Replayed::Record { key, value, .. } = item else {
                return;
            };
            match TxnKey::decode(key) {
                Ok(k) => {
                    let meta = match value.map(TxnValue::decode) {
                        None => None,
                        Some(Ok(v)) => TxnMeta::from_value(&k.transactional_id, &v),
                        Some(Err(e)) => {
                            warn!(error = %e, "unreadable __transaction_state record skipped");
                            return;
                        }
                    };
                    loaded.insert(k.transactional_id, meta);
                }
                Err(e) => warn!(error = %e, "unknown __transaction_state key skipped"),
            }
        })
        .await;
        let mut txns = self.txns.borrow_mut();
        let mut prepared = Vec::new();
        for (id, meta) in loaded {
            match meta {
                Some(m) => {
                    if m.state.is_preparing() {
                        prepared.push(m.clone());
                    }
                    txns.insert(id, m);
                }
                None => {
                    txns.remove(&id);
                }
            }
        }
        prepared
    }

    /// Forgets the ids of a partition this node no longer leads.
    pub fn unload(&self, partition: i32) -> usize {
        let n = self.partitions.get();
        let mut txns = self.txns.borrow_mut();
        let before = txns.len();
        txns.retain(|id, _| partition_for_group(id, n) != partition);
        before - txns.len()
    }

    // ---------------------------------------------------------------- requests

    /// InitProducerId with a transactional id. `allocate` draws a new producer id (from the
    /// controller) when the id is new or its epoch ran out. An open transaction of an older
    /// instance is aborted first: `Err(CONCURRENT_TRANSACTIONS)` plus the prepared abort in
    /// `aborting`, whose markers the caller writes.
    pub async fn init_producer_id<F, Fut>(
        &self,
        log: &Rc<Partition>,
        id: &str,
        timeout_ms: i32,
        given: (ProducerId, ProducerEpoch),
        allocate: F,
    ) -> Result<(ProducerId, ProducerEpoch), (ErrorCode, Option<TxnMeta>)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<ProducerId, ErrorCode>>,
    {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err((ErrorCode::INVALID_TRANSACTION_TIMEOUT, None));
        }
        let _busy = self.claim(id).map_err(|e| (e, None))?;
        let now = now_ms();
        let current = self.txns.borrow().get(id).cloned();
        let decision = match &current {
            None => InitDecision::NewProducerId,
            Some(m) => state::init(m, timeout_ms, given, now),
        };
        let next = match decision {
            InitDecision::Refuse(e) => return Err((e, None)),
            InitDecision::AbortFirst(next) => {
                info!(
                    transactional_id = id,
                    epoch = next.producer_epoch.0,
                    "aborting the open transaction of an older producer instance"
                );
                self.transition(log, next.clone())
                    .await
                    .map_err(|e| (e, None))?;
                return Err((ErrorCode::CONCURRENT_TRANSACTIONS, Some(next)));
            }
            InitDecision::Ready(next) => next,
            InitDecision::NewProducerId => {
                if given.0 >= ProducerId(0) && current.is_none() {
                    // KIP-360: a producer id for an id this coordinator does not know.
                    return Err((ErrorCode::INVALID_PRODUCER_ID_MAPPING, None));
                }
                let pid = allocate().await.map_err(|e| (e, None))?;
                state::fresh(id, pid, timeout_ms, now)
            }
        };
        self.transition(log, next.clone())
            .await
            .map_err(|e| (e, None))?;
        Ok((next.producer_id, next.producer_epoch))
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn.
    pub async fn add_partitions(
        &self,
        log: &Rc<Partition>,
        id: &str,
        producer: (ProducerId, ProducerEpoch),
        partitions: &[TopicPartition],
    ) -> Result<(), ErrorCode> {
        let _busy = self.claim(id)?;
        let Some(current) = self.txns.borrow().get(id).cloned() else {
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        match state::add_partitions(&current, producer, partitions, now_ms())? {
            None => Ok(()),
            Some(next) => self.transition(log, next).await,
        }
    }

    /// EndTxn: `Ok(Some(prepared))` when the transaction is now PrepareCommit/PrepareAbort
    /// (the caller answers, writes the markers, then calls `complete`); `Ok(None)` for a retry
    /// of a completed EndTxn.
    pub async fn end_txn(
        &self,
        log: &Rc<Partition>,
        id: &str,
        producer: (ProducerId, ProducerEpoch),
        commit: bool,
    ) -> Result<Option<TxnMeta>, ErrorCode> {
        let _busy = self.claim(id)?;
        let Some(current) = self.txns.borrow().get(id).cloned() else {
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        match state::end(&current, producer, commit, now_ms()) {
            EndDecision::Refuse(e) => Err(e),
            EndDecision::Done => Ok(None),
            EndDecision::Prepare(next) => {
                self.transition(log, next.clone()).await?;
                Ok(Some(next))
            }
        }
    }

    /// Once every marker of `prepared` is written: CompleteCommit / CompleteAbort. A
    /// transaction that moved on meanwhile (another coordinator took over) is left alone.
    pub async fn complete(&self, log: &Rc<Partition>, prepared: &TxnMeta) -> Result<(), ErrorCode> {
        let id = &prepared.transactional_id;
        let _busy = loop {
            match self.claim(id) {
                Ok(b) => break b,
                // A request's transition on the same id is in flight; markers wait for it.
                Err(_) => glommio::timer::sleep(std::time::Duration::from_millis(5)).await,
            }
        };
        let current = self.txns.borrow().get(id).cloned();
        let Some(current) = current.filter(|c| c == prepared) else {
            return Ok(());
        };
        match state::complete(&current, now_ms()) {
            Some(next) => self.transition(log, next).await,
            None => Ok(()),
        }
    }

    /// Ongoing transactions past their timeout, moved to PrepareAbort at a new epoch (written);
    /// the caller writes their markers.
    pub async fn abort_expired(
        &self,
        log_of: impl Fn(&str) -> Option<Rc<Partition>>,
    ) -> Vec<TxnMeta> {
        let now = now_ms();
        let expired: Vec<TxnMeta> = self
            .txns
            .borrow()
            .values()
            .filter_map(|m| state::expire(m, now))
            .collect();
        let mut out = Vec::new();
        for next in expired {
            let Some(log) = log_of(&next.transactional_id) else {
                continue;
            };
            let Ok(_busy) = self.claim(&next.transactional_id) else {
                continue;
            };
            warn!(transactional_id = %next.transactional_id, timeout_ms = next.timeout_ms, "aborting a transaction past its timeout");
            if self.transition(&log, next.clone()).await.is_ok() {
                out.push(next);
            }
        }
        out
    }

    /// Ids idle (no transaction open) for `transactional.id.expiration.ms`: tombstoned and
    /// forgotten, as Kafka's coordinator does.
    pub async fn expire_ids(&self, log_of: impl Fn(&str) -> Option<Rc<Partition>>) -> usize {
        let now = now_ms();
        let idle: Vec<String> = self
            .txns
            .borrow()
            .values()
            .filter(|m| {
                matches!(
                    m.state,
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                ) && now - m.last_update_ms >= self.config.id_expiration_ms
            })
            .map(|m| m.transactional_id.clone())
            .collect();
        let mut n = 0;
        for id in idle {
            let Some(log) = log_of(&id) else { continue };
            let Ok(_busy) = self.claim(&id) else { continue };
            let key = TxnKey {
                transactional_id: id.clone(),
            }
            .encode();
            let records: [(Bytes, Option<Bytes>); 1] = [(key, None)];
            if coordinator_log::append(&log, &records, &self.replicated_write)
                .await
                .is_ok()
            {
                self.txns.borrow_mut().remove(&id);
                n += 1;
            }
        }
        n
    }

    /// The producer id and epoch an id holds now, if this coordinator knows it.
    pub fn producer_of(&self, id: &str) -> Option<(ProducerId, ProducerEpoch, TxnState)> {
        self.txns
            .borrow()
            .get(id)
            .map(|m| (m.producer_id, m.producer_epoch, m.state))
    }

    /// Whether `partition` is in the ongoing transaction of `id` at this producer id and epoch
    /// (KIP-890's check before a transactional produce).
    pub fn verify(
        &self,
        id: &str,
        producer: (ProducerId, ProducerEpoch),
        partition: &TopicPartition,
    ) -> ErrorCode {
        match self.txns.borrow().get(id) {
            None => ErrorCode::INVALID_PRODUCER_ID_MAPPING,
            Some(m) => match m.check_producer(producer.0, producer.1) {
                Err(e) => e,
                Ok(()) if m.state == TxnState::Ongoing && m.partitions.contains(partition) => {
                    ErrorCode::NONE
                }
                Ok(()) => ErrorCode::INVALID_TXN_STATE,
            },
        }
    }

    pub fn describe(&self, id: &str) -> Option<Described> {
        self.txns.borrow().get(id).cloned()
    }

    pub fn list(&self) -> Vec<Described> {
        self.txns.borrow().values().cloned().collect()
    }
}
