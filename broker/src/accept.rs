//! Accepting connections until the shard drains, for every listener a shard serves: the
//! client listeners (`server`) and the metrics endpoint (`metrics::http`). It decides nothing
//! about a connection; admission and serving stay with the caller.

use std::time::Duration;

use glommio::net::TcpListener;
use tracing::warn;

use crate::shard::Shard;

/// The next connection on `listener`, or `None` once the shard drains. A failed accept (out of
/// file descriptors, say) is logged and retried after a short pause.
pub async fn accept_until_drained(
    shard: &Shard,
    listener: &TcpListener,
    what: &str,
) -> Option<glommio::net::TcpStream> {
    loop {
        let drained = shard.drain_event.listen();
        if shard.draining.get() {
            return None;
        }
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            drained.await;
            None
        })
        .await?;
        match accepted {
            Ok(stream) => return Some(stream),
            Err(e) => {
                warn!(error = %e, listener = what, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
