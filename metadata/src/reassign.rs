//! Partition reassignment (Kafka's KIP-455) as the metadata image records it: pure functions
//! over a `PartitionRegistration`, called from `command::apply` only, so every node decides
//! the same. Nothing here reads a clock, a config or the disk.
//!
//! A reassignment to `target` makes the replicas `target` followed by the current replicas
//! not in it (Kafka's `PartitionReassignmentReplicas`): the new ones (`adding_replicas`) open
//! the partition and fetch, the leaving ones (`removing_replicas`) keep serving until the end.
//! It completes inside `apply` as soon as every target replica is in the ISR (Kafka's
//! `maybeCompleteReassignment`): the replicas become the target, the ISR loses the leaving
//! ones, and a leader not in the target hands over to the first target replica in the ISR.
//! Worked example: replicas [1,2], target [3,4] → replicas [3,4,1,2], adding [3,4], removing
//! [1,2]; once the ISR is [1,2,3,4] → replicas [3,4], ISR [3,4], leader 3 at the next epoch.

use serde::{Deserialize, Serialize};
use tributary_protocol::ErrorCode;

use crate::catalog::{Catalog, PartitionRegistration};
use crate::command::NO_LEADER;

/// One partition of an AlterPartitionReassignments request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassignmentTarget {
    pub topic: String,
    pub partition: i32,
    /// The replicas to move to; `None` cancels the reassignment in progress.
    pub replicas: Option<Vec<i32>>,
    /// KIP-860 (AlterPartitionReassignments v1): `false` refuses a target whose size differs
    /// from the partition's replication factor.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub allow_replication_factor_change: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Starts, replaces or cancels one partition's reassignment, as the command's outcome item.
pub fn alter(image: &mut Catalog, t: &ReassignmentTarget) -> Result<(), (ErrorCode, String)> {
    let live: Vec<i32> = image.live_brokers().map(|b| b.id).collect();
    let name = format!("{}-{}", t.topic, t.partition);
    // Kafka's order: the partition first, then the target.
    let unknown = || {
        Err((
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("{name} does not exist"),
        ))
    };
    if image.partition(&t.topic, t.partition).is_none() {
        return unknown();
    }
    if let Some(target) = &t.replicas {
        check_target(image, target)?;
    }
    let Some(p) = image.topics.get_mut(&t.topic).and_then(|tm| {
        usize::try_from(t.partition)
            .ok()
            .and_then(|i| tm.assignment.get_mut(i))
    }) else {
        return unknown();
    };
    match &t.replicas {
        None => cancel(p, &live, &name),
        Some(target) => {
            // The replication factor is the original replicas' count (a move in progress
            // holds both sets), as Kafka counts it.
            let rf = p.replicas.len() - p.adding_replicas.len();
            if !t.allow_replication_factor_change && target.len() != rf {
                return Err((
                    ErrorCode::INVALID_REPLICATION_FACTOR,
                    format!(
                        "the replication factor of {name} would change from {rf} to {}, but allowReplicationFactorChange is false",
                        target.len()
                    ),
                ));
            }
            start(p, target, &live);
            Ok(())
        }
    }
}

/// Kafka's checks on a target assignment: not empty, no broker twice, every broker registered.
fn check_target(image: &Catalog, target: &[i32]) -> Result<(), (ErrorCode, String)> {
    let bad = |why: String| Err((ErrorCode::INVALID_REPLICA_ASSIGNMENT, why));
    if target.is_empty() {
        return bad("the target replica list is empty".into());
    }
    for (i, r) in target.iter().enumerate() {
        if target[..i].contains(r) {
            return bad(format!("broker {r} appears twice in {target:?}"));
        }
        if !image.brokers.contains_key(r) {
            return bad(format!("broker {r} is not registered"));
        }
    }
    Ok(())
}

/// A reassignment to `target`, replacing any in progress: it is computed against the current
/// replicas (which, mid-way, include the previous target), as Kafka does.
fn start(p: &mut PartitionRegistration, target: &[i32], live: &[i32]) {
    let current = p.replicas.clone();
    let removing: Vec<i32> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    if replicas == current && adding.is_empty() && removing.is_empty() && !p.is_reassigning() {
        // Already placed there: nothing changes (the order is the target's already).
        return;
    }
    p.replicas = replicas;
    p.adding_replicas = adding;
    p.removing_replicas = removing;
    p.partition_epoch.bump();
    complete_if_caught_up(p, live);
}

/// Cancels the reassignment in progress (Kafka's `PartitionReassignmentRevert`): the original
/// replicas back, the ISR cut to them. Refused when none of the ISR is an original replica —
/// going back would need an unclean election.
fn cancel(
    p: &mut PartitionRegistration,
    live: &[i32],
    name: &str,
) -> Result<(), (ErrorCode, String)> {
    if !p.is_reassigning() {
        return Err((
            ErrorCode::NO_REASSIGNMENT_IN_PROGRESS,
            format!("{name} has no reassignment in progress"),
        ));
    }
    let original: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding_replicas.contains(r))
        .collect();
    let isr: Vec<i32> = p
        .isr
        .iter()
        .copied()
        .filter(|r| original.contains(r))
        .collect();
    if isr.is_empty() {
        return Err((
            ErrorCode::INVALID_REPLICA_ASSIGNMENT,
            format!("cancelling the reassignment of {name} would need an unclean election: no original replica is in sync"),
        ));
    }
    p.replicas = original;
    p.isr = isr;
    p.adding_replicas.clear();
    p.removing_replicas.clear();
    p.partition_epoch.bump();
    lead_from_isr(p, live);
    Ok(())
}

/// Completes the reassignment in progress if every target replica is in the ISR; whether it
/// did. The caller bumps the partition epoch (it changed the partition anyway).
pub fn complete_if_caught_up(p: &mut PartitionRegistration, live: &[i32]) -> bool {
    if !p.is_reassigning() {
        return false;
    }
    let isr: Vec<i32> = p
        .isr
        .iter()
        .copied()
        .filter(|r| !p.removing_replicas.contains(r))
        .collect();
    let target = p.target_replicas();
    if isr.is_empty() || !target.iter().all(|r| isr.contains(r)) {
        return false;
    }
    p.replicas = target;
    p.isr = isr;
    p.adding_replicas.clear();
    p.removing_replicas.clear();
    lead_from_isr(p, live);
    true
}

/// A leader outside the ISR hands over to the first replica (in replica order) in the ISR and
/// live, at the next leader epoch — or to none when no such replica is live.
fn lead_from_isr(p: &mut PartitionRegistration, live: &[i32]) {
    if p.isr.contains(&p.leader) {
        return;
    }
    p.leader = p
        .replicas
        .iter()
        .copied()
        .find(|r| p.isr.contains(r) && live.contains(r))
        .unwrap_or(NO_LEADER);
    p.leader_epoch.bump();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::catalog::TopicMeta;
    use crate::command::{apply, MetadataCommand, Outcome};

    fn run(image: &mut Catalog, index: u64, cmd: MetadataCommand) -> Outcome {
        apply(image, index, &cmd.encode())
    }

    /// Brokers 1–4 registered; topic "t" with partition 0 on `replicas`.
    fn image(replicas: &[i32]) -> Catalog {
        let mut image = Catalog::empty();
        for id in 1..=4 {
            run(
                &mut image,
                id as u64,
                MetadataCommand::RegisterBroker {
                    id,
                    incarnation: "x".into(),
                    host: "127.0.0.1".into(),
                    port: 9000 + id as u16,
                    listeners: Vec::new(),
                    rack: None,
                },
            );
        }
        let t = TopicMeta {
            name: "t".into(),
            id: "id-t".into(),
            partitions: 1,
            configs: BTreeMap::new(),
            assignment: vec![PartitionRegistration::new(replicas.to_vec())],
        };
        run(
            &mut image,
            10,
            MetadataCommand::CreateTopics { topics: vec![t] },
        );
        image
    }

    fn reassign(image: &mut Catalog, partition: i32, to: Option<&[i32]>) -> ErrorCode {
        reassign_rf(image, partition, to, true)
    }

    fn reassign_rf(
        image: &mut Catalog,
        partition: i32,
        to: Option<&[i32]>,
        allow_replication_factor_change: bool,
    ) -> ErrorCode {
        let cmd = MetadataCommand::AlterReassignments {
            partitions: vec![ReassignmentTarget {
                topic: "t".into(),
                partition,
                replicas: to.map(<[i32]>::to_vec),
                allow_replication_factor_change,
            }],
        };
        match run(image, 20, cmd) {
            Outcome::Items(items) => items[0].as_ref().err().map_or(ErrorCode::NONE, |e| e.0),
            other => panic!("{other:?}"),
        }
    }

    fn change_isr(image: &mut Catalog, isr: &[i32]) -> Outcome {
        let p = image.topics["t"].assignment[0].clone();
        run(
            image,
            30,
            MetadataCommand::ChangeIsr {
                topic: "t".into(),
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr: isr.to_vec(),
            },
        )
    }

    fn part(image: &Catalog) -> PartitionRegistration {
        image.topics["t"].assignment[0].clone()
    }

    #[test]
    fn bad_targets_and_unknown_partitions_are_refused_and_change_nothing() {
        let mut image = image(&[1, 2]);
        let before = part(&image);
        for bad in [&[][..], &[3, 3], &[3, 9]] {
            assert_eq!(
                reassign(&mut image, 0, Some(bad)),
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "{bad:?}"
            );
        }
        assert_eq!(
            reassign(&mut image, 5, Some(&[3, 9])),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            "the partition is checked first"
        );
        assert_eq!(
            reassign(&mut image, 0, None),
            ErrorCode::NO_REASSIGNMENT_IN_PROGRESS
        );
        assert_eq!(part(&image), before);
        // The same replicas again: nothing to do, nothing changes.
        assert_eq!(reassign(&mut image, 0, Some(&[1, 2])), ErrorCode::NONE);
        assert_eq!(part(&image), before);
    }

    #[test]
    fn a_replication_factor_change_is_refused_when_not_allowed() {
        let mut image = image(&[1, 2]);
        let before = part(&image);
        for target in [&[1, 2, 3][..], &[3]] {
            assert_eq!(
                reassign_rf(&mut image, 0, Some(target), false),
                ErrorCode::INVALID_REPLICATION_FACTOR,
                "{target:?}"
            );
        }
        assert_eq!(part(&image), before);
        // Same size: allowed; mid-way the factor is still the original replicas' count.
        assert_eq!(
            reassign_rf(&mut image, 0, Some(&[3, 4]), false),
            ErrorCode::NONE
        );
        assert_eq!(part(&image).replicas.len(), 4);
        assert_eq!(
            reassign_rf(&mut image, 0, Some(&[2, 3, 4]), false),
            ErrorCode::INVALID_REPLICATION_FACTOR,
            "mid-way the factor is still 2"
        );
        // A cancel is never refused for it; allowed, the factor grows.
        assert_eq!(reassign_rf(&mut image, 0, None, false), ErrorCode::NONE);
        assert_eq!(part(&image).replicas, vec![1, 2]);
        assert_eq!(reassign(&mut image, 0, Some(&[1, 2, 3])), ErrorCode::NONE);
        assert_eq!(part(&image).adding_replicas, vec![3]);
    }

    #[test]
    fn a_move_completes_when_the_target_is_in_sync_and_the_leader_hands_over() {
        let mut image = image(&[1, 2]);
        assert_eq!(reassign(&mut image, 0, Some(&[3, 4])), ErrorCode::NONE);
        let p = part(&image);
        assert_eq!(p.replicas, vec![3, 4, 1, 2]);
        assert_eq!(p.adding_replicas, vec![3, 4]);
        assert_eq!(p.removing_replicas, vec![1, 2]);
        assert_eq!((p.leader, p.leader_epoch.0, p.partition_epoch.0), (1, 0, 1));
        // One of the two new replicas in sync: not yet.
        assert_eq!(change_isr(&mut image, &[1, 2, 3]), Outcome::Done);
        assert!(part(&image).is_reassigning());
        assert_eq!(change_isr(&mut image, &[1, 2, 3, 4]), Outcome::Done);
        let p = part(&image);
        assert_eq!(p.replicas, vec![3, 4]);
        assert_eq!(p.isr, vec![3, 4]);
        assert!(!p.is_reassigning());
        assert_eq!((p.leader, p.leader_epoch.0, p.partition_epoch.0), (3, 1, 3));
    }

    #[test]
    fn a_move_within_the_isr_completes_at_once_and_keeps_a_leader_it_can() {
        // Shrinking [1,2,3] to [2,1]: every target replica is already in sync.
        let mut image = image(&[1, 2, 3]);
        assert_eq!(reassign(&mut image, 0, Some(&[2, 1])), ErrorCode::NONE);
        let p = part(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (vec![2, 1], vec![1, 2])
        );
        assert!(!p.is_reassigning());
        assert_eq!((p.leader, p.leader_epoch.0), (1, 0), "the leader stays");
        // Growing [2,1] to [2,1,4]: 4 must catch up first.
        assert_eq!(reassign(&mut image, 0, Some(&[2, 1, 4])), ErrorCode::NONE);
        let p = part(&image);
        assert_eq!(
            (p.replicas.clone(), p.adding_replicas.clone()),
            (vec![2, 1, 4], vec![4])
        );
        assert!(p.removing_replicas.is_empty());
    }

    #[test]
    fn a_cancel_restores_the_original_replicas_and_isr() {
        let mut image = image(&[1, 2]);
        reassign(&mut image, 0, Some(&[3, 4]));
        change_isr(&mut image, &[1, 2, 3]);
        assert_eq!(reassign(&mut image, 0, None), ErrorCode::NONE);
        let p = part(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![1, 2], vec![1, 2], 1)
        );
        assert!(!p.is_reassigning());
        assert_eq!(
            reassign(&mut image, 0, None),
            ErrorCode::NO_REASSIGNMENT_IN_PROGRESS
        );
    }

    #[test]
    fn a_cancel_needing_an_unclean_election_is_refused() {
        let mut image = image(&[1]);
        reassign(&mut image, 0, Some(&[2]));
        // 2 catches up: complete at once. Start another and let only the new one be in sync.
        change_isr(&mut image, &[1, 2]);
        let p = part(&image);
        assert_eq!((p.replicas.clone(), p.leader), (vec![2], 2));
        reassign(&mut image, 0, Some(&[3, 2]));
        let mut p = part(&image);
        // The original replica 2 leaves the ISR (forced here; a fence could do it).
        p.isr = vec![3];
        image.topics.get_mut("t").unwrap().assignment[0] = p;
        assert_eq!(
            reassign(&mut image, 0, None),
            ErrorCode::INVALID_REPLICA_ASSIGNMENT
        );
    }

    #[test]
    fn a_new_target_mid_way_replaces_the_old_one() {
        let mut image = image(&[1, 2]);
        reassign(&mut image, 0, Some(&[3, 4]));
        assert_eq!(reassign(&mut image, 0, Some(&[1, 3])), ErrorCode::NONE);
        let p = part(&image);
        assert_eq!(p.replicas, vec![1, 3, 4, 2]);
        assert!(p.adding_replicas.is_empty(), "3 was a replica already");
        assert_eq!(p.removing_replicas, vec![4, 2]);
        change_isr(&mut image, &[1, 2, 3]);
        let p = part(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (vec![1, 3], vec![1, 3])
        );
    }

    #[test]
    fn reassignments_survive_a_snapshot() {
        let mut image = image(&[1, 2]);
        reassign(&mut image, 0, Some(&[3, 4]));
        let json = serde_json::to_vec(&image).unwrap();
        let back: Catalog = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, image);
        assert_eq!(part(&back).adding_replicas, vec![3, 4]);
        // Images written before reassignments existed read as having none.
        let old = br#"{"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0}"#;
        let p: PartitionRegistration = serde_json::from_slice(old).unwrap();
        assert!(!p.is_reassigning());
    }
}
