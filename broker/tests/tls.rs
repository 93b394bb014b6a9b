//! TLS over the wire: a broker with PLAINTEXT, SSL and SASL_SSL listeners (certificates made
//! with rcgen for 127.0.0.1), librdkafka clients producing and consuming over SSL, over
//! SASL_SSL with PLAIN and with a client certificate (`ssl.client.auth=required`), and the bad
//! inputs: plaintext Kafka bytes on the SSL port, a client without a certificate where one is
//! required, an untrusted or expired client certificate, a certificate that no
//! `ssl.principal.mapping.rules` rule maps, a TLS client on the
//! PLAINTEXT port, a silent client — each closing only its own connection — and keystores that
//! stop start-up with the key named.

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest};
use kafka_protocol::protocol::StrBytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tributary_broker::config::BrokerConfig;
use tributary_broker::server::BrokerHandle;

use common::{incremental_alter, start_broker, RawConn};

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;
const T: Duration = Duration::from_secs(30);

/// PEM files of a CA, a server certificate for 127.0.0.1 and localhost, and a client
/// certificate (CN=alice), written into `dir`.
struct Pki {
    ca: PathBuf,
    /// The server's certificate and key in one file (`ssl.keystore.location`).
    server: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A client certificate from a CA the broker does not trust.
    rogue_cert: PathBuf,
    rogue_key: PathBuf,
    /// A client certificate from the trusted CA whose validity ended in 2021.
    expired_cert: PathBuf,
    expired_key: PathBuf,
}

fn authority(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    (params.self_signed(&key).unwrap(), key)
}

/// A certificate signed by the CA: (certificate PEM, key PEM).
fn signed(
    ca: &(rcgen::Certificate, KeyPair),
    names: &[&str],
    cn: &str,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, &ca.0, &ca.1).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki(dir: &Path) -> Pki {
    let ca = authority("tributary test CA");
    let rogue_ca = authority("someone else's CA");
    let (server_cert, server_key) = signed(
        &ca,
        &["127.0.0.1", "localhost"],
        "broker",
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = signed(&ca, &[], "alice", ExtendedKeyUsagePurpose::ClientAuth);
    let (rogue_cert, rogue_key) = signed(
        &rogue_ca,
        &[],
        "mallory",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (expired_cert, expired_key) = {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "alice");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let cert = params.signed_by(&key, &ca.0, &ca.1).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let write = |name: &str, pem: &str| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", &ca.0.pem()),
        server: write("server.pem", &format!("{server_cert}{server_key}")),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client-key.pem", &client_key),
        rogue_cert: write("rogue.pem", &rogue_cert),
        rogue_key: write("rogue-key.pem", &rogue_key),
        expired_cert: write("expired.pem", &expired_cert),
        expired_key: write("expired-key.pem", &expired_key),
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A broker with PLAINTEXT, SSL and SASL_SSL listeners; `extra` adds or overrides keys.
fn broker(data: &Path, pki: &Pki, extra: &[(&str, &str)]) -> BrokerHandle {
    let server = path(&pki.server);
    let mut props = vec![
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        ),
        ("ssl.keystore.location", server.as_str()),
        ("sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.sasl_ssl.plain.sasl.jaas.config", JAAS),
    ];
    props.extend_from_slice(extra);
    start_broker(data, 1, &props)
}

fn listener(b: &BrokerHandle, name: &str) -> SocketAddr {
    b.listeners
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("listener {name}"))
        .1
}

/// A librdkafka client config over SSL trusting the test CA.
fn tls_client(addr: SocketAddr, pki: &Pki) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", addr.to_string())
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", path(&pki.ca))
        .set("message.timeout.ms", "10000");
    c
}

/// Produces three records and reads them back with clients made by `client`.
fn round_trip(client: impl Fn() -> ClientConfig, topic: &str) {
    let p: BaseProducer = client().create().unwrap();
    for i in 0..3 {
        let v = format!("{topic}-{i}");
        p.send(BaseRecord::<(), String>::to(topic).payload(&v))
            .unwrap();
    }
    p.flush(T).unwrap_or_else(|e| panic!("{topic}: {e}"));
    let c: BaseConsumer = client()
        .set("group.id", format!("g-{topic}"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while got.len() < 3 && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    assert_eq!(
        got,
        [0, 1, 2].map(|i| format!("{topic}-{i}")),
        "{topic}: records read back"
    );
}

/// Whether a client made by `client` gets the cluster's metadata within a few seconds.
fn gets_metadata(client: ClientConfig) -> bool {
    let c: BaseConsumer = client.create().unwrap();
    c.fetch_metadata(None, Duration::from_secs(5)).is_ok()
}

fn api_versions(conn: &mut RawConn) -> kafka_protocol::messages::ApiVersionsResponse {
    conn.request(
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("t"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    )
}

/// Reads until the broker closes the connection (failing after the socket's read timeout):
/// what it sent before closing, at most a TLS alert record.
fn read_until_closed(conn: &mut RawConn) -> Vec<u8> {
    let mut got = Vec::new();
    match conn.stream.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => got,
        Err(e) => panic!("the broker did not close the connection: {e} (read {got:?})"),
    }
}

#[test]
fn clients_produce_and_consume_over_ssl_and_sasl_ssl() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    let b = broker(&data, &pki, &[]);
    let ssl = listener(&b, "SSL");
    let sasl_ssl = listener(&b, "SASL_SSL");
    round_trip(|| tls_client(ssl, &pki), "t-ssl");
    round_trip(
        || {
            let mut c = tls_client(sasl_ssl, &pki);
            c.set("security.protocol", "SASL_SSL")
                .set("sasl.mechanisms", "PLAIN")
                .set("sasl.username", "alice")
                .set("sasl.password", "alice-secret");
            c
        },
        "t-sasl-ssl",
    );
    // A wrong password over SASL_SSL is refused as over SASL_PLAINTEXT.
    let mut wrong = tls_client(sasl_ssl, &pki);
    wrong
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "alice")
        .set("sasl.password", "wrong");
    assert!(!gets_metadata(wrong), "a wrong password is refused");
    // Metadata on the SSL listener names the brokers' SSL endpoints.
    let c: BaseConsumer = tls_client(ssl, &pki).create().unwrap();
    let md = c.fetch_metadata(Some("t-ssl"), T).unwrap();
    assert_eq!(md.brokers()[0].port() as u16, ssl.port());
    // The PLAINTEXT listener is unchanged.
    round_trip(
        || {
            let mut c = ClientConfig::new();
            c.set("bootstrap.servers", b.addr.to_string());
            c
        },
        "t-plain",
    );
    b.shutdown().unwrap();
}

#[test]
fn mutual_tls_needs_a_trusted_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    let ca = path(&pki.ca);
    // Per-listener keys: only the SSL listener asks for client certificates.
    // STRICT is an SSL listener whose principal mapping matches only bob's certificate.
    let b = broker(
        &data,
        &pki,
        &[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,STRICT://127.0.0.1:0",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,STRICT:SSL",
            ),
            ("listener.name.ssl.ssl.client.auth", "required"),
            ("listener.name.ssl.ssl.truststore.location", ca.as_str()),
            ("listener.name.strict.ssl.client.auth", "required"),
            ("listener.name.strict.ssl.truststore.location", ca.as_str()),
            (
                "listener.name.strict.ssl.principal.mapping.rules",
                "RULE:^CN=bob$/bob/",
            ),
        ],
    );
    let ssl = listener(&b, "SSL");
    let cert_client = |addr: SocketAddr, cert: &Path, key: &Path| {
        let mut c = tls_client(addr, &pki);
        c.set("ssl.certificate.location", path(cert))
            .set("ssl.key.location", path(key));
        c
    };
    // alice's certificate is trusted, but no rule maps its subject to a principal: the
    // connection closes after the handshake.
    assert!(!gets_metadata(cert_client(
        listener(&b, "STRICT"),
        &pki.client_cert,
        &pki.client_key
    )));
    let with_cert = |cert: &Path, key: &Path| {
        let mut c = tls_client(ssl, &pki);
        c.set("ssl.certificate.location", path(cert))
            .set("ssl.key.location", path(key));
        c
    };
    round_trip(|| with_cert(&pki.client_cert, &pki.client_key), "t-mtls");
    // No certificate, or one from a CA the broker does not trust: the handshake fails.
    assert!(!gets_metadata(tls_client(ssl, &pki)), "no certificate");
    assert!(
        !gets_metadata(with_cert(&pki.rogue_cert, &pki.rogue_key)),
        "an untrusted certificate"
    );
    assert!(
        !gets_metadata(with_cert(&pki.expired_cert, &pki.expired_key)),
        "an expired certificate from the trusted CA"
    );
    // The SASL_SSL listener still takes clients without a certificate.
    let mut sasl = tls_client(listener(&b, "SASL_SSL"), &pki);
    sasl.set("security.protocol", "SASL_SSL")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "admin")
        .set("sasl.password", "admin-secret");
    assert!(gets_metadata(sasl));
    // And the trusted client is still served.
    assert!(gets_metadata(with_cert(&pki.client_cert, &pki.client_key)));
    b.shutdown().unwrap();
}

#[test]
fn bad_tls_inputs_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    let b = broker(
        &data,
        &pki,
        &[("socket.request.receive.timeout.ms", "1500")],
    );
    let ssl = listener(&b, "SSL");
    // A plaintext connection that is being served throughout.
    let mut plain = RawConn::connect(b.addr);
    assert_eq!(api_versions(&mut plain).error_code, 0);
    // Plaintext Kafka bytes on the SSL port: closed, with at most a TLS alert.
    let mut c = RawConn::connect(ssl);
    let req = c.encode_request(
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("t"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    );
    c.send_raw(&req);
    let got = read_until_closed(&mut c);
    assert!(
        got.is_empty() || got[0] == 21,
        "only a TLS alert before closing: {got:?}"
    );
    // A client that connects and sends nothing is closed once the handshake times out.
    let started = Instant::now();
    let mut silent = RawConn::connect(ssl);
    assert!(read_until_closed(&mut silent).is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(15),
        "closed after socket.request.receive.timeout.ms: {waited:?}"
    );
    // A TLS client on the PLAINTEXT port: its ClientHello is no Kafka frame.
    assert!(!gets_metadata(tls_client(b.addr, &pki)));
    // Every other connection is untouched, and the SSL listener still serves TLS clients.
    assert_eq!(api_versions(&mut plain).error_code, 0);
    assert!(gets_metadata(tls_client(ssl, &pki)));
    b.shutdown().unwrap();
}

/// The start-up error of a broker with `props`, as text.
fn start_error(data: &Path, props: &[(&str, &str)]) -> String {
    let mut all = vec![("metrics.listen", "")];
    all.extend_from_slice(props);
    let config = BrokerConfig::build(common::config_input(data, 1, &all));
    let config = match config {
        Ok(c) => c,
        Err(e) => return format!("{e:#}"),
    };
    match tributary_broker::server::start(config) {
        Ok(b) => {
            b.shutdown().unwrap();
            panic!("the broker started with {props:?}")
        }
        Err(e) => format!("{e:#}"),
    }
}

/// Broker keys and values.
type Props<'a> = &'a [(&'a str, &'a str)];

#[test]
fn bad_tls_settings_stop_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    let listeners = ("listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0");
    let missing = path(&dir.path().join("nowhere.pem"));
    let ca = path(&pki.ca);
    let server = path(&pki.server);
    let cases: &[(Props, &[&str])] = &[
        (&[listeners], &["listener SSL", "ssl.keystore"]),
        (
            &[
                listeners,
                ("listener.name.ssl.ssl.keystore.location", missing.as_str()),
            ],
            &["listener.name.ssl.ssl.keystore.location=", "nowhere.pem"],
        ),
        (
            // The CA file holds no key.
            &[listeners, ("ssl.keystore.location", ca.as_str())],
            &["config ssl.keystore.location=", "no private key"],
        ),
        (
            &[
                listeners,
                ("ssl.keystore.location", server.as_str()),
                ("ssl.client.auth", "required"),
            ],
            &["ssl.truststore.location"],
        ),
        (
            &[
                listeners,
                ("ssl.keystore.location", server.as_str()),
                ("listener.name.ssl.ssl.keystore.type", "JKS"),
            ],
            &["listener.name.ssl.ssl.keystore.type=JKS", "only PEM"],
        ),
        (
            &[
                listeners,
                ("ssl.keystore.location", server.as_str()),
                ("ssl.client.auth", "sometimes"),
            ],
            &["ssl.client.auth=sometimes"],
        ),
        (
            &[
                listeners,
                ("ssl.keystore.location", server.as_str()),
                ("ssl.key.password", "secret"),
            ],
            &["ssl.key.password", "not supported"],
        ),
        (
            &[("listener.name.ssl.ssl.keystore.pasword", "x")],
            &["unknown config key", "listener.name.NAME.KEY"],
        ),
    ];
    for (props, want) in cases {
        let e = start_error(&data, props);
        for w in *want {
            assert!(e.contains(w), "{props:?}: {e}");
        }
    }
    // The secrets never reach the keys DescribeConfigs shows.
    let config = BrokerConfig::build(common::config_input(
        &data,
        1,
        &[("ssl.key.password", "hunter2")],
    ))
    .unwrap();
    assert!(!format!("{:?}", config.values).contains("hunter2"));
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn a_keystore_altered_at_runtime_serves_new_connections_and_survives_a_restart() {
    const INVALID_REQUEST: i16 = 42;
    const INVALID_CONFIG: i16 = 40;
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    // Server certificates from other CAs: a client trusting only that CA connects only while
    // the broker serves that certificate.
    let server_from = |ca_name: &str, names: &[&str], cn: &str| {
        let ca = authority(ca_name);
        let (cert, key) = signed(&ca, names, cn, ExtendedKeyUsagePurpose::ServerAuth);
        let ca_path = dir.path().join(format!("{ca_name}-ca.pem"));
        std::fs::write(&ca_path, ca.0.pem()).unwrap();
        (format!("{cert}{key}"), ca_path)
    };
    let same_names = ["127.0.0.1", "localhost"];
    let (second, second_ca) = server_from("second", &same_names, "broker");
    let (third, third_ca) = server_from("third", &same_names, "broker");
    let (fewer_names, fewer_ca) = server_from("fewer", &["127.0.0.1"], "broker");
    let (renamed, _) = server_from("renamed", &same_names, "another-broker");
    let file = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        path(&p)
    };
    let second_path = file("second.pem", &second);
    let fewer_path = file("fewer.pem", &fewer_names);
    let renamed_path = file("renamed.pem", &renamed);
    let trusting = |addr: SocketAddr, ca: &Path| {
        let mut c = tls_client(addr, &pki);
        c.set("ssl.ca.location", path(ca));
        c
    };
    let key = "listener.name.ssl.ssl.keystore.location";

    let b = broker(&data, &pki, &[]);
    let ssl = listener(&b, "SSL");
    assert!(gets_metadata(tls_client(ssl, &pki)));
    assert!(!gets_metadata(trusting(ssl, &second_ca)));

    // Refused, each saying why: the cluster-wide level (a keystore is one broker's), a file
    // that is not there, an inline private key, another subject, other names.
    let (code, msg) = incremental_alter(b.addr, "", &[(key, &second_path)]);
    assert_eq!(code, INVALID_REQUEST, "{msg}");
    assert!(msg.contains("broker id must be specified"), "{msg}");
    let missing = path(&dir.path().join("missing.pem"));
    let (code, msg) = incremental_alter(b.addr, "0", &[(key, &missing)]);
    assert_eq!(code, INVALID_CONFIG, "{msg}");
    assert!(msg.contains(key) && msg.contains("missing.pem"), "{msg}");
    let (code, msg) = incremental_alter(b.addr, "0", &[("ssl.keystore.key", "KEY")]);
    assert_eq!(code, INVALID_REQUEST, "{msg}");
    assert!(msg.contains("ssl.keystore.location"), "{msg}");
    let (code, msg) = incremental_alter(b.addr, "0", &[(key, &renamed_path)]);
    assert_eq!(code, INVALID_CONFIG, "{msg}");
    assert!(
        msg.contains("listener.name.ssl.ssl.allow.dn.changes"),
        "{msg}"
    );
    let (code, msg) = incremental_alter(b.addr, "0", &[(key, &fewer_path)]);
    assert_eq!(code, INVALID_CONFIG, "{msg}");
    assert!(msg.contains("subject alternative names"), "{msg}");
    assert!(
        gets_metadata(tls_client(ssl, &pki)),
        "still the first keystore"
    );

    // Another CA's certificate with the same subject and names: new connections get it, the
    // SASL_SSL listener (the broker-wide keystore) is untouched.
    let (code, msg) = incremental_alter(b.addr, "0", &[(key, &second_path)]);
    assert_eq!(code, 0, "{msg}");
    assert!(gets_metadata(trusting(ssl, &second_ca)));
    assert!(!gets_metadata(tls_client(ssl, &pki)));
    let mut sasl = tls_client(listener(&b, "SASL_SSL"), &pki);
    sasl.set("security.protocol", "SASL_SSL")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "admin")
        .set("sasl.password", "admin-secret");
    assert!(gets_metadata(sasl));

    // The same path again, after the file changed: reloaded, as Kafka does.
    std::fs::write(dir.path().join("second.pem"), &third).unwrap();
    assert!(
        gets_metadata(trusting(ssl, &second_ca)),
        "not before the alter"
    );
    let (code, msg) = incremental_alter(b.addr, "0", &[(key, &second_path)]);
    assert_eq!(code, 0, "{msg}");
    assert!(gets_metadata(trusting(ssl, &third_ca)));
    assert!(!gets_metadata(trusting(ssl, &second_ca)));

    // Fewer names, allowed for this listener.
    let (code, msg) = incremental_alter(
        b.addr,
        "0",
        &[
            (key, &fewer_path),
            ("listener.name.ssl.ssl.allow.san.changes", "true"),
        ],
    );
    assert_eq!(code, 0, "{msg}");
    assert!(gets_metadata(trusting(ssl, &fewer_ca)));
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new()
            .set("bootstrap.servers", b.addr.to_string())
            .create()
            .unwrap();
    let opts = rdkafka::admin::AdminOptions::new().request_timeout(Some(T));
    let res = futures::executor::block_on(
        admin.describe_configs([&rdkafka::admin::ResourceSpecifier::Broker(0)], &opts),
    )
    .unwrap();
    let entries = res.into_iter().next().unwrap().unwrap().entries;
    let e = entries.iter().find(|e| e.name == key).expect("described");
    assert_eq!(e.value.as_deref(), Some(fewer_path.as_str()));
    assert_eq!(e.source, rdkafka::admin::ConfigSource::DynamicBroker);
    drop(admin);
    b.shutdown().unwrap();

    // After a restart with the same static configs, the dynamic keystore is served.
    let b = broker(&data, &pki, &[]);
    let ssl = listener(&b, "SSL");
    assert!(gets_metadata(trusting(ssl, &fewer_ca)));
    assert!(!gets_metadata(tls_client(ssl, &pki)));
    // A (replacing) AlterConfigs that leaves the keystore key out goes back to the static
    // one — checked as any reload: the static certificate has other names.
    let (code, msg) = common::raw_alter(b.addr, 4, "0", &[("max.connections", "1000")]);
    assert_eq!(code, 40, "{msg}");
    assert!(gets_metadata(trusting(ssl, &fewer_ca)));
    let (code, msg) = common::raw_alter(
        b.addr,
        4,
        "0",
        &[
            ("max.connections", "1000"),
            ("listener.name.ssl.ssl.allow.san.changes", "true"),
        ],
    );
    assert_eq!(code, 0, "{msg}");
    assert!(gets_metadata(tls_client(ssl, &pki)));
    b.shutdown().unwrap();
}
