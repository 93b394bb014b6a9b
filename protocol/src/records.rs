//! The records inside a RecordBatch v2, read as Kafka's broker reads them before an append: each
//! record must parse to exactly its declared length, its offset delta must be its index in the
//! batch, and the batch must hold exactly the records its header counts. Pure code over a records
//! section (a batch's bytes after its header, or what a compressed batch's records decompress
//! to); nothing is allocated from a count the client sent.
//!
//! ```text
//! record:  length            varint  (bytes after this field)
//!          attributes        i8      (unused)
//!          timestamp_delta   varlong (added to the batch's base_timestamp)
//!          offset_delta      varint  (added to the batch's base_offset; = the record's index)
//!          key_length        varint  (-1: null key)      key bytes
//!          value_length      varint  (-1: null value)    value bytes
//!          header_count      varint  (>= 0)
//!          headers           header_count × (key_length varint >= 0, key, value_length, value)
//! ```

use crate::record_batch::RecordView;

/// What is wrong with a batch's records. Kafka reports each of these as an
/// `InvalidRecordException` (INVALID_RECORD).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record {index} at position {position} is malformed: {detail}")]
    Malformed {
        index: i32,
        position: usize,
        detail: &'static str,
    },
    /// Kafka itself does not refuse this: it ignores an uncompressed v2 batch's offset deltas
    /// and rewrites a compressed batch whose inner offsets are off (a repair kept for old v1
    /// clients). Every v2 client writes the index, and a wrong delta would show consumers other
    /// offsets than the broker assigned, so it is refused here instead.
    #[error(
        "record {index} has offset delta {offset_delta}; a record's offset delta must be its index"
    )]
    OffsetDelta { index: i32, offset_delta: i32 },
    #[error("the batch declares {declared} records but holds only {found}")]
    TooFew { declared: i32, found: i32 },
    #[error(
        "the batch declares {declared} records but bytes remain after them at position {position}"
    )]
    TooMany { declared: i32, position: usize },
}

/// Reads a zig-zag varint of at most 10 bytes at `*at`; `None` when the bytes end first or it
/// runs longer.
pub(crate) fn get_varlong(buf: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*at)?;
        *at += 1;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// A varint that Kafka reads as 32 bits (lengths, counts, the offset delta).
fn get_varint(buf: &[u8], at: &mut usize) -> Option<i32> {
    get_varlong(buf, at).and_then(|v| i32::try_from(v).ok())
}

/// A length-prefixed byte field; a negative length is null, as Kafka reads keys and values.
fn get_bytes<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = get_varint(buf, at)?;
    let Ok(len) = usize::try_from(len) else {
        return Some(None);
    };
    let end = at.checked_add(len)?;
    let s = buf.get(*at..end)?;
    *at = end;
    Some(Some(s))
}

/// Reads the record at `section[position..]`; returns it and the position after it. `index`
/// only labels errors.
pub fn read_record(
    section: &[u8],
    position: usize,
    index: i32,
) -> Result<(RecordView<'_>, usize), RecordError> {
    let bad = |detail| RecordError::Malformed {
        index,
        position,
        detail,
    };
    let mut at = position;
    let length = get_varint(section, &mut at).ok_or_else(|| bad("record length"))?;
    let length = usize::try_from(length).map_err(|_| bad("negative record length"))?;
    let end = at
        .checked_add(length)
        .filter(|&end| end <= section.len())
        .ok_or_else(|| bad("record runs past the end of the batch"))?;
    let rec = &section[at..end];
    let mut p = 1usize; // attributes
    if rec.is_empty() {
        return Err(bad("empty record"));
    }
    let timestamp_delta = get_varlong(rec, &mut p).ok_or_else(|| bad("timestamp delta"))?;
    let offset_delta = get_varint(rec, &mut p).ok_or_else(|| bad("offset delta"))?;
    let key = get_bytes(rec, &mut p).ok_or_else(|| bad("key"))?;
    let value = get_bytes(rec, &mut p).ok_or_else(|| bad("value"))?;
    let headers = get_varint(rec, &mut p).ok_or_else(|| bad("header count"))?;
    if headers < 0 {
        return Err(bad("negative header count"));
    }
    // Each header takes at least two bytes, so the loop ends within the record's bytes.
    for _ in 0..headers {
        let key_length = get_varint(rec, &mut p).ok_or_else(|| bad("header key"))?;
        let key_length =
            usize::try_from(key_length).map_err(|_| bad("negative header key length"))?;
        p = p
            .checked_add(key_length)
            .filter(|&end| end <= rec.len())
            .ok_or_else(|| bad("header key"))?;
        get_bytes(rec, &mut p).ok_or_else(|| bad("header value"))?;
    }
    if p != rec.len() {
        return Err(bad("record fields do not fill its declared length"));
    }
    let view = RecordView {
        offset_delta,
        timestamp_delta,
        key,
        value,
        raw: &section[position..end],
    };
    Ok((view, end))
}

/// The records of a section that must hold exactly `declared` of them, in order: each yields
/// `Ok` until the first error, which ends the iteration.
pub struct Records<'a> {
    section: &'a [u8],
    position: usize,
    index: i32,
    declared: i32,
    done: bool,
}

/// Walks `section` as a batch whose header counts `declared` records.
pub fn records(section: &[u8], declared: i32) -> Records<'_> {
    Records {
        section,
        position: 0,
        index: 0,
        declared,
        done: false,
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordView<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.index >= self.declared {
            self.done = true;
            if self.position < self.section.len() {
                return Some(Err(RecordError::TooMany {
                    declared: self.declared,
                    position: self.position,
                }));
            }
            return None;
        }
        if self.position >= self.section.len() {
            self.done = true;
            return Some(Err(RecordError::TooFew {
                declared: self.declared,
                found: self.index,
            }));
        }
        let out = read_record(self.section, self.position, self.index).and_then(|(r, next)| {
            if r.offset_delta != self.index {
                return Err(RecordError::OffsetDelta {
                    index: self.index,
                    offset_delta: r.offset_delta,
                });
            }
            self.position = next;
            Ok(r)
        });
        self.index += 1;
        self.done = out.is_err();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_batch::{build_batch, RECORD_BATCH_HEADER_BYTES};
    use bytes::{BufMut, BytesMut};
    use proptest::prelude::*;

    fn put_varint(out: &mut BytesMut, value: i64) {
        let mut v = ((value << 1) ^ (value >> 63)) as u64;
        while v >= 0x80 {
            out.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        out.put_u8(v as u8);
    }

    /// One encoded record with the given offset delta and headers.
    fn record(
        offset_delta: i64,
        key: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Vec<u8> {
        let mut rec = BytesMut::new();
        rec.put_i8(0);
        put_varint(&mut rec, 3);
        put_varint(&mut rec, offset_delta);
        match key {
            Some(k) => {
                put_varint(&mut rec, k.len() as i64);
                rec.put_slice(k);
            }
            None => put_varint(&mut rec, -1),
        }
        put_varint(&mut rec, 1);
        rec.put_u8(b'v');
        put_varint(&mut rec, headers.len() as i64);
        for (k, v) in headers {
            put_varint(&mut rec, k.len() as i64);
            rec.put_slice(k);
            match v {
                Some(v) => {
                    put_varint(&mut rec, v.len() as i64);
                    rec.put_slice(v);
                }
                None => put_varint(&mut rec, -1),
            }
        }
        let mut out = BytesMut::new();
        put_varint(&mut out, rec.len() as i64);
        out.put_slice(&rec);
        out.to_vec()
    }

    fn section(records: &[Vec<u8>]) -> Vec<u8> {
        records.concat()
    }

    fn collect(section: &[u8], declared: i32) -> Result<Vec<RecordView<'_>>, RecordError> {
        records(section, declared).collect()
    }

    #[test]
    fn records_of_a_built_batch_are_read_in_order() {
        let b = build_batch(
            &[
                (Some(b"k"), Some(b"v")),
                (None, None),
                (Some(b""), Some(b"w")),
            ],
            7,
            None,
        );
        let recs = collect(&b[RECORD_BATCH_HEADER_BYTES..], 3).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].key, Some(&b"k"[..]));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[2].offset_delta, 2);
        assert_eq!(recs[2].timestamp_delta, 2);
    }

    #[test]
    fn headers_are_read_and_must_be_well_formed() {
        let long_key = vec![b'h'; 100];
        let s = section(&[
            record(0, Some(b"a"), &[(b"h1", Some(b"x")), (&long_key, None)]),
            record(1, None, &[]),
        ]);
        let recs = collect(&s, 2).unwrap();
        assert_eq!(recs[0].key, Some(&b"a"[..]));
        assert_eq!(recs[1].raw.len() + recs[0].raw.len(), s.len());
        // A negative header count is refused.
        let mut bad = record(0, None, &[]);
        let last = bad.len() - 1;
        bad[last] = 0x01; // zig-zag -1
        assert!(matches!(
            collect(&bad, 1),
            Err(RecordError::Malformed {
                detail: "negative header count",
                ..
            })
        ));
    }

    #[test]
    fn the_count_and_offset_deltas_must_match_the_records() {
        let two = section(&[record(0, None, &[]), record(1, None, &[])]);
        assert_eq!(collect(&two, 2).unwrap().len(), 2);
        assert_eq!(
            collect(&two, 3).unwrap_err(),
            RecordError::TooFew {
                declared: 3,
                found: 2
            }
        );
        // The header's claim of 2^31 - 1 records over one record.
        assert_eq!(
            collect(&two[..two.len() / 2], i32::MAX).unwrap_err(),
            RecordError::TooFew {
                declared: i32::MAX,
                found: 1
            }
        );
        assert!(matches!(
            collect(&two, 1).unwrap_err(),
            RecordError::TooMany { declared: 1, .. }
        ));
        let skipped = section(&[record(0, None, &[]), record(2, None, &[])]);
        assert_eq!(
            collect(&skipped, 2).unwrap_err(),
            RecordError::OffsetDelta {
                index: 1,
                offset_delta: 2
            }
        );
        assert_eq!(
            collect(&section(&[record(1, None, &[])]), 1).unwrap_err(),
            RecordError::OffsetDelta {
                index: 0,
                offset_delta: 1
            }
        );
        assert_eq!(collect(&[], 0).unwrap().len(), 0);
    }

    #[test]
    fn a_record_whose_fields_do_not_fill_its_length_is_refused() {
        let mut r = record(0, Some(b"key"), &[]);
        r[0] += 2; // zig-zag: length one byte longer than the fields
        r.push(0);
        assert!(matches!(
            collect(&r, 1),
            Err(RecordError::Malformed {
                detail: "record fields do not fill its declared length",
                ..
            })
        ));
    }

    #[test]
    fn every_prefix_is_an_error_never_a_panic() {
        let long_key = vec![b'h'; 70];
        let s = section(&[
            record(0, Some(b"key"), &[(b"h", Some(b"v"))]),
            record(1, None, &[(&long_key, Some(b"w"))]),
        ]);
        assert_eq!(collect(&s, 2).unwrap().len(), 2);
        for cut in 0..s.len() {
            assert!(collect(&s[..cut], 2).is_err(), "prefix {cut}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_sections_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..200),
            declared in any::<i32>(),
        ) {
            let n = records(&data, declared).take(300).count();
            prop_assert!(n <= data.len() + 1);
        }

        #[test]
        fn built_records_round_trip(
            keys in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..80)), 1..20),
        ) {
            let recs: Vec<Vec<u8>> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| record(i as i64, k.as_deref(), &[(b"h", k.as_deref())]))
                .collect();
            let s = section(&recs);
            let read = collect(&s, keys.len() as i32).unwrap();
            prop_assert_eq!(read.len(), keys.len());
            for (r, k) in read.iter().zip(&keys) {
                prop_assert_eq!(r.key, k.as_deref());
            }
        }
    }
}
