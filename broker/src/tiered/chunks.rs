//! Remote log objects read in fixed chunks and read ahead: a consumer replaying a tiered
//! partition asks for ~1 MiB at a time, and one ranged GET per fetch leaves the store's
//! round trip on every fetch. Chunks are `remote.log.reader.chunk.bytes` ranges of an object
//! at multiples of that size; a read takes the chunks it covers and starts the next
//! `remote.log.reader.read.ahead.chunks` ones, so the next fetch finds them on the way or
//! there. A shard keeps at most `remote.log.reader.chunk.cache.bytes` of them, the oldest go
//! first. Objects never change once written (a copy is a new segment id), so a chunk is good
//! for as long as it is kept; one that failed is asked for again by the next read that needs it.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use futures::future::{FutureExt, LocalBoxFuture, Shared};
use tributary_remote::{RemoteError, RemoteStore};

use crate::config::RemoteReader as ChunkConfig;

/// A chunk being fetched or fetched; every reader awaiting it shares the one GET.
type Chunk = Shared<LocalBoxFuture<'static, Result<Bytes, RemoteError>>>;

/// An object's chunk: the object's key and the chunk's number in it.
type ChunkKey = (String, u64);

/// The chunks a shard holds, up to its byte budget.
pub(super) struct ChunkCache {
    config: ChunkConfig,
    entries: HashMap<ChunkKey, Chunk>,
    order: VecDeque<ChunkKey>,
}

impl ChunkCache {
    pub(super) fn new(config: ChunkConfig) -> Self {
        ChunkCache {
            config: ChunkConfig {
                chunk_bytes: config.chunk_bytes.max(1),
                ..config
            },
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The chunks holding `range` of `object` (of `size` bytes), started now where not held;
    /// the read-ahead ones after them are started too (and driven by their own tasks).
    pub(super) fn chunks_for(
        &mut self,
        store: &RemoteStore,
        object: &str,
        size: u64,
        range: &Range<u64>,
    ) -> Vec<(u64, Chunk)> {
        let c = self.config.chunk_bytes;
        let (first, last) = chunk_span(c, range);
        let mut out = Vec::new();
        for n in first..=last {
            out.push((n, self.chunk(store, object, size, n).0));
        }
        let count = size.div_ceil(c);
        for n in (last + 1..count).take(self.config.read_ahead_chunks as usize) {
            if let (ahead, true) = self.chunk(store, object, size, n) {
                glommio::spawn_local(async move {
                    let _ = ahead.await;
                })
                .detach();
            }
        }
        out
    }

    pub(super) fn chunk_bytes(&self) -> u64 {
        self.config.chunk_bytes
    }

    /// Chunk `n` of `object`: the one held, unless its GET failed (a failure is never served
    /// again: a read-ahead may have failed with nobody waiting for it), else a new GET, and
    /// then `true`.
    fn chunk(&mut self, store: &RemoteStore, object: &str, size: u64, n: u64) -> (Chunk, bool) {
        let key = (object.to_string(), n);
        if let Some(c) = self.entries.get(&key) {
            if !matches!(c.peek(), Some(Err(_))) {
                return (c.clone(), false);
            }
            self.entries.remove(&key);
            self.order.retain(|k| k != &key);
        }
        let c = self.config.chunk_bytes;
        let range = n * c..((n + 1) * c).min(size);
        let (store, name) = (store.clone(), object.to_string());
        let chunk = async move {
            let want = range.end - range.start;
            let bytes = store.get_range(name.clone(), range.clone()).await?;
            if bytes.len() as u64 != want {
                return Err(RemoteError::Store {
                    op: "ranged read",
                    key: name,
                    detail: format!(
                        "asked for bytes {}..{}, got {}",
                        range.start,
                        range.end,
                        bytes.len()
                    ),
                });
            }
            Ok(bytes)
        }
        .boxed_local()
        .shared();
        // Kept within the budget, counting every chunk at its full size; at least the one
        // being read is kept, however small the budget.
        while !self.order.is_empty() && (self.order.len() as u64 + 1) * c > self.config.cache_bytes
        {
            if let Some(old) = self.order.pop_front() {
                self.entries.remove(&old);
            }
        }
        self.order.push_back(key.clone());
        self.entries.insert(key, chunk.clone());
        (chunk, true)
    }
}

/// The first and last chunk numbers `range` (not empty) touches.
fn chunk_span(chunk_bytes: u64, range: &Range<u64>) -> (u64, u64) {
    (
        range.start / chunk_bytes,
        (range.end.max(range.start + 1) - 1) / chunk_bytes,
    )
}

/// `range` of an object out of its chunks (numbered, in order, covering it): a slice of one
/// when it lies in one, else the pieces copied together.
pub(super) fn assemble(chunk_bytes: u64, range: &Range<u64>, chunks: &[(u64, Bytes)]) -> Bytes {
    let piece = |n: u64, b: &Bytes| {
        let base = n * chunk_bytes;
        let from = range.start.saturating_sub(base).min(b.len() as u64) as usize;
        let to = (range.end - base).min(b.len() as u64) as usize;
        b.slice(from..to.max(from))
    };
    if let [(n, b)] = chunks {
        return piece(*n, b);
    }
    let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
    for (n, b) in chunks {
        out.extend_from_slice(&piece(*n, b));
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_touches_the_chunks_it_overlaps() {
        assert_eq!(chunk_span(10, &(0..10)), (0, 0));
        assert_eq!(chunk_span(10, &(9..11)), (0, 1));
        assert_eq!(chunk_span(10, &(10..35)), (1, 3));
        assert_eq!(chunk_span(10, &(7..7)), (0, 0));
    }

    #[test]
    fn assembling_gives_the_range_byte_for_byte() {
        let object: Vec<u8> = (0..95u8).collect();
        let chunks: Vec<(u64, Bytes)> = object
            .chunks(10)
            .enumerate()
            .map(|(n, c)| (n as u64, Bytes::copy_from_slice(c)))
            .collect();
        for (start, end) in [(0, 10), (3, 7), (9, 11), (15, 95), (0, 95), (90, 95)] {
            let (first, last) = chunk_span(10, &(start..end));
            let covering = &chunks[first as usize..=last as usize];
            let got = assemble(10, &(start..end), covering);
            assert_eq!(
                &got[..],
                &object[start as usize..end as usize],
                "{start}..{end}"
            );
        }
    }
}
