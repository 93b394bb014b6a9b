//! TLS for Kafka listeners, kept free of any runtime: the rustls server configuration built from
//! Kafka's `ssl.*` settings (PEM keystore and truststore, `ssl.client.auth`), a TLS stream over
//! any futures `AsyncRead + AsyncWrite` byte stream (the broker wraps its `TcpStream` in it), and
//! the Kafka principal taken from the client's certificate with `ssl.principal.mapping.rules`.
//!
//! What it must not do: spawn, sleep or time out (the caller bounds the handshake with its own
//! timer), block on I/O on the data path (only [`server_config`] reads files, at start-up or on a
//! reload), or panic on any byte a peer or a file holds.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
};
use rustls_pki_types::pem::{PemObject, SectionKind};
pub use rustls_pki_types::ServerName;
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use x509_parser::prelude::{FromDer, X509Certificate};

mod principal;

pub use principal::{subject_dn_rfc2253, PrincipalMapper};
/// The client side's configuration and the name a server is verified against, for callers of
/// [`connect`] that do not depend on rustls themselves.
pub use rustls::ClientConfig as TlsClientConfig;

/// The largest PEM file (keystore or truststore) read; a CA bundle of a few hundred certificates
/// is well under 1 MiB, so anything bigger is the wrong file.
pub const PEM_FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// The most bytes one connection keeps queued for sending (plaintext accepted before the
/// handshake ends, and encrypted records the socket has not taken yet). rustls bounds received
/// plaintext itself (16 KiB) and asks for no more bytes from the socket until it is read.
pub const TLS_SEND_BUFFER_BYTES_MAX: usize = 64 * 1024;

/// `ssl.principal.mapping.rules` when unset: the subject DN as it is.
pub const PRINCIPAL_MAPPING_RULES_DEFAULT: &str = "DEFAULT";

/// The principal of a TLS client that presented no certificate.
pub const ANONYMOUS_PRINCIPAL: &str = "User:ANONYMOUS";

/// How many of the first bytes a peer sends are kept, to tell a plaintext client from a broken
/// TLS one in the handshake error.
const FIRST_BYTES_KEPT: usize = 8;

/// The TLS record content types (change_cipher_spec 20 to heartbeat 24); a first byte outside
/// them means the peer does not speak TLS at all. A plaintext Kafka request starts with 0, the
/// high byte of its length.
const TLS_RECORD_TYPES: std::ops::RangeInclusive<u8> = 20..=24;

/// Errors building the TLS configuration, completing a handshake or naming the peer. A `Config`
/// error names the setting, what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A setting is missing, unreadable or inconsistent.
    #[error("{setting} {problem}")]
    Config {
        /// The Kafka key, with its value when the value is a path (never a key's PEM).
        setting: String,
        /// What is wrong and what to do about it.
        problem: String,
    },
    /// The peer closed, sent a bad record, or failed certificate verification.
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] io::Error),
    /// The peer's first bytes are not a TLS record: most likely a plaintext Kafka client.
    #[error(
        "the peer did not start a TLS handshake (its first bytes are {first_bytes:02x?}, not a \
         TLS record; a plaintext Kafka client?): the client must use security.protocol=SSL or \
         SASL_SSL for this listener"
    )]
    NotTls {
        /// Up to the first eight bytes the peer sent.
        first_bytes: Vec<u8>,
    },
    /// `ssl.principal.mapping.rules` does not parse, or no rule matches a subject.
    #[error("ssl.principal.mapping.rules: {0}")]
    PrincipalMapping(String),
    /// The verified client certificate could not be read for its subject.
    #[error("the client certificate's subject cannot be read: {0}")]
    PeerCertificate(String),
}

impl TlsError {
    fn config(setting: impl Into<String>, problem: impl Into<String>) -> Self {
        TlsError::Config {
            setting: setting.into(),
            problem: problem.into(),
        }
    }
}

/// `ssl.client.auth`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// A client certificate is asked for and verified if given; without one the client is
    /// `User:ANONYMOUS`.
    Requested,
    /// A client certificate signed by the truststore is mandatory.
    Required,
}

impl FromStr for ClientAuth {
    type Err = TlsError;

    /// Case-insensitive, as Kafka reads it.
    fn from_str(value: &str) -> Result<Self, TlsError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(TlsError::config(
                format!("ssl.client.auth={value}"),
                "is not one of required, requested, none",
            )),
        }
    }
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        })
    }
}

/// A listener's TLS settings, named after Kafka's keys (`ssl.keystore.type` is PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keystore.location`: a PEM file holding the certificate chain (the broker's own
    /// certificate first) and its unencrypted PKCS#8, RSA or EC private key.
    pub keystore_location: Option<PathBuf>,
    /// `ssl.keystore.certificate.chain`: the chain as inline PEM (with `ssl.keystore.key`).
    pub keystore_certificate_chain: Option<String>,
    /// `ssl.keystore.key`: the private key as inline PEM (with the chain above).
    pub keystore_key: Option<String>,
    /// `ssl.key.password`: encrypted keys are not supported, so setting it is an error.
    pub key_password: Option<String>,
    /// `ssl.truststore.location`: PEM CA certificates that sign client certificates.
    pub truststore_location: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules`.
    pub principal_mapping_rules: String,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            keystore_location: None,
            keystore_certificate_chain: None,
            keystore_key: None,
            key_password: None,
            truststore_location: None,
            client_auth: ClientAuth::None,
            principal_mapping_rules: PRINCIPAL_MAPPING_RULES_DEFAULT.to_owned(),
        }
    }
}

impl TlsSettings {
    /// The parsed `ssl.principal.mapping.rules`.
    pub fn principal_mapper(&self) -> Result<PrincipalMapper, TlsError> {
        PrincipalMapper::from_rules(&self.principal_mapping_rules)
    }
}

/// Builds the server configuration for a TLS listener. Reads the keystore and truststore files
/// with blocking calls: call it at start-up or on a reload, off the data path. Also checks
/// `ssl.principal.mapping.rules`, so a bad rule fails at start-up rather than at a client's
/// first connection.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    if settings
        .key_password
        .as_deref()
        .is_some_and(|password| !password.is_empty())
    {
        return Err(TlsError::config(
            "ssl.key.password",
            "is set, but encrypted private keys are not supported; decrypt the key \
             (openssl pkcs8 -topk8 -nocrypt -in encrypted.pem -out key.pem), keep the file \
             readable only by the broker's user, and remove ssl.key.password",
        ));
    }
    let mapper = settings.principal_mapper()?;
    if mapper.is_empty() && settings.client_auth != ClientAuth::None {
        return Err(TlsError::PrincipalMapping(format!(
            "\"{}\" holds no rule, so no client certificate would map to a principal; use DEFAULT",
            settings.principal_mapping_rules
        )));
    }
    let (chain, key, keystore_setting) = load_keystore(settings)?;
    warn_if_expired(&keystore_setting, &chain);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = client_verifier(settings, &provider)?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::config("ssl.protocol", format!("cannot be set up: {error}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|error| keystore_rejected(&keystore_setting, error))?;
    Ok(Arc::new(config))
}

/// Who a keystore's own certificate says the broker is. Kafka refuses a reloaded keystore whose
/// certificate names another subject or other subject alternative names than the one in use,
/// unless the listener allows it (`ssl.allow.dn.changes`, `ssl.allow.san.changes`, KIP-978): a
/// client that pinned the old identity would stop connecting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertIdentity {
    /// The subject in RFC 2253 form (`CN=broker,O=acme`).
    pub subject: String,
    /// The subject alternative names (`DNS:localhost`, `IP:127.0.0.1`, …), sorted: Kafka
    /// compares them as a set.
    pub subject_alt_names: Vec<String>,
}

/// The identity of the certificate a listener with `settings` would serve (reads the keystore).
pub fn keystore_identity(settings: &TlsSettings) -> Result<CertIdentity, TlsError> {
    use x509_parser::extensions::GeneralName;
    let (chain, _, setting) = load_keystore(settings)?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::config(setting, "holds no certificate"));
    };
    let unreadable = |error: String| {
        TlsError::config(
            setting.clone(),
            format!("holds a certificate that cannot be read: {error}"),
        )
    };
    let subject = subject_dn_rfc2253(leaf.as_ref()).map_err(|e| unreadable(e.to_string()))?;
    let (_, certificate) =
        X509Certificate::from_der(leaf.as_ref()).map_err(|e| unreadable(e.to_string()))?;
    let mut subject_alt_names: Vec<String> = match certificate.subject_alternative_name() {
        Ok(Some(extension)) => extension
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => format!("DNS:{dns}"),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => format!(
                        "IP:{}",
                        std::net::Ipv4Addr::from([bytes[0], bytes[1], bytes[2], bytes[3]])
                    ),
                    16 => {
                        let mut octets = [0u8; 16];
                        octets.copy_from_slice(bytes);
                        format!("IP:{}", std::net::Ipv6Addr::from(octets))
                    }
                    _ => format!("IP:{bytes:02x?}"),
                },
                GeneralName::RFC822Name(mail) => format!("email:{mail}"),
                GeneralName::URI(uri) => format!("URI:{uri}"),
                other => format!("{other:?}"),
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(error) => return Err(unreadable(error.to_string())),
    };
    subject_alt_names.sort();
    subject_alt_names.dedup();
    Ok(CertIdentity {
        subject,
        subject_alt_names,
    })
}

fn keystore_rejected(setting: &str, error: rustls::Error) -> TlsError {
    let problem = match error {
        rustls::Error::InconsistentKeys(_) => "holds a private key that does not belong to the \
                                               first certificate; put the broker's own \
                                               certificate first, then its CA chain"
            .to_owned(),
        other => format!(
            "was refused by TLS: {other}; check the key type (RSA, ECDSA P-256/384 or Ed25519)"
        ),
    };
    TlsError::config(setting, problem)
}

/// The certificate chain, the private key, and the setting they came from (for messages).
fn load_keystore(
    settings: &TlsSettings,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String), TlsError> {
    let inline = (&settings.keystore_certificate_chain, &settings.keystore_key);
    match (&settings.keystore_location, inline) {
        (Some(_), (Some(_), _) | (_, Some(_))) => Err(TlsError::config(
            "ssl.keystore.location",
            "is set together with ssl.keystore.certificate.chain/ssl.keystore.key; use either \
             the PEM file or the inline PEM values, not both",
        )),
        (Some(path), (None, None)) => {
            let setting = format!("ssl.keystore.location={}", path.display());
            let pem = read_pem_file(&setting, path)?;
            let contents = PemContents::parse(&setting, &pem)?;
            let chain = contents.chain(&setting, "in the same PEM file as the key")?;
            let key = contents.single_key(
                &setting,
                "put the PKCS#8 key (-----BEGIN PRIVATE KEY-----) in the same PEM file",
            )?;
            Ok((chain, key, setting))
        }
        (None, (Some(chain_pem), Some(key_pem))) => {
            let chain_setting = "ssl.keystore.certificate.chain";
            let chain = PemContents::parse(chain_setting, chain_pem.as_bytes())?
                .chain(chain_setting, "as its value")?;
            let key = PemContents::parse("ssl.keystore.key", key_pem.as_bytes())?.single_key(
                "ssl.keystore.key",
                "set it to the PKCS#8 key (-----BEGIN PRIVATE KEY-----)",
            )?;
            Ok((chain, key, "ssl.keystore.key".to_owned()))
        }
        (None, (Some(_), None)) => Err(TlsError::config(
            "ssl.keystore.certificate.chain",
            "is set without ssl.keystore.key; set both, or use ssl.keystore.location",
        )),
        (None, (None, Some(_))) => Err(TlsError::config(
            "ssl.keystore.key",
            "is set without ssl.keystore.certificate.chain; set both, or use \
             ssl.keystore.location",
        )),
        (None, (None, None)) => Err(TlsError::config(
            "ssl.keystore.location",
            "is not set: a TLS listener needs a certificate; set ssl.keystore.location to a PEM \
             file holding the certificate chain and the private key, or set both \
             ssl.keystore.certificate.chain and ssl.keystore.key",
        )),
    }
}

fn client_verifier(
    settings: &TlsSettings,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    if settings.client_auth == ClientAuth::None {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    let Some(path) = &settings.truststore_location else {
        return Err(TlsError::config(
            format!("ssl.client.auth={}", settings.client_auth),
            "needs ssl.truststore.location: a PEM file of the CA certificates that sign client \
             certificates",
        ));
    };
    let (roots, setting) = load_roots(path, "client certificates")?;
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    if settings.client_auth == ClientAuth::Requested {
        builder = builder.allow_unauthenticated();
    }
    builder
        .build()
        .map_err(|error| TlsError::config(setting, format!("cannot verify clients: {error}")))
}

/// The CA certificates of the truststore at `path` (which sign `what`), and the setting they
/// came from (for messages).
fn load_roots(path: &Path, what: &str) -> Result<(RootCertStore, String), TlsError> {
    let setting = format!("ssl.truststore.location={}", path.display());
    let pem = read_pem_file(&setting, path)?;
    let contents = PemContents::parse(&setting, &pem)?;
    if contents.certificates.is_empty() {
        return Err(TlsError::config(
            setting,
            format!(
                "holds no CA certificate; put the PEM certificates (-----BEGIN CERTIFICATE-----) \
                 of the CAs that sign {what} in it"
            ),
        ));
    }
    let mut roots = RootCertStore::empty();
    for (index, certificate) in contents.certificates.into_iter().enumerate() {
        roots.add(certificate).map_err(|error| {
            TlsError::config(
                setting.clone(),
                format!(
                    "certificate #{} is not a usable CA certificate: {error}",
                    index + 1
                ),
            )
        })?;
    }
    Ok((roots, setting))
}

/// The client side of a broker's TLS connections to other brokers, from its inter-broker
/// listener's settings: the other brokers' certificates are verified against the listener's
/// truststore (their names included, as Kafka's default `ssl.endpoint.identification.algorithm`
/// does), and the broker presents its own keystore, for listeners that ask for a client
/// certificate.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, TlsError> {
    let Some(path) = &settings.truststore_location else {
        return Err(TlsError::config(
            "ssl.truststore.location",
            "is not set: a broker connecting to other brokers over TLS verifies their \
             certificates against it; set it (for the inter-broker listener) to a PEM file of \
             the CAs that sign the brokers' certificates",
        ));
    };
    let (roots, _) = load_roots(path, "the brokers' certificates")?;
    let (chain, key, keystore_setting) = load_keystore(settings)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::config("ssl.protocol", format!("cannot be set up: {error}")))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| keystore_rejected(&keystore_setting, error))?;
    Ok(Arc::new(config))
}

fn read_pem_file(setting: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let unreadable = |error: io::Error| {
        TlsError::config(
            setting,
            format!(
                "cannot be read ({error}); check the path and that the broker's user may read it"
            ),
        )
    };
    let bytes = std::fs::metadata(path).map_err(unreadable)?.len();
    if bytes > PEM_FILE_BYTES_MAX {
        return Err(TlsError::config(
            setting,
            format!("is {bytes} bytes, more than the {PEM_FILE_BYTES_MAX} a PEM file may have; is it the right file?"),
        ));
    }
    std::fs::read(path).map_err(unreadable)
}

/// The certificates and private keys of one PEM text; other sections are skipped.
struct PemContents {
    certificates: Vec<CertificateDer<'static>>,
    keys: Vec<PrivateKeyDer<'static>>,
}

impl PemContents {
    fn parse(setting: &str, pem: &[u8]) -> Result<PemContents, TlsError> {
        // An encrypted key is skipped by the PEM reader (PKCS#8) or fails as bad base64 (the
        // OpenSSL "Proc-Type" form); either way the real cause is worth naming.
        if contains(pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
            || contains(pem, b"Proc-Type: 4,ENCRYPTED")
        {
            return Err(TlsError::config(
                setting,
                "holds an encrypted private key, which is not supported; decrypt it \
                 (openssl pkcs8 -topk8 -nocrypt -in encrypted.pem -out key.pem) and keep the \
                 file readable only by the broker's user",
            ));
        }
        let mut contents = PemContents {
            certificates: Vec::new(),
            keys: Vec::new(),
        };
        for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
            let (kind, der) = section
                .map_err(|error| TlsError::config(setting, format!("is not valid PEM: {error}")))?;
            match kind {
                SectionKind::Certificate => contents.certificates.push(CertificateDer::from(der)),
                SectionKind::PrivateKey => contents
                    .keys
                    .push(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der))),
                SectionKind::RsaPrivateKey => contents
                    .keys
                    .push(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der))),
                SectionKind::EcPrivateKey => contents
                    .keys
                    .push(PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der))),
                _ => {}
            }
        }
        Ok(contents)
    }

    fn chain(&self, setting: &str, place: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        if self.certificates.is_empty() {
            return Err(TlsError::config(
                setting,
                format!(
                    "holds no certificate; put the certificate chain (-----BEGIN CERTIFICATE-----, \
                     the broker's own certificate first) {place}"
                ),
            ));
        }
        for (index, certificate) in self.certificates.iter().enumerate() {
            if let Err(error) = X509Certificate::from_der(certificate.as_ref()) {
                return Err(TlsError::config(
                    setting,
                    format!(
                        "certificate #{} is not a valid X.509 certificate: {error}",
                        index + 1
                    ),
                ));
            }
        }
        Ok(self.certificates.clone())
    }

    fn single_key(&self, setting: &str, advice: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
        match self.keys.as_slice() {
            [key] => Ok(key.clone_key()),
            [] => Err(TlsError::config(
                setting,
                format!("holds no private key; {advice}"),
            )),
            keys => Err(TlsError::config(
                setting,
                format!(
                    "holds {} private keys; keep exactly one, the key of the broker's own \
                     certificate",
                    keys.len()
                ),
            )),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn warn_if_expired(setting: &str, chain: &[CertificateDer<'static>]) {
    let Some(leaf) = chain.first() else { return };
    if let Ok((_, certificate)) = X509Certificate::from_der(leaf.as_ref()) {
        if !certificate.validity().is_valid() {
            tracing::warn!(
                "{setting}: the broker's certificate is not valid now (valid from {} to {}); \
                 clients will refuse it",
                certificate.validity().not_before,
                certificate.validity().not_after
            );
        }
    }
}

/// Completes the server side of a TLS handshake over `io`. No timeout: the caller wraps the
/// future in its own. A peer that speaks plaintext gets [`TlsError::NotTls`] as soon as its
/// first record header arrives.
pub async fn accept<S>(config: Arc<ServerConfig>, io: S) -> Result<TlsStream<S>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let connection = ServerConnection::new(config)
        .map_err(|error| TlsError::Handshake(io::Error::other(error)))?;
    let mut stream = TlsStream::new(io, Connection::Server(connection));
    stream.handshake().await?;
    Ok(stream)
}

/// Completes the client side of a TLS handshake over `io` (for brokers that connect to other
/// brokers over TLS, and for tests).
pub async fn connect<S>(
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    io: S,
) -> Result<TlsStream<S>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let connection = ClientConnection::new(config, server_name)
        .map_err(|error| TlsError::Handshake(io::Error::other(error)))?;
    let mut stream = TlsStream::new(io, Connection::Client(connection));
    stream.handshake().await?;
    Ok(stream)
}

/// A TLS session over a byte stream, itself an `AsyncRead + AsyncWrite` byte stream of the
/// plaintext (so it can be `split()` like a socket). Written bytes are queued in rustls (up to
/// [`TLS_SEND_BUFFER_BYTES_MAX`]) and leave on the next write, flush or close; `poll_close`
/// sends close_notify. A read returns 0 after the peer's close_notify and an `UnexpectedEof`
/// error when the socket ends without one.
pub struct TlsStream<S> {
    io: S,
    connection: Connection,
    /// close_notify has been queued; nothing more may be written.
    close_sent: bool,
    /// The first bytes the peer sent, kept during the handshake only.
    first_bytes: Vec<u8>,
}

impl<S> fmt::Debug for TlsStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("handshaking", &self.connection.is_handshaking())
            .field("close_sent", &self.close_sent)
            .finish_non_exhaustive()
    }
}

impl<S> TlsStream<S> {
    /// The wrapped byte stream.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The wrapped byte stream, for socket options; reading or writing it breaks the session.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The rustls session (protocol version, cipher suite, peer certificates).
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The peer's certificate chain, its own certificate first; `None` when it sent none.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.connection.peer_certificates()
    }

    /// The subject of the peer's certificate in RFC 2253 form (`CN=alice,OU=eng,O=acme`), as
    /// Java's `X500Principal.getName()` writes it; `None` without a certificate.
    pub fn peer_subject_dn(&self) -> Result<Option<String>, TlsError> {
        match self.peer_certificates().and_then(|chain| chain.first()) {
            Some(certificate) => subject_dn_rfc2253(certificate.as_ref()).map(Some),
            None => Ok(None),
        }
    }

    /// The Kafka principal of the peer, as Kafka's default principal builder makes it:
    /// `User:` + the mapped subject DN, or `User:ANONYMOUS` without a client certificate.
    pub fn principal(&self, mapper: &PrincipalMapper) -> Result<String, TlsError> {
        match self.peer_subject_dn()? {
            Some(dn) => Ok(format!("User:{}", mapper.map(&dn)?)),
            None => Ok(ANONYMOUS_PRINCIPAL.to_owned()),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    fn new(io: S, mut connection: Connection) -> Self {
        connection.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES_MAX));
        TlsStream {
            io,
            connection,
            close_sent: false,
            first_bytes: Vec::with_capacity(FIRST_BYTES_KEPT),
        }
    }

    async fn handshake(&mut self) -> Result<(), TlsError> {
        let result = futures::future::poll_fn(|cx| self.poll_handshake(cx)).await;
        let first_bytes = std::mem::take(&mut self.first_bytes);
        result.map_err(|error| match first_bytes.first() {
            Some(first)
                if !TLS_RECORD_TYPES.contains(first) && self.connection.is_handshaking() =>
            {
                TlsError::NotTls { first_bytes }
            }
            _ => TlsError::Handshake(error),
        })
    }

    /// Drives the handshake: sends what rustls has queued, reads what it wants, until the
    /// handshake is over and its last flight has left.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let flushed = self.poll_flush_tls(cx)?;
            if !self.connection.is_handshaking() {
                return flushed.map(Ok);
            }
            if !self.connection.wants_read() {
                // rustls waits for its flight to leave before it reads the answer.
                if flushed.is_pending() {
                    return Poll::Pending;
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer ended the TLS session during the handshake",
                )));
            }
            match ready!(self.poll_read_tls(cx))? {
                0 => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection during the TLS handshake",
                    )))
                }
                _ => continue,
            }
        }
    }

    /// Reads once from the socket into rustls and processes the records. `Ok(0)` is the
    /// socket's end of file (rustls records it too).
    fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let keep = if self.connection.is_handshaking() {
            Some(&mut self.first_bytes)
        } else {
            None
        };
        let mut reader = SyncIo {
            io: &mut self.io,
            cx: &mut *cx,
            first_bytes: keep,
        };
        let read = match self.connection.read_tls(&mut reader) {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(error) => return Poll::Ready(Err(error)),
        };
        if let Err(error) = self.connection.process_new_packets() {
            // rustls queued an alert saying why; send it if the socket takes it now.
            let _ = self.poll_write_tls(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, error)));
        }
        Poll::Ready(Ok(read))
    }

    fn poll_write_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut writer = SyncIo {
            io: &mut self.io,
            cx,
            first_bytes: None,
        };
        match self.connection.write_tls(&mut writer) {
            Ok(written) => Poll::Ready(Ok(written)),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    /// Writes every queued TLS record to the socket, across partial writes.
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.connection.wants_write() {
            if ready!(self.poll_write_tls(cx))? == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the socket took no bytes of a TLS record",
                )));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            match this.connection.reader().read(buf) {
                Ok(read) => return Poll::Ready(Ok(read)),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
            // No plaintext is buffered, so rustls takes more records (and after the socket's
            // end of file the reader above answers, so this does not spin).
            ready!(this.poll_read_tls(cx))?;
            if this.connection.wants_write() {
                // A reply rustls queued while reading (a key update, an alert) leaves now if
                // the socket takes it, otherwise with the next write or flush.
                if let Poll::Ready(Err(error)) = this.poll_flush_tls(cx) {
                    return Poll::Ready(Err(error));
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.close_sent {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after the TLS session was closed",
            )));
        }
        let mut accepted = this.connection.writer().write(buf)?;
        if accepted == 0 {
            // The send buffer is full: empty it into the socket first.
            ready!(this.poll_flush_tls(cx))?;
            accepted = this.connection.writer().write(buf)?;
            if accepted == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the TLS session took no bytes",
                )));
            }
        }
        // Start sending; what the socket does not take now leaves on the next write or flush.
        if let Poll::Ready(Err(error)) = this.poll_flush_tls(cx) {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(accepted))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_flush_tls(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_sent {
            this.connection.send_close_notify();
            this.close_sent = true;
        }
        ready!(this.poll_flush_tls(cx))?;
        Pin::new(&mut this.io).poll_close(cx)
    }
}

/// The async byte stream seen as blocking `Read`/`Write` for rustls: `Pending` becomes
/// `WouldBlock`, with the waker registered by the poll.
struct SyncIo<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
    first_bytes: Option<&'a mut Vec<u8>>,
}

impl<S: AsyncRead + Unpin> Read for SyncIo<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_read(self.cx, buf) {
            Poll::Ready(Ok(read)) => {
                if let Some(kept) = self.first_bytes.as_deref_mut() {
                    let room = FIRST_BYTES_KEPT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..read.min(room)]);
                }
                Ok(read)
            }
            Poll::Ready(Err(error)) => Err(error),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> Write for SyncIo<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_auth_parses_case_insensitively() {
        assert_eq!(
            "REQUIRED".parse::<ClientAuth>().ok(),
            Some(ClientAuth::Required)
        );
        assert_eq!(
            " requested ".parse::<ClientAuth>().ok(),
            Some(ClientAuth::Requested)
        );
        assert_eq!("none".parse::<ClientAuth>().ok(), Some(ClientAuth::None));
        let error = "sometimes"
            .parse::<ClientAuth>()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("ssl.client.auth=sometimes is not one of required, requested, none")
        );
    }

    #[test]
    fn keystore_identity_names_the_subject_and_sorted_alt_names() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "broker");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "acme");
        let cert = params.self_signed(&key).unwrap();
        let settings = TlsSettings {
            keystore_certificate_chain: Some(cert.pem()),
            keystore_key: Some(key.serialize_pem()),
            ..TlsSettings::default()
        };
        let identity = keystore_identity(&settings).unwrap();
        assert_eq!(identity.subject, "O=acme,CN=broker");
        assert_eq!(
            identity.subject_alt_names,
            ["DNS:localhost", "IP:127.0.0.1"]
        );
        let missing = keystore_identity(&TlsSettings::default()).unwrap_err();
        assert!(missing
            .to_string()
            .starts_with("ssl.keystore.location is not set"));
    }
}
