//! One client connection: on a TLS listener (SSL, SASL_SSL) the handshake first, then read a
//! frame, decode its header, start the handler, and write the responses strictly in request
//! order, as Kafka does for each connection. A produce request may wait to be durable while the
//! next requests are read and started. Framing errors, undecodable requests and failed TLS
//! handshakes close this connection and nothing else. A plaintext connection whose produce
//! requests all go to one other shard is handed to that shard between two requests.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use event_listener::Event;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures::FutureExt;
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use tracing::{debug, warn};
use tributary_protocol::frame::{request_frame_length, FRAME_PREFIX_BYTES};
use tributary_protocol::header::{decode_request_header, peek_fixed};
use tributary_protocol::registry::{self, api_key};
use tributary_protocol::Reader;
use tributary_security::tls::{TlsError, TlsStream};

use crate::conn::ProduceTrail;
use crate::handlers;
use crate::handlers::PendingResponse;
use crate::limits::{ConnectionSlot, RequestGrant};
use crate::metrics::Stage;
use crate::replica::ReplicaLink;
use crate::routing::ShardId;
use crate::sasl::{self, AuthState, ListenerCtx, Step};
use crate::shard::{invoke_on, Shard};
use crate::socket;
use crate::tls_acceptor::TlsAcceptor;

/// Responses a connection may owe before it stops reading requests (backpressure).
pub const CONNECTION_INFLIGHT_MAX: usize = 64;

/// Largest frame a follower's connection reads without a grant from the shard's request
/// memory: a fetch naming some ten thousand partitions. A larger frame waits for room like
/// any other, so the exemption lets no connection hold more than this outside the budget.
const REPLICA_FRAME_EXEMPT_BYTES_MAX: usize = 1 << 20;

/// Why reading a request stopped.
enum ReadStop {
    /// The peer closed the connection.
    Closed,
    /// The socket failed.
    Failed(std::io::Error),
    /// The deadline passed first.
    TimedOut,
}

/// Fills `buf` from `reader`, or stops at `deadline`. A read that has not completed when the
/// deadline passes is dropped: glommio's plain streams read on readiness, so nothing is lost
/// but what the caller then abandons with the connection.
async fn read_by<R: futures::io::AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), ReadStop> {
    let mut got = 0;
    while got < buf.len() {
        // Most reads find their bytes already there; only a read that would wait arms a timer.
        let read = match reader.read(&mut buf[got..]).now_or_never() {
            Some(r) => Some(r),
            None => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(ReadStop::TimedOut);
                }
                futures_lite::future::or(
                    async { Some(reader.read(&mut buf[got..]).await) },
                    async {
                        glommio::timer::sleep(deadline - now).await;
                        None
                    },
                )
                .await
            }
        };
        match read {
            None => return Err(ReadStop::TimedOut),
            Some(Ok(0)) => return Err(ReadStop::Closed),
            Some(Err(e)) => return Err(ReadStop::Failed(e)),
            Some(Ok(n)) => got += n,
        }
    }
    Ok(())
}

/// What the writer task gets for each request: its response, the body to recycle, the
/// request-memory grant to return once the request is answered, and the request's API
/// (registry index) with the time its last byte was read, for its latency metric.
type Queued = (
    PendingResponse,
    Option<Bytes>,
    RequestGrant,
    Option<(usize, Instant)>,
);

/// Serves one accepted connection until it closes; on a TLS listener (`tls`) the handshake
/// comes first.
pub async fn serve_connection(
    shard: Rc<Shard>,
    stream: TcpStream,
    slot: ConnectionSlot,
    listener: Rc<ListenerCtx>,
    tls: Option<TlsAcceptor>,
) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        let auth = AuthState::new(&listener);
        let client = Client::accepted(peer, listener, auth, slot);
        serve_requests(shard, stream, client).await;
        return;
    };
    let Some(stream) = tls_handshake(&shard, &tls, stream, &peer, &listener).await else {
        return;
    };
    let auth = if listener.is_sasl() {
        // SASL_SSL: the principal is the one SASL authenticates, as on SASL_PLAINTEXT.
        AuthState::new(&listener)
    } else {
        match stream.principal(&tls.mapper) {
            Ok(principal) => AuthState::Authenticated {
                principal,
                expires: None,
            },
            Err(error) => {
                warn!(%peer, listener = %listener.name, %error, "closing connection: no principal for the client certificate");
                return;
            }
        }
    };
    let client = Client::accepted(peer, listener, auth, slot);
    serve_requests(shard, stream, client).await;
}

/// The TLS handshake of a new connection, within socket.request.receive.timeout.ms; `None`
/// (the connection is dropped, so closed) when it fails or takes longer.
async fn tls_handshake(
    shard: &Shard,
    tls: &TlsAcceptor,
    stream: TcpStream,
    peer: &str,
    listener: &ListenerCtx,
) -> Option<TlsStream<TcpStream>> {
    let timeout = Duration::from_millis(shard.config.socket_request_receive_timeout_ms);
    let handshake = (tls.accept)(stream);
    let outcome = futures_lite::future::or(async { Some(handshake.await) }, async {
        glommio::timer::sleep(timeout).await;
        None
    })
    .await;
    match outcome {
        Some(Ok(stream)) => Some(stream),
        Some(Err(TlsError::Handshake(error)))
            if error.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            debug!(%peer, listener = %listener.name, %error, "connection closed during the TLS handshake");
            None
        }
        Some(Err(error)) => {
            warn!(%peer, listener = %listener.name, %error, "closing connection: TLS handshake failed");
            None
        }
        None => {
            warn!(%peer, listener = %listener.name, timeout_ms = timeout.as_millis() as u64, "closing connection: the TLS handshake did not finish within socket.request.receive.timeout.ms");
            None
        }
    }
}

/// The TCP socket under a connection's byte stream, for the options set once the connection
/// turns out to carry a follower's fetches, and for a plaintext connection's handover.
trait OverTcp: Sized {
    /// Whether the stream is the socket itself: only such a connection moves to another
    /// shard (a TLS session's state stays with the shard that made it).
    const PLAIN: bool;
    fn tcp(&self) -> &TcpStream;
    /// The socket itself, of a `PLAIN` stream.
    fn into_plain(self) -> Option<TcpStream>;
}

impl OverTcp for TcpStream {
    const PLAIN: bool = true;
    fn tcp(&self) -> &TcpStream {
        self
    }
    fn into_plain(self) -> Option<TcpStream> {
        Some(self)
    }
}

impl OverTcp for TlsStream<TcpStream> {
    const PLAIN: bool = false;
    fn tcp(&self) -> &TcpStream {
        self.get_ref()
    }
    fn into_plain(self) -> Option<TcpStream> {
        None
    }
}

/// A connection's stream shared by its request loop (reading), its writer task and the
/// socket options: each poll borrows it for that poll only, as `futures::io::split` locks it.
struct Shared<S>(Rc<RefCell<S>>);

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Shared<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Shared<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// A connection that carries a follower's fetches: the kernel's link timeout on its socket
/// (`replica.link.timeout.ms`), set once, and whether the connection ended in a link failure
/// (`socket::is_link_failure`), seen by its reader or its writer.
struct LinkWatch {
    link: ReplicaLink,
    set: Cell<bool>,
    failed: Cell<bool>,
}

impl LinkWatch {
    fn new() -> Self {
        Self {
            link: ReplicaLink::new(),
            set: Cell::new(false),
            failed: Cell::new(false),
        }
    }

    /// Sets the link timeout on `stream` once a follower's fetch came over it.
    fn arm<S: OverTcp>(&self, shard: &Shard, stream: &Shared<S>, peer: &str) {
        let timeout = shard.config.replica_link_timeout_ms;
        if self.set.get() || timeout == 0 || self.link.follower.get().is_none() {
            return;
        }
        self.set.set(true);
        let stream = stream.0.borrow();
        if let Err(error) = socket::set_link_timeout(stream.tcp(), Duration::from_millis(timeout)) {
            warn!(%peer, %error, "cannot set replica.link.timeout.ms on a follower's connection: a network cut will show only after replica.fetch.silence.max.ms");
        }
    }

    fn note(&self, error: &std::io::Error) {
        if socket::is_link_failure(error) {
            self.failed.set(true);
        }
    }

    fn note_stop(&self, stop: &ReadStop) {
        if let ReadStop::Failed(error) = stop {
            self.note(error);
        }
    }

    /// After the connection ended: a follower's link that failed takes the partitions it
    /// fetched over it out of their ISR, on every shard.
    async fn report(&self, shard: &Rc<Shard>, peer: &str) {
        let Some(follower) = self.link.follower.get() else {
            return;
        };
        if !self.failed.get() || shard.draining.get() {
            return;
        }
        warn!(%peer, follower, timeout_ms = shard.config.replica_link_timeout_ms, "a follower's connection failed: the network no longer reaches it (replica.link.timeout.ms passed, or no route); the partitions it fetched over it leave their ISR");
        let link = self.link.id;
        for s in 0..shard.shards {
            invoke_on(shard, ShardId(s), move |s| async move {
                s.replica_link_lost(follower, link)
            })
            .await;
        }
    }
}

/// What a connection's request loop and its writer task share: whether the connection is
/// closing, and how many requests have been answered (responses written or dropped), with an
/// event on each answer, for muting and idleness.
#[derive(Default)]
struct Answers {
    closed: Cell<bool>,
    count: Cell<u64>,
    event: Event,
}

impl Answers {
    /// Resolves once `queued` requests have been answered.
    async fn wait_for(&self, queued: u64) {
        while self.count.get() < queued {
            let listener = self.event.listen();
            if self.count.get() >= queued {
                break;
            }
            listener.await;
        }
    }
}

/// A connection's writer task: awaits each pending response in request order, writes it, and
/// counts it answered.
async fn write_responses<W: AsyncWrite + Unpin>(
    shard: Rc<Shard>,
    rx: local_channel::LocalReceiver<Queued>,
    mut writer: W,
    answers: Rc<Answers>,
    watch: Rc<LinkWatch>,
    peer: String,
) {
    let produce_api = crate::metrics::api_index(api_key::PRODUCE);
    let fetch_api = crate::metrics::api_index(api_key::FETCH);
    while let Some((pending, claimed, grant, timing)) = rx.recv().await {
        let outcome = pending.await;
        // Taken at once: set by the produce response future as it completed.
        let durable_at = shard.response_ready.take();
        let resolved = Instant::now();
        shard.request_finished();
        shard.spare_frames.give_back(claimed);
        drop(grant);
        if !answers.closed.get() {
            match outcome {
                Ok(Some(frame)) => {
                    for piece in frame.pieces() {
                        if let Err(e) = writer.write_all(piece).await {
                            watch.note(&e);
                            answers.closed.set(true);
                            break;
                        }
                    }
                }
                Ok(None) => {}
                Err(reason) => {
                    warn!(%peer, %reason, "closing connection");
                    answers.closed.set(true);
                    let _ = writer.close().await;
                }
            }
        }
        if let (Some((api, received)), false) = (timing, answers.closed.get()) {
            shard.metrics.observe_request(api, received.elapsed());
            if Some(api) == produce_api {
                let from = durable_at.unwrap_or(resolved);
                shard
                    .metrics
                    .observe_stage(Stage::ProduceRespond, from.elapsed());
            } else if Some(api) == fetch_api {
                shard
                    .metrics
                    .observe_stage(Stage::FetchSend, resolved.elapsed());
            }
        }
        answers.count.set(answers.count.get() + 1);
        answers.event.notify(usize::MAX);
    }
}

/// Who a connection serves, kept across a handover: its peer, listener, authentication and
/// place under max.connections (given back when the connection closes), and whether it was
/// handed over already. A connection moves at most once: a producer whose requests take
/// turns between the shards' partitions (a sticky partitioner's) must not bounce between
/// them, each move waiting for every answer it owes.
struct Client {
    peer: String,
    listener: Rc<ListenerCtx>,
    auth: AuthState,
    slot: ConnectionSlot,
    moved: bool,
}

impl Client {
    /// A connection as its shard accepted it.
    fn accepted(
        peer: String,
        listener: Rc<ListenerCtx>,
        auth: AuthState,
        slot: ConnectionSlot,
    ) -> Self {
        Self {
            peer,
            listener,
            auth,
            slot,
            moved: false,
        }
    }
}

/// The request loop over a plaintext or TLS byte stream.
async fn serve_requests<S>(shard: Rc<Shard>, stream: S, client: Client)
where
    S: AsyncRead + AsyncWrite + OverTcp + Unpin + 'static,
{
    let Client {
        peer,
        listener,
        auth,
        slot,
        moved,
    } = client;
    let stream = Shared(Rc::new(RefCell::new(stream)));
    let (mut reader, writer) = (stream.clone(), stream.clone());
    let watch = Rc::new(LinkWatch::new());
    // Responses are written strictly in request order by this task; the reader below may run
    // ahead by up to CONNECTION_INFLIGHT_MAX requests while produce requests wait to be durable.
    let (tx, rx) = local_channel::new_bounded::<Queued>(CONNECTION_INFLIGHT_MAX);
    let answers = Rc::new(Answers::default());
    let writer_task = glommio::spawn_local(write_responses(
        shard.clone(),
        rx,
        writer,
        answers.clone(),
        watch.clone(),
        peer.clone(),
    ))
    .detach();
    let trail = ProduceTrail::default();
    if moved {
        trail.pin();
    }
    let mut session = Session {
        shard,
        stream,
        peer,
        listener,
        auth,
        watch,
        tx,
        answers,
        queued: 0,
        throttle: Cell::new(Duration::ZERO),
        trail,
    };
    let moving = session.read_requests(&mut reader).await;
    drop(reader);
    let Session {
        shard,
        stream,
        peer,
        listener,
        auth,
        watch,
        tx,
        answers,
        ..
    } = session;
    // The writer task ends once every queued request is answered.
    drop(tx);
    let _ = writer_task.await;
    match moving {
        Some(to) if !answers.closed.get() => {
            let client = Client {
                peer,
                listener,
                auth,
                slot,
                moved: true,
            };
            hand_over(&shard, to, stream, client).await;
        }
        _ => watch.report(&shard, &peer).await,
    }
}

/// Hands a plaintext connection that owes no answer to shard `to`, which serves its next
/// requests; closes it if its socket cannot be handed.
async fn hand_over<S: OverTcp>(shard: &Rc<Shard>, to: ShardId, stream: Shared<S>, client: Client) {
    let Client {
        peer,
        listener,
        auth,
        slot,
        ..
    } = client;
    // `handover_due` checked both; the writer task, the stream's other holder, has ended.
    let AuthState::Authenticated { principal, expires } = auth else {
        debug_assert!(false, "a connection is handed over only once authenticated");
        warn!(%peer, "closing connection: handed over before it authenticated");
        return;
    };
    let Some(tcp) = Rc::try_unwrap(stream.0)
        .ok()
        .and_then(|s| s.into_inner().into_plain())
    else {
        debug_assert!(
            false,
            "a connection is handed over only as its socket's one holder"
        );
        warn!(%peer, "closing connection: its socket is not its own to hand over");
        return;
    };
    let fd = match socket::detach(tcp) {
        Ok(fd) => fd,
        Err(error) => {
            warn!(%peer, %error, "closing connection: its socket could not be handed to the shard owning its partitions");
            return;
        }
    };
    debug!(%peer, from = shard.id.0, to = to.0, "connection handed to the shard owning its partitions");
    let moved = Moved {
        fd,
        slot,
        peer,
        listener: listener.name.clone(),
        principal,
        expires,
    };
    // `None`: the shard is gone (the broker is stopping), and the connection with it.
    let arrived = invoke_on(shard, to, move |s| async move { resume(s, moved) }).await;
    if arrived == Some(true) {
        shard
            .connections_handed_over
            .set(shard.connections_handed_over.get() + 1);
    }
}

/// A connection on its way to another shard: its socket and what its session keeps between
/// requests, all of it `Send`.
struct Moved {
    fd: OwnedFd,
    slot: ConnectionSlot,
    peer: String,
    listener: String,
    principal: String,
    expires: Option<Instant>,
}

/// Serves a connection another shard handed over, from its next request on; false when this
/// shard cannot (it does not serve the listener), which closes the connection.
fn resume(shard: Rc<Shard>, moved: Moved) -> bool {
    let Some(listener) = shard.listener(&moved.listener) else {
        let (peer, listener) = (&moved.peer, &moved.listener);
        warn!(%peer, %listener, "closing a connection handed over from another shard: this shard does not serve its listener");
        return false;
    };
    let client = Client {
        peer: moved.peer,
        listener,
        auth: AuthState::Authenticated {
            principal: moved.principal,
            expires: moved.expires,
        },
        slot: moved.slot,
        moved: true,
    };
    let stream = socket::attach(moved.fd);
    glommio::spawn_local(serve_requests(shard, stream, client)).detach();
    true
}

/// What a connection's request loop keeps between frames.
struct Session<S> {
    shard: Rc<Shard>,
    stream: Shared<S>,
    peer: String,
    listener: Rc<ListenerCtx>,
    auth: AuthState,
    watch: Rc<LinkWatch>,
    /// The responses on their way, in request order, to the writer task.
    tx: local_channel::LocalSender<Queued>,
    answers: Rc<Answers>,
    /// How many requests this connection has queued a response for.
    queued: u64,
    /// How long a quota holds the connection back after its latest request (KIP-219).
    throttle: Cell<Duration>,
    /// The shards its produce requests wrote to: when to hand the connection over.
    trail: ProduceTrail,
}

impl<S> Session<S>
where
    S: AsyncRead + AsyncWrite + OverTcp + Unpin + 'static,
{
    /// Reads and answers requests until the connection closes, or until it is due to move
    /// to another shard: then that shard.
    async fn read_requests(&mut self, reader: &mut Shared<S>) -> Option<ShardId> {
        let idle = Duration::from_millis(self.shard.config.connections_max_idle_ms);
        let receive_timeout =
            Duration::from_millis(self.shard.config.socket_request_receive_timeout_ms);
        while !self.answers.closed.get() {
            let limits = FrameLimits {
                idle,
                receive_timeout,
                answers: &self.answers,
                queued: self.queued,
            };
            let (shard, peer, listener) = (&self.shard, &self.peer, &self.listener);
            let frame = read_frame(reader, shard, peer, listener, &self.watch, limits).await?;
            let received = Instant::now();
            self.shard.request_started();
            let go_on = match self.auth.expects_raw_token() {
                true => self.answer_raw_token(frame, received).await,
                false => self.answer_request(frame, received).await,
            };
            if !go_on {
                return None;
            }
            if let Some(to) = self.handover_due() {
                return Some(to);
            }
        }
        None
    }

    /// The shard to hand the connection to now, between two requests: all its recent produce
    /// requests wrote there (`connection.handover.produce.requests`), and it is a plaintext,
    /// authenticated client's connection, not a follower's, on a shard still serving.
    fn handover_due(&self) -> Option<ShardId> {
        let after = self.shard.config.connection_handover_produce_requests;
        let to = self.trail.due(after).filter(|&to| to < self.shard.shards)?;
        let movable = S::PLAIN
            && !self.answers.closed.get()
            && !self.shard.draining.get()
            && self.watch.link.follower.get().is_none()
            && self.auth.principal().is_some();
        movable.then_some(ShardId(to))
    }

    /// Hands a response to the writer task; false once the writer is gone.
    async fn queue(&mut self, queued: Queued) -> bool {
        if self.tx.send(queued).await.is_err() {
            return false;
        }
        self.queued += 1;
        true
    }

    /// After a v0 SaslHandshake the frame is a bare SASL token, answered the same way, and
    /// nothing more is read until the answer is written. False: the connection closes.
    async fn answer_raw_token(&mut self, frame: Frame, received: Instant) -> bool {
        let body = Bytes::from(frame.body);
        let (reply, close) = match sasl::step(&self.listener, &mut self.auth, &body, received) {
            Ok((out, step)) => (raw_frame(&out), matches!(step, Step::Close)),
            Err(message) => {
                let peer = &self.peer;
                debug!(%peer, %message, "SASL authentication failed");
                (Ok(None), true)
            }
        };
        let pending: PendingResponse = Box::pin(futures::future::ready(reply));
        if !self.queue((pending, None, frame.grant, None)).await {
            return false;
        }
        self.answers.wait_for(self.queued).await;
        !close
    }

    /// Starts answering one request and queues its response. False: the connection closes
    /// (after that response, if one was queued).
    async fn answer_request(&mut self, frame: Frame, received: Instant) -> bool {
        let Frame {
            body,
            grant,
            started,
            len,
            link,
        } = frame;
        let shard = self.shard.clone();
        let body = Bytes::from(body);
        let claimed = shard.spare_frames.claim(&body);
        // Kafka answers a connection's requests one at a time. Produce requests are the
        // exception here (they are pipelined while they wait to be durable); any other request
        // mutes the connection until its response is written, so a client that stops reading
        // its responses holds one of them, not a queue of them.
        let r = Reader::new(body);
        let fixed = peek_fixed(&r);
        let key = fixed.as_ref().ok().map(|&(key, _, _)| key);
        if key == Some(api_key::FETCH) {
            // Its fetch session lives on this shard.
            self.trail.pin();
        }
        let grant = match link && key != Some(api_key::FETCH) {
            true => shard.request_memory.grant(len).await,
            false => grant,
        };
        let pipelined = key == Some(api_key::PRODUCE);
        if pipelined {
            shard
                .metrics
                .observe_stage(Stage::ProduceReceive, received - started);
        }
        let timing = key
            .and_then(crate::metrics::api_index)
            .map(|api| (api, received));
        if let Some(key) = key {
            if let Err(reason) = self.auth.admits(key, received) {
                let (peer, listener) = (&self.peer, &self.listener.name);
                warn!(%peer, %listener, %reason, "closing connection");
                return false;
            }
        }
        let (started, close_after) = self.start(fixed, r).await;
        let pending = match started {
            Ok(p) => p,
            Err(reason) => Box::pin(futures::future::ready(Err(reason))),
        };
        if !self.queue((pending, claimed, grant, timing)).await {
            return false;
        }
        if !pipelined {
            self.answers.wait_for(self.queued).await;
        }
        if close_after || shard.draining.get() {
            return false;
        }
        // Over a quota: the response is on its way with throttle_time_ms; nothing more is read
        // from this client until that time has passed, as Kafka mutes the channel.
        let hold = self.throttle.replace(Duration::ZERO);
        if !hold.is_zero() {
            glommio::timer::sleep(hold).await;
        }
        true
    }

    /// The response a request's handler starts, and whether the connection closes after it
    /// (a failed authentication). SASL requests change the connection, not the broker.
    async fn start(
        &mut self,
        fixed: Result<(i16, i16, i32), tributary_protocol::DecodeError>,
        r: Reader,
    ) -> (Result<PendingResponse, String>, bool) {
        match fixed {
            Ok(fixed) if is_sasl_api(fixed.0) => {
                sasl_request(&self.shard, &self.listener, &mut self.auth, fixed, r)
            }
            Ok(fixed) => {
                let conn = handlers::Conn {
                    peer: &self.peer,
                    listener: &self.listener.name,
                    principal: self.auth.principal().unwrap_or(sasl::ANONYMOUS),
                    throttle: &self.throttle,
                    link: &self.watch.link,
                    trail: &self.trail,
                };
                let started = handle_frame(&self.shard, fixed, r, conn).await;
                self.watch.arm(&self.shard, &self.stream, &self.peer);
                (started, false)
            }
            Err(e) => (Err(e.to_string()), false),
        }
    }
}

/// How long a connection waits for a request: its first byte (`connections.max.idle.ms`,
/// unless the connection is still owed responses: fewer `answers` than the `queued` requests),
/// then the rest (`socket.request.receive.timeout.ms`).
struct FrameLimits<'a> {
    idle: Duration,
    receive_timeout: Duration,
    answers: &'a Answers,
    queued: u64,
}

/// A request frame read off a connection: its body, the request memory granted to it, when its
/// first byte came, its length, and whether it came over a replica link.
struct Frame {
    body: Vec<u8>,
    grant: RequestGrant,
    started: Instant,
    len: usize,
    link: bool,
}

/// Reads the next request frame: waits for its first byte, reads its length, waits for room in
/// the shard's request memory (a follower's fetch-sized frame does not), and reads its body.
/// None when the connection is done: closed, failed, idle, timed out or sent a bad frame.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    shard: &Shard,
    peer: &str,
    listener: &ListenerCtx,
    watch: &LinkWatch,
    limits: FrameLimits<'_>,
) -> Option<Frame> {
    // The first byte of the next request may take up to connections.max.idle.ms; a
    // connection that is still owed responses is not idle.
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    loop {
        match read_by(reader, &mut prefix[..1], Instant::now() + limits.idle).await {
            Ok(()) => break,
            Err(stop @ (ReadStop::Closed | ReadStop::Failed(_))) => {
                watch.note_stop(&stop);
                return None;
            }
            Err(ReadStop::TimedOut) if limits.answers.count.get() < limits.queued => continue,
            Err(ReadStop::TimedOut) => {
                debug!(%peer, idle_ms = limits.idle.as_millis() as u64, "closing idle connection (connections.max.idle.ms)");
                return None;
            }
        }
    }
    let started = Instant::now();
    if let Err(stop) = read_by(reader, &mut prefix[1..], started + limits.receive_timeout).await {
        watch.note_stop(&stop);
        log_stop(peer, stop, "a request's length");
        return None;
    }
    let len = match request_frame_length(prefix, shard.config.socket_request_max_bytes) {
        Ok(len) => len,
        Err(e) if looks_like_tls(&prefix) => {
            warn!(%peer, listener = %listener.name, error = %e, "closing connection: bad frame; it starts like a TLS handshake, so the client may use SSL on a listener without TLS");
            return None;
        }
        Err(e) => {
            warn!(%peer, error = %e, "closing connection: bad frame");
            return None;
        }
    };
    // Nothing is allocated for the body until the shard's request memory has room for it;
    // meanwhile this connection is not read (backpressure), and its receive deadline
    // starts once the room is granted.
    // A follower's connection reads its next request of up to
    // REPLICA_FRAME_EXEMPT_BYTES_MAX at once (a fetch takes no part of the budget:
    // `RequestGrant::exempt`); anything else on it waits for room once read.
    let link = watch.link.follower.get().is_some() && len <= REPLICA_FRAME_EXEMPT_BYTES_MAX;
    let grant = match link {
        true => RequestGrant::exempt(),
        false => shard.request_memory.grant(len).await,
    };
    let mut body = shard.spare_frames.take(len);
    let deadline = Instant::now() + limits.receive_timeout;
    if let Err(stop) = read_by(reader, &mut body, deadline).await {
        watch.note_stop(&stop);
        log_stop(peer, stop, "a request");
        return None;
    }
    Some(Frame {
        body,
        grant,
        started,
        len,
        link,
    })
}

/// Whether a connection's first bytes are a TLS handshake record (content type 22, major
/// version 3), for the log line that closes it.
fn looks_like_tls(prefix: &[u8; FRAME_PREFIX_BYTES]) -> bool {
    prefix[0] == 22 && prefix[1] == 3
}

fn is_sasl_api(key: i16) -> bool {
    key == api_key::SASL_HANDSHAKE || key == api_key::SASL_AUTHENTICATE
}

/// A bare SASL token's reply: its length, then its bytes, with no Kafka header.
fn raw_frame(token: &[u8]) -> handlers::HandlerResult {
    let mut out = bytes::BytesMut::with_capacity(4 + token.len());
    out.extend_from_slice(&(token.len() as u32).to_be_bytes());
    out.extend_from_slice(token);
    Ok(Some(out.into()))
}

/// SaslHandshake or SaslAuthenticate, which change the connection's authentication rather
/// than the broker: the response, and whether the connection closes after it.
fn sasl_request(
    shard: &Rc<Shard>,
    listener: &ListenerCtx,
    auth: &mut AuthState,
    (key, version, correlation_id): (i16, i16, i32),
    mut r: Reader,
) -> (Result<PendingResponse, String>, bool) {
    use tributary_protocol::requests::sasl as req;
    let Some(spec) = registry::lookup(key).filter(|s| s.supports(version)) else {
        return (
            Err(format!(
                "SASL API key {key} v{version} is not supported (correlation id {correlation_id})"
            )),
            true,
        );
    };
    let answered = (|| -> Result<(handlers::HandlerResult, bool), String> {
        let header = decode_request_header(&mut r, spec.request_header_flexible(version))
            .map_err(|e| e.to_string())?;
        if key == api_key::SASL_HANDSHAKE {
            let mechanism = req::decode_handshake(&mut r, version).map_err(|e| e.to_string())?;
            let (resp, step) =
                sasl::handshake(listener, auth, version, &mechanism, &shard.catalog());
            Ok((
                handlers::frame(spec, &header, &resp),
                matches!(step, Step::Close),
            ))
        } else {
            let token = req::decode_authenticate(&mut r, version).map_err(|e| e.to_string())?;
            let (resp, step) = sasl::authenticate(listener, auth, &token, Instant::now());
            Ok((
                handlers::frame(spec, &header, &resp),
                matches!(step, Step::Close),
            ))
        }
    })();
    match answered {
        Ok((reply, close)) => (Ok(Box::pin(futures::future::ready(reply))), close),
        Err(e) => (Err(format!("{} v{version}: {e}", spec.name)), true),
    }
}

fn log_stop(peer: &str, stop: ReadStop, what: &str) {
    match stop {
        ReadStop::Closed => debug!(%peer, "connection closed in the middle of {what}"),
        ReadStop::Failed(error) => {
            debug!(%peer, %error, "connection failed in the middle of {what}")
        }
        ReadStop::TimedOut => warn!(
            %peer,
            "closing connection: {what} did not arrive within socket.request.receive.timeout.ms"
        ),
    }
}

/// Decodes one request and starts it. The returned future yields the response frame (`None`
/// when none is due, as for acks=0); `Err` closes the connection.
/// `fixed` is the request's api key, version and correlation id, peeked from `r`.
async fn handle_frame(
    shard: &Rc<Shard>,
    (key, version, correlation_id): (i16, i16, i32),
    mut r: Reader,
    conn: handlers::Conn<'_>,
) -> Result<PendingResponse, String> {
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
    let pending = handlers::dispatch(shard, spec, &header, r, conn)
        .await
        .map_err(|e| format!("{name} v{version}: {e}"))?;
    // Errors of the pending part (e.g. a response that cannot be encoded) are labelled too.
    Ok(Box::pin(async move {
        pending.await.map_err(|e| format!("{name} v{version}: {e}"))
    }))
}
