"""Fixtures for the cross-client suite: a real `tributary` process on a free loopback port.

TRIB_SUITE_SECURITY=SASL_SSL runs the suite with every client on SASL_SSL (security_mode.py)."""

import os
import signal
import socket
import struct
import subprocess
import time

import pytest

import security_mode
from security_mode import SASL_SSL

BIN = os.environ.get("TRIBUTARY_BIN", "target/release/tributary")

# Before pytest imports a test module: `from confluent_kafka import Producer` there binds the
# SASL_SSL client under TRIB_SUITE_SECURITY=SASL_SSL (checked in pytest_collection_modifyitems).
security_mode.install()

# Fixtures whose brokers set up their own SASL and TLS listeners, the same in either mode: the
# PLAINTEXT run covers the tests using them.
OWN_LISTENER_FIXTURES = ("sasl_broker", "acl_broker", "tls_broker")


def pytest_configure(config):
    if security_mode.MODE not in security_mode.MODES:
        raise pytest.UsageError(
            f"{security_mode.MODE_ENV}={security_mode.MODE}: not a mode of the suite; use one of "
            + ", ".join(security_mode.MODES))


def pytest_report_header(config):
    if SASL_SSL:
        return (f"security: SASL_SSL ({security_mode.MECHANISM} as {security_mode.USER!r}); "
                "the brokers have no PLAINTEXT client listener")
    return "security: PLAINTEXT"


def pytest_collection_modifyitems(config, items):
    if not SASL_SSL:
        return
    # confluent-kafka's Producer and Consumer are replaced, not changed in place: a test module
    # holding an original (imported before conftest, or from confluent_kafka.cimpl) would fail
    # to connect, which reads as a broker failure; say what it is instead.
    originals = {id(orig): f"{m.__name__}.{name}" for m, name, orig in security_mode.REPLACED}
    for mod in {item.module for item in items if getattr(item, "module", None)}:
        for name, value in vars(mod).items():
            if id(value) in originals:
                raise pytest.UsageError(
                    f"{mod.__name__}.{name} is the plain {originals[id(value)]}, not the SASL_SSL "
                    "client security_mode.install() put in its place: import the client classes "
                    "from their modules after conftest.py has run")
    own = pytest.mark.skip(reason=(
        "sets up its own SASL/TLS listeners, the same in either security mode: "
        "the PLAINTEXT run covers it"))
    for item in items:
        if any(f in item.fixturenames for f in OWN_LISTENER_FIXTURES):
            item.add_marker(own)


@pytest.fixture(scope="session", autouse=True)
def suite_security(tmp_path_factory):
    """Under SASL_SSL: the session's certificates (`make_certificates`), kcat's and trib's
    settings files, and the environment pointing clients and children at them. Returns the
    certificates, or None in the PLAINTEXT mode."""
    if not SASL_SSL:
        yield None
        return
    d = tmp_path_factory.mktemp("suite-security")
    certs = make_certificates(d / "certs")
    kcat_conf = d / "kcat.conf"
    trib_conf = d / "client.properties"
    env = {security_mode.CA_ENV: certs["ca"], "KCAT_CONFIG": str(kcat_conf),
           "TRIB_COMMAND_CONFIG": str(trib_conf)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the settings below read the CA's path from it
    kcat_conf.write_text("".join(f"{k}={v}\n" for k, v in security_mode.librdkafka_settings().items()))
    trib_conf.write_text(security_mode.kafka_properties())
    try:
        yield certs
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_GIVEN_PORTS = set()


def free_port():
    """A loopback port not handed out before in this session. A port is free when picked and
    released at once, so the kernel may pick it again for the next call; brokers bind their
    client ports with SO_REUSEPORT, so two of them given one port would split its connections."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def add_scram(data_dir, *creds):
    """SCRAM credentials written into `data_dir` before the broker's first start, as
    `kafka-storage format --add-scram` does; the passwords never appear in its output."""
    for cred in creds:
        out = subprocess.run([BIN, "--data-dir", str(data_dir), "--add-scram", cred],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        password = cred.split("password=")[1].rstrip("]")
        assert password not in out.stdout + out.stderr


def sasl_ssl_settings(certs):
    """The broker settings of the SASL_SSL mode's client listener (named SASL_SSL, Kafka's
    default protocol map securing it so): the server certificate and SCRAM-SHA-512."""
    return [
        "--set", f"ssl.keystore.location={certs['keystore']}",
        "--set", f"sasl.enabled.mechanisms={security_mode.MECHANISM}",
    ]


def suite_user():
    return (f"{security_mode.MECHANISM}=[name={security_mode.USER},"
            f"iterations={security_mode.SCRAM_ITERATIONS},password={security_mode.PASSWORD}]")


def refuses_plaintext(port):
    """Whether the listener on `port` gives no Kafka answer to plaintext Kafka bytes (an
    ApiVersions v0 request): nothing, or a TLS alert record, before it closes or resets."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        s.sendall(struct.pack(">i", len(header)) + header)
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass  # closed with the unread rest of the request in its buffer
    return got == b"" or got[0] == 21


class Broker:
    def __init__(self, data_dir, extra=()):
        self.data_dir = str(data_dir)
        self.port = free_port()
        self.extra = list(extra)
        self.proc = None
        # Set by `secure`: clients reach this broker over SASL_SSL only.
        self.sasl_ssl = False
        self.started = False
        os.makedirs(self.data_dir, exist_ok=True)
        self.log = open(os.path.join(self.data_dir, "..", f"broker-{self.port}.log"), "ab")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        first = not self.started
        self.spawn()
        self.wait_listening()
        self.started = True
        if self.sasl_ssl and first:
            # A client falling back to plaintext would find no Kafka on the client port. Checked
            # at the first start only: after a kill -9 the dead broker's listener can linger on
            # the port a moment (the kernel tearing down its io_uring) and take the probe.
            assert refuses_plaintext(self.port), \
                f"{self.bootstrap} answered plaintext Kafka: the SASL_SSL mode's client listener must not"
        return self

    def secure(self, certs):
        """The SASL_SSL mode: the only client listener is SASL_SSL on `port`, and the suite's
        SCRAM-SHA-512 user is bootstrapped before the first start."""
        self.extra += ["--set", f"listeners=SASL_SSL://{self.bootstrap}", *sasl_ssl_settings(certs)]
        add_scram(self.data_dir, suite_user())
        self.sasl_ssl = True
        return self

    def spawn(self):
        # A free metrics port: a broker a developer runs on the default 9644 must not stop the suite.
        args = [BIN, "--data-dir", self.data_dir, "--listen", self.bootstrap,
                "--set", "metrics.listen=127.0.0.1:0", *self.extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def listener_ports(self):
        """Every port this broker serves clients on."""
        return [self.port]

    def wait_listening(self):
        """Waits until every listener accepts: each shard binds the listeners one after another,
        so the first port accepting says nothing of the others. A cluster node listens once a
        quorum elected a leader and it registered."""
        deadline = time.time() + 30
        waiting = self.listener_ports()
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2).close()
                waiting.pop(0)
                if not waiting:
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start listening on port(s) {waiting} within 30s")

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
def broker(tmp_path, suite_security):
    b = Broker(tmp_path / "data", extra=["--set", "num.partitions=1", "--set", "group.initial.rebalance.delay.ms=300"])
    if suite_security:
        b.secure(suite_security)
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


@pytest.fixture
def cg_broker(tmp_path, suite_security):
    """A broker for KIP-848 consumer groups: heartbeats every 300 ms (reconciliations take
    tenths of a second) and a 6 s session (a killed member's partitions move within a test)."""
    b = Broker(tmp_path / "data", extra=[
        "--set", "num.partitions=1",
        "--set", "group.consumer.min.heartbeat.interval.ms=100",
        "--set", "group.consumer.heartbeat.interval.ms=300",
        "--set", "group.consumer.min.session.timeout.ms=1000",
        "--set", "group.consumer.session.timeout.ms=6000",
    ])
    if suite_security:
        b.secure(suite_security)
    b.start()
    yield b
    assert b.stop() == 0, "broker must exit 0 on SIGTERM"


@pytest.fixture
def txn_broker(tmp_path, suite_security):
    """A broker with small internal topics, for the transaction tests."""
    b = Broker(tmp_path / "data", extra=[
        "--set", "num.partitions=1",
        "--set", "group.initial.rebalance.delay.ms=0",
        "--set", "transaction.state.log.num.partitions=4",
        "--set", "offsets.topic.num.partitions=4",
    ])
    if suite_security:
        b.secure(suite_security)
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"


class Cluster:
    """Three `tributary` processes, one cluster: every node a voter of the metadata quorum.
    With `certs` (the SASL_SSL mode) clients are served on a SASL_SSL listener and brokers
    reach each other on a PLAINTEXT one (INTERNAL) that no client is told of."""

    def __init__(self, root, n=3, certs=None):
        ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c, _) in enumerate(ports))
        self.nodes = []
        for i, (p, c, internal) in enumerate(ports):
            if certs:
                listeners = [
                    "--set", f"listeners=SASL_SSL://127.0.0.1:{p},INTERNAL://127.0.0.1:{internal},"
                             f"CONTROLLER://127.0.0.1:{c}",
                    "--set", "listener.security.protocol.map="
                             "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "--set", "inter.broker.listener.name=INTERNAL",
                    *sasl_ssl_settings(certs),
                ]
            else:
                listeners = ["--set", f"listeners=PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}"]
            b = Broker(root / f"node-{i + 1}", extra=[
                "--cores", "1",
                "--set", f"node.id={i + 1}",
                "--set", f"controller.quorum.voters={voters}",
                *listeners,
                "--set", "controller.quorum.election.timeout.ms=500",
                "--set", "broker.session.timeout.ms=2000",
                "--set", "broker.heartbeat.interval.ms=250",
                "--set", "group.initial.rebalance.delay.ms=300",
                "--set", "offsets.topic.num.partitions=6",
                # Each node its own rack; consumers naming theirs read from its replica (KIP-392).
                "--set", f"broker.rack=rack-{i + 1}",
                "--set", "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector",
            ])
            b.port = p
            if certs:
                # Each node is formatted with the user, as `kafka-storage format --add-scram`
                # formats every node; whichever proposes it first writes it to the metadata.
                add_scram(b.data_dir, suite_user())
                b.sasl_ssl = True
            self.nodes.append(b)

    def start(self):
        for b in self.nodes:
            b.spawn()
        for b in self.nodes:
            b.wait_listening()
        for b in self.nodes:
            if b.sasl_ssl:
                assert refuses_plaintext(b.port), f"{b.bootstrap} answered plaintext Kafka"
        return self

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.nodes)


@pytest.fixture
def cluster(tmp_path, suite_security):
    c = Cluster(tmp_path, certs=suite_security).start()
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
        add_scram(self.data_dir, "SCRAM-SHA-256=[name=s256,password=s256-secret]",
                  "SCRAM-SHA-512=[name=s512,iterations=8192,password=s512-secret]")

    def listener_ports(self):
        return [self.port, self.sasl_port]

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
    """A broker with a PLAINTEXT, an SSL, a SASL_SSL (PLAIN, and SCRAM users s256 and s512) and
    a mutual-TLS listener (MTLS, an SSL listener with ssl.client.auth=required), certificates
    from `make_certificates`."""

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
            "--set", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "--set", f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        ]
        add_scram(self.data_dir, "SCRAM-SHA-256=[name=s256,password=s256-secret]",
                  "SCRAM-SHA-512=[name=s512,password=s512-secret]")

    def listener_ports(self):
        return [self.port, self.ssl_port, self.sasl_ssl_port, self.mtls_port]

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
