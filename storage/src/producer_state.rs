//! Idempotent-producer state of one partition: for each producer id, its epoch and the sequence
//! ranges of its last five batches (Kafka's `ProducerStateManager`, `NUM_BATCHES_TO_RETAIN = 5`).
//! Pure: it decides, the partition log applies.

use std::collections::{HashMap, VecDeque};

/// Batches remembered per producer, as in Kafka: a retried batch older than this is not
/// recognised as a duplicate.
pub const PRODUCER_BATCHES_RETAINED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<ProducerBatch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// A new batch, in order: append it.
    Append,
    /// The same batch was appended before (a retry): answer with its original offsets.
    Duplicate { base_offset: i64, last_offset: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("out of order sequence: expected {expected}, got {got} (producer {producer_id})")]
    OutOfOrder {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id} epoch {got} is older than the current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

#[derive(Debug, Clone, Default)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStateTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Result<SequenceCheck, SequenceError> {
        let known = self.producers.get(&producer_id);
        if let Some(entry) = known.filter(|e| epoch < e.epoch) {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                current: entry.epoch,
                got: epoch,
            });
        }
        let Some(entry) = known.filter(|e| epoch == e.epoch) else {
            // A new producer, or a new epoch of a known one: its sequence starts again at 0.
            return if first_seq == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    expected: 0,
                    got: first_seq,
                })
            };
        };
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.base_offset,
                last_offset: dup.last_offset,
            });
        }
        let expected = entry.batches.back().map_or(0, |b| next_seq(b.last_seq));
        if first_seq == expected {
            Ok(SequenceCheck::Append)
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id,
                expected,
                got: first_seq,
            })
        }
    }

    /// Appends the table to `out` (the producer snapshot in a segment's index file):
    /// count u32, then per producer id i64 | epoch i16 | batches u8 | each batch
    /// first_seq i32 | last_seq i32 | base_offset i64 | last_offset i64; big-endian, by id.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for id in ids {
            let e = &self.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
    }

    /// Reads what [`ProducerStateTable::encode`] wrote; `None` if it is malformed. Returns the
    /// table and the bytes consumed.
    pub fn decode(bytes: &[u8]) -> Option<(Self, usize)> {
        let mut r = crate::index::ByteReader::new(bytes);
        let n = r.u32()? as usize;
        let mut producers = HashMap::with_capacity(n.min(bytes.len() / 11));
        for _ in 0..n {
            let id = r.i64()?;
            let epoch = r.i16()?;
            let count = r.u8()? as usize;
            if count > PRODUCER_BATCHES_RETAINED {
                return None;
            }
            let mut batches = VecDeque::with_capacity(count);
            for _ in 0..count {
                batches.push_back(ProducerBatch {
                    first_seq: r.i32()?,
                    last_seq: r.i32()?,
                    base_offset: r.i64()?,
                    last_offset: r.i64()?,
                });
            }
            producers.insert(id, ProducerEntry { epoch, batches });
        }
        Some((Self { producers }, r.consumed()))
    }

    /// Records an appended batch. A newer epoch starts the producer's history afresh.
    pub fn record(&mut self, producer_id: i64, epoch: i16, batch: ProducerBatch) {
        let entry = self.producers.entry(producer_id).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == PRODUCER_BATCHES_RETAINED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(batch);
        assert!(entry.batches.len() <= PRODUCER_BATCHES_RETAINED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i32, last: i32, base: i64) -> ProducerBatch {
        ProducerBatch {
            first_seq: first,
            last_seq: last,
            base_offset: base,
            last_offset: base + i64::from(last - first),
        }
    }

    #[test]
    fn in_order_duplicate_gap_and_fencing() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.check(7, 0, 0, 9), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(0, 9, 100));
        assert_eq!(t.check(7, 0, 10, 19), Ok(SequenceCheck::Append));
        t.record(7, 0, batch(10, 19, 110));
        assert_eq!(
            t.check(7, 0, 0, 9),
            Ok(SequenceCheck::Duplicate {
                base_offset: 100,
                last_offset: 109
            })
        );
        assert!(matches!(
            t.check(7, 0, 25, 30),
            Err(SequenceError::OutOfOrder { expected: 20, .. })
        ));
        assert!(matches!(
            t.check(7, -1, 20, 20),
            Err(SequenceError::StaleEpoch { .. })
        ));
        assert_eq!(t.check(7, 1, 0, 0), Ok(SequenceCheck::Append));
        assert!(matches!(
            t.check(7, 1, 5, 5),
            Err(SequenceError::OutOfOrder { .. })
        ));
        assert!(matches!(
            t.check(8, 0, 3, 3),
            Err(SequenceError::OutOfOrder { .. })
        ));
    }

    #[test]
    fn snapshots_round_trip() {
        let mut t = ProducerStateTable::default();
        for i in 0..7 {
            t.record(1, 0, batch(i, i, i64::from(i)));
        }
        t.record(9, 3, batch(0, 4, 100));
        let mut bytes = Vec::new();
        t.encode(&mut bytes);
        let (back, used) = ProducerStateTable::decode(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back.len(), 2);
        assert_eq!(
            back.check(1, 0, 6, 6),
            Ok(SequenceCheck::Duplicate {
                base_offset: 6,
                last_offset: 6
            })
        );
        assert_eq!(back.check(1, 0, 7, 7), Ok(SequenceCheck::Append));
        assert_eq!(back.check(9, 3, 5, 5), Ok(SequenceCheck::Append));
        for cut in 0..bytes.len() {
            assert!(
                ProducerStateTable::decode(&bytes[..cut]).is_none(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn only_five_batches_are_remembered() {
        let mut t = ProducerStateTable::default();
        for i in 0..6 {
            t.record(1, 0, batch(i, i, i64::from(i)));
        }
        assert_eq!(
            t.check(1, 0, 1, 1),
            Ok(SequenceCheck::Duplicate {
                base_offset: 1,
                last_offset: 1
            })
        );
        assert!(t.check(1, 0, 0, 0).is_err());
    }
}
