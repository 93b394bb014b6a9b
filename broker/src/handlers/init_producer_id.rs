//! InitProducerId: for idempotent producers a fresh producer id from the controller, epoch 0;
//! for transactional ids, the transaction coordinator's answer (`txn::init_producer_id`).

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdResponse, ProducerId};
use tracing::warn;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::init_producer_id;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, HandlerResult};
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| init_producer_id::decode(r, v))?;
    let resp = InitProducerIdResponse::default();
    if req.transactional_id.is_some() {
        return super::txn::init_producer_id(shard, spec, header, req, conn).await;
    }
    // An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
    // (KIP-679), as in Kafka.
    if !shard.allowed_on_cluster(conn, AclOperation::IdempotentWrite)
        && !shard.allowed_on_any(conn, AclOperation::Write, ResourceType::Topic)
    {
        return frame(
            spec,
            header,
            &resp
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code()),
        );
    }
    let allocated =
        crate::controller::ask(shard, |_, c| async move { c.allocate_producer_id().await }).await;
    let resp = match allocated {
        Some(Ok(id)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Some(Err(e)) => {
            warn!(error = %e, "producer id allocation failed");
            resp.with_error_code(ErrorCode::UNKNOWN_SERVER_ERROR.code())
        }
        None => resp.with_error_code(ErrorCode::UNKNOWN_SERVER_ERROR.code()),
    };
    frame(spec, header, &resp)
}
