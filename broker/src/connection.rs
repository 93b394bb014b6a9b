//! One client connection: read a frame, decode its header, run the handler, write the response —
//! strictly one request at a time, as Kafka processes each connection in order. Framing errors
//! and undecodable requests close this connection and nothing else.

use std::rc::Rc;

use bytes::Bytes;
use std::cell::Cell;

use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use tracing::{debug, warn};
use tributary_protocol::frame::{request_frame_length, FRAME_PREFIX_BYTES};
use tributary_protocol::header::{decode_request_header, peek_fixed};
use tributary_protocol::registry::{self, api_key};
use tributary_protocol::Reader;

use crate::handlers;
use crate::handlers::PendingResponse;
use crate::shard::Shard;

/// Responses a connection may owe before it stops reading requests (backpressure).
pub const CONNECTION_INFLIGHT_MAX: usize = 64;

pub async fn serve_connection(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = futures::io::AsyncReadExt::split(stream);
    // Responses are written strictly in request order by this task; the reader below may run
    // ahead by up to CONNECTION_INFLIGHT_MAX requests while produce requests wait to be durable.
    let (tx, rx) = local_channel::new_bounded::<PendingResponse>(CONNECTION_INFLIGHT_MAX);
    let closed = Rc::new(Cell::new(false));
    let writer_task = {
        let shard = shard.clone();
        let closed = closed.clone();
        let peer = peer.clone();
        glommio::spawn_local(async move {
            while let Some(pending) = rx.recv().await {
                let outcome = pending.await;
                shard.request_finished();
                if closed.get() {
                    continue;
                }
                match outcome {
                    Ok(Some(out)) => {
                        if writer.write_all(&out).await.is_err() {
                            closed.set(true);
                        }
                    }
                    Ok(None) => {}
                    Err(reason) => {
                        warn!(%peer, %reason, "closing connection");
                        closed.set(true);
                        let _ = writer.close().await;
                    }
                }
            }
        })
        .detach()
    };
    loop {
        if closed.get() {
            break;
        }
        let mut prefix = [0u8; FRAME_PREFIX_BYTES];
        if reader.read_exact(&mut prefix).await.is_err() {
            break;
        }
        let len = match request_frame_length(prefix, shard.config.socket_request_max_bytes) {
            Ok(len) => len,
            Err(e) => {
                warn!(%peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).await.is_err() {
            debug!(%peer, "connection closed mid-frame");
            break;
        }
        shard.request_started();
        let pending = match handle_frame(&shard, Bytes::from(body), &peer).await {
            Ok(p) => p,
            Err(reason) => Box::pin(futures::future::ready(Err(reason))),
        };
        if tx.send(pending).await.is_err() {
            break;
        }
        if shard.draining.get() {
            break;
        }
    }
    drop(tx);
    let _ = writer_task.await;
}

/// Decodes one request and starts it. The returned future yields the response frame (`None`
/// when none is due, as for acks=0); `Err` closes the connection.
pub async fn handle_frame(
    shard: &Rc<Shard>,
    body: Bytes,
    peer: &str,
) -> Result<PendingResponse, String> {
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
            let out = handlers::api_versions::unsupported(correlation_id);
            return Ok(Box::pin(futures::future::ready(Ok(Some(out)))));
        }
        return Err(format!(
            "{} v{version} is not supported (supported v{}-v{})",
            spec.name, spec.min_version, spec.max_version
        ));
    }
    let header = decode_request_header(&mut r, spec.request_header_flexible(version))
        .map_err(|e| e.to_string())?;
    let name = spec.name;
    let pending = handlers::dispatch(shard, spec, &header, r, peer)
        .await
        .map_err(|e| format!("{name} v{version}: {e}"))?;
    // Errors of the pending part (e.g. a response that cannot be encoded) are labelled too.
    Ok(Box::pin(async move {
        pending.await.map_err(|e| format!("{name} v{version}: {e}"))
    }))
}
