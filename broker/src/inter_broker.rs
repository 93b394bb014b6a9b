//! Requests one broker sends another over the Kafka protocol — a follower's Fetch, a
//! coordinator's WriteTxnMarkers — on a connection secured as the inter-broker listener is
//! (plaintext, TLS, SASL, or both: [`InterBrokerSecurity`]): finding the broker's address in
//! the image, connecting with a bound, framing a request with its header, and reading the one
//! response that answers it, with the frame size checked before the buffer is allocated.

use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use tributary_security::tls::{ServerName, TlsClientConfig, TlsStream};

use crate::catalog::Catalog;
use crate::config::BrokerConfig;

/// A connection attempt that takes longer fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a broker takes requests: its address, and the host it registered (the name its
/// certificate is verified against).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    pub addr: SocketAddr,
    pub host: String,
}

impl std::fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

/// Where broker `id` takes requests, from the image.
pub fn broker_addr(catalog: &Catalog, id: i32) -> Option<BrokerAddr> {
    let b = catalog.brokers.get(&id)?;
    let addr = (b.host.as_str(), b.port).to_socket_addrs().ok()?.next()?;
    Some(BrokerAddr {
        addr,
        host: b.host.clone(),
    })
}

/// Why a connection to another broker could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// Not reached within [`CONNECT_TIMEOUT`], or refused: the broker may be down.
    Unreachable(String),
    /// The TLS handshake or the SASL login failed, or this node has no usable inter-broker
    /// security: a configuration for the operator to fix, not a broker that is down.
    Security(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Unreachable(why) | ConnectError::Security(why) => f.write_str(why),
        }
    }
}

impl From<ConnectError> for String {
    fn from(e: ConnectError) -> String {
        e.to_string()
    }
}

/// Connects to `to` within [`CONNECT_TIMEOUT`], with TCP_NODELAY, and secures the connection
/// as `security` says: the TLS handshake and the SASL login are bounded by the same timeout.
pub async fn connect(
    security: &InterBrokerSecurity,
    to: &BrokerAddr,
    client: &str,
) -> Result<BrokerStream, ConnectError> {
    if let Some(why) = &security.unusable {
        return Err(ConnectError::Security(format!(
            "connections to other brokers are not set up: {why}"
        )));
    }
    let timed_out = async {
        glommio::timer::sleep(CONNECT_TIMEOUT).await;
        Err(ConnectError::Unreachable(format!(
            "no connection to {} within {CONNECT_TIMEOUT:?}",
            to.addr
        )))
    };
    futures_lite::future::or(secured(security, to, client), timed_out).await
}

async fn secured(
    security: &InterBrokerSecurity,
    to: &BrokerAddr,
    client: &str,
) -> Result<BrokerStream, ConnectError> {
    let stream = TcpStream::connect(to.addr)
        .await
        .map_err(|e| ConnectError::Unreachable(e.to_string()))?;
    let _ = stream.set_nodelay(true);
    let io = match &security.tls {
        None => Io::Plain(stream),
        Some(config) => {
            let name = ServerName::try_from(to.host.clone()).map_err(|e| {
                ConnectError::Security(format!(
                    "{:?} is not a name to verify a certificate against: {e}",
                    to.host
                ))
            })?;
            let tls = tributary_security::tls::connect(config.clone(), name, stream)
                .await
                .map_err(|e| {
                    ConnectError::Security(format!(
                        "TLS with the broker failed: {e}; check the inter-broker listener's ssl.truststore.location holds the CA of every broker's certificate, and that each certificate names its host"
                    ))
                })?;
            Io::Tls(Box::new(tls))
        }
    };
    let mut stream = BrokerStream { io, renew_at: None };
    if let Some(login) = &security.login {
        let lifetime = authenticate(&mut stream, login, client)
            .await
            .map_err(ConnectError::Security)?;
        // Renewed at 85% of the session, as Kafka's clients re-authenticate early.
        stream.renew_at =
            lifetime.map(|l| std::time::Instant::now() + l.mul_f64(SESSION_RENEWAL_SHARE));
    }
    Ok(stream)
}

/// A shard's idle connections to other brokers, by address, for the requests it sends them one
/// at a time (transaction markers, KIP-890 verification), so each does not pay a new connection
/// — with TLS and a SCRAM login, several round trips and a key derivation. At most `max_idle`
/// per broker (`inter.broker.connections.idle.max`). A connection is taken for one exchange and
/// given back only once its response was read whole, so a request abandoned half-way (a
/// timeout) never leaves a reply behind for the next one.
pub struct ConnectionPool {
    idle: std::cell::RefCell<std::collections::HashMap<SocketAddr, Vec<BrokerStream>>>,
    max_idle: usize,
}

impl ConnectionPool {
    pub fn new(max_idle: usize) -> Self {
        Self {
            idle: Default::default(),
            max_idle,
        }
    }

    /// Sends `request` to `to` and reads its response: on an idle connection if there is one
    /// (once more on a new one if that fails: the other broker may have closed it while idle),
    /// else on a new connection secured as `security` says.
    #[allow(clippy::too_many_arguments)]
    pub async fn call<S: Decodable>(
        &self,
        security: &InterBrokerSecurity,
        to: &BrokerAddr,
        client: &str,
        request: &[u8],
        key: ApiKey,
        version: i16,
        correlation: i32,
        frame_max: usize,
    ) -> Result<S, String> {
        if let Some(mut stream) = self.take(to.addr) {
            if let Ok(resp) =
                exchange(&mut stream, request, key, version, correlation, frame_max).await
            {
                self.give_back(to.addr, stream);
                return Ok(resp);
            }
        }
        let mut stream = connect(security, to, client).await?;
        let resp = exchange(&mut stream, request, key, version, correlation, frame_max).await?;
        self.give_back(to.addr, stream);
        Ok(resp)
    }

    /// An idle connection to `addr` whose SASL session is not about to end.
    fn take(&self, addr: SocketAddr) -> Option<BrokerStream> {
        let mut idle = self.idle.borrow_mut();
        let streams = idle.get_mut(&addr)?;
        while let Some(stream) = streams.pop() {
            if !stream.needs_renewal() {
                return Some(stream);
            }
        }
        None
    }

    fn give_back(&self, addr: SocketAddr, stream: BrokerStream) {
        let mut idle = self.idle.borrow_mut();
        let streams = idle.entry(addr).or_default();
        if streams.len() < self.max_idle {
            streams.push(stream);
        }
    }
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
    stream: &mut (impl futures::io::AsyncRead + futures::io::AsyncWrite + Unpin),
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

/// How this broker connects to the others: as its inter-broker listener (the first of
/// `config.listeners`) secures connections — TLS verified against that listener's truststore,
/// presenting its keystore; SASL with `sasl.mechanism.inter.broker.protocol` and the user and
/// password of that listener's JAAS config for the mechanism, as Kafka's brokers log in.
#[derive(Clone, Default)]
pub struct InterBrokerSecurity {
    tls: Option<Arc<TlsClientConfig>>,
    login: Option<Login>,
    /// Why a node expected to talk to no other broker could not secure connections to them:
    /// every connection fails with it.
    unusable: Option<String>,
}

#[derive(Clone)]
struct Login {
    mechanism: String,
    username: String,
    password: crate::config::Secret,
}

impl std::fmt::Debug for InterBrokerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.login.as_ref().map(|l| &l.mechanism))
            .finish()
    }
}

impl InterBrokerSecurity {
    /// From the inter-broker listener's settings; an error names the key to set. The only
    /// voter of its quorum, a controller, usually talks to no other broker (unless brokers join
    /// it as observers): for it an unusable setting is no error, and each connection it makes
    /// to another broker fails saying why.
    pub fn from_config(config: &BrokerConfig) -> anyhow::Result<Self> {
        match Self::build(config) {
            Ok(security) => Ok(security),
            Err(e) if config.cluster.voters.len() <= 1 && config.cluster.roles.controller => {
                Ok(Self {
                    unusable: Some(format!("{e:#}")),
                    ..Self::default()
                })
            }
            Err(e) => Err(e),
        }
    }

    fn build(config: &BrokerConfig) -> anyhow::Result<Self> {
        use anyhow::{anyhow, bail};
        let Some(listener) = config.listeners.first() else {
            return Ok(Self::default());
        };
        let protocol = listener.protocol;
        let tls = match protocol.is_tls() {
            false => None,
            true => {
                let settings = config.listener_tls(&listener.name)?;
                let client =
                    tributary_security::tls::client_config(&settings.settings).map_err(|e| {
                        anyhow!(
                            "inter-broker listener {}: {}",
                            listener.name,
                            settings.explain(&e)
                        )
                    })?;
                Some(client)
            }
        };
        let login = match protocol.is_sasl() {
            false => None,
            true => {
                let mechanism = config
                    .values
                    .get("sasl.mechanism.inter.broker.protocol")
                    .map(|(v, _)| v.trim().to_ascii_uppercase())
                    .unwrap_or_default();
                if !INTER_BROKER_MECHANISMS.contains(&mechanism.as_str()) {
                    bail!(
                        "config sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener {} uses {}, so brokers log in to each other with SASL; set it to one of {} (and enable it in sasl.enabled.mechanisms)",
                        listener.name,
                        protocol.name(),
                        INTER_BROKER_MECHANISMS.join(", ")
                    );
                }
                if !config.security.sasl_enabled_mechanisms.contains(&mechanism) {
                    bail!(
                        "config sasl.mechanism.inter.broker.protocol={mechanism} is not in sasl.enabled.mechanisms; add it there, so brokers accept the login they make"
                    );
                }
                let key = format!(
                    "listener.name.{}.{}.sasl.jaas.config",
                    listener.name.to_ascii_lowercase(),
                    mechanism.to_ascii_lowercase()
                );
                let missing = || {
                    anyhow!(
                        "config {key}: brokers log in to each other with {mechanism} as the user and password it names; set it, e.g. {} required username=\"broker\" password=\"...\";",
                        if mechanism == "PLAIN" {
                            "org.apache.kafka.common.security.plain.PlainLoginModule"
                        } else {
                            "org.apache.kafka.common.security.scram.ScramLoginModule"
                        }
                    )
                };
                let text = config.listener_props.get(&key).ok_or_else(missing)?;
                let jaas = tributary_security::jaas::JaasConfig::parse(text)
                    .map_err(|e| anyhow!("config {key}: {e}"))?;
                let (Some(username), Some(password)) = (jaas.username(), jaas.password()) else {
                    return Err(missing());
                };
                Some(Login {
                    mechanism,
                    username: username.to_string(),
                    password: crate::config::Secret(password.to_string()),
                })
            }
        };
        Ok(Self {
            tls,
            login,
            unusable: None,
        })
    }
}

/// The SASL mechanisms a broker logs in to other brokers with.
pub const INTER_BROKER_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// A connection to another broker: plain TCP, or TLS over it.
pub struct BrokerStream {
    io: Io,
    /// When the SASL session the other broker granted (`connections.max.reauth.ms`) is near
    /// its end: the connection is made again before then, or the broker would close it.
    renew_at: Option<std::time::Instant>,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl BrokerStream {
    /// Sets the kernel's link timeout on the connection's socket (`socket::set_link_timeout`).
    pub fn set_link_timeout(&self, timeout: std::time::Duration) -> std::io::Result<()> {
        let tcp = match &self.io {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_ref(),
        };
        crate::socket::set_link_timeout(tcp, timeout)
    }

    /// Whether the connection's SASL session is about to end: connect again.
    pub fn needs_renewal(&self) -> bool {
        self.renew_at
            .is_some_and(|at| std::time::Instant::now() >= at)
    }
}

impl futures::io::AsyncRead for BrokerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl futures::io::AsyncWrite for BrokerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_close(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// The share of a SASL session after which a connection is made again.
const SESSION_RENEWAL_SHARE: f64 = 0.85;

/// The SASL handshake frames are small; a bigger answer is not a broker's.
const SASL_RESPONSE_BYTES_MAX: usize = 64 * 1024;

/// Logs in to the broker at the other end of `stream` as `login` says: SaslHandshake v1, then
/// SaslAuthenticate v2 until the mechanism is done. The error names the mechanism and user,
/// never the password.
async fn authenticate(
    stream: &mut BrokerStream,
    login: &Login,
    client: &str,
) -> Result<Option<Duration>, String> {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    let failed = |what: String| {
        format!(
            "SASL {} login as {:?} failed: {what}; check sasl.mechanism.inter.broker.protocol and the inter-broker listener's JAAS user and password (and that the user exists on every broker)",
            login.mechanism, login.username
        )
    };
    let handshake = encode(
        ApiKey::SaslHandshake,
        1,
        0,
        client,
        &SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(login.mechanism.clone())),
    );
    let shook: SaslHandshakeResponse = exchange(
        stream,
        &handshake,
        ApiKey::SaslHandshake,
        1,
        0,
        SASL_RESPONSE_BYTES_MAX,
    )
    .await?;
    if shook.error_code != 0 {
        return Err(failed(format!(
            "the broker refused the mechanism (error {}; it offers {:?})",
            shook.error_code,
            shook
                .mechanisms
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
        )));
    }
    use tributary_security::sasl_client::{SaslLogin, SASL_ROUNDS_MAX};
    let mut client_login = SaslLogin::new(&login.mechanism, &login.username, &login.password.0)
        .map_err(|e| failed(e.to_string()))?;
    let mut token = client_login.first().map_err(|e| failed(e.to_string()))?;
    // A broker asking for more rounds than the mechanism takes is not following it.
    for correlation in 1..=SASL_ROUNDS_MAX as i32 {
        let frame = encode(
            ApiKey::SaslAuthenticate,
            2,
            correlation,
            client,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        );
        let answer: SaslAuthenticateResponse = exchange(
            stream,
            &frame,
            ApiKey::SaslAuthenticate,
            2,
            correlation,
            SASL_RESPONSE_BYTES_MAX,
        )
        .await?;
        if answer.error_code != 0 {
            return Err(failed(format!(
                "error {}: {}",
                answer.error_code,
                answer.error_message.as_deref().unwrap_or("")
            )));
        }
        match client_login
            .next(&answer.auth_bytes)
            .map_err(|e| failed(e.to_string()))?
        {
            Some(next) => token = next,
            None => {
                let lifetime = u64::try_from(answer.session_lifetime_ms).unwrap_or(0);
                return Ok((lifetime > 0).then(|| Duration::from_millis(lifetime)));
            }
        }
    }
    Err(failed("the exchange did not end".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigInput;

    fn config(props: &[(&str, &str)]) -> BrokerConfig {
        let mut all = vec![
            (
                "listeners",
                "INTERNAL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
            ),
            (
                "listener.security.protocol.map",
                "INTERNAL:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256"),
        ];
        // A node with other brokers to reach: a broker-only node of a quorum elsewhere.
        all.extend_from_slice(&[
            ("process.roles", "broker"),
            ("node.id", "4"),
            ("controller.quorum.voters", "1@127.0.0.1:9990"),
        ]);
        all.extend_from_slice(props);
        BrokerConfig::build(ConfigInput::for_test(&all)).unwrap()
    }

    fn refused(props: &[(&str, &str)]) -> String {
        format!(
            "{:#}",
            InterBrokerSecurity::from_config(&config(props)).unwrap_err()
        )
    }

    #[test]
    fn a_sasl_inter_broker_listener_needs_a_mechanism_and_a_login() {
        let e = refused(&[]);
        assert!(
            e.contains("sasl.mechanism.inter.broker.protocol=GSSAPI"),
            "{e}"
        );
        let e = refused(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512")]);
        assert!(e.contains("not in sasl.enabled.mechanisms"), "{e}");
        let e = refused(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")]);
        assert!(
            e.contains("listener.name.internal.scram-sha-256.sasl.jaas.config")
                && e.contains("username="),
            "{e}"
        );
        let e = refused(&[
            ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256"),
            (
                "listener.name.internal.scram-sha-256.sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"b\";",
            ),
        ]);
        assert!(e.contains("username=\"broker\""), "{e}");
        let ok = InterBrokerSecurity::from_config(&config(&[
            ("sasl.mechanism.inter.broker.protocol", "scram-sha-256"),
            (
                "listener.name.internal.scram-sha-256.sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"b\" password=\"secret-pw\";",
            ),
        ]))
        .unwrap();
        let shown = format!("{ok:?}");
        assert!(
            shown.contains("SCRAM-SHA-256") && !shown.contains("secret-pw"),
            "{shown}"
        );
        assert!(ok.tls.is_none());
        // Alone in its cluster, a node needs no inter-broker login.
        let mut alone = config(&[]);
        alone.cluster.roles.controller = true;
        alone.cluster.voters.truncate(1);
        assert!(InterBrokerSecurity::from_config(&alone)
            .unwrap()
            .login
            .is_none());
    }

    /// A broker stand-in on loopback: answers every request on a connection with an empty
    /// ApiVersions v0 response for its correlation id, closes each connection after two
    /// answers, and counts the connections it accepted.
    fn answering_broker() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                for _ in 0..2 {
                    let mut len = [0u8; 4];
                    if conn.read_exact(&mut len).is_err() {
                        break;
                    }
                    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
                    conn.read_exact(&mut frame).unwrap();
                    // Response header v0 (the request's correlation id), then error 0 and no
                    // API keys.
                    let mut answer = vec![0, 0, 0, 10];
                    answer.extend_from_slice(&frame[4..8]);
                    answer.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
                    conn.write_all(&answer).unwrap();
                }
            }
        });
        (addr, accepted)
    }

    /// How many connections three calls through a pool keeping `max_idle` made.
    fn connections_for_three_calls(max_idle: usize) -> usize {
        use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
        let (addr, accepted) = answering_broker();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let pool = ConnectionPool::new(max_idle);
                let to = BrokerAddr {
                    addr,
                    host: "127.0.0.1".into(),
                };
                let security = InterBrokerSecurity::default();
                let request = encode(
                    ApiKey::ApiVersions,
                    0,
                    7,
                    "t",
                    &ApiVersionsRequest::default(),
                );
                for round in 0..3 {
                    let answer: ApiVersionsResponse = pool
                        .call(
                            &security,
                            &to,
                            "t",
                            &request,
                            ApiKey::ApiVersions,
                            0,
                            7,
                            1024,
                        )
                        .await
                        .unwrap_or_else(|e| panic!("round {round}: {e}"));
                    assert_eq!(answer.error_code, 0);
                }
            })
            .unwrap()
            .join()
            .unwrap();
        accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn the_pool_reuses_a_connection_and_replaces_one_the_broker_closed() {
        // Rounds 1 and 2 on one connection, which the broker then closed; round 3 found it
        // closed and made a second.
        assert_eq!(connections_for_three_calls(4), 2);
    }

    #[test]
    fn a_pool_keeping_no_idle_connection_connects_for_every_call() {
        assert_eq!(connections_for_three_calls(0), 3);
    }

    #[test]
    fn an_unusable_setting_fails_each_connection_as_a_security_error() {
        let security = InterBrokerSecurity {
            unusable: Some("no login".into()),
            ..InterBrokerSecurity::default()
        };
        let to = BrokerAddr {
            addr: "127.0.0.1:1".parse().unwrap(),
            host: "127.0.0.1".into(),
        };
        let got = glommio::LocalExecutorBuilder::default()
            .spawn(move || async move { connect(&security, &to, "t").await.err() })
            .unwrap()
            .join()
            .unwrap();
        assert!(matches!(got, Some(ConnectError::Security(why)) if why.ends_with("no login")));
    }
}
