//! One handler per Kafka API. Each decodes its request with `tributary_protocol`, decides, asks
//! the owning shards for partition work, and encodes one response frame.

pub mod acls;
pub mod alter_configs;
pub mod api_versions;
pub mod common;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
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

use std::rc::Rc;

use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::Reader;

use crate::shard::Shard;

pub(crate) use common::{frame, str_bytes};
pub use common::{HandlerResult, PendingResponse};

/// Starts one request. Produce returns while its appends wait to be durable, so the connection
/// can read on; every other API is handled to the end here, one request at a time, as Kafka does.
pub use crate::conn::Conn;

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
        api_key::CONSUMER_GROUP_HEARTBEAT => {
            consumer_group_heartbeat::handle(shard, spec, header, r, conn).await
        }
        api_key::CONSUMER_GROUP_DESCRIBE => {
            consumer_group_describe::handle(shard, spec, header, r, conn).await
        }
        api_key::ALTER_CONFIGS | api_key::INCREMENTAL_ALTER_CONFIGS => {
            alter_configs::handle(shard, spec, header, r, conn).await
        }
        other => Err(format!(
            "API key {other} v{v} is registered but has no handler"
        )),
    }
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
