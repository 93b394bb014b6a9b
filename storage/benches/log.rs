//! Storage engine benchmarks: durable sequential append with 1 KiB and 64 KiB batches, a cold
//! sequential read, recovery of a 1 GiB partition after a crash, and what an idle partition
//! costs. `ci/storage-bench` runs them beside fio on the same filesystem and reports ratios.
//!
//! The files live under `TRIBUTARY_BENCH_DIR` (default `target/storage-bench`), so they are on
//! the filesystem being measured. Reads are O_DIRECT: every read is cold, no page cache.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use glommio::LocalExecutorBuilder;
use tributary_protocol::record_batch::build_batch;
use tributary_storage::io::prime_executor_io;
use tributary_storage::{LogConfig, Partition};

/// The allocator the broker runs with (see broker/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Appends between `fdatasync`s: a group commit every MiB, as concurrent producers share one.
const SYNC_EVERY_BYTES: usize = 1 << 20;

fn bench_root() -> PathBuf {
    let dir = std::env::var_os("TRIBUTARY_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/storage-bench")
        });
    std::fs::create_dir_all(&dir).expect("bench directory");
    dir
}

/// Runs `f` on a fresh primed executor with a scratch directory under the bench root.
fn on_executor<T, F, Fut>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let dir = tempfile::tempdir_in(bench_root()).unwrap();
    in_dir(dir.path().to_path_buf(), f)
}

/// Runs `f` on a fresh primed executor working in `dir`.
fn in_dir<T, F, Fut>(dir: PathBuf, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    LocalExecutorBuilder::default()
        .io_memory(2 << 20)
        .spawn(move || async move {
            prime_executor_io(&dir).await.unwrap();
            let out = f(dir).await;
            // Files dropped without an explicit close (a simulated crash) are closed by the
            // reactor on its next turn: give it one before the executor goes away.
            glommio::timer::sleep(Duration::from_millis(20)).await;
            out
        })
        .expect("executor")
        .join()
        .expect("join")
}

/// A partition of `bytes` written once under the bench root for `name` and reused by every
/// sample; `clean` closes it cleanly, otherwise it is left as a crash leaves it.
fn prepared(name: &str, bytes: usize, config: LogConfig, clean: bool) -> PathBuf {
    let root = bench_root().join(name);
    let pdir = root.join("t-0");
    if !pdir.exists() {
        std::fs::create_dir_all(&root).unwrap();
        let p = pdir.clone();
        in_dir(root, move |_| async move {
            drop(write_partition(&p, bytes, config, clean).await);
        });
    }
    pdir
}

/// One batch of about `size` bytes: a single record.
fn batch_of(size: usize) -> Vec<u8> {
    let value = vec![0x5au8; size - 70];
    let b = build_batch(&[(None, Some(&value))], 1_700_000_000_000, None).to_vec();
    assert!(b.len().abs_diff(size) < 16, "batch is {} bytes", b.len());
    b
}

/// Appends `n` copies of `batch`, committing (`sync_to`) every `sync_every` of them and at the
/// end, with up to `in_flight` commits outstanding while appends go on — as a connection goes on
/// reading produce requests while earlier ones wait to be durable. Returns once all are durable.
async fn append(p: &Rc<Partition>, batch: &[u8], n: u64, sync_every: u64, in_flight: usize) {
    let mut pending = std::collections::VecDeque::new();
    for i in 1..=n {
        let out = p.append(batch).await.unwrap();
        // Between two produce requests a shard runs its other tasks (the write-ahead, flushes).
        futures_lite::future::yield_now().await;
        if i % sync_every == 0 || i == n {
            let (p, end) = (p.clone(), out.last_offset + 1);
            pending.push_back(glommio::spawn_local(async move { p.sync_to(end).await }));
            while pending.len() > in_flight {
                pending.pop_front().unwrap().await.unwrap();
            }
        }
    }
    for commit in pending {
        commit.await.unwrap();
    }
}

fn bench_append(c: &mut Criterion) {
    // Serial: each MiB waits for its fdatasync before the next is appended. Pipelined: up to
    // four MiB-commits outstanding, like a producer with several requests in flight.
    for (group, in_flight) in [("append_fdatasync", 0), ("append_fdatasync_pipelined", 4)] {
        let mut g = c.benchmark_group(group);
        g.sample_size(10).measurement_time(Duration::from_secs(10));
        for (name, size) in [("1KiB", 1024usize), ("64KiB", 64 << 10)] {
            let batch = batch_of(size);
            g.throughput(Throughput::Bytes(batch.len() as u64));
            let sync_every = (SYNC_EVERY_BYTES / size) as u64;
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let batch = batch.clone();
                    on_executor(move |dir| async move {
                        let p = Partition::open(dir.join("t-0"), LogConfig::DEFAULT)
                            .await
                            .unwrap();
                        let t = Instant::now();
                        append(&p, &batch, iters, sync_every, in_flight).await;
                        t.elapsed()
                    })
                })
            });
        }
        g.finish();
    }
}

/// A partition of `bytes` in 64 KiB batches, closed cleanly, under `dir`.
async fn write_partition(
    dir: &Path,
    bytes: usize,
    config: LogConfig,
    close: bool,
) -> Rc<Partition> {
    let p = Partition::open(dir.to_path_buf(), config).await.unwrap();
    let batch = batch_of(64 << 10);
    append(&p, &batch, (bytes / batch.len()) as u64, 16, 0).await;
    if close {
        p.close().await.unwrap();
    }
    p
}

fn bench_cold_read(c: &mut Criterion) {
    const BYTES: usize = 512 << 20;
    let mut g = c.benchmark_group("read_cold");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    g.throughput(Throughput::Bytes(BYTES as u64));
    let pdir = prepared("read_cold", BYTES, LogConfig::DEFAULT, true);
    g.bench_function("512MiB_1MiB_fetches", |b| {
        b.iter_custom(|iters| {
            let pdir = pdir.clone();
            in_dir(bench_root(), move |_| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let p = Partition::open(pdir.clone(), LogConfig::DEFAULT)
                        .await
                        .unwrap();
                    let t = Instant::now();
                    let mut offset = 0;
                    while offset < p.high_watermark() {
                        let r = p.read(offset, 1 << 20).await.unwrap();
                        let last = tributary_protocol::record_batch::validate_all(&r.records)
                            .unwrap()
                            .last()
                            .map(|(_, h)| h.last_offset())
                            .unwrap();
                        offset = last + 1;
                    }
                    total += t.elapsed();
                    p.close().await.unwrap();
                }
                total
            })
        })
    });
    g.finish();
    std::fs::remove_dir_all(bench_root().join("read_cold")).unwrap();
}

fn bench_recovery(c: &mut Criterion) {
    const BYTES: usize = 1 << 30;
    let mut g = c.benchmark_group("open_1GiB");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    // After kill -9 (no clean-shutdown marker): one 1 GiB active segment is scanned whole; in
    // 128 MiB segments only the active one is, the rest come from their index files.
    let cases = [
        ("after_crash_one_segment", 1u64 << 31, false),
        ("after_crash_128MiB_segments", 128 << 20, false),
        ("after_clean_shutdown", 1 << 31, true),
    ];
    for (name, segment_bytes, clean) in cases {
        let config = LogConfig {
            segment_bytes,
            ..LogConfig::DEFAULT
        };
        let pdir = prepared(name, BYTES, config, clean);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let pdir = pdir.clone();
                in_dir(bench_root(), move |_| async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        let p = Partition::open(pdir.clone(), config).await.unwrap();
                        total += t.elapsed();
                        assert!(p.high_watermark() > 0);
                        if clean {
                            p.close().await.unwrap();
                        }
                    }
                    total
                })
            })
        });
        std::fs::remove_dir_all(bench_root().join(name)).unwrap();
    }
    g.finish();
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Opens `IDLE_PARTITIONS` partitions holding one 1 KiB batch each and reports what one costs
/// in resident memory and file descriptors. Printed, not a criterion benchmark: it is a size.
fn idle_partition_footprint() {
    const IDLE_PARTITIONS: usize = 2000;
    let (rss, fds, secs) = on_executor(|dir| async move {
        let batch = batch_of(1024);
        let (rss0, fds0) = (resident_bytes(), open_fds());
        let t = Instant::now();
        let mut parts = Vec::with_capacity(IDLE_PARTITIONS);
        for i in 0..IDLE_PARTITIONS {
            let p = Partition::open(dir.join(format!("t-{i}")), LogConfig::DEFAULT)
                .await
                .unwrap();
            append(&p, &batch, 1, 1, 0).await;
            parts.push(p);
        }
        let open_secs = t.elapsed().as_secs_f64();
        let rss = resident_bytes().saturating_sub(rss0) / IDLE_PARTITIONS as u64;
        let fds = (open_fds() - fds0) as f64 / IDLE_PARTITIONS as f64;
        for p in parts {
            p.close().await.unwrap();
        }
        (rss, fds, open_secs)
    });
    println!(
        "idle_partition: {rss} bytes resident, {fds:.2} fds per partition ({IDLE_PARTITIONS} partitions created and written in {secs:.2} s)"
    );
}

criterion_group!(benches, bench_append, bench_cold_read, bench_recovery);

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if filter.is_empty() || filter.iter().any(|f| "idle_partition".contains(f.as_str())) {
        idle_partition_footprint();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
