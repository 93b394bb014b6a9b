//! Records of the internal `__transaction_state` topic, in Apache Kafka's own schemas
//! (`TransactionLogKey` v0, `TransactionLogValue` v0, which Kafka still reads), so the topic
//! reads the same as Kafka's. A null value is a tombstone (an expired transactional id).
//!
//! ```text
//! key:   [version i16 = 0][transactional_id string]
//! value: [version i16 = 0][producer_id i64][producer_epoch i16][timeout_ms i32][status i8]
//!        [partitions: nullable array of [topic string][partition ids: array of i32]]
//!        [last_update_timestamp_ms i64][start_timestamp_ms i64]
//! ```
//! Version 1 values (flexible, written by newer Kafka) are read too: compact strings and
//! arrays, and tagged fields, which are skipped.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{DecodeError, Reader};

/// Partitions a transaction has written to, by topic.
pub type TxnPartitions = Vec<(String, Vec<i32>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnKey {
    pub transactional_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnValue {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// Kafka's `TransactionState` id: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
    /// 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence.
    pub status: i8,
    pub partitions: TxnPartitions,
    pub last_update_ms: i64,
    pub start_ms: i64,
}

fn put_str(out: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    out.put_i16(len as i16);
    out.put_slice(&s.as_bytes()[..len]);
}

impl TxnKey {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        put_str(&mut out, &self.transactional_id);
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        match r.i16("key version")? {
            0 => Ok(TxnKey {
                transactional_id: r.string("transactional_id", false)?,
            }),
            v => Err(r.malformed(
                "key version",
                format!("unknown __transaction_state key version {v}"),
            )),
        }
    }
}

impl TxnValue {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.timeout_ms);
        out.put_i8(self.status);
        out.put_i32(self.partitions.len() as i32);
        for (topic, ids) in &self.partitions {
            put_str(&mut out, topic);
            out.put_i32(ids.len() as i32);
            for p in ids {
                out.put_i32(*p);
            }
        }
        out.put_i64(self.last_update_ms);
        out.put_i64(self.start_ms);
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.i16("value version")?;
        if !(0..=1).contains(&version) {
            return Err(r.malformed(
                "value version",
                format!("unknown __transaction_state value version {version}"),
            ));
        }
        let flex = version >= 1;
        let producer_id = r.i64("producer_id")?;
        let producer_epoch = r.i16("producer_epoch")?;
        let timeout_ms = r.i32("timeout_ms")?;
        let status = r.i8("status")?;
        let mut partitions = Vec::new();
        if let Some(n) = r.array_len("partitions", flex, 2 + 4)? {
            for _ in 0..n {
                let topic = r.string("topic", flex)?;
                let np = r.array_len_required("partition_ids", flex, 4)?;
                let mut ids = Vec::with_capacity(np);
                for _ in 0..np {
                    ids.push(r.i32("partition_id")?);
                }
                r.tagged_fields(flex)?;
                partitions.push((topic, ids));
            }
        }
        let last_update_ms = r.i64("last_update_timestamp_ms")?;
        let start_ms = r.i64("start_timestamp_ms")?;
        r.tagged_fields(flex)?;
        Ok(TxnValue {
            producer_id,
            producer_epoch,
            timeout_ms,
            status,
            partitions,
            last_update_ms,
            start_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value() -> TxnValue {
        TxnValue {
            producer_id: 4000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            status: 1,
            partitions: vec![("orders".into(), vec![0, 2]), ("audit".into(), vec![5])],
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn records_round_trip_and_every_prefix_fails() {
        let key = TxnKey {
            transactional_id: "app-1".into(),
        };
        let bytes = key.encode();
        assert_eq!(&bytes[..4], &[0, 0, 0, 5], "version 0, then the id");
        assert_eq!(TxnKey::decode(bytes.clone()).unwrap(), key);
        for cut in 0..bytes.len() {
            assert!(TxnKey::decode(bytes.slice(..cut)).is_err());
        }
        let v = value();
        let bytes = v.encode();
        assert_eq!(TxnValue::decode(bytes.clone()).unwrap(), v);
        for cut in 0..bytes.len() {
            assert!(
                TxnValue::decode(bytes.slice(..cut)).is_err(),
                "prefix {cut}"
            );
        }
    }

    #[test]
    fn a_flexible_version_1_value_is_read() {
        use crate::wire::{put_array_len, put_empty_tagged_fields, put_string};
        let mut out = BytesMut::new();
        out.put_i16(1);
        out.put_i64(7);
        out.put_i16(1);
        out.put_i32(900);
        out.put_i8(4);
        put_array_len(&mut out, 1, true);
        put_string(&mut out, "t", true);
        put_array_len(&mut out, 1, true);
        out.put_i32(3);
        put_empty_tagged_fields(&mut out, true);
        out.put_i64(11);
        out.put_i64(10);
        put_empty_tagged_fields(&mut out, true);
        let v = TxnValue::decode(out.freeze()).unwrap();
        assert_eq!(v.partitions, vec![("t".to_string(), vec![3])]);
        assert_eq!((v.producer_id, v.status, v.start_ms), (7, 4, 10));
        assert!(TxnValue::decode(Bytes::from_static(&[0, 9])).is_err());
    }
}
