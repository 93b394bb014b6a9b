//! What a partition answers about transactions: its last stable offset, its open
//! transactions, and the aborted transactions a READ_COMMITTED fetch must be told of. The
//! state behind them is kept by appends (`push_batch` applies every batch to the producer
//! state and records ABORT markers in their segment's aborted index), recovery and truncation;
//! markers are written by [`Partition::append_marker`].

use super::*;

impl Partition {
    /// The last stable offset (LSO): the first offset of the oldest transaction not yet
    /// decided — open, or ended by a marker not yet below the high watermark — else the high
    /// watermark. Never above the high watermark, never below the log start offset.
    /// READ_COMMITTED consumers read only below it.
    pub fn last_stable_offset(&self) -> i64 {
        let st = self.state.borrow();
        let hw = st.high_watermark;
        let last_stable = st
            .producers
            .first_unstable_offset(hw)
            .map_or(hw, |first| first.min(hw));
        last_stable.max(st.log_start_offset.min(hw))
    }

    /// The aborted transactions that overlap `[from, upto)` — their ABORT marker is at or
    /// after `from` and their first offset below `upto` — as `(producer_id, first_offset)`,
    /// in marker order: what a Fetch at `from` returning records below `upto` sends as
    /// `aborted_transactions`, so the consumer drops those producers' records. Read from the
    /// segments' in-memory aborted indexes, from the segment holding `from` on.
    pub fn aborted_transactions(&self, from: i64, upto: i64) -> Vec<(i64, i64)> {
        let st = self.state.borrow();
        let start = st.segments.partition_point(|s| s.next_offset <= from);
        crate::txn::collect_aborted(
            st.segments[start..].iter().map(|s| s.aborted.as_slice()),
            from,
            upto,
        )
    }

    /// The open transactions: (producer id, producer epoch, first offset), oldest first
    /// (DescribeProducers' `current_txn_start_offset`).
    pub fn ongoing_transactions(&self) -> Vec<(i64, i16, i64)> {
        self.state.borrow().producers.ongoing()
    }

    /// Every producer this partition remembers (DescribeProducers).
    pub fn producers(&self) -> Vec<crate::producer_state::ProducerSummary> {
        self.state.borrow().producers.summaries()
    }

    /// [`Partition::read`] for a READ_COMMITTED consumer: only batches below the last stable
    /// offset (a fetch at or past it, but within the high watermark, gets none). `within` is
    /// [`Partition::read_within`]'s hard limit. The outcome's `high_watermark` is the high
    /// watermark, as for any read.
    pub async fn read_committed(
        &self,
        offset: i64,
        max_bytes: usize,
        within: bool,
    ) -> Result<ReadOutcome, PartitionError> {
        let upto = self.last_stable_offset();
        self.read_below(offset, max_bytes, !within, upto).await
    }
}
