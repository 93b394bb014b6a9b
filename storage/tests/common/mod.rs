//! Test support shared by the storage integration tests: a glommio executor with its io primed
//! and a scratch data directory, and the segment files of a partition directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use glommio::LocalExecutorBuilder;
use tributary_storage::io::prime_executor_io;

/// Runs `f` on a fresh executor whose io-polling probe is primed, with a scratch data directory
/// that lives until the executor has finished.
pub fn on_executor<F, Fut>(f: F)
where
    F: FnOnce(PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            prime_executor_io(&path).await.unwrap();
            f(path).await;
            // Files dropped without an explicit close (a simulated crash) are closed by the
            // reactor on its next turn: give it one before the executor goes away.
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        })
        .expect("executor")
        .join()
        .expect("join");
}

/// The segment files of a partition directory, oldest first.
pub fn sorted_segments(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// The base offset a segment file is named by.
pub fn segment_base(path: &Path) -> i64 {
    path.file_stem().unwrap().to_string_lossy().parse().unwrap()
}

/// Every batch from the log start: its header and bytes.
pub async fn all_batches(
    p: &tributary_storage::Partition,
) -> Vec<(tributary_protocol::record_batch::BatchHeader, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    while offset < p.high_watermark() {
        let r = p.read(offset, 1 << 20).await.unwrap();
        let batches = tributary_protocol::record_batch::validate_all(&r.records).unwrap();
        let Some((_, last)) = batches.last() else {
            break;
        };
        offset = last.last_offset() + 1;
        out.extend(
            batches
                .iter()
                .map(|(at, h)| (*h, r.records[*at..*at + h.size()].to_vec())),
        );
    }
    out
}
