//! `tributary-bench failover --fault mixed`: a seeded schedule of every fault kind under
//! acks=all produce to several partitions, and how much of the time the cluster took writes.
//!
//! After the warm-up (the settling pause, then fresh acks on every partition) it injects one
//! fault every `--fault-every` seconds for `--duration` seconds, as `faults::schedule` decided
//! from `--seed` (printed at the start; the same seed gives the same sequence of kinds,
//! partitions, follower picks and heal delays — which node each hits depends on the cluster's
//! state at that moment): kill -9, SIGSTOP or SIGTERM of a partition's leader, one of its
//! followers, or the active controller, each healed (restart, or SIGCONT) a few seconds later.
//! Faults do not wait for the cluster to recover: the next one may find an ISR still catching
//! up, as it would in production.
//!
//! The report (`gaps::availability`) is over the one-second buckets of the measured window:
//! per partition, the share of seconds with at least one acknowledged write; their mean is the
//! headline figure (the "writes accepted in ≥ 90 % of the seconds", taken partition by
//! partition, since a client writes to the partitions its keys pick); and beside it the share of
//! seconds in which any partition, and in which every partition, took a write. Then the longest
//! gap without an ack per partition and on all of them together, the faults by kind, and the
//! exactly-once tally of the read-back (`failover.rs`).
//!
//! This file only drives the cluster and prints; the schedule and the arithmetic are plain
//! functions in `faults.rs` and `gaps.rs`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cluster::Exit;
use crate::failover::{
    heal, heal_name, inject, live_addrs, partition_states, resolve, sleep_checked, wait_for, Bench,
    FailoverArgs, PartitionState, Target, LEADER_TIMEOUT, POLL_INTERVAL, TERM_EXIT_TIMEOUT,
};
use crate::faults::{self, Fault, Planned};
use crate::gaps;
use crate::readback::Delivery;

/// How long a fault waits for its victim to be known (the partition to have a leader, the
/// nodes to agree on a controller) before it is skipped and the schedule goes on.
const VICTIM_TIMEOUT: Duration = Duration::from_secs(5);
/// A fault injected this much after its planned time is reported as late (a slow victim
/// lookup, or a terminated node slow to exit, pushes the schedule).
const LATE_REPORTED: Duration = Duration::from_secs(1);

/// One planned fault as it was carried out; times from the start of the measured window.
pub(crate) struct Injected {
    planned: Planned,
    /// When it was injected (or skipped).
    at: Duration,
    /// `None`: skipped, no victim found within `VICTIM_TIMEOUT`.
    target: Option<Target>,
    /// Whether every partition's ISR was full just before it.
    isr_full_before: bool,
    /// For a term: how the node exited.
    exit: Option<Exit>,
}

/// A mixed run as it happened.
pub(crate) struct MixedRun {
    seed: u64,
    /// The start of the measured window, from the start of producing.
    from: Duration,
    duration: Duration,
    faults: Vec<Injected>,
}

/// A seed from the clock, when `--seed` is not given; printed so the run can be replayed.
fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) fn run(b: &mut Bench) -> Result<MixedRun> {
    let seed = b.args.seed.unwrap_or_else(clock_seed);
    let duration = FailoverArgs::secs(b.args.duration);
    let every = FailoverArgs::secs(b.args.fault_every);
    let plan = faults::schedule(seed, duration, every, b.partitions);
    if plan.is_empty() {
        bail!(
            "--duration {} s is too short for one fault healed within it; give at least {} s",
            b.args.duration,
            faults::HEAL_AFTER_MAX.as_secs()
        );
    }
    eprintln!(
        "mixed: seed {seed} (replay with --seed {seed}); {} faults, one every {} s over {} s, \
         {} partitions",
        plan.len(),
        b.args.fault_every,
        b.args.duration,
        b.partitions
    );
    let acks = &b.acks;
    wait_for(
        b.cluster,
        LEADER_TIMEOUT,
        "fresh acks on every partition",
        || Ok(acks.fresh().then_some(())),
    )?;
    let from = b.acks.start.elapsed();
    let mut faults = Vec::with_capacity(plan.len());
    for (i, p) in plan.iter().enumerate() {
        sleep_until(b, from + p.at)?;
        faults.push(one_fault(b, i, plan.len(), p, from)?);
    }
    sleep_until(b, from + duration)?;
    Ok(MixedRun {
        seed,
        from,
        duration,
        faults,
    })
}

/// Sleeps until `at` from the start of producing (at once if that has passed).
fn sleep_until(b: &mut Bench, at: Duration) -> Result<()> {
    let d = at.saturating_sub(b.acks.start.elapsed());
    sleep_checked(b.cluster, &b.producer, d)
}

/// Finds the victim, injects the fault, waits its heal delay and heals it.
fn one_fault(b: &mut Bench, i: usize, n: usize, p: &Planned, from: Duration) -> Result<Injected> {
    let (target, isr_full_before, last) = find_victim(b, p)?;
    let at = b.acks.start.elapsed().saturating_sub(from);
    let late = at.saturating_sub(p.at);
    let late = if late >= LATE_REPORTED {
        format!(", {:.1}s late", late.as_secs_f64())
    } else {
        String::new()
    };
    let Some(target) = target else {
        eprintln!(
            "mixed {}/{n} at {:.1}s: {} skipped: no victim within {}s ({last}){late}",
            i + 1,
            at.as_secs_f64(),
            p.fault,
            VICTIM_TIMEOUT.as_secs()
        );
        return Ok(Injected {
            planned: p.clone(),
            at,
            target: None,
            isr_full_before,
            exit: None,
        });
    };
    inject(b.cluster, p.fault.action, target.node)?;
    eprintln!(
        "mixed {}/{n} at {:.1}s: {} on node {}{}, {} after {:.1}s{}{late}",
        i + 1,
        at.as_secs_f64(),
        p.fault,
        target.node,
        victim_of(p.fault, &target),
        heal_name(p.fault.action),
        p.heal_after.as_secs_f64(),
        if isr_full_before {
            ""
        } else {
            ", an ISR was not full"
        }
    );
    sleep_until(b, from + at + p.heal_after)?;
    let exit = heal(b.cluster, p.fault.action, target.node)?;
    Ok(Injected {
        planned: p.clone(),
        at,
        target: Some(target),
        isr_full_before,
        exit,
    })
}

/// The victim of `p` as the cluster stands now, polled for up to `VICTIM_TIMEOUT`; with
/// whether every ISR was full, and the last reason none was found.
fn find_victim(b: &mut Bench, p: &Planned) -> Result<(Option<Target>, bool, String)> {
    let nodes = live_addrs(b.cluster)?;
    let deadline = Instant::now() + VICTIM_TIMEOUT;
    let mut last = String::from("no leader or no agreed controller yet");
    let mut isr_full = false;
    loop {
        // A node that died on its own fails the run here rather than turning into a skip.
        b.cluster.check_alive()?;
        let found = partition_states(&b.probe, &b.args.topic, b.partitions).and_then(|states| {
            isr_full = states.iter().all(PartitionState::full);
            resolve(p.fault.role, p.partition, p.pick, &states, &nodes)
        });
        match found {
            Ok(Some(t)) => return Ok((Some(t), isr_full, last)),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            return Ok((None, isr_full, last));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// What the victim was to the partition the fault named.
fn victim_of(fault: Fault, t: &Target) -> String {
    match fault.role {
        faults::Role::Controller => String::from(" (the controller)"),
        faults::Role::Leader => format!(" (leader of partition {})", t.partition),
        faults::Role::Follower => format!(
            " (follower of partition {}, led by node {})",
            t.partition, t.leader
        ),
    }
}

pub(crate) fn report(
    args: &FailoverArgs,
    run: &MixedRun,
    acked: &[(u64, Duration)],
    reads: &[Duration],
    partitions: usize,
    delivery: &Delivery,
) -> Result<()> {
    let times = gaps::times_by_partition(acked, partitions);
    let a = gaps::availability(&times, run.from, run.duration);
    for (i, f) in run.faults.iter().enumerate() {
        println!(
            "fault {:>2} at {:>6.1}s: {:<16} {}",
            i + 1,
            f.at.as_secs_f64(),
            f.planned.fault.to_string(),
            match &f.target {
                Some(t) => format!(
                    "node {}{}, healed after {:.1}s{}{}",
                    t.node,
                    victim_of(f.planned.fault, t),
                    f.planned.heal_after.as_secs_f64(),
                    if f.isr_full_before {
                        ""
                    } else {
                        ", an ISR was not full"
                    },
                    match f.exit {
                        Some(Exit::Killed) => ", did not exit on SIGTERM: killed",
                        _ => "",
                    }
                ),
                None => String::from("skipped (no victim found)"),
            }
        );
    }
    for (p, (share, gap)) in a.per_partition.iter().zip(&a.longest_gap).enumerate() {
        println!(
            "partition {p}: writable {:.1} % of {} s, longest gap {} ms",
            share * 100.0,
            a.buckets,
            gap.as_millis()
        );
    }
    let (kinds, skipped) = kinds(&run.faults);
    let longest = a.longest_gap.iter().max().copied().unwrap_or_default();
    println!(
        "failover mixed {} s, seed {}, {} faults ({kinds}; {skipped} skipped): writable seconds \
         {:.1} % (mean over {partitions} partitions), any partition {:.1} %, all partitions {:.1} %; \
         longest gap {} ms on one partition, {} ms with no ack on any; {}",
        a.buckets,
        run.seed,
        run.faults.len() - skipped,
        a.mean * 100.0,
        a.any * 100.0,
        a.all * 100.0,
        longest.as_millis(),
        a.longest_gap_any.as_millis(),
        delivery.line()
    );
    let read_gap = gaps::longest_gap(reads, run.from, run.from + run.duration);
    println!(
        "group reader ({}): longest stretch without a message read {} ms; {} messages read",
        crate::group_reader::GROUP,
        read_gap.as_millis(),
        reads.len()
    );
    delivery.print_first_error();
    if args.json {
        let mut v = report_json(args, run, &a, partitions, delivery);
        v["group_longest_read_gap_ms"] = json!(read_gap.as_millis() as u64);
        v["group_reads"] = json!(reads.len());
        println!("{v}");
    }
    Ok(())
}

/// The injected faults counted by kind, as `leader-kill 3, …`, and how many were skipped.
fn kinds(faults: &[Injected]) -> (String, usize) {
    let injected: Vec<Fault> = faults
        .iter()
        .filter(|f| f.target.is_some())
        .map(|f| f.planned.fault)
        .collect();
    let text = faults::count_by_kind(&injected)
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    (text, faults.len() - injected.len())
}

fn report_json(
    args: &FailoverArgs,
    run: &MixedRun,
    a: &gaps::Availability,
    partitions: usize,
    delivery: &Delivery,
) -> Value {
    let injected: Vec<Fault> = run
        .faults
        .iter()
        .filter(|f| f.target.is_some())
        .map(|f| f.planned.fault)
        .collect();
    let faults: Vec<Value> = run
        .faults
        .iter()
        .map(|f| {
            json!({
                "at_s": f.at.as_secs_f64(),
                "kind": f.planned.fault.to_string(),
                "node": f.target.as_ref().map(|t| t.node),
                "partition": f.target.as_ref().map(|t| t.partition),
                "heal_after_s": f.planned.heal_after.as_secs_f64(),
                "isr_full_before": f.isr_full_before,
                "skipped": f.target.is_none(),
                "shutdown_forced": matches!(f.exit, Some(Exit::Killed)),
            })
        })
        .collect();
    let ms = |d: &Duration| d.as_millis() as u64;
    let mut v = json!({
        "mode": "failover",
        "fault": "mixed",
        "seed": run.seed,
        "duration_s": args.duration,
        "measured_s": a.buckets,
        "fault_every_s": args.fault_every,
        "partitions": partitions,
        "faults": faults,
        "faults_by_kind": faults::count_by_kind(&injected),
        "faults_skipped": run.faults.len() - injected.len(),
        "writable_fraction": {
            "mean": a.mean, "any": a.any, "all": a.all, "per_partition": a.per_partition,
        },
        "longest_gap_ms": {
            "any": ms(&a.longest_gap_any),
            "per_partition": a.longest_gap.iter().map(ms).collect::<Vec<_>>(),
        },
        "config": {
            "rate": args.rate, "message_size": args.message_size, "linger_ms": args.linger_ms,
            "term_exit_timeout_s": TERM_EXIT_TIMEOUT.as_secs(), "set": args.set,
            "producer_set": args.producer_set_json(),
        },
        "git_sha": env!("TRIBUTARY_GIT_SHA"),
    });
    delivery.add_to(&mut v);
    v
}
