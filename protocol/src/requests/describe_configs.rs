//! DescribeConfigs request (v1–v4).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// Kafka 4's consumer group configs (KIP-848).
pub const RESOURCE_GROUP: i8 = 32;

#[derive(Debug, Clone)]
pub struct DescribeConfigsRequest {
    pub resources: Vec<ConfigResource>,
    pub include_synonyms: bool,
    pub include_documentation: bool,
}

#[derive(Debug, Clone)]
pub struct ConfigResource {
    pub resource_type: i8,
    pub resource_name: String,
    /// `None` asks for every key.
    pub configuration_keys: Option<Vec<String>>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<DescribeConfigsRequest, DecodeError> {
    let flex = flexible(api_key::DESCRIBE_CONFIGS, version);
    let n = r.array_len_required("resources", flex, 4)?;
    let mut resources = Vec::with_capacity(n);
    for _ in 0..n {
        let resource_type = r.i8("resource_type")?;
        let resource_name = r.string("resource_name", flex)?;
        let configuration_keys = match r.array_len("configuration_keys", flex, 1)? {
            None => None,
            Some(k) => {
                let mut keys = Vec::with_capacity(k);
                for _ in 0..k {
                    keys.push(r.string("configuration key", flex)?);
                }
                Some(keys)
            }
        };
        r.tagged_fields(flex)?;
        resources.push(ConfigResource {
            resource_type,
            resource_name,
            configuration_keys,
        });
    }
    let include_synonyms = r.bool("include_synonyms")?;
    let include_documentation = if version >= 3 {
        r.bool("include_documentation")?
    } else {
        false
    };
    r.tagged_fields(flex)?;
    Ok(DescribeConfigsRequest {
        resources,
        include_synonyms,
        include_documentation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_configs_request as kp;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 1..=4 {
            let req = kp::DescribeConfigsRequest::default().with_resources(vec![
                kp::DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(StrBytes::from_static_str("t"))
                    .with_configuration_keys(None),
            ]);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.resources[0].resource_name, "t");
            assert!(got.resources[0].configuration_keys.is_none());
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
