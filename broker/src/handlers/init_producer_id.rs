//! InitProducerId: for idempotent producers a fresh producer id from the controller, epoch 0;
//! for transactional ids, the transaction coordinator's answer (`txn::init_producer_id`).

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdResponse, ProducerId};
use tracing::warn;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::init_producer_id;
use tributary_protocol::{ErrorCode, Reader};

use super::{decode_all, frame, HandlerResult};
use crate::routing::ShardId;
use crate::shard::{call, Shard, ShardRequest};

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| init_producer_id::decode(r, v))?;
    let resp = InitProducerIdResponse::default();
    if req.transactional_id.is_some() {
        return super::txn::init_producer_id(shard, spec, header, req).await;
    }
    let allocated = call(shard, ShardId(0), |reply| {
        ShardRequest::AllocateProducerId { reply }
    })
    .await;
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
