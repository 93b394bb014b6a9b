//! A consumer group member reading the failover topic while the faults happen, recording when
//! each message arrived: a run then says how long the group stopped reading around each fault.
//! The victim may be the group's coordinator (the leader of its `__consumer_offsets`
//! partition) as well as a leader of what it reads: the member must find the new coordinator,
//! keep its assignment and go on from its committed position.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The group the reader joins.
pub const GROUP: &str = "tributary-bench-failover";
/// How many arrival times a run keeps at most (a 2,000 msg/s run of an hour is 7.2 million).
const READS_MAX: usize = 20_000_000;
const POLL: Duration = Duration::from_millis(50);

pub struct GroupReader {
    thread: JoinHandle<Result<Vec<Duration>>>,
}

impl GroupReader {
    /// Joins the group on `topic` and reads until `stop`; arrival times are from `start`.
    pub fn spawn(
        bootstrap: &str,
        topic: &str,
        start: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<GroupReader> {
        let consumer: BaseConsumer = crate::failover::client(bootstrap)
            .set("group.id", GROUP)
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create()
            .context("creating the group reader")?;
        consumer
            .subscribe(&[topic])
            .context("subscribing the group reader")?;
        let stop = stop.clone();
        let thread = std::thread::spawn(move || -> Result<Vec<Duration>> {
            let mut reads = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Retriable errors (a coordinator moving, a broker down) are the faults
                // themselves; the member goes on.
                if let Some(Ok(_)) = consumer.poll(POLL) {
                    if reads.len() == READS_MAX {
                        bail!("the group reader got more than {READS_MAX} messages; lower --rate or the run's length");
                    }
                    reads.push(start.elapsed());
                }
            }
            Ok(reads)
        });
        Ok(GroupReader { thread })
    }

    /// The arrival times, in order.
    pub fn join(self) -> Result<Vec<Duration>> {
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the group reader thread panicked"))?
    }
}
