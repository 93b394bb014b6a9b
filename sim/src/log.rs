//! A model of one replica's log: one record per offset, a durable prefix (what an fsync
//! covered; a crash loses the rest), the real leader epoch cache, and the high watermark.
//! Offsets start at 0 (no DeleteRecords in the model).

use tributary_storage::leader_epoch::LeaderEpochCache;

/// One record: the leader epoch it was appended in and the id its producer gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub epoch: i32,
    pub id: u64,
}

#[derive(Debug, Clone, Default)]
pub struct ReplicaLog {
    records: Vec<Record>,
    durable: usize,
    epochs: LeaderEpochCache,
    high_watermark: i64,
    /// Bumped by every truncation: a sync begun before one covers none of what came after.
    generation: u64,
}

impl ReplicaLog {
    pub fn log_end_offset(&self) -> i64 {
        self.records.len() as i64
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable as i64
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    pub fn durable_records(&self) -> &[Record] {
        &self.records[..self.durable]
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// A leader's new epoch begins at the log end, before anything is appended in it.
    pub fn begin_epoch(&mut self, epoch: i32) {
        self.epochs.assign(epoch, self.log_end_offset());
    }

    /// Appends at the log end, each record's epoch entering the cache where it begins.
    pub fn append(&mut self, records: &[Record]) {
        for r in records {
            self.epochs.assign(r.epoch, self.log_end_offset());
            self.records.push(*r);
        }
    }

    /// An fsync begun at `generation` with the log ending at `upto` completed.
    pub fn synced(&mut self, upto: i64, generation: u64) {
        if generation == self.generation {
            self.durable = self.durable.max((upto as usize).min(self.records.len()));
        }
    }

    /// Drops every record at or after `offset` (and what the epoch cache says of them).
    pub fn truncate_to(&mut self, offset: i64) {
        let at = (offset.max(0) as usize).min(self.records.len());
        self.records.truncate(at);
        self.durable = self.durable.min(at);
        self.epochs.truncate_from_end(at as i64);
        self.high_watermark = self.high_watermark.min(at as i64);
        self.generation += 1;
    }

    /// The process died: what no fsync covered is gone.
    pub fn crash(&mut self) {
        self.truncate_to(self.durable as i64);
    }

    /// Moves the high watermark up to `hw`, never past the durable end, never down (the
    /// storage rule of `Partition::set_high_watermark`).
    pub fn advance_high_watermark(&mut self, hw: i64) {
        let target = hw.min(self.durable as i64);
        if target > self.high_watermark {
            self.high_watermark = target;
        }
    }

    /// Records `from..` up to `max` of them.
    pub fn read(&self, from: i64, max: usize) -> Vec<Record> {
        let start = (from.max(0) as usize).min(self.records.len());
        let end = (start + max).min(self.records.len());
        self.records[start..end].to_vec()
    }
}
