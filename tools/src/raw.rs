//! trib's own connections, for the requests librdkafka has no call for (reassignments, leader
//! elections, transactions, `cluster info`'s probes): blocking sockets that speak whatever the
//! listener does — PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL — from the `--command-config`
//! settings librdkafka's commands use ([`crate::security::raw`] reads them).
//!
//! TLS is rustls with the ring provider, trusting `ssl.truststore.location` (or the system's CA
//! bundle) and checking the broker's name unless `ssl.endpoint.identification.algorithm` is
//! empty, as Kafka's clients do. SASL is SaslHandshake v1 and SaslAuthenticate v2 with PLAIN or
//! SCRAM-SHA-256/512; a SCRAM exchange is complete only once the broker's signature verified.
//!
//! One command may send several requests to a broker: the authenticated connection is kept for
//! the next one (for as long as the broker's session lasts) instead of authenticating again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, StreamOwned};

use crate::security::{RawSasl, RawSecurity, RawTls};
use crate::Cli;

/// The largest response trib reads; anything bigger is taken for a peer that is not a Kafka
/// broker (or a corrupt length) rather than allocated.
pub const RESPONSE_BYTES_MAX: usize = 1 << 20;
/// The largest PEM file (truststore or keystore) read; a CA bundle of a few hundred
/// certificates is well under this.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;
/// Where Linux distributions keep the system's CA bundle, used when `ssl.truststore.location`
/// is unset (and `SSL_CERT_FILE` names none), as librdkafka falls back on OpenSSL's.
const SYSTEM_CA_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
/// SaslHandshake v1: the mechanism is agreed, then the tokens go in SaslAuthenticate requests.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2 (flexible), which carries the session's lifetime.
const SASL_AUTHENTICATE_VERSION: i16 = 2;
/// Correlation ids of the SASL requests trib makes itself; the commands' own requests use
/// small numbers, and one connection carries one request at a time.
const SASL_CORRELATION: i32 = 0x5a51;

/// Open connections by the `host:port` they were made to, for the next request of the command.
static CONNECTIONS: Mutex<Vec<(String, Connection)>> = Mutex::new(Vec::new());

/// One request/response exchange with the broker at `host_port`, over a connection kept from an
/// earlier exchange or a new one; returns the response after its length.
pub fn exchange_at(cli: &Cli, host_port: &str, request: &[u8]) -> Result<Vec<u8>> {
    let kept = {
        let mut open = CONNECTIONS.lock().unwrap_or_else(|e| e.into_inner());
        open.iter()
            .position(|(k, _)| k == host_port)
            .map(|i| open.swap_remove(i).1)
    };
    let mut conn = match kept {
        // The request may take up to the timeout; it must not outlive the session.
        Some(conn) if conn.usable_for(cli.timeout()) => conn,
        _ => Connection::open(cli, host_port)?,
    };
    // A failed exchange drops the connection: it may have stopped mid-frame.
    let response = conn.exchange(request)?;
    CONNECTIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((host_port.to_string(), conn));
    Ok(response)
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

struct Connection {
    stream: Stream,
    addr: SocketAddr,
    timeout: Duration,
    /// When the broker ends the SASL session (`connections.max.reauth.ms`); `None`: never.
    session_ends: Option<Instant>,
}

impl Connection {
    /// Connects to `host_port`, completes the TLS handshake and SASL authentication the
    /// settings ask for, and returns the connection ready for requests.
    fn open(cli: &Cli, host_port: &str) -> Result<Connection> {
        let security = crate::security::raw(&cli.security)
            .context("in --command-config, for this command's own connections")?;
        let (host, addrs) = resolve(host_port)?;
        let timeout = cli.timeout();
        let (socket, addr) = connect(&addrs, timeout)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.set_write_timeout(Some(timeout))?;
        // Requests go out whole; waiting to coalesce them only adds latency.
        socket.set_nodelay(true)?;
        let RawSecurity { tls, sasl } = security;
        let stream = match tls {
            None => Stream::Plain(socket),
            Some(tls) => Stream::Tls(Box::new(tls_handshake(&tls, host, socket, addr)?)),
        };
        let mut conn = Connection {
            stream,
            addr,
            timeout,
            session_ends: None,
        };
        if let Some(sasl) = sasl {
            conn.authenticate(&sasl)?;
        }
        Ok(conn)
    }

    fn usable_for(&self, timeout: Duration) -> bool {
        self.session_ends
            .is_none_or(|end| Instant::now() + timeout < end)
    }

    /// Sends one request frame and reads the response frame.
    fn exchange(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        let addr = self.addr;
        let len = i32::try_from(request.len()).context("request too large for one frame")?;
        self.stream
            .write_all(&len.to_be_bytes())
            .and_then(|()| self.stream.write_all(request))
            .and_then(|()| self.stream.flush())
            .map_err(|e| self.io_error(e, "sending a request to"))?;
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .map_err(|e| self.io_error(e, "reading the answer of"))?;
        let len = usize::try_from(i32::from_be_bytes(len))
            .with_context(|| format!("the broker at {addr} sent a negative response length"))?;
        if len > RESPONSE_BYTES_MAX {
            bail!(
                "the broker at {addr} announced a response of {len} bytes, over trib's limit of {RESPONSE_BYTES_MAX}; is it a Kafka listener of the security protocol --command-config names?"
            );
        }
        let mut body = vec![0u8; len];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| self.io_error(e, "reading the answer of"))?;
        Ok(body)
    }

    fn io_error(&mut self, e: std::io::Error, doing: &str) -> anyhow::Error {
        use std::io::ErrorKind;
        let addr = self.addr;
        let tls = matches!(self.stream, Stream::Tls(_));
        // A broker that ends a TLS session says why in an alert sent before it closes; a write
        // that found the socket closed has not read it, so read it now.
        let e = if tls && matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) {
            match self.stream.read(&mut [0u8; 1]) {
                Err(alert) if alert_of(&alert).is_some() => alert,
                _ => e,
            }
        } else {
            e
        };
        if let Some(alert) = alert_of(&e) {
            return anyhow!(
                "{doing} the broker at {addr}: it ended TLS with alert {alert:?}; if it wants a client certificate, give ssl.keystore.location in --command-config"
            );
        }
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => anyhow!(
                "{doing} the broker at {addr}: no progress within {} ms (--timeout-ms)",
                self.timeout.as_millis()
            ),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
                if tls =>
            {
                anyhow!(
                    "{doing} the broker at {addr}: it closed the connection; if the listener is SASL_SSL give the SASL settings, and if it wants a client certificate ssl.keystore.location, in --command-config"
                )
            }
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                anyhow!(
                    "{doing} the broker at {addr}: it closed the connection; if the listener is SSL or SASL, give its settings with --command-config"
                )
            }
            _ => anyhow!("{doing} the broker at {addr}: {e}"),
        }
    }

    /// One request of trib's own (the SASL steps) and its decoded response.
    fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp> {
        let body = encode_request(key, version, SASL_CORRELATION, req)?;
        let answer = self.exchange(&body)?;
        decode_response(answer, key, version, SASL_CORRELATION)
            .with_context(|| format!("from the broker at {}", self.addr))
    }

    /// SaslHandshake, then the mechanism's SaslAuthenticate round trips.
    fn authenticate(&mut self, sasl: &RawSasl) -> Result<()> {
        let name = sasl.mechanism.name();
        let addr = self.addr;
        let handshake: SaslHandshakeResponse = self
            .call(
                ApiKey::SaslHandshake,
                SASL_HANDSHAKE_VERSION,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(name)),
            )
            .context("SASL handshake")?;
        if handshake.error_code != 0 {
            let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            bail!(
                "the broker at {addr} refused SASL mechanism {name} ({}); it offers {offered:?}: set sasl.mechanism in --command-config to one of them",
                crate::reassign::error_name(handshake.error_code)
            );
        }
        let failed = |detail: String| {
            anyhow!(
                "authentication as {:?} with {name} at {addr} failed: {detail}; check the username and password in sasl.jaas.config of --command-config",
                sasl.username
            )
        };
        use tributary_security::sasl_client::{SaslLogin, SaslLoginError, SASL_ROUNDS_MAX};
        use tributary_security::scram::ScramClientError;
        let mut login = SaslLogin::new(name, &sasl.username, &sasl.password)
            .map_err(|e| failed(e.to_string()))?;
        let mut token = login.first().map_err(|e| failed(e.to_string()))?;
        for _ in 0..SASL_ROUNDS_MAX {
            let answer = self
                .sasl_step(token)
                .map_err(|e| failed(format!("{e:#}")))?;
            match login.next(&answer) {
                Ok(Some(next)) => token = next,
                Ok(None) => return Ok(()),
                Err(SaslLoginError::Scram(e @ ScramClientError::ServerSignature { .. })) => {
                    bail!(
                        "the broker at {addr} accepted {:?}'s {name} proof but {e}; it is not the broker it claims to be, or its credential store was changed",
                        sasl.username
                    )
                }
                Err(e) => return Err(failed(e.to_string())),
            }
        }
        Err(failed(format!(
            "the broker asked for more than the {SASL_ROUNDS_MAX} rounds {name} takes"
        )))
    }

    /// One SaslAuthenticate round trip: the server's token, or its refusal.
    fn sasl_step(&mut self, token: Vec<u8>) -> Result<Vec<u8>> {
        let resp: SaslAuthenticateResponse = self.call(
            ApiKey::SaslAuthenticate,
            SASL_AUTHENTICATE_VERSION,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        )?;
        if resp.error_code != 0 {
            bail!(
                "{}{}",
                crate::reassign::error_name(resp.error_code),
                resp.error_message
                    .as_deref()
                    .map_or(String::new(), |m| format!(": {m}"))
            );
        }
        if resp.session_lifetime_ms > 0 {
            let lifetime = Duration::from_millis(resp.session_lifetime_ms.unsigned_abs());
            self.session_ends = Some(Instant::now() + lifetime);
        }
        Ok(resp.auth_bytes.to_vec())
    }
}

/// The TLS alert the broker sent, if that is what `e` is.
fn alert_of(e: &std::io::Error) -> Option<rustls::AlertDescription> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(alert) => Some(*alert),
        _ => None,
    }
}

/// The host of `host_port` (without an IPv6 address's brackets) and its addresses.
fn resolve(host_port: &str) -> Result<(String, Vec<SocketAddr>)> {
    let not_an_address = || anyhow!("{host_port} is not a HOST:PORT address");
    let (host, _) = host_port.rsplit_once(':').ok_or_else(not_an_address)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = host_port
        .to_socket_addrs()
        .map_err(|e| anyhow!("{host_port} is not a HOST:PORT address that resolves: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(not_an_address());
    }
    Ok((host.to_string(), addrs))
}

/// Tries each address in turn (a name may resolve to IPv6 and IPv4 and listen on one only).
fn connect(addrs: &[SocketAddr], timeout: Duration) -> Result<(TcpStream, SocketAddr)> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Ok(s) => return Ok((s, *addr)),
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, e) = last.expect("at least one address");
    Err(anyhow!("cannot reach the broker at {addr}: {e}"))
}

/// Completes the TLS handshake over `socket`, so a certificate problem is reported as one
/// rather than as the first request's failure.
fn tls_handshake(
    tls: &RawTls,
    host: String,
    mut socket: TcpStream,
    addr: SocketAddr,
) -> Result<StreamOwned<ClientConnection, TcpStream>> {
    let config = tls_config(tls)?;
    let name = ServerName::try_from(host.clone())
        .map_err(|_| anyhow!("{host:?} is neither a DNS name nor an IP address for TLS"))?;
    let mut conn =
        ClientConnection::new(config, name).map_err(|e| anyhow!("starting TLS to {addr}: {e}"))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut socket) {
            return Err(tls_handshake_error(&e, &host, addr, tls));
        }
    }
    Ok(StreamOwned::new(conn, socket))
}

/// What a failed handshake means, and what to change.
fn tls_handshake_error(
    e: &std::io::Error,
    host: &str,
    addr: SocketAddr,
    tls: &RawTls,
) -> anyhow::Error {
    use rustls::{CertificateError, Error as TlsError};
    let trust = tls.truststore.as_deref().map_or_else(
        || "the system's CA bundle".to_string(),
        |p| format!("ssl.truststore.location ({})", p.display()),
    );
    let cause = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<TlsError>());
    let hint = match cause {
        Some(TlsError::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the broker's certificate does not name {host}; connect by a name it has, or set ssl.endpoint.identification.algorithm= (empty) in --command-config to skip the check"
        ),
        Some(TlsError::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            format!("the broker's certificate is not signed by a CA in {trust}")
        }
        Some(TlsError::InvalidCertificate(_)) => {
            format!("the broker's certificate was refused; check it against {trust}")
        }
        Some(TlsError::InvalidMessage(_)) | Some(TlsError::InappropriateMessage { .. }) => {
            "the broker did not answer in TLS; is this listener SSL or SASL_SSL?".to_string()
        }
        Some(TlsError::AlertReceived(_)) => {
            "the broker refused the handshake; if it wants a client certificate, give ssl.keystore.location".to_string()
        }
        _ if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the broker closed the connection; is this listener SSL or SASL_SSL?".to_string()
        }
        _ => "check the listener's security protocol and the ssl.* settings of --command-config"
            .to_string(),
    };
    anyhow!("TLS handshake with the broker at {addr} failed: {e}; {hint}")
}

fn tls_config(tls: &RawTls) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    let (setting, store) = match &tls.truststore {
        Some(p) => ("ssl.truststore.location", p.clone()),
        None => ("the system's CA bundle", system_ca_bundle()?),
    };
    let pem = read_pem(setting, &store)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{setting} {}: {e}", store.display()))?;
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        bail!(
            "{setting} {} holds no usable CA certificate; give a PEM file with the CA that signed the broker's certificate",
            store.display()
        );
    }
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("TLS versions: {e}"))?;
    let builder = if tls.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let verifier = ChainOnlyVerifier {
            chain: WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| anyhow!("{setting}: {e}"))?,
            provider,
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
    };
    let config = match &tls.keystore {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let setting = "ssl.keystore.location";
            let pem = read_pem(setting, path)?;
            let chain = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow!("{setting} {}: {e}", path.display()))?;
            if chain.is_empty() {
                bail!(
                    "{setting} {} holds no certificate; give a PEM file with the client's certificate chain and its key",
                    path.display()
                );
            }
            let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
                anyhow!(
                    "{setting} {}: no unencrypted private key (PKCS#8, PKCS#1 or SEC1) in it ({e})",
                    path.display()
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| anyhow!("{setting} {}: {e}", path.display()))?
        }
    };
    Ok(Arc::new(config))
}

/// `SSL_CERT_FILE`, else the first system CA bundle that exists.
fn system_ca_bundle() -> Result<std::path::PathBuf> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE") {
        return Ok(file.into());
    }
    SYSTEM_CA_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            anyhow!(
                "no system CA bundle found; set ssl.truststore.location in --command-config to a PEM file with the CA that signed the broker's certificate"
            )
        })
}

fn read_pem(setting: &str, path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("{setting}: reading {}", path.display()))?;
    let mut pem = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut pem)
        .with_context(|| format!("{setting}: reading {}", path.display()))?;
    if pem.len() as u64 > PEM_FILE_BYTES_MAX {
        bail!(
            "{setting}: {} is over {PEM_FILE_BYTES_MAX} bytes; is it a PEM file?",
            path.display()
        );
    }
    Ok(pem)
}

/// Checks the broker's certificate chain against the trusted CAs, but not that it names the
/// host: Kafka's `ssl.endpoint.identification.algorithm=` (empty). The chain, validity dates
/// and key usage are still checked, and the handshake's signatures verified.
#[derive(Debug)]
struct ChainOnlyVerifier {
    /// Verifies chains; its name check is the one this verifier leaves out.
    chain: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error as TlsError};
        // The chain is checked first, so a name error means every other check passed.
        match self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A request's header and body, as one frame's contents (without its length).
pub(crate) fn encode_request<Req: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    req: &Req,
) -> Result<BytesMut> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("trib")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, key.request_header_version(version))
        .map_err(|e| anyhow!("encoding the {key:?} header: {e}"))?;
    req.encode(&mut body, version)
        .map_err(|e| anyhow!("encoding {key:?}: {e}"))?;
    Ok(body)
}

/// The response to request `correlation` of `key` at `version`, from a frame's contents.
pub(crate) fn decode_response<Resp: Decodable>(
    answer: Vec<u8>,
    key: ApiKey,
    version: i16,
    correlation: i32,
) -> Result<Resp> {
    let mut resp = Bytes::from(answer);
    let header = ResponseHeader::decode(&mut resp, key.response_header_version(version))
        .map_err(|e| anyhow!("malformed {key:?} response header: {e}"))?;
    if header.correlation_id != correlation {
        bail!(
            "the broker answered another request ({}) than {key:?}",
            header.correlation_id
        );
    }
    Resp::decode(&mut resp, version).map_err(|e| anyhow!("malformed {key:?} response: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A peer that answers each frame with the same bytes and counts the connections made.
    fn echo_peer() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut len = [0u8; 4];
                    while conn.read_exact(&mut len).is_ok() {
                        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
                        if conn.read_exact(&mut body).is_err()
                            || conn.write_all(&len).is_err()
                            || conn.write_all(&body).is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[test]
    fn one_command_reuses_its_connection() {
        let (addr, accepted) = echo_peer();
        let cli = Cli::parse_from(["trib", "--bootstrap", &addr, "topics", "reassignments"]);
        assert_eq!(exchange_at(&cli, &addr, b"first").unwrap(), b"first");
        assert_eq!(exchange_at(&cli, &addr, b"second").unwrap(), b"second");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_ended_session_is_not_reused() {
        let (addr, _) = echo_peer();
        let cli = Cli::parse_from(["trib", "--bootstrap", &addr, "topics", "reassignments"]);
        let mut conn = Connection::open(&cli, &addr).unwrap();
        assert!(conn.usable_for(cli.timeout()));
        conn.session_ends = Some(Instant::now() + Duration::from_millis(10));
        assert!(!conn.usable_for(cli.timeout()));
    }
}
