"""A confluent-kafka group member run as its own process, so a test can kill it without it leaving.
Prints one JSON line per assignment change: {"assigned": [partitions]}.

Strategy "consumer" joins with KIP-848's protocol (group.protocol=consumer: the broker assigns,
incrementally); such a member closes cleanly on SIGTERM (it leaves the group, as a static one
leaves to come back), and SIGKILL is the crash."""

import json
import signal
import sys

import security_mode

# Before the client import: under TRIB_SUITE_SECURITY=SASL_SSL the child's clients connect
# over SASL_SSL as the suite's do (the settings come through the environment).
security_mode.install()
from confluent_kafka import Consumer  # noqa: E402

bootstrap, group, topic, strategy = sys.argv[1:5]
instance = sys.argv[5] if len(sys.argv) > 5 else None
consumer_protocol = strategy == "consumer"
conf = {
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
}
if consumer_protocol:
    # The broker sets the session and heartbeat of a KIP-848 group; the client may not.
    conf["group.protocol"] = "consumer"
else:
    conf.update({
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": strategy,
    })
if instance:
    conf["group.instance.id"] = instance
c = Consumer(conf)


owned = set()
cooperative = strategy in ("cooperative-sticky", "consumer")
stopping = False


def on_term(_sig, _frame):
    global stopping
    stopping = True


if consumer_protocol:
    signal.signal(signal.SIGTERM, on_term)


def on_assign(_consumer, partitions):
    # Eager protocols hand over the whole new assignment; cooperative ones only the additions.
    if not cooperative:
        owned.clear()
    owned.update(tp.partition for tp in partitions)
    print(json.dumps({"assigned": sorted(owned)}), flush=True)


def on_revoke(_consumer, partitions):
    owned.difference_update(tp.partition for tp in partitions)
    print(json.dumps({"assigned": sorted(owned)}), flush=True)


c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
while not stopping:
    c.poll(0.2)
c.close()
