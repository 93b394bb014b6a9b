//! TCP options glommio's stream does not offer: the link timeout of a connection between a
//! leader and a follower (`replica.link.timeout.ms`), and a connection's socket taken from one
//! shard's executor to another's (`detach`, `attach`).
//!
//! A follower cut off from its leader by the network, while both still reach the controller,
//! closes nothing: without more, only `replica.fetch.silence.max.ms` would judge it. With
//! keepalive probes and TCP_USER_TIMEOUT on the link, the kernel itself ends the connection
//! with ETIMEDOUT once the other side's kernel has answered nothing — neither data sent nor
//! a probe — for the timeout. A busy or slow peer process does not trip it (its kernel acks
//! and answers probes); a paused one does not either (the broker session judges that).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use glommio::net::TcpStream;

/// Sets `timeout` on `stream`'s socket: keepalive probes from half of it idle (whole seconds,
/// at least one) and then every quarter, and TCP_USER_TIMEOUT, which bounds both how long
/// sent data may stay unacknowledged and how long the probes may go unanswered.
pub fn set_link_timeout(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    let seconds = |d: Duration| Duration::from_secs(d.as_secs().max(1));
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(seconds(timeout / 2))
        .with_interval(seconds(timeout / 4));
    let fd = descriptor(stream);
    let socket = socket2::SockRef::from(&fd);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(timeout))
}

/// The user timeout set on `stream`'s socket, if any (for tests).
pub fn link_timeout(stream: &TcpStream) -> io::Result<Option<Duration>> {
    let fd = descriptor(stream);
    let socket = socket2::SockRef::from(&fd);
    if !socket.keepalive()? {
        return Ok(None);
    }
    socket.tcp_user_timeout()
}

/// Whether `e`, ending a connection, says the network no longer reaches the other side: the
/// kernel's timeout passed (ETIMEDOUT), the route says it is unreachable, or a blackhole route
/// discards what is sent (EINVAL on a connected socket). A reset or a close is not: the peer's
/// kernel answered.
pub fn is_link_failure(e: &io::Error) -> bool {
    use io::ErrorKind::{HostUnreachable, InvalidInput, NetworkUnreachable, TimedOut};
    matches!(
        e.kind(),
        TimedOut | HostUnreachable | NetworkUnreachable | InvalidInput
    )
}

/// `stream`'s socket, out of this shard's executor, for another shard to `attach`: a duplicate
/// descriptor of it, the stream itself closed. The stream must have no read or write in
/// flight (its connection is between requests and owes no answer): glommio's plain stream
/// reads and writes by system call once ready, so nothing it received is left behind. A
/// readiness poll it may have armed is cancelled once its ring next submits; until then it
/// holds its own reference to the socket and takes no data.
pub fn detach(stream: TcpStream) -> io::Result<OwnedFd> {
    let fd = descriptor(&stream).try_clone_to_owned()?;
    drop(stream);
    Ok(fd)
}

/// A socket `detach`ed on another shard, served by this shard's executor from now on.
pub fn attach(fd: OwnedFd) -> TcpStream {
    // SAFETY: `into_raw_fd` gives up the descriptor's ownership, which passes to the stream:
    // it is open (an `OwnedFd` is) and a connected TCP socket (`detach` made it of one), and
    // nothing else will close it.
    unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) }
}

/// `stream`'s descriptor, borrowed for as long as `stream` is.
fn descriptor(stream: &TcpStream) -> BorrowedFd<'_> {
    // SAFETY: a glommio `TcpStream` owns its socket's descriptor and closes it only when
    // dropped; the returned borrow cannot outlive `&stream`, so the descriptor is open for
    // all of it.
    unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_timeout_is_set_on_the_socket() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let listener = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let stream = TcpStream::connect(addr).await.unwrap();
                assert_eq!(link_timeout(&stream).unwrap(), None);
                set_link_timeout(&stream, Duration::from_millis(2000)).unwrap();
                assert_eq!(
                    link_timeout(&stream).unwrap(),
                    Some(Duration::from_millis(2000))
                );
                let fd = descriptor(&stream);
                let socket = socket2::SockRef::from(&fd);
                assert_eq!(socket.keepalive_time().unwrap(), Duration::from_secs(1));
                assert_eq!(socket.keepalive_interval().unwrap(), Duration::from_secs(1));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
