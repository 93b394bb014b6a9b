//! The quorum's durable state in its directory: the append-only entry log, the hard-state file
//! and the snapshot file — their byte formats, the replay rule, and the I/O that writes them.
//! Decoding and replay are plain functions over bytes ([`replay_log`], [`decode_hard_state`],
//! [`decode_snapshot`]); [`DiskLog`] only moves bytes, and every file-system call it makes runs on
//! the executor's blocking thread through `tributary_storage::io`. It knows nothing of the
//! state machine's bytes beyond carrying them.
//!
//! # Files
//!
//! ```text
//! raft.log   append-only; a sequence of records, each
//!
//!            +-----------+-------------+----------------------------------+
//!            | len u32BE | crc32c u32BE| protobuf eraftpb.Entry (len bytes)|
//!            +-----------+-------------+----------------------------------+
//!                         crc32c covers the Entry bytes only.
//!
//! raft.state   HardState + ConfState, replaced atomically (tmp + fsync + rename + dir fsync)
//! raft.snapshot SnapshotMetadata + state-machine bytes, replaced the same way
//!
//!            both are one checked container:
//!            +--------+------------+-------------+--------------+-------------+
//!            | magic 4| version u16| body_len u32| crc32c u32   | body        |
//!            +--------+------------+-------------+--------------+-------------+
//!                                                 crc32c covers the body only.
//!
//!            raft.state body:    [hs_len u32][HardState pb (hs_len)][ConfState pb (rest)]
//!            raft.snapshot body: [meta_len u32][SnapshotMetadata pb (meta_len)][data (rest)]
//! ```
//! All integers are big-endian.
//!
//! # Replay rule
//!
//! A new leader may overwrite a suffix of a follower's log. Rather than truncating the file in
//! place, the overwriting entries are appended: while reading, an entry with index `i` discards
//! every earlier-read entry with index `>= i`. Example: records 5,6,7 then 6',7' replay to
//! 5,6',7'. Kept entries must then be contiguous; a gap means the file was not written by this
//! code and open fails.
//!
//! A record whose header or body runs past the end of the file (a torn write) or whose checksum
//! fails ends the log: the file is truncated there at open, and the cut is logged. A record whose
//! checksum matches but does not decode is not a torn write, so open fails on it.
//!
//! # Durability
//!
//! [`DiskLog::append`] returns only after `fdatasync`; the hard-state and snapshot files are
//! durable when their writes return. Compaction and snapshot installation replace `raft.log`
//! atomically with a file holding only the entries that remain.

use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use tributary_storage::io;

/// Name of the entry log file.
pub const LOG_FILE: &str = "raft.log";
/// Name of the hard-state file.
pub const STATE_FILE: &str = "raft.state";
/// Name of the snapshot file.
pub const SNAPSHOT_FILE: &str = "raft.snapshot";

/// Bytes of a log record's header: length and checksum.
pub const RECORD_HEADER_BYTES: usize = 8;
/// The largest encoded entry a record may hold; a larger length in a header is damage, not an
/// allocation request.
pub const ENTRY_BYTES_MAX: usize = 64 << 20;

const STATE_MAGIC: [u8; 4] = *b"TQHS";
const SNAPSHOT_MAGIC: [u8; 4] = *b"TQSN";
const CONTAINER_VERSION: u16 = 1;
const CONTAINER_HEADER_BYTES: usize = 4 + 2 + 4 + 4;

/// Why a hard-state or snapshot file could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FileError {
    #[error("file too short: needed {needed} bytes, found {available}")]
    Truncated { needed: usize, available: usize },
    #[error("wrong magic {found:?}, expected {expected:?}")]
    BadMagic { found: [u8; 4], expected: [u8; 4] },
    #[error("unsupported version {0}")]
    Version(u16),
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("undecodable {what}: {reason}")]
    Decode { what: &'static str, reason: String },
}

/// Where and why the readable part of the log ends early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailDamage {
    /// The record starting at `position` needs `needed` bytes; the file has `available` left.
    Torn {
        position: u64,
        needed: usize,
        available: usize,
    },
    /// The record at `position` declares a length over [`ENTRY_BYTES_MAX`].
    Oversized { position: u64, len: usize },
    /// The record at `position` fails its checksum.
    Checksum { position: u64 },
}

/// Damage that is not a torn tail: the file holds bytes this code never writes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplayError {
    #[error("record at position {position} passes its checksum but does not decode: {reason}")]
    Undecodable { position: u64, reason: String },
    #[error("record at position {position} has index {found} after index {last}: a gap")]
    Gap {
        position: u64,
        last: u64,
        found: u64,
    },
}

/// The log file as read: the kept entries, how many leading bytes are sound, and any damage
/// after them.
#[derive(Debug, Default)]
pub struct Replay {
    pub entries: Vec<Entry>,
    pub valid_len: u64,
    pub damage: Option<TailDamage>,
}

/// Encodes `entries` as log records appended to `out`.
pub fn encode_records(entries: &[Entry], out: &mut Vec<u8>) {
    for entry in entries {
        let payload = entry
            .write_to_bytes()
            .expect("encoding an in-memory Entry cannot fail");
        assert!(
            payload.len() <= ENTRY_BYTES_MAX,
            "entry over ENTRY_BYTES_MAX"
        );
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
    }
}

/// Reads a whole log file by the replay rule (see the module doc).
pub fn replay_log(bytes: &[u8]) -> Result<Replay, ReplayError> {
    let mut replay = Replay::default();
    let mut position = 0usize;
    while position < bytes.len() {
        let rest = &bytes[position..];
        let at = position as u64;
        if rest.len() < RECORD_HEADER_BYTES {
            replay.damage = Some(TailDamage::Torn {
                position: at,
                needed: RECORD_HEADER_BYTES,
                available: rest.len(),
            });
            break;
        }
        let len = be_u32(&rest[0..4]) as usize;
        let stored = be_u32(&rest[4..8]);
        if len > ENTRY_BYTES_MAX {
            replay.damage = Some(TailDamage::Oversized { position: at, len });
            break;
        }
        let needed = RECORD_HEADER_BYTES + len;
        if rest.len() < needed {
            replay.damage = Some(TailDamage::Torn {
                position: at,
                needed,
                available: rest.len(),
            });
            break;
        }
        let payload = &rest[RECORD_HEADER_BYTES..needed];
        if crc32c::crc32c(payload) != stored {
            replay.damage = Some(TailDamage::Checksum { position: at });
            break;
        }
        let entry = Entry::parse_from_bytes(payload).map_err(|e| ReplayError::Undecodable {
            position: at,
            reason: e.to_string(),
        })?;
        keep(&mut replay.entries, entry, at)?;
        position += needed;
    }
    replay.valid_len = position as u64;
    Ok(replay)
}

/// The replay rule for one entry: it replaces every kept entry at or after its index.
fn keep(entries: &mut Vec<Entry>, entry: Entry, position: u64) -> Result<(), ReplayError> {
    while entries.last().is_some_and(|e| e.index >= entry.index) {
        entries.pop();
    }
    if let Some(last) = entries.last() {
        if last.index + 1 != entry.index {
            return Err(ReplayError::Gap {
                position,
                last: last.index,
                found: entry.index,
            });
        }
    }
    entries.push(entry);
    Ok(())
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn encode_container(magic: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CONTAINER_HEADER_BYTES + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&CONTAINER_VERSION.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn decode_container(magic: [u8; 4], bytes: &[u8]) -> Result<&[u8], FileError> {
    if bytes.len() < CONTAINER_HEADER_BYTES {
        return Err(FileError::Truncated {
            needed: CONTAINER_HEADER_BYTES,
            available: bytes.len(),
        });
    }
    let found = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if found != magic {
        return Err(FileError::BadMagic {
            found,
            expected: magic,
        });
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != CONTAINER_VERSION {
        return Err(FileError::Version(version));
    }
    let body_len = be_u32(&bytes[6..10]) as usize;
    let stored = be_u32(&bytes[10..14]);
    let needed = CONTAINER_HEADER_BYTES.saturating_add(body_len);
    if bytes.len() != needed {
        return Err(FileError::Truncated {
            needed,
            available: bytes.len(),
        });
    }
    let body = &bytes[CONTAINER_HEADER_BYTES..];
    let computed = crc32c::crc32c(body);
    if computed != stored {
        return Err(FileError::Checksum { stored, computed });
    }
    Ok(body)
}

/// Splits `[len u32][first (len)][second (rest)]`.
fn split_prefixed(body: &[u8]) -> Result<(&[u8], &[u8]), FileError> {
    if body.len() < 4 {
        return Err(FileError::Truncated {
            needed: 4,
            available: body.len(),
        });
    }
    let len = be_u32(&body[0..4]) as usize;
    let rest = &body[4..];
    if rest.len() < len {
        return Err(FileError::Truncated {
            needed: 4 + len,
            available: body.len(),
        });
    }
    Ok(rest.split_at(len))
}

fn decode_pb<M: protobuf::Message>(what: &'static str, bytes: &[u8]) -> Result<M, FileError> {
    M::parse_from_bytes(bytes).map_err(|e| FileError::Decode {
        what,
        reason: e.to_string(),
    })
}

fn prefixed(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + first.len() + second.len());
    body.extend_from_slice(&(first.len() as u32).to_be_bytes());
    body.extend_from_slice(first);
    body.extend_from_slice(second);
    body
}

/// The bytes of the hard-state file.
pub fn encode_hard_state(hs: &HardState, cs: &ConfState) -> Vec<u8> {
    let hs = hs.write_to_bytes().expect("encoding HardState");
    let cs = cs.write_to_bytes().expect("encoding ConfState");
    encode_container(STATE_MAGIC, &prefixed(&hs, &cs))
}

pub fn decode_hard_state(bytes: &[u8]) -> Result<(HardState, ConfState), FileError> {
    let body = decode_container(STATE_MAGIC, bytes)?;
    let (hs, cs) = split_prefixed(body)?;
    Ok((decode_pb("HardState", hs)?, decode_pb("ConfState", cs)?))
}

/// The bytes of the snapshot file.
pub fn encode_snapshot(snapshot: &Snapshot) -> Vec<u8> {
    let meta = snapshot
        .get_metadata()
        .write_to_bytes()
        .expect("encoding SnapshotMetadata");
    encode_container(SNAPSHOT_MAGIC, &prefixed(&meta, &snapshot.data))
}

pub fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, FileError> {
    let body = decode_container(SNAPSHOT_MAGIC, bytes)?;
    let (meta, data) = split_prefixed(body)?;
    let meta: SnapshotMetadata = decode_pb("SnapshotMetadata", meta)?;
    let mut snapshot = Snapshot::default();
    snapshot.set_metadata(meta);
    snapshot.data = bytes::Bytes::copy_from_slice(data);
    Ok(snapshot)
}

/// Everything read back from a quorum directory at open.
#[derive(Debug, Default)]
pub struct Recovered {
    /// `None` for a fresh directory.
    pub hard_state: Option<(HardState, ConfState)>,
    /// `None` if no snapshot was ever taken or received.
    pub snapshot: Option<Snapshot>,
    /// The log's entries after the snapshot, contiguous from the snapshot index + 1.
    pub entries: Vec<Entry>,
    /// The damage cut off the log's tail, if any.
    pub cut: Option<TailDamage>,
}

/// The entry log file, open for appends. All I/O runs on the blocking thread; the file handle
/// travels there and back with each operation, so the executor never makes a file-system call.
pub struct DiskLog {
    dir: PathBuf,
    /// `None` only after a failed operation lost the handle; every later call fails.
    file: Option<std::fs::File>,
}

impl DiskLog {
    /// Opens (creating if needed) `dir` and reads everything in it. A damaged log tail is cut off
    /// and the file truncated there; log entries the snapshot covers are dropped.
    pub async fn open(dir: &Path) -> anyhow::Result<(DiskLog, Recovered)> {
        let owned = dir.to_path_buf();
        io::blocking(move || io::now::create_dir_all(&owned)).await?;
        let mut recovered = Recovered::default();
        if let Some(bytes) = io::read_file(&dir.join(STATE_FILE)).await? {
            let state = decode_hard_state(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(STATE_FILE).display()))?;
            recovered.hard_state = Some(state);
        }
        if let Some(bytes) = io::read_file(&dir.join(SNAPSHOT_FILE)).await? {
            let snapshot = decode_snapshot(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(SNAPSHOT_FILE).display()))?;
            recovered.snapshot = Some(snapshot);
        }
        let log_path = dir.join(LOG_FILE);
        let bytes = io::read_file(&log_path).await?.unwrap_or_default();
        let replay =
            replay_log(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", log_path.display()))?;
        if let Some(damage) = &replay.damage {
            tracing::warn!(
                path = %log_path.display(),
                ?damage,
                cut_at = replay.valid_len,
                dropped_bytes = bytes.len() as u64 - replay.valid_len,
                "quorum log tail is damaged (an interrupted write); cutting it off"
            );
        }
        let (snapshot_index, snapshot_term) = recovered
            .snapshot
            .as_ref()
            .map_or((0, 0), |s| (s.get_metadata().index, s.get_metadata().term));
        recovered.entries = after_snapshot(replay.entries, snapshot_index, snapshot_term);
        recovered.cut = replay.damage;
        let valid_len = replay.valid_len;
        let file = io::blocking(move || {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)?;
            if file.metadata()?.len() != valid_len {
                file.set_len(valid_len)?;
                file.sync_all()?;
            }
            Ok(file)
        })
        .await?;
        io::sync_dir(dir).await?;
        let log = DiskLog {
            dir: dir.to_path_buf(),
            file: Some(file),
        };
        Ok((log, recovered))
    }

    /// Appends `entries` and waits until they are on disk (`fdatasync`).
    pub async fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        encode_records(entries, &mut buf);
        let mut file = self.take_file()?;
        let file = io::blocking(move || {
            file.write_all(&buf)?;
            file.sync_data()?;
            Ok(file)
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }

    /// Replaces the log file atomically with one holding exactly `entries`, durably.
    pub async fn rewrite(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        encode_records(entries, &mut buf);
        let old = self.take_file()?;
        let dir = self.dir.clone();
        let file = io::blocking(move || {
            drop(old);
            io::now::write_file_atomic(&dir, LOG_FILE, &buf, true)?;
            std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join(LOG_FILE))
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }

    /// Replaces the hard-state file, durably.
    pub async fn write_hard_state(&self, hs: &HardState, cs: &ConfState) -> std::io::Result<()> {
        io::write_file_atomic(&self.dir, STATE_FILE, encode_hard_state(hs, cs), true).await
    }

    /// Replaces the snapshot file, durably.
    pub async fn write_snapshot(&self, snapshot: &Snapshot) -> std::io::Result<()> {
        io::write_file_atomic(&self.dir, SNAPSHOT_FILE, encode_snapshot(snapshot), true).await
    }

    fn take_file(&mut self) -> std::io::Result<std::fs::File> {
        self.file.take().ok_or_else(|| {
            std::io::Error::other("the quorum log file was lost by an earlier failed write")
        })
    }
}

/// The log entries that continue the snapshot at (`index`, `term`).
///
/// A crash between persisting a received snapshot and resetting the log leaves an older log
/// beside a newer snapshot. Entries at or before the snapshot are dropped; the rest are kept
/// only if the log agrees with the snapshot (it holds the snapshot's entry with its term, or
/// starts right after it) — by Raft's log-matching property they then extend it.
fn after_snapshot(entries: Vec<Entry>, index: u64, term: u64) -> Vec<Entry> {
    if index == 0 {
        return entries;
    }
    let agrees = entries
        .iter()
        .find(|e| e.index == index)
        .map_or(entries.first().is_some_and(|e| e.index == index + 1), |e| {
            e.term == term
        });
    if !agrees {
        if !entries.is_empty() {
            tracing::info!(
                snapshot_index = index,
                dropped = entries.len(),
                "quorum log does not continue the snapshot; dropping it"
            );
        }
        return Vec::new();
    }
    entries.into_iter().filter(|e| e.index > index).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &str) -> Entry {
        Entry {
            index,
            term,
            data: bytes::Bytes::copy_from_slice(data.as_bytes()),
            ..Default::default()
        }
    }

    fn indexes_terms(entries: &[Entry]) -> Vec<(u64, u64)> {
        entries.iter().map(|e| (e.index, e.term)).collect()
    }

    fn records(entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_records(entries, &mut out);
        out
    }

    #[test]
    fn replay_reads_appended_records() {
        let bytes = records(&[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 2, "c")]);
        let replay = replay_log(&bytes).unwrap();
        assert_eq!(indexes_terms(&replay.entries), [(1, 1), (2, 1), (3, 2)]);
        assert_eq!(replay.entries[2].data.as_ref(), b"c");
        assert_eq!(replay.valid_len, bytes.len() as u64);
        assert!(replay.damage.is_none());
    }

    #[test]
    fn replay_applies_suffix_overwrite() {
        let mut bytes = records(&[entry(5, 1, "a"), entry(6, 1, "b"), entry(7, 1, "c")]);
        bytes.extend(records(&[entry(6, 2, "B"), entry(7, 2, "C")]));
        bytes.extend(records(&[entry(7, 3, "x")]));
        let replay = replay_log(&bytes).unwrap();
        assert_eq!(indexes_terms(&replay.entries), [(5, 1), (6, 2), (7, 3)]);
        assert_eq!(replay.entries[1].data.as_ref(), b"B");
    }

    #[test]
    fn replay_overwrite_may_go_back_before_the_first_entry() {
        let mut bytes = records(&[entry(5, 1, "a"), entry(6, 1, "b")]);
        bytes.extend(records(&[entry(3, 2, "z")]));
        let replay = replay_log(&bytes).unwrap();
        assert_eq!(indexes_terms(&replay.entries), [(3, 2)]);
    }

    #[test]
    fn replay_refuses_a_gap() {
        let mut bytes = records(&[entry(1, 1, "a")]);
        let first = bytes.len() as u64;
        bytes.extend(records(&[entry(3, 1, "c")]));
        let err = replay_log(&bytes).unwrap_err();
        assert_eq!(
            err,
            ReplayError::Gap {
                position: first,
                last: 1,
                found: 3
            }
        );
    }

    #[test]
    fn every_torn_prefix_keeps_the_whole_records_before_it() {
        let whole = records(&[entry(1, 1, "first"), entry(2, 1, "second")]);
        let first_len = records(&[entry(1, 1, "first")]).len();
        for cut in 0..whole.len() {
            let replay = replay_log(&whole[..cut]).unwrap();
            let expect = if cut >= first_len { 1 } else { 0 };
            assert_eq!(replay.entries.len(), expect, "cut at {cut}");
            let valid = if expect == 1 { first_len } else { 0 };
            assert_eq!(replay.valid_len, valid as u64, "cut at {cut}");
            assert_eq!(
                replay.damage.is_some(),
                cut != 0 && cut != first_len,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn checksum_failure_ends_the_log() {
        let mut bytes = records(&[entry(1, 1, "a"), entry(2, 1, "b")]);
        let second = records(&[entry(1, 1, "a")]).len();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let replay = replay_log(&bytes).unwrap();
        assert_eq!(indexes_terms(&replay.entries), [(1, 1)]);
        assert_eq!(
            replay.damage,
            Some(TailDamage::Checksum {
                position: second as u64
            })
        );
        assert_eq!(replay.valid_len, second as u64);
    }

    #[test]
    fn an_oversized_length_is_damage_not_an_allocation() {
        let mut bytes = records(&[entry(1, 1, "a")]);
        let at = bytes.len();
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        let replay = replay_log(&bytes).unwrap();
        assert_eq!(
            replay.damage,
            Some(TailDamage::Oversized {
                position: at as u64,
                len: u32::MAX as usize
            })
        );
    }

    #[test]
    fn hard_state_round_trips_and_rejects_damage() {
        let hs = HardState {
            term: 7,
            vote: 2,
            commit: 40,
            ..Default::default()
        };
        let cs = ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        };
        let bytes = encode_hard_state(&hs, &cs);
        let (hs2, cs2) = decode_hard_state(&bytes).unwrap();
        assert_eq!(hs2, hs);
        assert_eq!(cs2, cs);
        for cut in 0..bytes.len() {
            assert!(decode_hard_state(&bytes[..cut]).is_err(), "prefix {cut}");
        }
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            decode_hard_state(&bad),
            Err(FileError::Checksum { .. })
        ));
        assert!(matches!(
            decode_snapshot(&bytes),
            Err(FileError::BadMagic { .. })
        ));
    }

    #[test]
    fn snapshot_round_trips() {
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 12;
        snap.mut_metadata().term = 3;
        snap.mut_metadata().mut_conf_state().voters = vec![1];
        snap.data = bytes::Bytes::from_static(b"state bytes");
        let bytes = encode_snapshot(&snap);
        assert_eq!(decode_snapshot(&bytes).unwrap(), snap);
        for cut in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..cut]).is_err(), "prefix {cut}");
        }
    }

    /// Runs `body` on a fresh glommio executor, failing if it takes over 20 seconds.
    fn on_executor<F, Fut>(body: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let limit = std::time::Duration::from_secs(20);
                futures_lite::future::or(body(), async move {
                    glommio::timer::sleep(limit).await;
                    panic!("storage test took over {limit:?}");
                })
                .await
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn disk_log_appends_overwrites_and_reopens() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("meta");
        on_executor(move || async move {
            let (mut log, rec) = DiskLog::open(&dir).await.unwrap();
            assert!(rec.hard_state.is_none() && rec.snapshot.is_none());
            assert!(rec.entries.is_empty());
            log.append(&[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")])
                .await
                .unwrap();
            log.append(&[entry(3, 2, "C"), entry(4, 2, "d")])
                .await
                .unwrap();
            let hs = HardState {
                term: 2,
                vote: 1,
                commit: 3,
                ..Default::default()
            };
            let cs = ConfState {
                voters: vec![1],
                ..Default::default()
            };
            log.write_hard_state(&hs, &cs).await.unwrap();
            drop(log);

            let (_log, rec) = DiskLog::open(&dir).await.unwrap();
            assert_eq!(
                indexes_terms(&rec.entries),
                [(1, 1), (2, 1), (3, 2), (4, 2)]
            );
            assert_eq!(rec.entries[2].data.as_ref(), b"C");
            assert_eq!(rec.hard_state, Some((hs, cs)));
            assert!(rec.cut.is_none());
        });
    }

    #[test]
    fn disk_log_cuts_a_torn_tail_and_appends_after_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        on_executor(move || async move {
            let (mut log, _) = DiskLog::open(&dir).await.unwrap();
            log.append(&[entry(1, 1, "a"), entry(2, 1, "b")])
                .await
                .unwrap();
            drop(log);
            let path = dir.join(LOG_FILE);
            let whole = io::read_file(&path).await.unwrap().unwrap();
            let first = records(&[entry(1, 1, "a")]).len();
            // A torn second record: its header and part of its body.
            let torn = whole[..first + 10].to_vec();
            io::write_file_atomic(&dir, LOG_FILE, torn, true)
                .await
                .unwrap();

            let (mut log, rec) = DiskLog::open(&dir).await.unwrap();
            assert_eq!(indexes_terms(&rec.entries), [(1, 1)]);
            assert!(
                matches!(rec.cut, Some(TailDamage::Torn { position, .. }) if position == first as u64)
            );
            let len = io::read_file(&path).await.unwrap().unwrap().len();
            assert_eq!(len, first, "the file is truncated at the cut");
            log.append(&[entry(2, 2, "B")]).await.unwrap();
            drop(log);

            let (_log, rec) = DiskLog::open(&dir).await.unwrap();
            assert_eq!(indexes_terms(&rec.entries), [(1, 1), (2, 2)]);
            assert!(rec.cut.is_none());
        });
    }

    #[test]
    fn disk_log_snapshot_and_rewrite_compact_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        on_executor(move || async move {
            let (mut log, _) = DiskLog::open(&dir).await.unwrap();
            let all: Vec<Entry> = (1..=10).map(|i| entry(i, 1, "x")).collect();
            log.append(&all).await.unwrap();
            let mut snap = Snapshot::default();
            snap.mut_metadata().index = 7;
            snap.mut_metadata().term = 1;
            snap.data = bytes::Bytes::from_static(b"seven");
            log.write_snapshot(&snap).await.unwrap();
            // Before the rewrite (a crash here) the snapshot already hides entries up to 7.
            let (_, rec) = DiskLog::open(&dir).await.unwrap();
            assert_eq!(rec.entries.first().map(|e| e.index), Some(8));
            log.rewrite(&all[7..]).await.unwrap();
            log.append(&[entry(11, 2, "y")]).await.unwrap();
            drop(log);

            let (_log, rec) = DiskLog::open(&dir).await.unwrap();
            assert_eq!(rec.snapshot, Some(snap));
            assert_eq!(
                indexes_terms(&rec.entries),
                [(8, 1), (9, 1), (10, 1), (11, 2)]
            );
            let size = io::read_file(&dir.join(LOG_FILE))
                .await
                .unwrap()
                .unwrap()
                .len();
            assert_eq!(
                size,
                records(&rec.entries).len(),
                "only the remaining entries"
            );
        });
    }

    #[test]
    fn disk_log_refuses_a_damaged_hard_state() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        on_executor(move || async move {
            let (log, _) = DiskLog::open(&dir).await.unwrap();
            log.write_hard_state(&HardState::default(), &ConfState::default())
                .await
                .unwrap();
            let mut bytes = io::read_file(&dir.join(STATE_FILE)).await.unwrap().unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x40;
            bytes.push(0);
            io::write_file_atomic(&dir, STATE_FILE, bytes, true)
                .await
                .unwrap();
            let err = DiskLog::open(&dir)
                .await
                .err()
                .expect("damage must fail open");
            assert!(err.to_string().contains(STATE_FILE), "{err}");
        });
    }

    #[test]
    fn entries_after_snapshot_keep_only_a_matching_continuation() {
        let log = vec![entry(4, 1, ""), entry(5, 2, ""), entry(6, 2, "")];
        assert_eq!(
            indexes_terms(&after_snapshot(log.clone(), 5, 2)),
            [(6, 2)],
            "agrees at the snapshot index"
        );
        assert!(
            after_snapshot(log.clone(), 5, 3).is_empty(),
            "term differs at the snapshot index"
        );
        assert!(after_snapshot(log.clone(), 9, 3).is_empty(), "log older");
        assert_eq!(
            indexes_terms(&after_snapshot(log.clone(), 3, 1)),
            [(4, 1), (5, 2), (6, 2)],
            "log starts right after the snapshot"
        );
        assert!(
            after_snapshot(log, 2, 1).is_empty(),
            "log starts after a gap"
        );
    }
}
