use super::*;
use crate::group::consumer::{ConsumerLimits, HeartbeatAnswer};
use crate::group::state::Member;
use tributary_protocol::requests::consumer_group::ConsumerGroupHeartbeatRequest;

const T: TopicId = [9; 16];

fn topics() -> TopicsImage {
    TopicsImage::from([("t".to_string(), (T, 4))])
}

fn limits() -> ConsumerLimits {
    ConsumerLimits {
        max_size: 10,
        session_timeout: Duration::from_secs(45),
        heartbeat_interval: Duration::from_secs(5),
        assignors: [Some(crate::group::assignor::Assignor::Uniform), None],
        session_timeout_range: (Duration::from_secs(45), Duration::from_secs(60)),
        heartbeat_interval_range: (Duration::from_secs(5), Duration::from_secs(15)),
        migration: MigrationPolicy::named("bidirectional").unwrap(),
    }
}

fn classic_limits() -> GroupLimits {
    GroupLimits {
        max_size: 10,
        min_session_timeout: Duration::from_millis(100),
        max_session_timeout: Duration::from_secs(600),
        initial_rebalance_delay: Duration::ZERO,
    }
}

/// A subscription to "t" owning `owned` (a cooperative member; eager ones own nothing).
fn subscription(owned: &[i32]) -> Bytes {
    Subscription {
        version: 3,
        topics: vec!["t".into()],
        user_data: None,
        owned_partitions: if owned.is_empty() {
            Vec::new()
        } else {
            vec![("t".into(), owned.to_vec())]
        },
        generation_id: -1,
        rack_id: None,
    }
    .encode()
}

fn join_req(member: &str, owned: &[i32]) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: "g".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![("cooperative-sticky".into(), subscription(owned))],
    }
}

fn joiner(version: i16) -> Joiner {
    Joiner {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session: Duration::from_secs(10),
        version,
    }
}

fn consumer_join(member: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        topic_partitions: Some(Vec::new()),
    }
}

fn beat(member: &str, epoch: i32, owned: &[i32]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        subscribed_topic_names: None,
        topic_partitions: Some(vec![(T, owned.to_vec())]),
        ..consumer_join(member)
    }
}

fn caller() -> Caller {
    Caller {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        version: 1,
    }
}

fn heartbeat(g: &mut ConsumerGroup, req: &ConsumerGroupHeartbeatRequest) -> HeartbeatAnswer {
    g.heartbeat(req, &caller(), &topics(), Instant::now(), &limits())
        .unwrap()
}

fn owned(g: &ConsumerGroup, member: &str) -> Vec<i32> {
    g.members[member]
        .assigned
        .values()
        .flatten()
        .copied()
        .collect()
}

fn sync(g: &mut ConsumerGroup, member: &str, generation: i32) -> SyncResult {
    let req = SyncGroupRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("cooperative-sticky".into()),
        assignments: Vec::new(),
    };
    g.classic_sync(&req, &topics(), Instant::now())
}

fn classic_beat(g: &mut ConsumerGroup, member: &str, generation: i32) -> ErrorCode {
    let req = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: None,
    };
    g.classic_heartbeat(&req, Instant::now())
}

#[test]
fn a_classic_member_joins_a_consumer_group_and_gets_its_partitions_once_released() {
    let mut g = ConsumerGroup::new("g");
    let a = heartbeat(&mut g, &consumer_join("m1"));
    assert_eq!(owned(&g, "m1"), vec![0, 1, 2, 3]);
    // v4+: a member id first.
    let r = g.classic_join(
        &join_req("", &[]),
        &joiner(5),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(r.error, ErrorCode::MEMBER_ID_REQUIRED);
    let id = r.member_id.clone();
    let r = g.classic_join(
        &join_req(&id, &[]),
        &joiner(5),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!((r.leader.as_str(), r.members.len()), ("", 0));
    assert_eq!(r.protocol_name.as_deref(), Some("cooperative-sticky"));
    assert_eq!(r.generation_id, g.members[&id].member_epoch);
    // Its target's partitions are still m1's: it waits for them.
    assert_eq!(g.members[&id].state, MemberState::UnreleasedPartitions);
    assert!(owned(&g, &id).is_empty());
    let s = sync(&mut g, &id, r.generation_id);
    assert_eq!(s.error, ErrorCode::NONE);
    assert!(decode_assignment(s.assignment).unwrap().is_empty());
    assert_eq!(classic_beat(&mut g, &id, r.generation_id), ErrorCode::NONE);
    // m1 revokes what the classic member is to get.
    let b = heartbeat(&mut g, &beat("m1", a.member_epoch, &[0, 1, 2, 3]));
    let kept = owned(&g, "m1");
    assert_eq!(kept.len(), 2);
    heartbeat(&mut g, &beat("m1", b.member_epoch, &kept));
    // Now free: the classic member is told to rejoin, and gets them.
    assert_eq!(
        classic_beat(&mut g, &id, r.generation_id),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let r = g.classic_join(
        &join_req(&id, &[]),
        &joiner(5),
        &topics(),
        Instant::now(),
        &limits(),
    );
    let s = sync(&mut g, &id, r.generation_id);
    let got = decode_assignment(s.assignment).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.len(), 2);
    assert!(got[0].1.iter().all(|p| !kept.contains(p)));
    assert_eq!(classic_beat(&mut g, &id, r.generation_id), ErrorCode::NONE);
    // A wrong generation, a stranger, a wrong instance.
    assert_eq!(classic_beat(&mut g, &id, 99), ErrorCode::ILLEGAL_GENERATION);
    assert_eq!(classic_beat(&mut g, "x", 1), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(sync(&mut g, "m1", 1).error, ErrorCode::UNKNOWN_MEMBER_ID);
    // Commits: its generation, any version; another generation is ILLEGAL_GENERATION.
    let epoch = r.generation_id;
    assert_eq!(g.validate_offset_commit(&id, epoch, Some(2)), Ok(()));
    assert_eq!(
        g.validate_offset_commit(&id, epoch + 1, Some(2)),
        Err(ErrorCode::ILLEGAL_GENERATION)
    );
}

#[test]
fn a_cooperative_member_keeps_what_it_owns_until_it_rejoins_without_it() {
    let mut g = ConsumerGroup::new("g");
    let r = g.classic_join(
        &join_req("k", &[]),
        &joiner(3),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(owned(&g, "k"), vec![0, 1, 2, 3]);
    let epoch = r.generation_id;
    // A consumer-protocol member joins: k must give two up.
    heartbeat(&mut g, &consumer_join("m1"));
    assert_eq!(
        classic_beat(&mut g, "k", epoch),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let r = g.classic_join(
        &join_req("k", &[0, 1, 2, 3]),
        &joiner(3),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(r.generation_id, epoch, "its epoch waits for the revocation");
    assert_eq!(g.members["k"].state, MemberState::UnrevokedPartitions);
    let s = sync(&mut g, "k", epoch);
    assert_eq!(s.error, ErrorCode::NONE);
    let kept = decode_assignment(s.assignment).unwrap()[0].1.clone();
    assert_eq!(kept.len(), 2);
    assert_eq!(
        classic_beat(&mut g, "k", epoch),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    // It rejoins owning only what it kept: it moves to the group's epoch.
    let r = g.classic_join(
        &join_req("k", &kept),
        &joiner(3),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(r.generation_id, g.assignment_epoch);
    assert_eq!(g.members["k"].state, MemberState::Stable);
    assert_eq!(classic_beat(&mut g, "k", r.generation_id), ErrorCode::NONE);
    // Leaving removes it and moves the group epoch.
    let before = g.group_epoch;
    let left = g.classic_leave(&[("k".into(), None), ("m1".into(), None)]);
    assert_eq!(left[0].2, ErrorCode::NONE);
    assert_eq!(
        left[1].2,
        ErrorCode::UNKNOWN_MEMBER_ID,
        "m1 is no classic member"
    );
    assert!(g.group_epoch > before);
}

fn classic_group() -> Group {
    let now = Instant::now();
    let mut g = Group::new("g", now);
    g.generation = 3;
    g.protocol_type = Some("consumer".into());
    g.protocol_name = Some("range".into());
    g.state = GroupState::Stable;
    for (id, ps) in [("a", vec![0, 1]), ("b", vec![2, 3])] {
        g.members.insert(
            id.into(),
            Member {
                member_id: id.into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/h".into(),
                session_timeout: Duration::from_secs(10),
                rebalance_timeout: Duration::from_secs(30),
                protocols: vec![("range".into(), subscription(&[]))],
                assignment: encode_assignment(1, &vec![("t".into(), ps)]),
                deadline: now,
                awaiting_join: false,
                awaiting_sync: false,
            },
        );
    }
    g
}

#[test]
fn a_classic_group_upgrades_with_its_members_and_assignments_and_downgrades_back() {
    let classic = classic_group();
    assert!(ConsumerGroup::upgradable(&classic, limits().migration, &limits()).is_ok());
    let off = MigrationPolicy::named("DOWNGRADE").unwrap();
    assert!(ConsumerGroup::upgradable(&classic, off, &limits()).is_err());
    let mut g = ConsumerGroup::from_classic(&classic, &topics(), Instant::now()).unwrap();
    assert_eq!((g.group_epoch, g.assignment_epoch), (3, 3));
    assert_eq!(owned(&g, "a"), vec![0, 1]);
    assert_eq!(owned(&g, "b"), vec![2, 3]);
    assert!(g
        .members
        .values()
        .all(|m| m.classic.is_some() && m.member_epoch == 3));
    // Records carry the classic members whole.
    let mut back = ConsumerGroup::new("g");
    for (k, v) in g.records() {
        back.restore(&k, Some(v), Instant::now(), &limits())
            .unwrap();
    }
    assert_eq!(back.members["a"].classic, g.members["a"].classic);
    // A consumer-protocol member joins and leaves: only classic members remain.
    heartbeat(&mut g, &consumer_join("m1"));
    assert!(!g.downgradable(limits().migration, &classic_limits()));
    g.remove_member("m1");
    assert!(g.downgradable(limits().migration, &classic_limits()));
    assert!(!g.downgradable(
        MigrationPolicy::named("upgrade").unwrap(),
        &classic_limits()
    ));
    let mut again = Group::new("g", Instant::now());
    g.into_classic(&mut again, &topics(), Instant::now(), &classic_limits());
    assert_eq!(again.generation, 3, "the members' epoch");
    assert_eq!(again.state, GroupState::PreparingRebalance);
    assert_eq!(again.protocol_name.as_deref(), Some("range"));
    assert_eq!(again.members.len(), 2);
    // a never heartbeated since: it still owns what it had.
    let a = decode_assignment(again.members["a"].assignment.clone()).unwrap();
    assert_eq!(a, vec![("t".to_string(), vec![0, 1])]);
}

#[test]
fn protocols_a_classic_member_brings_must_match_the_classic_members_there() {
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), Instant::now()).unwrap();
    let mut other = join_req("", &[]);
    other.protocols = vec![("roundrobin".into(), subscription(&[]))];
    assert!(!g.supports_classic("consumer", &other.protocols));
    let r = g.classic_join(&other, &joiner(3), &topics(), Instant::now(), &limits());
    assert_eq!(r.error, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    assert!(!g.supports_classic("connect", &join_req("", &[]).protocols));
    // A subscription that does not read is refused the same way, and changes nothing.
    let mut bad = join_req("", &[]);
    bad.protocols = vec![("range".into(), Bytes::from_static(b"\x00"))];
    let before = g.group_epoch;
    let r = g.classic_join(&bad, &joiner(3), &topics(), Instant::now(), &limits());
    assert_eq!(r.error, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!((g.group_epoch, g.members.len()), (before, 2));
}

#[test]
fn an_upgrade_while_a_rebalance_completes_keeps_what_cooperative_members_still_own() {
    // The join phase cleared the assignments; the members' subscriptions say what they own.
    let mut classic = classic_group();
    for (id, owned) in [("a", vec![0, 1]), ("b", vec![2, 3])] {
        let m = classic.members.get_mut(id).unwrap();
        m.assignment = Bytes::new();
        m.protocols = vec![("range".into(), subscription(&owned))];
    }
    classic.state = GroupState::CompletingRebalance;
    let mut g = ConsumerGroup::from_classic(&classic, &topics(), Instant::now()).unwrap();
    assert_eq!(owned(&g, "a"), vec![0, 1]);
    assert_eq!(owned(&g, "b"), vec![2, 3]);
    // A newcomer gets nothing the two still hold.
    heartbeat(&mut g, &consumer_join("m1"));
    assert!(owned(&g, "m1").is_empty());
}

#[test]
fn a_downgrade_keeps_the_members_generation_and_what_they_still_give_up() {
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), Instant::now()).unwrap();
    heartbeat(&mut g, &consumer_join("m1"));
    // The member that must give a partition up rejoins still owning both of its own.
    let giver = ["a", "b"]
        .into_iter()
        .find(|m| g.target[*m].values().flatten().count() < 2)
        .expect("a member gives one up");
    let mine = owned(&g, giver);
    assert_eq!(
        classic_beat(&mut g, giver, 3),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let now = Instant::now();
    let mut rejoin = join_req(giver, &mine);
    rejoin.protocols[0].0 = "range".into();
    let r = g.classic_join(&rejoin, &joiner(3), &topics(), now, &limits());
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!(g.members[giver].state, MemberState::UnrevokedPartitions);
    g.remove_member("m1");
    let mut again = Group::new("g", Instant::now());
    g.into_classic(&mut again, &topics(), Instant::now(), &classic_limits());
    let epochs: Vec<i32> = g.members.values().map(|m| m.member_epoch).collect();
    assert_eq!(again.generation, *epochs.iter().max().unwrap());
    assert!(
        again.generation < g.group_epoch,
        "not the epoch the leave moved"
    );
    let given = decode_assignment(again.members[giver].assignment.clone()).unwrap();
    assert_eq!(
        given,
        vec![("t".to_string(), mine)],
        "what it gives up is its own still"
    );
}

#[test]
fn a_replaced_static_process_is_fenced_and_a_consumer_member_may_take_its_place() {
    let mut g = ConsumerGroup::new("g");
    let mut first = join_req("", &[]);
    first.group_instance_id = Some("i".into());
    let r = g.classic_join(&first, &joiner(5), &topics(), Instant::now(), &limits());
    assert_eq!(r.error, ErrorCode::NONE);
    let old = r.member_id.clone();
    // Its process restarts: a new member id holds the instance now.
    let r = g.classic_join(&first, &joiner(5), &topics(), Instant::now(), &limits());
    let new = r.member_id.clone();
    assert_ne!(old, new);
    let req = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: r.generation_id,
        member_id: old.clone(),
        group_instance_id: Some("i".into()),
    };
    assert_eq!(
        g.classic_heartbeat(&req, Instant::now()),
        ErrorCode::FENCED_INSTANCE_ID
    );
    // The instance comes back with the consumer protocol: it takes the place with its
    // partitions at once.
    let parts = owned(&g, &new);
    let mut join = consumer_join("c1");
    join.instance_id = Some("i".into());
    let a = heartbeat(&mut g, &join);
    assert_eq!(g.members.len(), 1);
    assert!(g.members["c1"].classic.is_none());
    let got: Vec<i32> = a.assignment.unwrap().values().flatten().copied().collect();
    assert_eq!(got, parts);
}

#[test]
fn a_classic_join_after_a_coordinator_move_does_not_rebalance() {
    let mut g = ConsumerGroup::new("g");
    let r = g.classic_join(
        &join_req("k", &[]),
        &joiner(3),
        &topics(),
        Instant::now(),
        &limits(),
    );
    let epoch = g.group_epoch;
    let mut back = ConsumerGroup::new("g");
    for (k, v) in g.records() {
        back.restore(&k, Some(v), Instant::now(), &limits())
            .unwrap();
    }
    back.rearm(Instant::now(), &limits());
    let again = back.classic_join(
        &join_req("k", &[0, 1, 2, 3]),
        &joiner(3),
        &topics(),
        Instant::now(),
        &limits(),
    );
    assert_eq!(
        (back.group_epoch, again.generation_id),
        (epoch, r.generation_id)
    );
}

#[test]
fn a_classic_member_told_to_rejoin_that_never_does_is_removed_after_its_rebalance_timeout() {
    let t0 = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let r = g.classic_join(&join_req("k", &[]), &joiner(3), &topics(), t0, &limits());
    let epoch = r.generation_id;
    g.heartbeat(&consumer_join("m1"), &caller(), &topics(), t0, &limits())
        .unwrap();
    // Told to rejoin (the target moved); it goes on heartbeating but never rejoins.
    let step = Duration::from_secs(5);
    let mut now = t0;
    let req = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: epoch,
        member_id: "k".into(),
        group_instance_id: None,
    };
    for _ in 0..5 {
        now += step;
        assert_eq!(
            g.classic_heartbeat(&req, now),
            ErrorCode::REBALANCE_IN_PROGRESS
        );
        assert!(g.expire(now).is_empty(), "its session goes on");
    }
    // 30 s (its rebalance timeout) after the first such answer it is gone; its partitions
    // are free for m1.
    now += step * 2;
    assert_eq!(g.expire(now), vec![("k".to_string(), true)]);

    // A member that rejoins in time keeps going.
    let mut g = ConsumerGroup::new("g");
    let r = g.classic_join(&join_req("k", &[]), &joiner(3), &topics(), t0, &limits());
    g.heartbeat(&consumer_join("m1"), &caller(), &topics(), t0, &limits())
        .unwrap();
    let req = HeartbeatRequest {
        generation_id: r.generation_id,
        ..req
    };
    assert_eq!(
        g.classic_heartbeat(&req, t0 + step),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let owned_now = owned(&g, "k");
    let r = g.classic_join(
        &join_req("k", &owned_now),
        &joiner(3),
        &topics(),
        t0 + step,
        &limits(),
    );
    assert_eq!(r.error, ErrorCode::NONE);
    if g.members["k"].state != MemberState::UnrevokedPartitions {
        assert!(g.members["k"].revocation_deadline.is_none());
    }
    assert!(
        g.expire(t0 + step * 2).is_empty(),
        "its session and its revocation go on"
    );
}
