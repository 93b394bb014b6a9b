"""kafka-python 3.x: its defaults (idempotent producer, ApiVersions probing) and its admin client."""

import json

import kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.structs import TopicPartition


def test_default_idempotent_producer_and_reader(broker):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    if not kafka.__version__.startswith("2."):
        # 3.x turns idempotence on by default, so every send below went through InitProducerId.
        assert producer.config["enable_idempotence"] is True
    futures = [producer.send("events", json.dumps({"n": i}).encode()) for i in range(1000)]
    producer.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    assert offsets == list(range(1000))
    producer.close()

    consumer = KafkaConsumer(
        "events", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False, consumer_timeout_ms=5000,
    )
    values = [json.loads(m.value)["n"] for m in consumer]
    consumer.close()
    assert values == list(range(1000))


def test_admin_create_describe_delete(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("adm", 3, 1, topic_configs={"retention.ms": "3600000"})])
    assert "adm" in admin.list_topics()
    # Creating it again fails the way Kafka fails it.
    try:
        admin.create_topics([NewTopic("adm", 3, 1)])
        raise AssertionError("duplicate create must fail")
    except kafka.errors.TopicAlreadyExistsError:
        pass
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")])
    text = repr(described)
    assert "retention.ms" in text and "3600000" in text
    admin.delete_topics(["adm"])
    assert "adm" not in admin.list_topics()
    admin.close()


def test_seek_and_offsets(broker):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(50):
        producer.send("seek", key=b"k", value=str(i).encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tp = TopicPartition("seek", 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 50
    consumer.seek(tp, 40)
    got = []
    while len(got) < 10:
        for records in consumer.poll(timeout_ms=2000).values():
            got.extend(int(r.value) for r in records)
    assert got[:10] == list(range(40, 50))
    consumer.close()


def test_kafka_python_group_with_auto_commit_does_not_reread(broker):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(200):
        producer.send("events", json.dumps({"event": i}).encode())
    producer.flush()
    producer.close()

    def read_all():
        consumer = KafkaConsumer(
            "events", bootstrap_servers=broker.bootstrap, group_id="readers",
            auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=200,
            consumer_timeout_ms=4000,
        )
        events = [json.loads(m.value)["event"] for m in consumer]
        consumer.close()  # commits the final position
        return events

    assert read_all() == list(range(200))
    assert read_all() == []


def test_delete_records_moves_beginning_offsets(broker):
    if kafka.__version__.startswith("2."):
        pytest.skip("kafka-python 2.0.2 has no KafkaAdminClient.delete_records")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(100):
        producer.send("trimmed", value=str(i).encode())
    producer.flush()
    producer.close()
    tp = TopicPartition("trimmed", 0)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.delete_records({tp: 60})
    admin.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp])[tp] == 60
    consumer.seek_to_beginning(tp)
    got = []
    while len(got) < 40:
        for records in consumer.poll(timeout_ms=2000).values():
            got.extend(r.offset for r in records)
    assert got[:40] == list(range(60, 100))
    consumer.close()


def test_admin_partitions_broker_configs_and_authorized_operations(broker):
    from kafka.admin import NewPartitions

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("grow", 2, 1)])
    admin.create_partitions({"grow": NewPartitions(5)})
    described = admin.describe_topics(["grow"])
    assert len(described[0]["partitions"]) == 5
    with pytest.raises(kafka.errors.InvalidPartitionsError):
        admin.create_partitions({"grow": NewPartitions(3)})

    # A dynamic broker config: changed, described with its source, kept across a restart.
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                        configs={"log.retention.ms": "7200000"})])
    admin.close()
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    text = repr(admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")]))
    assert "log.retention.ms" in text and "7200000" in text
    if kafka.__version__.startswith("2."):
        # kafka-python 2.0.2's admin client has no config_filter, describe_cluster, log dirs
        # or authorized operations; the rest is for 3.x.
        admin.close()
        return
    topic = repr(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "grow")],
                                        config_filter="all"))
    assert "7200000" in topic, "the topic's retention.ms default follows the broker's"

    # kafka-python asks for authorized operations; the answers must decode.
    cluster = admin.describe_cluster()
    assert cluster["brokers"][0]["broker_id"] == 0
    assert {"CREATE", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"} <= set(cluster["authorized_operations"])
    assert "grow" in admin.list_topics()
    dirs = repr(admin.describe_log_dirs())
    assert "grow" in dirs, dirs
    groups = admin.describe_groups(["nobody"], include_authorized_operations=True)
    assert {"READ", "DESCRIBE", "DELETE"} <= set(groups["nobody"]["authorized_operations"])
    admin.close()


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "alice-secret"),
    ("SCRAM-SHA-256", "s256", "s256-secret"),
    ("SCRAM-SHA-512", "s512", "s512-secret"),
])
def test_sasl_plain_and_scram(sasl_broker, mechanism, user, password):
    auth = dict(bootstrap_servers=sasl_broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    topic = f"kp-sasl-{mechanism.lower()}"
    producer = KafkaProducer(**auth)
    for i in range(10):
        producer.send(topic, f"{i}".encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **auth)
    got = [m.value.decode() for m in consumer]
    consumer.close()
    assert got == [str(i) for i in range(10)]


def test_delete_records_of_a_topic_that_does_not_exist_is_unknown_topic(broker):
    """Metadata v8+ answers an unknown topic's authorized operations when asked, as Kafka's
    metadata handler does; kafka-python's admin reads them before it looks at the error."""
    if kafka.__version__.startswith("2."):
        pytest.skip("kafka-python 2.0.2 has no KafkaAdminClient.delete_records")
    from kafka.errors import UnknownTopicOrPartitionError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({TopicPartition("never-created", 0): 1})
    finally:
        admin.close()
