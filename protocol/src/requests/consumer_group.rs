//! KIP-848's consumer group requests: ConsumerGroupHeartbeat (v0–v1), through which a member
//! joins, states its subscription, acknowledges revocations and receives its assignment, and
//! ConsumerGroupDescribe (v0–v1). Both are flexible from v0.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// A topic's partitions by topic id, as the heartbeat names what a member owns.
pub type OwnedPartitions = Vec<([u8; 16], Vec<i32>)>;

/// A ConsumerGroupHeartbeat. The nullable fields are `None` when unchanged since the member's
/// last heartbeat; a member sends them all when it joins (`member_epoch` 0) or rejoins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupHeartbeatRequest {
    pub group_id: String,
    /// Chosen by the client from v1 (KIP-1082); empty on a v0 join, when the coordinator
    /// chooses it.
    pub member_id: String,
    /// 0 joins, -1 leaves, -2 leaves as a static member that will come back; otherwise the
    /// epoch the member holds.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1 when unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    /// v1+.
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now.
    pub topic_partitions: Option<OwnedPartitions>,
}

pub fn decode_heartbeat(
    r: &mut Reader,
    v: i16,
) -> Result<ConsumerGroupHeartbeatRequest, DecodeError> {
    let flex = flexible(api_key::CONSUMER_GROUP_HEARTBEAT, v);
    let group_id = r.string("group_id", flex)?;
    let member_id = r.string("member_id", flex)?;
    let member_epoch = r.i32("member_epoch")?;
    let instance_id = r.nullable_string("instance_id", flex)?;
    let rack_id = r.nullable_string("rack_id", flex)?;
    let rebalance_timeout_ms = r.i32("rebalance_timeout_ms")?;
    let subscribed_topic_names = match r.array_len("subscribed_topic_names", flex, 1)? {
        None => None,
        Some(n) => {
            let mut names = Vec::with_capacity(n);
            for _ in 0..n {
                names.push(r.string("subscribed_topic_name", flex)?);
            }
            Some(names)
        }
    };
    let subscribed_topic_regex = if v >= 1 {
        r.nullable_string("subscribed_topic_regex", flex)?
    } else {
        None
    };
    let server_assignor = r.nullable_string("server_assignor", flex)?;
    let topic_partitions = owned_partitions(r, flex)?;
    r.tagged_fields(flex)?;
    Ok(ConsumerGroupHeartbeatRequest {
        group_id,
        member_id,
        member_epoch,
        instance_id,
        rack_id,
        rebalance_timeout_ms,
        subscribed_topic_names,
        subscribed_topic_regex,
        server_assignor,
        topic_partitions,
    })
}

fn owned_partitions(r: &mut Reader, flex: bool) -> Result<Option<OwnedPartitions>, DecodeError> {
    // Smallest element: a 16-byte id, an empty partition array, no tagged fields.
    let Some(n) = r.array_len("topic_partitions", flex, 18)? else {
        return Ok(None);
    };
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let topic_id = r.uuid("topic_id")?;
        let np = r.array_len_required("partitions", flex, 4)?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            partitions.push(r.i32("partition")?);
        }
        r.tagged_fields(flex)?;
        topics.push((topic_id, partitions));
    }
    Ok(Some(topics))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescribeRequest {
    pub group_ids: Vec<String>,
    pub include_authorized_operations: bool,
}

pub fn decode_describe(
    r: &mut Reader,
    v: i16,
) -> Result<ConsumerGroupDescribeRequest, DecodeError> {
    let flex = flexible(api_key::CONSUMER_GROUP_DESCRIBE, v);
    let n = r.array_len_required("group_ids", flex, 1)?;
    let mut group_ids = Vec::with_capacity(n);
    for _ in 0..n {
        group_ids.push(r.string("group_id", flex)?);
    }
    let include_authorized_operations = r.bool("include_authorized_operations")?;
    r.tagged_fields(flex)?;
    Ok(ConsumerGroupDescribeRequest {
        group_ids,
        include_authorized_operations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::consumer_group_describe_request as kd;
    use kafka_protocol::messages::consumer_group_heartbeat_request as kp;
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_string())
    }

    #[test]
    fn a_heartbeat_decodes_what_an_independent_encoder_writes() {
        let id = [7u8; 16];
        for v in 0..=1 {
            let req = kp::ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_member_id(s("m-1"))
                .with_member_epoch(3)
                .with_instance_id(Some(s("i")))
                .with_rack_id(None)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![TopicName(s("a")), TopicName(s("b"))]))
                .with_subscribed_topic_regex(if v >= 1 { Some(s("^c.*")) } else { None })
                .with_server_assignor(Some(s("uniform")))
                .with_topic_partitions(Some(vec![kp::TopicPartitions::default()
                    .with_topic_id(uuid::Uuid::from_bytes(id))
                    .with_partitions(vec![0, 2])]));
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode_heartbeat(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.member_id, "m-1");
            assert_eq!(got.member_epoch, 3);
            assert_eq!(got.instance_id.as_deref(), Some("i"));
            assert_eq!(got.rack_id, None);
            assert_eq!(
                got.subscribed_topic_names,
                Some(vec!["a".to_string(), "b".to_string()])
            );
            assert_eq!(
                got.subscribed_topic_regex.as_deref(),
                if v >= 1 { Some("^c.*") } else { None }
            );
            assert_eq!(got.server_assignor.as_deref(), Some("uniform"));
            assert_eq!(got.topic_partitions, Some(vec![(id, vec![0, 2])]));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_heartbeat(r, v));
        }
    }

    #[test]
    fn an_unchanged_heartbeat_carries_nulls() {
        let req = kp::ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_id(s("m"))
            .with_member_epoch(5)
            .with_rebalance_timeout_ms(-1)
            .with_subscribed_topic_names(None)
            .with_server_assignor(None)
            .with_topic_partitions(None);
        let mut b = BytesMut::new();
        req.encode(&mut b, 1).unwrap();
        let got = decode_heartbeat(&mut Reader::new(b.freeze()), 1).unwrap();
        assert_eq!(got.subscribed_topic_names, None);
        assert_eq!(got.topic_partitions, None);
        assert_eq!(got.rebalance_timeout_ms, -1);
    }

    #[test]
    fn a_describe_decodes_what_an_independent_encoder_writes() {
        for v in 0..=1 {
            let req = kd::ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(s("g1")), GroupId(s("g2"))])
                .with_include_authorized_operations(true);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode_describe(&mut Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.group_ids, vec!["g1".to_string(), "g2".to_string()]);
            assert!(got.include_authorized_operations);
            crate::requests::assert_prefixes_fail(&bytes, |r| decode_describe(r, v));
        }
    }
}
