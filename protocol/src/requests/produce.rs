//! Produce request (v3–v10), hand-written: each partition's records stay one `Bytes` slice of the
//! request; batches and their records are validated later, by the produce handler. v10's request
//! is v9's: only its response changes (KIP-951's `CurrentLeader` and `NodeEndpoints`).

use bytes::Bytes;

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<ProduceTopic>,
}

#[derive(Debug, Clone)]
pub struct ProduceTopic {
    pub name: String,
    pub partitions: Vec<ProducePartition>,
}

#[derive(Debug, Clone)]
pub struct ProducePartition {
    pub index: i32,
    pub records: Option<Bytes>,
}

/// A request's `acks` alone, read from a copy of `r` (the body, just past its header) without
/// decoding the topics; `None` if the body is too short.
pub fn acks(r: &Reader, version: i16) -> Option<i16> {
    let flex = flexible(api_key::PRODUCE, version);
    let mut r = r.clone();
    r.nullable_string("transactional_id", flex).ok()?;
    r.i16("acks").ok()
}

pub fn decode(r: &mut Reader, version: i16) -> Result<ProduceRequest, DecodeError> {
    let flex = flexible(api_key::PRODUCE, version);
    let transactional_id = r.nullable_string("transactional_id", flex)?;
    let acks = r.i16("acks")?;
    let timeout_ms = r.i32("timeout_ms")?;
    let n_topics = r.array_len_required("topic_data", flex, 2)?;
    let mut topics = Vec::with_capacity(n_topics);
    for _ in 0..n_topics {
        let name = r.string("topic name", flex)?;
        let n_parts = r.array_len_required("partition_data", flex, 5)?;
        let mut partitions = Vec::with_capacity(n_parts);
        for _ in 0..n_parts {
            let index = r.i32("partition index")?;
            let records = r.nullable_bytes("records", flex)?;
            r.tagged_fields(flex)?;
            partitions.push(ProducePartition { index, records });
        }
        r.tagged_fields(flex)?;
        topics.push(ProduceTopic { name, partitions });
    }
    r.tagged_fields(flex)?;
    Ok(ProduceRequest {
        transactional_id,
        acks,
        timeout_ms,
        topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{put_array_len, put_nullable_bytes_len, put_string};
    use bytes::{BufMut, BytesMut};

    fn encode(version: i16) -> Bytes {
        let flex = version >= 9;
        let mut b = BytesMut::new();
        if flex {
            b.put_u8(0); // null compact string
        } else {
            b.put_i16(-1);
        }
        b.put_i16(-1);
        b.put_i32(30_000);
        put_array_len(&mut b, 1, flex);
        put_string(&mut b, "t", flex);
        put_array_len(&mut b, 1, flex);
        b.put_i32(2);
        put_nullable_bytes_len(&mut b, Some(3), flex);
        b.put_slice(b"abc");
        if flex {
            b.put_u8(0);
            b.put_u8(0);
            b.put_u8(0);
        }
        b.freeze()
    }

    #[test]
    fn round_trip_and_prefixes() {
        for v in [3, 8, 9, 10] {
            let bytes = encode(v);
            let req = decode(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(req.acks, -1);
            assert_eq!(req.topics[0].name, "t");
            assert_eq!(req.topics[0].partitions[0].index, 2);
            assert_eq!(
                req.topics[0].partitions[0].records.as_deref(),
                Some(&b"abc"[..])
            );
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
            assert_eq!(acks(&Reader::new(bytes.clone()), v), Some(-1));
            assert_eq!(acks(&Reader::new(bytes.slice(..2)), v), None);
        }
    }
}
