//! The faults `tributary-bench failover` injects: fault kinds (`leader-kill`, `follower-stop`,
//! …, written `ROLE-ACTION`), the seeded schedule of a mixed run, and the choice of a victim
//! from a partition's placement. What is measured around them is `gaps.rs`'s.
//!
//! Everything here is a plain function over numbers and durations, unit-tested without a
//! cluster; it must not touch processes, sockets or clocks (`failover.rs` and `mixed.rs` drive
//! those and pass the cluster's state in).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The shortest time a mixed run's victim stays down or frozen before it is healed.
pub const HEAL_AFTER_MIN: Duration = Duration::from_secs(2);
/// The longest time a mixed run's victim stays down or frozen before it is healed.
pub const HEAL_AFTER_MAX: Duration = Duration::from_secs(6);
/// In a mixed run, every fault is healed at least this long before the next one is injected,
/// so one fault at a time takes a node away (the next may still find the ISR catching up,
/// which is part of what the run measures).
pub const HEALED_BEFORE_NEXT_MIN: Duration = Duration::from_secs(3);

/// Which node a fault hits, named from the partition's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The partition's leader.
    Leader,
    /// A replica of the partition that is not its leader.
    Follower,
    /// The active controller (the metadata quorum's leader), whatever it holds.
    Controller,
}

/// What is done to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// `kill -9`, then a restart on the same data directory.
    Kill,
    /// SIGSTOP, then SIGCONT: the node freezes with its sockets open, so peers see silence,
    /// not a reset connection.
    Stop,
    /// SIGTERM (the broker's controlled shutdown), then a restart once it has exited.
    Term,
}

pub const ROLES: [Role; 3] = [Role::Leader, Role::Follower, Role::Controller];
pub const ACTIONS: [Action; 3] = [Action::Kill, Action::Stop, Action::Term];

/// A fault kind: a role and an action, written `ROLE-ACTION` (`leader-kill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fault {
    pub role: Role,
    pub action: Action,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.role {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Controller => "controller",
        };
        let action = match self.action {
            Action::Kill => "kill",
            Action::Stop => "stop",
            Action::Term => "term",
        };
        write!(f, "{role}-{action}")
    }
}

/// `--fault`: one kind repeated `--kills` times, or a seeded mix of all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultChoice {
    One(Fault),
    Mixed,
}

impl FromStr for FaultChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "mixed" {
            return Ok(FaultChoice::Mixed);
        }
        ROLES
            .iter()
            .flat_map(|&role| ACTIONS.iter().map(move |&action| Fault { role, action }))
            .find(|f| f.to_string() == s)
            .map(FaultChoice::One)
            .ok_or_else(|| {
                format!(
                    "unknown fault {s:?}; give ROLE-ACTION with ROLE one of leader, follower, \
                     controller and ACTION one of kill, stop, term (e.g. leader-kill), or mixed"
                )
            })
    }
}

impl fmt::Display for FaultChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultChoice::One(fault) => fault.fmt(f),
            FaultChoice::Mixed => f.write_str("mixed"),
        }
    }
}

/// SplitMix64: a tiny, fully determined generator, so a seed replays the same schedule on any
/// machine and build (no dependency whose algorithm may change between versions).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n` > 0). The modulo bias is below 2^-50 for the small `n` used here.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        self.next_u64() % n
    }

    /// A duration in `lo..=hi`, in whole milliseconds.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        assert!(lo <= hi, "Rng::between: {lo:?} > {hi:?}");
        let span_ms = (hi - lo).as_millis() as u64;
        lo + Duration::from_millis(self.below(span_ms + 1))
    }
}

/// One fault of a mixed run, as the seed decided it; which node it hits is resolved from the
/// cluster's state when it is injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When to inject it, from the end of the warm-up.
    pub at: Duration,
    pub fault: Fault,
    /// How long after the injection to heal it (restart, or SIGCONT).
    pub heal_after: Duration,
    /// The partition whose leader or follower it hits (ignored for the controller).
    pub partition: usize,
    /// Which follower, as an index into the partition's followers (modulo their number).
    pub pick: usize,
}

/// The faults of a mixed run of `duration`: one every `every` from the start, each kind
/// equally likely, each healed after `HEAL_AFTER_MIN..=HEAL_AFTER_MAX` (less when `every`
/// leaves no room for `HEALED_BEFORE_NEXT_MIN`) and no later than `duration`. The same
/// arguments always give the same schedule.
pub fn schedule(seed: u64, duration: Duration, every: Duration, partitions: usize) -> Vec<Planned> {
    assert!(partitions > 0, "schedule over no partition");
    assert!(
        every >= HEAL_AFTER_MIN + HEALED_BEFORE_NEXT_MIN,
        "faults {every:?} apart leave no room to heal"
    );
    let heal_max = HEAL_AFTER_MAX.min(every - HEALED_BEFORE_NEXT_MIN);
    let mut rng = Rng::new(seed);
    let mut planned = Vec::new();
    let mut at = Duration::ZERO;
    while at + heal_max <= duration {
        let role = ROLES[rng.below(ROLES.len() as u64) as usize];
        let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
        planned.push(Planned {
            at,
            fault: Fault { role, action },
            heal_after: rng.between(HEAL_AFTER_MIN, heal_max),
            partition: rng.below(partitions as u64) as usize,
            pick: rng.below(u64::from(u16::MAX)) as usize,
        });
        at += every;
    }
    planned
}

/// How many faults of each kind, by name, in name order.
pub fn count_by_kind(faults: &[Fault]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for f in faults {
        *counts.entry(f.to_string()).or_default() += 1;
    }
    counts
}

/// The follower to hit: the `pick`-th (modulo) of the in-sync replicas other than the leader,
/// or of all the other replicas when none is in sync (a follower out of the ISR still counts:
/// hitting it shows whether an out-of-sync replica matters). Sorted by id so a pick names the
/// same node whatever order the metadata listed them in. `None` with no other replica.
pub fn pick_follower(replicas: &[i32], isr: &[i32], leader: i32, pick: usize) -> Option<i32> {
    let others = |ids: &[i32]| {
        let mut v: Vec<i32> = ids.iter().copied().filter(|&id| id != leader).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let in_sync = others(isr);
    let pool = if in_sync.is_empty() {
        others(replicas)
    } else {
        in_sync
    };
    (!pool.is_empty()).then(|| pool[pick % pool.len()])
}

/// For a controller fault, the partition to measure: the first whose leader is not the
/// controller, so the gap shows the controller's failover alone and not a leader's too.
/// `None` when the controller leads every partition (or the list is empty).
pub fn partition_not_led_by(leaders: &[i32], controller: i32) -> Option<usize> {
    leaders.iter().position(|&l| l >= 0 && l != controller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(v: u64) -> Duration {
        Duration::from_secs(v)
    }

    #[test]
    fn every_kind_parses_from_its_name_and_nothing_else_does() {
        for role in ROLES {
            for action in ACTIONS {
                let f = Fault { role, action };
                assert_eq!(f.to_string().parse(), Ok(FaultChoice::One(f)));
            }
        }
        assert_eq!("mixed".parse(), Ok(FaultChoice::Mixed));
        assert_eq!(
            "leader-kill".parse(),
            Ok(FaultChoice::One(Fault {
                role: Role::Leader,
                action: Action::Kill
            }))
        );
        assert!("leader".parse::<FaultChoice>().is_err());
        assert!("kill-leader".parse::<FaultChoice>().is_err());
        assert!("".parse::<FaultChoice>().is_err());
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        let a = schedule(42, secs(180), secs(9), 6);
        assert_eq!(a, schedule(42, secs(180), secs(9), 6));
        assert_ne!(a, schedule(43, secs(180), secs(9), 6));
        // The generator itself is pinned: a seed means the same run after any refactoring.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn the_schedule_is_one_fault_every_interval_each_healed_in_time() {
        let (duration, every) = (secs(180), secs(9));
        let s = schedule(7, duration, every, 6);
        // 0, 9, …, 171: the last is healed by 177 at the latest.
        assert_eq!(s.len(), 20);
        for (i, p) in s.iter().enumerate() {
            assert_eq!(p.at, every * i as u32);
            assert!(p.heal_after >= HEAL_AFTER_MIN && p.heal_after <= HEAL_AFTER_MAX);
            assert!(p.at + p.heal_after <= duration);
            assert!(p.partition < 6);
        }
        // Faults close together are healed sooner, leaving the node up before the next.
        for p in schedule(7, secs(60), secs(6), 2) {
            assert!(p.heal_after <= secs(3));
        }
    }

    #[test]
    fn a_long_schedule_uses_every_kind() {
        let faults: Vec<Fault> = schedule(1, secs(3_600), secs(9), 6)
            .iter()
            .map(|p| p.fault)
            .collect();
        let counts = count_by_kind(&faults);
        assert_eq!(counts.len(), ROLES.len() * ACTIONS.len());
        assert_eq!(counts.values().sum::<usize>(), faults.len());
        assert!(counts.values().all(|&n| n > 20), "{counts:?}");
    }

    #[test]
    fn a_follower_is_an_in_sync_replica_other_than_the_leader() {
        assert_eq!(pick_follower(&[1, 2, 3], &[3, 1, 2], 1, 0), Some(2));
        assert_eq!(pick_follower(&[1, 2, 3], &[3, 1, 2], 1, 1), Some(3));
        assert_eq!(pick_follower(&[1, 2, 3], &[3, 1, 2], 1, 2), Some(2));
        // Node 3 left the ISR: node 2 is the only in-sync follower.
        assert_eq!(pick_follower(&[1, 2, 3], &[1, 2], 1, 1), Some(2));
        // None in sync but the leader: any other replica.
        assert_eq!(pick_follower(&[1, 2, 3], &[1], 1, 1), Some(3));
        assert_eq!(pick_follower(&[1], &[1], 1, 0), None);
    }

    #[test]
    fn a_controller_fault_measures_a_partition_it_does_not_lead() {
        assert_eq!(partition_not_led_by(&[2, 1, 3], 2), Some(1));
        assert_eq!(partition_not_led_by(&[1, 2, 3], 3), Some(0));
        // No leader (-1) is not "another leader".
        assert_eq!(partition_not_led_by(&[-1, 2], 2), None);
        assert_eq!(partition_not_led_by(&[2, 2, 2], 2), None);
        assert_eq!(partition_not_led_by(&[], 2), None);
    }
}
