//! A follower's appends being made durable while its next fetch is out, and the reports that
//! tell the leader once they are.
//!
//! A follower that waited for its writes before fetching again would hold every batch the
//! leader took meanwhile for the rest of that write, and its own write after; a leader that
//! reads the follower's durable end (`DURABLE_END_TAG`) lets it fetch on at once. The leader
//! then counts only what the follower says is durable, so the follower says so as soon as it
//! is: a report is a fetch of no bytes that the leader answers at once, sent over a second
//! connection because the first may be held by the leader until new records arrive.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use event_listener::Event;
use tracing::{debug, warn};

use crate::metrics::Stage;
use crate::shard::Shard;

/// Answers whose appends may still be being made durable when the next fetch goes out: the
/// follower runs at most this far ahead of its disk.
pub(super) const ANSWERS_AHEAD_MAX: usize = 1;

/// One partition's append from an answer, to be made durable.
pub(super) struct Write {
    pub part: Rc<tributary_storage::Partition>,
    /// The offset after the last record appended.
    pub end: i64,
    /// The leader's high watermark in the answer: the follower's own moves up to it once the
    /// append is durable.
    pub leader_high_watermark: i64,
}

/// A fetcher's writes in flight.
#[derive(Default)]
pub(super) struct Writes {
    /// Answers with a write not yet durable.
    answers: Cell<usize>,
    /// Counts the writes that became durable (or failed), so a reporter knows what it told.
    finished: Cell<u64>,
    /// Notified when a write finished, and when an answer's last one did.
    progressed: Event,
    /// A write's failure the fetch loop has not seen yet.
    failed: RefCell<Option<String>>,
    /// The fetch loop has a fetch out that went ahead of the writes: reports are owed.
    pub ahead: Cell<bool>,
}

impl Writes {
    /// Makes an answer's appends durable in the background; each moves its partition's high
    /// watermark up to the leader's once done.
    pub fn spawn(self: &Rc<Self>, writes: Vec<Write>, answered: Instant, shard: &Rc<Shard>) {
        if writes.is_empty() {
            return;
        }
        self.answers.set(self.answers.get() + 1);
        let (this, shard) = (self.clone(), shard.clone());
        glommio::spawn_local(async move {
            let each = writes.into_iter().map(|w| {
                let this = this.clone();
                async move {
                    if let Err(e) = w.part.sync_to(w.end).await {
                        this.failed.borrow_mut().get_or_insert(e.to_string());
                    }
                    w.part
                        .set_high_watermark(w.leader_high_watermark.min(w.part.durable_offset()));
                    this.finished.set(this.finished.get() + 1);
                    this.progressed.notify(usize::MAX);
                }
            });
            futures::future::join_all(each).await;
            shard
                .metrics
                .observe_stage(Stage::ReplicaApply, answered.elapsed());
            this.answers.set(this.answers.get() - 1);
            this.progressed.notify(usize::MAX);
        })
        .detach();
    }

    /// Waits until at most `answers` answers have writes in flight.
    pub async fn at_most(&self, answers: usize) {
        loop {
            let listener = self.progressed.listen();
            if self.answers.get() <= answers {
                return;
            }
            listener.await;
        }
    }

    /// A write's failure since the last call.
    pub fn take_failure(&self) -> Option<String> {
        self.failed.borrow_mut().take()
    }

    /// Waits until a write finished after the `seen`-th; how many have finished now.
    async fn finished_after(&self, seen: u64) -> u64 {
        loop {
            let listener = self.progressed.listen();
            let finished = self.finished.get();
            if finished != seen {
                return finished;
            }
            listener.await;
        }
    }
}

/// Tells `leader` of this shard's durable ends each time a write finished while the fetch
/// loop was ahead of it, over a connection of its own. Runs until dropped.
pub(super) async fn report(shard: Rc<Shard>, leader: i32, writes: Rc<Writes>) {
    let mut settings = super::fetcher::FetchSettings::from_config(&shard.config);
    settings.max_wait_ms = 0;
    settings.partition_max_bytes = 0;
    let mut link = super::fetcher::Link::new(leader);
    let mut seen = 0;
    loop {
        seen = writes.finished_after(seen).await;
        if !writes.ahead.get() || !link.connect(&shard).await {
            continue;
        }
        let mut items = super::fetcher::followed(&shard, leader);
        if !link.durable_read {
            // Until this leader said it reads durable ends, a fetch offset must be one.
            for item in &mut items {
                item.fetch_offset = item.durable_end;
            }
        }
        let changed = shard.replicas.follows_changed.listen();
        let sent = Instant::now();
        match link.fetch(&shard, &items, &settings, changed).await {
            super::fetcher::Round::Failed(e) => {
                debug!(leader, error = %e, "reporting durable ends to the leader failed");
            }
            super::fetcher::Round::Answered(resp) => {
                shard
                    .metrics
                    .observe_stage(Stage::ReplicaReport, sent.elapsed());
                link.durable_read = reads_durable_ends(&resp);
            }
            super::fetcher::Round::NewFollow => {}
        }
    }
}

/// Whether the leader said, on every partition of its answer, that it read the durable ends.
pub(super) fn reads_durable_ends(resp: &kafka_protocol::messages::FetchResponse) -> bool {
    let tag = i32::try_from(tributary_protocol::requests::fetch::DURABLE_END_TAG).unwrap_or(-1);
    let mut partitions = resp.responses.iter().flat_map(|t| &t.partitions).peekable();
    partitions.peek().is_some() && partitions.all(|p| p.unknown_tagged_fields.contains_key(&tag))
}

/// Logs a write's failure once the fetch loop sees it.
pub(super) fn warn_failed(leader: i32, error: &str) {
    warn!(
        leader,
        error, "making a replica fetch's appends durable failed"
    );
}
