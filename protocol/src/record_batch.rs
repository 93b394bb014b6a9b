//! RecordBatch v2 (magic 2) as a view over bytes: its 61-byte header, CRC32C validation and the
//! broker-owned fields (`base_offset`, `partition_leader_epoch`) that may be rewritten without
//! touching the CRC, and the rewrites that reseal it (LogAppendTime, a new records section).
//! Records are read by `records` (the produce path's checks) and here off the hot path.
//!
//! ```text
//! position  field                   width
//!  0        base_offset             i64   (assigned by the broker)
//!  8        batch_length            i32   (bytes after this field)
//! 12        partition_leader_epoch  i32   (assigned by the broker)
//! 16        magic                   i8    (= 2)
//! 17        crc                     u32   (CRC32C of bytes 21..end)
//! 21        attributes              i16
//! 23        last_offset_delta       i32
//! 27        base_timestamp          i64
//! 35        max_timestamp           i64
//! 43        producer_id             i64
//! 51        producer_epoch          i16
//! 53        base_sequence           i32
//! 57        records_count           i32
//! 61        records ...
//! ```

use bytes::{BufMut, BytesMut};

pub const RECORD_BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batch_length`'s coverage starts: `base_offset` and `batch_length` themselves.
pub const LOG_OVERHEAD_BYTES: usize = 12;
const CRC_POSITION: usize = 17;
const CRC_COVERAGE_START: usize = 21;
pub const MAGIC_V2: i8 = 2;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_SEQUENCE: i32 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Whole size of the batch in bytes, including `base_offset` and `batch_length`.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    pub fn compression(&self) -> i16 {
        self.attributes & 0x07
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Last sequence number in the batch, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        if last > i64::from(i32::MAX) {
            (last - i64::from(i32::MAX) - 1) as i32
        } else {
            last as i32
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch truncated at position {position}: needed {needed} bytes, {available} available")]
    Truncated {
        position: usize,
        needed: usize,
        available: usize,
    },
    #[error("record batch at position {position} has magic {magic}; only magic 2 (RecordBatch v2) is supported")]
    UnsupportedMagic { position: usize, magic: i8 },
    #[error(
        "record batch at position {position} has batch_length {length}, below the header size"
    )]
    BadLength { position: usize, length: i32 },
    #[error("record batch at position {position} fails its CRC32C: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        position: usize,
        stored: u32,
        computed: u32,
    },
    #[error("record batch at position {position} is inconsistent: {detail}")]
    Invalid { position: usize, detail: String },
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Parses the header of the batch starting at `buf[0]`. Checks lengths and magic, not the CRC.
/// `position` only labels errors.
pub fn parse_header(buf: &[u8], position: usize) -> Result<BatchHeader, BatchError> {
    if buf.len() < RECORD_BATCH_HEADER_BYTES {
        return Err(BatchError::Truncated {
            position,
            needed: RECORD_BATCH_HEADER_BYTES,
            available: buf.len(),
        });
    }
    let batch_length = be_i32(buf, 8);
    if batch_length < (RECORD_BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
        return Err(BatchError::BadLength {
            position,
            length: batch_length,
        });
    }
    let magic = buf[16] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic { position, magic });
    }
    let header = BatchHeader {
        base_offset: be_i64(buf, 0),
        batch_length,
        partition_leader_epoch: be_i32(buf, 12),
        magic,
        crc: be_i32(buf, CRC_POSITION) as u32,
        attributes: be_i16(buf, 21),
        last_offset_delta: be_i32(buf, 23),
        base_timestamp: be_i64(buf, 27),
        max_timestamp: be_i64(buf, 35),
        producer_id: be_i64(buf, 43),
        producer_epoch: be_i16(buf, 51),
        base_sequence: be_i32(buf, 53),
        records_count: be_i32(buf, 57),
    };
    if header.last_offset_delta < 0 || header.records_count < 0 {
        return Err(BatchError::Invalid {
            position,
            detail: format!(
                "last_offset_delta {} / records_count {} is negative",
                header.last_offset_delta, header.records_count
            ),
        });
    }
    Ok(header)
}

/// Parses and fully validates the batch at `buf[0]`: header, that the whole batch is present, and
/// its CRC32C. Returns the header; the batch occupies `buf[..header.size()]`.
pub fn validate(buf: &[u8], position: usize) -> Result<BatchHeader, BatchError> {
    let header = parse_header(buf, position)?;
    let size = header.size();
    if buf.len() < size {
        return Err(BatchError::Truncated {
            position,
            needed: size,
            available: buf.len(),
        });
    }
    let computed = crc32c::crc32c(&buf[CRC_COVERAGE_START..size]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            position,
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Splits a produce request's `records` into validated batches (start, header).
pub fn validate_all(records: &[u8]) -> Result<Vec<(usize, BatchHeader)>, BatchError> {
    let mut out = Vec::new();
    let mut position = 0;
    while position < records.len() {
        let header = validate(&records[position..], position)?;
        out.push((position, header));
        position += header.size();
    }
    Ok(out)
}

/// Rewrites the broker-owned fields, which the CRC does not cover.
pub fn assign_offset(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    assert!(batch.len() >= RECORD_BATCH_HEADER_BYTES);
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// A record as `build_batch` takes it: optional key, optional value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

fn put_varint(out: &mut BytesMut, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Builds an uncompressed RecordBatch v2, for tests and tools. Each record is (key, value),
/// timestamps are `base_timestamp + index`.
pub fn build_batch(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: Option<(i64, i16, i32)>,
) -> BytesMut {
    build_with_attributes(records, base_timestamp, producer, 0)
}

/// The transactional attribute bit of a batch.
pub const ATTRIBUTE_TRANSACTIONAL: i16 = 0x10;

/// As [`build_batch`], a transactional batch of producer (id, epoch, base sequence): what a
/// coordinator writes for a producer's transaction (TxnOffsetCommit's offsets).
pub fn build_transactional_batch(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: (i64, i16, i32),
) -> BytesMut {
    build_with_attributes(
        records,
        base_timestamp,
        Some(producer),
        ATTRIBUTE_TRANSACTIONAL,
    )
}

fn build_with_attributes(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: Option<(i64, i16, i32)>,
    attributes: i16,
) -> BytesMut {
    assert!(
        !records.is_empty(),
        "a record batch holds at least one record"
    );
    let mut body = BytesMut::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let mut rec = BytesMut::new();
        rec.put_i8(0); // attributes
        put_varint(&mut rec, i as i64); // timestamp delta
        put_varint(&mut rec, i as i64); // offset delta
        for field in [key, value] {
            match field {
                Some(b) => {
                    put_varint(&mut rec, b.len() as i64);
                    rec.put_slice(b);
                }
                None => put_varint(&mut rec, -1),
            }
        }
        put_varint(&mut rec, 0); // headers
        put_varint(&mut body, rec.len() as i64);
        body.put_slice(&rec);
    }
    let count = records.len() as i32;
    let (pid, epoch, seq) = producer.unwrap_or((NO_PRODUCER_ID, -1, NO_SEQUENCE));
    let mut out = BytesMut::with_capacity(RECORD_BATCH_HEADER_BYTES + body.len());
    out.put_i64(0);
    out.put_i32((RECORD_BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES + body.len()) as i32);
    out.put_i32(0);
    out.put_i8(MAGIC_V2);
    out.put_u32(0);
    out.put_i16(attributes);
    out.put_i32(count - 1);
    out.put_i64(base_timestamp);
    out.put_i64(base_timestamp + i64::from(count) - 1);
    out.put_i64(pid);
    out.put_i16(epoch);
    out.put_i32(seq);
    out.put_i32(count);
    out.put_slice(&body);
    let crc = crc32c::crc32c(&out[CRC_COVERAGE_START..]);
    out[CRC_POSITION..CRC_POSITION + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn built_batch_validates_and_offsets_do_not_touch_crc() {
        let mut b = build_batch(&[(Some(b"k"), Some(b"v")), (None, Some(b"w"))], 1000, None);
        let h = validate(&b, 0).unwrap();
        assert_eq!(h.records_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.size(), b.len());
        assign_offset(&mut b, 77, 3);
        let h = validate(&b, 0).unwrap();
        assert_eq!(h.base_offset, 77);
        assert_eq!(h.last_offset(), 78);
    }

    #[test]
    fn every_prefix_is_an_error_and_every_bit_flip_is_caught() {
        let b = build_batch(&[(Some(b"key"), Some(b"value"))], 5, Some((9, 0, 0)));
        for cut in 0..b.len() {
            assert!(validate(&b[..cut], 0).is_err(), "prefix {cut}");
        }
        for byte in CRC_COVERAGE_START..b.len() {
            let mut c = b.clone();
            c[byte] ^= 0x40;
            assert!(validate(&c, 0).is_err(), "flip at {byte}");
        }
    }

    #[test]
    fn sequence_wraps() {
        let mut b = build_batch(
            &[(None, Some(b"a")), (None, Some(b"b"))],
            0,
            Some((1, 0, i32::MAX)),
        );
        assign_offset(&mut b, 0, 0);
        let h = validate(&b, 0).unwrap();
        assert_eq!(h.last_sequence(), 0);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = validate_all(&data);
        }

        #[test]
        fn built_batches_round_trip(values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..20)) {
            let recs: Vec<_> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
            let b = build_batch(&recs, 0, None);
            let all = validate_all(&b).unwrap();
            prop_assert_eq!(all.len(), 1);
            prop_assert_eq!(all[0].1.records_count as usize, values.len());
        }
    }
}

/// One record of an uncompressed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The whole encoded record, its length prefix included.
    pub raw: &'a [u8],
}

/// Decodes the records of an uncompressed, validated batch, for internal topics, timestamp
/// lookups and the cleaner (the produce path walks records with `records::records` instead).
pub fn records(batch: &[u8]) -> Result<Vec<RecordView<'_>>, BatchError> {
    let header = validate(batch, 0)?;
    if header.compression() != 0 {
        return Err(BatchError::Invalid {
            position: 0,
            detail: "records of compressed batches are not decoded".into(),
        });
    }
    parse_records(&batch[RECORD_BATCH_HEADER_BYTES..header.size()])
}

/// Decodes a records section: a batch's bytes after its header, or what a compressed batch's
/// records decompress to.
pub fn parse_records(body: &[u8]) -> Result<Vec<RecordView<'_>>, BatchError> {
    let mut position = 0usize;
    let mut out = Vec::new();
    while position < body.len() {
        let index = i32::try_from(out.len()).unwrap_or(i32::MAX);
        let (record, next) = crate::records::read_record(body, position, index).map_err(|e| {
            BatchError::Invalid {
                position,
                detail: e.to_string(),
            }
        })?;
        out.push(record);
        position = next;
    }
    Ok(out)
}

/// A copy of an uncompressed, valid batch holding only the records `keep` accepts — as Kafka's
/// log cleaner rewrites a batch: the base offset, last offset delta, timestamps and producer
/// fields stay, so no kept record changes offset; the length, record count and CRC are new.
/// `None` when no record is kept.
pub fn retain_records(
    batch: &[u8],
    mut keep: impl FnMut(&RecordView<'_>) -> bool,
) -> Result<Option<Vec<u8>>, BatchError> {
    let views = records(batch)?;
    let mut out = Vec::with_capacity(batch.len());
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_BYTES]);
    let mut kept = 0i32;
    for r in views.iter().filter(|r| keep(r)) {
        out.extend_from_slice(r.raw);
        kept += 1;
    }
    if kept == 0 {
        return Ok(None);
    }
    reseal(&mut out, kept);
    Ok(Some(out))
}

/// Sets a rewritten batch's length, record count and CRC from its bytes (the header's other
/// fields are left as they are).
pub fn reseal(batch: &mut [u8], records_count: i32) {
    let length = (batch.len() - LOG_OVERHEAD_BYTES) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    batch[RECORD_BATCH_HEADER_BYTES - 4..RECORD_BATCH_HEADER_BYTES]
        .copy_from_slice(&records_count.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_COVERAGE_START..]);
    batch[CRC_POSITION..CRC_POSITION + 4].copy_from_slice(&crc.to_be_bytes());
}

/// The attributes bit that marks a batch's timestamps as the broker's append time.
pub const TIMESTAMP_TYPE_LOG_APPEND_TIME: i16 = 0x08;
const ATTRIBUTES_POSITION: usize = 21;
const MAX_TIMESTAMP_POSITION: usize = 35;

impl BatchHeader {
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_LOG_APPEND_TIME != 0
    }
}

/// Marks a valid batch's timestamps as the broker's: the LogAppendTime attribute, `max_timestamp`
/// set to `append_time_ms`, and a new CRC — what Kafka does to a batch appended to a topic with
/// `message.timestamp.type=LogAppendTime` (consumers then read every record's timestamp as the
/// batch's max timestamp).
pub fn set_log_append_time(batch: &mut [u8], append_time_ms: i64) {
    set_max_timestamp(batch, true, append_time_ms);
}

/// Sets a valid batch's timestamp type (LogAppendTime when `log_append_time`, else CreateTime)
/// and `max_timestamp`, and reseals its CRC: Kafka's `setMaxTimestamp`.
pub fn set_max_timestamp(batch: &mut [u8], log_append_time: bool, max_timestamp: i64) {
    assert!(batch.len() >= RECORD_BATCH_HEADER_BYTES);
    let mut attributes = be_i16(batch, ATTRIBUTES_POSITION) & !TIMESTAMP_TYPE_LOG_APPEND_TIME;
    if log_append_time {
        attributes |= TIMESTAMP_TYPE_LOG_APPEND_TIME;
    }
    batch[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_POSITION..MAX_TIMESTAMP_POSITION + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_COVERAGE_START..]);
    batch[CRC_POSITION..CRC_POSITION + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A batch with `header`'s fields (the 61 bytes of a valid batch) around a new records section
/// compressed with `codec`: the compression attribute, length and CRC are new; the record count,
/// offsets, timestamps and producer fields stay.
pub fn with_records(header: &[u8], codec: i16, section: &[u8]) -> Vec<u8> {
    assert!(header.len() >= RECORD_BATCH_HEADER_BYTES);
    assert!((0..=4).contains(&codec), "codec {codec}");
    let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + section.len());
    out.extend_from_slice(&header[..RECORD_BATCH_HEADER_BYTES]);
    out.extend_from_slice(section);
    let attributes = (be_i16(&out, ATTRIBUTES_POSITION) & !0x07) | codec;
    out[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2].copy_from_slice(&attributes.to_be_bytes());
    let count = be_i32(&out, RECORD_BATCH_HEADER_BYTES - 4);
    reseal(&mut out, count);
    out
}

/// The attributes bit saying a batch's `base_timestamp` holds its delete horizon (KIP-534): the
/// time after which the log cleaner may remove the batch's tombstones or, for an
/// end-transaction marker whose transaction has no data left, the marker itself.
pub const ATTRIBUTE_DELETE_HORIZON: i16 = 0x40;
const BASE_TIMESTAMP_POSITION: usize = 27;

impl BatchHeader {
    /// The batch's delete horizon (Kafka's `deleteHorizonMs`): its `base_timestamp` when the
    /// delete-horizon attribute is set.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTRIBUTE_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
}

/// A copy of an uncompressed, valid batch carrying the delete horizon `horizon_ms`, as Kafka's
/// cleaner stamps one (KIP-534): the delete-horizon attribute set, `base_timestamp` = the
/// horizon, and each record's timestamp delta re-encoded against it so every record keeps its
/// timestamp; offsets, `max_timestamp` and producer fields stay; length and CRC are new.
pub fn set_delete_horizon(batch: &[u8], horizon_ms: i64) -> Result<Vec<u8>, BatchError> {
    let header = validate(batch, 0)?;
    let views = records(batch)?;
    let mut body = BytesMut::with_capacity(header.size());
    let mut rec = BytesMut::new();
    for r in &views {
        // raw = length varint | attributes i8 | timestamp delta varlong | the rest.
        let mut at = 0;
        crate::records::get_varlong(r.raw, &mut at);
        let attributes = r.raw[at];
        at += 1;
        crate::records::get_varlong(r.raw, &mut at);
        let timestamp = header.base_timestamp.wrapping_add(r.timestamp_delta);
        rec.clear();
        rec.put_u8(attributes);
        put_varint(&mut rec, timestamp.wrapping_sub(horizon_ms));
        rec.put_slice(&r.raw[at..]);
        put_varint(&mut body, rec.len() as i64);
        body.put_slice(&rec);
    }
    let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + body.len());
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_BYTES]);
    out.extend_from_slice(&body);
    let attributes = header.attributes | ATTRIBUTE_DELETE_HORIZON;
    out[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2].copy_from_slice(&attributes.to_be_bytes());
    out[BASE_TIMESTAMP_POSITION..BASE_TIMESTAMP_POSITION + 8]
        .copy_from_slice(&horizon_ms.to_be_bytes());
    reseal(&mut out, header.records_count);
    Ok(out)
}

/// `base_timestamp` of a batch with no records (Kafka's `RecordBatch.NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;

/// The header of a valid batch as a batch of its own with no records, as Kafka's log cleaner
/// writes a batch it keeps only for its producer's state (`DefaultRecordBatch.writeEmptyHeader`):
/// base offset, last offset delta, partition leader epoch, producer id, epoch and base sequence,
/// `max_timestamp` and the timestamp-type, transactional and control attributes stay; the
/// records section is empty and uncompressed (compression none), the delete-horizon attribute is
/// cleared, `base_timestamp` is [`NO_TIMESTAMP`], the record count 0; length and CRC are new.
/// The offsets it spans hold no record, and its last sequence is still
/// `base_sequence + last_offset_delta`.
pub fn emptied(batch: &[u8]) -> Result<Vec<u8>, BatchError> {
    let header = parse_header(batch, 0)?;
    let mut out = batch[..RECORD_BATCH_HEADER_BYTES].to_vec();
    let attributes = header.attributes & !(0x07 | ATTRIBUTE_DELETE_HORIZON);
    out[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2].copy_from_slice(&attributes.to_be_bytes());
    out[BASE_TIMESTAMP_POSITION..BASE_TIMESTAMP_POSITION + 8]
        .copy_from_slice(&NO_TIMESTAMP.to_be_bytes());
    reseal(&mut out, 0);
    Ok(out)
}

#[cfg(test)]
mod record_tests {
    use super::*;

    #[test]
    fn records_decode_what_build_batch_wrote() {
        let b = build_batch(
            &[
                (Some(b"k1"), Some(b"v1")),
                (None, None),
                (Some(b""), Some(b"v3")),
            ],
            5,
            None,
        );
        let recs = records(&b).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].key, Some(&b"k1"[..]));
        assert_eq!(recs[1].value, None);
        assert_eq!(recs[2].offset_delta, 2);
        assert_eq!(recs[2].key, Some(&b""[..]));
    }

    #[test]
    fn log_append_time_and_new_records_keep_the_batch_valid() {
        let mut b = build_batch(&[(Some(b"k"), Some(b"v"))], 1000, Some((3, 0, 5)));
        set_log_append_time(&mut b, 99_000);
        let h = validate(&b, 0).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!((h.base_timestamp, h.max_timestamp), (1000, 99_000));
        assert_eq!(h.compression(), 0);
        let section = b[RECORD_BATCH_HEADER_BYTES..].to_vec();
        let mut inflated = section.clone();
        inflated.extend_from_slice(b"not really compressed");
        let c = with_records(&b, 3, &inflated);
        let h2 = validate(&c, 0).unwrap();
        assert_eq!(h2.compression(), 3);
        assert!(h2.is_log_append_time());
        assert_eq!(h2.size(), RECORD_BATCH_HEADER_BYTES + inflated.len());
        assert_eq!(
            (h2.records_count, h2.producer_id, h2.base_sequence),
            (1, 3, 5)
        );
        let back = with_records(&c, 0, &section);
        assert_eq!(back, b.to_vec());
        set_max_timestamp(&mut b, false, 1234);
        let h3 = validate(&b, 0).unwrap();
        assert!(!h3.is_log_append_time());
        assert_eq!(h3.max_timestamp, 1234);
    }

    #[test]
    fn an_emptied_batch_keeps_its_offsets_producer_fields_and_timestamp_type() {
        let recs = [(Some(&b"k"[..]), Some(&b"v"[..])); 3];
        let mut b = build_transactional_batch(&recs, 1000, (7, 2, 40));
        set_log_append_time(&mut b, 99_000);
        assign_offset(&mut b, 500, 6);
        // Claimed gzip with a delete horizon: neither survives emptying.
        let mut claimed = b.to_vec();
        let attributes = be_i16(&claimed, ATTRIBUTES_POSITION) | 1 | ATTRIBUTE_DELETE_HORIZON;
        claimed[ATTRIBUTES_POSITION..ATTRIBUTES_POSITION + 2]
            .copy_from_slice(&attributes.to_be_bytes());
        reseal(&mut claimed, 3);
        let original = validate(&claimed, 0).unwrap();
        let e = emptied(&claimed).unwrap();
        assert_eq!(e.len(), RECORD_BATCH_HEADER_BYTES);
        let h = validate(&e, 0).expect("a valid batch, CRC included");
        assert_eq!(h.records_count, 0);
        assert_eq!(
            (h.base_offset, h.last_offset(), h.partition_leader_epoch),
            (500, 502, 6)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (7, 2, 40)
        );
        assert_eq!(h.last_sequence(), original.last_sequence());
        assert_eq!((h.base_timestamp, h.max_timestamp), (NO_TIMESTAMP, 99_000));
        assert!(h.is_transactional() && h.is_log_append_time() && !h.is_control());
        assert_eq!(h.compression(), 0);
        assert_eq!(h.delete_horizon_ms(), None);
        assert!(records(&e).unwrap().is_empty());
        // Emptying an empty batch changes nothing.
        assert_eq!(emptied(&e).unwrap(), e);
        assert!(emptied(&e[..RECORD_BATCH_HEADER_BYTES - 1]).is_err());
    }

    #[test]
    fn a_delete_horizon_keeps_every_record_and_its_timestamp() {
        let records_of = |b: &[u8]| -> Vec<(i64, i32, Option<Vec<u8>>)> {
            let h = validate(b, 0).unwrap();
            records(b)
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        h.base_timestamp + r.timestamp_delta,
                        r.offset_delta,
                        r.value.map(<[u8]>::to_vec),
                    )
                })
                .collect()
        };
        let mut b = build_batch(
            &[(Some(b"k"), Some(b"v")), (Some(b"k2"), None)],
            1_000,
            Some((4, 2, 7)),
        );
        assign_offset(&mut b, 50, 3);
        let before = validate(&b, 0).unwrap();
        assert_eq!(before.delete_horizon_ms(), None);
        // A horizon far from the timestamps: the deltas grow to several varint bytes.
        let stamped = set_delete_horizon(&b, 86_400_000_000).unwrap();
        let h = validate(&stamped, 0).unwrap();
        assert_eq!(h.delete_horizon_ms(), Some(86_400_000_000));
        assert!(stamped.len() > b.len());
        assert_eq!(records_of(&stamped), records_of(&b));
        assert_eq!(
            (
                h.base_offset,
                h.last_offset(),
                h.records_count,
                h.max_timestamp
            ),
            (50, 51, 2, before.max_timestamp)
        );
        assert_eq!(
            (
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.partition_leader_epoch
            ),
            (4, 2, 7, before.partition_leader_epoch)
        );
        assert_eq!(h.attributes, before.attributes | ATTRIBUTE_DELETE_HORIZON);
        // A horizon before the timestamps (negative deltas) and a second stamping work too.
        let again = set_delete_horizon(&stamped, 10).unwrap();
        assert_eq!(records_of(&again), records_of(&b));
        assert_eq!(validate(&again, 0).unwrap().delete_horizon_ms(), Some(10));
    }

    #[test]
    fn retained_records_keep_their_offsets_and_the_batch_stays_valid() {
        let mut b = build_batch(
            &[
                (Some(b"a"), Some(b"1")),
                (Some(b"b"), Some(b"2")),
                (Some(b"a"), Some(b"3")),
            ],
            1000,
            Some((9, 1, 40)),
        );
        assign_offset(&mut b, 100, 0);
        let kept = retain_records(&b, |r| r.offset_delta != 0)
            .unwrap()
            .unwrap();
        let h = validate(&kept, 0).unwrap();
        assert_eq!(
            (h.base_offset, h.last_offset(), h.records_count),
            (100, 102, 2)
        );
        assert_eq!((h.producer_id, h.base_sequence), (9, 40));
        let recs = records(&kept).unwrap();
        assert_eq!(
            recs.iter()
                .map(|r| (r.offset_delta, r.value))
                .collect::<Vec<_>>(),
            vec![(1, Some(&b"2"[..])), (2, Some(&b"3"[..]))]
        );
        assert_eq!(retain_records(&b, |_| false).unwrap(), None);
        assert_eq!(retain_records(&b, |_| true).unwrap().unwrap(), b.to_vec());
    }
}
