//! One client connection: read a frame, decode its header, run the handler, write the response —
//! strictly one request at a time, as Kafka processes each connection in order. Framing errors
//! and undecodable requests close this connection and nothing else.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tracing::{debug, warn};
use tributary_protocol::frame::{request_frame_length, FRAME_PREFIX_BYTES};
use tributary_protocol::header::{decode_request_header, peek_fixed};
use tributary_protocol::registry::{self, api_key};
use tributary_protocol::Reader;

use crate::handlers;
use crate::shard::Shard;

pub async fn serve_connection(shard: Rc<Shard>, mut stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = stream.set_nodelay(true);
    loop {
        let mut prefix = [0u8; FRAME_PREFIX_BYTES];
        if stream.read_exact(&mut prefix).await.is_err() {
            return;
        }
        let len = match request_frame_length(prefix, shard.config.socket_request_max_bytes) {
            Ok(len) => len,
            Err(e) => {
                warn!(%peer, error = %e, "closing connection: bad frame");
                return;
            }
        };
        let mut body = vec![0u8; len];
        if stream.read_exact(&mut body).await.is_err() {
            debug!(%peer, "connection closed mid-frame");
            return;
        }
        shard.request_started();
        let outcome = handle_frame(&shard, Bytes::from(body), &peer).await;
        shard.request_finished();
        match outcome {
            Ok(Some(out)) => {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(reason) => {
                warn!(%peer, %reason, "closing connection");
                return;
            }
        }
        if shard.draining.get() {
            return;
        }
    }
}

/// Decodes and dispatches one request. `Ok(None)` means no response is due (acks=0);
/// `Err` closes the connection.
pub async fn handle_frame(
    shard: &Rc<Shard>,
    body: Bytes,
    peer: &str,
) -> Result<Option<BytesMut>, String> {
    let mut r = Reader::new(body);
    let (key, version, correlation_id) = peek_fixed(&r).map_err(|e| e.to_string())?;
    let Some(spec) = registry::lookup(key) else {
        return Err(format!(
            "unknown API key {key} (correlation id {correlation_id})"
        ));
    };
    if !spec.supports(version) {
        if key == api_key::API_VERSIONS {
            // Kafka's rule: answer in v0 with UNSUPPORTED_VERSION and our ranges, so the client
            // can retry with a version we serve.
            return Ok(Some(handlers::api_versions::unsupported(correlation_id)));
        }
        return Err(format!(
            "{} v{version} is not supported (supported v{}-v{})",
            spec.name, spec.min_version, spec.max_version
        ));
    }
    let header = decode_request_header(&mut r, spec.request_header_flexible(version))
        .map_err(|e| e.to_string())?;
    handlers::dispatch(shard, spec, &header, r, peer)
        .await
        .map_err(|e| format!("{} v{version}: {e}", spec.name))
}
