//! Log compaction decisions (`cleanup.policy=compact`), as Kafka's log cleaner makes them: a map
//! from each key to the offset of its latest record over the cleanable part of the log, then a
//! rewrite that keeps a keyed record only if it is that latest one, and drops a latest record
//! that is a tombstone once it is older than `delete.retention.ms`. Offsets never change.
//! Compressed batches are decompressed to read their keys; one whose records are all dropped
//! goes, one that keeps only some is recompressed with those. Transactions: the batches of
//! aborted transactions go whole and their keys never enter the map; control batches never
//! enter it either. An end-transaction marker goes once no data batch of its transaction is
//! left and `delete.retention.ms` has passed since a pass first found it so (KIP-534's delete
//! horizon, stamped in the marker batch), unless it is its producer's last record
//! ([`MarkerAction`]).
//!
//! Producer state: the data batch holding the last offset of a producer the partition still
//! remembers stays, as an empty batch (no records, the same offsets and producer fields) when
//! none of its records does — aborted or superseded — as Kafka's cleaner keeps it
//! (`isBatchLastRecordOfProducer`, written by `writeEmptyHeader`). A replica copying the cleaned
//! log, or an open rebuilding the producer state from it, then learns the producer's epoch and
//! last sequence, and its next batch is neither refused as out of order nor a retry of its last
//! one accepted twice ([`ActiveProducers`], [`keep_producer_state`]). Once the producer is
//! forgotten the empty batch goes at the next pass.
//! Pure: `partition` reads and writes the segments.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use tributary_protocol::record_batch::{self, BatchHeader, RecordView};

use crate::codec;
use crate::txn::AbortedTxn;

/// Bytes one map entry costs, for sizing the map from `log.cleaner.dedupe.buffer.size`.
pub const KEY_MAP_ENTRY_BYTES: u64 = 48;

/// The key map holds `log.cleaner.dedupe.buffer.size` worth of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFull;

/// Key → offset of its latest record. Keys are held as 128-bit hashes (two independent 64-bit
/// SipHashes), as Kafka holds MD5 digests: a collision would need ~2^64 keys.
pub struct KeyMap {
    latest: HashMap<u128, i64>,
    max_entries: usize,
}

fn digest(key: &[u8]) -> u128 {
    let mut a = DefaultHasher::new();
    key.hash(&mut a);
    let mut b = DefaultHasher::new();
    0x7472_6962_7574_6172u64.hash(&mut b);
    key.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

impl KeyMap {
    pub fn with_budget(bytes: u64) -> Self {
        Self {
            latest: HashMap::new(),
            max_entries: (bytes / KEY_MAP_ENTRY_BYTES).max(1) as usize,
        }
    }

    /// Records that `key` appears at `offset` (offsets arrive in increasing order) and returns
    /// the offset it supersedes, if any. `Err(MapFull)` when the key is new and the map is full:
    /// the caller stops widening the cleanable range.
    pub fn insert(&mut self, key: &[u8], offset: i64) -> Result<Option<i64>, MapFull> {
        let d = digest(key);
        if self.latest.len() >= self.max_entries && !self.latest.contains_key(&d) {
            return Err(MapFull);
        }
        Ok(self.latest.insert(d, offset))
    }

    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&digest(key)).copied()
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// The records of a batch, for the cleaner: decoded where they are, or — for a compressed
/// batch — from its records section decompressed into `scratch` (at most `max` bytes). `Err`
/// when they cannot be read (an unknown codec, damage, more than `max` bytes): such a batch is
/// kept whole.
pub fn batch_records<'a>(
    batch: &'a [u8],
    scratch: &'a mut Vec<u8>,
    max: usize,
) -> Result<Vec<RecordView<'a>>, String> {
    let header = record_batch::parse_header(batch, 0).map_err(|e| e.to_string())?;
    records_of(&header, batch, scratch, max)
}

fn records_of<'a>(
    header: &BatchHeader,
    batch: &'a [u8],
    scratch: &'a mut Vec<u8>,
    max: usize,
) -> Result<Vec<RecordView<'a>>, String> {
    if header.compression() == 0 {
        return record_batch::records(batch).map_err(|e| e.to_string());
    }
    let body = &batch[record_batch::RECORD_BATCH_HEADER_BYTES..header.size()];
    *scratch = codec::decompress(header.compression(), body, max).map_err(|e| e.to_string())?;
    let views = record_batch::parse_records(scratch).map_err(|e| e.to_string())?;
    if views.len() != header.records_count.max(0) as usize {
        return Err(format!(
            "{} records decompressed, the batch says {}",
            views.len(),
            header.records_count
        ));
    }
    Ok(views)
}

/// What the cleaner writes in place of a batch once `keep` has judged its records.
#[derive(Debug, PartialEq, Eq)]
pub enum Retained {
    /// Every record stays: the batch is kept as it is.
    All,
    /// No record stays: the batch goes.
    None,
    /// A copy holding only the records that stay — recompressed with the batch's codec if it
    /// was compressed; base offset, last offset delta, timestamps and producer fields unchanged
    /// (as Kafka's cleaner rewrites a batch), length, record count and CRC new.
    Some(Vec<u8>),
    /// No record stays, but the batch holds its producer's last data offset: it stays with no
    /// records ([`record_batch::emptied`]), for the producer's state ([`keep_producer_state`]).
    Empty(Vec<u8>),
}

/// What replaces a data batch once its records were judged — `retained` as [`retain`] said, or
/// [`Retained::None`] for a batch of an aborted transaction: a batch none of whose records stays
/// is kept empty when it holds its producer's last data offset (`last_of_producer`, see
/// [`ActiveProducers::holds_last_data`]), as Kafka's cleaner keeps it (`RETAIN_EMPTY`). A batch
/// already empty is kept as it is; one whose header cannot be read (not expected: the pass
/// parsed it) is kept whole. Whatever else `retained` says stands.
pub fn keep_producer_state(batch: &[u8], retained: Retained, last_of_producer: bool) -> Retained {
    if retained != Retained::None || !last_of_producer {
        return retained;
    }
    match record_batch::parse_header(batch, 0) {
        Ok(header) if header.records_count == 0 => Retained::All,
        Ok(_) => record_batch::emptied(batch).map_or(Retained::All, Retained::Empty),
        Err(_) => Retained::All,
    }
}

/// Judges the records of `batch` (compressed ones decompressed, at most `max` bytes) and says
/// what replaces it, with how many records it drops. `Err` when its records cannot be read:
/// the batch is then kept whole.
pub fn retain(
    batch: &[u8],
    max: usize,
    mut keep: impl FnMut(&RecordView<'_>) -> bool,
) -> Result<(Retained, u64), String> {
    let header = record_batch::parse_header(batch, 0).map_err(|e| e.to_string())?;
    if header.records_count == 0 {
        // An empty batch (kept for its producer by an earlier pass): nothing to judge.
        return Ok((Retained::None, 0));
    }
    if header.compression() != 0 {
        return retain_compressed(&header, batch, max, keep);
    }
    let mut dropped = 0u64;
    let rewritten = record_batch::retain_records(batch, |r| {
        let k = keep(r);
        dropped += u64::from(!k);
        k
    })
    .map_err(|e| e.to_string())?;
    Ok(match rewritten {
        None => (Retained::None, dropped),
        Some(_) if dropped == 0 => (Retained::All, 0),
        Some(b) => (Retained::Some(b), dropped),
    })
}

/// [`retain`] for a compressed batch: a batch that keeps only some records is recompressed
/// with those.
fn retain_compressed(
    header: &BatchHeader,
    batch: &[u8],
    max: usize,
    mut keep: impl FnMut(&RecordView<'_>) -> bool,
) -> Result<(Retained, u64), String> {
    let mut scratch = Vec::new();
    let views = records_of(header, batch, &mut scratch, max)?;
    let kept: Vec<&RecordView<'_>> = views.iter().filter(|r| keep(r)).collect();
    let dropped = (views.len() - kept.len()) as u64;
    if dropped == 0 {
        return Ok((Retained::All, 0));
    }
    if kept.is_empty() {
        return Ok((Retained::None, dropped));
    }
    let raw: Vec<u8> = kept.iter().flat_map(|r| r.raw.iter().copied()).collect();
    let body = &batch[record_batch::RECORD_BATCH_HEADER_BYTES..header.size()];
    let packed = codec::compress(header.compression(), &raw, body).map_err(|e| e.to_string())?;
    let mut out = batch[..record_batch::RECORD_BATCH_HEADER_BYTES].to_vec();
    out.extend_from_slice(&packed);
    record_batch::reseal(&mut out, kept.len() as i32);
    Ok((Retained::Some(out), dropped))
}

/// The aborted transactions of a partition, by producer, for the cleaner: a transactional
/// data batch inside one of its producer's aborted ranges `[first_offset, marker]` goes whole,
/// as Kafka's cleaner discards aborted transactions (their records must never reach a
/// READ_UNCOMMITTED reader of a compacted log either, and their keys must not supersede
/// committed ones). Markers are judged apart ([`marker_action`]).
#[derive(Debug, Default)]
pub struct AbortedRanges {
    by_producer: HashMap<i64, Vec<(i64, i64)>>,
}

impl AbortedRanges {
    /// From the aborted-index entries of every segment, in log order.
    pub fn new<'a>(entries: impl IntoIterator<Item = &'a AbortedTxn>) -> Self {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for t in entries {
            by_producer
                .entry(t.producer_id)
                .or_default()
                .push((t.first_offset, t.last_offset));
        }
        for ranges in by_producer.values_mut() {
            ranges.sort_unstable();
        }
        Self { by_producer }
    }

    /// Whether the batch with `header` belongs to an aborted transaction: transactional, not a
    /// control batch, and inside one of its producer's aborted ranges.
    pub fn contains(&self, header: &BatchHeader) -> bool {
        if !header.is_transactional() || header.is_control() || !header.has_producer_id() {
            return false;
        }
        let Some(ranges) = self.by_producer.get(&header.producer_id) else {
            return false;
        };
        let i = ranges.partition_point(|&(first, _)| first <= header.base_offset);
        i.checked_sub(1)
            .is_some_and(|i| header.base_offset <= ranges[i].1)
    }
}

/// What a cleaning pass does with an end-transaction marker (Kafka's rule, KIP-98 with the
/// KIP-534 delete horizon): a marker stays while any data batch of its transaction is left in
/// the log — a reader needs it to learn how the transaction ended — and while it is its
/// producer's last record ([`ActiveProducers`]). Once neither holds, the pass that finds it so
/// stamps it with a delete horizon `delete.retention.ms` ahead, and the first pass at or after
/// that horizon removes it, so a consumer that read the transaction's data before it was
/// cleaned away has that long to read the marker too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerAction {
    Keep,
    /// Rewrite the marker with this delete horizon.
    SetHorizon(i64),
    Remove,
}

/// Decides a marker's fate. `empty`: no data batch of its transaction is left in the log (see
/// [`TxnTracker`]); `protected`: it is its producer's last record; `delete_horizon`: the one
/// it carries, if a previous pass stamped it.
pub fn marker_action(
    empty: bool,
    protected: bool,
    delete_horizon: Option<i64>,
    now_ms: i64,
    delete_retention_ms: i64,
) -> MarkerAction {
    if !empty || protected {
        return MarkerAction::Keep;
    }
    match delete_horizon {
        Some(horizon) if now_ms >= horizon => MarkerAction::Remove,
        Some(_) => MarkerAction::Keep,
        None => MarkerAction::SetHorizon(now_ms.saturating_add(delete_retention_ms.max(0))),
    }
}

/// Which transactions have data left, as a pass reads the log from its start in order (Kafka's
/// `CleanedTransactionMetadata`): a producer's transaction has data while a transactional data
/// batch of it — committed or aborted, whatever the pass then does with it — was read since
/// its previous marker. A marker read with none is one of an empty transaction: every batch of
/// it was dropped by earlier passes (aborted, or all its records superseded).
#[derive(Debug, Default)]
pub struct TxnTracker {
    with_data: HashSet<i64>,
}

impl TxnTracker {
    /// A data batch read.
    pub fn on_data(&mut self, header: &BatchHeader) {
        if header.is_transactional() && !header.is_control() && header.has_producer_id() {
            self.with_data.insert(header.producer_id);
        }
    }

    /// An end-transaction marker of `producer_id` read: whether its transaction is empty.
    pub fn on_marker(&mut self, producer_id: i64) -> bool {
        !self.with_data.remove(&producer_id)
    }
}

/// The producers the partition still remembers (its producer state table when the pass
/// starts), with what of them the log must keep so that a replica or a restart rebuilding their
/// state from the log keeps their epoch (fencing), last sequence (idempotence) and coordinator
/// epoch. As Kafka's cleaner, it keeps the data batch holding each such producer's last data
/// offset, emptied of its records if none stays ([`ActiveProducers::holds_last_data`]), and, for
/// a producer with no data batch remembered, its markers of its current epoch. It also keeps
/// every marker after a remembered producer's last data batch, where Kafka keeps only those the
/// kept batch's transaction needs: such a marker carries the producer's coordinator epoch, and
/// there is at most one per transaction. A producer forgotten (expired or evicted) protects
/// nothing.
#[derive(Debug, Default)]
pub struct ActiveProducers {
    last: HashMap<i64, (i16, Option<i64>)>,
}

impl ActiveProducers {
    /// From (producer id, epoch, last data offset) of each remembered producer.
    pub fn new(producers: impl IntoIterator<Item = (i64, i16, Option<i64>)>) -> Self {
        Self {
            last: producers
                .into_iter()
                .map(|(id, epoch, last)| (id, (epoch, last)))
                .collect(),
        }
    }

    /// Whether the marker batch with `header` must stay for its producer's state.
    pub fn protects(&self, header: &BatchHeader) -> bool {
        match self.last.get(&header.producer_id) {
            None => false,
            Some(&(_, Some(last_data))) => header.base_offset > last_data,
            Some(&(epoch, None)) => header.producer_epoch == epoch,
        }
    }

    /// Whether the data batch with `header` holds its producer's last data offset (Kafka's
    /// `isBatchLastRecordOfProducer`): its base sequence and last offset delta give the
    /// producer's last sequence, its header the producer's epoch, so it stays — empty if none of
    /// its records does ([`keep_producer_state`]).
    pub fn holds_last_data(&self, header: &BatchHeader) -> bool {
        if header.is_control() || !header.has_producer_id() {
            return false;
        }
        matches!(
            self.last.get(&header.producer_id),
            Some(&(_, Some(last_data))) if last_data == header.last_offset()
        )
    }
}

/// Whether the cleaner keeps a record at `offset`. Records without a key are kept (Kafka refuses
/// them on compacted topics; they are never removed here). A tombstone (null value) that is its
/// key's latest record goes once its batch's timestamp is before `tombstone_horizon`.
pub fn keep(
    map: &KeyMap,
    key: Option<&[u8]>,
    is_tombstone: bool,
    offset: i64,
    batch_max_timestamp: i64,
    tombstone_horizon: i64,
) -> bool {
    let Some(key) = key else {
        return true;
    };
    match map.latest(key) {
        Some(latest) if offset < latest => false,
        Some(_) => !(is_tombstone && batch_max_timestamp < tombstone_horizon),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_record_per_key_wins_and_old_tombstones_go() {
        let mut m = KeyMap::with_budget(1 << 20);
        let superseded: Vec<Option<i64>> = [("a", 0), ("b", 1), ("a", 2), ("c", 3), ("b", 4)]
            .iter()
            .map(|(k, o)| m.insert(k.as_bytes(), *o).unwrap())
            .collect();
        assert_eq!(superseded, [None, None, Some(0), None, Some(1)]);
        assert_eq!(m.len(), 3);
        assert!(!keep(&m, Some(b"a"), false, 0, 0, 0));
        assert!(keep(&m, Some(b"a"), false, 2, 0, 0));
        assert!(keep(&m, None, false, 7, 0, 0));
        assert!(keep(&m, Some(b"zzz"), false, 9, 0, 0), "unknown keys stay");
        // c's latest is a tombstone: kept until its timestamp passes the horizon.
        assert!(keep(&m, Some(b"c"), true, 3, 1000, 1000));
        assert!(!keep(&m, Some(b"c"), true, 3, 999, 1000));
    }

    fn batch_of(values: &[&str]) -> Vec<u8> {
        let recs: Vec<_> = values
            .iter()
            .map(|v| (Some(v.as_bytes()), Some(v.as_bytes())))
            .collect();
        record_batch::build_batch(&recs, 1_000, None).to_vec()
    }

    /// `batch` with its attributes saying `codec`, resealed (its records section unchanged).
    fn claiming_codec(batch: &[u8], codec: i16) -> Vec<u8> {
        let mut out = batch.to_vec();
        let attributes = i16::from_be_bytes([out[21], out[22]]) | codec;
        out[21..23].copy_from_slice(&attributes.to_be_bytes());
        let count = record_batch::parse_header(&out, 0).unwrap().records_count;
        record_batch::reseal(&mut out, count);
        out
    }

    #[test]
    fn retain_says_what_replaces_a_batch_and_how_many_records_go() {
        let b = batch_of(&["a", "b", "c"]);
        let (all, dropped) = retain(&b, 1 << 20, |_| true).unwrap();
        assert_eq!((all, dropped), (Retained::All, 0));
        let (none, dropped) = retain(&b, 1 << 20, |_| false).unwrap();
        assert_eq!((none, dropped), (Retained::None, 3));
        let (some, dropped) = retain(&b, 1 << 20, |r| r.key != Some(b"b")).unwrap();
        assert_eq!(dropped, 1);
        let Retained::Some(rewritten) = some else {
            panic!("a rewritten batch: {some:?}");
        };
        let deltas: Vec<i32> = record_batch::records(&rewritten)
            .unwrap()
            .iter()
            .map(|r| r.offset_delta)
            .collect();
        assert_eq!(deltas, [0, 2], "kept records keep their offsets");
        record_batch::validate(&rewritten, 0).expect("a valid batch");
    }

    #[test]
    fn retain_refuses_batches_whose_records_cannot_be_read() {
        let b = batch_of(&["a", "b"]);
        assert!(
            retain(&b[..b.len() - 1], 1 << 20, |_| true).is_err(),
            "truncated"
        );
        assert!(
            retain(&claiming_codec(&b, 5), 1 << 20, |_| true).is_err(),
            "unknown codec"
        );
        // Plain records claimed to be gzip: not gzip data.
        assert!(retain(&claiming_codec(&b, 1), 1 << 20, |_| true).is_err());
        assert!(batch_records(&claiming_codec(&b, 1), &mut Vec::new(), 1 << 20).is_err());
    }

    #[test]
    fn aborted_ranges_name_only_the_aborted_producers_transactional_batches() {
        let t = |pid, first, last| AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        };
        let ranges = AbortedRanges::new(&[t(1, 10, 20), t(1, 30, 31), t(2, 5, 6)]);
        let header = |pid, base, attributes| {
            let mut b = record_batch::build_batch(&[(None, Some(b"v"))], 0, Some((pid, 0, 0)));
            b[21..23].copy_from_slice(&i16::to_be_bytes(attributes));
            let mut h = record_batch::parse_header(&b, 0).unwrap();
            h.base_offset = base;
            h
        };
        assert!(ranges.contains(&header(1, 10, 0x10)));
        assert!(ranges.contains(&header(1, 15, 0x10)));
        assert!(ranges.contains(&header(1, 30, 0x10)));
        assert!(!ranges.contains(&header(1, 25, 0x10)), "between two aborts");
        assert!(!ranges.contains(&header(1, 9, 0x10)));
        assert!(!ranges.contains(&header(1, 15, 0)), "not transactional");
        assert!(!ranges.contains(&header(1, 20, 0x30)), "the marker stays");
        assert!(!ranges.contains(&header(3, 15, 0x10)), "another producer");
    }

    #[test]
    fn a_marker_goes_only_when_its_transaction_is_empty_and_its_horizon_has_passed() {
        use MarkerAction::*;
        // Data of its transaction left, or its producer's last record: kept, never stamped.
        assert_eq!(marker_action(false, false, None, 5_000, 1_000), Keep);
        assert_eq!(marker_action(false, false, Some(10), 5_000, 1_000), Keep);
        assert_eq!(marker_action(true, true, None, 5_000, 1_000), Keep);
        assert_eq!(marker_action(true, true, Some(10), 5_000, 1_000), Keep);
        // Empty: the first pass stamps it delete.retention.ms ahead, a pass at or after the
        // horizon removes it.
        assert_eq!(
            marker_action(true, false, None, 5_000, 1_000),
            SetHorizon(6_000)
        );
        assert_eq!(marker_action(true, false, Some(6_000), 5_999, 1_000), Keep);
        assert_eq!(
            marker_action(true, false, Some(6_000), 6_000, 1_000),
            Remove
        );
        assert_eq!(
            marker_action(true, false, None, i64::MAX - 1, i64::MAX),
            SetHorizon(i64::MAX)
        );
    }

    /// A header of producer `pid` at `base`, with `attributes` and `epoch`.
    fn header_of(pid: i64, epoch: i16, base: i64, attributes: i16) -> BatchHeader {
        let mut b = record_batch::build_batch(&[(None, Some(b"v"))], 0, Some((pid, epoch, 0)));
        b[21..23].copy_from_slice(&i16::to_be_bytes(attributes));
        let mut h = record_batch::parse_header(&b, 0).unwrap();
        h.base_offset = base;
        h
    }

    #[test]
    fn a_transaction_is_empty_when_no_data_batch_of_it_was_read_since_the_last_marker() {
        let mut t = TxnTracker::default();
        t.on_data(&header_of(1, 0, 0, 0x10));
        t.on_data(&header_of(2, 0, 1, 0)); // not transactional: no transaction
        assert!(!t.on_marker(1), "producer 1's transaction has data");
        assert!(t.on_marker(1), "a second marker ends an empty one");
        assert!(t.on_marker(2));
        // Aborted data counts as data until a pass drops it: its marker stays that pass.
        t.on_data(&header_of(3, 0, 5, 0x10));
        t.on_data(&header_of(1, 0, 6, 0x10));
        assert!(!t.on_marker(3));
        assert!(!t.on_marker(1));
        assert!(t.on_marker(3));
    }

    #[test]
    fn a_remembered_producers_last_marker_is_protected() {
        let active = ActiveProducers::new([(1, 0, Some(10)), (2, 3, None)]);
        let marker = |pid, epoch, base| header_of(pid, epoch, base, 0x30);
        // Producer 1's last data batch ends at 10: the marker after it stays, earlier ones not.
        assert!(active.protects(&marker(1, 0, 11)));
        assert!(!active.protects(&marker(1, 0, 9)));
        // Producer 2 has no data batch remembered: its markers of its current epoch stay.
        assert!(active.protects(&marker(2, 3, 4)));
        assert!(!active.protects(&marker(2, 2, 4)));
        // A producer not remembered protects nothing.
        assert!(!active.protects(&marker(7, 0, 100)));
    }

    #[test]
    fn a_remembered_producers_last_data_batch_is_held() {
        let active = ActiveProducers::new([(1, 0, Some(10)), (2, 3, None)]);
        // A data batch of producer 1 spanning `base..=last`.
        let data = |pid, base: i64, last: i64, attributes| {
            let mut h = header_of(pid, 0, base, attributes);
            h.last_offset_delta = (last - base) as i32;
            h
        };
        assert!(active.holds_last_data(&data(1, 8, 10, 0)));
        assert!(
            active.holds_last_data(&data(1, 10, 10, 0x10)),
            "transactional"
        );
        assert!(
            !active.holds_last_data(&data(1, 8, 9, 0)),
            "an earlier batch"
        );
        assert!(!active.holds_last_data(&data(1, 11, 12, 0)), "a later one");
        assert!(!active.holds_last_data(&data(1, 10, 10, 0x30)), "a marker");
        // No data batch remembered, or not remembered at all: nothing held.
        assert!(!active.holds_last_data(&data(2, 8, 10, 0)));
        assert!(!active.holds_last_data(&data(7, 8, 10, 0)));
        let mut no_producer = data(1, 8, 10, 0);
        no_producer.producer_id = record_batch::NO_PRODUCER_ID;
        assert!(!active.holds_last_data(&no_producer));
    }

    #[test]
    fn a_producers_last_batch_is_kept_empty_when_none_of_its_records_stays() {
        let mut b = record_batch::build_batch(
            &[(Some(b"a"), Some(b"1")), (Some(b"b"), Some(b"2"))],
            1_000,
            Some((4, 1, 17)),
        );
        record_batch::assign_offset(&mut b, 30, 2);
        let b = b.to_vec();
        let (none, dropped) = retain(&b, 1 << 20, |_| false).unwrap();
        assert_eq!(dropped, 2);
        // Not its producer's last: it goes.
        assert_eq!(
            keep_producer_state(&b, Retained::None, false),
            Retained::None
        );
        // Its producer's last: an empty batch at the same offsets with its producer fields.
        let Retained::Empty(e) = keep_producer_state(&b, none, true) else {
            panic!("an empty batch");
        };
        let h = record_batch::validate(&e, 0).expect("a valid batch");
        assert_eq!(
            (h.records_count, h.base_offset, h.last_offset()),
            (0, 30, 31)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (4, 1, 17)
        );
        assert_eq!(h.last_sequence(), 18);
        // Records that stay keep the batch as retain said.
        assert_eq!(keep_producer_state(&b, Retained::All, true), Retained::All);
        let (some, _) = retain(&b, 1 << 20, |r| r.key == Some(b"b")).unwrap();
        assert!(matches!(
            keep_producer_state(&b, some, true),
            Retained::Some(_)
        ));
        // An empty batch has nothing to judge: it stays as it is while it is its producer's
        // last, and goes once it is not.
        assert_eq!(retain(&e, 1 << 20, |_| true).unwrap(), (Retained::None, 0));
        assert_eq!(keep_producer_state(&e, Retained::None, true), Retained::All);
        assert_eq!(
            keep_producer_state(&e, Retained::None, false),
            Retained::None
        );
    }

    #[test]
    fn a_full_map_refuses_new_keys_but_updates_known_ones() {
        let mut m = KeyMap::with_budget(2 * KEY_MAP_ENTRY_BYTES);
        assert_eq!(m.insert(b"a", 0), Ok(None));
        assert_eq!(m.insert(b"b", 1), Ok(None));
        assert_eq!(m.insert(b"c", 2), Err(MapFull));
        assert_eq!(m.insert(b"a", 3), Ok(Some(0)));
        assert_eq!(m.latest(b"a"), Some(3));
        assert_eq!(m.latest(b"c"), None);
    }
}
