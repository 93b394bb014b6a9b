//! trib's raw-request commands over secured listeners: a broker started here with SASL_SSL,
//! SASL_PLAINTEXT and mutual-TLS SSL listeners (certificates made with rcgen), and the `trib`
//! binary run against each with one `--command-config` file — SCRAM-SHA-512 over TLS, PLAIN
//! in the clear, a client certificate — for the commands that send their own requests
//! (`cluster info`'s probes, `topics reassignments`, `leaders elect`, `transactions list`,
//! `producers describe`) next to a librdkafka one (`topics create`). Then the failures: a wrong
//! password with either mechanism, a broker certificate that does not name the host (and the
//! empty `ssl.endpoint.identification.algorithm` that allows it), and a missing client
//! certificate — each a nonzero exit with one line saying what to fix.

mod common;

use std::path::Path;

use common::{command_config, listener, path, pki, trib, Pki};
use tributary_broker::server::BrokerHandle;

const PLAIN_JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
const WRONG_PASSWORD: &str = "not-the-password";

/// A one-shard broker with PLAINTEXT, SASL_PLAINTEXT (PLAIN), SASL_SSL (PLAIN and
/// SCRAM-SHA-512, user `admin` made before the first start) and SSL requiring a client
/// certificate.
fn secured_broker(data: &Path, pki: &Pki) -> BrokerHandle {
    tributary_broker::sasl::add_bootstrap_scram(
        data,
        "SCRAM-SHA-512=[name=admin,password=admin-secret]",
    )
    .expect("--add-scram");
    let (keystore, ca) = (path(&pki.broker), path(&pki.ca));
    let props = [
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        ),
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", PLAIN_JAAS),
        ("listener.name.sasl_ssl.plain.sasl.jaas.config", PLAIN_JAAS),
        ("ssl.keystore.location", keystore.as_str()),
        ("listener.name.ssl.ssl.client.auth", "required"),
        ("listener.name.ssl.ssl.truststore.location", ca.as_str()),
    ];
    common::start_broker(data, &props)
}

fn scram_ssl_config(dir: &Path, pki: &Pki, password: &str, name: &str) -> String {
    command_config(
        dir,
        name,
        &[
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"{password}\";"),
            format!("ssl.truststore.location={}", path(&pki.ca)),
        ],
    )
}

fn plain_config(dir: &Path, password: &str, name: &str) -> String {
    command_config(
        dir,
        name,
        &[
            "security.protocol=SASL_PLAINTEXT".into(),
            "sasl.mechanism=PLAIN".into(),
            format!("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"{password}\";"),
        ],
    )
}

/// `trib --bootstrap addr --command-config config args...`, which must succeed: its stdout.
fn ok(addr: &str, config: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap", addr, "--command-config", config];
    all.extend_from_slice(args);
    let (success, out, err) = trib(&all);
    assert!(success, "trib {all:?} failed: {err}");
    out
}

/// As [`ok`], for a run that must fail: its stderr.
fn fails(addr: &str, config: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap", addr, "--command-config", config];
    all.extend_from_slice(args);
    let (success, out, err) = trib(&all);
    assert!(!success, "trib {all:?} succeeded: {out}");
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    err
}

/// Every raw-request command, and a librdkafka one, through the listener at `addr`.
fn raw_commands_work(addr: &str, config: &str, topic: &str) {
    let created = ok(
        addr,
        config,
        &["topics", "create", topic, "--partitions", "1"],
    );
    assert!(created.contains(topic), "{created}");
    let info = ok(addr, config, &["cluster", "info"]);
    // The controller comes from DescribeCluster, the versions from ApiVersions: both raw.
    let controller = info
        .lines()
        .find_map(|l| l.strip_prefix("Controller: "))
        .unwrap_or_else(|| panic!("no controller line in:\n{info}"));
    assert!(controller.parse::<i32>().is_ok(), "{info}");
    assert!(info.contains("DescribeCluster"), "{info}");
    assert_eq!(
        ok(addr, config, &["topics", "reassignments"]).trim(),
        "no reassignment in progress"
    );
    let elected = ok(
        addr,
        config,
        &["leaders", "elect", topic, "--partition", "0"],
    );
    assert!(elected.starts_with(&format!("{topic}-0\t")), "{elected}");
    ok(addr, config, &["transactions", "list"]);
    ok(addr, config, &["producers", "describe", topic, "0"]);
}

#[test]
fn raw_commands_speak_sasl_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let broker = secured_broker(&data, &pki);
    let sasl_ssl = listener(&broker, "SASL_SSL").to_string();
    let sasl_plain = listener(&broker, "SASL_PLAINTEXT").to_string();
    let ssl = listener(&broker, "SSL");

    // SCRAM-SHA-512 over TLS, PLAIN in the clear, a client certificate.
    let scram = scram_ssl_config(dir.path(), &pki, "admin-secret", "scram.properties");
    raw_commands_work(&sasl_ssl, &scram, "over-sasl-ssl");
    let plain = plain_config(dir.path(), "alice-secret", "plain.properties");
    raw_commands_work(&sasl_plain, &plain, "over-sasl-plaintext");
    let mtls = command_config(
        dir.path(),
        "mtls.properties",
        &[
            "security.protocol=SSL".into(),
            format!("ssl.truststore.location={}", path(&pki.ca)),
            format!("ssl.keystore.location={}", path(&pki.client)),
        ],
    );
    raw_commands_work(&ssl.to_string(), &mtls, "over-ssl");

    // A wrong password: the broker's refusal, what to check, and never the password.
    for (addr, config, said) in [
        (
            &sasl_ssl,
            scram_ssl_config(dir.path(), &pki, WRONG_PASSWORD, "bad-scram.properties"),
            "authentication as \"admin\" with SCRAM-SHA-512",
        ),
        (
            &sasl_plain,
            plain_config(dir.path(), WRONG_PASSWORD, "bad-plain.properties"),
            "authentication as \"alice\" with PLAIN",
        ),
    ] {
        let err = fails(addr, &config, &["topics", "reassignments"]);
        assert!(err.contains(said), "{err}");
        assert!(err.contains("SASL_AUTHENTICATION_FAILED"), "{err}");
        assert!(
            err.contains("check the username and password in sasl.jaas.config of --command-config"),
            "{err}"
        );
        assert!(!err.contains(WRONG_PASSWORD), "{err}");
    }

    // The broker's certificate names 127.0.0.1, not localhost: refused unless the name check
    // is off, as Kafka's empty ssl.endpoint.identification.algorithm turns it off.
    let by_name = format!("localhost:{}", ssl.port());
    let err = fails(&by_name, &mtls, &["topics", "reassignments"]);
    assert!(err.contains("does not name localhost"), "{err}");
    let no_name_check = command_config(
        dir.path(),
        "mtls-no-name-check.properties",
        &[
            std::fs::read_to_string(&mtls).unwrap().trim().to_string(),
            "ssl.endpoint.identification.algorithm=".into(),
        ],
    );
    ok(&by_name, &no_name_check, &["topics", "reassignments"]);

    // No client certificate where the listener requires one.
    let no_cert = command_config(
        dir.path(),
        "no-cert.properties",
        &[
            "security.protocol=SSL".into(),
            format!("ssl.truststore.location={}", path(&pki.ca)),
        ],
    );
    let err = fails(&ssl.to_string(), &no_cert, &["topics", "reassignments"]);
    assert!(err.contains("ssl.keystore.location"), "{err}");
    // A CA that did not sign the broker's certificate.
    let other_ca = command_config(
        dir.path(),
        "other-ca.properties",
        &[
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanism=PLAIN".into(),
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"alice-secret\";".into(),
            format!("ssl.truststore.location={}", path(&pki.client)),
        ],
    );
    let err = fails(&sasl_ssl, &other_ca, &["topics", "reassignments"]);
    assert!(
        err.contains("not signed by a CA in ssl.truststore.location"),
        "{err}"
    );

    broker.shutdown().unwrap();
}
