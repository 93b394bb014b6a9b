"""SASL over the wire with real clients: confluent-kafka (librdkafka), kafka-python and kcat
authenticate with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 on a SASL_PLAINTEXT listener; SCRAM
users are managed with confluent-kafka's admin client; a wrong password is refused."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

USERS = [
    ("PLAIN", "alice", "alice-secret"),
    ("SCRAM-SHA-256", "s256", "s256-secret"),
    ("SCRAM-SHA-512", "s512", "s512-secret"),
]


def conf(broker, mechanism, user, password, **extra):
    c = {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    c.update(extra)
    return c


@pytest.mark.parametrize("mechanism,user,password", USERS)
def test_confluent_produce_and_consume(sasl_broker, mechanism, user, password):
    topic = f"sasl-{mechanism.lower()}"
    p = Producer(conf(sasl_broker, mechanism, user, password))
    for i in range(20):
        p.produce(topic, f"{user}-{i}".encode())
    assert p.flush(30) == 0
    c = Consumer(conf(sasl_broker, mechanism, user, password,
                      **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < 20 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    c.close()
    assert got == [f"{user}-{i}" for i in range(20)]


def test_a_wrong_password_is_refused(sasl_broker):
    errors = []
    p = Producer(conf(sasl_broker, "SCRAM-SHA-256", "s256", "not-the-password",
                      **{"error_cb": errors.append, "message.timeout.ms": 5000}))
    p.produce("refused", b"x")
    p.flush(10)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_scram_users_are_managed_with_the_admin_client(sasl_broker):
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    described = admin.describe_user_scram_credentials(["s256", "s512"])
    infos = {u: f.result() for u, f in described.items()}
    assert infos["s512"].scram_credential_infos[0].iterations == 8192
    assert infos["s256"].scram_credential_infos[0].mechanism == ScramMechanism.SCRAM_SHA_256
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"carol-secret"),
        UserScramCredentialDeletion("s256", ScramMechanism.SCRAM_SHA_256),
    ])
    for f in futures.values():
        f.result()
    # carol authenticates at once; s256 no longer can.
    p = Producer(conf(sasl_broker, "SCRAM-SHA-512", "carol", "carol-secret"))
    p.produce("carol", b"hello")
    assert p.flush(30) == 0
    errors = []
    p = Producer(conf(sasl_broker, "SCRAM-SHA-256", "s256", "s256-secret",
                      **{"error_cb": errors.append, "message.timeout.ms": 5000}))
    p.produce("refused", b"x")
    p.flush(10)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["ghost"])["ghost"].result()


@pytest.mark.parametrize("mechanism,user,password", USERS)
def test_kcat(sasl_broker, mechanism, user, password):
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    r = subprocess.run(["kcat", "-b", sasl_broker.sasl_bootstrap, *auth, "-P", "-t", "kc-sasl"],
                       input="one\ntwo\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["kcat", "-b", sasl_broker.sasl_bootstrap, *auth, "-C", "-t", "kc-sasl",
                        "-o", "beginning", "-e", "-f", "%s\n"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["one", "two"]


def test_acls_with_the_admin_client(acl_broker):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, NewTopic, ResourcePatternType,
                                       ResourceType)
    admin = AdminClient(conf(acl_broker, "PLAIN", "admin", "admin-secret"))
    for f in admin.create_topics([NewTopic("acl-t", 1, 1)]).values():
        f.result()
    # alice may not write without an ACL: the delivery fails TOPIC_AUTHORIZATION_FAILED.
    reports = []
    p = Producer(conf(acl_broker, "PLAIN", "alice", "alice-secret", **{"message.timeout.ms": 5000}))
    p.produce("acl-t", b"x", on_delivery=lambda err, msg: reports.append(err))
    p.flush(10)
    assert reports and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, reports
    binding = AclBinding(ResourceType.TOPIC, "acl-", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        assert f.result() is None
    listed = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                                  None, None, AclOperation.ANY,
                                                  AclPermissionType.ANY)).result()
    assert [b.name for b in listed] == ["acl-"]
    reports.clear()
    # A new producer: librdkafka remembers the topic's authorization failure from its metadata.
    p = Producer(conf(acl_broker, "PLAIN", "alice", "alice-secret", **{"message.timeout.ms": 5000}))
    p.produce("acl-t", b"y", on_delivery=lambda err, msg: reports.append(err))
    p.flush(10)
    assert reports == [None]
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "acl-", ResourcePatternType.PREFIXED,
                                                  None, None, AclOperation.ANY,
                                                  AclPermissionType.ANY)])
    for f in deleted.values():
        assert len(f.result()) == 1


def test_confluent_oauthbearer_unsecured_token(sasl_broker):
    c = {
        "bootstrap.servers": sasl_broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=dave",
    }
    p = Producer(c)
    p.produce("oauth", b"o")
    assert p.flush(30) == 0


def test_trib_with_a_command_config(sasl_broker, tmp_path):
    import os
    trib_bin = os.environ.get("TRIB_BIN", os.path.join(os.path.dirname(
        os.environ.get("TRIBUTARY_BIN", "target/release/tributary")), "trib"))
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="s512" password="s512-secret";\n')

    def trib(*args, stdin=None):
        return subprocess.run([trib_bin, "--bootstrap", sasl_broker.sasl_bootstrap,
                               "--command-config", str(props), *args],
                              input=stdin, capture_output=True, text=True, timeout=60)

    r = trib("topics", "create", "via-trib", "--partitions", "1")
    assert r.returncode == 0, r.stderr
    r = trib("produce", "via-trib", stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = trib("consume", "via-trib", "--from-beginning", "--max-messages", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["a", "b"]
    # A wrong password fails with the broker's reason.
    props.write_text(props.read_text().replace("s512-secret", "wrong"))
    r = trib("topics", "list")
    assert r.returncode != 0
