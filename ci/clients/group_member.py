"""A confluent-kafka group member run as its own process, so a test can kill it without it leaving.
Prints one JSON line per assignment change: {"assigned": [partitions]}."""

import json
import sys

import security_mode

# Before the client import: under TRIB_SUITE_SECURITY=SASL_SSL the child's clients connect
# over SASL_SSL as the suite's do (the settings come through the environment).
security_mode.install()
from confluent_kafka import Consumer  # noqa: E402

bootstrap, group, topic, strategy = sys.argv[1:5]
instance = sys.argv[5] if len(sys.argv) > 5 else None
conf = {
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "partition.assignment.strategy": strategy,
}
if instance:
    conf["group.instance.id"] = instance
c = Consumer(conf)


owned = set()
cooperative = strategy == "cooperative-sticky"


def on_assign(_consumer, partitions):
    # Eager protocols hand over the whole new assignment; cooperative ones only the additions.
    if not cooperative:
        owned.clear()
    owned.update(tp.partition for tp in partitions)
    print(json.dumps({"assigned": sorted(owned)}), flush=True)


def on_revoke(_consumer, partitions):
    owned.difference_update(tp.partition for tp in partitions)
    print(json.dumps({"assigned": sorted(owned)}), flush=True)


c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
while True:
    c.poll(0.2)
