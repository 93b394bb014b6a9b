//! One handler per Kafka API. Each decodes its request with `tributary_protocol`, decides, asks
//! the owning shards for partition work, and encodes one response frame.

pub mod acls;
pub mod alter_configs;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod describe_quorum;
pub mod elect_leaders;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod produce;
pub mod quotas;
pub mod scram;
pub mod txn;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use bytes::BytesMut;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tributary_protocol::frame::ResponseFrame;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::response::encode_frame;
use tributary_protocol::Reader;

use crate::shard::Shard;

/// The response frame, in pieces (record bytes are sent from the buffers they were read into);
/// `None` when none is due.
pub type HandlerResult = Result<Option<ResponseFrame>, String>;

/// A response still being worked on: resolves to the response frame (`None` when none is due).
pub type PendingResponse = Pin<Box<dyn Future<Output = HandlerResult>>>;

/// Starts one request. Produce returns while its appends wait to be durable, so the connection
/// can read on; every other API is handled to the end here, one request at a time, as Kafka does.
/// Who sent a request: the peer's address and the listener it connected to (brokers'
/// endpoints are answered on that listener).
#[derive(Debug, Clone, Copy)]
pub struct Conn<'a> {
    pub peer: &'a str,
    pub listener: &'a str,
    /// Who authenticated on the connection (`User:NAME`; `User:ANONYMOUS` without SASL).
    pub principal: &'a str,
    /// Set by a handler whose request put the client over a quota: the connection reads
    /// nothing more for this long after queueing the response (KIP-219).
    pub throttle: &'a std::cell::Cell<std::time::Duration>,
    /// The follower whose fetches the connection carries, once one came.
    pub link: &'a crate::replica::ReplicaLink,
}

pub async fn dispatch(
    shard: &Rc<Shard>,
    spec: &'static ApiSpec,
    header: &RequestHeader,
    mut r: Reader,
    conn: Conn<'_>,
) -> Result<PendingResponse, String> {
    let v = header.api_version;
    let client_id = header.client_id.as_deref();
    // KIP-124: a request under a request_percentage quota is timed — the shard time its
    // handler takes — and past the quota its response carries the throttle and the connection
    // holds back. Without a quota nothing more is done.
    let quota = shard.request_quota(conn, (spec.key, v), client_id, &r);
    if spec.key == api_key::PRODUCE {
        let Some(percent) = quota else {
            return produce::start(shard, spec, header, &mut r, conn).await;
        };
        let start = std::pin::pin!(produce::start(shard, spec, header, &mut r, conn));
        let (pending, busy) = crate::quota::Busy::new(start).await;
        let pending = pending?;
        let throttle = shard.record_request_time(conn, client_id, percent, busy);
        if throttle.is_zero() {
            return Ok(pending);
        }
        return Ok(Box::pin(async move {
            let frame = pending.await?;
            Ok(frame.map(|f| crate::quota::with_throttle_time(spec, v, f, throttle)))
        }));
    }
    let result = match quota {
        None => handle(shard, spec, header, &mut r, conn).await,
        Some(percent) => {
            let handled = std::pin::pin!(handle(shard, spec, header, &mut r, conn));
            let (result, busy) = crate::quota::Busy::new(handled).await;
            let throttle = shard.record_request_time(conn, client_id, percent, busy);
            match result {
                Ok(Some(frame)) if !throttle.is_zero() => Ok(Some(
                    crate::quota::with_throttle_time(spec, v, frame, throttle),
                )),
                other => other,
            }
        }
    };
    Ok(Box::pin(std::future::ready(result)))
}

async fn handle(
    shard: &Rc<Shard>,
    spec: &'static ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    if let Some(refused) = cluster_gate(shard, spec, header, conn) {
        return refused;
    }
    match spec.key {
        api_key::API_VERSIONS => api_versions::handle(spec, header, r),
        api_key::METADATA => metadata::handle(shard, spec, header, r, conn).await,
        api_key::FETCH => fetch::handle(shard, spec, header, r, conn).await,
        api_key::LIST_OFFSETS => list_offsets::handle(shard, spec, header, r, conn).await,
        api_key::CREATE_TOPICS => create_topics::handle(shard, spec, header, r, conn).await,
        api_key::CREATE_PARTITIONS => create_partitions::handle(shard, spec, header, r, conn).await,
        api_key::ELECT_LEADERS => elect_leaders::handle(shard, spec, header, r).await,
        api_key::DESCRIBE_QUORUM => describe_quorum::handle(shard, spec, header, r).await,
        api_key::ALTER_PARTITION_REASSIGNMENTS => {
            partition_reassignments::handle_alter(shard, spec, header, r).await
        }
        api_key::LIST_PARTITION_REASSIGNMENTS => {
            partition_reassignments::handle_list(shard, spec, header, r)
        }
        api_key::DESCRIBE_LOG_DIRS => describe_log_dirs::handle(shard, spec, header, r).await,
        api_key::OFFSET_FOR_LEADER_EPOCH => {
            offset_for_leader_epoch::handle(shard, spec, header, r, conn).await
        }
        api_key::DELETE_TOPICS => delete_topics::handle(shard, spec, header, r, conn).await,
        api_key::DELETE_RECORDS => delete_records::handle(shard, spec, header, r, conn).await,
        api_key::INIT_PRODUCER_ID => init_producer_id::handle(shard, spec, header, r, conn).await,
        api_key::ADD_PARTITIONS_TO_TXN
        | api_key::ADD_OFFSETS_TO_TXN
        | api_key::END_TXN
        | api_key::TXN_OFFSET_COMMIT
        | api_key::WRITE_TXN_MARKERS
        | api_key::DESCRIBE_TRANSACTIONS
        | api_key::LIST_TRANSACTIONS
        | api_key::DESCRIBE_PRODUCERS => txn::handle(shard, spec, header, r, conn).await,
        api_key::DESCRIBE_CONFIGS => describe_configs::handle(shard, spec, header, r, conn),
        api_key::DESCRIBE_CLUSTER => {
            describe_cluster::handle(shard, spec, header, r, conn.listener).await
        }
        api_key::DESCRIBE_CLIENT_QUOTAS | api_key::ALTER_CLIENT_QUOTAS => {
            quotas::handle(shard, spec, header, r, conn).await
        }
        api_key::CREATE_ACLS | api_key::DESCRIBE_ACLS | api_key::DELETE_ACLS => {
            acls::handle(shard, spec, header, r, conn).await
        }
        api_key::DESCRIBE_USER_SCRAM_CREDENTIALS | api_key::ALTER_USER_SCRAM_CREDENTIALS => {
            scram::handle(shard, spec, header, r, conn).await
        }
        api_key::FIND_COORDINATOR
        | api_key::JOIN_GROUP
        | api_key::SYNC_GROUP
        | api_key::HEARTBEAT
        | api_key::LEAVE_GROUP
        | api_key::OFFSET_COMMIT
        | api_key::OFFSET_FETCH
        | api_key::LIST_GROUPS
        | api_key::DESCRIBE_GROUPS
        | api_key::DELETE_GROUPS
        | api_key::OFFSET_DELETE => groups::handle(shard, spec, header, r, conn).await,
        api_key::ALTER_CONFIGS | api_key::INCREMENTAL_ALTER_CONFIGS => {
            alter_configs::handle(shard, spec, header, r, conn).await
        }
        other => Err(format!(
            "API key {other} v{v} is registered but has no handler"
        )),
    }
}

/// Proposes a metadata command a handler decided (ACLs, quotas, SCRAM credentials) through the
/// controller's shard; its outcome as a code and message.
pub(crate) async fn propose_metadata(
    shard: &Rc<Shard>,
    cmd: crate::cluster::command::MetadataCommand,
) -> (tributary_protocol::ErrorCode, Option<String>) {
    use crate::shard::{call, ShardRequest};
    call(shard, crate::routing::ShardId(0), |reply| {
        ShardRequest::ProposeMetadata {
            command: Box::new(cmd),
            reply,
        }
    })
    .await
    .unwrap_or((
        tributary_protocol::ErrorCode::UNKNOWN_SERVER_ERROR,
        Some("the controller shard did not answer".into()),
    ))
}

/// The cluster-wide administrative APIs need an operation on the cluster resource, as in
/// Kafka (ALTER to change, DESCRIBE to look): refused whole with CLUSTER_AUTHORIZATION_FAILED.
fn cluster_gate(
    shard: &Rc<Shard>,
    spec: &'static ApiSpec,
    header: &RequestHeader,
    conn: Conn<'_>,
) -> Option<HandlerResult> {
    use kafka_protocol::messages::*;
    use tributary_security::acl::AclOperation;
    shard.authorizer()?;
    let op = match spec.key {
        api_key::ELECT_LEADERS | api_key::ALTER_PARTITION_REASSIGNMENTS => AclOperation::Alter,
        api_key::LIST_PARTITION_REASSIGNMENTS
        | api_key::DESCRIBE_QUORUM
        | api_key::DESCRIBE_LOG_DIRS
        | api_key::DESCRIBE_CLUSTER => AclOperation::Describe,
        _ => return None,
    };
    if shard.allowed_on_cluster(conn, op) {
        return None;
    }
    let code = tributary_protocol::ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
    let msg = Some(str_bytes(&format!(
        "Cluster authorization failed: {} on the cluster is needed",
        op.name()
    )));
    Some(match spec.key {
        api_key::ELECT_LEADERS => frame(
            spec,
            header,
            &ElectLeadersResponse::default().with_error_code(code),
        ),
        api_key::ALTER_PARTITION_REASSIGNMENTS => frame(
            spec,
            header,
            &AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(msg),
        ),
        api_key::LIST_PARTITION_REASSIGNMENTS => frame(
            spec,
            header,
            &ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(msg),
        ),
        api_key::DESCRIBE_QUORUM => frame(
            spec,
            header,
            &DescribeQuorumResponse::default()
                .with_error_code(code)
                .with_error_message(msg),
        ),
        api_key::DESCRIBE_LOG_DIRS => frame(
            spec,
            header,
            &DescribeLogDirsResponse::default().with_error_code(code),
        ),
        _ => frame(
            spec,
            header,
            &DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(msg),
        ),
    })
}

pub(crate) fn frame<M: Encodable>(
    spec: &ApiSpec,
    header: &RequestHeader,
    body: &M,
) -> HandlerResult {
    let mut out = BytesMut::new();
    encode_frame(
        &mut out,
        spec,
        header.api_version,
        header.correlation_id,
        body,
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(out.into()))
}

/// Authorized operations as Kafka answers them when no authorizer runs: every operation that
/// applies to the resource type (`AclEntry.supportedOperations`), as a bit field over
/// `AclOperation` codes — READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
/// CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
pub(crate) mod authorized_operations {
    const fn bits(codes: &[u8]) -> i32 {
        let mut out = 0;
        let mut i = 0;
        while i < codes.len() {
            out |= 1 << codes[i];
            i += 1;
        }
        out
    }

    /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
    pub const TOPIC: i32 = bits(&[3, 4, 5, 6, 7, 8, 10, 11]);
    /// CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
    pub const CLUSTER: i32 = bits(&[5, 7, 8, 9, 10, 11, 12]);
    /// READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (Kafka 4's group configs).
    pub const GROUP: i32 = bits(&[3, 6, 8, 10, 11]);
    /// The value when the client did not ask.
    pub const NOT_REQUESTED: i32 = i32::MIN;

    /// `ops` when the client asked for them, else [`NOT_REQUESTED`].
    pub fn when(asked: bool, ops: i32) -> i32 {
        if asked {
            ops
        } else {
            NOT_REQUESTED
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn bit_fields_match_kafkas() {
            assert_eq!(super::TOPIC, 3576);
            assert_eq!(super::CLUSTER, 8096);
            assert_eq!(super::GROUP, 3400);
        }
    }
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Decodes a request body. Bytes after the last field are ignored, as Kafka ignores them:
/// librdkafka, for one, sends Metadata v9+ "all topics" requests with a 4-byte placeholder where
/// a 1-byte null array length belongs.
pub(crate) fn decode_all<T>(
    r: &mut Reader,
    decode: impl FnOnce(&mut Reader) -> Result<T, tributary_protocol::DecodeError>,
) -> Result<T, String> {
    decode(r).map_err(|e| e.to_string())
}
