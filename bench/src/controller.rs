//! Which node is the active controller, asked with a raw DescribeCluster v0 request: librdkafka
//! has no call that returns a cluster's controller, and `failover --fault controller-…` needs
//! it. Plain TCP to one PLAINTEXT listener (the bench's own cluster has no other kind).
//!
//! Encoding and decoding are plain functions over bytes (`kafka-protocol` builds the messages),
//! unit-tested without a broker; only `controller_at` touches a socket, with bounded timeouts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// v0: every Tributary and Kafka broker that has DescribeCluster answers it, and its
/// `controller_id` is the field wanted.
const DESCRIBE_CLUSTER_VERSION: i16 = 0;
/// The largest response read; a three-node cluster's answer is a few hundred bytes, so more is
/// a corrupt length or a peer that is not a broker.
const RESPONSE_BYTES_MAX: usize = 1 << 20;
/// The bench asks one question per connection.
const CORRELATION: i32 = 1;

/// A DescribeCluster v0 request as a whole frame, its 4-byte length first.
pub fn describe_cluster_frame() -> Result<Vec<u8>> {
    let key = ApiKey::DescribeCluster;
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(DESCRIBE_CLUSTER_VERSION)
        .with_correlation_id(CORRELATION)
        .with_client_id(Some(StrBytes::from_static_str("tributary-bench")));
    let mut body = BytesMut::new();
    header
        .encode(
            &mut body,
            key.request_header_version(DESCRIBE_CLUSTER_VERSION),
        )
        .map_err(|e| anyhow!("encoding the DescribeCluster header: {e}"))?;
    DescribeClusterRequest::default()
        .encode(&mut body, DESCRIBE_CLUSTER_VERSION)
        .map_err(|e| anyhow!("encoding DescribeCluster: {e}"))?;
    let len = i32::try_from(body.len()).context("DescribeCluster request too long")?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The `controller_id` of a DescribeCluster v0 response (the frame's contents, after its
/// length); an error code in the response is an error.
pub fn controller_of(response: Vec<u8>) -> Result<i32> {
    let key = ApiKey::DescribeCluster;
    let mut buf = Bytes::from(response);
    let header = ResponseHeader::decode(
        &mut buf,
        key.response_header_version(DESCRIBE_CLUSTER_VERSION),
    )
    .map_err(|e| anyhow!("malformed DescribeCluster response header: {e}"))?;
    if header.correlation_id != CORRELATION {
        bail!(
            "the broker answered request {} instead of DescribeCluster",
            header.correlation_id
        );
    }
    let resp = DescribeClusterResponse::decode(&mut buf, DESCRIBE_CLUSTER_VERSION)
        .map_err(|e| anyhow!("malformed DescribeCluster response: {e}"))?;
    if resp.error_code != 0 {
        bail!(
            "DescribeCluster failed with error code {}{}",
            resp.error_code,
            resp.error_message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"))
        );
    }
    Ok(resp.controller_id.0)
}

/// Asks the node at `addr` which node is the active controller. A frozen node accepts the
/// connection (the kernel does) but never answers, so the read is bounded by `timeout` too.
pub fn controller_at(addr: SocketAddr, timeout: Duration) -> Result<i32> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr} for DescribeCluster"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(&describe_cluster_frame()?)
        .with_context(|| format!("sending DescribeCluster to {addr}"))?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .with_context(|| format!("reading the DescribeCluster answer of {addr}"))?;
    let len = usize::try_from(i32::from_be_bytes(len))
        .ok()
        .filter(|n| *n <= RESPONSE_BYTES_MAX)
        .with_context(|| {
            format!(
                "{addr} sent a DescribeCluster answer length over {RESPONSE_BYTES_MAX} bytes or \
                 negative; is it a Kafka listener?"
            )
        })?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .with_context(|| format!("reading the DescribeCluster answer of {addr}"))?;
    controller_of(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;

    fn response_bytes(correlation: i32, resp: &DescribeClusterResponse) -> Vec<u8> {
        let key = ApiKey::DescribeCluster;
        let mut b = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation)
            .encode(&mut b, key.response_header_version(0))
            .unwrap();
        resp.encode(&mut b, 0).unwrap();
        b.to_vec()
    }

    #[test]
    fn the_request_frame_is_a_describe_cluster_v0() {
        let frame = describe_cluster_frame().unwrap();
        let len = i32::from_be_bytes(frame[..4].try_into().unwrap());
        assert_eq!(len as usize, frame.len() - 4);
        let mut body = Bytes::from(frame[4..].to_vec());
        let header =
            RequestHeader::decode(&mut body, ApiKey::DescribeCluster.request_header_version(0))
                .unwrap();
        assert_eq!(header.request_api_key, ApiKey::DescribeCluster as i16);
        assert_eq!(header.request_api_version, 0);
        assert_eq!(header.correlation_id, CORRELATION);
        DescribeClusterRequest::decode(&mut body, 0).unwrap();
        assert!(body.is_empty());
    }

    #[test]
    fn the_controller_id_is_read_from_the_response() {
        let resp = DescribeClusterResponse::default().with_controller_id(BrokerId(3));
        assert_eq!(
            controller_of(response_bytes(CORRELATION, &resp)).unwrap(),
            3
        );
    }

    #[test]
    fn an_error_another_answer_or_a_short_response_is_refused() {
        let failed = DescribeClusterResponse::default().with_error_code(31);
        assert!(controller_of(response_bytes(CORRELATION, &failed)).is_err());
        let ok = DescribeClusterResponse::default().with_controller_id(BrokerId(1));
        assert!(controller_of(response_bytes(CORRELATION + 1, &ok)).is_err());
        let full = response_bytes(CORRELATION, &ok);
        for n in 0..full.len() {
            assert!(controller_of(full[..n].to_vec()).is_err(), "prefix {n}");
        }
    }
}
