//! The metrics endpoint: a minimal HTTP/1.1 server on shard 0 (`metrics.listen`). `GET /metrics`
//! gathers every shard's snapshot over the shard channels and answers the Prometheus text
//! format; `GET /health` answers 200 once every shard is ready. One request per connection
//! (`Connection: close`). It must stay small and bounded: it never holds more than
//! `METRICS_CONNECTIONS_MAX` connections, reads at most `METRICS_REQUEST_MAX_BYTES` of a
//! request, and drops a connection whose exchange takes longer than `METRICS_EXCHANGE_TIMEOUT`.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::routing::ShardId;
use crate::shard::{call, Shard, ShardRequest};

/// Scrape connections served at once; one accepted past it is closed at once.
pub const METRICS_CONNECTIONS_MAX: usize = 4;
/// Largest request head (request line and headers) read; a larger one closes the connection.
pub const METRICS_REQUEST_MAX_BYTES: usize = 8 * 1024;
/// A connection's whole exchange (request read, shards asked, response written) must finish
/// within this, or the connection is closed.
pub const METRICS_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves scrapes on `listener` until the shard drains. `ready` turns true once every shard
/// has started.
pub async fn serve(shard: Rc<Shard>, listener: TcpListener, ready: Arc<AtomicBool>) {
    let open = Rc::new(Cell::new(0usize));
    while let Some(stream) = crate::accept::accept_until_drained(&shard, &listener, "metrics").await
    {
        if open.get() >= METRICS_CONNECTIONS_MAX {
            debug!("metrics: too many scrape connections; closing one");
            continue;
        }
        open.set(open.get() + 1);
        let (shard, open, ready) = (shard.clone(), open.clone(), ready.clone());
        glommio::spawn_local(async move {
            let exchange = exchange(&shard, stream, &ready);
            futures_lite::future::or(exchange, async {
                glommio::timer::sleep(METRICS_EXCHANGE_TIMEOUT).await;
                debug!("metrics: closing a connection that took too long");
            })
            .await;
            open.set(open.get() - 1);
        })
        .detach();
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Health,
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Routes a request head (everything before the blank line). A query string is ignored.
fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", "/health") => Route::Health,
        ("GET", _) => Route::NotFound,
        _ => Route::MethodNotAllowed,
    }
}

/// The length of the request head in `buf` including its blank line, once it is all there.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

async fn exchange(shard: &Rc<Shard>, mut stream: TcpStream, ready: &AtomicBool) {
    let mut buf = vec![0u8; METRICS_REQUEST_MAX_BYTES];
    let mut got = 0;
    let head = loop {
        if let Some(end) = head_end(&buf[..got]) {
            break end;
        }
        if got == buf.len() {
            debug!("metrics: request head too large; closing");
            return;
        }
        match stream.read(&mut buf[got..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got += n,
        }
    };
    let (status, content_type, body) = match route(&buf[..head]) {
        Route::Metrics => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            scrape(shard).await,
        ),
        Route::Health if ready.load(Ordering::Acquire) => {
            ("200 OK", "text/plain; charset=utf-8", "ok\n".to_string())
        }
        Route::Health => (
            "503 Service Unavailable",
            "text/plain; charset=utf-8",
            "starting\n".to_string(),
        ),
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".into(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.close().await;
}

/// Every shard's snapshot, rendered. A shard that does not answer (it is stopping) is left out.
async fn scrape(shard: &Rc<Shard>) -> String {
    // Asked at once, so a scrape waits for the slowest shard's queue, not the sum of them.
    let asks =
        (0..shard.shards).map(|i| call(shard, ShardId(i), |reply| ShardRequest::Metrics { reply }));
    let snapshots: Vec<_> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut out = super::render(&snapshots, shard.connections.open());
    if let Some(c) = crate::controller::of(shard) {
        let q = &c.node.quorum;
        let quorum = super::QuorumView {
            leader: q.leader(),
            term: q.term(),
            applied_index: q.applied_index(),
            is_leader: q.is_leader(),
        };
        super::render_cluster(&mut out, &quorum, &c.node.image());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET /health HTTP/1.1\r\n\r\n"), Route::Health);
        assert_eq!(route(b"GET /other HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed
        );
        assert_eq!(route(b"GET /metrics\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(&[0xff, 0xfe, b'\r', b'\n']), Route::BadRequest);
    }

    #[test]
    fn head_ends_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
    }
}
