//! ApiVersions request (v0–v3) and its response, which is built from the registry.

use bytes::{BufMut, BytesMut};

use super::flexible;
use crate::registry::{api_key, SUPPORTED_APIS};
use crate::wire::{put_array_len, put_empty_tagged_fields, DecodeError, Reader};
use crate::ErrorCode;

#[derive(Debug, Clone, Default)]
pub struct ApiVersionsRequest {
    pub client_software_name: Option<String>,
    pub client_software_version: Option<String>,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<ApiVersionsRequest, DecodeError> {
    let flex = flexible(api_key::API_VERSIONS, version);
    if version < 3 {
        return Ok(ApiVersionsRequest::default());
    }
    let client_software_name = Some(r.string("client_software_name", flex)?);
    let client_software_version = Some(r.string("client_software_version", flex)?);
    r.tagged_fields(flex)?;
    Ok(ApiVersionsRequest {
        client_software_name,
        client_software_version,
    })
}

/// Writes an ApiVersions response body at `version`. An unsupported request version is answered
/// with `version = 0` and `UNSUPPORTED_VERSION`, as Kafka does, so any client can read it.
pub fn encode_response(out: &mut BytesMut, version: i16, error: ErrorCode) {
    let flex = flexible(api_key::API_VERSIONS, version);
    out.put_i16(error.code());
    put_array_len(out, SUPPORTED_APIS.len(), flex);
    for api in SUPPORTED_APIS {
        out.put_i16(api.key);
        out.put_i16(api.min_version);
        out.put_i16(api.max_version);
        put_empty_tagged_fields(out, flex);
    }
    if version >= 1 {
        out.put_i32(0); // throttle_time_ms
    }
    // v3 may carry SupportedFeatures / FinalizedFeatures as tagged fields; we send none.
    put_empty_tagged_fields(out, flex);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn response_parses_with_an_independent_decoder() {
        for v in 0..=3 {
            let mut out = BytesMut::new();
            encode_response(&mut out, v, ErrorCode::NONE);
            let mut bytes = out.freeze();
            let resp = ApiVersionsResponse::decode(&mut bytes, v).unwrap();
            assert_eq!(resp.api_keys.len(), SUPPORTED_APIS.len());
            assert_eq!(bytes.len(), 0);
        }
    }

    #[test]
    fn v3_request_prefixes_fail() {
        let mut b = BytesMut::new();
        crate::wire::put_string(&mut b, "librdkafka", true);
        crate::wire::put_string(&mut b, "2.0.2", true);
        b.put_u8(0);
        let bytes = b.freeze();
        let req = decode(&mut Reader::new(bytes.clone()), 3).unwrap();
        assert_eq!(req.client_software_name.as_deref(), Some("librdkafka"));
        crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, 3));
    }
}
