//! Raft messages between voters over TCP: the frame and handshake formats, the listener that
//! accepts peers' connections and hands their messages to the driver, and one sender task per
//! peer that owns the outgoing connection, reconnecting with capped backoff. It never blocks the
//! driver: the driver drops messages into a bounded per-peer queue and moves on (raft
//! retransmits what is lost). It knows raft messages only as bytes plus their `from`/`to`.
//!
//! ```text
//! frame:      [len u32BE][payload (len bytes)]
//! handshake:  payload = [magic "TRBQ"][version u16BE][from node id i32BE][to node id i32BE]
//! message:    payload = protobuf eraftpb.Message
//! ```
//! The dialer sends a handshake first; the acceptor checks it and answers with its own, or
//! closes the connection. Then only the dialer sends, message frames only.
//!
//! Trust boundary: raft-rs 0.7 decodes with protobuf 2.x, which can overflow its stack on
//! crafted input (RUSTSEC-2024-0437). So no protobuf decoder sees a byte before the fixed-size
//! handshake (decoded here by hand) names a configured voter, and every frame's length is
//! checked against [`FRAME_BYTES_MAX`] before its buffer is allocated. The handshake identifies,
//! it does not authenticate: the controller listener belongs on a network only the voters reach.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use raft::SnapshotStatus;

use crate::config::raft_id;
use crate::core::{Core, Evidence, Input};

/// The largest frame accepted or sent. A snapshot travels in one message, so this also bounds
/// the state machine's snapshot size.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Messages waiting for one peer's connection; more are dropped.
pub const PEER_QUEUE_MAX: usize = 1024;
/// Messages written to a peer in one socket write, at most.
const WRITE_BATCH_MAX: usize = 256;
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"TRBQ";
/// The handshake magic of an observer's fetch connection (see `observer`).
pub const OBSERVER_FETCH_MAGIC: [u8; 4] = *b"TRBF";
/// The handshake magic of an observer's proposal connection (see `observer`).
pub const OBSERVER_PROPOSE_MAGIC: [u8; 4] = *b"TRBP";
pub const HANDSHAKE_VERSION: u16 = 1;
pub const HANDSHAKE_BYTES: usize = 4 + 2 + 4 + 4;
/// Time a connection has to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the probe of a voter whose connection ended waits for its port to answer. A
/// refusal comes back at once; a port that does not answer in time proves nothing.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// The pauses before each probe of a voter whose connection ended (see `probe_voter`).
const PROBE_AFTER: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(40),
    Duration::from_millis(150),
];
/// A write stuck this long (the peer stopped reading) drops the connection.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Inbound connections open at once. Voters need one each and observers (broker-only nodes)
/// two; the rest of the room lets a restarted node connect before its old connection is
/// noticed dead, and keeps anyone else who reaches the port from holding more than this many
/// sockets in handshake.
const INBOUND_CONNECTIONS_MAX: usize = 512;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What a connection carries, named by its handshake's magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Raft messages between voters.
    Raft,
    /// An observer's fetches of the committed log, and the answers.
    ObserverFetch,
    /// An observer's proposals, one way.
    ObserverPropose,
}

impl Channel {
    fn magic(self) -> [u8; 4] {
        match self {
            Channel::Raft => HANDSHAKE_MAGIC,
            Channel::ObserverFetch => OBSERVER_FETCH_MAGIC,
            Channel::ObserverPropose => OBSERVER_PROPOSE_MAGIC,
        }
    }

    fn from_magic(magic: [u8; 4]) -> Option<Channel> {
        [
            Channel::Raft,
            Channel::ObserverFetch,
            Channel::ObserverPropose,
        ]
        .into_iter()
        .find(|c| c.magic() == magic)
    }
}

/// Who is on the other end of a connection, and whom they meant to reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    pub from: i32,
    pub to: i32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("handshake is {0} bytes, expected {HANDSHAKE_BYTES}")]
    Length(usize),
    #[error("bad magic {0:?}")]
    Magic([u8; 4]),
    #[error("unsupported version {0}")]
    Version(u16),
}

impl Handshake {
    /// The handshake of a `channel` connection as a whole frame.
    pub fn encode_for(&self, channel: Channel) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + HANDSHAKE_BYTES);
        out.extend_from_slice(&(HANDSHAKE_BYTES as u32).to_be_bytes());
        out.extend_from_slice(&channel.magic());
        out.extend_from_slice(&HANDSHAKE_VERSION.to_be_bytes());
        out.extend_from_slice(&self.from.to_be_bytes());
        out.extend_from_slice(&self.to.to_be_bytes());
        out
    }

    /// Decodes any connection's handshake frame payload, with the channel its magic names.
    pub fn decode_any(payload: &[u8]) -> Result<(Channel, Handshake), HandshakeError> {
        if payload.len() != HANDSHAKE_BYTES {
            return Err(HandshakeError::Length(payload.len()));
        }
        let magic = [payload[0], payload[1], payload[2], payload[3]];
        let channel = Channel::from_magic(magic).ok_or(HandshakeError::Magic(magic))?;
        let version = u16::from_be_bytes([payload[4], payload[5]]);
        if version != HANDSHAKE_VERSION {
            return Err(HandshakeError::Version(version));
        }
        let from = i32::from_be_bytes([payload[6], payload[7], payload[8], payload[9]]);
        let to = i32::from_be_bytes([payload[10], payload[11], payload[12], payload[13]]);
        Ok((channel, Handshake { from, to }))
    }
}

/// Appends `msg` as a frame; an encoding over [`FRAME_BYTES_MAX`] is refused.
pub fn encode_message(msg: &Message, out: &mut Vec<u8>) -> io::Result<()> {
    let body = msg.write_to_bytes().map_err(io::Error::other)?;
    if body.len() > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a {:?} of {} bytes exceeds the {FRAME_BYTES_MAX}-byte frame limit",
                msg.get_msg_type(),
                body.len()
            ),
        ));
    }
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}

/// Reads one frame whose payload may be at most `max` bytes; the length is checked before the
/// buffer is allocated.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit of {max}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(payload)
}

pub(crate) async fn with_timeout<T>(
    limit: Duration,
    work: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    futures_lite::future::or(work, async move {
        glommio::timer::sleep(limit).await;
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    })
    .await
}

/// Binds the peer listener; returns it with the address it bound (the port chosen for port 0).
pub fn bind(addr: SocketAddr) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).map_err(io::Error::from)?;
    let bound = listener.local_addr().map_err(io::Error::from)?;
    Ok((listener, bound))
}

/// Starts the transport's tasks: a sender per other voter, and the accept loop if there is a
/// listener. Returns the driver's ends of the peer queues, by raft id.
pub fn start(core: &Rc<Core>, listener: Option<TcpListener>) -> HashMap<u64, PeerQueue> {
    let peers = core
        .voters
        .iter()
        .filter(|(id, _)| *id != core.node_id)
        .map(|(id, addr)| (raft_id(*id), PeerQueue::start(core, *id, *addr)))
        .collect();
    if let Some(listener) = listener {
        let accept_core = core.clone();
        core.spawn_counted(async move {
            let work = accept_loop(listener, accept_core.clone());
            accept_core.until_closed(work).await;
        });
    }
    peers
}

/// Accepts peer connections until the quorum closes; each is served by its own task.
async fn accept_loop(listener: TcpListener, core: Rc<Core>) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if open.get() >= INBOUND_CONNECTIONS_MAX {
                    tracing::warn!(
                        peer = ?stream.peer_addr().ok(),
                        "refusing quorum connection: {INBOUND_CONNECTIONS_MAX} already open"
                    );
                    continue;
                }
                let slot = Slot::take(&open);
                let conn_core = core.clone();
                core.spawn_counted(async move {
                    let _slot = slot;
                    let work = serve_inbound(stream, conn_core.clone());
                    conn_core.until_closed(work).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "quorum listener accept failed");
                glommio::timer::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// One open inbound connection, counted until dropped.
struct Slot(Rc<Cell<usize>>);

impl Slot {
    fn take(open: &Rc<Cell<usize>>) -> Slot {
        open.set(open.get() + 1);
        Slot(open.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Checks a dialer's handshake against this node's voters; the refusal reason otherwise.
/// Raft connections come from voters only, observer connections from anyone else.
pub fn admit(core: &Core, channel: Channel, hs: Handshake) -> Result<(), String> {
    match channel {
        Channel::Raft if !core.is_voter(hs.from) => {
            return Err(format!("node {} is not a configured voter", hs.from));
        }
        Channel::ObserverFetch | Channel::ObserverPropose if core.is_voter(hs.from) => {
            return Err(format!(
                "node {} is a voter; voters do not observe the log",
                hs.from
            ));
        }
        Channel::ObserverFetch | Channel::ObserverPropose if hs.from < 0 => {
            return Err(format!("node id {} is negative", hs.from));
        }
        _ => {}
    }
    if hs.from == core.node_id {
        return Err(format!("node {} claims to be this node", hs.from));
    }
    if hs.to != core.node_id {
        return Err(format!(
            "it meant to reach node {}, this is node {}",
            hs.to, core.node_id
        ));
    }
    Ok(())
}

async fn serve_inbound(mut stream: TcpStream, core: Rc<Core>) {
    let peer = stream.peer_addr().ok();
    let handshake = with_timeout(HANDSHAKE_TIMEOUT, read_frame(&mut stream, HANDSHAKE_BYTES)).await;
    let (channel, hs) =
        match handshake.and_then(|p| Handshake::decode_any(&p).map_err(io::Error::other)) {
            Ok(hs) => hs,
            // A connection closed before its first byte is another voter's probe (see
            // `probe_voter`), not a bad peer.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                tracing::debug!(?peer, "quorum connection closed before its handshake");
                return;
            }
            Err(e) => {
                tracing::warn!(?peer, error = %e, "refusing quorum connection: bad handshake");
                return;
            }
        };
    if let Err(reason) = admit(&core, channel, hs) {
        tracing::warn!(?peer, %reason, "refusing quorum connection");
        return;
    }
    let reply = Handshake {
        from: core.node_id,
        to: hs.from,
    };
    let reply = reply.encode_for(channel);
    if let Err(e) = with_timeout(HANDSHAKE_TIMEOUT, stream.write_all(&reply)).await {
        tracing::debug!(?peer, error = %e, "quorum handshake reply failed");
        return;
    }
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a quorum connection");
    }
    let reason = match channel {
        Channel::Raft => {
            tracing::debug!(node = hs.from, ?peer, "quorum peer connected");
            let reason = receive_messages(&mut stream, &core, raft_id(hs.from)).await;
            drop(stream);
            core.doubts.connection_ended(hs.from, Instant::now());
            probe_voter(&core, hs.from).await;
            reason
        }
        Channel::ObserverFetch => {
            tracing::debug!(node = hs.from, ?peer, "observer connected to fetch");
            let reason = crate::observer::serve_fetches(&mut stream, &core, hs.from).await;
            // Observers have no quorum port to probe; whoever knows their address may.
            let _ = core.peer_gone(raft_id(hs.from), Evidence::Closed);
            reason
        }
        Channel::ObserverPropose => {
            crate::observer::serve_proposals(&mut stream, &core, hs.from).await
        }
    };
    tracing::debug!(node = hs.from, ?peer, %reason, "quorum peer connection closed");
}

/// After a voter's connection to this node ended: whether its quorum port still accepts. A
/// process that died had its sockets closed by the kernel (that ended the connection) and
/// nothing listens on its port any more, so the connection is refused; that is evidence it
/// is gone ([`Evidence::Refused`]), which the driver and the active controller act on at
/// once. A paused or cut-off process leaves no such evidence: its kernel still accepts (a
/// pause) or nothing answers (a cut), and only the timeouts judge it.
///
/// A dying process closes its connections a moment before its listener, and a probe in that
/// moment is accepted into the listener's backlog: so the probe waits a little and tries a few
/// times ([`PROBE_AFTER`]) before it takes an accepted connection as a live peer.
async fn probe_voter(core: &Rc<Core>, node: i32) {
    let Some(addr) = core.voter_addr(node) else {
        return;
    };
    for after in PROBE_AFTER {
        glommio::timer::sleep(after).await;
        match TcpStream::connect_timeout(addr, PROBE_TIMEOUT).await {
            Ok(_) => {}
            Err(e) => {
                let e = io::Error::from(e);
                if e.kind() == io::ErrorKind::ConnectionRefused {
                    voter_gone(core, node, addr).await;
                }
                return;
            }
        }
    }
    core.doubts.cleared(node);
    tracing::debug!(node, %addr, "quorum peer's connection ended but its port accepts");
}

/// Records that voter `node`'s port at `addr` refused a connection and tells the driver.
async fn voter_gone(core: &Rc<Core>, node: i32, addr: SocketAddr) {
    if core.doubts.refused(node, Instant::now()) {
        let watcher = core.clone();
        core.spawn_counted(async move {
            let work = watch_until_listening(&watcher, node, addr);
            watcher.until_closed(work).await;
        });
    }
    if core.peer_gone(raft_id(node), Evidence::Refused) {
        tracing::info!(node, %addr, "quorum peer is gone: its port refuses connections");
        report(core, Input::VoterGone(raft_id(node))).await;
    }
}

/// Delivers an admitted peer's messages to the driver; returns why it stopped.
async fn receive_messages(stream: &mut TcpStream, core: &Core, from: u64) -> String {
    loop {
        let frame = match read_frame(stream, FRAME_BYTES_MAX).await {
            Ok(frame) => frame,
            Err(e) => return e.to_string(),
        };
        // Only a configured voter's bytes reach protobuf (see the module doc).
        let msg = match Message::parse_from_bytes(&frame) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(from, error = %e, "undecodable quorum message; closing");
                return "undecodable message".to_string();
            }
        };
        if msg.from != from || msg.to != core.raft_id {
            tracing::warn!(
                from,
                msg_from = msg.from,
                msg_to = msg.to,
                "quorum message not from/to the handshake's nodes; closing"
            );
            return "misaddressed message".to_string();
        }
        core.heard_from(from);
        if core.inbox.send(Input::Message(msg)).await.is_err() {
            return "driver gone".to_string();
        }
    }
}

/// The driver's end of a peer's queue.
pub struct PeerQueue {
    pub tx: async_channel::Sender<Message>,
}

impl PeerQueue {
    /// Starts the sender task for `node` at `addr`.
    fn start(core: &Rc<Core>, node: i32, addr: SocketAddr) -> PeerQueue {
        let (tx, rx) = async_channel::bounded(PEER_QUEUE_MAX);
        let task_core = core.clone();
        core.spawn_counted(async move {
            let work = run_peer(task_core.clone(), node, addr, rx);
            task_core.until_closed(work).await;
        });
        PeerQueue { tx }
    }
}

async fn run_peer(
    core: Rc<Core>,
    node: i32,
    addr: SocketAddr,
    rx: async_channel::Receiver<Message>,
) {
    let peer = raft_id(node);
    let mut conn: Option<TcpStream> = None;
    let mut backoff = BACKOFF_MIN;
    loop {
        let first = match conn.as_mut() {
            Some(stream) => match next_or_closed(&rx, stream).await {
                Next::Message(m) => m,
                Next::Closed => {
                    tracing::debug!(node, %addr, "quorum peer closed its connection");
                    conn = None;
                    continue;
                }
                Next::QueueClosed => return,
            },
            None => match rx.recv().await {
                Ok(m) => m,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH_MAX {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let stream = match conn.as_mut() {
            Some(stream) => stream,
            None => match dial(&core, node, addr).await {
                Ok(stream) => {
                    backoff = BACKOFF_MIN;
                    conn.insert(stream)
                }
                Err(e) => {
                    tracing::debug!(node, %addr, error = %e, "cannot reach quorum peer");
                    if e.kind() == io::ErrorKind::ConnectionRefused {
                        voter_gone(&core, node, addr).await;
                    }
                    failed(&core, peer, &batch).await;
                    glommio::timer::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    // What queued meanwhile is stale; raft sends afresh.
                    let stale: Vec<Message> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
                    failed(&core, peer, &stale).await;
                    continue;
                }
            },
        };
        let mut buf = Vec::new();
        let mut sent = Vec::new();
        for msg in batch {
            match encode_message(&msg, &mut buf) {
                Ok(()) => sent.push(msg),
                Err(e) => {
                    tracing::error!(node, error = %e, "quorum message cannot be sent");
                    failed(&core, peer, &[msg]).await;
                }
            }
        }
        match with_timeout(WRITE_TIMEOUT, stream.write_all(&buf)).await {
            Ok(()) => {
                for msg in sent.iter().filter(|m| is_snapshot(m)) {
                    report(&core, Input::SnapshotStatus(msg.to, SnapshotStatus::Finish)).await;
                }
            }
            Err(e) => {
                tracing::debug!(node, %addr, error = %e, "quorum peer connection lost");
                conn = None;
                failed(&core, peer, &sent).await;
            }
        }
    }
}

/// Between the watch's connection attempts to a voter whose port refused.
const LISTENING_WATCH_EVERY: Duration = Duration::from_millis(100);

/// Connects to a gone voter's port every [`LISTENING_WATCH_EVERY`] until it accepts (a new
/// process listens there) or its doubt ends otherwise, then clears the doubt. A follower hears
/// nothing from another follower, so a doubt would otherwise stand until the restarted node
/// happened to send this node a message, and Metadata here would go on naming no leader for
/// its partitions.
async fn watch_until_listening(core: &Core, node: i32, addr: SocketAddr) {
    while core.doubts.refused_since(node).is_some() {
        glommio::timer::sleep(LISTENING_WATCH_EVERY).await;
        if TcpStream::connect_timeout(addr, PROBE_TIMEOUT)
            .await
            .is_ok()
        {
            core.doubts.cleared(node);
            tracing::debug!(node, %addr, "a gone quorum peer's port accepts again");
            return;
        }
    }
}

enum Next {
    Message(Message),
    /// The peer closed the connection (or it failed): nothing may be written to it.
    Closed,
    QueueClosed,
}

/// The next message to send to a peer, unless the peer's end of `stream` closes first. The
/// peer never writes on this connection after its handshake, so anything a read returns —
/// end of stream, an error — means it is gone. Without this watch a connection to a peer that
/// died while this node had nothing to send it (a follower sends only to its leader) stays
/// open here, and the first message after — a pre-vote, once the leader dies — goes into
/// it and is lost: the kernel takes the write and the peer's answers with a reset.
async fn next_or_closed(rx: &async_channel::Receiver<Message>, stream: &mut TcpStream) -> Next {
    futures_lite::future::or(
        async {
            match rx.recv().await {
                Ok(m) => Next::Message(m),
                Err(_) => Next::QueueClosed,
            }
        },
        async {
            let mut byte = [0u8; 1];
            let _ = stream.read(&mut byte).await;
            Next::Closed
        },
    )
    .await
}

fn is_snapshot(msg: &Message) -> bool {
    msg.get_msg_type() == MessageType::MsgSnapshot
}

/// Tells the driver that `msgs` to `peer` were not sent.
async fn failed(core: &Core, peer: u64, msgs: &[Message]) {
    if msgs.is_empty() {
        return;
    }
    report(core, Input::Unreachable(peer)).await;
    for _ in msgs.iter().filter(|m| is_snapshot(m)) {
        report(core, Input::SnapshotStatus(peer, SnapshotStatus::Failure)).await;
    }
}

async fn report(core: &Core, input: Input) {
    // The driver drains its inbox on every turn, so this wait is short; it fails only once the
    // quorum is gone.
    let _ = core.inbox.send(input).await;
}

/// Connects to `node` and completes the handshake.
async fn dial(core: &Core, node: i32, addr: SocketAddr) -> io::Result<TcpStream> {
    dial_as(core.node_id, node, addr, Channel::Raft).await
}

/// Connects to `node` at `addr` as node `me` for a `channel` connection and completes the
/// handshake.
pub(crate) async fn dial_as(
    me: i32,
    node: i32,
    addr: SocketAddr,
    channel: Channel,
) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
        .await
        .map_err(io::Error::from)?;
    stream.set_nodelay(true).map_err(io::Error::from)?;
    let hello = Handshake { from: me, to: node };
    let reply = with_timeout(HANDSHAKE_TIMEOUT, async {
        stream.write_all(&hello.encode_for(channel)).await?;
        read_frame(&mut stream, HANDSHAKE_BYTES).await
    })
    .await?;
    let reply = Handshake::decode_any(&reply).map_err(io::Error::other)?;
    let expected = (channel, Handshake { from: node, to: me });
    if reply != expected {
        return Err(io::Error::other(format!(
            "peer at {addr} answered as {reply:?}, expected {expected:?}"
        )));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_round_trips_and_every_prefix_fails() {
        let hs = Handshake { from: 3, to: 0 };
        let frame = hs.encode_for(Channel::Raft);
        assert_eq!(frame.len(), 4 + HANDSHAKE_BYTES);
        let payload = &frame[4..];
        assert_eq!(Handshake::decode_any(payload), Ok((Channel::Raft, hs)));
        for channel in [Channel::ObserverFetch, Channel::ObserverPropose] {
            let frame = hs.encode_for(channel);
            assert_eq!(Handshake::decode_any(&frame[4..]), Ok((channel, hs)));
        }
        for cut in 0..payload.len() {
            assert_eq!(
                Handshake::decode_any(&payload[..cut]),
                Err(HandshakeError::Length(cut))
            );
        }
        let mut bad = payload.to_vec();
        bad[0] = b'X';
        assert!(matches!(
            Handshake::decode_any(&bad),
            Err(HandshakeError::Magic(_))
        ));
        let mut bad = payload.to_vec();
        bad[5] = 9;
        assert_eq!(Handshake::decode_any(&bad), Err(HandshakeError::Version(9)));
    }

    #[test]
    fn frames_check_length_before_allocating() {
        let mut msg = Message::default();
        msg.set_msg_type(MessageType::MsgHeartbeat);
        msg.from = 1;
        msg.to = 2;
        msg.term = 5;
        let mut buf = Vec::new();
        encode_message(&msg, &mut buf).unwrap();
        let got = futures_lite::future::block_on(read_frame(&mut &buf[..], FRAME_BYTES_MAX));
        assert_eq!(Message::parse_from_bytes(&got.unwrap()).unwrap(), msg);

        let huge = (u32::MAX).to_be_bytes();
        let err = futures_lite::future::block_on(read_frame(&mut &huge[..], FRAME_BYTES_MAX));
        assert_eq!(err.unwrap_err().kind(), io::ErrorKind::InvalidData);

        for cut in 0..buf.len() {
            let r = futures_lite::future::block_on(read_frame(&mut &buf[..cut], FRAME_BYTES_MAX));
            assert!(r.is_err(), "prefix {cut}");
        }
    }

    #[test]
    fn an_idle_connection_whose_peer_closed_is_dropped_before_the_next_send() {
        glommio::LocalExecutor::default().run(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, rx) = async_channel::bounded::<Message>(4);
            let mut client = TcpStream::connect(addr).await.unwrap();
            let server = listener.accept().await.unwrap();
            // A message waiting goes first, whatever the connection's state.
            tx.send(Message::default()).await.unwrap();
            assert!(matches!(
                next_or_closed(&rx, &mut client).await,
                Next::Message(_)
            ));
            // Idle, the peer goes: seen without anything to send.
            drop(server);
            assert!(matches!(
                next_or_closed(&rx, &mut client).await,
                Next::Closed
            ));
            drop(tx);
            let mut other = TcpStream::connect(addr).await.unwrap();
            let _kept = listener.accept().await.unwrap();
            assert!(matches!(
                next_or_closed(&rx, &mut other).await,
                Next::QueueClosed
            ));
        });
    }
}
