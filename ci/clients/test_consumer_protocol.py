"""KIP-848 consumer groups with confluent-kafka (group.protocol=consumer): a group scaled to ten
members and back to one, a member killed, a static member restarted, commits resumed exactly
once, a regex subscription picking up a new topic, and a classic group migrating to the consumer
protocol and back with its classic members reading throughout."""

import time

from confluent_kafka import Consumer
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


def group_type(bootstrap, group):
    """The group's type as the admin client lists it ("" when unlisted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer is in
    listed = admin.list_consumer_groups().result(timeout=20)
    assert not listed.errors, listed.errors
    return {g.group_id: str(g.type) for g in listed.valid}.get(group, "")


def test_a_group_migrates_from_classic_to_consumer_and_back_and_admin_sees_it(cg_broker):
    """Kafka 4's online migration (group.consumer.migration.policy=bidirectional): a classic
    group of two cooperative-sticky members becomes a consumer group when a member of the
    consumer protocol joins (the classic members stay, assigned by the broker), and classic
    again when it leaves."""
    create(cg_broker.bootstrap, "migrate", 6)
    a, b = (Member(cg_broker.bootstrap, "migrate-group", "migrate", "cooperative-sticky") for _ in range(2))
    k = None
    try:
        wait_for(lambda: owned_once([a, b], 6), timeout=60, what="two classic members sharing 6")
        assert "CLASSIC" in group_type(cg_broker.bootstrap, "migrate-group")
        k = Member(cg_broker.bootstrap, "migrate-group", "migrate", "consumer")
        wait_for(lambda: owned_once([a, b, k], 6), timeout=60,
                 what="two classic members and a consumer-protocol one sharing 6")
        assert "CONSUMER" in group_type(cg_broker.bootstrap, "migrate-group")
        admin = AdminClient({"bootstrap.servers": cg_broker.bootstrap})
        described = admin.describe_consumer_groups(["migrate-group"])["migrate-group"].result(timeout=20)
        assert len(described.members) == 3, described
        out = trib(cg_broker, "groups", "describe", "migrate-group").stdout
        assert "Type: consumer" in out and "Assignor: uniform" in out, out
        assert out.count("Protocol: classic") == 2 and out.count("Protocol: consumer") == 1, out
        k.stop()  # SIGTERM: it leaves (epoch -1), and only classic members remain
        wait_for(lambda: "CLASSIC" in group_type(cg_broker.bootstrap, "migrate-group"), timeout=30,
                 what="the group classic again")
        wait_for(lambda: owned_once([a, b], 6), timeout=60, what="the classic members sharing 6 again")
    finally:
        for m in (a, b, k):
            if m is not None and m.proc.poll() is None:
                m.stop()
