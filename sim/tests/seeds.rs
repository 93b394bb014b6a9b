//! The simulator in the test suite: a few hundred seeds hold every invariant, a seed replays
//! exactly, and each canary (a rule broken on purpose) is caught. The soak runs by hand:
//! `cargo run --release -p tributary-sim -- --seeds 10000 --steps 1000000`.

use tributary_sim::{run, Canary, Options};

/// Seeds and steps per seed of the suite's run; `SIM_SEEDS` / `SIM_STEPS` run more by hand.
fn budget() -> (u64, u64) {
    let get = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    (get("SIM_SEEDS", 300), get("SIM_STEPS", 40_000))
}

#[test]
fn every_seed_holds_every_invariant() {
    let (seeds, steps) = budget();
    let mut acknowledged = 0;
    let mut fencings = 0;
    for seed in 1..=seeds {
        match run(&Options::new(seed, steps)) {
            Ok(report) => {
                acknowledged += report.acknowledged;
                fencings += report.fencings;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    // The runs did something: writes were acknowledged and brokers fenced.
    assert!(
        acknowledged as u64 > seeds * 100,
        "{acknowledged} acknowledged"
    );
    assert!(fencings > seeds, "{fencings} fencings");
}

#[test]
fn a_seed_replays_exactly() {
    let a = run(&Options::new(42, 30_000)).expect("seed 42 holds");
    let b = run(&Options::new(42, 30_000)).expect("seed 42 holds");
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.acknowledged, b.acknowledged);
    assert_eq!(a.simulated_ms, b.simulated_ms);
    let c = run(&Options::new(43, 30_000)).expect("seed 43 holds");
    assert_ne!(a.digest, c.digest, "another seed is another run");
}

#[test]
fn each_canary_is_caught() {
    // The high watermark follows the leader alone: an acknowledged write may be on no other
    // replica. The leader skips the sequence check: a retried batch is written twice. The
    // checks must say so, in every one of a few seeds.
    let canaries = [
        (Canary::HighWatermarkIgnoresIsr, "high watermark"),
        (Canary::NoSequenceCheck, "duplicate"),
    ];
    for (canary, finding) in canaries {
        for seed in 1..=5 {
            let mut opts = Options::new(seed, 60_000);
            opts.limits.canary = Some(canary);
            let failure = run(&opts).expect_err("the canary breaks a rule");
            let said = failure.to_string();
            assert!(said.contains(finding), "{canary:?}: {said}");
            assert!(
                said.contains(&format!("--canary {}", canary.name())),
                "{said}"
            );
        }
    }
}

/// Seeds that once found a bug, run past the step where they failed: (seed, steps, what it was).
const REGRESSIONS: &[(u64, u64, &str)] = &[
    (
        3,
        40_000,
        "a pending ISR member dropped on a proposal timeout or an unrelated image",
    ),
    (
        166,
        40_000,
        "acks=all acknowledged after the ISR shrank below min.insync.replicas",
    ),
    (
        100_588,
        330_000,
        "a stale refusal clearing a newer ISR change's pending members",
    ),
];

#[test]
fn seeds_that_found_bugs_hold() {
    for &(seed, steps, bug) in REGRESSIONS {
        if let Err(failure) = run(&Options::new(seed, steps)) {
            panic!("seed {seed} ({bug}) fails again: {failure}");
        }
    }
}
