"""A three-node cluster (every node a voter of the metadata quorum and a broker) driven by real
clients that are given one address and must find the rest: kafka-python, confluent-kafka, kcat."""

import json
import os
import subprocess
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic as CNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic


def wait_for(what, check, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def leaders(bootstrap, topic):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    parts = md.topics[topic].partitions
    return {p: parts[p].leader for p in parts}


def test_kafka_python_producer_admin_and_group_across_brokers(cluster):
    first, second, third = (b.bootstrap for b in cluster.nodes)
    admin = KafkaAdminClient(bootstrap_servers=second)
    admin.create_topics([NewTopic("kp-spread", 6, 1)])
    admin.close()
    wait_for("every partition led", lambda: len(leaders(first, "kp-spread")) == 6
             and all(l > 0 for l in leaders(first, "kp-spread").values()))
    assert set(leaders(first, "kp-spread").values()) == {1, 2, 3}
    # 3.x is idempotent by default: InitProducerId reserves ids through the quorum.
    producer = KafkaProducer(bootstrap_servers=first)
    futures = [producer.send("kp-spread", json.dumps({"n": i}).encode(), partition=i % 6)
               for i in range(600)]
    producer.flush()
    for f in futures:
        f.get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(
        "kp-spread", bootstrap_servers=third, group_id="kp-readers",
        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000,
    )
    values = sorted(json.loads(m.value)["n"] for m in consumer)
    consumer.commit()
    consumer.close()
    assert values == list(range(600))


def test_confluent_group_keeps_reading_when_a_broker_stops(cluster):
    bootstrap = cluster.nodes[0].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([CNewTopic("ck-spread", 3, 1)]).values():
        f.result(10)
    wait_for("every partition led", lambda: sorted(leaders(bootstrap, "ck-spread").values()) == [1, 2, 3])
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(300):
        p.produce("ck-spread", str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-readers",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["ck-spread"])
    got = []
    deadline = time.time() + 60
    while len(got) < 300 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(int(m.value()))
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == list(range(300))
    # A broker stopped cleanly leaves Metadata once fenced; the others keep their partitions.
    led = leaders(bootstrap, "ck-spread")
    stopped = cluster.nodes[2]
    assert stopped.stop() == 0
    wait_for("the stopped broker fenced", lambda: 3 not in
             AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)
    now = leaders(bootstrap, "ck-spread")
    for part, leader in led.items():
        assert now[part] == (-1 if leader == 3 else leader)


def test_kcat_lists_every_broker(cluster):
    out = subprocess.run(["kcat", "-b", cluster.nodes[1].bootstrap, "-L"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert "3 brokers:" in out, out
    for b in cluster.nodes:
        assert f"at {b.bootstrap}" in out, out


def test_replicated_topic_survives_its_leaders_death_without_loss_or_duplicates(cluster):
    """RF=3, min.insync.replicas=2, kafka-python's idempotent producer with acks=all: the leader
    is killed mid-stream; every acknowledged record is read back once, from the new leader."""
    import signal
    bootstrap = cluster.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp-replicated", 1, 3, topic_configs={"min.insync.replicas": "2"})])
    admin.close()

    def isr():
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("kp-replicated", timeout=10)
        p = md.topics["kp-replicated"].partitions[0]
        return p.leader, sorted(p.isrs)

    wait_for("every replica in sync", lambda: isr()[1] == [1, 2, 3])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20,
                             request_timeout_ms=10000, retry_backoff_ms=200)
    acked = []
    for i in range(200):
        producer.send("kp-replicated", str(i).encode()).get(timeout=30)
        acked.append(i)
    leader, _ = isr()
    victim = cluster.nodes[leader - 1]
    victim.stop(signal.SIGKILL)
    survivors = ",".join(b.bootstrap for b in cluster.nodes if b is not victim)
    for i in range(200, 400):
        producer.send("kp-replicated", str(i).encode()).get(timeout=60)
        acked.append(i)
    producer.close()
    consumer = KafkaConsumer("kp-replicated", bootstrap_servers=survivors, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    values = [int(m.value) for m in consumer]
    consumer.close()
    assert values == acked


def test_trib_creates_and_describes_a_replicated_topic(cluster):
    trib = os.environ.get("TRIB_BIN", os.path.join(
        os.path.dirname(os.environ.get("TRIBUTARY_BIN", "target/release/tributary")), "trib"))

    def run(*args):
        return subprocess.run([trib, "--bootstrap", cluster.nodes[0].bootstrap, *args],
                              capture_output=True, text=True, timeout=60, check=True).stdout

    run("topics", "create", "trib-rep", "--partitions", "2", "--replication-factor", "3")

    def in_sync():
        lines = [l for l in run("topics", "describe", "trib-rep").splitlines() if "Isr: [" in l]
        return len(lines) == 2 and all(
            len(l.split("Isr: [")[1].split("]")[0].split(",")) == 3 for l in lines)

    wait_for("both partitions fully in sync", in_sync)
    out = run("topics", "describe", "trib-rep")
    assert out.count("Replicas: [") == 2, out


def test_confluent_consumers_read_from_the_replica_in_their_rack(cluster):
    """KIP-392: each node is its own rack; a consumer with `client.rack` receives its records
    from that rack's node, whichever node leads each partition (librdkafka's per-broker
    receive counters say where the bytes came from)."""
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([CNewTopic("racked", 3, 3, config={"min.insync.replicas": "2"})]).values():
        f.result()

    def in_sync():
        md = admin.list_topics("racked", timeout=10)
        return all(sorted(p.isrs) == [1, 2, 3] for p in md.topics["racked"].partitions.values())

    wait_for("every replica in sync", in_sync)
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(300):
        p.produce("racked", value=b"x" * 1000, partition=i % 3)
    assert p.flush(30) == 0
    for rack in (1, 2, 3):
        stats = []
        c = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"rack-reader-{rack}",
            "client.rack": f"rack-{rack}", "enable.auto.commit": False,
            "statistics.interval.ms": 200, "stats_cb": stats.append,
        })
        c.assign([confluent_kafka.TopicPartition("racked", part, confluent_kafka.OFFSET_BEGINNING)
                  for part in range(3)])
        got = []
        wait_for("300 records", lambda: (got.extend(m for m in c.consume(300, 0.5) if not m.error())
                                         or len(got) >= 300), timeout=60)
        n = len(stats)
        # Statistics are handed over from within poll.
        wait_for("statistics", lambda: (c.poll(0.1), len(stats) > n)[1])
        c.close()
        rx = {}
        for b in json.loads(stats[-1])["brokers"].values():
            if b.get("nodeid", -1) > 0:
                rx[b["nodeid"]] = rx.get(b["nodeid"], 0) + b["rxbytes"]
        print(f"client.rack=rack-{rack}: bytes received by node {rx}")
        assert rx[rack] > 0.8 * sum(rx.values()), f"client.rack=rack-{rack} received {rx} bytes by node"
