//! ApiVersions: the registry's ranges, and Kafka's v0 fallback for versions we do not serve.

use bytes::BytesMut;
use tributary_protocol::header::{begin_response, finish_frame, RequestHeader};
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::api_versions;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, HandlerResult};

pub fn handle(spec: &ApiSpec, header: &RequestHeader, r: &mut Reader) -> HandlerResult {
    let v = header.api_version;
    // Clients may send newer v3 bodies with extra fields; Kafka ignores them, so do we.
    let _ = decode_all(r, |r| api_versions::decode(r, v));
    let mut out = BytesMut::new();
    let start = begin_response(
        &mut out,
        header.correlation_id,
        spec.response_header_flexible(v),
    );
    api_versions::encode_response(&mut out, v, ErrorCode::NONE);
    finish_frame(&mut out, start);
    Ok(Some(out.into()))
}

/// The answer to an ApiVersions request at a version we do not serve: v0 body, header v0,
/// UNSUPPORTED_VERSION, and the full list so the client can pick a version.
pub fn unsupported(correlation_id: i32) -> BytesMut {
    let mut out = BytesMut::new();
    let start = begin_response(&mut out, correlation_id, false);
    api_versions::encode_response(&mut out, 0, ErrorCode::UNSUPPORTED_VERSION);
    finish_frame(&mut out, start);
    out
}
