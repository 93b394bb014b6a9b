//! The bytes of a segment not yet durable — and, while the tail cache allows, recently flushed
//! ones — held in aligned DMA buffers ("chunks") that appends copy into directly. A flush freezes
//! the chunks it covers and writes them as they are; nothing is copied a second time on the way to
//! the disk. The partial last block of a frozen chunk is copied into the next chunk when appends
//! go on (it is rewritten by the next flush), so that block is the only thing ever moved.
//!
//! Chunks cover `[start(), end())` in file order without holes; a chunk started after a partial
//! block overlaps the chunk before it by that block, with the same bytes.

use std::collections::VecDeque;
use std::rc::Rc;

use crate::index::IndexFile;
use crate::io::{AppendBuf, FrozenBuf, SegmentFile};
use crate::partition::Reservation;

/// One segment's tail.
pub(crate) struct Tail {
    pub segment_base: i64,
    pub file: Rc<SegmentFile>,
    /// Frozen chunks and their file positions: being written, or written and kept for readers.
    frozen: VecDeque<(u64, FrozenBuf)>,
    /// The chunk appends go into, and its file position.
    open: Option<(u64, AppendBuf)>,
    end: u64,
    /// File position up to which the bytes have been written (not necessarily synced).
    pub written_end: u64,
    /// For a sealed tail: the segment's index file, written once the tail is durable.
    pub sealed_index: Option<IndexFile>,
    /// The shard's tail-cache budget held for flushed chunks kept for readers.
    pub cached: Option<Reservation>,
    /// Where the current flush interval began, and how many bytes the previous one held: a new
    /// chunk is sized to hold a whole interval, so a flush is usually one write.
    interval_start: u64,
    last_interval: u64,
}

impl Tail {
    /// A tail at `position`, whose aligned block start holds `partial` (already on disk).
    pub fn new(segment_base: i64, file: Rc<SegmentFile>, position: u64, partial: &[u8]) -> Self {
        let align = file.alignment();
        assert_eq!(position % align, 0, "a tail starts on a block boundary");
        let end = position + partial.len() as u64;
        let open = (!partial.is_empty()).then(|| {
            let mut buf = file.append_buf(align_up(partial.len(), align as usize));
            buf.push(partial);
            (position, buf)
        });
        Self {
            segment_base,
            file,
            frozen: VecDeque::new(),
            open,
            end,
            written_end: end,
            sealed_index: None,
            cached: None,
            interval_start: end,
            last_interval: 0,
        }
    }

    /// Where the bytes held in memory begin.
    pub fn start(&self) -> u64 {
        self.frozen
            .front()
            .map(|(at, _)| *at)
            .or(self.open.as_ref().map(|(at, _)| *at))
            .unwrap_or(self.end)
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    /// Whether `len` bytes at `position` of `file` are in this tail's memory.
    pub fn holds(&self, file: &Rc<SegmentFile>, position: u64, len: usize) -> bool {
        Rc::ptr_eq(&self.file, file)
            && position >= self.start()
            && position + len as u64 <= self.end
    }

    /// A copy of `len` bytes at `position`, which [`Tail::holds`] must cover. Where chunks
    /// overlap (a carried partial block) they hold the same bytes, so each byte is taken from the
    /// first chunk that has it.
    pub fn copy(&self, position: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let end = position + len as u64;
        let mut at = position;
        // The chunks kept for readers may be thousands (a flush a message): skip those wholly
        // before `position` by their ends, which chunks in file order never lower.
        let first = self.first_ending_after(position);
        let chunks = self
            .frozen
            .range(first..)
            .map(|(s, b)| (*s, b.bytes()))
            .chain(self.open.as_ref().map(|(s, b)| (*s, b.bytes())));
        for (s, bytes) in chunks {
            let chunk_end = s + bytes.len() as u64;
            if at >= end {
                break;
            }
            if chunk_end <= at {
                continue;
            }
            assert!(s <= at, "tail chunks leave no holes");
            let to = end.min(chunk_end);
            out.extend_from_slice(&bytes[(at - s) as usize..(to - s) as usize]);
            at = to;
        }
        assert_eq!(at, end, "the tail holds the bytes asked for");
        out
    }

    /// Appends `parts` (one batch, in pieces) to the open chunk, starting a new chunk when it is
    /// full. A new chunk holds what the previous flush interval held and a quarter more, or twice
    /// the chunk that just filled, and at least the rest of the batch, at most `max_chunk`.
    pub fn push(&mut self, parts: &[&[u8]], max_chunk: usize) {
        let align = self.file.alignment() as usize;
        let max_chunk = align_up(max_chunk.max(align), align);
        let mut left: usize = parts.iter().map(|p| p.len()).sum();
        for part in parts {
            let mut bytes = *part;
            while !bytes.is_empty() {
                let full = self
                    .open
                    .as_ref()
                    .is_none_or(|(_, b)| b.len() == b.capacity());
                if full {
                    let filled = self.open.as_ref().map_or(0, |(_, b)| b.capacity());
                    self.freeze_open();
                    let carry = self.partial_block();
                    let interval = self.last_interval as usize;
                    let wanted = carry.len() + left.max(interval + interval / 4);
                    let capacity = align_up(wanted, align).max(filled * 2).min(max_chunk);
                    let mut buf = self.file.append_buf(capacity);
                    buf.push(&carry);
                    let at = self.end - carry.len() as u64;
                    self.open = Some((at, buf));
                }
                let (_, buf) = self.open.as_mut().expect("open chunk");
                let n = buf.push(bytes);
                self.end += n as u64;
                left -= n;
                bytes = &bytes[n..];
            }
        }
    }

    /// The bytes of the partial last block, when the open chunk cannot take them.
    fn partial_block(&self) -> Vec<u8> {
        let align = self.file.alignment();
        let block = align_down(self.end, align);
        if block == self.end || self.end == self.start() {
            return Vec::new();
        }
        self.copy(block, (self.end - block) as usize)
    }

    fn freeze_open(&mut self) {
        if let Some((at, buf)) = self.open.take() {
            if !buf.is_empty() {
                let align = self.file.alignment() as usize;
                self.frozen.push_back((at, buf.freeze(align)));
            }
        }
    }

    /// The chunks not yet written, with their file positions, for a flush to write in order:
    /// everything appended (the open chunk is frozen), or with `full_only` only the chunks that
    /// filled up. The flush reports back with [`Tail::written_to`].
    pub fn take_unwritten(&mut self, full_only: bool) -> Vec<(u64, FrozenBuf)> {
        if self.written_end >= self.end {
            return Vec::new();
        }
        if !full_only {
            self.freeze_open();
            self.last_interval = self.end - self.interval_start;
            self.interval_start = self.end;
        }
        let first = self.first_ending_after(self.written_end);
        self.frozen.range(first..).cloned().collect()
    }

    /// The index of the first frozen chunk that ends after `position`.
    fn first_ending_after(&self, position: u64) -> usize {
        self.frozen
            .partition_point(|(at, b)| at + b.len() as u64 <= position)
    }

    /// Whether a chunk filled up and waits to be written.
    pub fn has_full_chunk(&self) -> bool {
        self.frozen
            .back()
            .is_some_and(|(at, b)| at + b.len() as u64 > self.written_end)
    }

    pub fn written_to(&mut self, position: u64) {
        self.written_end = self.written_end.max(position);
    }

    /// Lets go of the written chunks, keeping only the partial last block in memory (copied into
    /// a chunk of its own if appends have not already done so).
    pub fn release_written(&mut self) {
        let align = self.file.alignment();
        let keep_from = align_down(self.written_end, align);
        while let Some((at, b)) = self.frozen.front() {
            let chunk_end = at + b.len() as u64;
            // A chunk holding bytes at or past `keep_from` with nothing after it to hold them
            // stays until that part is carried over below.
            let next_start = self
                .frozen
                .get(1)
                .map(|(s, _)| *s)
                .or(self.open.as_ref().map(|(s, _)| *s));
            let covered = chunk_end <= keep_from || next_start.is_some_and(|s| s <= keep_from);
            if chunk_end > self.written_end || !covered {
                break;
            }
            self.frozen.pop_front();
        }
        if self.open.is_none() && self.frozen.len() == 1 {
            let (at, b) = &self.frozen[0];
            if at + b.len() as u64 <= self.written_end {
                let carry = self.partial_block();
                self.frozen.clear();
                if !carry.is_empty() {
                    let mut buf = self.file.append_buf(align_up(carry.len(), align as usize));
                    buf.push(&carry);
                    self.open = Some((keep_from, buf));
                }
            }
        }
    }

    /// Bytes held in memory for readers below the aligned written end.
    pub fn kept_bytes(&self) -> u64 {
        align_down(self.written_end, self.file.alignment()).saturating_sub(self.start())
    }
}

pub(crate) fn align_down(v: u64, align: u64) -> u64 {
    v / align * align
}

fn align_up(v: usize, align: usize) -> usize {
    v.div_ceil(align) * align
}
