//! The in-memory copy of the quorum's log that raft-rs reads through its `Storage` trait: hard
//! state, conf state, the last snapshot (metadata and state-machine bytes, which the leader sends
//! to followers that fell behind it) and the entries after it. The metadata log is small, so all
//! of it lives here; the driver writes every change to disk (`storage.rs`) before it puts it
//! here. This module does no I/O and never panics on a caller's indexes: out-of-range requests
//! are raft-rs `StorageError`s.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

#[derive(Debug, Default)]
pub struct MemLog {
    hard_state: HardState,
    conf_state: ConfState,
    /// Metadata index 0 means no snapshot yet.
    snapshot: Snapshot,
    /// Contiguous, starting at the snapshot index + 1.
    entries: Vec<Entry>,
}

impl MemLog {
    /// A log restored from disk. `entries` must continue `snapshot` contiguously.
    pub fn new(
        hard_state: HardState,
        conf_state: ConfState,
        snapshot: Snapshot,
        entries: Vec<Entry>,
    ) -> MemLog {
        let log = MemLog {
            hard_state,
            conf_state,
            snapshot,
            entries,
        };
        log.check();
        log
    }

    fn check(&self) {
        let first = self.snapshot_index() + 1;
        for (i, e) in self.entries.iter().enumerate() {
            assert_eq!(e.index, first + i as u64, "in-memory log is not contiguous");
        }
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// The last snapshot (metadata index 0: none yet).
    pub fn last_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub fn entries_slice(&self) -> &[Entry] {
        &self.entries
    }

    fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |e| e.index)
    }

    /// Appends entries from a `Ready`, replacing any existing entries at or after the first one's
    /// index (a new leader overwriting a suffix).
    pub fn append(&mut self, new: &[Entry]) {
        let Some(head) = new.first() else { return };
        assert!(
            head.index >= self.first(),
            "append at {} before the snapshot at {}",
            head.index,
            self.snapshot_index()
        );
        assert!(
            head.index <= self.last() + 1,
            "append at {} leaves a gap after {}",
            head.index,
            self.last()
        );
        let keep = (head.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(new);
    }

    /// Installs a snapshot taken locally at or before the applied index: entries up to it go.
    pub fn compact_to(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        assert!(index >= self.snapshot_index(), "compaction goes backwards");
        assert!(index <= self.last(), "compaction past the last entry");
        let drop = (index - self.snapshot_index()) as usize;
        self.entries.drain(..drop);
        self.snapshot = snapshot;
        self.check();
    }

    /// Installs a snapshot received from the leader: it replaces the whole log.
    pub fn install_snapshot(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = meta.index;
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.snapshot = snapshot;
    }
}

impl raft::Storage for MemLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.first()) as usize;
        let hi = (high - self.first()) as usize;
        let mut out = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // The only snapshot kept is the one the log was compacted to, which is exactly what a
        // follower missing compacted entries needs.
        if self.snapshot_index() == 0 || self.snapshot_index() < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn snap(index: u64, term: u64) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s
    }

    #[test]
    fn append_overwrites_suffix_and_serves_ranges() {
        let mut log = MemLog::default();
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.append(&[entry(3, 2), entry(4, 2)]);
        assert_eq!(log.last_index().unwrap(), 4);
        assert_eq!(log.term(3).unwrap(), 2);
        let got = log.entries(2, 5, None, GetEntriesContext::empty(false));
        assert_eq!(got.unwrap().len(), 3);
        assert!(log
            .entries(2, 9, None, GetEntriesContext::empty(false))
            .is_err());
    }

    #[test]
    fn compaction_keeps_the_snapshot_term_and_refuses_older_reads() {
        let mut log = MemLog::default();
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 2)]);
        log.compact_to(snap(2, 1));
        assert_eq!(log.first_index().unwrap(), 3);
        assert_eq!(log.term(2).unwrap(), 1);
        assert!(matches!(
            log.term(1),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert!(log
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .is_err());
        assert_eq!(log.snapshot(0, 2).unwrap().get_metadata().index, 2);
    }

    #[test]
    fn installed_snapshot_replaces_the_log() {
        let mut log = MemLog::default();
        log.append(&[entry(1, 1), entry(2, 1)]);
        log.install_snapshot(snap(10, 4));
        assert_eq!(log.first_index().unwrap(), 11);
        assert_eq!(log.last_index().unwrap(), 10);
        assert_eq!(log.hard_state().commit, 10);
        assert_eq!(log.hard_state().term, 4);
        log.append(&[entry(11, 4)]);
        assert_eq!(log.last_index().unwrap(), 11);
    }
}
