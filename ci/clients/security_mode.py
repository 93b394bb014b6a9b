"""The suite's security mode, chosen with TRIB_SUITE_SECURITY (PLAINTEXT, the default, or SASL_SSL).

Under SASL_SSL the brokers of the `broker`, `txn_broker` and `cluster` fixtures serve clients on a
SASL_SSL listener only (a cluster keeps a PLAINTEXT listener between brokers, which clients are
never given), and every client of the suite authenticates with SCRAM-SHA-512 over TLS without a
test saying so:

- `install()` replaces confluent-kafka's Producer and Consumer with subclasses that add the
  security settings a test did not give itself, and makes confluent-kafka's AdminClient and
  kafka-python's KafkaProducer, KafkaConsumer and KafkaAdminClient add them in their own
  `__init__`. conftest.py installs this before pytest imports any test module, so
  `from confluent_kafka import Producer` in a test binds the subclass (conftest.py checks every
  test module for the originals); child processes (group_member.py, committer.py) call
  `install()` before their own imports.
- kcat reads its settings from the file in KCAT_CONFIG, trib from the Kafka client properties
  in TRIB_COMMAND_CONFIG, both set by conftest.py for the session and inherited by every
  subprocess; tributary-bench takes `bench_args(mode)` (`-X KEY=VALUE`).

The CA certificate is made per session (conftest.py's `suite_security`), its path passed to
clients, and to children, in TRIB_SUITE_CA.
"""

import os

MODE_ENV = "TRIB_SUITE_SECURITY"
MODES = ("PLAINTEXT", "SASL_SSL")
MODE = os.environ.get(MODE_ENV, "PLAINTEXT").strip().upper() or "PLAINTEXT"
SASL_SSL = MODE == "SASL_SSL"

# The one user every client of the suite authenticates as, bootstrapped with `--add-scram`.
MECHANISM = "SCRAM-SHA-512"
USER = "suite"
PASSWORD = "suite-secret"
SCRAM_ITERATIONS = 4096  # SCRAM-SHA-512's minimum: every connection pays for them
CA_ENV = "TRIB_SUITE_CA"

# The client classes `install()` replaced with subclasses: (module, attribute name, original).
REPLACED = []
_installed = False


def ca():
    path = os.environ.get(CA_ENV)
    if not path:
        raise RuntimeError(
            f"{MODE_ENV}=SASL_SSL but {CA_ENV} is unset: the CA certificate comes from "
            "conftest.py's suite_security fixture; run the client under pytest or set "
            f"{CA_ENV} to the broker's CA certificate (PEM)")
    return path


def librdkafka_settings():
    """confluent-kafka's, kcat's and tributary-bench's settings (librdkafka keys)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": MECHANISM,
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": ca(),
    }


def kafka_python_settings():
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": ca(),
    }


def kafka_properties():
    """trib's --command-config: Kafka's Java client properties."""
    return (
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca()}\n"
    )


# The tributary-bench modes the suite runs against a broker, which take client settings.
BENCH_CLIENT_MODES = ("produce", "consume", "e2e")


def bench_args(mode):
    """The `-X KEY=VALUE` client settings for `tributary-bench MODE`."""
    if not SASL_SSL or mode not in BENCH_CLIENT_MODES:
        return []
    return [a for k, v in librdkafka_settings().items() for a in ("-X", f"{k}={v}")]


def _with_security(conf, settings):
    """`conf` with each of `settings` a test did not set itself: a test that picks its own
    security protocol (none does in this mode's runs) keeps it."""
    out = dict(conf)
    if "security.protocol" in out or "security_protocol" in out:
        return out
    for k, v in settings.items():
        out.setdefault(k, v)
    return out


def _confluent_class(base):
    """A subclass of confluent-kafka's Producer or Consumer (C types, which cannot be changed in
    place) adding the security settings."""
    class Secured(base):
        def __init__(self, conf=None, **kwargs):
            # Settings may come as a dict, as keyword arguments (Producer(**conf)), or both.
            super().__init__(_with_security({**(conf or {}), **kwargs}, librdkafka_settings()))

    Secured.__name__ = Secured.__qualname__ = f"SaslSsl{base.__name__}"
    Secured.__doc__ = f"{base.__module__}.{base.__name__} over SASL_SSL with {MECHANISM}."
    return Secured


def _replace(module, name):
    original = getattr(module, name)
    setattr(module, name, _confluent_class(original))
    REPLACED.append((module, name, original))


def _secure_in_place(cls, settings, dotted):
    """Python client classes get the settings in their own `__init__`: confluent-kafka's
    AdminClient names itself in `super(AdminClient, self)`, so a subclass in its place would
    recurse; and every import of the class, however early, is then the secured one."""
    original = cls.__init__

    if dotted:  # confluent-kafka: AdminClient(conf, **kwargs)
        def __init__(self, conf=None, **kwargs):
            original(self, _with_security({**(conf or {}), **kwargs}, settings()))
    else:  # kafka-python: KafkaConsumer(*topics, **configs), the others (**configs)
        def __init__(self, *args, **configs):
            original(self, *args, **_with_security(configs, settings()))

    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__


def install():
    """Under SASL_SSL, secures the clients of whichever of confluent-kafka and kafka-python are
    installed (the kafka-python 2.0.2 venv has no confluent-kafka); once per process."""
    global _installed
    if not SASL_SSL or _installed:
        return
    _installed = True
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        pass
    else:
        _replace(confluent_kafka, "Producer")
        _replace(confluent_kafka, "Consumer")
        _secure_in_place(confluent_kafka.admin.AdminClient, librdkafka_settings, dotted=True)
    try:
        import kafka
    except ImportError:
        pass
    else:
        for cls in (kafka.KafkaProducer, kafka.KafkaConsumer, kafka.KafkaAdminClient):
            _secure_in_place(cls, kafka_python_settings, dotted=False)
