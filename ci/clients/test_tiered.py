"""Tiered storage with real clients: a topic whose closed segments have left the broker's disk
for its remote log store (a file:// store here; the Rust suite runs an S3-compatible server)
reads back whole from offset 0 with kafka-python and confluent-kafka."""

import glob
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, TopicPartition as CTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.structs import TopicPartition

from conftest import Broker
from security_mode import SASL_SSL

TRIB = os.environ.get("TRIB_BIN", os.path.join(os.path.dirname(os.environ.get("TRIBUTARY_BIN", "target/release/tributary")), "trib"))

TOPIC = "tiered"


@pytest.fixture
def tiered_broker(tmp_path, suite_security):
    store = tmp_path / "store"
    b = Broker(tmp_path / "data", extra=[
        "--set", "remote.log.storage.system.enable=true",
        "--set", f"remote.log.storage.url=file://{store}",
        "--set", "remote.log.manager.task.interval.ms=200",
        "--set", "log.retention.check.interval.ms=200",
    ])
    if suite_security:
        b.secure(suite_security)
    b.start()
    b.store = store
    yield b
    assert b.stop() == 0, "broker must exit 0 on SIGTERM"


def remote_objects(b):
    return sorted(glob.glob(os.path.join(str(b.store), "**", "*.log"), recursive=True))


def local_segments(b):
    return glob.glob(os.path.join(b.data_dir, f"{TOPIC}-0", "*.log"))


def wait_for(what, done, timeout=30):
    deadline = time.time() + timeout
    while not done():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_tiered_topic_reads_back_from_offset_zero_with_kafka_python_and_confluent_kafka(tiered_broker):
    b = tiered_broker
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
        "remote.storage.enable": "true",
        "segment.bytes": "2048",
        "local.retention.bytes": "1",
    })])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=0)
    values = [f"record-{i}-{'z' * 150}".encode() for i in range(150)]
    for v in values:
        producer.send(TOPIC, value=v).get(timeout=30)  # one batch each: many segments
    producer.close()
    wait_for("segments copied and gone from the local disk",
             lambda: len(remote_objects(b)) >= 8 and len(local_segments(b)) <= 2)

    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp])[tp] == 0, "the log still starts at 0"
    got = [(m.offset, m.value) for m in consumer]
    consumer.close()
    assert got == list(enumerate(values))

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "tiered-reader",
                  "enable.auto.commit": False})
    c.assign([CTopicPartition(TOPIC, 0, 0)])
    read = []
    deadline = time.time() + 30
    while len(read) < len(values) and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            read.append((m.offset(), m.value()))
    c.close()
    assert read == list(enumerate(values))

    if not SASL_SSL:  # trib's own SASL_SSL runs are in test_trib.py
        out = subprocess.run([TRIB, "--bootstrap", b.bootstrap, "topics", "describe", TOPIC],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        line = next(l for l in out.stdout.splitlines() if "Partition: 0" in l)
        assert "LogStartOffset: 0" in line and "Remote: 0..=" in line, line
        local = int(line.split("LocalLogStartOffset: ")[1].split()[0])
        assert 0 < local < len(values), line
