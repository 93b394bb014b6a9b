//! DescribeCluster: the live brokers, the cluster id, and this broker as the controller to talk to.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use kafka_protocol::messages::BrokerId;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_cluster;
use tributary_protocol::Reader;

use super::{decode_all, frame, str_bytes, HandlerResult};
use crate::shard::Shard;

pub fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_cluster::decode(r, v))?;
    let cfg = &shard.config;
    let catalog = shard.catalog();
    let brokers = catalog
        .live_brokers()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(i32::from(b.port))
        })
        .collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&catalog.cluster_id))
        .with_controller_id(BrokerId(cfg.node_id))
        .with_brokers(brokers);
    if v >= 1 {
        resp = resp.with_endpoint_type(req.endpoint_type);
    }
    resp = resp.with_cluster_authorized_operations(super::authorized_operations::when(
        req.include_cluster_authorized_operations,
        super::authorized_operations::CLUSTER,
    ));
    frame(spec, header, &resp)
}
