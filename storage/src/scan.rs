//! Scanning segment bytes batch by batch: the decision half of recovery and index rebuilding.
//! Pure: it takes bytes and their file position and says which batches are whole and valid and
//! where the valid log ends.

use tributary_protocol::record_batch::{self, BatchHeader, LOG_OVERHEAD_BYTES};

/// One batch in a segment, as the in-memory index keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry {
    pub base_offset: i64,
    pub last_offset: i64,
    pub position: u64,
    pub size: u32,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// The chunk ends inside a batch: read again from `position`, at least `needed` bytes.
    NeedMore { position: u64, needed: usize },
    /// The valid log ends at `position`; what follows is padding, a torn write or corruption.
    Stop { position: u64, reason: String },
}

#[derive(Debug, Clone)]
pub struct ScanChunk {
    pub batches: Vec<(BatchEntry, BatchHeader)>,
    pub end: ScanEnd,
}

/// Scans `buf`, which holds the segment's bytes from file position `position`. `next_offset` is
/// the offset the first batch must start at; offsets must then be contiguous.
pub fn scan_chunk(buf: &[u8], position: u64, next_offset: i64) -> ScanChunk {
    scan_chunk_with(buf, position, next_offset, false)
}

/// [`scan_chunk`]; with `gaps`, a batch may start past the offset expected (a compacted log
/// has gaps where the cleaner removed records), but never before it. `base_offset` is outside
/// the CRC, so gaps are allowed only where compaction can have made them.
pub fn scan_chunk_with(buf: &[u8], position: u64, mut next_offset: i64, gaps: bool) -> ScanChunk {
    let mut batches = Vec::new();
    let mut at = 0usize;
    loop {
        let here = position + at as u64;
        let rest = &buf[at..];
        if rest.len() < LOG_OVERHEAD_BYTES {
            let needed = record_batch::RECORD_BATCH_HEADER_BYTES;
            return ScanChunk {
                batches,
                end: ScanEnd::NeedMore {
                    position: here,
                    needed,
                },
            };
        }
        let header = match record_batch::parse_header(rest, here as usize) {
            Ok(h) => h,
            Err(record_batch::BatchError::Truncated { needed, .. }) => {
                return ScanChunk {
                    batches,
                    end: ScanEnd::NeedMore {
                        position: here,
                        needed,
                    },
                };
            }
            Err(e) => {
                return ScanChunk {
                    batches,
                    end: ScanEnd::Stop {
                        position: here,
                        reason: e.to_string(),
                    },
                };
            }
        };
        if rest.len() < header.size() {
            return ScanChunk {
                batches,
                end: ScanEnd::NeedMore {
                    position: here,
                    needed: header.size(),
                },
            };
        }
        if let Err(e) = record_batch::validate(rest, here as usize) {
            return ScanChunk {
                batches,
                end: ScanEnd::Stop {
                    position: here,
                    reason: e.to_string(),
                },
            };
        }
        if header.base_offset != next_offset && !(gaps && header.base_offset > next_offset) {
            return ScanChunk {
                batches,
                end: ScanEnd::Stop {
                    position: here,
                    reason: format!(
                        "batch at position {here} has base_offset {}, expected {next_offset}",
                        header.base_offset
                    ),
                },
            };
        }
        let entry = BatchEntry {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            position: here,
            size: header.size() as u32,
            max_timestamp: header.max_timestamp,
        };
        next_offset = header.last_offset() + 1;
        batches.push((entry, header));
        at += header.size();
    }
}

/// The first record of a batch at or after `min_offset` whose timestamp is at or after
/// `timestamp`: `(offset, timestamp)`. A compressed batch's records are decompressed (at most
/// `inflated_max` bytes), as Kafka reads them for a timestamp lookup. `None` when no record
/// qualifies or the records cannot be read.
pub fn first_record_at(
    batch: &[u8],
    timestamp: i64,
    min_offset: i64,
    inflated_max: usize,
) -> Option<(i64, i64)> {
    let header = record_batch::parse_header(batch, 0).ok()?;
    let mut scratch = Vec::new();
    let records = crate::cleaner::batch_records(batch, &mut scratch, inflated_max).ok()?;
    records.iter().find_map(|r| {
        let offset = header.base_offset + i64::from(r.offset_delta);
        let ts = header.base_timestamp + r.timestamp_delta;
        (offset >= min_offset && ts >= timestamp).then_some((offset, ts))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_protocol::record_batch::{assign_offset, build_batch};

    fn log_of(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut offset = 0;
        for i in 0..n {
            let v = format!("value-{i}");
            let mut b = build_batch(
                &[(None, Some(v.as_bytes())), (None, Some(b"x"))],
                1000,
                None,
            );
            assign_offset(&mut b, offset, 0);
            offset += 2;
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn whole_log_then_need_more() {
        let log = log_of(3);
        let c = scan_chunk(&log, 0, 0);
        assert_eq!(c.batches.len(), 3);
        assert_eq!(c.batches[2].0.last_offset, 5);
        assert!(
            matches!(c.end, ScanEnd::NeedMore { position, .. } if position == log.len() as u64)
        );
    }

    #[test]
    fn zero_padding_stops_the_log() {
        let mut log = log_of(2);
        let valid = log.len() as u64;
        log.resize(4096, 0);
        let c = scan_chunk(&log, 0, 0);
        assert_eq!(c.batches.len(), 2);
        assert!(matches!(c.end, ScanEnd::Stop { position, .. } if position == valid));
    }

    #[test]
    fn torn_tail_and_garbage_keep_the_valid_prefix() {
        let log = log_of(4);
        let first_three = scan_chunk(&log, 0, 0).batches[3].0.position;
        for cut in first_three as usize..log.len() {
            let c = scan_chunk(&log[..cut], 0, 0);
            assert_eq!(c.batches.len(), 3, "cut at {cut}");
        }
        let mut garbage = log[..first_three as usize].to_vec();
        garbage.extend((0..200u32).map(|i| (i * 37 % 251) as u8));
        let c = scan_chunk(&garbage, 0, 0);
        assert_eq!(c.batches.len(), 3);
    }

    #[test]
    fn first_record_at_a_timestamp_inside_a_batch() {
        let recs: Vec<_> = (0..5).map(|_| (None, Some(&b"v"[..]))).collect();
        let mut b = build_batch(&recs, 1000, None);
        assign_offset(&mut b, 40, 0);
        // Record i has timestamp 1000 + i.
        assert_eq!(first_record_at(&b, 0, 0, 1 << 20), Some((40, 1000)));
        assert_eq!(first_record_at(&b, 1003, 0, 1 << 20), Some((43, 1003)));
        assert_eq!(first_record_at(&b, 1001, 44, 1 << 20), Some((44, 1004)));
        assert_eq!(first_record_at(&b, 1005, 0, 1 << 20), None);
    }

    #[test]
    fn first_record_at_a_timestamp_inside_a_compressed_batch() {
        let recs: Vec<_> = (0..5).map(|_| (None, Some(&b"value"[..]))).collect();
        let plain = build_batch(&recs, 1000, None);
        let body = &plain[record_batch::RECORD_BATCH_HEADER_BYTES..];
        let gz = crate::codec::compress(1, body, body).unwrap();
        let mut b = plain[..record_batch::RECORD_BATCH_HEADER_BYTES].to_vec();
        b.extend_from_slice(&gz);
        // Length (bytes 8..12) and attributes (bytes 21..23, codec 1) of the compressed batch.
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[21..23].copy_from_slice(&1i16.to_be_bytes());
        assign_offset(&mut b, 40, 0);
        assert_eq!(first_record_at(&b, 1003, 0, 1 << 20), Some((43, 1003)));
        assert_eq!(first_record_at(&b, 1001, 44, 1 << 20), Some((44, 1004)));
        assert_eq!(
            first_record_at(&b, 1003, 0, 8),
            None,
            "inflates past the limit"
        );
    }

    #[test]
    fn offset_gap_is_a_stop() {
        let log = log_of(2);
        let c = scan_chunk(&log, 0, 10);
        assert!(c.batches.is_empty());
        assert!(matches!(c.end, ScanEnd::Stop { position: 0, .. }));
        // A forward gap stops a strict scan and passes a compacted one; going back never does.
        let c = scan_chunk(&log, 0, -4);
        assert!(c.batches.is_empty());
        let c = scan_chunk_with(&log, 0, -4, true);
        assert_eq!(c.batches.len(), 2);
        let c = scan_chunk_with(&log, 0, 10, true);
        assert!(c.batches.is_empty());
    }
}
