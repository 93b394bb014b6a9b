//! The `__consumer_offsets` records of KIP-848 consumer groups, in Apache Kafka's schemas: a key
//! is an int16 record type and a non-flexible struct; a value is an int16 version (0) and a
//! flexible struct; a null value is a tombstone.
//!
//! | type | key | value |
//! |---|---|---|
//! | 3 | ConsumerGroupMetadataKey {group} | {epoch} |
//! | 5 | ConsumerGroupMemberMetadataKey {group, member} | {instance, rack, client id and host, subscribed names, regex, rebalance timeout, assignor} |
//! | 6 | ConsumerGroupTargetAssignmentMetadataKey {group} | {assignment epoch} |
//! | 7 | ConsumerGroupTargetAssignmentMemberKey {group, member} | {partitions by topic id} |
//! | 8 | ConsumerGroupCurrentMemberAssignmentKey {group, member} | {member epoch, previous epoch, state, assigned, pending revocation} |
//!
//! Types 4 (partition metadata, which Kafka 4.1 no longer writes) and 16 (resolved regexes) are
//! read as [`ConsumerKey::Other`]: this broker writes neither and recomputes both.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{put_array_len, put_empty_tagged_fields, put_string, DecodeError, Reader};

/// Partitions by topic id.
pub type TopicPartitionIds = Vec<([u8; 16], Vec<i32>)>;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerKey {
    Metadata {
        group: String,
    },
    Member {
        group: String,
        member: String,
    },
    TargetMetadata {
        group: String,
    },
    Target {
        group: String,
        member: String,
    },
    Current {
        group: String,
        member: String,
    },
    /// A consumer-group record type this broker does not keep (4, 16), for `group`.
    Other {
        record_type: i16,
        group: String,
    },
}

/// The record types a key decodes to a [`ConsumerKey`].
pub const CONSUMER_KEY_TYPES: std::ops::RangeInclusive<i16> = 3..=16;

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
    out.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

impl ConsumerKey {
    pub fn group(&self) -> &str {
        match self {
            ConsumerKey::Metadata { group }
            | ConsumerKey::Member { group, .. }
            | ConsumerKey::TargetMetadata { group }
            | ConsumerKey::Target { group, .. }
            | ConsumerKey::Current { group, .. }
            | ConsumerKey::Other { group, .. } => group,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        let (record_type, member) = match self {
            ConsumerKey::Metadata { .. } => (3, None),
            ConsumerKey::Member { member, .. } => (5, Some(member)),
            ConsumerKey::TargetMetadata { .. } => (6, None),
            ConsumerKey::Target { member, .. } => (7, Some(member)),
            ConsumerKey::Current { member, .. } => (8, Some(member)),
            ConsumerKey::Other { record_type, .. } => (*record_type, None),
        };
        out.put_i16(record_type);
        put_str(&mut out, self.group());
        if let Some(m) = member {
            put_str(&mut out, m);
        }
        out.freeze()
    }

    /// The key after its record type (`record_type`, one of [`CONSUMER_KEY_TYPES`]).
    pub fn decode_body(record_type: i16, r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group_id", false)?;
        let mut member = || r.string("member_id", false);
        Ok(match record_type {
            3 => ConsumerKey::Metadata { group },
            5 => ConsumerKey::Member {
                member: member()?,
                group,
            },
            6 => ConsumerKey::TargetMetadata { group },
            7 => ConsumerKey::Target {
                member: member()?,
                group,
            },
            8 => ConsumerKey::Current {
                member: member()?,
                group,
            },
            t => ConsumerKey::Other {
                record_type: t,
                group,
            },
        })
    }
}

/// Type 5's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadataValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Tagged field 0: set for a member of the classic protocol in a consumer group.
    pub classic: Option<ClassicMemberMetadata>,
}

/// A classic member's own part of its type 5 value (`ClassicMemberMetadata`, a nullable struct
/// in tagged field 0): its JoinGroup's session timeout and protocols, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    pub supported_protocols: Vec<(String, Bytes)>,
}

impl ClassicMemberMetadata {
    fn encode(&self, out: &mut BytesMut) {
        out.put_i32(self.session_timeout_ms);
        put_array_len(out, self.supported_protocols.len(), true);
        for (name, metadata) in &self.supported_protocols {
            put_string(out, name, true);
            crate::wire::put_nullable_bytes_len(out, Some(metadata.len()), true);
            out.put_slice(metadata);
            put_empty_tagged_fields(out, true);
        }
        put_empty_tagged_fields(out, true);
    }

    /// The struct after its nullable marker.
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let session_timeout_ms = r.i32("session_timeout_ms")?;
        // A protocol is at least a name length, a metadata length and a tag count.
        let n = r.array_len_required("supported_protocols", true, 3)?;
        let mut supported_protocols = Vec::with_capacity(n);
        for _ in 0..n {
            let name = r.string("protocol name", true)?;
            let metadata = r
                .nullable_bytes("protocol metadata", true)?
                .ok_or_else(|| r.malformed("protocol metadata", "null metadata"))?;
            r.tagged_fields(true)?;
            supported_protocols.push((name, metadata));
        }
        r.tagged_fields(true)?;
        Ok(ClassicMemberMetadata {
            session_timeout_ms,
            supported_protocols,
        })
    }
}

/// The tagged fields of a type 5 value: tag 0 is the classic member metadata, any other tag is
/// skipped as Kafka skips tags it does not know.
fn member_tags(r: &mut Reader) -> Result<Option<ClassicMemberMetadata>, DecodeError> {
    let mut classic = None;
    let count = r.uvarint("tagged field count")?;
    for _ in 0..count {
        let tag = r.uvarint("tag")?;
        let size = r.uvarint("tagged field size")? as usize;
        let field = r.bytes("tagged field", size)?;
        if tag != 0 {
            continue;
        }
        let mut f = Reader::new(field);
        // KIP-893's nullable struct: an int8, -1 null, 1 present.
        classic = match f.i8("classic member metadata marker")? {
            -1 => None,
            _ => Some(ClassicMemberMetadata::decode(&mut f)?),
        };
    }
    Ok(classic)
}

/// Type 8's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's `MemberState`: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS.
    pub state: i8,
    pub assigned: TopicPartitionIds,
    pub pending_revocation: TopicPartitionIds,
}

fn put_nullable(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s, true),
        None => crate::wire::put_uvarint(out, 0),
    }
}

fn put_partitions(out: &mut BytesMut, ps: &TopicPartitionIds) {
    put_array_len(out, ps.len(), true);
    for (id, parts) in ps {
        out.put_slice(id);
        put_array_len(out, parts.len(), true);
        for p in parts {
            out.put_i32(*p);
        }
        put_empty_tagged_fields(out, true);
    }
}

fn partitions(r: &mut Reader, what: &'static str) -> Result<TopicPartitionIds, DecodeError> {
    let n = r.array_len_required(what, true, 18)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.uuid("topic_id")?;
        let np = r.array_len_required("partitions", true, 4)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32("partition")?);
        }
        r.tagged_fields(true)?;
        out.push((id, ps));
    }
    Ok(out)
}

/// Reads a value's version (0 for every consumer-group value) and hands back the reader.
fn value_reader(bytes: Bytes) -> Result<Reader, DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.i16("value version")?;
    if version != 0 {
        return Err(r.malformed("value version", format!("unknown value version {version}")));
    }
    Ok(r)
}

/// The value of type 3 (group epoch) or 6 (assignment epoch): one epoch.
pub fn encode_epoch(epoch: i32) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    out.put_i32(epoch);
    put_empty_tagged_fields(&mut out, true);
    out.freeze()
}

pub fn decode_epoch(bytes: Bytes) -> Result<i32, DecodeError> {
    let mut r = value_reader(bytes)?;
    let epoch = r.i32("epoch")?;
    r.tagged_fields(true)?;
    Ok(epoch)
}

/// The value of type 7: a member's target partitions.
pub fn encode_target(ps: &TopicPartitionIds) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    put_partitions(&mut out, ps);
    put_empty_tagged_fields(&mut out, true);
    out.freeze()
}

pub fn decode_target(bytes: Bytes) -> Result<TopicPartitionIds, DecodeError> {
    let mut r = value_reader(bytes)?;
    let ps = partitions(&mut r, "topic_partitions")?;
    r.tagged_fields(true)?;
    Ok(ps)
}

impl MemberMetadataValue {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        put_nullable(&mut out, self.instance_id.as_deref());
        put_nullable(&mut out, self.rack_id.as_deref());
        put_string(&mut out, &self.client_id, true);
        put_string(&mut out, &self.client_host, true);
        put_array_len(&mut out, self.subscribed_topic_names.len(), true);
        for t in &self.subscribed_topic_names {
            put_string(&mut out, t, true);
        }
        put_nullable(&mut out, self.subscribed_topic_regex.as_deref());
        out.put_i32(self.rebalance_timeout_ms);
        put_nullable(&mut out, self.server_assignor.as_deref());
        match &self.classic {
            None => put_empty_tagged_fields(&mut out, true),
            Some(c) => {
                let mut field = BytesMut::new();
                c.encode(&mut field);
                crate::wire::put_uvarint(&mut out, 1);
                crate::wire::put_uvarint(&mut out, 0);
                // The struct's size plus its one-byte nullable marker.
                crate::wire::put_uvarint(
                    &mut out,
                    u32::try_from(field.len() + 1).unwrap_or(u32::MAX),
                );
                out.put_i8(1);
                out.put_slice(&field);
            }
        }
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = value_reader(bytes)?;
        let instance_id = r.nullable_string("instance_id", true)?;
        let rack_id = r.nullable_string("rack_id", true)?;
        let client_id = r.string("client_id", true)?;
        let client_host = r.string("client_host", true)?;
        let n = r.array_len_required("subscribed_topic_names", true, 1)?;
        let mut subscribed_topic_names = Vec::with_capacity(n);
        for _ in 0..n {
            subscribed_topic_names.push(r.string("subscribed_topic_name", true)?);
        }
        let subscribed_topic_regex = r.nullable_string("subscribed_topic_regex", true)?;
        let rebalance_timeout_ms = r.i32("rebalance_timeout_ms")?;
        let server_assignor = r.nullable_string("server_assignor", true)?;
        let classic = member_tags(&mut r)?;
        Ok(MemberMetadataValue {
            instance_id,
            rack_id,
            client_id,
            client_host,
            subscribed_topic_names,
            subscribed_topic_regex,
            rebalance_timeout_ms,
            server_assignor,
            classic,
        })
    }
}

impl CurrentAssignmentValue {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i32(self.member_epoch);
        out.put_i32(self.previous_member_epoch);
        out.put_i8(self.state);
        put_partitions(&mut out, &self.assigned);
        put_partitions(&mut out, &self.pending_revocation);
        put_empty_tagged_fields(&mut out, true);
        out.freeze()
    }

    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = value_reader(bytes)?;
        let member_epoch = r.i32("member_epoch")?;
        let previous_member_epoch = r.i32("previous_member_epoch")?;
        let state = r.i8("state")?;
        let assigned = partitions(&mut r, "assigned_partitions")?;
        let pending_revocation = partitions(&mut r, "partitions_pending_revocation")?;
        r.tagged_fields(true)?;
        Ok(CurrentAssignmentValue {
            member_epoch,
            previous_member_epoch,
            state,
            assigned,
            pending_revocation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes_fail<T: std::fmt::Debug>(
        bytes: &Bytes,
        f: impl Fn(Bytes) -> Result<T, DecodeError>,
    ) {
        for cut in 0..bytes.len() {
            assert!(f(bytes.slice(..cut)).is_err(), "prefix {cut} decoded");
        }
    }

    #[test]
    fn keys_round_trip() {
        for key in [
            ConsumerKey::Metadata { group: "g".into() },
            ConsumerKey::Member {
                group: "g".into(),
                member: "m".into(),
            },
            ConsumerKey::TargetMetadata { group: "g".into() },
            ConsumerKey::Target {
                group: "g".into(),
                member: "m".into(),
            },
            ConsumerKey::Current {
                group: "g".into(),
                member: "m".into(),
            },
        ] {
            let bytes = key.encode();
            let mut r = Reader::new(bytes.clone());
            let t = r.i16("type").unwrap();
            assert!(CONSUMER_KEY_TYPES.contains(&t));
            assert_eq!(ConsumerKey::decode_body(t, &mut r).unwrap(), key);
        }
    }

    #[test]
    fn values_round_trip_and_every_prefix_fails() {
        let m = MemberMetadataValue {
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "b".into()],
            subscribed_topic_regex: Some("x.*".into()),
            rebalance_timeout_ms: 300_000,
            server_assignor: Some("uniform".into()),
            classic: None,
        };
        let b = m.encode();
        assert_eq!(MemberMetadataValue::decode(b.clone()).unwrap(), m);
        prefixes_fail(&b, MemberMetadataValue::decode);
        // A classic member's value carries its metadata in tagged field 0.
        let classic = MemberMetadataValue {
            classic: Some(ClassicMemberMetadata {
                session_timeout_ms: 45_000,
                supported_protocols: vec![
                    (
                        "cooperative-sticky".into(),
                        Bytes::from_static(b"\x00\x03sub"),
                    ),
                    ("range".into(), Bytes::new()),
                ],
            }),
            ..m.clone()
        };
        let b = classic.encode();
        assert_eq!(MemberMetadataValue::decode(b.clone()).unwrap(), classic);
        prefixes_fail(&b, MemberMetadataValue::decode);
        // Byte by byte, the tagged section as Kafka's generated code writes it: one field, tag
        // 0, size (struct + 1), the nullable marker 1, session timeout, a compact array of one.
        let one = MemberMetadataValue {
            classic: Some(ClassicMemberMetadata {
                session_timeout_ms: 10,
                supported_protocols: vec![("r".into(), Bytes::from_static(b"m"))],
            }),
            ..m.clone()
        };
        let bytes = one.encode();
        let plain = m.encode();
        let tail: &[u8] = &[1, 0, 12, 1, 0, 0, 0, 10, 2, 2, b'r', 2, b'm', 0, 0];
        assert_eq!(&bytes[plain.len() - 1..], tail);
        // An unknown tag is skipped.
        let mut unknown = BytesMut::from(&plain[..plain.len() - 1]);
        unknown.put_slice(&[1, 5, 2, 0xaa, 0xbb]);
        assert_eq!(MemberMetadataValue::decode(unknown.freeze()).unwrap(), m);
        let c = CurrentAssignmentValue {
            member_epoch: 4,
            previous_member_epoch: 3,
            state: 1,
            assigned: vec![([1; 16], vec![0, 2])],
            pending_revocation: vec![([1; 16], vec![1])],
        };
        let b = c.encode();
        assert_eq!(CurrentAssignmentValue::decode(b.clone()).unwrap(), c);
        prefixes_fail(&b, CurrentAssignmentValue::decode);
        let t = vec![([2; 16], vec![5])];
        let b = encode_target(&t);
        assert_eq!(decode_target(b.clone()).unwrap(), t);
        prefixes_fail(&b, decode_target);
        assert_eq!(decode_epoch(encode_epoch(7)).unwrap(), 7);
        prefixes_fail(&encode_epoch(7), decode_epoch);
    }
}
