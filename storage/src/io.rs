//! The thin seam between the log and glommio's file API: opening segment files for direct I/O,
//! syncing directories, and priming an executor's io-polling probe.

use std::path::Path;

use glommio::io::{DmaFile, OpenOptions};

/// Name of the small file every shard opens first; see [`prime_executor_io`].
pub const IO_PROBE_FILE: &str = ".io-probe";
const IO_PROBE_BYTES: usize = 4096;

/// glommio decides whether a filesystem supports io-polled reads from the first `DmaFile` an
/// executor opens; if that file is empty the probe misfires and every later DMA read on the
/// executor fails with EOPNOTSUPP. So each shard opens a non-empty file on the data filesystem
/// before any segment.
pub async fn prime_executor_io(data_dir: &Path) -> std::io::Result<()> {
    let path = data_dir.join(IO_PROBE_FILE);
    let ok = std::fs::metadata(&path).map(|m| m.len() as usize >= IO_PROBE_BYTES);
    if !matches!(ok, Ok(true)) {
        std::fs::write(&path, vec![0u8; IO_PROBE_BYTES])?;
    }
    let file = DmaFile::open(&path).await.map_err(std::io::Error::from)?;
    let read = file
        .read_at(0, IO_PROBE_BYTES)
        .await
        .map_err(std::io::Error::from)?;
    assert_eq!(
        read.len(),
        IO_PROBE_BYTES,
        "probe file shorter than written"
    );
    file.close().await.map_err(std::io::Error::from)?;
    Ok(())
}

/// Opens (creating if asked) a segment file for direct reads and writes.
pub async fn open_segment(path: &Path, create: bool) -> std::io::Result<DmaFile> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .dma_open(path)
        .await
        .map_err(std::io::Error::from)
}

/// Makes a directory entry change (a created, renamed or removed file) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
