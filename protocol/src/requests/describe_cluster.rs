//! DescribeCluster request (v0–v1).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct DescribeClusterRequest {
    pub include_cluster_authorized_operations: bool,
    pub endpoint_type: i8,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DescribeClusterRequest, DecodeError> {
    let flex = flexible(api_key::DESCRIBE_CLUSTER, version);
    let include_cluster_authorized_operations = r.bool("include_cluster_authorized_operations")?;
    let endpoint_type = if version >= 1 {
        r.i8("endpoint_type")?
    } else {
        1
    };
    r.tagged_fields(flex)?;
    Ok(DescribeClusterRequest {
        include_cluster_authorized_operations,
        endpoint_type,
    })
}
