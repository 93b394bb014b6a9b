//! Offset checkpoints, one small file each per partition directory:
//! - `log-start-offset`: offsets removed by DeleteRecords or retention stay removed across a
//!   restart even while their segment still exists;
//! - `cleaner-offset-checkpoint`: where the last cleaning pass ended, so a restart does not make
//!   the whole log look dirty (Kafka keeps the same per log). Only scheduling depends on it.
//!
//! Layout (12 bytes): the offset as a big-endian i64, then the CRC32C of those 8 bytes as a
//! big-endian u32. It is replaced atomically: written to a temporary file, synced, renamed over
//! the old one, and the directory synced.

use std::path::Path;

use tracing::warn;

pub const FILE: &str = "log-start-offset";
pub const CLEANER_FILE: &str = "cleaner-offset-checkpoint";

pub async fn write(dir: &Path, offset: i64) -> std::io::Result<()> {
    write_named(dir, FILE, offset).await
}

/// The checkpointed log start offset; `None` if there is none. A damaged checkpoint is reported
/// and ignored: the log then starts at its first segment, which keeps data rather than losing it.
pub async fn read(dir: &Path) -> std::io::Result<Option<i64>> {
    read_named(dir, FILE).await
}

pub async fn write_named(dir: &Path, name: &str, offset: i64) -> std::io::Result<()> {
    let mut body = [0u8; 12];
    body[..8].copy_from_slice(&offset.to_be_bytes());
    let crc = crc32c::crc32c(&body[..8]);
    body[8..].copy_from_slice(&crc.to_be_bytes());
    crate::io::write_file_atomic(dir, name, body.to_vec(), true).await
}

/// The checkpointed offset; `None` if there is none or it is damaged (reported).
pub async fn read_named(dir: &Path, name: &str) -> std::io::Result<Option<i64>> {
    let path = dir.join(name);
    let Some(body) = crate::io::read_file(&path).await? else {
        return Ok(None);
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
        let d = dir.path().to_path_buf();
        glommio::LocalExecutor::default().run(async move {
            assert_eq!(read(&d).await.unwrap(), None);
            write(&d, 1234).await.unwrap();
            assert_eq!(read(&d).await.unwrap(), Some(1234));
            write(&d, 99_999).await.unwrap();
            assert_eq!(read(&d).await.unwrap(), Some(99_999));
            assert!(
                !d.join(format!("{FILE}.tmp")).exists(),
                "renamed into place"
            );
            let path = d.join(FILE);
            let mut body = std::fs::read(&path).unwrap();
            body[3] ^= 1;
            std::fs::write(&path, &body).unwrap();
            assert_eq!(read(&d).await.unwrap(), None, "bit flip");
            std::fs::write(&path, &body[..11]).unwrap();
            assert_eq!(read(&d).await.unwrap(), None, "short");
        });
    }
}
