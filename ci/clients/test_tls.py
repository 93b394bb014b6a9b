"""TLS over the wire with real clients: confluent-kafka (librdkafka), kafka-python and kcat
produce and consume on an SSL listener, on a SASL_SSL listener with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, and on a listener that requires a client certificate; a client without one, and a
plaintext client on a TLS port, are refused while the broker keeps serving everyone else.
Certificates come from the openssl CLI."""

import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer


# Each listener a client is tested on; SASL_SSL once per mechanism, with its user.
LISTENERS = ["SSL", "MTLS", "SASL_SSL", "SASL_SSL/SCRAM-SHA-256", "SASL_SSL/SCRAM-SHA-512"]
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("s256", "s256-secret"),
         "SCRAM-SHA-512": ("s512", "s512-secret")}


def split(listener):
    """`SASL_SSL/MECHANISM` → (SASL_SSL, MECHANISM); PLAIN when none is named."""
    name, _, mechanism = listener.partition("/")
    return name, mechanism or "PLAIN"


def conf(broker, listener, **extra):
    listener, mechanism = split(listener)
    c = {
        "bootstrap.servers": broker.bootstrap_of(listener),
        "security.protocol": "SASL_SSL" if listener == "SASL_SSL" else "SSL",
        "ssl.ca.location": broker.certs["ca"],
    }
    if listener == "SASL_SSL":
        user, password = USERS[mechanism]
        c.update({"sasl.mechanisms": mechanism, "sasl.username": user,
                  "sasl.password": password})
    if listener == "MTLS":
        c.update({"ssl.certificate.location": broker.certs["client_cert"],
                  "ssl.key.location": broker.certs["client_key"]})
    c.update(extra)
    return c


@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_produce_and_consume(tls_broker, listener):
    topic = "tls-" + listener.lower().replace("/", "-")
    p = Producer(conf(tls_broker, listener))
    for i in range(20):
        p.produce(topic, f"{listener}-{i}".encode())
    assert p.flush(30) == 0
    c = Consumer(conf(tls_broker, listener,
                      **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < 20 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    c.close()
    assert got == [f"{listener}-{i}" for i in range(20)]


def refused(config):
    """Whether a producer with `config` fails to deliver one message within a few seconds."""
    errors, reports = [], []
    p = Producer({**config, "error_cb": errors.append, "message.timeout.ms": 4000})
    p.produce("refused", b"x", on_delivery=lambda err, _msg: reports.append(err))
    p.flush(10)
    return len(reports) == 1 and reports[0] is not None and len(errors) > 0


def test_bad_clients_are_refused_and_others_served(tls_broker):
    mtls = conf(tls_broker, "MTLS")
    del mtls["ssl.certificate.location"], mtls["ssl.key.location"]
    assert refused(mtls), "no client certificate where one is required"
    assert refused({"bootstrap.servers": tls_broker.bootstrap_of("SSL")}), \
        "a plaintext client on the SSL port"
    assert refused(conf(tls_broker, "SSL", **{"bootstrap.servers": tls_broker.bootstrap})), \
        "a TLS client on the PLAINTEXT port"
    # Raw plaintext Kafka bytes (an ApiVersions v0 request) on the SSL port: closed.
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as s:
        header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        s.sendall(struct.pack(">i", len(header)) + header)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        assert got == b"" or got[0] == 21, got  # at most a TLS alert record
    for listener in ("SSL", "MTLS"):
        p = Producer(conf(tls_broker, listener))
        p.produce("still-served", b"ok")
        assert p.flush(30) == 0, listener
    p = Producer({"bootstrap.servers": tls_broker.bootstrap})
    p.produce("still-served", b"ok")
    assert p.flush(30) == 0


@pytest.mark.parametrize("listener", LISTENERS)
def test_kcat(tls_broker, listener):
    c = conf(tls_broker, listener)
    args = ["kcat", "-b", c.pop("bootstrap.servers")]
    for k, v in c.items():
        args += ["-X", f"{k}={v}"]
    topic = "kc-" + listener.lower().replace("/", "-")
    r = subprocess.run([*args, "-P", "-t", topic], input="one\ntwo\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["one", "two"]


@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python(tls_broker, listener):
    from kafka import KafkaConsumer, KafkaProducer
    name, mechanism = split(listener)
    security = {
        "bootstrap_servers": tls_broker.bootstrap_of(name),
        "security_protocol": "SASL_SSL" if name == "SASL_SSL" else "SSL",
        "ssl_cafile": tls_broker.certs["ca"],
    }
    if name == "SASL_SSL":
        user, password = USERS[mechanism]
        security.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                        sasl_plain_password=password)
    if name == "MTLS":
        security.update(ssl_certfile=tls_broker.certs["client_cert"],
                        ssl_keyfile=tls_broker.certs["client_key"])
    topic = "kp-" + listener.lower().replace("/", "-")
    p = KafkaProducer(**security)
    for i in range(10):
        p.send(topic, f"{listener}-{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                      group_id=f"g-{topic}", **security)
    got = [m.value.decode() for m in c]
    c.close()
    assert got == [f"{listener}-{i}" for i in range(10)]
