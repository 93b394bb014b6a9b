//! `trib acls`, `trib users` and `trib quotas` against a broker started here with the standard
//! authorizer (`super.users=User:admin`) and a SASL_SSL listener (SCRAM-SHA-256/512), as admin:
//! `users create` gives alice a SCRAM credential she then logs in with; an ACL allowing her
//! READ on a prefixed topic pattern is created, listed, shows in what `topics list` shows her,
//! and is deleted; quotas are set, described and removed. Then the refusals: alice altering ACLs,
//! credentials or quotas (CLUSTER_AUTHORIZATION_FAILED), a credential or quota key the broker
//! refuses, and arguments refused before anything is sent — each a nonzero exit naming the
//! cause.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{command_config, listener, path, pki, trib, trib_with_input, Pki};
use tributary_broker::server::BrokerHandle;

const ADMIN_PASSWORD: &str = "admin-secret";
const ALICE_PASSWORD: &str = "alice-s3cret-pw";
/// How long an ACL change may take to reach what Metadata answers alice.
const ACL_PROPAGATION: Duration = Duration::from_secs(10);
const ACL_HEADER: &str =
    "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE_TYPE\tRESOURCE_NAME\tPATTERN_TYPE";
const ALICE_READS_ORDERS: &str = "User:alice\t*\tREAD\tALLOW\tTOPIC\torders-\tPREFIXED";

/// A one-shard broker whose only listener is SASL_SSL with both SCRAM mechanisms, checking
/// every request against the ACLs; `admin` (SCRAM-SHA-512) is made before the first start.
fn acl_broker(data: &Path, pki: &Pki) -> BrokerHandle {
    tributary_broker::sasl::add_bootstrap_scram(
        data,
        &format!("SCRAM-SHA-512=[name=admin,password={ADMIN_PASSWORD}]"),
    )
    .expect("--add-scram");
    let keystore = path(&pki.broker);
    let props = [
        ("listeners", "SASL_SSL://127.0.0.1:0"),
        ("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"),
        ("ssl.keystore.location", keystore.as_str()),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:admin"),
    ];
    common::start_broker(data, &props)
}

/// The broker of these tests in `dir`, its PKI, and the address of its SASL_SSL listener.
fn started(dir: &Path) -> (BrokerHandle, Pki, String) {
    let pki = pki(dir);
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let broker = acl_broker(&data, &pki);
    let addr = listener(&broker, "SASL_SSL").to_string();
    (broker, pki, addr)
}

fn scram_config(dir: &Path, pki: &Pki, mechanism: &str, user: &str, password: &str) -> String {
    command_config(
        dir,
        &format!("{user}.properties"),
        &[
            "security.protocol=SASL_SSL".into(),
            format!("sasl.mechanism={mechanism}"),
            format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{password}\";"),
            format!("ssl.truststore.location={}", path(&pki.ca)),
        ],
    )
}

/// `trib` against one broker as one user.
struct As<'a> {
    addr: &'a str,
    config: &'a str,
}

impl As<'_> {
    fn args<'b>(&'b self, args: &[&'b str]) -> Vec<&'b str> {
        let mut all = vec!["--bootstrap", self.addr, "--command-config", self.config];
        all.extend_from_slice(args);
        all
    }

    /// A run that must succeed: its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let all = self.args(args);
        let (success, out, err) = trib(&all);
        assert!(success, "trib {all:?} failed: {err}");
        out
    }

    /// A run that must fail: its stderr, which must name the cause in one line.
    fn fails(&self, args: &[&str]) -> String {
        let all = self.args(args);
        let (success, out, err) = trib(&all);
        assert!(!success, "trib {all:?} succeeded: {out}");
        assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
        err
    }
}

/// The lines of a listing after its header.
fn rows(out: &str, header: &str) -> Vec<String> {
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(header), "{out}");
    lines.map(str::to_string).collect()
}

#[test]
fn acls_users_and_quotas_as_admin_and_as_alice() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, pki, addr) = started(dir.path());
    let admin_config = scram_config(dir.path(), &pki, "SCRAM-SHA-512", "admin", ADMIN_PASSWORD);
    let alice_config = scram_config(dir.path(), &pki, "SCRAM-SHA-256", "alice", ALICE_PASSWORD);
    let admin = As {
        addr: &addr,
        config: &admin_config,
    };
    let alice = As {
        addr: &addr,
        config: &alice_config,
    };

    // alice cannot log in before she has a credential.
    let err = alice.fails(&["acls", "list"]);
    assert!(err.contains("SASL_AUTHENTICATION_FAILED"), "{err}");

    // Her credential, the password read from stdin and never echoed.
    let (success, out, err) = trib_with_input(
        &admin.args(&[
            "users",
            "create",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ]),
        Some(&format!("{ALICE_PASSWORD}\n")),
    );
    assert!(success, "users create failed: {err}");
    assert_eq!(
        out.trim(),
        "created the SCRAM-SHA-256 credential of alice (4096 iterations)"
    );
    assert!(!out.contains(ALICE_PASSWORD) && !err.contains(ALICE_PASSWORD));
    let users = admin.ok(&["users", "list"]);
    assert_eq!(
        rows(&users, "USER\tMECHANISM\tITERATIONS"),
        ["admin\tSCRAM-SHA-512\t4096", "alice\tSCRAM-SHA-256\t4096"],
        "{users}"
    );
    // A second mechanism for alice, the password given as an argument, more iterations.
    admin.ok(&[
        "users",
        "create",
        "alice",
        "--mechanism",
        "SCRAM-SHA-512",
        "--iterations",
        "8192",
        "--password",
        ALICE_PASSWORD,
    ]);
    let users = admin.ok(&["users", "list", "alice"]);
    assert_eq!(
        rows(&users, "USER\tMECHANISM\tITERATIONS"),
        ["alice\tSCRAM-SHA-256\t4096", "alice\tSCRAM-SHA-512\t8192"],
        "{users}"
    );

    admin.ok(&["topics", "create", "orders-eu"]);
    admin.ok(&["topics", "create", "payments"]);
    // Logged in as alice, she may describe no topic yet.
    assert_eq!(alice.ok(&["topics", "list"]).trim(), "");

    // READ on every topic whose name starts with orders-.
    let created = admin.ok(&[
        "acls",
        "create",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "orders-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    assert!(
        created.lines().any(|l| l == ALICE_READS_ORDERS),
        "{created}"
    );
    let listed = admin.ok(&["acls", "list"]);
    assert_eq!(rows(&listed, ACL_HEADER), [ALICE_READS_ORDERS], "{listed}");
    for filter in [
        &["--topic", "orders-"][..],
        &["--principal", "User:alice"],
        &["--topic", "orders-eu", "--resource-pattern-type", "match"],
    ] {
        let listed = admin.ok(&[&["acls", "list"][..], filter].concat());
        assert_eq!(
            rows(&listed, ACL_HEADER),
            [ALICE_READS_ORDERS],
            "{filter:?}"
        );
    }
    for filter in [
        &["--topic", "orders-eu"][..],
        &["--topic", "orders-", "--resource-pattern-type", "literal"],
        &["--principal", "User:bob"],
        &["--group", "orders-"],
    ] {
        let listed = admin.ok(&[&["acls", "list"][..], filter].concat());
        assert!(rows(&listed, ACL_HEADER).is_empty(), "{filter:?}: {listed}");
    }
    // READ implies DESCRIBE: alice now sees orders-eu, and still not payments.
    let started = Instant::now();
    loop {
        let topics = alice.ok(&["topics", "list"]);
        if topics.trim() == "orders-eu" {
            break;
        }
        assert!(started.elapsed() < ACL_PROPAGATION, "alice sees {topics:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // alice is no super user: ALTER and DESCRIBE on the cluster are refused her.
    let err = alice.fails(&[
        "acls",
        "create",
        "--allow-principal",
        "User:alice",
        "--operation",
        "All",
        "--cluster",
    ]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    assert!(
        err.contains("User:alice * ALL ALLOW CLUSTER kafka-cluster LITERAL"),
        "{err}"
    );
    let err = alice.fails(&["acls", "list"]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    let err = alice.fails(&["acls", "delete", "--topic", "orders-"]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    let err = alice.fails(&["users", "delete", "admin", "--mechanism", "SCRAM-SHA-512"]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    let err = alice.fails(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--add",
        "producer_byte_rate=1e12",
    ]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");

    // Deleting by resource: what went is printed, and nothing is left.
    let deleted = admin.ok(&["acls", "delete", "--topic", "orders-"]);
    assert_eq!(
        deleted.trim(),
        format!("Deleted:\n{ACL_HEADER}\n{ALICE_READS_ORDERS}")
    );
    assert!(rows(&admin.ok(&["acls", "list"]), ACL_HEADER).is_empty());
    let deleted = admin.ok(&["acls", "delete", "--topic", "orders-"]);
    assert_eq!(deleted.trim(), format!("Deleted:\n{ACL_HEADER}"));

    // Two operations for two principals, a DENY among them; deleting narrowed by principal.
    let created = admin.ok(&[
        "acls",
        "create",
        "--allow-principal",
        "User:alice",
        "--deny-principal",
        "User:mallory",
        "--operation",
        "Write",
        "--operation",
        "describe",
        "--group",
        "billing",
    ]);
    assert_eq!(created.lines().count(), 2 + 4, "{created}");
    let deleted = admin.ok(&[
        "acls",
        "delete",
        "--deny-principal",
        "User:mallory",
        "--group",
        "billing",
    ]);
    assert_eq!(
        rows(deleted.strip_prefix("Deleted:\n").unwrap(), ACL_HEADER),
        [
            "User:mallory\t*\tDESCRIBE\tDENY\tGROUP\tbilling\tLITERAL",
            "User:mallory\t*\tWRITE\tDENY\tGROUP\tbilling\tLITERAL"
        ]
    );
    let left = admin.ok(&["acls", "list", "--group", "billing"]);
    assert_eq!(rows(&left, ACL_HEADER).len(), 2, "{left}");

    // Quotas: a user's, and a user's client id's.
    let altered = admin.ok(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--add",
        "producer_byte_rate=1048576",
        "--add",
        "consumer_byte_rate=2097152",
    ]);
    assert_eq!(
        altered.trim(),
        "altered the quotas of user=alice: producer_byte_rate=1048576, consumer_byte_rate=2097152"
    );
    admin.ok(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--client-id",
        "app",
        "--add",
        "consumer_byte_rate=5000",
    ]);
    let quota_header = "ENTITY\tQUOTAS";
    assert_eq!(
        rows(
            &admin.ok(&["quotas", "describe", "--user", "alice"]),
            quota_header
        ),
        ["user=alice\tconsumer_byte_rate=2097152,producer_byte_rate=1048576"]
    );
    assert_eq!(
        rows(
            &admin.ok(&[
                "quotas",
                "describe",
                "--user",
                "alice",
                "--client-id",
                "app"
            ]),
            quota_header
        ),
        ["user=alice,client-id=app\tconsumer_byte_rate=5000"]
    );
    assert_eq!(
        rows(&admin.ok(&["quotas", "describe"]), quota_header),
        [
            "user=alice\tconsumer_byte_rate=2097152,producer_byte_rate=1048576",
            "user=alice,client-id=app\tconsumer_byte_rate=5000",
        ]
    );
    let err = alice.fails(&["quotas", "describe"]);
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    // A key the broker does not serve: its error, the quota untouched.
    let err = admin.fails(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--delete",
        "controller_mutation_rate",
    ]);
    assert!(
        err.contains("altering the quotas of user=alice: INVALID_REQUEST ("),
        "{err}"
    );
    assert!(err.contains("controller_mutation_rate"), "{err}");
    let altered = admin.ok(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--delete",
        "consumer_byte_rate",
    ]);
    assert_eq!(
        altered.trim(),
        "altered the quotas of user=alice: consumer_byte_rate removed"
    );
    assert_eq!(
        rows(
            &admin.ok(&["quotas", "describe", "--user", "alice"]),
            quota_header
        ),
        ["user=alice\tproducer_byte_rate=1048576"]
    );
    admin.ok(&[
        "quotas",
        "alter",
        "--user",
        "alice",
        "--delete",
        "producer_byte_rate",
    ]);
    let left = admin.ok(&["quotas", "describe", "--user", "alice"]);
    assert!(
        rows(&left, quota_header)
            .iter()
            .all(|l| !l.contains("byte_rate")),
        "{left}"
    );

    // Deleting the credential alice logs in with: she no longer can.
    admin.ok(&["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"]);
    let err = admin.fails(&["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"]);
    assert!(
        err.contains("the SCRAM-SHA-256 credential of alice: RESOURCE_NOT_FOUND ("),
        "{err}"
    );
    let err = alice.fails(&["acls", "list"]);
    assert!(err.contains("SASL_AUTHENTICATION_FAILED"), "{err}");
    admin.ok(&["users", "delete", "alice", "--mechanism", "SCRAM-SHA-512"]);
    let err = admin.fails(&["users", "list", "alice"]);
    assert!(err.contains("user alice: RESOURCE_NOT_FOUND ("), "{err}");
    // Each unknown user is named; the known one is still listed.
    let (success, out, err) = trib(&admin.args(&["users", "list", "admin", "bob", "carol"]));
    assert!(!success);
    assert_eq!(
        rows(&out, "USER\tMECHANISM\tITERATIONS"),
        ["admin\tSCRAM-SHA-512\t4096"]
    );
    assert!(err.contains("user bob: RESOURCE_NOT_FOUND"), "{err}");
    assert!(err.contains("user carol: RESOURCE_NOT_FOUND"), "{err}");
    assert!(err.contains("2 of 3 users failed"), "{err}");

    broker.shutdown().unwrap();
}

/// Arguments refused before any request: the bootstrap address has no broker, so an attempt to
/// send would fail differently.
#[test]
fn bad_arguments_are_refused_before_sending() {
    let nowhere = ["--bootstrap", "127.0.0.1:1"];
    let refused = |args: &[&str], says: &str| {
        let all = [&nowhere[..], args].concat();
        let (success, out, err) = trib(&all);
        assert!(!success, "trib {all:?} succeeded: {out}");
        assert!(err.contains(says), "trib {all:?}: {err}");
        assert!(
            !err.contains("127.0.0.1:1"),
            "trib {all:?} tried the broker: {err}"
        );
    };
    refused(
        &[
            "acls",
            "create",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Reed",
            "--topic",
            "t",
        ],
        "unknown ACL operation \"Reed\"; use one of ALL, READ, WRITE",
    );
    refused(
        &[
            "acls",
            "create",
            "--allow-principal",
            "alice",
            "--operation",
            "Read",
            "--topic",
            "t",
        ],
        "write TYPE:NAME, e.g. User:alice",
    );
    refused(
        &[
            "acls",
            "create",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "t",
            "--resource-pattern-type",
            "match",
        ],
        "use literal or prefixed",
    );
    refused(
        &[
            "acls",
            "create",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
        ],
        "--topic",
    );
    refused(
        &[
            "acls",
            "create",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "t",
            "--group",
            "g",
        ],
        "cannot be used with",
    );
    refused(&["acls", "delete"], "--topic");
    refused(
        &[
            "users",
            "create",
            "alice",
            "--mechanism",
            "PLAIN",
            "--password",
            "x",
        ],
        "use SCRAM-SHA-256 or SCRAM-SHA-512",
    );
    refused(
        &[
            "users",
            "create",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--iterations",
            "100",
            "--password",
            "x",
        ],
        "--iterations 100: SCRAM-SHA-256 takes 4096 to 16384",
    );
    refused(
        &[
            "users",
            "create",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ],
        "no password on stdin",
    );
    refused(
        &["quotas", "alter", "--add", "producer_byte_rate=1"],
        "name the entity",
    );
    refused(
        &[
            "quotas",
            "alter",
            "--user",
            "alice",
            "--add",
            "producer_byte_rate=fast",
        ],
        "the value must be a positive number",
    );
    refused(
        &[
            "quotas",
            "alter",
            "--user",
            "alice",
            "--user-default",
            "--add",
            "producer_byte_rate=1",
        ],
        "cannot be used with",
    );
}

/// `--user-default` and `--client-default` name the `<default>` entities, and the broker keeps
/// them apart from absent parts.
#[test]
fn default_entities_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, pki, addr) = started(dir.path());
    let config = scram_config(dir.path(), &pki, "SCRAM-SHA-512", "admin", ADMIN_PASSWORD);
    let admin = As {
        addr: &addr,
        config: &config,
    };
    admin.ok(&[
        "quotas",
        "alter",
        "--user-default",
        "--add",
        "producer_byte_rate=1000",
    ]);
    admin.ok(&[
        "quotas",
        "alter",
        "--client-default",
        "--add",
        "consumer_byte_rate=2000",
    ]);
    let header = "ENTITY\tQUOTAS";
    assert_eq!(
        rows(&admin.ok(&["quotas", "describe", "--user-default"]), header),
        ["user=<default>\tproducer_byte_rate=1000"]
    );
    assert_eq!(
        rows(&admin.ok(&["quotas", "describe"]), header),
        [
            "client-id=<default>\tconsumer_byte_rate=2000",
            "user=<default>\tproducer_byte_rate=1000",
        ]
    );
    broker.shutdown().unwrap();
}
