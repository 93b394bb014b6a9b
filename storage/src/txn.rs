//! The partition log's side of Kafka transactions (KIP-98), pure: what a control batch says
//! (its end-transaction marker), building a marker batch for the coordinator, and the aborted
//! transaction index — Kafka's `.txnindex`: for each ABORT marker, the producer, the first offset
//! of the transaction it ended, the marker's offset and the last stable offset right after it.
//! A segment keeps the entries of the markers it holds (`Segment::aborted`), persisted in its
//! index file; this module never touches a file.
//!
//! ```text
//! control record key    version i16 = 0 | type i16 (0 = ABORT, 1 = COMMIT)
//! control record value  version i16 = 0 | coordinator_epoch i32
//! ```

use tributary_protocol::record_batch::{self, BatchHeader};

use crate::index::ByteReader;

/// The `attributes` bit of a transactional batch.
pub const ATTRIBUTE_TRANSACTIONAL: i16 = 0x10;
/// The `attributes` bit of a control batch.
pub const ATTRIBUTE_CONTROL: i16 = 0x20;
/// Where `attributes` lies in a batch.
const ATTRIBUTES_POSITION: usize = 21;

const CONTROL_TYPE_ABORT: i16 = 0;
const CONTROL_TYPE_COMMIT: i16 = 1;

/// One aborted transaction, as the index records it when its ABORT marker is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// The offset of the transaction's first batch (the marker's own offset when the producer
    /// had no transaction open, as Kafka records it).
    pub first_offset: i64,
    /// The ABORT marker's offset.
    pub last_offset: i64,
    /// The last stable offset once this transaction ended: the first offset of the oldest
    /// transaction still open, else `last_offset + 1`. No transaction aborted later can start
    /// below it, which lets a lookup stop early.
    pub last_stable_offset: i64,
}

/// Bytes one entry takes in memory and in the index file.
pub const ABORTED_TXN_BYTES: usize = 32;

/// What a batch means to the producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Records; `transactional` when the batch belongs to a transaction.
    Data { transactional: bool },
    /// An end-transaction marker.
    Marker(TxnMarker),
    /// A control batch of another type (or one whose record cannot be read): it changes no
    /// producer state, as Kafka ignores control types it does not know.
    OtherControl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// Classifies a whole, valid batch (`batch` is its bytes, `header` its parsed header). Only a
/// control batch's single record is read.
pub fn batch_kind(header: &BatchHeader, batch: &[u8]) -> BatchKind {
    if !header.is_control() {
        return BatchKind::Data {
            transactional: header.is_transactional(),
        };
    }
    match marker_of(batch) {
        Some(m) => BatchKind::Marker(m),
        None => BatchKind::OtherControl,
    }
}

/// The end-transaction marker in a control batch, if that is what it holds.
fn marker_of(batch: &[u8]) -> Option<TxnMarker> {
    let records = record_batch::records(batch).ok()?;
    let record = records.first()?;
    let key = record.key?;
    let value = record.value?;
    if key.len() < 4 || value.len() < 6 {
        return None;
    }
    let mut r = ByteReader::new(key);
    let (_version, kind) = (r.i16()?, r.i16()?);
    let mut v = ByteReader::new(value);
    let (_version, coordinator_epoch) = (v.i16()?, v.i32()?);
    let commit = match kind {
        CONTROL_TYPE_ABORT => false,
        CONTROL_TYPE_COMMIT => true,
        _ => return None,
    };
    Some(TxnMarker {
        commit,
        coordinator_epoch,
    })
}

/// A control batch holding one end-transaction marker, as the coordinator's `WriteTxnMarkers`
/// has the partition leader write it: magic 2, attributes control | transactional, the
/// producer's id and epoch, base sequence -1, both timestamps `timestamp_ms`, CRC32C sealed.
/// Its base offset and leader epoch are the append's to assign.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: TxnMarker,
    timestamp_ms: i64,
) -> Vec<u8> {
    let kind = if marker.commit {
        CONTROL_TYPE_COMMIT
    } else {
        CONTROL_TYPE_ABORT
    };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut batch = record_batch::build_batch(
        &[(Some(&key), Some(&value))],
        timestamp_ms,
        Some((producer_id, producer_epoch, record_batch::NO_SEQUENCE)),
    )
    .to_vec();
    let attributes = ATTRIBUTE_CONTROL | ATTRIBUTE_TRANSACTIONAL;
    batch[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2].copy_from_slice(&attributes.to_be_bytes());
    record_batch::reseal(&mut batch, 1);
    batch
}

/// Gathers, from per-segment lists in log order, the aborted transactions that overlap
/// `[from, upto)`: those whose marker is at or after `from` and whose first offset is below
/// `upto`, as `(producer_id, first_offset)` (Fetch's `aborted_transactions`). Stops at the
/// first entry whose last stable offset reaches `upto`: every transaction aborted after it
/// started at or above that offset (Kafka's `collectAbortedTxns`).
pub fn collect_aborted<'a>(
    lists: impl IntoIterator<Item = &'a [AbortedTxn]>,
    from: i64,
    upto: i64,
) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for list in lists {
        for t in list {
            if t.last_offset >= from && t.first_offset < upto {
                out.push((t.producer_id, t.first_offset));
            }
            if t.last_stable_offset >= upto {
                return out;
            }
        }
    }
    out
}

/// Appends a list of entries: count u32, then each producer_id i64 | first_offset i64 |
/// last_offset i64 | last_stable_offset i64, big-endian.
pub fn encode_aborted(list: &[AbortedTxn], out: &mut Vec<u8>) {
    out.extend_from_slice(&(list.len() as u32).to_be_bytes());
    for t in list {
        out.extend_from_slice(&t.producer_id.to_be_bytes());
        out.extend_from_slice(&t.first_offset.to_be_bytes());
        out.extend_from_slice(&t.last_offset.to_be_bytes());
        out.extend_from_slice(&t.last_stable_offset.to_be_bytes());
    }
}

/// Reads what [`encode_aborted`] wrote; `None` when malformed or when markers are not in
/// increasing offset order. Never allocates more than the bytes can hold.
pub(crate) fn decode_aborted(r: &mut ByteReader<'_>) -> Option<Vec<AbortedTxn>> {
    let n = r.u32()? as usize;
    let mut out = Vec::with_capacity(n.min(r.rest().len() / ABORTED_TXN_BYTES));
    for _ in 0..n {
        let t = AbortedTxn {
            producer_id: r.i64()?,
            first_offset: r.i64()?,
            last_offset: r.i64()?,
            last_stable_offset: r.i64()?,
        };
        if t.first_offset > t.last_offset
            || out
                .last()
                .is_some_and(|p: &AbortedTxn| p.last_offset >= t.last_offset)
        {
            return None;
        }
        out.push(t);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_through_a_control_batch() {
        for commit in [false, true] {
            let m = TxnMarker {
                commit,
                coordinator_epoch: 7,
            };
            let b = marker_batch(42, 3, m, 1_000);
            let h = record_batch::validate(&b, 0).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch), (42, 3));
            assert_eq!(h.base_sequence, -1);
            assert_eq!((h.base_timestamp, h.max_timestamp), (1_000, 1_000));
            assert_eq!(h.records_count, 1);
            assert_eq!(batch_kind(&h, &b), BatchKind::Marker(m));
        }
    }

    #[test]
    fn data_and_unknown_control_batches() {
        let b = record_batch::build_batch(&[(None, Some(b"v"))], 0, Some((1, 0, 0)));
        let h = record_batch::validate(&b, 0).unwrap();
        assert_eq!(
            batch_kind(&h, &b),
            BatchKind::Data {
                transactional: false
            }
        );
        // A control batch of type 2 (Kafka's leader change) changes nothing.
        let mut c = record_batch::build_batch(
            &[(Some(&[0, 0, 0, 2][..]), Some(&[0u8; 6][..]))],
            0,
            Some((1, 0, -1)),
        )
        .to_vec();
        c[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2]
            .copy_from_slice(&(ATTRIBUTE_CONTROL | ATTRIBUTE_TRANSACTIONAL).to_be_bytes());
        record_batch::reseal(&mut c, 1);
        let h = record_batch::validate(&c, 0).unwrap();
        assert_eq!(batch_kind(&h, &c), BatchKind::OtherControl);
    }

    fn t(pid: i64, first: i64, last: i64, last_stable: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last_stable,
        }
    }

    #[test]
    fn collecting_keeps_overlapping_entries_and_stops_at_the_last_stable_offset() {
        let a = [t(1, 0, 5, 6), t(2, 3, 9, 10)];
        let b = [t(3, 12, 15, 16), t(4, 20, 25, 26)];
        let lists = || [&a[..], &b[..]];
        assert_eq!(
            collect_aborted(lists(), 0, 100),
            vec![(1, 0), (2, 3), (3, 12), (4, 20)]
        );
        assert_eq!(collect_aborted(lists(), 6, 12), vec![(2, 3)]);
        assert_eq!(collect_aborted(lists(), 10, 13), vec![(3, 12)]);
        assert_eq!(collect_aborted(lists(), 26, 30), vec![]);
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let list = vec![t(1, 0, 5, 6), t(2, 3, 9, 10)];
        let mut bytes = Vec::new();
        encode_aborted(&list, &mut bytes);
        let mut r = ByteReader::new(&bytes);
        assert_eq!(decode_aborted(&mut r), Some(list.clone()));
        assert!(r.rest().is_empty());
        for cut in 0..bytes.len() {
            assert!(
                decode_aborted(&mut ByteReader::new(&bytes[..cut])).is_none(),
                "cut {cut}"
            );
        }
        let mut backwards = Vec::new();
        encode_aborted(&[list[1], list[0]], &mut backwards);
        assert!(decode_aborted(&mut ByteReader::new(&backwards)).is_none());
        // A count larger than the bytes is refused without allocating for it.
        let huge = u32::MAX.to_be_bytes();
        assert!(decode_aborted(&mut ByteReader::new(&huge)).is_none());
    }
}
