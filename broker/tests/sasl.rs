//! SASL over the wire: a broker with a PLAINTEXT and a SASL_PLAINTEXT listener, librdkafka
//! clients authenticating with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, credentials from
//! `--add-scram` and AlterUserScramCredentials, and the bad inputs: a wrong password, an
//! unknown mechanism, a request before authentication, an expired session — each closing only
//! its own connection.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, MetadataRequest,
    MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tributary_broker::server::BrokerHandle;

use common::{start_broker, RawConn};

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;
const T: Duration = Duration::from_secs(30);
const SASL_AUTHENTICATION_FAILED: i16 = 58;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

fn broker(dir: &std::path::Path, extra: &[(&str, &str)]) -> (BrokerHandle, SocketAddr) {
    let mut props = vec![
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        ),
        (
            "sasl.enabled.mechanisms",
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        ),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
    ];
    props.extend_from_slice(extra);
    let b = start_broker(dir, 1, &props);
    let sasl = b
        .listeners
        .iter()
        .find(|(n, _)| n == "SASL_PLAINTEXT")
        .expect("the SASL listener")
        .1;
    (b, sasl)
}

fn client(addr: SocketAddr, mechanism: &str, user: &str, password: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", addr.to_string())
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", mechanism)
        .set("sasl.username", user)
        .set("sasl.password", password)
        .set("message.timeout.ms", "10000");
    c
}

/// Produces three records and reads them back, both over SASL as `user`.
fn round_trip(addr: SocketAddr, mechanism: &str, user: &str, password: &str, topic: &str) {
    let p: BaseProducer = client(addr, mechanism, user, password).create().unwrap();
    for i in 0..3 {
        let v = format!("{user}-{i}");
        p.send(BaseRecord::<(), String>::to(topic).payload(&v))
            .unwrap();
    }
    p.flush(T)
        .unwrap_or_else(|e| panic!("{mechanism} as {user}: {e}"));
    let c: BaseConsumer = client(addr, mechanism, user, password)
        .set("group.id", format!("g-{topic}"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + T;
    while got.len() < 3 && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    assert_eq!(got.len(), 3, "{mechanism} as {user}: {got:?}");
    // Metadata on the SASL listener names the brokers' SASL endpoints.
    let md = c.fetch_metadata(Some(topic), T).unwrap();
    assert_eq!(md.brokers()[0].port() as u16, addr.port());
}

/// The errors a librdkafka client reports (its error callback).
#[derive(Default)]
struct Errors(std::sync::Mutex<Vec<String>>);

impl rdkafka::ClientContext for Errors {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.0.lock().unwrap().push(format!("{error}: {reason}"));
    }
}

impl rdkafka::consumer::ConsumerContext for Errors {}

fn handshake(conn: &mut RawConn, version: i16, mechanism: &str) -> SaslHandshakeResponse {
    conn.request(
        ApiKey::SaslHandshake,
        version,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

fn plain_token(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

fn authenticate(conn: &mut RawConn, token: Vec<u8>) -> SaslAuthenticateResponse {
    conn.request(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.into()),
    )
}

fn metadata(conn: &mut RawConn) -> MetadataResponse {
    conn.request(ApiKey::Metadata, 12, &MetadataRequest::default())
}

#[test]
fn clients_authenticate_with_plain_and_scram() {
    let dir = tempfile::tempdir().unwrap();
    // A credential given before the first start, as `tributary --add-scram` writes it.
    tributary_broker::sasl::add_bootstrap_scram(
        dir.path(),
        "SCRAM-SHA-256=[name=scram-user,password=scram-secret]",
    )
    .unwrap();
    let (b, sasl) = broker(dir.path(), &[]);
    round_trip(sasl, "PLAIN", "alice", "alice-secret", "t-plain");
    round_trip(sasl, "SCRAM-SHA-256", "scram-user", "scram-secret", "t-256");
    // OAUTHBEARER with librdkafka's unsecured token: the principal is the token's subject.
    {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", sasl.to_string())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanisms", "OAUTHBEARER")
            .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
            .set("sasl.oauthbearer.config", "principal=carol")
            .create()
            .unwrap();
        p.send(BaseRecord::<(), str>::to("t-oauth").payload("o"))
            .unwrap();
        p.flush(T).expect("OAUTHBEARER as carol");
    }
    // A SCRAM-SHA-512 credential set over the wire (AlterUserScramCredentials, salted by the
    // client) is usable at once.
    let salt = b"0123456789abcdef".to_vec();
    let salted = tributary_security::scram::ScramMechanism::Sha512.salted_password(
        b"bob-secret",
        &salt,
        4096,
    );
    let resp: AlterUserScramCredentialsResponse = RawConn::connect(b.addr).request(
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_static_str("bob"))
                .with_mechanism(2)
                .with_iterations(4096)
                .with_salt(salt.into())
                .with_salted_password(salted.into()),
        ]),
    );
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    round_trip(sasl, "SCRAM-SHA-512", "bob", "bob-secret", "t-512");
    // The plaintext listener still serves clients without authentication.
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.addr.to_string())
        .create()
        .unwrap();
    p.send(BaseRecord::<(), str>::to("t-plain").payload("plaintext"))
        .unwrap();
    p.flush(T).unwrap();
    b.shutdown().unwrap();
}

#[test]
fn a_wrong_password_fails_and_closes_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (b, sasl) = broker(dir.path(), &[]);
    let mut good = RawConn::connect(sasl);
    assert_eq!(handshake(&mut good, 1, "PLAIN").error_code, 0);
    assert_eq!(
        authenticate(&mut good, plain_token("alice", "alice-secret")).error_code,
        0
    );
    let mut bad = RawConn::connect(sasl);
    assert_eq!(handshake(&mut bad, 1, "PLAIN").error_code, 0);
    let resp = authenticate(&mut bad, plain_token("alice", "wrong"));
    assert_eq!(resp.error_code, SASL_AUTHENTICATION_FAILED);
    let msg = resp
        .error_message
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        !msg.contains("wrong"),
        "the password is never echoed: {msg}"
    );
    assert!(bad.is_closed(), "closed after the failure");
    // SCRAM as an unknown user, through librdkafka: it reports an authentication error.
    let c: BaseConsumer<Errors> = client(sasl, "SCRAM-SHA-256", "nobody", "x")
        .create_with_context(Errors::default())
        .unwrap();
    assert!(c.fetch_metadata(None, Duration::from_secs(3)).is_err());
    let deadline = std::time::Instant::now() + T;
    while c.context().0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        // The error callback is served by poll.
        let _ = c.poll(Duration::from_millis(100));
    }
    let seen = c.context().0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|e| e.contains("Authentication failed")),
        "{seen:?}"
    );
    // The authenticated connection is untouched.
    assert_eq!(metadata(&mut good).brokers.len(), 1);
    b.shutdown().unwrap();
}

#[test]
fn bad_sasl_inputs_get_kafkas_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (b, sasl) = broker(dir.path(), &[("connections.max.reauth.ms", "1500")]);
    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut c = RawConn::connect(sasl);
    let resp = handshake(&mut c, 1, "GSSAPI");
    assert_eq!(resp.error_code, UNSUPPORTED_SASL_MECHANISM);
    let offered: Vec<String> = resp.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(
        offered,
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    );
    // OAUTHBEARER: a signed (not unsecured) or expired token is refused, then closed.
    let mut c = RawConn::connect(sasl);
    assert_eq!(handshake(&mut c, 1, "OAUTHBEARER").error_code, 0);
    let resp = authenticate(
        &mut c,
        b"n,,\x01auth=Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\x01\x01".to_vec(),
    );
    assert_eq!(resp.error_code, SASL_AUTHENTICATION_FAILED);
    assert!(c.is_closed());
    assert!(c.is_closed());
    // A request before authentication closes the connection (ApiVersions is allowed).
    let mut c = RawConn::connect(sasl);
    let _: kafka_protocol::messages::ApiVersionsResponse = c.request(
        ApiKey::ApiVersions,
        3,
        &kafka_protocol::messages::ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("t"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    );
    let req = c.encode_request(ApiKey::Metadata, 12, &MetadataRequest::default());
    c.send_raw(&req);
    assert!(c.is_closed(), "Metadata before authentication closes");
    // A garbage SCRAM first message fails without disturbing the broker.
    let mut c = RawConn::connect(sasl);
    assert_eq!(handshake(&mut c, 1, "SCRAM-SHA-512").error_code, 0);
    let resp = authenticate(&mut c, vec![0xff; 40]);
    assert_eq!(resp.error_code, SASL_AUTHENTICATION_FAILED);
    assert!(c.is_closed());
    // Handshake v0: the token goes bare, length-prefixed, and so does the answer.
    let mut c = RawConn::connect(sasl);
    assert_eq!(handshake(&mut c, 0, "PLAIN").error_code, 0);
    let token = plain_token("admin", "admin-secret");
    let mut frame = BytesMut::new();
    frame.extend_from_slice(&(token.len() as u32).to_be_bytes());
    frame.extend_from_slice(&token);
    c.send_raw(&frame);
    let reply = c.read_frame().expect("the bare answer");
    assert!(reply.is_empty(), "PLAIN answers an empty token");
    assert_eq!(metadata(&mut c).brokers.len(), 1);
    // connections.max.reauth.ms: the session's lifetime is announced; once it has passed, the
    // next request closes the connection unless the client authenticated again.
    let mut c = RawConn::connect(sasl);
    assert_eq!(handshake(&mut c, 1, "PLAIN").error_code, 0);
    let resp = authenticate(&mut c, plain_token("alice", "alice-secret"));
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.session_lifetime_ms, 1500);
    let mut renewed = RawConn::connect(sasl);
    assert_eq!(handshake(&mut renewed, 1, "PLAIN").error_code, 0);
    assert_eq!(
        authenticate(&mut renewed, plain_token("alice", "alice-secret")).error_code,
        0
    );
    std::thread::sleep(Duration::from_millis(1000));
    // Re-authenticating as the same user renews the session.
    assert_eq!(handshake(&mut renewed, 1, "PLAIN").error_code, 0);
    assert_eq!(
        authenticate(&mut renewed, plain_token("alice", "alice-secret")).error_code,
        0
    );
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(metadata(&mut renewed).brokers.len(), 1, "renewed in time");
    let req = c.encode_request(ApiKey::Metadata, 12, &MetadataRequest::default());
    c.send_raw(&req);
    assert!(c.is_closed(), "the expired session's connection closes");
    b.shutdown().unwrap();
}

#[test]
fn scram_credentials_are_described_and_altered_with_kafkas_checks() {
    const RESOURCE_NOT_FOUND: i16 = 91;
    const DUPLICATE_RESOURCE: i16 = 92;
    const UNACCEPTABLE_CREDENTIAL: i16 = 93;
    let dir = tempfile::tempdir().unwrap();
    tributary_broker::sasl::add_bootstrap_scram(
        dir.path(),
        "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]",
    )
    .unwrap();
    let (b, _) = broker(dir.path(), &[]);
    let describe = |users: Option<Vec<&str>>| -> DescribeUserScramCredentialsResponse {
        RawConn::connect(b.addr).request(
            ApiKey::DescribeUserScramCredentials,
            0,
            &DescribeUserScramCredentialsRequest::default().with_users(users.map(|us| {
                us.into_iter()
                    .map(|u| UserName::default().with_name(StrBytes::from_string(u.into())))
                    .collect()
            })),
        )
    };
    let all = describe(None);
    assert_eq!(all.results.len(), 1);
    assert_eq!(all.results[0].user.as_str(), "admin");
    assert_eq!(all.results[0].credential_infos[0].mechanism, 2);
    assert_eq!(all.results[0].credential_infos[0].iterations, 8192);
    let some = describe(Some(vec!["admin", "ghost", "dup", "dup"]));
    let codes: Vec<(String, i16)> = some
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(
        codes,
        [
            ("admin".to_string(), 0),
            ("ghost".to_string(), RESOURCE_NOT_FOUND),
            ("dup".to_string(), DUPLICATE_RESOURCE)
        ]
    );
    let alter = |req: AlterUserScramCredentialsRequest| -> Vec<(String, i16)> {
        let resp: AlterUserScramCredentialsResponse =
            RawConn::connect(b.addr).request(ApiKey::AlterUserScramCredentials, 0, &req);
        resp.results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect()
    };
    let up = |name: &'static str, mech: i8, iterations: i32| {
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_static_str(name))
            .with_mechanism(mech)
            .with_iterations(iterations)
            .with_salt(bytes::Bytes::from_static(b"salt"))
            .with_salted_password(bytes::Bytes::from_static(&[7u8; 32]))
    };
    let del = |name: &'static str, mech: i8| {
        ScramCredentialDeletion::default()
            .with_name(StrBytes::from_static_str(name))
            .with_mechanism(mech)
    };
    assert_eq!(
        alter(
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                up("few", 1, 100),
                up("many", 1, 100_000),
                up("weird", 9, 4096),
            ])
        ),
        [
            ("few".to_string(), UNACCEPTABLE_CREDENTIAL),
            ("many".to_string(), UNACCEPTABLE_CREDENTIAL),
            ("weird".to_string(), UNSUPPORTED_SASL_MECHANISM)
        ]
    );
    assert_eq!(
        alter(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![del("ghost", 1), del("twice", 1)])
                .with_upsertions(vec![up("twice", 1, 4096)])
        ),
        [
            ("ghost".to_string(), RESOURCE_NOT_FOUND),
            ("twice".to_string(), DUPLICATE_RESOURCE)
        ]
    );
    assert_eq!(
        alter(AlterUserScramCredentialsRequest::default().with_deletions(vec![del("admin", 2)])),
        [("admin".to_string(), 0)]
    );
    assert!(describe(None).results.is_empty());
    b.shutdown().unwrap();
}

/// Signs OAUTHBEARER tokens (ES256) for librdkafka, as an identity provider would: `sub`,
/// `iss`, `aud` and an hour's `exp`, under key id `kid`.
struct SignedTokens {
    key: ring::signature::EcdsaKeyPair,
    kid: &'static str,
    /// Messages delivered, and messages failed, through a producer with these tokens.
    delivered: std::sync::atomic::AtomicUsize,
    failed: std::sync::atomic::AtomicUsize,
}

impl SignedTokens {
    fn new(kid: &'static str) -> Self {
        use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Self {
            key,
            kid,
            delivered: Default::default(),
            failed: Default::default(),
        }
    }

    /// The public key as a JWKS document.
    fn jwks(&self) -> String {
        use base64::Engine as _;
        use ring::signature::KeyPair as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let point = self.key.public_key().as_ref();
        serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig",
            "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
        .to_string()
    }

    fn token(&self, sub: &str, exp_secs: i64) -> String {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let header = serde_json::json!({"alg": "ES256", "kid": self.kid});
        let claims = serde_json::json!({"sub": sub, "iss": "https://issuer.test",
            "aud": "tributary", "exp": exp_secs});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .key
            .sign(&ring::rand::SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", b64(sig.as_ref()))
    }
}

impl rdkafka::ClientContext for SignedTokens {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs() as i64
            + 3600;
        Ok(rdkafka::client::OAuthToken {
            token: self.token("dave", exp),
            principal_name: "dave".into(),
            lifetime_ms: exp * 1000,
        })
    }
}

impl rdkafka::producer::ProducerContext for SignedTokens {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        let count = match result {
            Ok(_) => &self.delivered,
            Err(_) => &self.failed,
        };
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// OAUTHBEARER with Kafka's `OAuthBearerValidatorCallbackHandler` on the listener (KIP-768):
/// librdkafka's signed token from the identity provider whose key is in the JWKS file is
/// accepted; one signed by another key, and an unsecured one, are refused.
#[test]
fn signed_oauthbearer_tokens_are_checked_against_the_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let provider = SignedTokens::new("idp-1");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, provider.jwks()).unwrap();
    let url = format!("file://{}", jwks.display());
    let (_b, sasl) = broker(
        &dir.path().join("data"),
        &[
            (
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            ),
            ("sasl.oauthbearer.jwks.endpoint.url", &url),
            ("sasl.oauthbearer.expected.audience", "tributary"),
            ("sasl.oauthbearer.expected.issuer", "https://issuer.test"),
        ],
    );
    let producer = |tokens: SignedTokens| -> rdkafka::producer::ThreadedProducer<SignedTokens> {
        ClientConfig::new()
            .set("bootstrap.servers", sasl.to_string())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanisms", "OAUTHBEARER")
            .set("message.timeout.ms", "5000")
            .create_with_context(tokens)
            .unwrap()
    };
    let p = producer(provider);
    p.send(BaseRecord::<(), str>::to("t-signed").payload("s"))
        .unwrap();
    p.flush(T).expect("flushed");
    let count = |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        count(&p.context().delivered),
        1,
        "a token signed by the provider's key is accepted"
    );
    drop(p);
    // The same claims under another key of the same id: the signature does not verify.
    let p = producer(SignedTokens::new("idp-1"));
    p.send(BaseRecord::<(), str>::to("t-signed").payload("x"))
        .unwrap();
    let _ = p.flush(Duration::from_secs(8));
    assert_eq!(
        (count(&p.context().delivered), count(&p.context().failed)),
        (0, 1),
        "a token from another key is refused"
    );
    drop(p);
    // An unsecured token, which the default validator takes, is refused here.
    let mut c = RawConn::connect(sasl);
    assert_eq!(handshake(&mut c, 1, "OAUTHBEARER").error_code, 0);
    let resp = authenticate(
        &mut c,
        b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4IiwiZXhwIjo0MTAwMDAwMDAwfQ.\x01\x01"
            .to_vec(),
    );
    assert_eq!(resp.error_code, SASL_AUTHENTICATION_FAILED);
    assert!(resp
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("unsecured")));
    assert!(c.is_closed());
}
