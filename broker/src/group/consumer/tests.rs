use super::*;
use tributary_protocol::consumer_group_records::ConsumerKey;

const T: TopicId = [9; 16];
const U: TopicId = [8; 16];

fn limits() -> ConsumerLimits {
    ConsumerLimits {
        max_size: 4,
        session_timeout: Duration::from_secs(45),
        heartbeat_interval: Duration::from_secs(5),
        assignors: [Some(Assignor::Uniform), Some(Assignor::Range)],
        session_timeout_range: (Duration::from_secs(45), Duration::from_secs(60)),
        heartbeat_interval_range: (Duration::from_secs(5), Duration::from_secs(15)),
        migration: MigrationPolicy::named("bidirectional").unwrap(),
    }
}

fn topics(n: i32) -> TopicsImage {
    TopicsImage::from([("t".to_string(), (T, n))])
}

fn caller() -> Caller {
    Caller {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        version: 1,
    }
}

fn join(member: &str) -> ConsumerGroupHeartbeatRequest {
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

/// A steady heartbeat reporting what the member owns.
fn beat(member: &str, epoch: i32, owned: &Assignment) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        subscribed_topic_names: None,
        topic_partitions: Some(
            owned
                .iter()
                .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                .collect(),
        ),
        ..join(member)
    }
}

fn ok(g: &mut ConsumerGroup, req: &ConsumerGroupHeartbeatRequest, now: Instant) -> HeartbeatAnswer {
    g.heartbeat(req, &caller(), &topics(6), now, &limits())
        .unwrap_or_else(|r| panic!("refused: {r:?}"))
}

fn parts(a: &Assignment) -> Vec<i32> {
    a.values().flatten().copied().collect()
}

#[test]
fn a_lone_member_gets_every_partition_at_epoch_one() {
    let mut g = ConsumerGroup::new("g");
    let a = ok(&mut g, &join("m1"), Instant::now());
    assert_eq!(a.member_epoch, 1);
    assert_eq!(
        parts(a.assignment.as_ref().unwrap()),
        vec![0, 1, 2, 3, 4, 5]
    );
    assert_eq!(a.heartbeat_interval_ms, 5000);
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn a_partition_moves_only_after_its_owner_revoked_it() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let first = ok(&mut g, &join("m1"), now).assignment.unwrap();
    // m2 joins: epoch 2; the partitions it is due are still m1's.
    let a2 = ok(&mut g, &join("m2"), now);
    assert_eq!(a2.member_epoch, 2);
    assert_eq!(a2.assignment, Some(Assignment::new()));
    assert_eq!(g.members["m2"].state, MemberState::UnreleasedPartitions);
    // m1's next heartbeat tells it to keep half: it stays at epoch 1 until it revokes.
    let a1 = ok(&mut g, &beat("m1", 1, &first), now);
    assert_eq!(a1.member_epoch, 1);
    let kept = a1.assignment.unwrap();
    assert_eq!(parts(&kept).len(), 3);
    assert_eq!(g.members["m1"].state, MemberState::UnrevokedPartitions);
    // m2 asks again before m1 revoked: still nothing.
    let a2 = ok(&mut g, &beat("m2", 2, &Assignment::new()), now);
    assert_eq!(a2.assignment, None);
    // m1 reports it owns only what it kept: it advances, and m2 gets the rest.
    let a1 = ok(&mut g, &beat("m1", 1, &kept), now);
    assert_eq!(a1.member_epoch, 2);
    let a2 = ok(&mut g, &beat("m2", 2, &Assignment::new()), now);
    let got = a2.assignment.unwrap();
    assert_eq!(parts(&got).len(), 3);
    assert!(parts(&got).iter().all(|p| !parts(&kept).contains(p)));
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn a_member_that_leaves_frees_its_partitions_at_once() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    ok(&mut g, &join("m1"), now);
    let a2 = ok(&mut g, &join("m2"), now);
    let owned = g.members["m1"].assigned.clone();
    let a1 = ok(&mut g, &beat("m1", 1, &owned), now);
    let kept = a1.assignment.unwrap();
    ok(&mut g, &beat("m1", 1, &kept), now);
    let a2 = ok(
        &mut g,
        &beat("m2", a2.member_epoch, &Assignment::new()),
        now,
    );
    assert_eq!(parts(a2.assignment.as_ref().unwrap()).len(), 3);
    let left = ok(
        &mut g,
        &ConsumerGroupHeartbeatRequest {
            member_epoch: -1,
            ..beat("m2", 0, &Assignment::new())
        },
        now,
    );
    assert_eq!(left.member_epoch, -1);
    let a1 = ok(&mut g, &beat("m1", 2, &kept), now);
    assert_eq!(a1.member_epoch, 3);
    assert_eq!(parts(a1.assignment.as_ref().unwrap()).len(), 6);
}

#[test]
fn epochs_ahead_or_unknown_members_are_refused() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let a = ok(&mut g, &join("m1"), now);
    let err = g
        .heartbeat(
            &beat("m1", 7, &Assignment::new()),
            &caller(),
            &topics(6),
            now,
            &limits(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FENCED_MEMBER_EPOCH);
    let err = g
        .heartbeat(
            &beat("nobody", 1, &Assignment::new()),
            &caller(),
            &topics(6),
            now,
            &limits(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UNKNOWN_MEMBER_ID);
    // The previous epoch is accepted from a member owning only what it was given (its last
    // answer was lost); owning more is fenced.
    ok(&mut g, &join("m2"), now);
    ok(&mut g, &beat("m1", 1, a.assignment.as_ref().unwrap()), now);
    let kept = g.members["m1"].assigned.clone();
    ok(&mut g, &beat("m1", 1, &kept), now);
    assert_eq!(g.members["m1"].member_epoch, 2);
    ok(&mut g, &beat("m1", 1, &kept), now);
    let err = g
        .heartbeat(
            &beat("m1", 1, a.assignment.as_ref().unwrap()),
            &caller(),
            &topics(6),
            now,
            &limits(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FENCED_MEMBER_EPOCH);
}

#[test]
fn a_silent_member_or_one_that_never_revokes_is_removed() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let a = ok(&mut g, &join("m1"), now);
    ok(&mut g, &join("m2"), now);
    ok(&mut g, &beat("m1", 1, a.assignment.as_ref().unwrap()), now);
    assert!(g.members["m1"].revocation_deadline.is_some());
    // m1 never revokes within its 30 s rebalance timeout; m2 keeps heartbeating.
    ok(
        &mut g,
        &beat("m2", 2, &Assignment::new()),
        now + Duration::from_secs(29),
    );
    assert_eq!(
        g.expire(now + Duration::from_secs(31)),
        vec![("m1".to_string(), false)]
    );
    let a2 = ok(
        &mut g,
        &beat("m2", 2, &Assignment::new()),
        now + Duration::from_secs(32),
    );
    assert_eq!(parts(a2.assignment.as_ref().unwrap()).len(), 6);
    // m2 then falls silent for the session timeout.
    assert!(g.expire(now + Duration::from_secs(60)).is_empty());
    assert_eq!(
        g.expire(now + Duration::from_secs(78)),
        vec![("m2".to_string(), false)]
    );
    assert_eq!(g.state_name(), "Empty");
}

#[test]
fn a_static_member_comes_back_to_its_partitions() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let stat = |m: &str| ConsumerGroupHeartbeatRequest {
        instance_id: Some("i-1".into()),
        ..join(m)
    };
    let a = ok(&mut g, &stat("m1"), now);
    ok(&mut g, &join("m2"), now);
    ok(&mut g, &beat("m1", 1, a.assignment.as_ref().unwrap()), now);
    let kept = g.members["m1"].assigned.clone();
    let a1 = ok(&mut g, &beat("m1", 1, &kept), now);
    let epoch = a1.member_epoch;
    // The instance is held: a second process with it is refused.
    let err = g
        .heartbeat(&stat("m9"), &caller(), &topics(6), now, &limits())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UNRELEASED_INSTANCE_ID);
    // It leaves as a static member, and its restart (a new member id) takes its place.
    let leave = ConsumerGroupHeartbeatRequest {
        member_epoch: -2,
        instance_id: Some("i-1".into()),
        ..beat("m1", 0, &Assignment::new())
    };
    assert_eq!(ok(&mut g, &leave, now).member_epoch, -2);
    let group_epoch = g.group_epoch;
    let back = ok(&mut g, &stat("m9"), now);
    assert_eq!(back.member_epoch, epoch);
    assert_eq!(back.assignment, Some(kept));
    assert_eq!(g.group_epoch, group_epoch, "a static restart moves nothing");
    assert!(!g.members.contains_key("m1"));
}

#[test]
fn a_regex_subscription_picks_up_a_new_topic() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let req = ConsumerGroupHeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("orders-.*".into()),
        ..join("m1")
    };
    let mut image = TopicsImage::from([
        ("orders-eu".to_string(), (T, 2)),
        ("other".to_string(), (U, 2)),
    ]);
    let a = g
        .heartbeat(&req, &caller(), &image, now, &limits())
        .unwrap();
    assert_eq!(
        a.assignment.as_ref().unwrap().keys().collect::<Vec<_>>(),
        vec![&T]
    );
    image.insert("orders-us".into(), (U, 3));
    let b = g
        .heartbeat(
            &beat("m1", a.member_epoch, a.assignment.as_ref().unwrap()),
            &caller(),
            &image,
            now,
            &limits(),
        )
        .unwrap();
    assert_eq!(b.member_epoch, a.member_epoch + 1);
    assert_eq!(parts(b.assignment.as_ref().unwrap()).len(), 5);
}

#[test]
fn bad_requests_get_kafkas_errors() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let refused = |g: &mut ConsumerGroup, req: ConsumerGroupHeartbeatRequest| {
        g.heartbeat(&req, &caller(), &topics(6), now, &limits())
            .unwrap_err()
            .code
    };
    let bad_regex = ConsumerGroupHeartbeatRequest {
        subscribed_topic_regex: Some("(".into()),
        ..join("m1")
    };
    assert_eq!(
        refused(&mut g, bad_regex),
        ErrorCode::INVALID_REGULAR_EXPRESSION
    );
    let bad_assignor = ConsumerGroupHeartbeatRequest {
        server_assignor: Some("sticky".into()),
        ..join("m1")
    };
    assert_eq!(
        refused(&mut g, bad_assignor),
        ErrorCode::UNSUPPORTED_ASSIGNOR
    );
    let no_subscription = ConsumerGroupHeartbeatRequest {
        subscribed_topic_names: None,
        ..join("m1")
    };
    assert_eq!(refused(&mut g, no_subscription), ErrorCode::INVALID_REQUEST);
    let owns_on_join = ConsumerGroupHeartbeatRequest {
        topic_partitions: Some(vec![(T, vec![0])]),
        ..join("m1")
    };
    assert_eq!(refused(&mut g, owns_on_join), ErrorCode::INVALID_REQUEST);
    assert_eq!(refused(&mut g, join("")), ErrorCode::INVALID_REQUEST);
    for i in 0..4 {
        ok(&mut g, &join(&format!("m{i}")), now);
    }
    assert_eq!(
        refused(&mut g, join("m4")),
        ErrorCode::GROUP_MAX_SIZE_REACHED
    );
    assert!(g.members.len() == 4);
}

#[test]
fn the_group_takes_the_assignor_its_members_ask_for() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let ranged = |m: &str| ConsumerGroupHeartbeatRequest {
        server_assignor: Some("range".into()),
        ..join(m)
    };
    ok(&mut g, &ranged("m0"), now);
    ok(&mut g, &ranged("m1"), now);
    assert_eq!(g.current_assignor(&limits()), Assignor::Range);
    // Range over one 6-partition topic gives m0 the first three.
    assert_eq!(parts(&g.target["m0"]), vec![0, 1, 2]);
}

#[test]
fn offset_commits_check_the_member_epoch() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    assert_eq!(g.validate_offset_epoch("", -1), Ok(()));
    ok(&mut g, &join("m1"), now);
    assert_eq!(g.validate_offset_epoch("m1", 1), Ok(()));
    assert_eq!(
        g.validate_offset_epoch("m1", 0),
        Err(ErrorCode::STALE_MEMBER_EPOCH)
    );
    assert_eq!(
        g.validate_offset_epoch("m1", 2),
        Err(ErrorCode::STALE_MEMBER_EPOCH)
    );
    assert_eq!(
        g.validate_offset_epoch("m2", 1),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        g.validate_offset_epoch("", -1),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    // Commits: a member of this protocol commits with v9 or above; a transactional commit
    // (no version) is checked by the epoch alone.
    assert_eq!(g.validate_offset_commit("m1", 1, Some(9)), Ok(()));
    assert_eq!(
        g.validate_offset_commit("m1", 1, Some(8)),
        Err(ErrorCode::UNSUPPORTED_VERSION)
    );
    assert_eq!(g.validate_offset_commit("m1", 1, None), Ok(()));
    assert_eq!(
        g.validate_offset_commit("m1", 0, Some(9)),
        Err(ErrorCode::STALE_MEMBER_EPOCH)
    );
    assert_eq!(
        g.validate_offset_commit("m2", 1, Some(8)),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        g.validate_offset_commit("", -1, Some(2)),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    let empty = ConsumerGroup::new("e");
    assert_eq!(empty.validate_offset_commit("x", -1, Some(2)), Ok(()));
}

#[test]
fn a_v0_join_without_a_member_id_is_given_one() {
    let mut g = ConsumerGroup::new("g");
    let c = Caller {
        version: 0,
        ..caller()
    };
    let a = g
        .heartbeat(&join(""), &c, &topics(1), Instant::now(), &limits())
        .unwrap();
    assert!(!a.member_id.is_empty());
    assert!(g.members.contains_key(&a.member_id));
}

#[test]
fn a_group_rebuilt_from_its_records_is_the_same_group() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let stat = ConsumerGroupHeartbeatRequest {
        instance_id: Some("i".into()),
        subscribed_topic_regex: Some("t|u".into()),
        server_assignor: Some("range".into()),
        ..join("m1")
    };
    let a = ok(&mut g, &stat, now);
    ok(&mut g, &join("m2"), now);
    // m1 is mid-revocation: it must give up half of its six.
    ok(&mut g, &beat("m1", 1, a.assignment.as_ref().unwrap()), now);
    assert_eq!(g.members["m1"].state, MemberState::UnrevokedPartitions);
    let mut back = ConsumerGroup::new("g");
    for (key, value) in g.records() {
        back.restore(&key, Some(value), now, &limits()).unwrap();
    }
    assert_eq!(
        (back.group_epoch, back.assignment_epoch),
        (g.group_epoch, g.assignment_epoch)
    );
    assert_eq!(back.target, g.target);
    for (id, m) in &g.members {
        let r = &back.members[id];
        assert_eq!(
            (r.member_epoch, r.previous_member_epoch, r.state),
            (m.member_epoch, m.previous_member_epoch, m.state)
        );
        assert_eq!((&r.assigned, &r.revoking), (&m.assigned, &m.revoking));
        assert_eq!(
            (&r.instance_id, &r.subscribed_topic_regex, r.server_assignor),
            (&m.instance_id, &m.subscribed_topic_regex, m.server_assignor)
        );
        assert_eq!(r.rebalance_timeout, m.rebalance_timeout);
    }
    // Mid-load, a revoking member is not timed out (the coordinator's tick runs meanwhile);
    // once loaded it has its whole rebalance timeout again.
    assert!(back.expire(now + Duration::from_secs(1)).is_empty());
    back.rearm(now, &limits());
    assert!(back.members["m1"].revocation_deadline.is_some());
    // The rebuilt group goes on where the old one was: m1 revokes and advances.
    let kept = back.members["m1"].assigned.clone();
    let a1 = back
        .heartbeat(&beat("m1", 1, &kept), &caller(), &topics(6), now, &limits())
        .unwrap();
    assert_eq!(a1.member_epoch, 2);
    // A member's tombstone removes it.
    back.restore(
        &ConsumerKey::Member {
            group: "g".into(),
            member: "m2".into(),
        },
        None,
        now,
        &limits(),
    )
    .unwrap();
    assert!(!back.members.contains_key("m2"));
}

#[test]
fn a_groups_own_configs_are_held_to_the_brokers_bounds() {
    let l = limits();
    let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(l
        .check_group_configs(&set(&[("consumer.session.timeout.ms", "50000")]))
        .is_ok());
    assert!(l
        .check_group_configs(&set(&[("consumer.session.timeout.ms", "1000")]))
        .is_err());
    assert!(l
        .check_group_configs(&set(&[("consumer.heartbeat.interval.ms", "x")]))
        .is_err());
    assert!(l
        .check_group_configs(&set(&[("share.record.lock.duration.ms", "1")]))
        .is_err());
    let g = l.for_group(Some(&set(&[("consumer.heartbeat.interval.ms", "7000")])));
    assert_eq!(g.heartbeat_interval, Duration::from_secs(7));
    assert_eq!(g.session_timeout, l.session_timeout);
    // The group's heartbeat is what its members are told.
    let mut group = ConsumerGroup::new("g");
    let a = group
        .heartbeat(&join("m1"), &caller(), &topics(1), Instant::now(), &g)
        .unwrap();
    assert_eq!(a.heartbeat_interval_ms, 7000);
}

#[test]
fn a_static_leave_from_a_replaced_process_is_fenced() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let stat = |m: &str| ConsumerGroupHeartbeatRequest {
        instance_id: Some("i".into()),
        ..join(m)
    };
    ok(&mut g, &stat("m1"), now);
    let leave = |m: &str| ConsumerGroupHeartbeatRequest {
        member_epoch: -2,
        instance_id: Some("i".into()),
        ..beat(m, 0, &Assignment::new())
    };
    ok(&mut g, &leave("m1"), now);
    ok(&mut g, &stat("m2"), now);
    // The old process, late, leaves again: the instance is m2's now.
    let err = g
        .heartbeat(&leave("m1"), &caller(), &topics(6), now, &limits())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FENCED_INSTANCE_ID);
    // A leave for good (-1) naming the instance is fenced the same way, and removes nobody.
    let gone = ConsumerGroupHeartbeatRequest {
        member_epoch: -1,
        ..leave("m1")
    };
    let err = g
        .heartbeat(&gone, &caller(), &topics(6), now, &limits())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FENCED_INSTANCE_ID);
    assert!(g.members["m2"].member_epoch > 0);
    // Its own -1 removes m2.
    ok(&mut g, &gone_as("m2"), now);
    assert!(g.members.is_empty());
}

fn gone_as(m: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        member_epoch: -1,
        instance_id: Some("i".into()),
        ..beat(m, 0, &Assignment::new())
    }
}

#[test]
fn a_rebuilt_group_whose_topic_grew_assigns_the_new_partitions() {
    let now = Instant::now();
    let mut g = ConsumerGroup::new("g");
    let a = ok(&mut g, &join("m1"), now);
    let mut back = ConsumerGroup::new("g");
    for (key, value) in g.records() {
        back.restore(&key, Some(value), now, &limits()).unwrap();
    }
    back.rearm(now, &limits());
    // The topic grew from 6 to 8 partitions while the coordinator moved.
    let b = back
        .heartbeat(
            &beat("m1", a.member_epoch, a.assignment.as_ref().unwrap()),
            &caller(),
            &topics(8),
            now,
            &limits(),
        )
        .unwrap();
    assert_eq!(b.member_epoch, a.member_epoch + 1);
    assert_eq!(parts(b.assignment.as_ref().unwrap()).len(), 8);
    // Unchanged topics: the rebuilt group goes on at its epoch.
    let mut same = ConsumerGroup::new("g");
    for (key, value) in g.records() {
        same.restore(&key, Some(value), now, &limits()).unwrap();
    }
    let c = same
        .heartbeat(
            &beat("m1", a.member_epoch, a.assignment.as_ref().unwrap()),
            &caller(),
            &topics(6),
            now,
            &limits(),
        )
        .unwrap();
    assert_eq!(c.member_epoch, a.member_epoch);
}
