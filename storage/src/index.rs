//! A segment's sparse indexes — offset → file position and timestamp → offset — and the index
//! file that persists them with the segment's summary and the producer state at its end.
//!
//! An entry is added at the first batch and then at the first batch after every
//! `index.interval.bytes` of log, so finding an offset or a timestamp is a binary search here
//! plus a scan of at most about that many bytes of the segment (Kafka's `OffsetIndex` and
//! `TimeIndex`). Pure: no I/O; `partition` reads and writes the files.

use crate::producer_state::ProducerStateTable;
use crate::txn::AbortedTxn;

/// Sparse offset and time index of one segment; offsets are relative to its base.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentIndex {
    /// `(relative base offset of a batch, its position)`, both increasing.
    offsets: Vec<(u32, u32)>,
    /// `(max timestamp so far, relative offset of the first batch that reached it)`, both
    /// strictly increasing.
    times: Vec<(i64, u32)>,
    bytes_since_entry: u64,
    max_timestamp: Option<(i64, u32)>,
}

impl SegmentIndex {
    /// Notes one appended batch.
    pub fn on_batch(
        &mut self,
        relative_offset: u32,
        position: u32,
        size: u32,
        max_timestamp: i64,
        interval_bytes: u64,
    ) {
        if self.max_timestamp.is_none_or(|(ts, _)| max_timestamp > ts) {
            self.max_timestamp = Some((max_timestamp, relative_offset));
        }
        if self.offsets.is_empty() || self.bytes_since_entry >= interval_bytes {
            self.offsets.push((relative_offset, position));
            let (ts, at) = self.max_timestamp.expect("set above");
            if self.times.last().is_none_or(|&(last, _)| ts > last) {
                self.times.push((ts, at));
            }
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += u64::from(size);
    }

    /// The indexed batch at or before `relative_offset`: `(its relative base offset, position)`;
    /// `(0, 0)` when none is.
    pub fn lookup_offset(&self, relative_offset: u32) -> (u32, u32) {
        let i = self.offsets.partition_point(|e| e.0 <= relative_offset);
        i.checked_sub(1).map_or((0, 0), |i| self.offsets[i])
    }

    /// A relative offset before which no batch has a timestamp at or after `timestamp`: scan
    /// from there for the first that does.
    pub fn lookup_time(&self, timestamp: i64) -> u32 {
        let i = self.times.partition_point(|e| e.0 <= timestamp);
        i.checked_sub(1).map_or(0, |i| self.times[i].1)
    }

    pub fn entries(&self) -> usize {
        self.offsets.len()
    }

    /// Heap bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.times.capacity() * std::mem::size_of::<(i64, u32)>()
    }

    pub fn shrink_to_fit(&mut self) {
        self.offsets.shrink_to_fit();
        self.times.shrink_to_fit();
    }
}

/// Everything the index file of a segment records.
#[derive(Debug, Clone)]
pub struct IndexFile {
    /// Logical size of the segment: bytes of valid batches.
    pub size: u64,
    pub next_offset: i64,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub index: SegmentIndex,
    /// Producer state after the segment's last batch; `None` when it was not known when the
    /// file was written (an index rebuilt for a segment older than the newest snapshot).
    pub producers: Option<ProducerStateTable>,
    /// The aborted transactions whose ABORT markers are in the segment, in marker order.
    pub aborted: Vec<AbortedTxn>,
}

const MAGIC: &[u8; 4] = b"TRIX";
/// 2: the producer snapshot carries each producer's last timestamp. 3: it carries each
/// producer's open transaction and coordinator epoch, and the file the segment's aborted
/// transactions. An index file of another version is refused, and its segment scanned.
const VERSION: u8 = 3;

impl IndexFile {
    pub fn encode(&self) -> Vec<u8> {
        let ix = &self.index;
        let mut out = Vec::with_capacity(64 + ix.offsets.len() * 8 + ix.times.len() * 12);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.next_offset.to_be_bytes());
        out.extend_from_slice(&self.first_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&ix.bytes_since_entry.to_be_bytes());
        let (max_ts, max_at) = ix.max_timestamp.unwrap_or((i64::MIN, u32::MAX));
        out.extend_from_slice(&max_ts.to_be_bytes());
        out.extend_from_slice(&max_at.to_be_bytes());
        out.extend_from_slice(&(ix.offsets.len() as u32).to_be_bytes());
        for (rel, pos) in &ix.offsets {
            out.extend_from_slice(&rel.to_be_bytes());
            out.extend_from_slice(&pos.to_be_bytes());
        }
        out.extend_from_slice(&(ix.times.len() as u32).to_be_bytes());
        for (ts, rel) in &ix.times {
            out.extend_from_slice(&ts.to_be_bytes());
            out.extend_from_slice(&rel.to_be_bytes());
        }
        crate::txn::encode_aborted(&self.aborted, &mut out);
        match &self.producers {
            Some(p) => {
                out.push(1);
                p.encode(&mut out);
            }
            None => out.push(0),
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// `None` if the bytes are not a whole, intact index file of this version.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, crc) = bytes.split_last_chunk::<4>()?;
        if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
            return None;
        }
        let mut r = ByteReader::new(body);
        if r.take(4)? != MAGIC || r.u8()? != VERSION {
            return None;
        }
        let size = r.u64()?;
        let next_offset = r.i64()?;
        let first_timestamp = r.i64()?;
        let max_timestamp = r.i64()?;
        let bytes_since_entry = r.u64()?;
        let (max_ts, max_at) = (r.i64()?, r.u32()?);
        let n = r.u32()? as usize;
        let mut offsets = Vec::with_capacity(n.min(body.len() / 8));
        for _ in 0..n {
            offsets.push((r.u32()?, r.u32()?));
        }
        let n = r.u32()? as usize;
        let mut times = Vec::with_capacity(n.min(body.len() / 12));
        for _ in 0..n {
            times.push((r.i64()?, r.u32()?));
        }
        let aborted = crate::txn::decode_aborted(&mut r)?;
        let producers = match r.u8()? {
            0 if r.rest().is_empty() => None,
            1 => {
                let (p, used) = ProducerStateTable::decode(r.rest())?;
                if used != r.rest().len() {
                    return None;
                }
                Some(p)
            }
            _ => return None,
        };
        Some(Self {
            size,
            next_offset,
            first_timestamp,
            max_timestamp,
            index: SegmentIndex {
                offsets,
                times,
                bytes_since_entry,
                max_timestamp: (max_at != u32::MAX).then_some((max_ts, max_at)),
            },
            producers,
            aborted,
        })
    }
}

/// Big-endian reads over a byte slice that fail instead of panicking at its end.
pub(crate) struct ByteReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    pub(crate) fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.array()?))
    }
    pub(crate) fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.array()?))
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.array()?))
    }
    pub(crate) fn consumed(&self) -> usize {
        self.at
    }
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::ProducerBatch;

    /// 100 batches of 1000 bytes, 2 offsets each; timestamps rise except for a dip at 50..60.
    fn sample() -> SegmentIndex {
        let mut ix = SegmentIndex::default();
        for i in 0..100u32 {
            let ts = if (50..60).contains(&i) {
                10
            } else {
                1000 + i64::from(i)
            };
            ix.on_batch(2 * i, 1000 * i, 1000, ts, 4096);
        }
        ix
    }

    #[test]
    fn entries_every_interval_and_lookups_land_at_or_before() {
        let ix = sample();
        // First batch, then every 5th (4096 bytes reached after 5 batches of 1000).
        assert_eq!(ix.entries(), 20);
        assert_eq!(ix.lookup_offset(0), (0, 0));
        assert_eq!(ix.lookup_offset(9), (0, 0));
        assert_eq!(ix.lookup_offset(10), (10, 5000));
        assert_eq!(ix.lookup_offset(199), (190, 95_000));
        for rel in 0..200u32 {
            let (at, pos) = ix.lookup_offset(rel);
            assert!(at <= rel && rel - at < 10, "rel {rel} -> {at}");
            assert_eq!(pos, at / 2 * 1000);
        }
    }

    #[test]
    fn time_lookup_never_skips_a_qualifying_batch() {
        let ix = sample();
        let ts_of = |i: u32| {
            if (50..60).contains(&i) {
                10
            } else {
                1000 + i64::from(i)
            }
        };
        for target in [
            0, 10, 11, 999, 1000, 1001, 1042, 1055, 1070, 1099, 1100, 5000,
        ] {
            let from = ix.lookup_time(target);
            // Every batch before `from` is older than the target.
            for i in 0..from / 2 {
                assert!(ts_of(i) < target, "target {target}: batch {i} skipped");
            }
        }
    }

    #[test]
    fn index_files_round_trip_and_reject_damage() {
        let mut producers = ProducerStateTable::default();
        producers.record(
            5,
            1,
            ProducerBatch {
                first_seq: 0,
                last_seq: 3,
                base_offset: 10,
                last_offset: 13,
            },
            1_700_000_000_000,
        );
        let file = IndexFile {
            size: 100_000,
            next_offset: 200,
            first_timestamp: 1000,
            max_timestamp: 1099,
            index: sample(),
            producers: Some(producers),
            aborted: vec![AbortedTxn {
                producer_id: 5,
                first_offset: 10,
                last_offset: 14,
                last_stable_offset: 15,
            }],
        };
        let bytes = file.encode();
        let back = IndexFile::decode(&bytes).unwrap();
        assert_eq!(back.index, file.index);
        assert_eq!(back.aborted, file.aborted);
        assert_eq!(
            (
                back.size,
                back.next_offset,
                back.first_timestamp,
                back.max_timestamp
            ),
            (100_000, 200, 1000, 1099)
        );
        assert_eq!(back.producers.as_ref().map(|p| p.len()), Some(1));
        let unknown = IndexFile {
            producers: None,
            ..file.clone()
        };
        assert!(IndexFile::decode(&unknown.encode())
            .unwrap()
            .producers
            .is_none());
        for cut in 0..bytes.len() {
            assert!(IndexFile::decode(&bytes[..cut]).is_none(), "cut {cut}");
        }
        for at in [0, 5, 40, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(IndexFile::decode(&bad).is_none(), "flip at {at}");
        }
    }
}
