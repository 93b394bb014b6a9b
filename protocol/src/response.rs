//! Encoding control-plane responses built with `kafka-protocol` structs into whole frames.

use bytes::BytesMut;
use kafka_protocol::protocol::Encodable;

use crate::header::{begin_response, finish_frame};
use crate::registry::ApiSpec;

#[derive(Debug, thiserror::Error)]
#[error("encoding {api} v{version} response: {detail}")]
pub struct EncodeError {
    pub api: &'static str,
    pub version: i16,
    pub detail: String,
}

/// Writes one response frame: length, header (v0 or v1 as the API and version require), body.
pub fn encode_frame<M: Encodable>(
    out: &mut BytesMut,
    spec: &ApiSpec,
    version: i16,
    correlation_id: i32,
    body: &M,
) -> Result<(), EncodeError> {
    let start = begin_response(out, correlation_id, spec.response_header_flexible(version));
    body.encode(out, version).map_err(|e| EncodeError {
        api: spec.name,
        version,
        detail: e.to_string(),
    })?;
    finish_frame(out, start);
    Ok(())
}
