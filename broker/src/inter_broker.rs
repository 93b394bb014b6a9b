//! Requests one broker sends another over the Kafka protocol — a follower's Fetch, a
//! coordinator's WriteTxnMarkers — on a plain TCP connection: finding the broker's address in
//! the image, connecting with a bound, framing a request with its header, and reading the one
//! response that answers it, with the frame size checked before the buffer is allocated.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::catalog::Catalog;

/// A connection attempt that takes longer fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where broker `id` takes requests, from the image.
pub fn broker_addr(catalog: &Catalog, id: i32) -> Option<SocketAddr> {
    let b = catalog.brokers.get(&id)?;
    (b.host.as_str(), b.port).to_socket_addrs().ok()?.next()
}

/// Connects to `addr` within [`CONNECT_TIMEOUT`], with TCP_NODELAY.
pub async fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let stream = glommio::timer::timeout(CONNECT_TIMEOUT, async {
        TcpStream::connect(addr)
            .await
            .map_err(|e| glommio::GlommioError::IoError(std::io::Error::other(e.to_string())))
    })
    .await
    .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// `req` as one request frame: length prefix, header (request header v2 for flexible
/// versions, v1 otherwise) and body.
pub fn encode<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    client_id: &str,
    req: &R,
) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut body = BytesMut::new();
    // Encoding a message built from valid fields into memory does not fail.
    let _ = header.encode(&mut body, key.request_header_version(version));
    let _ = req.encode(&mut body, version);
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    frame.freeze()
}

/// Sends `request` and reads its response: an error for a frame over `frame_max` bytes, a
/// response to another request, or bytes left after the response.
pub async fn exchange<S: Decodable>(
    stream: &mut TcpStream,
    request: &[u8],
    key: ApiKey,
    version: i16,
    correlation: i32,
    frame_max: usize,
) -> Result<S, String> {
    stream.write_all(request).await.map_err(|e| e.to_string())?;
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .await
        .map_err(|e| e.to_string())?;
    let len = i32::from_be_bytes(len);
    let len = usize::try_from(len).map_err(|_| format!("negative response length {len}"))?;
    if len > frame_max {
        return Err(format!("response of {len} bytes exceeds {frame_max}"));
    }
    let mut buf = vec![0u8; len];
    stream
        .read_exact(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = Bytes::from(buf);
    let header = ResponseHeader::decode(&mut bytes, key.response_header_version(version))
        .map_err(|e| e.to_string())?;
    if header.correlation_id != correlation {
        return Err(format!(
            "response to request {} while {correlation} was awaited",
            header.correlation_id
        ));
    }
    let resp = S::decode(&mut bytes, version).map_err(|e| e.to_string())?;
    if bytes.has_remaining() {
        return Err(format!("{} bytes after the response", bytes.remaining()));
    }
    Ok(resp)
}
