"""KIP-848 consumer groups with confluent-kafka (group.protocol=consumer): a group scaled to ten
members and back to one, a member killed, a static member restarted, commits resumed exactly
once, a regex subscription picking up a new topic, and the protocols kept apart."""

import time

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from test_groups import Member, create, produce, wait_for
from test_trib import trib


def members(bootstrap, group, topic, n, **kw):
    return [Member(bootstrap, group, topic, "consumer", **kw) for _ in range(n)]


def owned_once(ms, partitions):
    """Every partition owned by exactly one of `ms`, each of them owning some."""
    got = [p for m in ms for p in (m.assigned or [])]
    return sorted(got) == list(range(partitions)) and all(m.assigned for m in ms[:partitions])


def test_ten_members_then_one_each_partition_owned_once(cg_broker):
    create(cg_broker.bootstrap, "wide", 12)
    group = members(cg_broker.bootstrap, "scale", "wide", 1)
    try:
        wait_for(lambda: group[0].assigned == list(range(12)), what="one member owns all 12")
        started = time.time()
        group += members(cg_broker.bootstrap, "scale", "wide", 9)
        wait_for(lambda: owned_once(group, 12) and max(len(m.assigned) for m in group) == 2,
                 timeout=60, what="12 partitions over 10 members")
        print(f"1 -> 10 members reconciled in {time.time() - started:.2f}s (includes client start-up)")
        for m in group[1:]:
            m.stop()  # SIGTERM: the member closes and leaves
        started = time.time()
        wait_for(lambda: group[0].assigned == list(range(12)), timeout=60, what="the last member owns all 12")
        print(f"10 -> 1 members reconciled in {time.time() - started:.2f}s")
    finally:
        for m in group:
            if m.proc.poll() is None:
                m.kill()


def test_a_killed_member_s_partitions_move_after_its_session(cg_broker):
    create(cg_broker.bootstrap, "crash", 4)
    a, b = members(cg_broker.bootstrap, "crash-group", "crash", 2)
    try:
        wait_for(lambda: owned_once([a, b], 4) and len(a.assigned) == 2, what="two members, two each")
        b.kill()  # no leave: the coordinator must notice the session ending
        killed = time.time()
        wait_for(lambda: a.assigned == [0, 1, 2, 3], timeout=30, what="the survivor owns all 4")
        assert time.time() - killed >= 4, "moved before the 6 s session could end"
    finally:
        a.stop()
        if b.proc.poll() is None:
            b.kill()


def test_a_static_member_restarts_into_its_partitions(cg_broker):
    create(cg_broker.bootstrap, "static", 4)
    a = Member(cg_broker.bootstrap, "static-cg", "static", "consumer", instance="a")
    b = Member(cg_broker.bootstrap, "static-cg", "static", "consumer", instance="b")
    try:
        wait_for(lambda: owned_once([a, b], 4) and len(a.assigned) == 2, what="static split")
        changes, mine = a.changes, b.assigned
        b.stop()  # a static member leaves to come back (epoch -2): its partitions wait for it
        b = Member(cg_broker.bootstrap, "static-cg", "static", "consumer", instance="b")
        wait_for(lambda: b.assigned == mine, what="b back with its partitions")
        time.sleep(2)
        assert a.changes == changes, "the other member's assignment changed"
    finally:
        a.stop()
        b.stop()


def consumer(bootstrap, group, **kw):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    conf.update(kw)
    return Consumer(conf)


def test_commits_resume_exactly_once(cg_broker):
    create(cg_broker.bootstrap, "ledger", 3)
    produce(cg_broker.bootstrap, "ledger", [str(i).encode() for i in range(300)], key=lambda i: str(i))
    c = consumer(cg_broker.bootstrap, "ledger-group")
    c.subscribe(["ledger"])
    seen = []
    wait_for(lambda: (seen.extend(m for m in c.consume(150 - len(seen), 0.5) if not m.error())
                      or len(seen) >= 150), what="150 records")
    c.commit(asynchronous=False)
    c.close()
    c = consumer(cg_broker.bootstrap, "ledger-group")
    c.subscribe(["ledger"])
    rest = []
    wait_for(lambda: (rest.extend(m for m in c.consume(300, 0.5) if not m.error())
                      or len(rest) >= 150), what="the other 150")
    time.sleep(1)
    extra = c.consume(10, 1.0)
    c.close()
    assert not [m for m in extra if not m.error()], "read past the 300 records"
    first, second = {int(m.value()) for m in seen}, {int(m.value()) for m in rest}
    assert not first & second, "a committed record was read again"
    assert first | second == set(range(300)), "a record was lost"


def test_a_regex_subscription_follows_new_topics(cg_broker):
    create(cg_broker.bootstrap, "metrics-cpu", 2)
    produce(cg_broker.bootstrap, "metrics-cpu", [b"cpu"] * 10)
    c = consumer(cg_broker.bootstrap, "regex-group")
    c.subscribe(["^metrics-.*"])
    got = []
    wait_for(lambda: (got.extend(m for m in c.consume(100, 0.3) if not m.error()) or len(got) >= 10),
             what="metrics-cpu")
    create(cg_broker.bootstrap, "metrics-disk", 2)
    produce(cg_broker.bootstrap, "metrics-disk", [b"disk"] * 10)
    wait_for(lambda: (got.extend(m for m in c.consume(100, 0.3) if not m.error()) or len(got) >= 20),
             timeout=60, what="metrics-disk, created after the subscription")
    c.close()
    assert sorted({m.topic() for m in got}) == ["metrics-cpu", "metrics-disk"]


def test_the_two_protocols_stay_apart_and_admin_sees_the_group(cg_broker):
    create(cg_broker.bootstrap, "apart", 2)
    new = consumer(cg_broker.bootstrap, "apart-group")
    new.subscribe(["apart"])
    wait_for(lambda: (new.poll(0.2), len(new.assignment()) == 2)[1], what="the consumer-protocol member assigned")
    classic = Consumer({"bootstrap.servers": cg_broker.bootstrap, "group.id": "apart-group",
                        "session.timeout.ms": 6000})
    errors = []
    classic.subscribe(["apart"], on_assign=lambda *_: errors.append("assigned"))
    deadline = time.time() + 5
    while time.time() < deadline and not errors:
        try:
            m = classic.poll(0.2)
        except KafkaException as e:
            errors.append(e.args[0].code())
            break
        if m is not None and m.error():
            errors.append(m.error().code())
    classic.close()
    assert errors and errors[0] != "assigned", "a classic member joined a consumer group"

    admin = AdminClient({"bootstrap.servers": cg_broker.bootstrap})
    listed = admin.list_consumer_groups().result(timeout=20)
    types = {g.group_id: str(g.type) for g in listed.valid}
    assert "CONSUMER" in types.get("apart-group", ""), types
    described = admin.describe_consumer_groups(["apart-group"])["apart-group"].result(timeout=20)
    assert len(described.members) == 1, described
    assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1]
    out = trib(cg_broker, "groups", "describe", "apart-group").stdout
    assert "Type: consumer" in out and "Assignor: uniform" in out, out
    assert '"apart": [0, 1]' in out, out
    new.close()
