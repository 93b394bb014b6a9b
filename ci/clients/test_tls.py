"""TLS over the wire with real clients: confluent-kafka (librdkafka) and kcat produce and
consume on an SSL listener, on a SASL_SSL listener with PLAIN, and on a listener that requires
a client certificate; a client without one, and a plaintext client on a TLS port, are refused
while the broker keeps serving everyone else. Certificates come from the openssl CLI."""

import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer


def conf(broker, listener, **extra):
    c = {
        "bootstrap.servers": broker.bootstrap_of(listener),
        "security.protocol": "SASL_SSL" if listener == "SASL_SSL" else "SSL",
        "ssl.ca.location": broker.certs["ca"],
    }
    if listener == "SASL_SSL":
        c.update({"sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                  "sasl.password": "alice-secret"})
    if listener == "MTLS":
        c.update({"ssl.certificate.location": broker.certs["client_cert"],
                  "ssl.key.location": broker.certs["client_key"]})
    c.update(extra)
    return c


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL", "MTLS"])
def test_confluent_produce_and_consume(tls_broker, listener):
    topic = f"tls-{listener.lower()}"
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


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_kcat(tls_broker, listener):
    c = conf(tls_broker, listener)
    args = ["kcat", "-b", c.pop("bootstrap.servers")]
    for k, v in c.items():
        args += ["-X", f"{k}={v}"]
    topic = f"kc-{listener.lower()}"
    r = subprocess.run([*args, "-P", "-t", topic], input="one\ntwo\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["one", "two"]
