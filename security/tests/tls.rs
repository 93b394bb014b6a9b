//! TLS end to end without a runtime or sockets: certificates made with rcgen, the server and a
//! client TLS stream over an in-memory pipe of bounded capacity (so partial writes and full
//! buffers happen), driven by one executor thread per test with a deadline so a hang fails.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::join;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tributary_security::tls::{
    accept, connect, server_config, subject_dn_rfc2253, ClientAuth, PrincipalMapper, TlsError,
    TlsSettings, TlsStream,
};

/// A test that has not finished by then is hung.
const TEST_DEADLINE: Duration = Duration::from_secs(20);

/// Small enough that every TLS record crosses the pipe in several partial writes.
const PIPE_BYTES: usize = 1000;

// ---------------------------------------------------------------------------------------------
// An in-memory duplex pipe.

#[derive(Default)]
struct Direction {
    bytes: VecDeque<u8>,
    closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// One end of the pipe: reads what the other end writes. Dropping it ends its direction.
struct End {
    incoming: Arc<Mutex<Direction>>,
    outgoing: Arc<Mutex<Direction>>,
    capacity: usize,
}

fn pipe(capacity: usize) -> (End, End) {
    let a_to_b = Arc::new(Mutex::new(Direction::default()));
    let b_to_a = Arc::new(Mutex::new(Direction::default()));
    let a = End {
        incoming: b_to_a.clone(),
        outgoing: a_to_b.clone(),
        capacity,
    };
    let b = End {
        incoming: a_to_b,
        outgoing: b_to_a,
        capacity,
    };
    (a, b)
}

fn lock(direction: &Mutex<Direction>) -> std::sync::MutexGuard<'_, Direction> {
    direction
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AsyncRead for End {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut direction = lock(&self.incoming);
        if direction.bytes.is_empty() {
            if direction.closed {
                return Poll::Ready(Ok(0));
            }
            direction.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let count = buf.len().min(direction.bytes.len());
        for (slot, byte) in buf.iter_mut().zip(direction.bytes.drain(..count)) {
            *slot = byte;
        }
        if let Some(writer) = direction.writer.take() {
            writer.wake();
        }
        Poll::Ready(Ok(count))
    }
}

impl AsyncWrite for End {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let capacity = self.capacity;
        let mut direction = lock(&self.outgoing);
        if direction.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = capacity - direction.bytes.len();
        if room == 0 {
            direction.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let count = room.min(buf.len());
        direction.bytes.extend(&buf[..count]);
        if let Some(reader) = direction.reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(count))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        close(&self.outgoing);
        Poll::Ready(Ok(()))
    }
}

fn close(direction: &Mutex<Direction>) {
    let mut direction = lock(direction);
    direction.closed = true;
    if let Some(reader) = direction.reader.take() {
        reader.wake();
    }
}

impl Drop for End {
    fn drop(&mut self) {
        close(&self.outgoing);
    }
}

/// Runs `test` on its own thread and fails if it has not finished within the deadline.
fn within_deadline<T: Send + 'static>(test: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = done.send(test());
    });
    match finished.recv_timeout(TEST_DEADLINE) {
        Ok(value) => value,
        // The test panicked: report its own failure.
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("the test thread ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the test did not finish in {TEST_DEADLINE:?}: it hangs")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates.

struct Authority {
    certificate: rcgen::Certificate,
    key: KeyPair,
}

struct Identity {
    certificate_pem: String,
    key_pem: String,
}

fn authority(name: &str) -> Authority {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let certificate = params.self_signed(&key).expect("CA certificate");
    Authority { certificate, key }
}

/// A certificate signed by `issuer`; `subject` is in encoding order (RFC 2253 lists it reversed).
fn identity(
    issuer: &Authority,
    names: &[&str],
    subject: &[(DnType, DnValue)],
    usage: ExtendedKeyUsagePurpose,
) -> Identity {
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    for (kind, value) in subject {
        params.distinguished_name.push(kind.clone(), value.clone());
    }
    params.extended_key_usages = vec![usage];
    let certificate = params
        .signed_by(&key, &issuer.certificate, &issuer.key)
        .expect("signed certificate");
    Identity {
        certificate_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn client_identity(issuer: &Authority, subject: &[(DnType, DnValue)]) -> Identity {
    identity(issuer, &[], subject, ExtendedKeyUsagePurpose::ClientAuth)
}

fn alice_subject() -> Vec<(DnType, DnValue)> {
    vec![
        (DnType::OrganizationName, DnValue::from("acme")),
        (DnType::OrganizationalUnitName, DnValue::from("eng")),
        (DnType::CommonName, DnValue::from("alice")),
    ]
}

/// A directory of its own for each use, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "tributary-tls-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temporary directory");
        TempDir(path)
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("temporary file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The CA, the broker's settings (keystore file with chain and key, truststore of the CA).
struct Setup {
    ca: Authority,
    settings: TlsSettings,
    _dir: TempDir,
}

fn setup(client_auth: ClientAuth) -> Setup {
    let ca = authority("Tributary test CA");
    let server = identity(
        &ca,
        &["broker.test"],
        &[(DnType::CommonName, DnValue::from("broker.test"))],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let dir = TempDir::new();
    let keystore = dir.file(
        "broker.pem",
        &format!("{}{}", server.certificate_pem, server.key_pem),
    );
    let truststore = dir.file("ca.pem", &ca.certificate.pem());
    let settings = TlsSettings {
        keystore_location: Some(keystore),
        truststore_location: Some(truststore),
        client_auth,
        ..TlsSettings::default()
    };
    Setup {
        ca,
        settings,
        _dir: dir,
    }
}

fn client_config(
    ca: &Authority,
    identity: Option<&Identity>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.certificate.der().clone()).expect("root");
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
    let config = match identity {
        Some(identity) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(identity.certificate_pem.as_bytes())
                    .collect::<Result<_, _>>()
                    .expect("client chain");
            let key =
                PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client auth")
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

fn server_name() -> ServerName<'static> {
    ServerName::try_from("broker.test").expect("server name")
}

type Handshakes = (
    Result<TlsStream<End>, TlsError>,
    Result<TlsStream<End>, TlsError>,
);

/// Both handshakes over a fresh pipe; a failed side drops its end, so the other cannot hang.
fn handshake(settings: &TlsSettings, client: Arc<ClientConfig>) -> Handshakes {
    let server = server_config(settings).expect("server config");
    let (server_end, client_end) = pipe(PIPE_BYTES);
    futures::executor::block_on(join(
        accept(server, server_end),
        connect(client, server_name(), client_end),
    ))
}

// ---------------------------------------------------------------------------------------------
// Handshakes and data.

fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn data_both_ways(versions: &'static [&'static rustls::SupportedProtocolVersion]) {
    within_deadline(move || {
        let setup = setup(ClientAuth::Required);
        let alice = client_identity(&setup.ca, &alice_subject());
        let (server, client) = handshake(
            &setup.settings,
            client_config(&setup.ca, Some(&alice), versions),
        );
        let server = server.expect("server handshake");
        let client = client.expect("client handshake");
        assert_eq!(
            server
                .principal(&PrincipalMapper::default())
                .expect("principal"),
            "User:CN=alice,OU=eng,O=acme"
        );
        let rules = PrincipalMapper::from_rules("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U,DEFAULT")
            .expect("rules");
        assert_eq!(
            server.principal(&rules).expect("mapped principal"),
            "User:ALICE@ENG"
        );

        // Several times the send buffer limit each way, through a pipe of 1000 bytes.
        let request = pattern(300_000, 7);
        let response = pattern(200_000, 11);
        let (mut server_read, mut server_write) = server.split();
        let (mut client_read, mut client_write) = client.split();
        let expected_request = request.clone();
        let expected_response = response.clone();
        let server_side = async move {
            let mut received = vec![0u8; expected_request.len()];
            server_read
                .read_exact(&mut received)
                .await
                .expect("server reads");
            assert!(received == expected_request, "the server read other bytes");
            server_write
                .write_all(&response)
                .await
                .expect("server writes");
            server_write.close().await.expect("server closes");
            // The client's close_notify is a clean end of file.
            let mut rest = Vec::new();
            server_read
                .read_to_end(&mut rest)
                .await
                .expect("clean end of file");
            assert!(rest.is_empty());
        };
        let client_side = async move {
            client_write
                .write_all(&request)
                .await
                .expect("client writes");
            client_write.flush().await.expect("client flushes");
            let mut received = vec![0u8; expected_response.len()];
            client_read
                .read_exact(&mut received)
                .await
                .expect("client reads");
            assert!(received == expected_response, "the client read other bytes");
            let mut rest = Vec::new();
            client_read
                .read_to_end(&mut rest)
                .await
                .expect("server's close_notify");
            assert!(rest.is_empty());
            client_write.close().await.expect("client closes");
        };
        futures::executor::block_on(join(server_side, client_side));
    });
}

#[test]
fn data_flows_both_ways_over_tls13_with_a_client_certificate() {
    static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    data_both_ways(&TLS13);
}

#[test]
fn data_flows_both_ways_over_tls12_with_a_client_certificate() {
    static TLS12: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];
    data_both_ways(&TLS12);
}

#[test]
fn required_client_auth_refuses_a_client_without_a_certificate() {
    within_deadline(|| {
        let setup = setup(ClientAuth::Required);
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let (server, _client) = handshake(&setup.settings, client);
        match server {
            Err(TlsError::Handshake(error)) => {
                assert!(error.to_string().contains("certificate"), "{error}")
            }
            other => panic!("expected a handshake error, got {other:?}"),
        }
    });
}

#[test]
fn an_untrusted_client_certificate_is_refused() {
    within_deadline(|| {
        for client_auth in [ClientAuth::Required, ClientAuth::Requested] {
            let setup = setup(client_auth);
            let other_ca = authority("Someone else's CA");
            let mallory = client_identity(&other_ca, &alice_subject());
            let client = client_config(&setup.ca, Some(&mallory), &[&rustls::version::TLS13]);
            let (server, _client) = handshake(&setup.settings, client);
            assert!(
                matches!(server, Err(TlsError::Handshake(_))),
                "{client_auth}: {:?}",
                server.err()
            );
        }
    });
}

#[test]
fn requested_client_auth_without_a_certificate_is_anonymous() {
    within_deadline(|| {
        let setup = setup(ClientAuth::Requested);
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let (server, client) = handshake(&setup.settings, client);
        let server = server.expect("server handshake");
        assert!(client.is_ok());
        assert_eq!(server.peer_subject_dn().expect("subject"), None);
        assert_eq!(
            server
                .principal(&PrincipalMapper::default())
                .expect("principal"),
            "User:ANONYMOUS"
        );
    });
}

#[test]
fn no_client_auth_needs_no_truststore() {
    within_deadline(|| {
        let mut setup = setup(ClientAuth::None);
        setup.settings.truststore_location = None;
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let (server, client) = handshake(&setup.settings, client);
        assert!(client.is_ok());
        let server = server.expect("server handshake");
        assert_eq!(
            server
                .principal(&PrincipalMapper::default())
                .expect("principal"),
            "User:ANONYMOUS"
        );
    });
}

#[test]
fn the_subject_keeps_java_rfc2253_form() {
    within_deadline(|| {
        let setup = setup(ClientAuth::Required);
        let subject = vec![
            (
                DnType::CountryName,
                DnValue::PrintableString("US".try_into().expect("printable")),
            ),
            (DnType::OrganizationName, DnValue::from("acme")),
            (DnType::CommonName, DnValue::from("Tkac, Adam")),
            (
                DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
                DnValue::Ia5String("a@b.c".try_into().expect("ia5")),
            ),
        ];
        let client_identity = client_identity(&setup.ca, &subject);
        let client = client_config(
            &setup.ca,
            Some(&client_identity),
            &[&rustls::version::TLS13],
        );
        let (server, _client) = handshake(&setup.settings, client);
        let server = server.expect("server handshake");
        let dn = server.peer_subject_dn().expect("subject");
        assert_eq!(
            dn.as_deref(),
            Some(r"1.2.840.113549.1.9.1=#16056140622e63,CN=Tkac\, Adam,O=acme,C=US")
        );
        let rules =
            PrincipalMapper::from_rules(r"RULE:^.*CN=((\\, *|\w)+)(,.*|$)/$1/L").expect("rules");
        assert_eq!(
            server.principal(&rules).expect("principal"),
            r"User:tkac\, adam"
        );
    });
}

#[test]
fn every_truncated_certificate_is_an_error_not_a_panic() {
    let ca = authority("Tributary test CA");
    let alice = client_identity(&ca, &alice_subject());
    let der = CertificateDer::from_pem_slice(alice.certificate_pem.as_bytes()).expect("der");
    let der = der.as_ref();
    assert_eq!(
        subject_dn_rfc2253(der).expect("whole certificate"),
        "CN=alice,OU=eng,O=acme"
    );
    for cut in 0..der.len() {
        assert!(subject_dn_rfc2253(&der[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn a_plaintext_kafka_request_fails_at_once() {
    within_deadline(|| {
        let setup = setup(ClientAuth::None);
        let server = server_config(&setup.settings).expect("server config");
        let (server_end, mut client_end) = pipe(PIPE_BYTES);
        // An ApiVersions v3 request as a plaintext Kafka client sends it; the client then waits
        // for an answer without closing, so only the first bytes can end the handshake.
        let mut frame = vec![0, 0, 0, 0x10, 0, 18, 0, 3, 0, 0, 0, 1, 0, 6];
        frame.extend_from_slice(b"client");
        let client = async move {
            client_end
                .write_all(&frame)
                .await
                .expect("plaintext written");
            client_end
        };
        let (result, _client_end) =
            futures::executor::block_on(join(accept(server, server_end), client));
        match result {
            Err(TlsError::NotTls { first_bytes }) => {
                assert_eq!(first_bytes, vec![0, 0, 0, 0x10, 0, 18, 0, 3]);
                let message = TlsError::NotTls { first_bytes }.to_string();
                assert!(message.contains("security.protocol=SSL"), "{message}");
            }
            other => panic!("expected NotTls, got {other:?}"),
        }
    });
}

#[test]
fn end_of_file_in_the_handshake_is_an_error() {
    within_deadline(|| {
        let setup = setup(ClientAuth::None);
        let server = server_config(&setup.settings).expect("server config");
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let mut hello = Vec::new();
        let mut connection =
            rustls::ClientConnection::new(client, server_name()).expect("client connection");
        connection.write_tls(&mut hello).expect("client hello");
        for cut in [0, 3, 20, hello.len() - 1] {
            let (server_end, mut client_end) = pipe(PIPE_BYTES);
            let part = hello[..cut].to_vec();
            let client = async move {
                client_end.write_all(&part).await.expect("part written");
                client_end.close().await.expect("closed");
            };
            let (result, ()) =
                futures::executor::block_on(join(accept(server.clone(), server_end), client));
            match result {
                Err(TlsError::Handshake(error)) => {
                    assert_eq!(
                        error.kind(),
                        io::ErrorKind::UnexpectedEof,
                        "cut {cut}: {error}"
                    )
                }
                other => panic!("cut {cut}: expected an end-of-file error, got {other:?}"),
            }
        }
    });
}

#[test]
fn a_socket_closed_without_close_notify_is_an_unexpected_end() {
    within_deadline(|| {
        let setup = setup(ClientAuth::None);
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let (server, client) = handshake(&setup.settings, client);
        let mut server = server.expect("server handshake");
        let mut client = client.expect("client handshake");
        futures::executor::block_on(async {
            client.write_all(b"partial").await.expect("written");
            client.flush().await.expect("flushed");
            drop(client);
            let mut buf = [0u8; 64];
            let read = server.read(&mut buf).await.expect("data before the end");
            assert_eq!(&buf[..read], b"partial");
            let error = server
                .read(&mut buf)
                .await
                .expect_err("an error, not Ok(0)");
            assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        });
    });
}

// ---------------------------------------------------------------------------------------------
// Configuration errors.

fn config_error(settings: &TlsSettings) -> String {
    match server_config(settings) {
        Ok(_) => panic!("expected a configuration error"),
        Err(error) => error.to_string(),
    }
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "`{message}` lacks `{part}`");
    }
}

#[test]
fn a_missing_keystore_file_is_named() {
    let mut setup = setup(ClientAuth::None);
    setup.settings.keystore_location = Some(PathBuf::from("/nonexistent/broker.pem"));
    let message = config_error(&setup.settings);
    assert_contains(
        &message,
        &[
            "ssl.keystore.location=/nonexistent/broker.pem",
            "cannot be read",
        ],
    );
}

#[test]
fn a_keystore_without_a_key_or_a_certificate_says_what_to_add() {
    let setup = setup(ClientAuth::None);
    let dir = TempDir::new();
    let server = identity(
        &setup.ca,
        &["broker.test"],
        &[],
        ExtendedKeyUsagePurpose::ServerAuth,
    );

    let only_certificate = dir.file("cert.pem", &server.certificate_pem);
    let settings = TlsSettings {
        keystore_location: Some(only_certificate.clone()),
        ..TlsSettings::default()
    };
    let message = config_error(&settings);
    assert_contains(
        &message,
        &[
            &format!("ssl.keystore.location={}", only_certificate.display()),
            "holds no private key",
            "-----BEGIN PRIVATE KEY-----",
        ],
    );

    let only_key = dir.file("key.pem", &server.key_pem);
    let settings = TlsSettings {
        keystore_location: Some(only_key),
        ..TlsSettings::default()
    };
    assert_contains(
        &config_error(&settings),
        &["holds no certificate", "-----BEGIN CERTIFICATE-----"],
    );

    let two_keys = dir.file(
        "two.pem",
        &format!(
            "{}{}{}",
            server.certificate_pem, server.key_pem, server.key_pem
        ),
    );
    let settings = TlsSettings {
        keystore_location: Some(two_keys),
        ..TlsSettings::default()
    };
    assert_contains(&config_error(&settings), &["holds 2 private keys"]);
}

#[test]
fn encrypted_keys_and_key_passwords_are_refused_with_a_reason() {
    let setup = setup(ClientAuth::None);
    let mut settings = setup.settings.clone();
    settings.key_password = Some("secret".to_owned());
    assert_contains(
        &config_error(&settings),
        &["ssl.key.password", "not supported", "decrypt"],
    );

    let dir = TempDir::new();
    let server = identity(
        &setup.ca,
        &["broker.test"],
        &[],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n";
    let keystore = dir.file("enc.pem", &format!("{}{encrypted}", server.certificate_pem));
    let settings = TlsSettings {
        keystore_location: Some(keystore),
        ..TlsSettings::default()
    };
    assert_contains(
        &config_error(&settings),
        &["encrypted private key", "not supported", "openssl"],
    );

    let settings = TlsSettings {
        keystore_certificate_chain: Some(server.certificate_pem.clone()),
        keystore_key: Some(encrypted.to_owned()),
        ..TlsSettings::default()
    };
    assert_contains(
        &config_error(&settings),
        &["ssl.keystore.key", "encrypted private key"],
    );

    // The older OpenSSL form: a PKCS#1 key with encryption headers.
    let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n";
    let settings = TlsSettings {
        keystore_certificate_chain: Some(server.certificate_pem.clone()),
        keystore_key: Some(legacy.to_owned()),
        ..TlsSettings::default()
    };
    assert_contains(
        &config_error(&settings),
        &["ssl.keystore.key", "encrypted private key"],
    );
}

#[test]
fn a_write_after_close_is_refused() {
    within_deadline(|| {
        let setup = setup(ClientAuth::None);
        let client = client_config(&setup.ca, None, &[&rustls::version::TLS13]);
        let (server, client) = handshake(&setup.settings, client);
        let mut server = server.expect("server handshake");
        let mut client = client.expect("client handshake");
        futures::executor::block_on(async {
            server.close().await.expect("closed");
            let error = server.write(b"late").await.expect_err("refused");
            assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
            let mut rest = Vec::new();
            client
                .read_to_end(&mut rest)
                .await
                .expect("clean end of file");
            assert!(rest.is_empty());
        });
    });
}

#[test]
fn inline_pem_values_work_and_are_checked() {
    let setup = setup(ClientAuth::None);
    let server = identity(
        &setup.ca,
        &["broker.test"],
        &[],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let inline = TlsSettings {
        keystore_certificate_chain: Some(server.certificate_pem.clone()),
        keystore_key: Some(server.key_pem.clone()),
        ..TlsSettings::default()
    };
    assert!(server_config(&inline).is_ok());

    let both = TlsSettings {
        keystore_location: setup.settings.keystore_location.clone(),
        ..inline.clone()
    };
    assert_contains(&config_error(&both), &["ssl.keystore.location", "not both"]);

    let chain_only = TlsSettings {
        keystore_key: None,
        ..inline.clone()
    };
    assert_contains(
        &config_error(&chain_only),
        &["ssl.keystore.certificate.chain", "without ssl.keystore.key"],
    );

    let nothing = TlsSettings::default();
    assert_contains(
        &config_error(&nothing),
        &["ssl.keystore.location", "is not set"],
    );

    let other = identity(
        &setup.ca,
        &["other.test"],
        &[],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let mismatched = TlsSettings {
        keystore_key: Some(other.key_pem),
        ..inline
    };
    assert_contains(
        &config_error(&mismatched),
        &["does not belong to the first certificate"],
    );
}

#[test]
fn client_auth_needs_a_usable_truststore() {
    let mut setup = setup(ClientAuth::Required);
    let dir = TempDir::new();
    setup.settings.truststore_location = None;
    assert_contains(
        &config_error(&setup.settings),
        &["ssl.client.auth=required", "ssl.truststore.location"],
    );

    setup.settings.truststore_location = Some(dir.file("empty.pem", "no certificates here\n"));
    assert_contains(
        &config_error(&setup.settings),
        &["ssl.truststore.location=", "holds no CA certificate"],
    );

    setup.settings.truststore_location = Some(PathBuf::from("/nonexistent/ca.pem"));
    assert_contains(
        &config_error(&setup.settings),
        &[
            "ssl.truststore.location=/nonexistent/ca.pem",
            "cannot be read",
        ],
    );
}

#[test]
fn bad_mapping_rules_fail_at_start_up() {
    let mut setup = setup(ClientAuth::Required);
    setup.settings.principal_mapping_rules = "RULE:^CN=(.*?)$/$1/X".to_owned();
    assert_contains(
        &config_error(&setup.settings),
        &["ssl.principal.mapping.rules", "invalid rule"],
    );
    setup.settings.principal_mapping_rules = String::new();
    assert_contains(
        &config_error(&setup.settings),
        &["holds no rule", "DEFAULT"],
    );
}
