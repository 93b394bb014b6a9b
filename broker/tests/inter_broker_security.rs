//! Brokers that reach each other over SASL_SSL: a three-process cluster whose inter-broker
//! listener is SASL_SSL (certificates made with rcgen for 127.0.0.1, PLAIN or SCRAM-SHA-512
//! logins, ACLs on, the brokers' user a super user) replicates acks=all writes to every replica,
//! as it does in plaintext; a broker whose inter-broker password is wrong never joins the ISR.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rdkafka::admin::{NewTopic, TopicReplication};

use common::cluster::{consume_group, free_addr, metadata, placement, produce, Cluster};
use common::{rd_create_topics, wait_until};

const TOPIC: &str = "secured";

/// A CA and one certificate for 127.0.0.1 every broker serves: (ca.pem, broker.pem).
fn pki(dir: &Path) -> (String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "inter-broker test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "broker");
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let (ca_path, broker_path) = (dir.join("ca.pem"), dir.join("broker.pem"));
    std::fs::write(&ca_path, ca.pem()).unwrap();
    std::fs::write(
        &broker_path,
        format!("{}{}", cert.pem(), key.serialize_pem()),
    )
    .unwrap();
    (
        ca_path.display().to_string(),
        broker_path.display().to_string(),
    )
}

/// Three nodes whose INTERNAL listener (the inter-broker one) is SASL_SSL with `mechanism`;
/// `jaas(node id)` is that listener's JAAS config for the mechanism.
fn cluster(dir: &Path, mechanism: &str, jaas: impl Fn(i32) -> String) -> Cluster {
    let (ca, broker) = pki(dir);
    let mut cluster = Cluster::new(3);
    cluster.extra = vec![
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"
            .into(),
        "inter.broker.listener.name=INTERNAL".into(),
        format!("sasl.enabled.mechanisms={mechanism}"),
        format!("sasl.mechanism.inter.broker.protocol={mechanism}"),
        format!("listener.name.internal.ssl.keystore.location={broker}"),
        format!("listener.name.internal.ssl.truststore.location={ca}"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:broker".into(),
        // The test's clients are anonymous on the PLAINTEXT listener.
        "allow.everyone.if.no.acl.found=true".into(),
    ];
    for node in &mut cluster.nodes {
        node.extra = vec![
            format!(
                "listeners=PLAINTEXT://{},INTERNAL://{},CONTROLLER://{}",
                node.client,
                free_addr(),
                node.controller
            ),
            format!(
                "listener.name.internal.{}.sasl.jaas.config={}",
                mechanism.to_ascii_lowercase(),
                jaas(node.id)
            ),
        ];
    }
    cluster
}

fn replicate(cluster: &mut Cluster) {
    cluster.start_all();
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "3")],
    );
    wait_until("every replica in sync", || {
        placement(&all, TOPIC).1 == vec![1, 2, 3]
    });
    // acks=all with min.insync.replicas=3: acknowledged only once both followers fetched it.
    produce(&all, TOPIC, &[0], 200, "secured");
    let got = consume_group(&all, TOPIC, "readers", 200);
    assert_eq!(got.len(), 200);
    let log = cluster.log(0) + &cluster.log(1) + &cluster.log(2);
    assert!(!log.contains("broker-secret"), "no password in the logs");
}

#[test]
fn brokers_replicate_over_sasl_ssl_with_plain() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = |_| {
        r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";"#
            .to_string()
    };
    let mut c = cluster(dir.path(), "PLAIN", jaas);
    // Short SASL sessions: followers log in again before theirs end, so no leader closes a
    // follower's connection for an expired session.
    c.extra.push("connections.max.reauth.ms=1500".into());
    replicate(&mut c);
    std::thread::sleep(Duration::from_secs(4));
    let all = c.all_bootstrap();
    produce(&all, TOPIC, &[0], 50, "later");
    assert_eq!(placement(&all, TOPIC).1, [1, 2, 3]);
    for i in 0..3 {
        assert!(
            !c.log(i).contains("the SASL session expired"),
            "node {}: a follower outlived its session",
            i + 1
        );
    }
}

#[test]
fn brokers_replicate_over_sasl_ssl_with_scram_and_a_wrong_password_stays_out() {
    let dir = tempfile::tempdir().unwrap();
    // Node 3 logs in with the wrong password.
    let jaas = |id: i32| {
        let password = if id == 3 { "wrong" } else { "broker-secret" };
        format!(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{password}";"#
        )
    };
    let mut c = cluster(dir.path(), "SCRAM-SHA-512", jaas);
    // The fault this test makes: node 3 cannot follow, so it leaves every ISR it was in.
    c.note_fault("node 3 logs in to its leaders with a wrong password".into());
    // A follower that never fetches leaves the ISR after this long.
    c.extra.push("replica.lag.time.max.ms=3000".into());
    // The brokers' credential, written before each node's first start.
    for node in &c.nodes {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
            .arg("--data-dir")
            .arg(&node.dir)
            .arg("--add-scram")
            .arg("SCRAM-SHA-512=[name=broker,password=broker-secret]")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    c.start_all();
    let all = c.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    // Led by node 1 (the preferred replica), which node 3 cannot log in to.
    rd_create_topics(
        c.nodes[0].client,
        &[NewTopic::new(
            TOPIC,
            1,
            TopicReplication::Variable(&[&[1, 2, 3]]),
        )],
    );
    // Nodes 1 and 2 log in to each other; node 3's follower cannot log in to any leader.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut isr = Vec::new();
    while Instant::now() < deadline {
        let (leader, now) = placement(&all, TOPIC);
        isr = now;
        if leader != 3 && isr == [1, 2] {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(isr, [1, 2], "node 3 cannot log in to follow");
    assert!(
        c.log(2)
            .contains("SASL SCRAM-SHA-512 login as \"broker\" failed"),
        "node 3 says why it cannot follow"
    );
    assert!(!c.log(2).contains("broker-secret") && !c.log(2).contains("wrong\""));
    produce(&all, TOPIC, &[0], 100, "scram");
    assert_eq!(consume_group(&all, TOPIC, "readers", 100).len(), 100);
}
