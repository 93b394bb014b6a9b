"""Transactions from real clients: confluent-kafka (librdkafka) and kafka-python 3.x transactional
producers, read back with read_committed and read_uncommitted consumers."""

import kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap, name, partitions=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(timeout=30)


def read(bootstrap, topic, isolation, expect_at_least=0, partitions=1):
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"r-{isolation}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, idle = [], 0
    while idle < 15 or len(out) < expect_at_least and idle < 100:
        m = c.poll(0.2)
        if m is None or m.error():
            idle += 1
            continue
        idle = 0
        out.append(m.value().decode())
    c.close()
    return out


def test_confluent_commit_and_abort_interleaved_across_a_restart(txn_broker):
    b = txn_broker
    create(b.bootstrap, "ctx")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "py-1"})
    p.init_transactions(30)
    want = []
    for tag, commit in [("a", True), ("b", False), ("c", True)]:
        p.begin_transaction()
        for i in range(20):
            p.produce("ctx", f"{tag}-{i}".encode())
        p.flush(30)
        if commit:
            p.commit_transaction(30)
            want += [f"{tag}-{i}" for i in range(20)]
        else:
            p.abort_transaction(30)
    assert read(b.bootstrap, "ctx", "read_committed", len(want)) == want
    assert len(read(b.bootstrap, "ctx", "read_uncommitted", 60)) == 60
    b.restart()
    assert read(b.bootstrap, "ctx", "read_committed", len(want)) == want
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "py-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("ctx", b"after")
    p.commit_transaction(30)
    assert read(b.bootstrap, "ctx", "read_committed", len(want) + 1) == want + ["after"]


def test_confluent_zombie_is_fenced(txn_broker):
    b = txn_broker
    create(b.bootstrap, "zz")
    old = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "py-z"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("zz", b"zombie")
    old.flush(30)
    new = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "py-z"})
    new.init_transactions(30)
    with pytest.raises(KafkaException):
        old.commit_transaction(30)
    new.begin_transaction()
    new.produce("zz", b"fresh")
    new.commit_transaction(30)
    assert read(b.bootstrap, "zz", "read_committed", 1) == ["fresh"]


@pytest.mark.skipif(kafka.__version__.startswith("2."), reason="kafka-python 2.x has no transactions")
def test_kafka_python_transactional_producer_commit_abort_and_fencing(txn_broker):
    from kafka import KafkaConsumer, KafkaProducer
    b = txn_broker
    create(b.bootstrap, "kp")
    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="kp-1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(10):
        p.send("kp", f"keep-{i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    for i in range(10):
        p.send("kp", f"drop-{i}".encode())
    p.abort_transaction()
    # A second instance fences the first.
    p2 = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="kp-1")
    p2.init_transactions()
    with pytest.raises(Exception):
        p.begin_transaction()
        p.send("kp", b"zombie").get(timeout=10)
        p.commit_transaction()
    p2.begin_transaction()
    p2.send("kp", b"second")
    p2.commit_transaction()
    p2.close()
    c = KafkaConsumer("kp", bootstrap_servers=b.bootstrap, auto_offset_reset="earliest",
                      isolation_level="read_committed", consumer_timeout_ms=5000)
    got = [m.value.decode() for m in c]
    c.close()
    assert got == [f"keep-{i}" for i in range(10)] + ["second"]


def test_trib_lists_and_describes_transactions_and_producers(txn_broker):
    import os
    import subprocess
    trib_bin = os.environ.get("TRIB_BIN", os.path.join(os.path.dirname(
        os.environ.get("TRIBUTARY_BIN", "target/release/tributary")), "trib"))

    def trib(*args):
        r = subprocess.run([trib_bin, "--bootstrap", txn_broker.bootstrap, *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    b = txn_broker
    create(b.bootstrap, "tt")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "trib-tx"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("tt", b"x")
    p.flush(30)
    listed = trib("transactions", "list", "--state", "Ongoing")
    assert "trib-tx" in listed and "Ongoing" in listed
    described = trib("transactions", "describe", "trib-tx")
    assert "State: Ongoing" in described and "Partitions: tt [0]" in described
    producers = trib("producers", "describe", "tt", "0")
    rows = producers.strip().splitlines()[1:]
    assert len(rows) == 1 and rows[0].split("\t")[-1] == "0", producers
    p.commit_transaction(30)
    assert "State: CompleteCommit" in trib("transactions", "describe", "trib-tx")
    assert trib("transactions", "list", "--state", "Ongoing").strip().splitlines()[1:] == []
