//! AlterConfigs (v0–2) and IncrementalAlterConfigs (v0–1) requests.

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// IncrementalAlterConfigs operations.
pub const OP_SET: i8 = 0;
pub const OP_DELETE: i8 = 1;
pub const OP_APPEND: i8 = 2;
pub const OP_SUBTRACT: i8 = 3;

#[derive(Debug, Clone)]
pub struct AlterConfigsRequest {
    pub resources: Vec<AlterResource>,
    pub validate_only: bool,
    /// AlterConfigs replaces every override of a resource; IncrementalAlterConfigs edits them.
    pub incremental: bool,
}

#[derive(Debug, Clone)]
pub struct AlterResource {
    pub resource_type: i8,
    pub resource_name: String,
    /// (name, operation, value); AlterConfigs entries are all `OP_SET`.
    pub configs: Vec<(String, i8, Option<String>)>,
}

pub fn decode(r: &mut Reader, api: i16, v: i16) -> Result<AlterConfigsRequest, DecodeError> {
    let flex = flexible(api, v);
    let incremental = api == api_key::INCREMENTAL_ALTER_CONFIGS;
    let n = r.array_len_required("resources", flex, 4)?;
    let mut resources = Vec::with_capacity(n);
    for _ in 0..n {
        let resource_type = r.i8("resource_type")?;
        let resource_name = r.string("resource_name", flex)?;
        let nc = r.array_len_required("configs", flex, 2)?;
        let mut configs = Vec::with_capacity(nc);
        for _ in 0..nc {
            let name = r.string("config name", flex)?;
            let op = if incremental {
                r.i8("config_operation")?
            } else {
                OP_SET
            };
            let value = r.nullable_string("config value", flex)?;
            r.tagged_fields(flex)?;
            configs.push((name, op, value));
        }
        r.tagged_fields(flex)?;
        resources.push(AlterResource {
            resource_type,
            resource_name,
            configs,
        });
    }
    let validate_only = r.bool("validate_only")?;
    r.tagged_fields(flex)?;
    Ok(AlterConfigsRequest {
        resources,
        validate_only,
        incremental,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{
        alter_configs_request as ac, incremental_alter_configs_request as iac,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn both_forms_decode() {
        for v in 0..=2 {
            let req = ac::AlterConfigsRequest::default().with_resources(vec![
                ac::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t"))
                    .with_configs(vec![ac::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_static_str("1000")))]),
            ]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut Reader::new(bytes.clone()), api_key::ALTER_CONFIGS, v).unwrap();
            assert_eq!(got.resources[0].configs[0].2.as_deref(), Some("1000"));
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, api_key::ALTER_CONFIGS, v));
        }
        for v in 0..=1 {
            let req = iac::IncrementalAlterConfigsRequest::default().with_resources(vec![
                iac::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t"))
                    .with_configs(vec![iac::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_config_operation(OP_DELETE)
                        .with_value(None)]),
            ]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(
                &mut Reader::new(bytes.clone()),
                api_key::INCREMENTAL_ALTER_CONFIGS,
                v,
            )
            .unwrap();
            assert_eq!(got.resources[0].configs[0].1, OP_DELETE);
            crate::requests::assert_prefixes_fail(&bytes, |r| {
                decode(r, api_key::INCREMENTAL_ALTER_CONFIGS, v)
            });
        }
    }
}
