//! One client connection: read a frame, decode its header, start the handler, and write the
//! responses strictly in request order, as Kafka does for each connection. A produce request may
//! wait to be durable while the next requests are read and started. Framing errors and
//! undecodable requests close this connection and nothing else.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;

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

/// Request bodies at least this large are read into recycled buffers. Safe Rust must initialise
/// a buffer before a socket read fills it; zero-filling a fresh megabyte for every produce
/// request, and faulting its pages in, cost the broker more CPU than anything on the produce
/// path but the copies themselves (perf, 1 KiB messages at ~550 MB/s: memset 9 %, page faults
/// and page clearing another 6 % of broker samples).
const FRAME_REUSE_MIN_BYTES: usize = 64 * 1024;
/// Recycled request buffers a connection keeps; each is at most `socket.request.max.bytes`.
const CONNECTION_SPARE_FRAMES_MAX: usize = 4;

/// Large request bodies whose requests have finished, kept initialised for the next ones.
#[derive(Default)]
struct SpareFrames(RefCell<Vec<Vec<u8>>>);

impl SpareFrames {
    /// A buffer of exactly `len` initialised bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        if len >= FRAME_REUSE_MIN_BYTES {
            if let Some(mut buf) = self.0.borrow_mut().pop() {
                // Only bytes beyond what the buffer held before are zero-filled.
                buf.resize(len, 0);
                return buf;
            }
        }
        vec![0u8; len]
    }

    /// A second handle on `body` when it is large enough to be recycled after its request.
    fn claim(&self, body: &Bytes) -> Option<Bytes> {
        (body.len() >= FRAME_REUSE_MIN_BYTES).then(|| body.clone())
    }

    /// Keeps a claimed body for reuse if nothing else still refers to it (a request forwarded
    /// to another shard may outlive its response by a moment; that one is let go).
    fn give_back(&self, claimed: Option<Bytes>) {
        let mut spare = self.0.borrow_mut();
        let Some(body) = claimed else { return };
        if spare.len() >= CONNECTION_SPARE_FRAMES_MAX {
            return;
        }
        if let Ok(buf) = body.try_into_mut() {
            spare.push(Vec::from(buf));
        }
    }
}

pub async fn serve_connection(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = futures::io::AsyncReadExt::split(stream);
    // Responses are written strictly in request order by this task; the reader below may run
    // ahead by up to CONNECTION_INFLIGHT_MAX requests while produce requests wait to be durable.
    let (tx, rx) =
        local_channel::new_bounded::<(PendingResponse, Option<Bytes>)>(CONNECTION_INFLIGHT_MAX);
    let closed = Rc::new(Cell::new(false));
    let spare = Rc::new(SpareFrames::default());
    let writer_task = {
        let shard = shard.clone();
        let closed = closed.clone();
        let peer = peer.clone();
        let spare = spare.clone();
        glommio::spawn_local(async move {
            while let Some((pending, claimed)) = rx.recv().await {
                let outcome = pending.await;
                shard.request_finished();
                spare.give_back(claimed);
                if closed.get() {
                    continue;
                }
                match outcome {
                    Ok(Some(frame)) => {
                        for piece in frame.pieces() {
                            if writer.write_all(piece).await.is_err() {
                                closed.set(true);
                                break;
                            }
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
        let mut body = spare.take(len);
        if reader.read_exact(&mut body).await.is_err() {
            debug!(%peer, "connection closed mid-frame");
            break;
        }
        shard.request_started();
        let body = Bytes::from(body);
        let claimed = spare.claim(&body);
        let pending = match handle_frame(&shard, body, &peer).await {
            Ok(p) => p,
            Err(reason) => Box::pin(futures::future::ready(Err(reason))),
        };
        if tx.send((pending, claimed)).await.is_err() {
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
            return Ok(Box::pin(futures::future::ready(Ok(Some(out.into())))));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_bodies_are_recycled_once_unreferenced() {
        let spare = SpareFrames::default();
        let body = Bytes::from(spare.take(FRAME_REUSE_MIN_BYTES * 2));
        let ptr = body.as_ptr();
        let claimed = spare.claim(&body);
        // Still referenced by the handler: let go, not recycled.
        let handler_copy = body.clone();
        drop(body);
        spare.give_back(claimed);
        assert!(spare.0.borrow().is_empty());

        let claimed = spare.claim(&handler_copy);
        drop(handler_copy);
        spare.give_back(claimed);
        // The next large frame reads into the same allocation, exactly as long as asked.
        let again = spare.take(FRAME_REUSE_MIN_BYTES + 7);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again.len(), FRAME_REUSE_MIN_BYTES + 7);
    }

    #[test]
    fn small_bodies_are_not_claimed_and_the_pool_is_bounded() {
        let spare = SpareFrames::default();
        let small = Bytes::from(spare.take(100));
        assert!(spare.claim(&small).is_none());
        for _ in 0..CONNECTION_SPARE_FRAMES_MAX + 3 {
            let body = Bytes::from(vec![1u8; FRAME_REUSE_MIN_BYTES]);
            let claimed = spare.claim(&body);
            drop(body);
            spare.give_back(claimed);
        }
        assert_eq!(spare.0.borrow().len(), CONNECTION_SPARE_FRAMES_MAX);
        // A recycled buffer holds old bytes; the caller reads over exactly `len` of them.
        assert_eq!(
            spare.take(FRAME_REUSE_MIN_BYTES).len(),
            FRAME_REUSE_MIN_BYTES
        );
    }
}
