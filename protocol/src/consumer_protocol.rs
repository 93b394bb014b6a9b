//! The consumer protocol a classic group of protocol type "consumer" carries inside JoinGroup and
//! SyncGroup: a member's `ConsumerProtocolSubscription` (JoinGroup's protocol metadata) and its
//! `ConsumerProtocolAssignment` (SyncGroup's assignment), Kafka's schemas, versions 0–3. Each is
//! an int16 version followed by a non-flexible struct:
//!
//! ```text
//! Subscription v0: topics [string], user_data nullable bytes
//!              v1: + owned_partitions [{topic string, partitions [int32]}]
//!              v2: + generation_id int32          v3: + rack_id nullable string
//! Assignment v0–3: assigned_partitions [{topic string, partitions [int32]}], user_data nullable bytes
//! ```
//!
//! A version above 3 is read as 3, as Kafka's `ConsumerProtocol` reads one from a newer client:
//! later versions only append fields. Counts are checked against the bytes present before
//! anything is allocated for them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{DecodeError, Reader};

/// The highest version of either struct this codec knows.
pub const CONSUMER_PROTOCOL_VERSION_MAX: i16 = 3;

/// Partitions by topic name.
pub type NamedPartitions = Vec<(String, Vec<i32>)>;

/// A member's subscription, as a classic consumer sends it in JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The version it was written at (not capped).
    pub version: i16,
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// v1+: what a cooperative member still owns while it rejoins.
    pub owned_partitions: NamedPartitions,
    /// v2+: the generation it last synced at, -1 when unknown.
    pub generation_id: i32,
    /// v3+.
    pub rack_id: Option<String>,
}

fn version(r: &mut Reader) -> Result<(i16, i16), DecodeError> {
    let v = r.i16("version")?;
    if v < 0 {
        return Err(r.malformed("version", format!("negative version {v}")));
    }
    Ok((v, v.min(CONSUMER_PROTOCOL_VERSION_MAX)))
}

fn partitions(r: &mut Reader, what: &'static str) -> Result<NamedPartitions, DecodeError> {
    // A topic entry is at least a 2-byte name length and a 4-byte count.
    let n = r.array_len_required(what, false, 6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = r.string("topic", false)?;
        let np = r.array_len_required("partitions", false, 4)?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32("partition")?);
        }
        out.push((topic, ps));
    }
    Ok(out)
}

fn put_str(out: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    out.put_i16(len as i16);
    out.put_slice(&s.as_bytes()[..len]);
}

fn put_partitions(out: &mut BytesMut, ps: &NamedPartitions) {
    out.put_i32(ps.len() as i32);
    for (topic, parts) in ps {
        put_str(out, topic);
        out.put_i32(parts.len() as i32);
        for p in parts {
            out.put_i32(*p);
        }
    }
}

fn put_nullable_bytes(out: &mut BytesMut, b: Option<&Bytes>) {
    match b {
        Some(b) => {
            out.put_i32(b.len() as i32);
            out.put_slice(b);
        }
        None => out.put_i32(-1),
    }
}

impl Subscription {
    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let (written, v) = version(&mut r)?;
        let n = r.array_len_required("topics", false, 2)?;
        let mut topics = Vec::with_capacity(n);
        for _ in 0..n {
            topics.push(r.string("topic", false)?);
        }
        let user_data = r.nullable_bytes("user_data", false)?;
        let owned_partitions = if v >= 1 {
            partitions(&mut r, "owned_partitions")?
        } else {
            Vec::new()
        };
        let generation_id = if v >= 2 { r.i32("generation_id")? } else { -1 };
        let rack_id = if v >= 3 {
            r.nullable_string("rack_id", false)?
        } else {
            None
        };
        Ok(Subscription {
            version: written,
            topics,
            user_data,
            owned_partitions,
            generation_id,
            rack_id,
        })
    }

    /// Written at `self.version` capped to the highest known.
    pub fn encode(&self) -> Bytes {
        let v = self.version.clamp(0, CONSUMER_PROTOCOL_VERSION_MAX);
        let mut out = BytesMut::new();
        out.put_i16(v);
        out.put_i32(self.topics.len() as i32);
        for t in &self.topics {
            put_str(&mut out, t);
        }
        put_nullable_bytes(&mut out, self.user_data.as_ref());
        if v >= 1 {
            put_partitions(&mut out, &self.owned_partitions);
        }
        if v >= 2 {
            out.put_i32(self.generation_id);
        }
        if v >= 3 {
            match &self.rack_id {
                Some(rack) => put_str(&mut out, rack),
                None => out.put_i16(-1),
            }
        }
        out.freeze()
    }
}

/// A member's assignment at `version` (capped to the highest known), without user data: what a
/// coordinator that assigns itself hands a classic member in SyncGroup.
pub fn encode_assignment(version: i16, assigned: &NamedPartitions) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(version.clamp(0, CONSUMER_PROTOCOL_VERSION_MAX));
    put_partitions(&mut out, assigned);
    put_nullable_bytes(&mut out, None);
    out.freeze()
}

/// The partitions of an assignment; an empty one (a member that joined and never synced) is
/// none. The user data is not kept.
pub fn decode_assignment(bytes: Bytes) -> Result<NamedPartitions, DecodeError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(bytes);
    version(&mut r)?;
    let assigned = partitions(&mut r, "assigned_partitions")?;
    r.nullable_bytes("user_data", false)?;
    Ok(assigned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(version: i16) -> Subscription {
        Subscription {
            version,
            topics: vec!["a".into(), "bb".into()],
            user_data: Some(Bytes::from_static(b"u")),
            owned_partitions: if version >= 1 {
                vec![("a".into(), vec![0, 2])]
            } else {
                Vec::new()
            },
            generation_id: if version >= 2 { 7 } else { -1 },
            rack_id: (version >= 3).then(|| "r1".to_string()),
        }
    }

    #[test]
    fn subscriptions_round_trip_at_every_version_and_every_prefix_fails() {
        for v in 0..=3 {
            let s = sub(v);
            let bytes = s.encode();
            assert_eq!(Subscription::decode(bytes.clone()).unwrap(), s);
            for cut in 0..bytes.len() {
                assert!(
                    Subscription::decode(bytes.slice(..cut)).is_err(),
                    "v{v} {cut}"
                );
            }
        }
    }

    #[test]
    fn a_subscription_written_by_hand_from_kafkas_schema_decodes() {
        // A cooperative member's v3 subscription to topic "t", owning partition 1, generation
        // 4, no rack, byte by byte (independent of the encoder above).
        let bytes: &[u8] = &[
            0, 3, // version
            0, 0, 0, 1, 0, 1, b't', // topics ["t"]
            255, 255, 255, 255, // user_data null
            0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 1, // owned t[1]
            0, 0, 0, 4, // generation 4
            255, 255, // rack null
        ];
        let s = Subscription::decode(Bytes::from_static(bytes)).unwrap();
        assert_eq!(s.topics, vec!["t"]);
        assert_eq!(s.owned_partitions, vec![("t".to_string(), vec![1])]);
        assert_eq!((s.generation_id, s.rack_id), (4, None));
    }

    #[test]
    fn a_newer_version_is_read_as_the_highest_known_and_counts_are_checked() {
        let mut b = BytesMut::from(&sub(3).encode()[..]);
        b[1] = 9;
        b.put_slice(b"future fields");
        let s = Subscription::decode(b.freeze()).unwrap();
        assert_eq!((s.version, s.rack_id.as_deref()), (9, Some("r1")));
        // A count of two billion topics in ten bytes is refused before any allocation.
        let huge: &[u8] = &[0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'x', 0];
        assert!(Subscription::decode(Bytes::from_static(huge)).is_err());
        assert!(Subscription::decode(Bytes::from_static(&[0xff, 0xff])).is_err());
    }

    #[test]
    fn assignments_round_trip_and_empty_is_none() {
        let a = vec![("t".to_string(), vec![0, 3]), ("u".to_string(), vec![1])];
        for v in [0, 1, 3, 5] {
            let bytes = encode_assignment(v, &a);
            assert_eq!(bytes[1] as i16, v.min(3));
            assert_eq!(decode_assignment(bytes.clone()).unwrap(), a);
            for cut in 1..bytes.len() {
                assert!(decode_assignment(bytes.slice(..cut)).is_err(), "{cut}");
            }
        }
        assert_eq!(decode_assignment(Bytes::new()).unwrap(), Vec::new());
    }
}
