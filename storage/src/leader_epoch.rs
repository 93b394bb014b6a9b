//! The leader epoch cache of a partition: which leader epoch began at which offset, and its
//! checkpoint file `leader-epoch-checkpoint` in the partition directory.
//!
//! The cache is plain data with Kafka's `LeaderEpochFileCache` rules (KIP-101, KIP-279), tested
//! without a runtime; only [`write`] and [`read`] touch the file, through [`crate::io`].
//!
//! File format, Kafka's text checkpoint: a version line `0`, a count line, then one line per
//! entry, `epoch start_offset`, separated by one space; every line ends in `\n`. Example:
//!
//! ```text
//! 0
//! 2
//! 0 0
//! 3 1200
//! ```

use std::path::Path;

use tracing::warn;

pub const FILE: &str = "leader-epoch-checkpoint";

/// The epoch Kafka answers with when none is known (`UNDEFINED_EPOCH`).
pub const UNDEFINED_EPOCH: i32 = -1;
/// The offset Kafka answers with when none is known (`UNDEFINED_EPOCH_OFFSET`).
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// The version line of the checkpoint file.
const CHECKPOINT_VERSION: i64 = 0;
/// Entries a checkpoint file may hold; a file claiming more is treated as damaged. Epochs only
/// grow with leader elections, so a real partition stays far below this.
pub const CHECKPOINT_ENTRIES_MAX: usize = 1 << 20;

/// One leader epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The `(epoch, start_offset)` entries of a partition, epochs and start offsets both strictly
/// increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records that `epoch` began at `start_offset`. An epoch not above the latest is ignored,
    /// so the same epoch again keeps its first start offset. Entries of a lower epoch at or
    /// after `start_offset` are dropped (they were never followed by data), keeping start
    /// offsets increasing as Kafka does. Kafka's cache also accepts an older epoch (dropping
    /// every later entry) and moves the latest epoch's start down; neither happens in a log
    /// whose epochs only grow, which both leader and follower appends here guarantee. Returns
    /// whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(last) = self.entries.last() {
            if epoch <= last.epoch {
                return false;
            }
        }
        // An entry with a larger epoch cannot exist here; entries at or past this start offset
        // (empty epochs) are replaced, so start offsets stay strictly increasing.
        self.entries.retain(|e| e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// OffsetForLeaderEpoch: `(epoch, end_offset)` for `requested`, with `log_end_offset` the end
    /// of the log. The latest epoch ends at the log end; an older one ends where the next larger
    /// epoch begins, answered with the largest known epoch not above `requested`; an epoch below
    /// every known one answers with `requested` and the first start offset; an undefined or
    /// too-large epoch answers `(-1, -1)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        let undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if requested == UNDEFINED_EPOCH {
            return undefined;
        }
        let Some(latest) = self.entries.last() else {
            return undefined;
        };
        if requested == latest.epoch {
            return (latest.epoch, log_end_offset);
        }
        // The smallest epoch above `requested`, and the largest at or below it.
        let higher = self.entries.iter().find(|e| e.epoch > requested);
        let floor = self.entries.iter().rev().find(|e| e.epoch <= requested);
        match (floor, higher) {
            (_, None) => undefined,
            (Some(f), Some(h)) => (f.epoch, h.start_offset),
            (None, Some(h)) => (requested, h.start_offset),
        }
    }

    /// Drops every entry that starts at or after `end_offset` (the log was truncated there).
    /// Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        self.entries.len() != before
    }

    /// The log now starts at `start_offset`: entries wholly before it are dropped, and the entry
    /// that covers it starts there. Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let covering = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset);
        let Some(i) = covering else {
            return false;
        };
        let changed = i > 0 || self.entries[0].start_offset != start_offset;
        self.entries.drain(..i);
        self.entries[0].start_offset = start_offset;
        changed
    }

    /// Empties the cache (the log was removed and starts again).
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// The checkpoint file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        out.into_bytes()
    }

    /// Parses a checkpoint file; `None` if it is damaged: a wrong version, a count that does not
    /// match, an unparsable line, or entries that do not increase.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        let version: i64 = lines.next()?.trim().parse().ok()?;
        if version != CHECKPOINT_VERSION {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        if count > CHECKPOINT_ENTRIES_MAX {
            return None;
        }
        let mut entries: Vec<EpochEntry> = Vec::new();
        for _ in 0..count {
            let mut parts = lines.next()?.split_whitespace();
            let epoch: i32 = parts.next()?.parse().ok()?;
            let start_offset: i64 = parts.next()?.parse().ok()?;
            if parts.next().is_some() || epoch < 0 || start_offset < 0 {
                return None;
            }
            if let Some(last) = entries.last() {
                if epoch <= last.epoch || start_offset <= last.start_offset {
                    return None;
                }
            }
            entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        if lines.any(|l| !l.trim().is_empty()) {
            return None;
        }
        Some(Self { entries })
    }
}

/// Replaces the checkpoint atomically; with `durable` it survives a power loss once this returns.
pub async fn write(dir: &Path, cache: &LeaderEpochCache, durable: bool) -> std::io::Result<()> {
    crate::io::write_file_atomic(dir, FILE, cache.encode(), durable).await
}

/// The checkpointed cache: `Ok(None)` if there is no file, or it is damaged (reported); the
/// caller then rebuilds the cache from the log.
pub async fn read(dir: &Path) -> std::io::Result<Option<LeaderEpochCache>> {
    let path = dir.join(FILE);
    let Some(body) = crate::io::read_file(&path).await? else {
        return Ok(None);
    };
    let cache = LeaderEpochCache::decode(&body);
    if cache.is_none() {
        warn!(path = %path.display(), "leader epoch checkpoint is damaged; rebuilding it from the log");
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::new();
        for &(epoch, start) in entries {
            assert!(c.assign(epoch, start));
        }
        c
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_keeps_the_first_start_of_an_epoch_and_ignores_older_epochs() {
        let mut c = LeaderEpochCache::new();
        assert!(c.assign(2, 6));
        assert!(!c.assign(2, 7), "same epoch keeps its first start offset");
        assert!(!c.assign(1, 8), "an older epoch is ignored");
        assert_eq!(pairs(&c), vec![(2, 6)]);
        assert!(c.assign(3, 9));
        assert_eq!(c.latest_epoch(), Some(3));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 9)]);
    }

    #[test]
    fn assign_replaces_empty_epochs_at_the_same_start() {
        // Kafka: a new epoch starting where earlier ones did drops those (they held no data).
        let mut c = cache(&[(2, 6), (3, 9)]);
        assert!(c.assign(4, 9));
        assert_eq!(pairs(&c), vec![(2, 6), (4, 9)]);
    }

    #[test]
    fn end_offset_for_latest_epoch_is_the_log_end() {
        let c = cache(&[(2, 6)]);
        assert_eq!(c.end_offset_for(2, 11), (2, 11));
    }

    #[test]
    fn end_offset_for_undefined_or_empty_cache_is_undefined() {
        let c = LeaderEpochCache::new();
        assert_eq!(c.end_offset_for(0, 10), (-1, -1));
        let c = cache(&[(2, 6)]);
        assert_eq!(c.end_offset_for(UNDEFINED_EPOCH, 10), (-1, -1));
    }

    #[test]
    fn end_offset_for_an_older_epoch_is_the_next_epochs_start() {
        let c = cache(&[(2, 6), (4, 11), (7, 20)]);
        assert_eq!(c.end_offset_for(2, 30), (2, 11));
        assert_eq!(c.end_offset_for(4, 30), (4, 20));
        assert_eq!(c.end_offset_for(7, 30), (7, 30));
        // An unknown epoch between known ones: the largest known epoch below it.
        assert_eq!(c.end_offset_for(3, 30), (2, 11));
        assert_eq!(c.end_offset_for(5, 30), (4, 20));
    }

    #[test]
    fn end_offset_for_an_epoch_below_every_known_one() {
        // Kafka (KIP-279): the requested epoch with the first known epoch's start offset.
        let c = cache(&[(2, 6), (4, 11)]);
        assert_eq!(c.end_offset_for(1, 30), (1, 6));
        assert_eq!(c.end_offset_for(0, 30), (0, 6));
    }

    #[test]
    fn end_offset_for_an_epoch_above_every_known_one_is_undefined() {
        let c = cache(&[(2, 6), (4, 11)]);
        assert_eq!(c.end_offset_for(5, 30), (-1, -1));
    }

    #[test]
    fn truncate_from_end_drops_entries_at_or_after_the_offset() {
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_end(12), "nothing starts at or after 12");
        assert!(c.truncate_from_end(11));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 8)]);
        assert!(c.truncate_from_end(7));
        assert_eq!(pairs(&c), vec![(2, 6)]);
        assert!(c.truncate_from_end(6));
        assert!(c.is_empty());
    }

    #[test]
    fn truncate_from_start_moves_the_covering_entry_up() {
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_start(5), "before every entry");
        assert_eq!(c.entries().len(), 3);
        assert!(c.truncate_from_start(9));
        assert_eq!(pairs(&c), vec![(3, 9), (4, 11)]);
        assert!(c.truncate_from_start(11));
        assert_eq!(pairs(&c), vec![(4, 11)]);
        assert!(c.truncate_from_start(15));
        assert_eq!(pairs(&c), vec![(4, 15)]);
        assert!(!c.truncate_from_start(15));
    }

    #[test]
    fn checkpoint_round_trips_in_kafkas_format() {
        let c = cache(&[(0, 0), (3, 1200)]);
        let bytes = c.encode();
        assert_eq!(bytes, b"0\n2\n0 0\n3 1200\n");
        assert_eq!(LeaderEpochCache::decode(&bytes), Some(c));
        let empty = LeaderEpochCache::new();
        assert_eq!(empty.encode(), b"0\n0\n");
        assert_eq!(LeaderEpochCache::decode(&empty.encode()), Some(empty));
    }

    #[test]
    fn damaged_checkpoints_are_refused() {
        for bad in [
            &b""[..],
            b"1\n0\n",
            b"0\n2\n0 0\n",
            b"0\n1\n0\n",
            b"0\n1\nx 0\n",
            b"0\n2\n3 5\n2 9\n",
            b"0\n2\n2 5\n3 5\n",
            b"0\n1\n0 0 7\n",
            b"0\n1\n0 0\n1 1\n",
            b"0\n99999999999\n",
            b"0\n1\n-2 0\n",
        ] {
            assert_eq!(LeaderEpochCache::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn checkpoint_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        glommio::LocalExecutor::default().run(async move {
            assert_eq!(read(&d).await.unwrap(), None);
            let c = cache(&[(0, 0), (5, 77)]);
            write(&d, &c, true).await.unwrap();
            assert_eq!(read(&d).await.unwrap(), Some(c));
            std::fs::write(d.join(FILE), b"0\n3\n").unwrap();
            assert_eq!(read(&d).await.unwrap(), None, "damaged");
        });
    }
}
