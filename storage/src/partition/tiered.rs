//! What tiered storage needs of a local log: the closed segments to copy to the object store
//! (their file, their index as the index file holds it, their leader epochs), and how far the
//! remote copy reaches, which bounds what local retention may delete (see
//! [`LogConfig::remote_storage`]).

use super::*;

/// A closed segment to copy: wholly below the last stable offset, so every batch in it is
/// committed on the ISR and no transaction in it is still open.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentCopy {
    pub base_offset: i64,
    /// Its last offset (inclusive).
    pub last_offset: i64,
    /// Bytes of valid batches: what the log object holds.
    pub size: u64,
    pub max_timestamp: i64,
    /// The segment file (the first `size` bytes are the log object).
    pub log_path: PathBuf,
    /// Its index file's bytes (offsets, times, aborted transactions; no producer snapshot).
    pub index: Vec<u8>,
    /// The leader epochs its batches carry: (epoch, first offset), ascending.
    pub leader_epochs: Vec<(i32, i64)>,
}

impl Partition {
    /// The first closed segment holding offsets at or after `from` whose every offset is
    /// below the last stable offset (the active segment never is one), if any.
    pub fn next_segment_to_copy(&self, from: i64) -> Option<SegmentCopy> {
        let stable = self.last_stable_offset();
        let st = self.state.borrow();
        let n = st.segments.len();
        let seg = st.segments[..n.saturating_sub(1)]
            .iter()
            .find(|s| s.next_offset > from && !s.is_empty())?;
        if seg.next_offset > stable || seg.next_offset > st.high_watermark {
            return None;
        }
        let entries = st.epochs.entries();
        // The epoch in force at the segment's base, then each that began inside it.
        let first = entries.partition_point(|e| e.start_offset <= seg.base_offset);
        let mut leader_epochs: Vec<(i32, i64)> = Vec::new();
        if first > 0 {
            leader_epochs.push((entries[first - 1].epoch, seg.base_offset));
        }
        leader_epochs.extend(
            entries[first..]
                .iter()
                .take_while(|e| e.start_offset < seg.next_offset)
                .map(|e| (e.epoch, e.start_offset)),
        );
        Some(SegmentCopy {
            base_offset: seg.base_offset,
            last_offset: seg.next_offset - 1,
            size: seg.size,
            max_timestamp: seg.max_timestamp,
            log_path: segment_path(&self.dir, seg.base_offset),
            index: seg.index_file(None).encode(),
            leader_epochs,
        })
    }

    /// Tells the partition that the object store holds every offset below `end`: with
    /// `remote.storage.enable`, local retention deletes only segments wholly below it.
    pub fn set_remote_copied_end(&self, end: i64) {
        self.remote_copied_end
            .set(self.remote_copied_end.get().max(end));
    }

    pub fn remote_copied_end(&self) -> i64 {
        self.remote_copied_end.get()
    }
}

/// Where whole, valid batches for a read at `offset` lie in `bytes`, a piece of a segment
/// read from file position `position` whose first batch starts at offset `first_offset`
/// (what the segment's index said of that position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteSlice {
    /// Bytes `range` of `bytes` are the batches to return (at least one).
    Batches(std::ops::Range<usize>),
    /// The first batch to return does not end inside `bytes`: read at least `needed` bytes
    /// from file position `position`, where the batch at offset `offset` starts.
    NeedMore {
        position: u64,
        needed: usize,
        offset: i64,
    },
    /// The bytes are not valid batches where they must be: the object is damaged.
    Corrupt(String),
}

/// Picks the batches a fetch at `offset` returns from `bytes`: the batch holding `offset` and
/// those after it, up to `max_bytes`; a first batch larger than that is returned whole unless
/// `hard_limit`, as a local read does (KIP-74). Each batch is checked (length, magic, CRC32C,
/// offsets contiguous from `first_offset`).
pub fn remote_slice(
    bytes: &[u8],
    position: u64,
    first_offset: i64,
    offset: i64,
    max_bytes: usize,
    hard_limit: bool,
) -> RemoteSlice {
    let chunk = crate::scan::scan_chunk(bytes, position, first_offset);
    let mut start: Option<usize> = None;
    let mut end = 0usize;
    for (entry, _) in &chunk.batches {
        if entry.last_offset < offset {
            continue;
        }
        let at = (entry.position - position) as usize;
        let next = at + entry.size as usize;
        let s = *start.get_or_insert(at);
        if next - s > max_bytes && (end > s || hard_limit) {
            break;
        }
        end = next;
    }
    match (start, chunk.end) {
        (Some(s), _) if end > s => RemoteSlice::Batches(s..end),
        (Some(_), _) => RemoteSlice::Batches(0..0),
        (None, ScanEnd::NeedMore { position, needed }) => RemoteSlice::NeedMore {
            position,
            needed,
            offset: chunk
                .batches
                .last()
                .map_or(first_offset, |(e, _)| e.last_offset + 1),
        },
        (None, ScanEnd::Stop { reason, .. }) => RemoteSlice::Corrupt(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `records` records at offsets `base..`.
    fn batch_with_offsets(base: i64, records: usize) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..records).map(|i| vec![b'v'; 10 + i]).collect();
        let kv: Vec<record_batch::KeyValue<'_>> =
            values.iter().map(|v| (None, Some(v.as_slice()))).collect();
        let mut b = record_batch::build_batch(&kv, 1_000, None).to_vec();
        record_batch::assign_offset(&mut b, base, 0);
        b
    }

    fn log_of(batches: &[(i64, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(base, records) in batches {
            out.extend_from_slice(&batch_with_offsets(base, records));
        }
        out
    }

    #[test]
    fn a_remote_read_returns_whole_batches_from_the_one_holding_the_offset() {
        let log = log_of(&[(0, 3), (3, 2), (5, 4)]);
        let one = batch_with_offsets(0, 3).len();
        let two = batch_with_offsets(3, 2).len();
        // Offset 4 is in the second batch: it and the third come back.
        assert_eq!(
            remote_slice(&log, 0, 0, 4, 1 << 20, false),
            RemoteSlice::Batches(one..log.len())
        );
        // Room for the second batch only.
        assert_eq!(
            remote_slice(&log, 0, 0, 3, two, true),
            RemoteSlice::Batches(one..one + two)
        );
        // A first batch larger than max_bytes comes back whole, unless the limit is hard.
        assert_eq!(
            remote_slice(&log, 0, 0, 0, 10, false),
            RemoteSlice::Batches(0..one)
        );
        assert_eq!(
            remote_slice(&log, 0, 0, 0, 10, true),
            RemoteSlice::Batches(0..0)
        );
        // A piece read from the middle of the segment, by the index's position.
        assert_eq!(
            remote_slice(&log[one..], one as u64, 3, 5, 1 << 20, false),
            RemoteSlice::Batches(two..log.len() - one)
        );
        // Nothing at offset 9 in these bytes: whatever follows them would hold it.
        assert!(matches!(
            remote_slice(&log, 0, 0, 9, 1 << 20, false),
            RemoteSlice::NeedMore { position, .. } if position == log.len() as u64
        ));
        // A remote object holds batches only: zeros where one must be are damage.
        let mut padded = log.clone();
        padded.extend_from_slice(&[0u8; 100]);
        assert!(matches!(
            remote_slice(&padded, 0, 0, 9, 1 << 20, false),
            RemoteSlice::Corrupt(_)
        ));
    }

    #[test]
    fn a_cut_or_damaged_remote_piece_says_what_it_needs_or_what_is_wrong() {
        let log = log_of(&[(0, 3), (3, 2)]);
        let one = batch_with_offsets(0, 3).len();
        match remote_slice(&log[..one + 20], 0, 0, 3, 1 << 20, false) {
            RemoteSlice::NeedMore {
                position,
                needed,
                offset,
            } => {
                assert_eq!(position, one as u64);
                assert!(needed > 20);
                assert_eq!(offset, 3, "the cut batch's base offset");
            }
            other => panic!("{other:?}"),
        }
        let mut bad = log.clone();
        bad[one + 30] ^= 0xff; // inside the second batch's CRC-covered bytes
        assert!(matches!(
            remote_slice(&bad, 0, 0, 3, 1 << 20, false),
            RemoteSlice::Corrupt(_)
        ));
        // Offsets that do not continue from what the index said are damage too.
        assert!(matches!(
            remote_slice(&log, 0, 7, 7, 1 << 20, false),
            RemoteSlice::Corrupt(_)
        ));
    }
}
