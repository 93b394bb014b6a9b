//! Request and response headers (KIP-482 header versions: request v1/v2, response v0/v1).

use bytes::{BufMut, BytesMut};

use crate::wire::{put_empty_tagged_fields, DecodeError, Reader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// The three fields every request header version starts with, readable before the header
/// version is known. Used to answer (or refuse) requests for APIs we do not serve.
pub fn peek_fixed(r: &Reader) -> Result<(i16, i16, i32), DecodeError> {
    let mut copy = r.clone();
    Ok((
        copy.i16("api key")?,
        copy.i16("api version")?,
        copy.i32("correlation id")?,
    ))
}

/// Reads a full request header. `flexible` selects header v2 (with tagged fields); the client id
/// is a classic nullable string in both versions.
pub fn decode_request_header(r: &mut Reader, flexible: bool) -> Result<RequestHeader, DecodeError> {
    let api_key = r.i16("api key")?;
    let api_version = r.i16("api version")?;
    let correlation_id = r.i32("correlation id")?;
    let client_id = r.nullable_string("client id", false)?;
    r.tagged_fields(flexible)?;
    Ok(RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
    })
}

/// Starts a response frame: a length placeholder and the response header. Call
/// [`finish_frame`] once the body is written.
pub fn begin_response(out: &mut BytesMut, correlation_id: i32, header_flexible: bool) -> usize {
    let start = out.len();
    out.put_i32(0);
    out.put_i32(correlation_id);
    put_empty_tagged_fields(out, header_flexible);
    start
}

/// Writes the frame length for a frame begun at `start`.
pub fn finish_frame(out: &mut BytesMut, start: usize) {
    let len = out.len() - start - 4;
    let len = i32::try_from(len).unwrap_or(i32::MAX);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::put_uvarint;

    #[test]
    fn header_v2_round_trip_and_truncation() {
        let mut b = BytesMut::new();
        b.put_i16(18);
        b.put_i16(3);
        b.put_i32(42);
        b.put_i16(7);
        b.put_slice(b"rdkafka");
        put_uvarint(&mut b, 0);
        let bytes = b.freeze();
        let h = decode_request_header(&mut Reader::new(bytes.clone()), true).unwrap();
        assert_eq!(h.correlation_id, 42);
        assert_eq!(h.client_id.as_deref(), Some("rdkafka"));
        for cut in 0..bytes.len() {
            assert!(decode_request_header(&mut Reader::new(bytes.slice(..cut)), true).is_err());
        }
    }

    #[test]
    fn response_frame_length() {
        let mut out = BytesMut::new();
        let start = begin_response(&mut out, 7, true);
        out.put_i16(0);
        finish_frame(&mut out, start);
        assert_eq!(&out[..4], &7i32.to_be_bytes());
        assert_eq!(out.len(), 11);
    }
}
