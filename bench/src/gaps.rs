//! The arithmetic over what `tributary-bench failover` recorded: each fault's ack gap, nearest-
//! rank percentiles, the exactly-once tally of a read-back, per-partition ack times, the
//! one-second "writable" buckets of a mixed run and its longest gaps without an ack.
//!
//! Plain functions over sequence numbers and durations measured from the start of producing,
//! unit-tested without a cluster; nothing here touches a process, a socket or a clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// One second: the width of a "writable" bucket in a mixed run.
pub const BUCKET: Duration = Duration::from_secs(1);

/// Each kill's gap: the longest interval between two consecutive acks (`acks` sorted) that
/// ends after the kill and no later than the next kill, and begins less than `after` past it.
/// The interval that spans the kill (last ack before it to first ack after) always counts; so
/// does a second stall soon after recovery. An interval that spans a later kill belongs to that
/// later kill, so no interval is counted twice. `kills` must be in order; `None` for a kill
/// with no ack after it before the next one.
pub fn kill_gaps(acks: &[Duration], kills: &[Duration], after: Duration) -> Vec<Option<Duration>> {
    kills
        .iter()
        .enumerate()
        .map(|(i, kill)| {
            let next = kills.get(i + 1);
            // The first ack after the kill ends the first interval that may count.
            let first_after = acks.partition_point(|t| t <= kill).max(1);
            acks.get(first_after - 1..)
                .unwrap_or_default()
                .windows(2)
                .take_while(|w| next.is_none_or(|n| w[1] <= *n) && w[0] < *kill + after)
                .filter(|w| w[1] > *kill)
                .map(|w| w[1] - w[0])
                .max()
        })
        .collect()
}

/// Each fault's gap measured on its own partition: fault `i` at `faults[i].1` on partition
/// `faults[i].0` is `kill_gaps` over that partition's acks (`times`, sorted per partition),
/// bounded by the next fault whatever partition that one measures.
pub fn fault_gaps(
    times: &[Vec<Duration>],
    faults: &[(usize, Duration)],
    after: Duration,
) -> Vec<Option<Duration>> {
    faults
        .iter()
        .enumerate()
        .map(|(i, (partition, at))| {
            let mut bounds = vec![*at];
            bounds.extend(faults.get(i + 1).map(|(_, next)| *next));
            kill_gaps(&times[*partition], &bounds, after)[0]
        })
        .collect()
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1): the smallest value with at least a
/// fraction `q` of the values at or below it. Of 20 values p50 is the 10th and p99 the 20th.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Debug, PartialEq, Eq)]
pub struct Tally {
    /// Distinct sequence numbers acknowledged.
    pub acked: u64,
    /// Records read back.
    pub read: u64,
    /// Acknowledged sequence numbers not read back.
    pub lost: u64,
    /// Records read back beyond the first copy of their sequence number.
    pub duplicates: u64,
    /// Distinct sequence numbers read back that were never acknowledged (a send that failed on
    /// the client side after the broker wrote it).
    pub unacked_present: u64,
}

/// Checks every acknowledged sequence number was read back exactly once.
pub fn tally(acked: &[u64], read: &[u64]) -> Tally {
    let mut counts: HashMap<u64, u64> = HashMap::with_capacity(read.len());
    for s in read {
        *counts.entry(*s).or_default() += 1;
    }
    let acked_set: HashSet<u64> = acked.iter().copied().collect();
    Tally {
        acked: acked_set.len() as u64,
        read: read.len() as u64,
        lost: acked_set.iter().filter(|s| !counts.contains_key(s)).count() as u64,
        duplicates: counts.values().map(|c| c - 1).sum(),
        unacked_present: counts.keys().filter(|s| !acked_set.contains(s)).count() as u64,
    }
}

/// The ack times of each of `partitions` partitions, sorted. Message `seq` went to partition
/// `seq % partitions` (the producer's round robin).
pub fn times_by_partition(acked: &[(u64, Duration)], partitions: usize) -> Vec<Vec<Duration>> {
    assert!(partitions > 0, "no partition");
    let mut by = vec![Vec::new(); partitions];
    for (seq, at) in acked {
        by[(*seq % partitions as u64) as usize].push(*at);
    }
    for v in &mut by {
        v.sort();
    }
    by
}

/// `count` one-second buckets from `from`: whether at least one ack (`acks` sorted) fell in
/// `[from + i s, from + (i + 1) s)`.
pub fn buckets(acks: &[Duration], from: Duration, count: usize) -> Vec<bool> {
    let mut hit = vec![false; count];
    let start = acks.partition_point(|t| *t < from);
    for t in &acks[start..] {
        let i = ((*t - from).as_nanos() / BUCKET.as_nanos()) as usize;
        if i >= count {
            break;
        }
        hit[i] = true;
    }
    hit
}

/// The share of buckets that are `true`; 0 for none.
pub fn fraction(buckets: &[bool]) -> f64 {
    if buckets.is_empty() {
        return 0.0;
    }
    buckets.iter().filter(|b| **b).count() as f64 / buckets.len() as f64
}

/// Bucket by bucket, whether any (`all` false) or every (`all` true) partition had an ack.
pub fn combine(per_partition: &[Vec<bool>], all: bool) -> Vec<bool> {
    let count = per_partition.iter().map(Vec::len).min().unwrap_or(0);
    (0..count)
        .map(|i| {
            if all {
                per_partition.iter().all(|b| b[i])
            } else {
                per_partition.iter().any(|b| b[i])
            }
        })
        .collect()
}

/// The longest stretch of `[from, to]` without an ack (`acks` sorted): between two
/// consecutive acks, or from `from` to the first, or from the last to `to`. The whole window
/// when no ack fell in it.
pub fn longest_gap(acks: &[Duration], from: Duration, to: Duration) -> Duration {
    assert!(from <= to, "longest_gap: window ends before it starts");
    let inside = &acks[acks.partition_point(|t| *t < from)..acks.partition_point(|t| *t <= to)];
    let mut prev = from;
    let mut longest = Duration::ZERO;
    for t in inside {
        longest = longest.max(*t - prev);
        prev = *t;
    }
    longest.max(to - prev)
}

/// Availability of a mixed run over its measured window.
#[derive(Debug, PartialEq)]
pub struct Availability {
    /// Seconds measured.
    pub buckets: usize,
    /// Per partition, the share of seconds with at least one ack.
    pub per_partition: Vec<f64>,
    /// The mean of `per_partition`: the headline figure (the issue's "writes accepted in
    /// ≥ 90 % of the seconds", taken partition by partition).
    pub mean: f64,
    /// The share of seconds in which at least one partition had an ack.
    pub any: f64,
    /// The share of seconds in which every partition had an ack.
    pub all: f64,
    /// Per partition, the longest stretch without an ack.
    pub longest_gap: Vec<Duration>,
    /// The longest stretch without an ack on any partition.
    pub longest_gap_any: Duration,
}

/// Buckets, shares and gaps of `times` (per partition, sorted) over `duration` from `from`;
/// only whole seconds are bucketed.
pub fn availability(times: &[Vec<Duration>], from: Duration, duration: Duration) -> Availability {
    let count = (duration.as_nanos() / BUCKET.as_nanos()) as usize;
    let per: Vec<Vec<bool>> = times.iter().map(|t| buckets(t, from, count)).collect();
    let per_partition: Vec<f64> = per.iter().map(|b| fraction(b)).collect();
    let mean = if per_partition.is_empty() {
        0.0
    } else {
        per_partition.iter().sum::<f64>() / per_partition.len() as f64
    };
    let to = from + duration;
    let mut merged: Vec<Duration> = times.iter().flatten().copied().collect();
    merged.sort();
    Availability {
        buckets: count,
        mean,
        any: fraction(&combine(&per, false)),
        all: fraction(&combine(&per, true)),
        per_partition,
        longest_gap: times.iter().map(|t| longest_gap(t, from, to)).collect(),
        longest_gap_any: longest_gap(&merged, from, to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn secs(v: u64) -> Duration {
        Duration::from_secs(v)
    }

    /// Acks every 5 ms from 0 to `until_ms`, except in the holes given.
    fn steady(until_ms: u64, holes: &[(u64, u64)]) -> Vec<Duration> {
        (0..until_ms)
            .step_by(5)
            .filter(|t| !holes.iter().any(|(a, b)| t > a && t < b))
            .map(ms)
            .collect()
    }

    #[test]
    fn the_gap_is_the_interval_that_spans_the_kill() {
        let acks = steady(20_000, &[(5_000, 8_500)]);
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(30_000)),
            vec![Some(ms(3_500))]
        );
        // A kill that stalls nothing shows the ack spacing.
        assert_eq!(
            kill_gaps(&acks, &[ms(12_001)], ms(30_000)),
            vec![Some(ms(5))]
        );
    }

    #[test]
    fn a_second_stall_after_recovery_counts_if_it_begins_within_the_window() {
        // Kill at 5 s, acks back at 8.5 s, a second stall from 9 s to 14 s.
        let acks = steady(30_000, &[(5_000, 8_500), (9_000, 14_000)]);
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(30_000)),
            vec![Some(ms(5_000))]
        );
        // With a 3 s window the second stall begins too late to count.
        assert_eq!(
            kill_gaps(&acks, &[ms(5_001)], ms(3_000)),
            vec![Some(ms(3_500))]
        );
    }

    #[test]
    fn a_stall_that_spans_the_next_kill_belongs_to_the_next_kill() {
        // Kill 1 at 10 s (acks back at 13 s, one more ack at 13.005 s); kill 2 at 15 s finds
        // acks stalled since 13.005 s and they come back at 24 s.
        let mut acks = steady(40_000, &[(10_000, 13_000), (13_005, 24_000)]);
        acks.sort();
        let gaps = kill_gaps(&acks, &[ms(10_001), ms(15_000)], ms(30_000));
        assert_eq!(gaps, vec![Some(ms(3_000)), Some(ms(10_995))]);
    }

    #[test]
    fn no_ack_after_the_kill_gives_none() {
        let acks = steady(1_000, &[]);
        assert_eq!(kill_gaps(&acks, &[ms(2_000)], ms(30_000)), vec![None]);
        assert_eq!(kill_gaps(&[], &[ms(0)], ms(30_000)), vec![None]);
        // The only ack after kill 1 comes after kill 2.
        assert_eq!(
            kill_gaps(&[ms(0), ms(50)], &[ms(10), ms(20)], ms(30_000)),
            vec![None, Some(ms(50))]
        );
    }

    #[test]
    fn each_fault_is_measured_on_its_own_partition() {
        // Partition 0 stalls 5 s → 8.5 s around fault 1; partition 1 stalls 20 s → 21 s around
        // fault 2. Fault 2 ends fault 1's window, so p0's acks after 20 s are not fault 1's.
        // Partition 0 stalls again after fault 2 for 6 s: fault 1 would report that longer
        // stall if fault 2 did not end its window.
        let times = vec![
            steady(30_000, &[(5_000, 8_500), (22_000, 28_000)]),
            steady(30_000, &[(20_000, 21_000)]),
        ];
        let gaps = fault_gaps(&times, &[(0, ms(5_001)), (1, ms(20_001))], ms(30_000));
        assert_eq!(gaps, vec![Some(ms(3_500)), Some(ms(1_000))]);
    }

    #[test]
    fn nearest_rank_percentiles_of_twenty_kills() {
        let sorted: Vec<Duration> = (1..=20).map(|s| ms(s * 100)).collect();
        assert_eq!(percentile(&sorted, 0.5), ms(1_000));
        assert_eq!(percentile(&sorted, 0.99), ms(2_000));
        assert_eq!(percentile(&sorted, 1.0), ms(2_000));
        assert_eq!(percentile(&sorted, 0.0), ms(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert_eq!(percentile(&[ms(7)], 0.99), ms(7));
    }

    #[test]
    fn exactly_once_read_back_is_clean() {
        let acked: Vec<u64> = (0..1_000).collect();
        let t = tally(&acked, &acked);
        assert_eq!(
            t,
            Tally {
                acked: 1_000,
                read: 1_000,
                lost: 0,
                duplicates: 0,
                unacked_present: 0
            }
        );
    }

    #[test]
    fn lost_duplicated_and_unacked_records_are_counted() {
        let acked: Vec<u64> = (0..100).collect();
        // 10, 11 and 12 missing; 50 three times and 60 twice; 100 written but never acked.
        let mut read: Vec<u64> = (0..100).filter(|s| !(10..13).contains(s)).collect();
        read.extend([50, 50, 60, 100]);
        let t = tally(&acked, &read);
        assert_eq!(t.acked, 100);
        assert_eq!(t.read, 101);
        assert_eq!(t.lost, 3);
        assert_eq!(t.duplicates, 3);
        assert_eq!(t.unacked_present, 1);
    }
    #[test]
    fn acks_go_to_the_partition_of_their_sequence_number() {
        let acked = [
            (0, ms(30)),
            (1, ms(10)),
            (2, ms(20)),
            (3, ms(5)),
            (5, ms(1)),
        ];
        let by = times_by_partition(&acked, 3);
        assert_eq!(
            by,
            vec![vec![ms(5), ms(30)], vec![ms(10)], vec![ms(1), ms(20)]]
        );
    }

    #[test]
    fn a_bucket_is_writable_when_it_holds_an_ack() {
        // Measured from 10 s: acks at 10.0 s, 10.999 s (bucket 0), 12.5 s (bucket 2); 9 s is
        // before the window and 14 s after its 4 buckets.
        let acks = [ms(9_000), ms(10_000), ms(10_999), ms(12_500), ms(14_000)];
        assert_eq!(buckets(&acks, secs(10), 4), vec![true, false, true, false]);
        assert_eq!(fraction(&buckets(&acks, secs(10), 4)), 0.5);
        assert_eq!(fraction(&[]), 0.0);
        assert_eq!(buckets(&[], secs(0), 2), vec![false, false]);
    }

    #[test]
    fn any_and_all_partitions_combine_bucket_by_bucket() {
        let per = vec![
            vec![true, true, false, false],
            vec![true, false, true, false],
        ];
        assert_eq!(combine(&per, false), vec![true, true, true, false]);
        assert_eq!(combine(&per, true), vec![true, false, false, false]);
        assert_eq!(combine(&[], true), Vec::<bool>::new());
    }

    #[test]
    fn the_longest_gap_counts_the_window_edges() {
        let acks = [ms(500), ms(1_000), ms(1_200), ms(4_000), ms(4_100)];
        // Inside [0, 5 s]: 0→0.5, …, 1.2→4.0 (2.8 s), 4.1→5.0.
        assert_eq!(longest_gap(&acks, ms(0), ms(5_000)), ms(2_800));
        // From 4.05 s the window's end is the last stretch: 4.1 → 9.
        assert_eq!(longest_gap(&acks, ms(4_050), ms(9_000)), ms(4_900));
        // A window with no ack is one gap.
        assert_eq!(longest_gap(&acks, ms(1_300), ms(3_300)), ms(2_000));
        assert_eq!(longest_gap(&[], ms(0), ms(7)), ms(7));
    }

    #[test]
    fn availability_is_averaged_over_partitions_and_combined() {
        // Two partitions over 4 s from 0: p0 acks each second but the third, p1 only in the
        // first second.
        let times = vec![vec![ms(100), ms(1_100), ms(3_100)], vec![ms(200), ms(900)]];
        let a = availability(&times, secs(0), secs(4));
        assert_eq!(a.buckets, 4);
        assert_eq!(a.per_partition, vec![0.75, 0.25]);
        assert_eq!(a.mean, 0.5);
        assert_eq!(a.any, 0.75);
        assert_eq!(a.all, 0.25);
        assert_eq!(a.longest_gap, vec![ms(2_000), ms(3_100)]);
        assert_eq!(a.longest_gap_any, ms(2_000));
    }
}
