"""Fixtures for the cross-client suite: a real `tributary` process on a free loopback port."""

import os
import signal
import socket
import subprocess
import time

import pytest

BIN = os.environ.get("TRIBUTARY_BIN", "target/release/tributary")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data_dir, extra=()):
        self.data_dir = str(data_dir)
        self.port = free_port()
        self.extra = list(extra)
        self.proc = None
        os.makedirs(self.data_dir, exist_ok=True)
        self.log = open(os.path.join(self.data_dir, "..", f"broker-{self.port}.log"), "ab")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.spawn()
        return self.wait_listening()

    def spawn(self):
        # A free metrics port: a broker a developer runs on the default 9644 must not stop the suite.
        args = [BIN, "--data-dir", self.data_dir, "--listen", self.bootstrap,
                "--set", "metrics.listen=127.0.0.1:0", *self.extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_listening(self):
        """A cluster node listens once a quorum elected a leader and it registered."""
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start listening within 30s")

    def stop(self, sig=signal.SIGTERM):
        """Stops the broker; with SIGTERM it must exit 0 after flushing."""
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def restart(self):
        assert self.stop() == 0
        return self.start()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", extra=["--set", "num.partitions=1", "--set", "group.initial.rebalance.delay.ms=300"])
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


@pytest.fixture
def txn_broker(tmp_path):
    """A broker with small internal topics, for the transaction tests."""
    b = Broker(tmp_path / "data", extra=[
        "--set", "num.partitions=1",
        "--set", "group.initial.rebalance.delay.ms=0",
        "--set", "transaction.state.log.num.partitions=4",
        "--set", "offsets.topic.num.partitions=4",
    ])
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


class Cluster:
    """Three `tributary` processes, one cluster: every node a voter of the metadata quorum."""

    def __init__(self, root, n=3):
        ports = [(free_port(), free_port()) for _ in range(n)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        self.nodes = []
        for i, (p, c) in enumerate(ports):
            b = Broker(root / f"node-{i + 1}", extra=[
                "--cores", "1",
                "--set", f"node.id={i + 1}",
                "--set", f"controller.quorum.voters={voters}",
                "--set", f"listeners=PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}",
                "--set", "controller.quorum.election.timeout.ms=500",
                "--set", "broker.session.timeout.ms=2000",
                "--set", "broker.heartbeat.interval.ms=250",
                "--set", "group.initial.rebalance.delay.ms=300",
                "--set", "offsets.topic.num.partitions=6",
            ])
            b.port = p
            self.nodes.append(b)

    def start(self):
        for b in self.nodes:
            b.spawn()
        for b in self.nodes:
            b.wait_listening()
        return self

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.nodes)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path).start()
    yield c
    for b in c.nodes:
        if b.proc is not None:
            assert b.stop() == 0, "a cluster node must exit 0 on SIGTERM"


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret";')


class SaslBroker(Broker):
    """A broker with a PLAINTEXT and a SASL_PLAINTEXT listener: PLAIN users from the listener's
    JAAS config, SCRAM credentials written before the first start with `--add-scram`."""

    def __init__(self, data_dir):
        self.sasl_port = free_port()
        super().__init__(data_dir)
        self.extra = [
            "--set", "num.partitions=1",
            "--set", "group.initial.rebalance.delay.ms=0",
            "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--set", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "--set", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        ]
        for cred in ("SCRAM-SHA-256=[name=s256,password=s256-secret]",
                     "SCRAM-SHA-512=[name=s512,iterations=8192,password=s512-secret]"):
            out = subprocess.run([BIN, "--data-dir", self.data_dir, "--add-scram", cred],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert "s256-secret" not in out.stdout + out.stderr
            assert "s512-secret" not in out.stdout + out.stderr

    @property
    def sasl_bootstrap(self):
        return f"127.0.0.1:{self.sasl_port}"


@pytest.fixture
def sasl_broker(tmp_path):
    b = SaslBroker(tmp_path / "data")
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


@pytest.fixture
def acl_broker(tmp_path):
    """A SASL broker checking every request against ACLs; admin is a super user."""
    b = SaslBroker(tmp_path / "data")
    b.extra += [
        "--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--set", "super.users=User:admin",
    ]
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


def make_certificates(d):
    """A CA, a broker certificate for 127.0.0.1 and localhost, and a client certificate
    (CN=alice), made with the openssl CLI into directory `d`; returns their paths."""
    d = str(d)
    os.makedirs(d, exist_ok=True)
    p = lambda name: os.path.join(d, name)  # noqa: E731

    def openssl(*args):
        out = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", p("ca-key.pem"), "-out", p("ca.pem"), "-subj", "/CN=tributary test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, subject, ext in (
        ("server", "/CN=broker",
         "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "/CN=alice/OU=eng", "extendedKeyUsage=clientAuth\n"),
    ):
        with open(p(f"{name}.ext"), "w") as f:
            f.write(ext + "basicConstraints=CA:FALSE\n")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p(f"{name}-key.pem"),
                "-out", p(f"{name}.csr"), "-subj", subject)
        openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p("ca.pem"),
                "-CAkey", p("ca-key.pem"), "-CAcreateserial", "-days", "2",
                "-out", p(f"{name}-cert.pem"), "-extfile", p(f"{name}.ext"))
    # The broker's keystore: its certificate, then its key, in one PEM file.
    with open(p("server.pem"), "w") as out:
        for part in ("server-cert.pem", "server-key.pem"):
            with open(p(part)) as f:
                out.write(f.read())
    return {
        "ca": p("ca.pem"),
        "keystore": p("server.pem"),
        "client_cert": p("client-cert.pem"),
        "client_key": p("client-key.pem"),
    }


class TlsBroker(Broker):
    """A broker with a PLAINTEXT, an SSL, a SASL_SSL (PLAIN) and a mutual-TLS listener (MTLS,
    an SSL listener with ssl.client.auth=required), certificates from `make_certificates`."""

    def __init__(self, data_dir, certs):
        self.ssl_port = free_port()
        self.sasl_ssl_port = free_port()
        self.mtls_port = free_port()
        super().__init__(data_dir)
        self.certs = certs
        self.extra = [
            "--set", "num.partitions=1",
            "--set", "group.initial.rebalance.delay.ms=0",
            "--set", "listeners=" + ",".join([
                f"PLAINTEXT://127.0.0.1:{self.port}",
                f"SSL://127.0.0.1:{self.ssl_port}",
                f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}",
                f"MTLS://127.0.0.1:{self.mtls_port}",
            ]),
            "--set", "listener.security.protocol.map="
                     "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SSL",
            "--set", f"ssl.keystore.location={certs['keystore']}",
            "--set", "listener.name.mtls.ssl.client.auth=required",
            "--set", f"listener.name.mtls.ssl.truststore.location={certs['ca']}",
            "--set", "sasl.enabled.mechanisms=PLAIN",
            "--set", f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        ]

    def bootstrap_of(self, listener):
        port = {"SSL": self.ssl_port, "SASL_SSL": self.sasl_ssl_port,
                "MTLS": self.mtls_port, "PLAINTEXT": self.port}[listener]
        return f"127.0.0.1:{port}"


@pytest.fixture
def tls_broker(tmp_path):
    b = TlsBroker(tmp_path / "data", make_certificates(tmp_path / "certs"))
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"
