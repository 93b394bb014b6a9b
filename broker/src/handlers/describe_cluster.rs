//! DescribeCluster: the live brokers, the cluster id, and the controller to talk to — the active
//! controller when it is a live broker (combined nodes), this broker otherwise (a
//! controller-only leader serves no clients, and any broker takes admin requests, as KRaft
//! brokers answer). Asked for controller endpoints (KIP-919), a broker answers
//! MISMATCHED_ENDPOINT_TYPE, as Kafka's do.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use kafka_protocol::messages::BrokerId;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_cluster;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, HandlerResult};
use crate::shard::Shard;

/// KIP-919's `EndpointType` for controllers.
const CONTROLLER_ENDPOINT: i8 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    listener: &str,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_cluster::decode(r, v))?;
    let cfg = &shard.config;
    if v >= 1 && req.endpoint_type == CONTROLLER_ENDPOINT {
        let resp = DescribeClusterResponse::default()
            .with_error_code(ErrorCode::MISMATCHED_ENDPOINT_TYPE.code())
            .with_error_message(Some(str_bytes(
                "this is a broker endpoint; send controller requests (endpoint type 2) to a controller, or ask for brokers (endpoint type 1)",
            )))
            .with_endpoint_type(req.endpoint_type);
        return frame(spec, header, &resp);
    }
    let status =
        crate::controller::ask(shard, |s, c| async move { c.quorum_status(&s.config) }).await;
    let catalog = shard.catalog();
    let controller = status
        .and_then(|s| s.leader)
        .filter(|id| catalog.live_brokers().any(|b| b.id == *id))
        .unwrap_or(cfg.node_id);
    let brokers = catalog
        .live_brokers()
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&catalog.cluster_id))
        .with_controller_id(BrokerId(controller))
        .with_brokers(brokers);
    if v >= 1 {
        resp = resp.with_endpoint_type(req.endpoint_type);
    }
    resp = resp.with_cluster_authorized_operations(super::common::authorized_operations::when(
        req.include_cluster_authorized_operations,
        super::common::authorized_operations::CLUSTER,
    ));
    frame(spec, header, &resp)
}
