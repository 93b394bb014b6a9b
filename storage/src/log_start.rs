//! Offset checkpoints, one small file each per partition directory:
//! - `log-start-offset`: offsets removed by DeleteRecords or retention stay removed across a
//!   restart even while their segment still exists;
//! - `cleaner-offset-checkpoint`: where the last cleaning pass ended, so a restart does not make
//!   the whole log look dirty (Kafka keeps the same per log). Only scheduling depends on it.
//!
//! Layout (12 bytes): the offset as a big-endian i64, then the CRC32C of those 8 bytes as a
//! big-endian u32. It is replaced atomically: written to a temporary file, synced, renamed over
//! the old one, and the directory synced.

use std::io::Write;
use std::path::Path;

use tracing::warn;

use crate::io::sync_dir;

pub const FILE: &str = "log-start-offset";
pub const CLEANER_FILE: &str = "cleaner-offset-checkpoint";

pub fn write(dir: &Path, offset: i64) -> std::io::Result<()> {
    write_named(dir, FILE, offset)
}

/// The checkpointed log start offset; `None` if there is none. A damaged checkpoint is reported
/// and ignored: the log then starts at its first segment, which keeps data rather than losing it.
pub fn read(dir: &Path) -> std::io::Result<Option<i64>> {
    read_named(dir, FILE)
}

pub fn write_named(dir: &Path, name: &str, offset: i64) -> std::io::Result<()> {
    let mut body = [0u8; 12];
    body[..8].copy_from_slice(&offset.to_be_bytes());
    let crc = crc32c::crc32c(&body[..8]);
    body[8..].copy_from_slice(&crc.to_be_bytes());
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// The checkpointed offset; `None` if there is none or it is damaged (reported).
pub fn read_named(dir: &Path, name: &str) -> std::io::Result<Option<i64>> {
    let path = dir.join(name);
    let body = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match decode(&body) {
        Some(offset) => Ok(Some(offset)),
        None => {
            warn!(path = %path.display(), "offset checkpoint is damaged; ignored");
            Ok(None)
        }
    }
}

fn decode(body: &[u8]) -> Option<i64> {
    let body: &[u8; 12] = body.try_into().ok()?;
    let offset = i64::from_be_bytes(body[..8].try_into().ok()?);
    let crc = u32::from_be_bytes(body[8..].try_into().ok()?);
    (crc32c::crc32c(&body[..8]) == crc && offset >= 0).then_some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), 1234).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(1234));
        write(dir.path(), 99_999).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(99_999));
        let path = dir.path().join(FILE);
        let mut body = std::fs::read(&path).unwrap();
        body[3] ^= 1;
        std::fs::write(&path, &body).unwrap();
        assert_eq!(read(dir.path()).unwrap(), None, "bit flip");
        std::fs::write(&path, &body[..11]).unwrap();
        assert_eq!(read(dir.path()).unwrap(), None, "short");
    }
}
