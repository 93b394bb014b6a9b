//! The end of a `tributary-bench failover` run: reading every partition of the topic back and
//! the exactly-once account of what was sent, acknowledged and read (`gaps::tally`), common to
//! the single-kind and the mixed reports. It reads; it never writes to the cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

use crate::failover::{client, Acks, SEQ_BYTES};
use crate::gaps::{self, Tally};

/// Reading the partitions back.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(300);
/// One poll of the read-back consumer; the loop goes on until `READ_BACK_TIMEOUT`.
const POLL_TIMEOUT: Duration = Duration::from_millis(200);

/// Reads every partition from the beginning to its high watermark; returns each record's
/// partition and sequence number.
pub fn read_back(bootstrap: &str, topic: &str, partitions: usize) -> Result<Vec<(usize, u64)>> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", "tributary-bench-failover")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the read-back consumer")?;
    let mut next = Vec::with_capacity(partitions);
    let mut high = Vec::with_capacity(partitions);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (lo, hi) = consumer
            .fetch_watermarks(topic, p as i32, READ_BACK_TIMEOUT)
            .with_context(|| format!("offsets of partition {p}"))?;
        next.push(lo);
        high.push(hi);
        tpl.add_partition_offset(topic, p as i32, Offset::Beginning)
            .map_err(|e| anyhow!("{e}"))?;
    }
    consumer.assign(&tpl).context("assigning the partitions")?;
    let deadline = Instant::now() + READ_BACK_TIMEOUT;
    let mut seqs = Vec::new();
    eprintln!(
        "failover: reading back {} records from {partitions} partitions",
        high.iter().zip(&next).map(|(h, l)| h - l).sum::<i64>()
    );
    while next.iter().zip(&high).any(|(n, h)| n < h) {
        if Instant::now() >= deadline {
            bail!("read back only to offsets {next:?} of {high:?} in {READ_BACK_TIMEOUT:?}");
        }
        let Some(m) = consumer.poll(POLL_TIMEOUT) else {
            continue;
        };
        let m = m.context("reading back")?;
        let p = usize::try_from(m.partition())
            .ok()
            .filter(|p| *p < partitions)
            .with_context(|| format!("a record from partition {}", m.partition()))?;
        let payload = m.payload().unwrap_or_default();
        let Some(head) = payload.get(..SEQ_BYTES) else {
            bail!(
                "partition {p} offset {}: a {}-byte payload carries no sequence number",
                m.offset(),
                payload.len()
            );
        };
        let mut b = [0u8; SEQ_BYTES];
        b.copy_from_slice(head);
        seqs.push((p, u64::from_be_bytes(b)));
        next[p] = m.offset() + 1;
    }
    Ok(seqs)
}

/// What was sent, acknowledged and read back, common to both runs' reports.
pub struct Delivery {
    sent: u64,
    errors: u64,
    first_error: Option<String>,
    tally: Tally,
    /// Records read back from another partition than their sequence number's.
    misplaced: u64,
    /// From the start of producing to the end of the flush.
    pub seconds: f64,
}

impl Delivery {
    pub fn new(
        acked: &[(u64, Duration)],
        read: &[(usize, u64)],
        acks: &Acks,
        sent: &AtomicU64,
        partitions: usize,
    ) -> Self {
        let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
        let read_seqs: Vec<u64> = read.iter().map(|(_, s)| *s).collect();
        Delivery {
            sent: sent.load(Ordering::Relaxed),
            errors: acks.errors.load(Ordering::Relaxed),
            first_error: acks.first_error.lock().ok().and_then(|e| e.clone()),
            tally: gaps::tally(&seqs, &read_seqs),
            misplaced: read
                .iter()
                .filter(|(p, s)| (*s % partitions as u64) as usize != *p)
                .count() as u64,
            seconds: 0.0,
        }
    }

    /// The summary line's tail.
    pub fn line(&self) -> String {
        let t = &self.tally;
        format!(
            "{} sent, {} acked, {} read back, {} lost, {} duplicates, {} present but not acked, \
             {} misplaced, {} delivery errors",
            self.sent,
            t.acked,
            t.read,
            t.lost,
            t.duplicates,
            t.unacked_present,
            self.misplaced,
            self.errors
        )
    }

    /// Adds the figures to a report's JSON object.
    pub fn add_to(&self, v: &mut Value) {
        let t = &self.tally;
        if let Value::Object(m) = v {
            for (k, x) in [
                ("sent", self.sent),
                ("acked", t.acked),
                ("read", t.read),
                ("lost", t.lost),
                ("duplicates", t.duplicates),
                ("unacked_present", t.unacked_present),
                ("misplaced", self.misplaced),
                ("delivery_errors", self.errors),
            ] {
                m.insert(k.into(), json!(x));
            }
            m.insert("seconds".into(), json!(self.seconds));
        }
    }

    pub fn print_first_error(&self) {
        if let Some(e) = &self.first_error {
            println!("first delivery error: {e}");
        }
    }

    /// Fails the run if anything acknowledged was lost, doubled or landed elsewhere.
    pub fn check(&self) -> Result<()> {
        let t = &self.tally;
        if t.lost > 0 || t.duplicates > 0 || self.misplaced > 0 {
            bail!(
                "{} acknowledged messages lost, {} duplicated, {} in the wrong partition",
                t.lost,
                t.duplicates,
                self.misplaced
            );
        }
        Ok(())
    }
}
