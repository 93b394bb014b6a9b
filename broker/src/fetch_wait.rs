//! A fetch waiting for `min_bytes`, as Kafka's DelayedFetch: after its first read it counts the
//! bytes that become readable past each partition's fetch position — from the partition's
//! count of bytes made visible, carried by high watermark moves, never by reading — and reads
//! again only when they reach `min_bytes`, when something ends the wait (an error, the log start
//! passing the fetch offset, the shard draining) or at `max_wait_ms`.
//!
//! The shards owning the partitions notify; the waiting shard accumulates. Each owner runs one
//! watch per waiting fetch and sends the state of the partitions that changed over one bounded
//! channel; while a send waits, later changes are merged into the next one, so a fast producer
//! costs a waiting fetch at most one message in flight per owner.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use futures::channel::oneshot;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tributary_protocol::record_batch;
use tributary_storage::Partition;

use crate::routing::ShardId;
use crate::shard::{FetchResult, Shard, ShardRequest, ShardTask};

/// A partition a waiting fetch watches on its owner; `index` is its place in the fetch.
#[derive(Debug, Clone)]
pub struct WatchItem {
    pub index: usize,
    pub topic: String,
    pub partition: i32,
}

/// The state of a watched partition, sent by its owner when it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchUpdate {
    pub index: usize,
    pub visible_bytes: u64,
    pub high_watermark: i64,
    /// What a READ_COMMITTED fetch may read up to.
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Deleted, moved or offline: the fetch must answer now.
    pub gone: bool,
}

/// Messages an owner may have queued for one waiting fetch.
const WATCH_UPDATES_QUEUED_MAX: usize = 1;

/// One partition as the first read left it: what a wait measures new data against.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    pub fetch_offset: i64,
    pub partition_max_bytes: usize,
    /// Bytes the first read returned.
    pub read_bytes: usize,
    /// The read stopped before what it may read up to (the high watermark, or the last stable
    /// offset for READ_COMMITTED): the partition has more than it returned.
    pub more: bool,
    pub visible_bytes: u64,
    /// A READ_COMMITTED fetch: bytes above the last stable offset are not readable, so new
    /// bytes count only once the last stable offset has moved past `stable`.
    pub read_committed: bool,
    /// The last stable offset when the first read was made.
    pub stable: i64,
}

impl Baseline {
    pub fn new(
        fetch_offset: i64,
        partition_max_bytes: usize,
        read: &FetchResult,
        read_committed: bool,
    ) -> Self {
        let readable_end = if read_committed {
            read.last_stable_offset
        } else {
            read.high_watermark
        };
        Self {
            fetch_offset,
            partition_max_bytes,
            read_bytes: read.records.len(),
            more: records_end(&read.records).is_some_and(|end| end < readable_end),
            visible_bytes: read.visible_bytes,
            read_committed,
            stable: read.last_stable_offset,
        }
    }

    /// Bytes a read from the fetch offset would return now, by Kafka's count: the new bytes past
    /// the position, at most the partition's limit. For READ_COMMITTED nothing new is readable
    /// until the last stable offset moves (bytes of open transactions are visible but not
    /// readable); once it has, the new visible bytes are an upper bound of the readable ones.
    fn available(&self, visible_bytes: u64, last_stable_offset: i64) -> usize {
        if self.more {
            return self.partition_max_bytes;
        }
        if self.read_committed && last_stable_offset <= self.stable {
            return self.read_bytes.min(self.partition_max_bytes);
        }
        let new = visible_bytes.saturating_sub(self.visible_bytes) as usize;
        self.read_bytes
            .saturating_add(new)
            .min(self.partition_max_bytes)
    }

    /// Whether this change must end the wait whatever the byte count: the partition is gone,
    /// or the fetch offset is no longer between the log start and the high watermark.
    fn ends_wait(&self, u: &WatchUpdate) -> bool {
        u.gone || u.log_start_offset > self.fetch_offset || u.high_watermark < self.fetch_offset
    }
}

/// The offset after the last whole batch of `records`, or `None` when there is none.
fn records_end(records: &[u8]) -> Option<i64> {
    let mut position = 0;
    let mut end = None;
    while position < records.len() {
        let Ok(h) = record_batch::parse_header(&records[position..], position) else {
            break;
        };
        end = Some(h.last_offset() + 1);
        position += h.size();
    }
    end
}

/// Pure accounting of a wait: the baselines and the latest bytes available per partition.
pub struct Tally {
    baselines: Vec<Baseline>,
    available: Vec<usize>,
    min_bytes: usize,
}

impl Tally {
    pub fn new(baselines: Vec<Baseline>, min_bytes: usize) -> Self {
        let available = baselines
            .iter()
            .map(|b| b.available(b.visible_bytes, b.stable))
            .collect();
        Self {
            baselines,
            available,
            min_bytes,
        }
    }

    pub fn satisfied(&self) -> bool {
        self.available.iter().sum::<usize>() >= self.min_bytes
    }

    /// Takes in an owner's updates; true when the fetch should now be answered.
    pub fn apply(&mut self, updates: &[WatchUpdate]) -> bool {
        let mut ends = false;
        for u in updates {
            let Some(b) = self.baselines.get(u.index) else {
                continue;
            };
            ends |= b.ends_wait(u);
            self.available[u.index] = b.available(u.visible_bytes, u.last_stable_offset);
        }
        ends || self.satisfied()
    }
}

/// Waits until `tally` is satisfied, something ends the wait, the shard drains, or `deadline`.
/// `items` are the fetch's partitions (topic, partition) in fetch order; those not in the catalog
/// are not watched.
pub async fn wait(
    shard: &Rc<Shard>,
    items: &[(String, i32, bool)],
    mut tally: Tally,
    deadline: Instant,
) {
    let (tx, rx) = async_channel::bounded(WATCH_UPDATES_QUEUED_MAX);
    let mut by_shard: Vec<Vec<WatchItem>> = vec![Vec::new(); shard.shards];
    for (index, (topic, partition, known)) in items.iter().enumerate() {
        if *known {
            by_shard[shard.owner(topic, *partition).0].push(WatchItem {
                index,
                topic: topic.clone(),
                partition: *partition,
            });
        }
    }
    // Dropped when this returns, which ends every owner's watch.
    let mut cancels = Vec::new();
    for (owner, items) in by_shard.into_iter().enumerate() {
        if items.is_empty() {
            continue;
        }
        let (cancel_tx, cancel) = oneshot::channel::<()>();
        cancels.push(cancel_tx);
        let updates = tx.clone();
        let req = ShardRequest::Run(ShardTask::new(move |s| async move {
            watch_owned(&s, items, updates, cancel, deadline).await
        }));
        shard.dispatch(ShardId(owner), req).await;
    }
    drop(tx);
    let drained = shard.drain_event.listen();
    if shard.draining.get() {
        return;
    }
    let now = Instant::now();
    if now >= deadline {
        return;
    }
    let mut stop = Box::pin(futures_lite::future::or(
        drained,
        glommio::timer::sleep(deadline - now),
    ))
    .fuse();
    loop {
        futures::select! {
            batch = rx.recv().fuse() => match batch {
                Ok(batch) => {
                    if tally.apply(&batch) {
                        return;
                    }
                }
                // Every owner stopped watching (deadline or draining): nothing more will come.
                Err(_) => {
                    stop.await;
                    return;
                }
            },
            _ = stop => return,
        }
    }
}

/// The owner's side of a wait: sends the state of `items` at once and then whenever it changes,
/// until the waiting fetch drops `cancel`, `deadline` passes or this shard drains.
async fn watch_owned(
    shard: &Rc<Shard>,
    items: Vec<WatchItem>,
    updates: async_channel::Sender<Vec<WatchUpdate>>,
    cancel: oneshot::Receiver<()>,
    deadline: Instant,
) {
    let parts: Vec<_> = items
        .iter()
        .map(|w| shard.partition(&w.topic, w.partition))
        .collect();
    let state = |i: usize| partition_state(parts[i].as_deref(), items[i].index);
    // Listeners are registered before the state they guard is read.
    let mut fired = FuturesUnordered::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(p) = p {
            fired.push(fires(p.listen_advance(), i));
        }
    }
    let mut sent: Vec<Option<WatchUpdate>> = vec![None; parts.len()];
    let mut pending: BTreeMap<usize, WatchUpdate> =
        (0..parts.len()).map(|i| (i, state(i))).collect();
    let drained = shard.drain_event.listen();
    if shard.draining.get() {
        return;
    }
    let now = Instant::now();
    let timer = glommio::timer::sleep(deadline.saturating_duration_since(now));
    let mut stop = Box::pin(futures_lite::future::or(
        futures_lite::future::or(drained, timer),
        async {
            let _ = cancel.await;
        },
    ))
    .fuse();
    loop {
        if !pending.is_empty() {
            let batch: Vec<WatchUpdate> = std::mem::take(&mut pending)
                .into_iter()
                .map(|(i, u)| {
                    sent[i] = Some(u);
                    u
                })
                .collect();
            futures::select! {
                r = updates.send(batch).fuse() => if r.is_err() { return },
                _ = stop => return,
            }
            continue;
        }
        let first = futures::select! {
            i = fired.next() => i,
            _ = stop => return,
        };
        let Some(first) = first else {
            // Nothing to watch here (every partition vanished): wait to be stopped.
            stop.await;
            return;
        };
        // Take every change that is ready, not one per message.
        let mut ready = vec![first];
        for _ in 0..parts.len() {
            match fired.next().now_or_never() {
                Some(Some(i)) => ready.push(i),
                _ => break,
            }
        }
        for i in ready {
            if let Some(p) = &parts[i] {
                fired.push(fires(p.listen_advance(), i));
            }
            let now = state(i);
            if sent[i] != Some(now) {
                pending.insert(i, now);
            }
        }
    }
}

/// A watched partition's state now; a partition this shard no longer has is gone.
fn partition_state(part: Option<&Partition>, index: usize) -> WatchUpdate {
    match part {
        Some(p) => WatchUpdate {
            index,
            visible_bytes: p.visible_bytes(),
            high_watermark: p.high_watermark(),
            last_stable_offset: p.last_stable_offset(),
            log_start_offset: p.log_start_offset(),
            gone: p.is_offline(),
        },
        None => WatchUpdate {
            index,
            visible_bytes: 0,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            gone: true,
        },
    }
}

/// Resolves to `i` when `listener` fires.
async fn fires(listener: impl std::future::Future<Output = ()>, i: usize) -> usize {
    listener.await;
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tributary_protocol::ErrorCode;

    fn read(records: Bytes, hw: i64, visible: u64) -> FetchResult {
        FetchResult {
            error: ErrorCode::NONE,
            records,
            high_watermark: hw,
            log_start_offset: 0,
            last_stable_offset: hw,
            aborted_transactions: Vec::new(),
            visible_bytes: visible,
        }
    }

    fn update(index: usize, visible_bytes: u64, hw: i64) -> WatchUpdate {
        WatchUpdate {
            index,
            visible_bytes,
            high_watermark: hw,
            last_stable_offset: hw,
            log_start_offset: 0,
            gone: false,
        }
    }

    #[test]
    fn new_bytes_are_counted_from_the_visible_count_up_to_the_partition_limit() {
        let empty = read(Bytes::new(), 10, 500);
        let mut tally = Tally::new(
            vec![
                Baseline::new(10, 1000, &empty, false),
                Baseline::new(10, 100, &empty, false),
            ],
            600,
        );
        assert!(!tally.satisfied());
        assert!(!tally.apply(&[update(0, 800, 12)]), "300 of 600");
        // The second partition counts at most its 100-byte limit.
        assert!(!tally.apply(&[update(1, 5000, 40)]), "400 of 600");
        assert!(tally.apply(&[update(0, 1100, 15)]), "700 of 600");
    }

    #[test]
    fn a_read_that_stopped_short_counts_its_whole_limit() {
        let batch =
            tributary_protocol::record_batch::build_batch(&[(None, Some(b"v"))], 1, None).freeze();
        // One batch (offset 0) returned while the high watermark is 5: more is there.
        let short = read(batch.clone(), 5, 0);
        let b = Baseline::new(0, 4096, &short, false);
        assert!(b.more);
        assert_eq!(Tally::new(vec![b], 4096).available, vec![4096]);
        let at_end = read(batch.clone(), 1, 0);
        let b = Baseline::new(0, 4096, &at_end, false);
        assert!(!b.more);
        assert_eq!(b.available(0, 1), batch.len());
        // Two batches, offsets 0-1 and 2: the end is after the last one.
        let mut two = tributary_protocol::record_batch::build_batch(
            &[(None, Some(b"a")), (None, Some(b"b"))],
            1,
            None,
        );
        let mut second =
            tributary_protocol::record_batch::build_batch(&[(None, Some(b"c"))], 1, None);
        tributary_protocol::record_batch::assign_offset(&mut second, 2, 0);
        two.extend_from_slice(&second);
        let two = two.freeze();
        assert_eq!(records_end(&two), Some(3));
        assert!(!Baseline::new(0, 4096, &read(two.clone(), 3, 0), false).more);
        assert!(Baseline::new(0, 4096, &read(two, 4, 0), false).more);
        assert_eq!(records_end(&[]), None);
    }

    #[test]
    fn deletion_and_the_log_start_passing_the_offset_end_the_wait() {
        let empty = read(Bytes::new(), 10, 0);
        let mut tally = Tally::new(vec![Baseline::new(10, 1000, &empty, false)], 1 << 20);
        assert!(!tally.apply(&[update(0, 0, 10)]));
        let mut moved = update(0, 0, 10);
        moved.log_start_offset = 11;
        assert!(tally.apply(&[moved]));
        let mut gone = update(0, 0, 10);
        gone.gone = true;
        assert!(tally.apply(&[gone]));
        assert!(
            tally.apply(&[update(0, 0, 9)]),
            "high watermark below the offset"
        );
        // An update for an index the fetch does not have is ignored.
        assert!(!tally.apply(&[update(7, 0, 9)]));
    }

    #[test]
    fn read_committed_counts_new_bytes_only_once_the_last_stable_offset_moves() {
        // Offsets 10.. of an open transaction are visible (high watermark 15) but not stable
        // (last stable offset 10): the first read returned nothing.
        let mut first = read(Bytes::new(), 15, 500);
        first.last_stable_offset = 10;
        let b = Baseline::new(10, 1000, &first, true);
        assert!(!b.more);
        let mut tally = Tally::new(vec![b], 1);
        assert!(!tally.satisfied());
        // More of the transaction is appended: visible, still not readable.
        let mut open = update(0, 900, 20);
        open.last_stable_offset = 10;
        assert!(!tally.apply(&[open]), "bytes above the LSO do not count");
        // The transaction commits: the LSO moves, and the bytes count.
        let committed = update(0, 950, 21);
        assert!(tally.apply(&[committed]));
        // The same moves for a READ_UNCOMMITTED fetch counted at once.
        let mut tally = Tally::new(vec![Baseline::new(10, 1000, &first, false)], 1);
        assert!(tally.apply(&[open]));
        // A READ_COMMITTED read that stopped at the LSO, below the high watermark, has not
        // stopped short: what lies between is not readable yet.
        let batch =
            tributary_protocol::record_batch::build_batch(&[(None, Some(b"v"))], 1, None).freeze();
        let mut upto = read(batch, 5, 0);
        upto.last_stable_offset = 1;
        assert!(!Baseline::new(0, 4096, &upto, true).more);
        assert!(Baseline::new(0, 4096, &upto, false).more);
    }
}
