//! The server-side assignors of KIP-848 consumer groups, `uniform` and `range`: from each
//! member's subscribed topics (id, partition count) and its current target, every member's
//! next target. Pure functions.
//!
//! - `uniform` balances partitions across members — counts differ by at most one among
//!   members with the same subscription — and is sticky: a member keeps what it had as long
//!   as the balance allows, so a member joining or leaving moves as few partitions as it can.
//! - `range` gives each member contiguous ranges of every topic it subscribes to, as the
//!   classic client-side RangeAssignor does: with co-partitioned topics, partition N of each
//!   lands on the same member.

use std::collections::{BTreeMap, BTreeSet};

use super::consumer::{Assignment, TopicId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    pub fn named(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }
}

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub member_id: String,
    /// Subscribed topics that exist: (id, partition count).
    pub topics: Vec<(TopicId, i32)>,
    /// Its current target.
    pub current: Assignment,
}

/// Every member's next target; members with nothing get an empty assignment.
pub fn assign(assignor: Assignor, members: &[Subscriber]) -> BTreeMap<String, Assignment> {
    let out = match assignor {
        Assignor::Uniform => uniform(members),
        Assignor::Range => range(members),
    };
    assert_eq!(out.len(), members.len());
    assert!(
        disjoint(&out),
        "an assignor gave one partition to two members"
    );
    out
}

type Partition = (TopicId, i32);

fn uniform(members: &[Subscriber]) -> BTreeMap<String, Assignment> {
    let mut sorted: Vec<&Subscriber> = members.iter().collect();
    sorted.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let eligible: Vec<BTreeSet<TopicId>> = sorted
        .iter()
        .map(|m| m.topics.iter().map(|(t, _)| *t).collect())
        .collect();
    let all: BTreeSet<Partition> = sorted
        .iter()
        .flat_map(|m| m.topics.iter())
        .flat_map(|(t, n)| (0..*n).map(move |p| (*t, p)))
        .collect();
    let mut owned: Vec<Vec<Partition>> = keep_current(&sorted, &eligible, &all);
    if eligible.windows(2).all(|w| w[0] == w[1]) {
        shed_to_quota(&mut owned, all.len());
    }
    let taken: BTreeSet<Partition> = owned.iter().flatten().copied().collect();
    for p in all.iter().filter(|p| !taken.contains(p)) {
        let fewest = (0..sorted.len())
            .filter(|i| eligible[*i].contains(&p.0))
            .min_by_key(|i| owned[*i].len());
        if let Some(i) = fewest {
            owned[i].push(*p);
        }
    }
    rebalance(&mut owned, &eligible);
    sorted
        .iter()
        .zip(owned)
        .map(|(m, ps)| (m.member_id.clone(), to_assignment(ps)))
        .collect()
}

/// Each member's current partitions that still exist and that it still subscribes to, each
/// partition kept by its first claimant only.
fn keep_current(
    sorted: &[&Subscriber],
    eligible: &[BTreeSet<TopicId>],
    all: &BTreeSet<Partition>,
) -> Vec<Vec<Partition>> {
    let mut seen = BTreeSet::new();
    sorted
        .iter()
        .zip(eligible)
        .map(|(m, topics)| {
            m.current
                .iter()
                .filter(|(t, _)| topics.contains(*t))
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .filter(|p| all.contains(p) && seen.insert(*p))
                .collect()
        })
        .collect()
}

/// Same subscriptions: each member keeps at most its quota (`total / n`, the first
/// `total % n` members in order of what they hold one more), giving back its highest
/// partitions.
fn shed_to_quota(owned: &mut [Vec<Partition>], total: usize) {
    let n = owned.len();
    if n == 0 {
        return;
    }
    let (quota, mut extra) = (total / n, total % n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|i| std::cmp::Reverse(owned[*i].len()));
    for i in order {
        let cap = if extra > 0 && owned[i].len() > quota {
            extra -= 1;
            quota + 1
        } else {
            quota
        };
        owned[i].sort();
        owned[i].truncate(cap);
    }
}

/// Moves partitions from members holding two or more than another member eligible for them,
/// until none does (bounded: each move narrows the spread).
fn rebalance(owned: &mut [Vec<Partition>], eligible: &[BTreeSet<TopicId>]) {
    let bound = owned.iter().map(Vec::len).sum::<usize>() * owned.len().max(1);
    for _ in 0..bound {
        let Some((from, to, at)) = find_move(owned, eligible) else {
            return;
        };
        let p = owned[from].remove(at);
        owned[to].push(p);
    }
}

fn find_move(
    owned: &[Vec<Partition>],
    eligible: &[BTreeSet<TopicId>],
) -> Option<(usize, usize, usize)> {
    let mut by_load: Vec<usize> = (0..owned.len()).collect();
    by_load.sort_by_key(|i| std::cmp::Reverse(owned[*i].len()));
    for &from in &by_load {
        for &to in by_load.iter().rev() {
            if owned[from].len() <= owned[to].len() + 1 {
                break;
            }
            let at = owned[from]
                .iter()
                .rposition(|(t, _)| eligible[to].contains(t));
            if let Some(at) = at {
                return Some((from, to, at));
            }
        }
    }
    None
}

fn range(members: &[Subscriber]) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    let mut topics: BTreeMap<TopicId, (i32, Vec<&str>)> = BTreeMap::new();
    for m in members {
        for (t, n) in &m.topics {
            topics
                .entry(*t)
                .or_insert((*n, Vec::new()))
                .1
                .push(&m.member_id);
        }
    }
    for (topic, (count, mut subscribers)) in topics {
        subscribers.sort();
        let (n, k) = (subscribers.len() as i32, count.max(0));
        let (each, extra) = (k / n, k % n);
        for (i, id) in subscribers.iter().enumerate() {
            let i = i as i32;
            let start = i * each + i.min(extra);
            let len = each + i32::from(i < extra);
            if len > 0 {
                let ps = out
                    .get_mut(*id)
                    .expect("member listed")
                    .entry(topic)
                    .or_default();
                ps.extend(start..start + len);
            }
        }
    }
    out
}

fn to_assignment(ps: Vec<Partition>) -> Assignment {
    let mut a = Assignment::new();
    for (t, p) in ps {
        a.entry(t).or_default().insert(p);
    }
    a
}

fn disjoint(out: &BTreeMap<String, Assignment>) -> bool {
    let mut seen = BTreeSet::new();
    out.values()
        .flat_map(|a| {
            a.iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        })
        .all(|p| seen.insert(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TopicId = [1; 16];
    const B: TopicId = [2; 16];

    fn sub(id: &str, topics: &[(TopicId, i32)], current: &[(TopicId, i32)]) -> Subscriber {
        Subscriber {
            member_id: id.into(),
            topics: topics.to_vec(),
            current: to_assignment(current.to_vec()),
        }
    }

    fn counts(out: &BTreeMap<String, Assignment>) -> Vec<usize> {
        out.values()
            .map(|a| a.values().map(BTreeSet::len).sum())
            .collect()
    }

    fn total(out: &BTreeMap<String, Assignment>) -> usize {
        counts(out).iter().sum()
    }

    #[test]
    fn uniform_spreads_every_partition_within_one() {
        for members in 1..=11 {
            let subs: Vec<Subscriber> = (0..members)
                .map(|i| sub(&format!("m{i:02}"), &[(A, 64)], &[]))
                .collect();
            let out = assign(Assignor::Uniform, &subs);
            assert_eq!(total(&out), 64);
            let c = counts(&out);
            assert!(
                c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
                "{c:?}"
            );
        }
    }

    #[test]
    fn uniform_moves_only_what_a_new_member_needs() {
        let first: Vec<Subscriber> = (0..3)
            .map(|i| sub(&format!("m{i}"), &[(A, 12)], &[]))
            .collect();
        let before = assign(Assignor::Uniform, &first);
        let mut next: Vec<Subscriber> = first
            .iter()
            .map(|s| Subscriber {
                current: before[&s.member_id].clone(),
                ..s.clone()
            })
            .collect();
        next.push(sub("m3", &[(A, 12)], &[]));
        let after = assign(Assignor::Uniform, &next);
        assert_eq!(counts(&after), vec![3, 3, 3, 3]);
        // Each old member kept 3 of its 4: only the new member's 3 moved.
        for i in 0..3 {
            let id = format!("m{i}");
            let kept = after[&id][&A].intersection(&before[&id][&A]).count();
            assert_eq!(kept, 3, "{id}");
        }
    }

    #[test]
    fn uniform_balances_members_with_different_subscriptions() {
        let subs = vec![
            sub("m0", &[(A, 4), (B, 4)], &[]),
            sub("m1", &[(A, 4)], &[]),
            sub("m2", &[(B, 4)], &[]),
        ];
        let out = assign(Assignor::Uniform, &subs);
        assert_eq!(total(&out), 8);
        assert!(out["m1"].keys().all(|t| *t == A));
        assert!(out["m2"].keys().all(|t| *t == B));
        let c = counts(&out);
        assert!(
            c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
            "{c:?}"
        );
    }

    #[test]
    fn uniform_drops_partitions_of_topics_a_member_left() {
        let subs = vec![sub("m0", &[(B, 2)], &[(A, 0), (A, 1)])];
        let out = assign(Assignor::Uniform, &subs);
        assert_eq!(out["m0"].keys().collect::<Vec<_>>(), vec![&B]);
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let subs = vec![
            sub("m1", &[(A, 5), (B, 5)], &[]),
            sub("m0", &[(A, 5), (B, 5)], &[]),
        ];
        let out = assign(Assignor::Range, &subs);
        let ps = |m: &str, t: TopicId| out[m][&t].iter().copied().collect::<Vec<_>>();
        assert_eq!(ps("m0", A), vec![0, 1, 2]);
        assert_eq!(ps("m1", A), vec![3, 4]);
        assert_eq!(ps("m0", B), vec![0, 1, 2]);
        assert_eq!(ps("m1", B), vec![3, 4]);
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        for a in [Assignor::Uniform, Assignor::Range] {
            let subs: Vec<Subscriber> = (0..5)
                .map(|i| sub(&format!("m{i}"), &[(A, 3)], &[]))
                .collect();
            let out = assign(a, &subs);
            assert_eq!(out.len(), 5);
            assert_eq!(total(&out), 3, "{a:?}");
        }
    }
}
