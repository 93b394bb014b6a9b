//! Where new partitions go: Kafka's rack-unaware replica assignment
//! (`StripedReplicaPlacer` without racks), a pure function of the live brokers and two random
//! starting points the caller draws. The first replica of partition `p` is the broker at
//! `start + p`; the others follow at a shift that grows with every full round of brokers, so
//! leaders and followers both spread evenly. Also the active controller's choice of partitions
//! to elect leaders for: preferred replicas (leader rebalance) and, where allowed, replicas out
//! of sync (unclean election) — pure functions of the image; the election itself is `apply`'s.

use tributary_protocol::ErrorCode;

use crate::catalog::{Catalog, PartitionRegistration};
use crate::types::TopicPartition;

/// Replica lists for `count` new partitions numbered from `first_partition` over the live
/// brokers of `image`: rack-aware when any of them has a rack ([`assign_rack_aware`]), else
/// [`assign`]. `start` and `shift` are the caller's random draws.
pub fn assign_live(
    image: &Catalog,
    first_partition: i32,
    count: i32,
    replication_factor: usize,
    start: usize,
    shift: usize,
) -> Result<Vec<Vec<i32>>, (ErrorCode, String)> {
    let brokers: Vec<(i32, Option<&str>)> = image
        .live_brokers()
        .map(|b| (b.id, b.rack.as_deref()))
        .collect();
    if brokers.iter().all(|(_, rack)| rack.is_none()) {
        let ids: Vec<i32> = brokers.iter().map(|(id, _)| *id).collect();
        return assign(
            &ids,
            first_partition,
            count,
            replication_factor,
            start,
            shift,
        );
    }
    assign_rack_aware(
        &brokers,
        first_partition,
        count,
        replication_factor,
        start,
        shift,
    )
}

/// Kafka's rack-aware assignment: the brokers in an order that alternates racks (the first
/// broker of each rack, then the second of each, …); the first replica of partition `p` at
/// `start + p` in it, and each further one the next broker, from a shift that grows every full
/// round, that is not chosen yet and whose rack holds none of the partition's replicas while
/// some rack holds none. A broker without a rack is in the rack "" (Kafka refuses such a mix;
/// here it only weakens the spread).
pub fn assign_rack_aware(
    brokers: &[(i32, Option<&str>)],
    first_partition: i32,
    count: i32,
    replication_factor: usize,
    start: usize,
    shift: usize,
) -> Result<Vec<Vec<i32>>, (ErrorCode, String)> {
    let ordered = rack_alternated(brokers);
    let ids: Vec<i32> = ordered.iter().map(|(id, _)| *id).collect();
    // The same checks and messages as the rack-unaware placement.
    assign(&ids, 0, 0, replication_factor, 0, 0)?;
    let n = ordered.len();
    let racks: std::collections::BTreeSet<&str> = ordered.iter().map(|(_, r)| *r).collect();
    let mut shift = shift % n;
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for i in 0..count.max(0) as usize {
        let p = first_partition as usize + i;
        if p > 0 && p.is_multiple_of(n) {
            shift += 1;
        }
        let first = (p + start) % n;
        let mut chosen = vec![first];
        while chosen.len() < replication_factor {
            let used: std::collections::BTreeSet<&str> =
                chosen.iter().map(|c| ordered[*c].1).collect();
            let from = first + 1 + shift % n.saturating_sub(1).max(1);
            let next = (0..n)
                .map(|j| (from + j) % n)
                .filter(|k| !chosen.contains(k))
                .find(|k| used.len() >= racks.len() || !used.contains(ordered[*k].1))
                .expect("fewer replicas than brokers");
            chosen.push(next);
        }
        out.push(chosen.into_iter().map(|k| ordered[k].0).collect());
    }
    Ok(out)
}

/// The brokers sorted by rack then id, taken one per rack in turn.
fn rack_alternated<'a>(brokers: &[(i32, Option<&'a str>)]) -> Vec<(i32, &'a str)> {
    let mut by_rack: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for (id, rack) in brokers {
        by_rack.entry(rack.unwrap_or("")).or_default().push(*id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let mut out = Vec::with_capacity(brokers.len());
    for round in 0.. {
        let before = out.len();
        for (rack, ids) in &by_rack {
            if let Some(id) = ids.get(round) {
                out.push((*id, *rack));
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// Replica lists for `count` new partitions numbered from `first_partition`, over `brokers`
/// (live broker ids, any order). `start` and `shift` are the caller's random draws.
pub fn assign(
    brokers: &[i32],
    first_partition: i32,
    count: i32,
    replication_factor: usize,
    start: usize,
    shift: usize,
) -> Result<Vec<Vec<i32>>, (ErrorCode, String)> {
    let mut brokers = brokers.to_vec();
    brokers.sort_unstable();
    let n = brokers.len();
    if replication_factor == 0 {
        return Err((
            ErrorCode::INVALID_REPLICATION_FACTOR,
            "replication factor must be larger than 0".into(),
        ));
    }
    if replication_factor > n {
        return Err((
            ErrorCode::INVALID_REPLICATION_FACTOR,
            format!(
                "unable to replicate the partition {replication_factor} time(s): the number of live brokers is {n}"
            ),
        ));
    }
    let start = start % n;
    let mut shift = shift % n;
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for i in 0..count.max(0) as usize {
        let p = first_partition as usize + i;
        if p > 0 && p.is_multiple_of(n) {
            shift += 1;
        }
        let first = (p + start) % n;
        let mut replicas = vec![brokers[first]];
        for j in 0..replication_factor - 1 {
            let k = (first + 1 + (shift + j) % (n - 1)) % n;
            replicas.push(brokers[k]);
        }
        out.push(replicas);
    }
    Ok(out)
}

/// Kafka's checks on manual replica assignments (CreateTopics, CreatePartitions), with its
/// messages: each list non-empty, every broker registered and named once, every list as long as
/// `replication_factor` (the first list's length when `None`), and at least one live broker in
/// each. Partitions are numbered from `first_partition` in the messages.
pub fn check_manual(
    image: &Catalog,
    assignments: &[Vec<i32>],
    replication_factor: Option<usize>,
    first_partition: i32,
) -> Result<(), (ErrorCode, String)> {
    let bad = |why: String| Err((ErrorCode::INVALID_REPLICA_ASSIGNMENT, why));
    let rf = replication_factor.or_else(|| assignments.first().map(Vec::len));
    for (p, replicas) in (first_partition..).zip(assignments) {
        if replicas.is_empty() {
            return bad("The manual partition assignment includes an empty replica list.".into());
        }
        for (i, b) in replicas.iter().enumerate() {
            if !image.brokers.contains_key(b) {
                return bad(format!(
                    "The manual partition assignment includes broker {b}, but no such broker is registered."
                ));
            }
            if replicas[..i].contains(b) {
                return bad(format!(
                    "The manual partition assignment includes the broker {b} more than once."
                ));
            }
        }
        if let Some(rf) = rf.filter(|rf| *rf != replicas.len()) {
            return bad(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            ));
        }
        if !replicas
            .iter()
            .any(|b| image.brokers.get(b).is_some_and(|r| !r.fenced))
        {
            return bad(format!(
                "All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."
            ));
        }
    }
    Ok(())
}

/// A manually placed partition: every replica in the order given, the live ones in sync, the
/// first live one leading (as Kafka places them).
pub fn manual_registration(image: &Catalog, replicas: Vec<i32>) -> PartitionRegistration {
    let mut p = PartitionRegistration::new(replicas);
    p.isr
        .retain(|b| image.brokers.get(b).is_some_and(|r| !r.fenced));
    p.leader = p.isr.first().copied().unwrap_or(crate::command::NO_LEADER);
    p
}

/// Kafka's automatic leader rebalance (`auto.leader.rebalance.enable`): for every live broker
/// whose share of partitions it should lead (it is their first replica) but does not exceeds
/// `imbalance_percentage`, those of its partitions where it is in sync and could lead again.
pub fn preferred_elections(
    image: &crate::catalog::Catalog,
    imbalance_percentage: u32,
) -> Vec<TopicPartition> {
    use std::collections::BTreeMap;
    let live: Vec<i32> = image.live_brokers().map(|b| b.id).collect();
    // Per preferred broker: its partitions, those it does not lead, and those it could.
    type Share = (u64, u64, Vec<TopicPartition>);
    let mut preferred: BTreeMap<i32, Share> = BTreeMap::new();
    for t in image.topics.values() {
        for (p, r) in t.assignment.iter().enumerate() {
            let Some(&first) = r.replicas.first() else {
                continue;
            };
            if r.replicas.len() < 2 {
                continue;
            }
            let entry = preferred.entry(first).or_default();
            entry.0 += 1;
            if r.leader != first {
                entry.1 += 1;
                if r.isr.contains(&first) {
                    entry.2.push(TopicPartition::new(t.name.clone(), p as i32));
                }
            }
        }
    }
    preferred
        .into_iter()
        .filter(|(b, (total, not_led, _))| {
            live.contains(b) && not_led * 100 > total * u64::from(imbalance_percentage)
        })
        .flat_map(|(_, (_, _, movable))| movable)
        .collect()
}

/// Kafka's unclean leader election, as the active controller runs it: the partitions with no
/// leader, no live ISR member and a live replica outside the ISR, whose topic allows it
/// (`unclean.leader.election.enable`, else `broker_default`). Electing one of them
/// (`ElectLeaders` with `unclean`) loses what only the old ISR held; a partition whose topic
/// does not allow it stays offline until an ISR member returns.
pub fn unclean_elections(
    image: &crate::catalog::Catalog,
    broker_default: bool,
) -> Vec<TopicPartition> {
    let live = |b: &i32| image.brokers.get(b).is_some_and(|b| !b.fenced);
    let mut out = Vec::new();
    for t in image.topics.values() {
        let mut allowed = None;
        for (p, r) in t.assignment.iter().enumerate() {
            if r.leader != crate::command::NO_LEADER
                || r.isr.iter().any(live)
                || !r.replicas.iter().any(live)
            {
                continue;
            }
            if *allowed.get_or_insert_with(|| {
                t.config_or("unclean.leader.election.enable", broker_default)
            }) {
                out.push(TopicPartition::new(t.name.clone(), p as i32));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{apply, MetadataCommand};

    /// Brokers 1–3 registered, broker 3 fenced.
    fn brokers() -> Catalog {
        let mut image = Catalog::empty();
        for id in 1..=3 {
            let cmd = MetadataCommand::RegisterBroker {
                id,
                incarnation: "x".into(),
                host: "127.0.0.1".into(),
                port: 9000,
                listeners: Vec::new(),
                rack: None,
            };
            apply(&mut image, id as u64, &cmd.encode());
        }
        let fence = MetadataCommand::FenceBroker {
            id: 3,
            controlled: false,
            epoch: None,
            reason: crate::command::FenceReason::Silent,
        };
        apply(&mut image, 9, &fence.encode());
        image
    }

    #[test]
    fn manual_assignments_are_checked_as_kafka_checks_them() {
        let image = brokers();
        let ok = |a: &[Vec<i32>], rf| check_manual(&image, a, rf, 0);
        assert!(ok(&[vec![1, 2], vec![2, 3]], None).is_ok());
        assert!(
            ok(&[vec![3, 1]], Some(2)).is_ok(),
            "a fenced replica may be named"
        );
        let why = |a: &[Vec<i32>], rf| {
            let (code, msg) = check_manual(&image, a, rf, 4).unwrap_err();
            assert_eq!(code, ErrorCode::INVALID_REPLICA_ASSIGNMENT);
            msg
        };
        assert!(why(&[vec![]], None).contains("empty replica list"));
        assert!(why(&[vec![1, 9]], None).contains("broker 9, but no such broker is registered"));
        assert!(why(&[vec![1, 1]], None).contains("broker 1 more than once"));
        assert!(why(&[vec![1, 2], vec![1]], None).contains("which have 2 replica(s)"));
        assert!(why(&[vec![1]], Some(3)).contains("with 1 replica(s)"));
        assert!(why(&[vec![3]], None).contains("partition 4 are fenced"));
    }

    #[test]
    fn a_manual_partition_is_led_by_its_first_live_replica() {
        let image = brokers();
        let p = manual_registration(&image, vec![3, 2, 1]);
        assert_eq!(p.replicas, vec![3, 2, 1]);
        assert_eq!(p.isr, vec![2, 1]);
        assert_eq!(p.leader, 2);
    }

    #[test]
    fn leaders_spread_evenly_and_replicas_are_distinct() {
        for n in 1..=5usize {
            let brokers: Vec<i32> = (1..=n as i32).collect();
            for rf in 1..=n {
                for start in 0..n {
                    let a = assign(&brokers, 0, 10 * n as i32, rf, start, start + 1).unwrap();
                    let mut leaders = vec![0; n];
                    for r in &a {
                        assert_eq!(r.len(), rf);
                        let mut d = r.clone();
                        d.sort_unstable();
                        d.dedup();
                        assert_eq!(d.len(), rf, "{r:?} repeats a broker");
                        leaders[(r[0] - 1) as usize] += 1;
                    }
                    assert!(leaders.iter().all(|&c| c == 10), "{leaders:?}");
                }
            }
        }
    }

    #[test]
    fn too_few_brokers_is_invalid_replication_factor() {
        let e = assign(&[1, 2], 0, 3, 3, 0, 0).unwrap_err();
        assert_eq!(e.0, ErrorCode::INVALID_REPLICATION_FACTOR);
        assert!(e.1.contains("live brokers is 2"), "{}", e.1);
        assert_eq!(
            assign(&[], 0, 1, 1, 0, 0).unwrap_err().0,
            ErrorCode::INVALID_REPLICATION_FACTOR
        );
    }

    #[test]
    fn rebalancing_moves_leadership_back_only_past_the_imbalance_threshold() {
        use crate::catalog::{Catalog, PartitionRegistration, TopicMeta};
        let mut image = Catalog::empty();
        for id in [1, 2] {
            image.brokers.insert(
                id,
                crate::catalog::BrokerRegistration {
                    id,
                    incarnation: String::new(),
                    epoch: 0,
                    host: String::new(),
                    port: 0,
                    fenced: false,
                    in_controlled_shutdown: false,
                    fenced_as_gone: false,
                    listeners: Vec::new(),
                    rack: None,
                },
            );
        }
        // Ten partitions prefer broker 1; `moved` of them are led by 2.
        let topic = |moved: usize| TopicMeta {
            name: "t".into(),
            id: String::new(),
            partitions: 10,
            configs: Default::default(),
            assignment: (0..10)
                .map(|i| {
                    let mut r = PartitionRegistration::new(vec![1, 2]);
                    if i < moved {
                        r.leader = 2;
                    }
                    r
                })
                .collect(),
        };
        image.topics.insert("t".into(), topic(1));
        assert!(
            preferred_elections(&image, 10).is_empty(),
            "10 % is not past 10 %"
        );
        image.topics.insert("t".into(), topic(2));
        assert_eq!(
            preferred_elections(&image, 10),
            vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)]
        );
        // Not in sync: not movable.
        image.topics.get_mut("t").unwrap().assignment[0].isr = vec![2];
        assert_eq!(
            preferred_elections(&image, 10),
            vec![TopicPartition::new("t", 1)]
        );
        image.brokers.get_mut(&1).unwrap().fenced = true;
        assert!(
            preferred_elections(&image, 10).is_empty(),
            "a fenced broker leads nothing"
        );
    }

    #[test]
    fn added_partitions_continue_the_round() {
        let all = assign(&[1, 2, 3], 0, 6, 1, 1, 0).unwrap();
        let tail = assign(&[3, 1, 2], 4, 2, 1, 1, 0).unwrap();
        assert_eq!(&all[4..], &tail[..]);
    }

    #[test]
    fn replicas_spread_over_racks() {
        let brokers = [
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
            (5, Some("c")),
            (6, Some("c")),
        ];
        let rack = |id: i32| brokers.iter().find(|b| b.0 == id).unwrap().1.unwrap();
        for start in 0..6 {
            let placed = assign_rack_aware(&brokers, 0, 24, 3, start, start + 2).unwrap();
            let mut leaders = std::collections::BTreeMap::new();
            for replicas in &placed {
                let racks: std::collections::BTreeSet<&str> =
                    replicas.iter().map(|b| rack(*b)).collect();
                assert_eq!(racks.len(), 3, "{replicas:?} not over three racks");
                let ids: std::collections::BTreeSet<&i32> = replicas.iter().collect();
                assert_eq!(ids.len(), 3);
                *leaders.entry(replicas[0]).or_insert(0) += 1;
            }
            assert!(leaders.values().all(|n| *n == 4), "leaders {leaders:?}");
        }
        // Two racks, three replicas: both racks used, every broker once.
        let two = [(1, Some("a")), (2, Some("a")), (3, Some("b"))];
        for replicas in assign_rack_aware(&two, 0, 6, 3, 1, 0).unwrap() {
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![1, 2, 3]);
        }
        assert!(assign_rack_aware(&two, 0, 1, 4, 0, 0).is_err());
    }
}
