//! Records of the internal `__consumer_offsets` topic, in Apache Kafka's own key/value schemas
//! (`OffsetCommitKey` v1 / `OffsetCommitValue` v3, `GroupMetadataKey` v2 / `GroupMetadataValue`
//! v3), so the topic reads the same as Kafka's. A null value is a tombstone.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// A KIP-848 consumer group's record (types 3–16).
    Consumer(crate::consumer_group_records::ConsumerKey),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
    out.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

fn put_nullable_str(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
    out.put_slice(b);
}

impl GroupKey {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        match self {
            GroupKey::Offset {
                group,
                topic,
                partition,
            } => {
                out.put_i16(1);
                put_str(&mut out, group);
                put_str(&mut out, topic);
                out.put_i32(*partition);
            }
            GroupKey::Group { group } => {
                out.put_i16(2);
                put_str(&mut out, group);
            }
            GroupKey::Consumer(key) => return key.encode(),
        }
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        match r.i16("key version")? {
            0 | 1 => Ok(GroupKey::Offset {
                group: r.string("group", false)?,
                topic: r.string("topic", false)?,
                partition: r.i32("partition")?,
            }),
            2 => Ok(GroupKey::Group {
                group: r.string("group", false)?,
            }),
            t if crate::consumer_group_records::CONSUMER_KEY_TYPES.contains(&t) => {
                Ok(GroupKey::Consumer(
                    crate::consumer_group_records::ConsumerKey::decode_body(t, &mut r)?,
                ))
            }
            v => Err(r.malformed(
                "key version",
                format!("unknown __consumer_offsets key version {v}"),
            )),
        }
    }
}

impl OffsetValue {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(3);
        out.put_i64(self.offset);
        out.put_i32(self.leader_epoch);
        put_str(&mut out, &self.metadata);
        out.put_i64(self.commit_timestamp_ms);
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.i16("value version")?;
        let offset = r.i64("offset")?;
        let leader_epoch = if version >= 3 {
            r.i32("leader_epoch")?
        } else {
            -1
        };
        let metadata = r.string("metadata", false)?;
        let commit_timestamp_ms = r.i64("commit_timestamp")?;
        Ok(OffsetValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
        })
    }
}

impl GroupValue {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(3);
        put_str(&mut out, &self.protocol_type);
        out.put_i32(self.generation);
        put_nullable_str(&mut out, self.protocol.as_deref());
        put_nullable_str(&mut out, self.leader.as_deref());
        out.put_i64(self.current_state_timestamp_ms);
        out.put_i32(i32::try_from(self.members.len()).unwrap_or(i32::MAX));
        for m in &self.members {
            put_str(&mut out, &m.member_id);
            put_nullable_str(&mut out, m.group_instance_id.as_deref());
            put_str(&mut out, &m.client_id);
            put_str(&mut out, &m.client_host);
            out.put_i32(m.rebalance_timeout_ms);
            out.put_i32(m.session_timeout_ms);
            put_bytes(&mut out, &m.subscription);
            put_bytes(&mut out, &m.assignment);
        }
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.i16("value version")?;
        let protocol_type = r.string("protocol_type", false)?;
        let generation = r.i32("generation")?;
        let protocol = r.nullable_string("protocol", false)?;
        let leader = r.nullable_string("leader", false)?;
        let current_state_timestamp_ms = if version >= 2 {
            r.i64("current_state_timestamp")?
        } else {
            -1
        };
        let n = r.array_len_required("members", false, 20)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            let member_id = r.string("member_id", false)?;
            let group_instance_id = if version >= 3 {
                r.nullable_string("group_instance_id", false)?
            } else {
                None
            };
            let client_id = r.string("client_id", false)?;
            let client_host = r.string("client_host", false)?;
            let rebalance_timeout_ms = if version >= 1 {
                r.i32("rebalance_timeout")?
            } else {
                -1
            };
            let session_timeout_ms = r.i32("session_timeout")?;
            let subscription = r.nullable_bytes("subscription", false)?.unwrap_or_default();
            let assignment = r.nullable_bytes("assignment", false)?.unwrap_or_default();
            members.push(MemberValue {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        Ok(GroupValue {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp_ms,
            members,
        })
    }
}

/// Topics named in a consumer-protocol subscription (`ConsumerProtocolSubscription`: version,
/// then an array of topic names). Anything unreadable yields no topics.
pub fn subscription_topics(metadata: &[u8]) -> Vec<String> {
    let mut r = Reader::new(Bytes::copy_from_slice(metadata));
    let mut out = Vec::new();
    if r.i16("version").is_err() {
        return out;
    }
    let Ok(n) = r.array_len_required("topics", false, 2) else {
        return out;
    };
    for _ in 0..n {
        match r.string("topic", false) {
            Ok(t) => out.push(t),
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let k = GroupKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
        };
        assert_eq!(GroupKey::decode(k.encode()).unwrap(), k);
        let k = GroupKey::Group { group: "g".into() };
        assert_eq!(GroupKey::decode(k.encode()).unwrap(), k);
        let v = OffsetValue {
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp_ms: 7,
        };
        assert_eq!(OffsetValue::decode(v.encode()).unwrap(), v);
        let g = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 9,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                subscription: Bytes::from_static(b"s"),
                assignment: Bytes::from_static(b"a"),
            }],
        };
        let bytes = g.encode();
        assert_eq!(GroupValue::decode(bytes.clone()).unwrap(), g);
        for cut in 0..bytes.len() {
            assert!(GroupValue::decode(bytes.slice(..cut)).is_err());
        }
    }

    #[test]
    fn subscription() {
        let mut b = BytesMut::new();
        b.put_i16(1);
        b.put_i32(2);
        put_str(&mut b, "a");
        put_str(&mut b, "b");
        assert_eq!(subscription_topics(&b), vec!["a", "b"]);
        assert!(subscription_topics(&[0xff]).is_empty());
    }
}
