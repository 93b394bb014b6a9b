//! Fetch sessions (KIP-227): a consumer's first fetch (epoch 0) creates a session holding its
//! partitions and what it was last told about each; later fetches (epoch > 0) name only the
//! partitions whose fetch position changed and get back only partitions with something new.
//! Pure: the cache is one shard's, time is passed in, nothing here does I/O.
//!
//! From Fetch v13 a session's partitions are keyed by topic id, as Kafka's are (a topic deleted
//! and created again under its name is another topic); before v13, by name. A session keeps the
//! one it began with: an incremental fetch of the other kind is FETCH_SESSION_TOPIC_ID_ERROR.
//!
//! Sessions are kept per shard: a consumer that reconnects and lands on another shard gets
//! FETCH_SESSION_ID_NOT_FOUND, and the Java client and kafka-python answer that with a full fetch.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tributary_protocol::requests::fetch::{ForgottenPartition, TopicId, NO_TOPIC_ID};
use tributary_protocol::ErrorCode;

/// `session_id` of a fetch without a session.
pub const INVALID_SESSION_ID: i32 = 0;
/// `session_epoch` of a full fetch that creates a session.
pub const INITIAL_EPOCH: i32 = 0;
/// `session_epoch` of a fetch that wants no session (and closes the one it names).
pub const FINAL_EPOCH: i32 = -1;

/// A session unused this long may be evicted to make room for a new one; a session created this
/// long ago may be evicted by a new one with more partitions (Kafka's
/// `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`).
pub const SESSION_EVICTION: Duration = Duration::from_millis(120_000);

const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode::FETCH_SESSION_ID_NOT_FOUND;
const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode::INVALID_FETCH_SESSION_EPOCH;
const FETCH_SESSION_TOPIC_ID_ERROR: ErrorCode = ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR;

/// One partition a fetch reads: where, from which offset, and at most how many bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchItem {
    /// The topic's name: from v13 resolved from `topic_id`, empty while that is unknown.
    pub topic: String,
    /// The topic's id (v13+), else [`NO_TOPIC_ID`].
    pub topic_id: TopicId,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    /// The leader epoch the client believes current (-1: unknown); checked against the
    /// partition's (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
    pub current_leader_epoch: i32,
}

impl FetchItem {
    /// Whether `self` and `other` name the same partition: by topic id when either has one
    /// (v13+), else by name.
    fn same_partition(&self, topic: &str, topic_id: &TopicId, partition: i32) -> bool {
        self.partition == partition
            && if self.topic_id != NO_TOPIC_ID || *topic_id != NO_TOPIC_ID {
                self.topic_id == *topic_id
            } else {
                self.topic == topic
            }
    }

    fn same(&self, other: &FetchItem) -> bool {
        self.same_partition(&other.topic, &other.topic_id, other.partition)
    }

    fn forgotten_by(&self, f: &ForgottenPartition) -> bool {
        self.same_partition(&f.topic, &f.topic_id, f.partition)
    }
}

/// What a partition's answer said, as far as a session remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub has_records: bool,
}

#[derive(Debug, Clone)]
struct CachedPartition {
    item: FetchItem,
    /// The high watermark last sent; -1 when never sent or after an error, so the partition is
    /// sent again once the error clears.
    high_watermark: i64,
    log_start_offset: i64,
}

impl CachedPartition {
    /// Kafka's rule for an incremental response: a partition is included when it has records,
    /// an error, or a high watermark or log start offset other than the one last sent.
    fn must_respond(&self, a: &Answered) -> bool {
        a.has_records
            || a.error.is_error()
            || a.high_watermark != self.high_watermark
            || a.log_start_offset != self.log_start_offset
    }

    fn remember(&mut self, a: &Answered) {
        self.high_watermark = if a.error.is_error() {
            -1
        } else {
            a.high_watermark
        };
        self.log_start_offset = a.log_start_offset;
    }
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    /// In fetch order; a partition that returned records moves to the end, so the response's
    /// byte budget goes round the partitions.
    partitions: Vec<CachedPartition>,
    /// Created by a v13+ fetch: its partitions are named by topic id.
    uses_topic_ids: bool,
    created: Instant,
    last_used: Instant,
}

/// How one Fetch request is answered, decided before anything is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Context {
    /// Answer every requested partition; session id 0.
    Sessionless(Vec<FetchItem>),
    /// Answer every requested partition, then try to create a session holding them.
    Full(Vec<FetchItem>),
    /// Read every partition of session `id` (as updated by the request); answer only those with
    /// something new. `epoch` is the session's epoch after this request.
    Incremental {
        id: i32,
        epoch: i32,
        items: Vec<FetchItem>,
    },
    /// The session is unknown or out of step: answer this error, no partitions, session id 0.
    Error(ErrorCode),
}

impl Context {
    pub fn items(&self) -> &[FetchItem] {
        match self {
            Context::Sessionless(items)
            | Context::Full(items)
            | Context::Incremental { items, .. } => items,
            Context::Error(_) => &[],
        }
    }

    /// The items, to name topics whose ids were unknown when the session took them in.
    pub fn items_mut(&mut self) -> &mut [FetchItem] {
        match self {
            Context::Sessionless(items)
            | Context::Full(items)
            | Context::Incremental { items, .. } => items,
            Context::Error(_) => &mut [],
        }
    }
}

/// One shard's fetch sessions, at most `slots` of them.
#[derive(Debug)]
pub struct SessionCache {
    slots: usize,
    sessions: HashMap<i32, Session>,
}

impl SessionCache {
    pub fn new(slots: usize) -> Self {
        Self {
            slots,
            sessions: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Decides how a fetch is answered, and applies an incremental request's changes
    /// (`requested` partitions added or updated, `forgotten` removed) to its session.
    /// `uses_topic_ids`: the request is v13+.
    pub fn begin(
        &mut self,
        now: Instant,
        session_id: i32,
        epoch: i32,
        uses_topic_ids: bool,
        requested: Vec<FetchItem>,
        forgotten: &[ForgottenPartition],
    ) -> Context {
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            // A full fetch closes the session it names.
            if session_id != INVALID_SESSION_ID {
                self.sessions.remove(&session_id);
            }
            return if epoch == FINAL_EPOCH {
                Context::Sessionless(requested)
            } else {
                Context::Full(requested)
            };
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return Context::Error(FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.epoch != epoch {
            return Context::Error(INVALID_FETCH_SESSION_EPOCH);
        }
        if session.uses_topic_ids != uses_topic_ids {
            return Context::Error(FETCH_SESSION_TOPIC_ID_ERROR);
        }
        for item in &requested {
            let cached = session.partitions.iter_mut().find(|c| c.item.same(item));
            match cached {
                Some(c) => c.item = item.clone(),
                None => session.partitions.push(CachedPartition {
                    item: item.clone(),
                    high_watermark: -1,
                    log_start_offset: -1,
                }),
            }
        }
        session
            .partitions
            .retain(|c| !forgotten.iter().any(|f| c.item.forgotten_by(f)));
        if session.partitions.is_empty() {
            self.sessions.remove(&session_id);
            return Context::Sessionless(requested);
        }
        session.last_used = now;
        session.epoch = next_epoch(session.epoch);
        Context::Incremental {
            id: session_id,
            epoch: session.epoch,
            items: session.partitions.iter().map(|c| c.item.clone()).collect(),
        }
    }

    /// After a full fetch was read: creates a session remembering what was answered, if there
    /// is a free slot or one can be evicted. Returns the session id, or 0.
    pub fn create(
        &mut self,
        now: Instant,
        uses_topic_ids: bool,
        new_id: impl FnMut() -> i32,
        answered: Vec<(FetchItem, Answered)>,
    ) -> i32 {
        if self.slots == 0 {
            return INVALID_SESSION_ID;
        }
        if self.sessions.len() >= self.slots && !self.evict_for(now, answered.len()) {
            return INVALID_SESSION_ID;
        }
        let id = self.unused_id(new_id);
        let partitions = answered
            .into_iter()
            .map(|(item, a)| {
                let mut c = CachedPartition {
                    item,
                    high_watermark: -1,
                    log_start_offset: -1,
                };
                c.remember(&a);
                c
            })
            .collect();
        self.sessions.insert(
            id,
            Session {
                epoch: next_epoch(INITIAL_EPOCH),
                partitions,
                uses_topic_ids,
                created: now,
                last_used: now,
            },
        );
        id
    }

    /// After an incremental fetch was read (`answered` in the order of its context's items):
    /// which of them the response includes, or INVALID_FETCH_SESSION_EPOCH if another fetch used
    /// the session in the meantime. Remembers what is sent and moves partitions that returned
    /// records to the end of the session.
    pub fn finish_incremental(
        &mut self,
        id: i32,
        epoch: i32,
        answered: &[(FetchItem, Answered)],
    ) -> Result<Vec<bool>, ErrorCode> {
        let Some(session) = self.sessions.get_mut(&id) else {
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.epoch != epoch {
            return Err(INVALID_FETCH_SESSION_EPOCH);
        }
        let mut include = Vec::with_capacity(answered.len());
        let mut moved = Vec::new();
        for (item, a) in answered {
            let at = session.partitions.iter().position(|c| c.item.same(item));
            let Some(at) = at else {
                include.push(false);
                continue;
            };
            let cached = &mut session.partitions[at];
            let respond = cached.must_respond(a);
            cached.remember(a);
            if a.has_records {
                moved.push(at);
            }
            include.push(respond);
        }
        // Moved in the order they were read, after the others.
        let mut taken: Vec<CachedPartition> = Vec::with_capacity(moved.len());
        for &at in moved.iter().rev() {
            taken.push(session.partitions.remove(at));
        }
        taken.reverse();
        session.partitions.extend(taken);
        Ok(include)
    }

    /// Makes room for a session of `size` partitions, as Kafka does: the least recently used
    /// session goes if it is stale; otherwise the smallest session older than
    /// [`SESSION_EVICTION`] goes if the new one is larger.
    fn evict_for(&mut self, now: Instant, size: usize) -> bool {
        let stale = self
            .sessions
            .iter()
            .min_by_key(|(id, s)| (s.last_used, **id))
            .filter(|(_, s)| now.saturating_duration_since(s.last_used) > SESSION_EVICTION)
            .map(|(id, _)| *id);
        let victim = stale.or_else(|| {
            self.sessions
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.created) > SESSION_EVICTION)
                .min_by_key(|(id, s)| (s.partitions.len(), **id))
                .filter(|(_, s)| s.partitions.len() < size)
                .map(|(id, _)| *id)
        });
        match victim {
            Some(id) => self.sessions.remove(&id).is_some(),
            None => false,
        }
    }

    fn unused_id(&self, mut new_id: impl FnMut() -> i32) -> i32 {
        loop {
            let id = new_id();
            if id > 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

/// The epoch after `epoch`: 1 follows `i32::MAX`.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(p: i32, offset: i64) -> FetchItem {
        FetchItem {
            current_leader_epoch: -1,
            topic: "t".into(),
            topic_id: NO_TOPIC_ID,
            partition: p,
            fetch_offset: offset,
            partition_max_bytes: 1 << 20,
        }
    }

    fn forgotten(topic: &str, topic_id: TopicId, partition: i32) -> ForgottenPartition {
        ForgottenPartition {
            topic: topic.into(),
            topic_id,
            partition,
        }
    }

    fn quiet(hw: i64) -> Answered {
        Answered {
            error: ErrorCode::NONE,
            high_watermark: hw,
            log_start_offset: 0,
            has_records: false,
        }
    }

    fn ids() -> impl FnMut() -> i32 {
        let mut n = 0;
        move || {
            n += 1;
            n
        }
    }

    fn created(cache: &mut SessionCache, now: Instant, parts: i32) -> i32 {
        let items: Vec<_> = (0..parts).map(|p| item(p, 0)).collect();
        assert_eq!(
            cache.begin(now, 0, INITIAL_EPOCH, false, items.clone(), &[]),
            Context::Full(items.clone())
        );
        let id = cache.create(
            now,
            false,
            ids(),
            items.into_iter().map(|i| (i, quiet(5))).collect(),
        );
        assert!(id > 0);
        id
    }

    #[test]
    fn incremental_fetches_answer_only_what_changed() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let id = created(&mut cache, now, 3);
        // Epoch 1: partition 1 moves its fetch position; all three are read.
        let ctx = cache.begin(now, id, 1, false, vec![item(1, 5)], &[]);
        let Context::Incremental { epoch, items, .. } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(epoch, 2);
        assert_eq!(items, vec![item(0, 0), item(1, 5), item(2, 0)]);
        let mut with_data = quiet(9);
        with_data.has_records = true;
        let answered = vec![
            (item(0, 0), quiet(5)),
            (item(1, 5), with_data),
            (item(2, 0), quiet(6)),
        ];
        let include = cache.finish_incremental(id, epoch, &answered).unwrap();
        assert_eq!(include, vec![false, true, true]);
        // Partition 1 returned records: it moves to the end. Nothing changed since: nothing is
        // sent.
        let ctx = cache.begin(now, id, 2, false, vec![], &[]);
        let Context::Incremental { items, epoch, .. } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(items, vec![item(0, 0), item(2, 0), item(1, 5)]);
        let answered: Vec<_> = vec![
            (item(0, 0), quiet(5)),
            (item(2, 0), quiet(6)),
            (item(1, 5), quiet(9)),
        ];
        let include = cache.finish_incremental(id, epoch, &answered).unwrap();
        assert_eq!(include, vec![false, false, false]);
    }

    #[test]
    fn errors_are_always_sent_and_sent_again_once_they_clear() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let id = created(&mut cache, now, 1);
        let Context::Incremental { epoch, .. } = cache.begin(now, id, 1, false, vec![], &[]) else {
            panic!()
        };
        let mut failed = quiet(5);
        failed.error = ErrorCode::KAFKA_STORAGE_ERROR;
        let include = cache
            .finish_incremental(id, epoch, &[(item(0, 0), failed)])
            .unwrap();
        assert_eq!(include, vec![true]);
        let Context::Incremental { epoch, .. } = cache.begin(now, id, epoch, false, vec![], &[])
        else {
            panic!()
        };
        let include = cache
            .finish_incremental(id, epoch, &[(item(0, 0), quiet(5))])
            .unwrap();
        assert_eq!(include, vec![true], "the high watermark is sent again");
    }

    #[test]
    fn forgotten_partitions_leave_and_an_emptied_session_closes() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let id = created(&mut cache, now, 2);
        let forget = [forgotten("t", NO_TOPIC_ID, 0)];
        let ctx = cache.begin(now, id, 1, false, vec![], &forget);
        let Context::Incremental { items, .. } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(items, vec![item(1, 0)]);
        let forget = [forgotten("t", NO_TOPIC_ID, 1)];
        assert_eq!(
            cache.begin(now, id, 2, false, vec![], &forget),
            Context::Sessionless(vec![])
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn unknown_ids_wrong_epochs_and_closing() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let id = created(&mut cache, now, 1);
        assert_eq!(
            cache.begin(now, id + 1, 1, false, vec![], &[]),
            Context::Error(FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(
            cache.begin(now, id, 7, false, vec![], &[]),
            Context::Error(INVALID_FETCH_SESSION_EPOCH)
        );
        // A wrong epoch leaves the session as it was.
        assert!(matches!(
            cache.begin(now, id, 1, false, vec![], &[]),
            Context::Incremental { epoch: 2, .. }
        ));
        // Epoch -1 closes it and is answered without a session.
        assert_eq!(
            cache.begin(now, id, FINAL_EPOCH, false, vec![item(0, 3)], &[]),
            Context::Sessionless(vec![item(0, 3)])
        );
        assert!(cache.is_empty());
        assert_eq!(
            cache.begin(now, id, 3, false, vec![], &[]),
            Context::Error(FETCH_SESSION_ID_NOT_FOUND)
        );
    }

    #[test]
    fn a_full_cache_refuses_until_a_session_is_stale() {
        let t0 = Instant::now();
        let mut cache = SessionCache::new(1);
        let first = created(&mut cache, t0, 4);
        let refused = cache.create(t0, false, ids(), vec![(item(0, 0), quiet(1))]);
        assert_eq!(refused, INVALID_SESSION_ID);
        assert_eq!(cache.len(), 1);
        let later = t0 + SESSION_EVICTION + Duration::from_secs(1);
        let second = cache.create(later, false, || 99, vec![(item(0, 0), quiet(1))]);
        assert_eq!(second, 99);
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.begin(later, first, 1, false, vec![], &[]),
            Context::Error(FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(SessionCache::new(0).create(t0, false, ids(), vec![]), 0);
    }

    #[test]
    fn a_larger_session_evicts_an_old_smaller_one_in_use() {
        let t0 = Instant::now();
        let mut cache = SessionCache::new(1);
        let small = created(&mut cache, t0, 1);
        let later = t0 + SESSION_EVICTION + Duration::from_secs(1);
        // Used recently, so not stale, but old and smaller than the newcomer.
        assert!(matches!(
            cache.begin(later, small, 1, false, vec![], &[]),
            Context::Incremental { .. }
        ));
        let same_size = cache.create(later, false, || 50, vec![(item(0, 0), quiet(1))]);
        assert_eq!(same_size, INVALID_SESSION_ID);
        let big: Vec<_> = (0..3).map(|p| (item(p, 0), quiet(1))).collect();
        assert_eq!(cache.create(later, false, || 51, big), 51);
    }

    #[test]
    fn a_concurrent_use_of_a_session_is_an_epoch_error() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let id = created(&mut cache, now, 1);
        let Context::Incremental { epoch: e2, .. } = cache.begin(now, id, 1, false, vec![], &[])
        else {
            panic!()
        };
        let Context::Incremental { epoch: e3, .. } = cache.begin(now, id, 2, false, vec![], &[])
        else {
            panic!()
        };
        assert_eq!(
            cache.finish_incremental(id, e2, &[(item(0, 0), quiet(5))]),
            Err(INVALID_FETCH_SESSION_EPOCH)
        );
        assert!(cache
            .finish_incremental(id, e3, &[(item(0, 0), quiet(5))])
            .is_ok());
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn from_v13_partitions_are_keyed_by_topic_id() {
        let now = Instant::now();
        let mut cache = SessionCache::new(10);
        let by_id = |id: u8, p: i32, offset: i64| FetchItem {
            topic_id: [id; 16],
            // The name resolved so far: an id unknown when first fetched has none.
            topic: if id == 1 { "t".into() } else { String::new() },
            ..item(p, offset)
        };
        let items = vec![by_id(1, 0, 0), by_id(2, 0, 0)];
        assert!(matches!(
            cache.begin(now, 0, INITIAL_EPOCH, true, items.clone(), &[]),
            Context::Full(_)
        ));
        let id = cache.create(
            now,
            true,
            ids(),
            items.into_iter().map(|i| (i, quiet(5))).collect(),
        );
        // The same id under a name now resolved updates the partition, not adds one; a topic
        // of the same name with another id is another partition.
        let mut renamed = by_id(2, 0, 7);
        renamed.topic = "u".into();
        let other = FetchItem {
            topic_id: [3; 16],
            ..by_id(1, 0, 0)
        };
        let ctx = cache.begin(now, id, 1, true, vec![renamed.clone(), other.clone()], &[]);
        let Context::Incremental { items, .. } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(items, vec![by_id(1, 0, 0), renamed, other.clone()]);
        // Forgotten by id: the name a v13+ request leaves empty is not compared.
        let forget = [forgotten("", [1; 16], 0), forgotten("", [2; 16], 0)];
        let ctx = cache.begin(now, id, 2, true, vec![], &forget);
        let Context::Incremental { items, .. } = ctx else {
            panic!("{ctx:?}")
        };
        assert_eq!(items, vec![other]);
        // A fetch before v13 cannot go on with a session keyed by topic id.
        assert_eq!(
            cache.begin(now, id, 3, false, vec![], &[]),
            Context::Error(FETCH_SESSION_TOPIC_ID_ERROR)
        );
        assert!(matches!(
            cache.begin(now, id, 3, true, vec![], &[]),
            Context::Incremental { .. }
        ));
    }
}
