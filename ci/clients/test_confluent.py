"""confluent-kafka (librdkafka): bulk keyed produce with acks=all, every codec, admin, restart."""

import signal
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic


def produce_all(bootstrap, topic, messages, **conf):
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []


def consume_all(bootstrap, topic, partitions, count, timeout=90):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    while len(out) < count and time.time() < deadline:
        for m in consumer.consume(10000, 1.0):
            if m.error():
                raise KafkaException(m.error())
            out.append(m)
    consumer.close()
    return out


def create(bootstrap, topic, partitions, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs)]).values():
        f.result()
    return admin


def test_100k_keyed_messages_over_8_partitions_acks_all(broker):
    create(broker.bootstrap, "keyed", 8)
    n = 100_000
    produce_all(broker.bootstrap, "keyed", ((f"key-{i % 997}", str(i)) for i in range(n)), **{"enable.idempotence": True})
    msgs = consume_all(broker.bootstrap, "keyed", 8, n)
    assert len(msgs) == n
    last = {}
    part_of = {}
    for m in msgs:
        k, v = m.key().decode(), int(m.value())
        assert last.get(k, -1) < v, f"key {k} out of order"
        last[k] = v
        assert part_of.setdefault(k, m.partition()) == m.partition()
    assert sorted(int(m.value()) for m in msgs) == list(range(n))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_codec_round_trip(broker, codec):
    topic = f"codec-{codec}"
    values = [f"{codec}-{i}-" + "abc" * (i % 50) for i in range(2000)]
    produce_all(broker.bootstrap, topic, ((None, v) for v in values), **{"compression.type": codec})
    got = [m.value().decode() for m in consume_all(broker.bootstrap, topic, 1, len(values))]
    assert got == values


def test_admin_configs_and_bad_topic(broker):
    admin = create(broker.bootstrap, "cfg", 2, **{"segment.bytes": "1048576"})
    res = ConfigResource("topic", "cfg")
    configs = admin.describe_configs([res])[res].result()
    assert configs["segment.bytes"].value == "1048576"
    assert configs["cleanup.policy"].value == "delete"
    broker_res = ConfigResource("broker", "0")
    bconf = admin.describe_configs([broker_res])[broker_res].result()
    assert bconf["message.max.bytes"].value == "1048588"
    bad = admin.create_topics([NewTopic("bad topic!", num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as e:
        list(bad.values())[0].result()
    assert e.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    unknown = admin.create_topics([NewTopic("x", num_partitions=1, replication_factor=1, config={"no.such": "1"})])
    with pytest.raises(KafkaException):
        list(unknown.values())[0].result()
    for f in admin.delete_topics(["cfg"]).values():
        f.result()


def test_too_large_message_is_refused(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 5_000_000, "acks": "all"})
    errors = []
    producer.produce("big", value=b"x" * 2_000_000, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"


def test_restart_keeps_acknowledged_data_and_watermarks(broker):
    create(broker.bootstrap, "persist", 4)
    produce_all(broker.bootstrap, "persist", ((str(i), str(i)) for i in range(5000)))
    broker.restart()
    msgs = consume_all(broker.bootstrap, "persist", 4, 5000)
    assert sorted(int(m.value()) for m in msgs) == list(range(5000))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    total = sum(consumer.get_watermark_offsets(TopicPartition("persist", p), timeout=10)[1] for p in range(4))
    consumer.close()
    assert total == 5000


def test_kill_9_keeps_every_acknowledged_message(broker):
    create(broker.bootstrap, "crash", 2)
    acked = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(3000):
        producer.produce("crash", value=str(i), on_delivery=lambda e, m: (not e) and acked.append(int(m.value())))
        producer.poll(0)
    producer.flush(30)
    assert len(acked) == 3000
    broker.stop(signal.SIGKILL)
    broker.start()
    got = sorted(int(m.value()) for m in consume_all(broker.bootstrap, "crash", 2, 3000))
    assert got == sorted(acked)


def test_describe_cluster_validate_only_and_offsets_for_times(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result()
    assert [n.id for n in cluster.nodes] == [0]
    assert cluster.controller.id == 0 and len(cluster.cluster_id) == 22
    # validate_only checks and creates nothing.
    for f in admin.create_topics([NewTopic("dry", num_partitions=2, replication_factor=1)], validate_only=True).values():
        f.result()
    assert "dry" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException):
        for f in admin.create_topics([NewTopic("dry", num_partitions=1, replication_factor=3)], validate_only=True).values():
            f.result()

    create(broker.bootstrap, "times", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("times", value=str(i), timestamp=1_700_000_000_000 + i * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    found = consumer.offsets_for_times([TopicPartition("times", 0, 1_700_000_004_500)], timeout=10)
    assert found[0].offset == 5
    after = consumer.offsets_for_times([TopicPartition("times", 0, 1_800_000_000_000)], timeout=10)
    assert after[0].offset == -1
    consumer.close()


def test_alter_configs_take_effect(broker):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    admin = create(broker.bootstrap, "alter", 1)
    res = ConfigResource("topic", "alter", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    for f in admin.incremental_alter_configs([res]).values():
        f.result()
    described = admin.describe_configs([ConfigResource("topic", "alter")])
    configs = list(described.values())[0].result()
    assert configs["max.message.bytes"].value == "2000"
    assert configs["cleanup.policy"].value == "delete,compact"
    # The new limit applies to the next produce at once.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.max.bytes": 1_000_000})
    errors = []
    # The topic is compacted now, so records need keys (Kafka refuses key-less ones: INVALID_RECORD).
    producer.produce("alter", key=b"k", value=b"y" * 3000, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)  # separate batches: the limit applies to whole batches
    producer.produce("alter", key=b"k", value=b"y" * 100, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    assert errors[1] is None
    producer.produce("alter", value=b"no key", on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors[2] is not None and errors[2].name() == "INVALID_RECORD", errors[2]
    bad = ConfigResource("topic", "alter", incremental_configs=[
        ConfigEntry("segment.bytes", "12", incremental_operation=AlterConfigOpType.SET),
    ])
    with pytest.raises(KafkaException):
        for f in admin.incremental_alter_configs([bad]).values():
            f.result()
    delete = ConfigResource("topic", "alter", incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    for f in admin.incremental_alter_configs([delete]).values():
        f.result()
    configs = list(admin.describe_configs([ConfigResource("topic", "alter")]).values())[0].result()
    assert configs["max.message.bytes"].value == "1048588"


def test_delete_records_and_offsets_for_times_survive_restart(broker):
    admin = create(broker.bootstrap, "trim", 1, **{"segment.bytes": "4096"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 20})
    base = 1_700_000_000_000
    for i in range(500):
        producer.produce("trim", value=str(i), timestamp=base + i * 10)
    assert producer.flush(30) == 0
    tp = TopicPartition("trim", 0)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    # Batches hold many records: the lookup lands on the record, not on its batch.
    found = consumer.offsets_for_times([TopicPartition("trim", 0, base + 1225)], timeout=10)
    assert found[0].offset == 123

    deleted = admin.delete_records([TopicPartition("trim", 0, 300)])
    assert list(deleted.values())[0].result().low_watermark == 300
    assert consumer.get_watermark_offsets(tp, timeout=10) == (300, 500)
    # A timestamp before the log start finds the first record kept.
    assert consumer.offsets_for_times([TopicPartition("trim", 0, base)], timeout=10)[0].offset == 300
    with pytest.raises(KafkaException):
        for f in admin.delete_records([TopicPartition("trim", 0, 501)]).values():
            f.result()
    consumer.close()

    broker.restart()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "trim-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    assert consumer.get_watermark_offsets(tp, timeout=10) == (300, 500)
    assert consumer.offsets_for_times([TopicPartition("trim", 0, base + 4000)], timeout=10)[0].offset == 400
    consumer.subscribe(["trim"])
    got = []
    deadline = time.time() + 60
    while len(got) < 200 and time.time() < deadline:
        for m in consumer.consume(500, 1.0):
            assert not m.error(), m.error()
            got.append(m.offset())
    consumer.close()
    assert got == list(range(300, 500))
