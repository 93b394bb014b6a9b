"""Commits offsets 1, 2, 3, ... for one partition as fast as the broker acknowledges them, printing
each acknowledged offset; run as a child so a test can kill it (and the broker) at will."""

import sys

import security_mode

# Before the client import: under TRIB_SUITE_SECURITY=SASL_SSL the child's clients connect
# over SASL_SSL as the suite's do (the settings come through the environment).
security_mode.install()
from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402

bootstrap, group, topic = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
n = 1
while True:
    try:
        c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
    except KafkaException:
        break
    print(n, flush=True)
    n += 1
