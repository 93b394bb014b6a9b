//! `tributary-bench machine`: the physical limits a broker on this machine is held against,
//! measured without root — O_DIRECT sequential write and read bandwidth of the data directory's
//! filesystem, fdatasync latency, loopback TCP bandwidth, memcpy bandwidth and CRC32C bandwidth
//! on one stream, and from the last three the copy floor (see `copy_floor_cpu_s_per_gb`).
//! It also measures what a broker at light load meets: eight streams of paced 4 KiB `O_DSYNC`
//! writes (`dsync_streams`), the CPU a minimal server spends per durable request
//! (`request_floor`), and how much of a busy machine's CPU time the host steals.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

pub(crate) const ALIGN: usize = 4096;
const BLOCK: usize = 1 << 20;

/// Bytes copied, and checksummed, per pass: four times the largest last-level cache of the
/// machines this runs on, so that both measure memory, not cache.
const MEM_BUFFER: usize = 128 << 20;

/// Passes over the buffer per timed round.
const MEM_PASSES_PER_ROUND: usize = 4;

/// Timed rounds; the median round is reported, so one disturbed by other work does not count.
const MEM_ROUNDS: usize = 7;

/// A 4 KiB-aligned buffer without unsafe code: over-allocate and start at an aligned address.
pub(crate) struct Aligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Self {
        let buf = vec![0xA5u8; len + ALIGN];
        let start = (ALIGN - (buf.as_ptr() as usize % ALIGN)) % ALIGN;
        Aligned { buf, start, len }
    }
    pub(crate) fn slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    pub(crate) fn slice_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

pub fn measure(dir: &Path, size_mb: usize) -> Result<Value> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(".tributary-bench-machine");
    let total = size_mb * (1 << 20);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| {
            format!(
                "opening {} with O_DIRECT (is the filesystem O_DIRECT-capable?)",
                path.display()
            )
        })?;
    let buf = Aligned::new(BLOCK);
    eprintln!(
        "machine: writing {size_mb} MiB with O_DIRECT to {}",
        dir.display()
    );
    let t = Instant::now();
    let mut pos = 0;
    while pos < total {
        file.write_all_at(buf.slice(), pos as u64)?;
        pos += BLOCK;
    }
    file.sync_data()?;
    let write_mb_s = total as f64 / t.elapsed().as_secs_f64() / 1e6;
    eprintln!("machine: reading it back");
    let mut rbuf = Aligned::new(BLOCK);
    let t = Instant::now();
    let mut pos = 0;
    while pos < total {
        file.read_exact_at(rbuf.slice_mut(), pos as u64)?;
        pos += BLOCK;
    }
    let read_mb_s = total as f64 / t.elapsed().as_secs_f64() / 1e6;
    eprintln!("machine: 1000 fdatasyncs of 4 KiB writes");
    let small = Aligned::new(ALIGN);
    let mut sync_us = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    for i in 0..1000u64 {
        let t = Instant::now();
        file.write_all_at(small.slice(), i * ALIGN as u64)?;
        file.sync_data()?;
        sync_us.record((t.elapsed().as_micros() as u64).max(1))?;
    }
    drop(file);
    std::fs::remove_file(&path)?;
    eprintln!(
        "machine: {DSYNC_STREAMS} streams of O_DSYNC 4 KiB writes, {DSYNC_WRITES_PER_SEC}/s for {} s",
        DSYNC_RUN.as_secs()
    );
    let dsync = dsync_streams(dir)?;
    eprintln!(
        "machine: CPU steal with every CPU busy for {} s",
        BUSY_RUN.as_secs()
    );
    let busy_steal = steal_when_busy();
    eprintln!(
        "machine: the request floor, {} durable 1 KiB requests/s on loopback",
        crate::floor::FLOOR_REQUESTS_PER_SEC
    );
    let floor = crate::floor::request_floor(dir)?;
    eprintln!("machine: loopback TCP");
    let tcp_mb_s = loopback(2048)?;
    eprintln!("machine: memcpy and CRC32C of {} MiB", MEM_BUFFER >> 20);
    let (memcpy_gb_s, crc32c_gb_s) = memory_bandwidth();
    Ok(json!({
        "mode": "machine",
        "dir": dir.display().to_string(),
        "odirect_write_mb_per_sec": write_mb_s,
        "odirect_read_mb_per_sec": read_mb_s,
        "fdatasync_us": {"p50": sync_us.value_at_quantile(0.5), "p99": sync_us.value_at_quantile(0.99), "max": sync_us.max()},
        "dsync_streams": dsync,
        "cpu_steal_pct_when_busy": busy_steal,
        "request_floor": floor,
        "loopback_tcp_mb_per_sec": tcp_mb_s,
        "memcpy_gb_per_sec": memcpy_gb_s,
        "crc32c_gb_per_sec": crc32c_gb_s,
        "copy_floor_cpu_s_per_gb": copy_floor_cpu_s_per_gb(memcpy_gb_s, crc32c_gb_s, tcp_mb_s / 1e3),
        "git_sha": env!("TRIBUTARY_GIT_SHA"),
    }))
}

/// Concurrent write streams of `dsync_streams`, as a broker's partitions with write-through
/// segments are.
const DSYNC_STREAMS: usize = 8;

/// 4 KiB `O_DSYNC` writes per second over all streams: one 1 KiB message each, at the light
/// load the latency goal is set for.
const DSYNC_WRITES_PER_SEC: u64 = 5_000;

/// How long the paced streams run.
const DSYNC_RUN: Duration = Duration::from_secs(5);

/// How long `steal_when_busy` keeps every CPU spinning.
const BUSY_RUN: Duration = Duration::from_secs(3);

/// The light-load disk limit: `DSYNC_STREAMS` threads, each overwriting 4 KiB blocks of its own
/// preallocated `O_DIRECT | O_DSYNC` file at its share of `DSYNC_WRITES_PER_SEC`. Each write's
/// latency counts from when it was due, so a stall delays the writes queued behind it too, as
/// it delays a broker's acknowledgements; the share of CPU time the host stole meanwhile is
/// reported beside it.
fn dsync_streams(dir: &Path) -> Result<Value> {
    let per_stream = DSYNC_WRITES_PER_SEC / DSYNC_STREAMS as u64;
    let interval = Duration::from_secs(1) / per_stream as u32;
    let writes = per_stream * DSYNC_RUN.as_secs();
    let before = crate::cpu::machine_times();
    let start = Instant::now() + Duration::from_millis(100);
    let streams: Vec<_> = (0..DSYNC_STREAMS)
        .map(|i| {
            let path = dir.join(format!(".tributary-bench-dsync-{i}"));
            std::thread::spawn(move || -> Result<Histogram<u64>> {
                let hist = dsync_stream(&path, start, interval, writes);
                let _ = std::fs::remove_file(&path);
                hist
            })
        })
        .collect();
    let mut all = crate::load::new_histogram();
    for s in streams {
        let h = s
            .join()
            .map_err(|_| anyhow::anyhow!("an O_DSYNC stream panicked"))??;
        all.add(&h)?;
    }
    let steal = crate::cpu::steal_since(before);
    Ok(json!({
        "streams": DSYNC_STREAMS,
        "writes_per_sec": DSYNC_WRITES_PER_SEC,
        "write_us": {"p50": all.value_at_quantile(0.5), "p99": all.value_at_quantile(0.99), "p99_99": all.value_at_quantile(0.9999), "max": all.max()},
        "cpu_steal_pct": steal,
    }))
}

/// One stream of `dsync_streams`: `writes` paced writes from `start`, one every `interval`.
fn dsync_stream(
    path: &Path,
    start: Instant,
    interval: Duration,
    writes: u64,
) -> Result<Histogram<u64>> {
    let blocks = 256u64;
    let buf = Aligned::new(ALIGN);
    let file = dsync_file(path, blocks)?;
    let mut hist = crate::load::new_histogram();
    for i in 0..writes {
        let due = pace(start, interval, i);
        file.write_all_at(buf.slice(), (i % blocks) * ALIGN as u64)?;
        hist.record((due.elapsed().as_micros() as u64).max(1))?;
    }
    Ok(hist)
}

/// A file of `blocks` 4 KiB blocks, allocated and on disk first, opened for direct,
/// write-through overwrites (as a segment's zeros ahead are).
pub(crate) fn dsync_file(path: &Path, blocks: u64) -> Result<std::fs::File> {
    {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        f.write_all(&vec![0u8; blocks as usize * ALIGN])?;
        f.sync_all()?;
    }
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT | O_DSYNC", path.display()))
}

/// Sleeps until the `i`-th of a series paced every `interval` from `start` is due; when it was.
pub(crate) fn pace(start: Instant, interval: Duration, i: u64) -> Instant {
    let due = start + interval * i as u32;
    if let Some(wait) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    due
}

/// Percent of the machine's CPU time the host stole while a thread per CPU spun for
/// `BUSY_RUN`; `None` where `/proc/stat` cannot be read.
fn steal_when_busy() -> Option<f64> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let before = crate::cpu::machine_times();
    let end = Instant::now() + BUSY_RUN;
    let spinners: Vec<_> = (0..cpus)
        .map(|_| {
            std::thread::spawn(move || {
                let mut x = 0u64;
                while Instant::now() < end {
                    for i in 0..10_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                }
                x
            })
        })
        .collect();
    for s in spinners {
        let _ = s.join();
    }
    crate::cpu::steal_since(before)
}

/// The copy floor, in CPU-seconds per GB produced: the least CPU a broker must spend on each GB
/// it accepts — one copy of the payload (from the request into the log's buffer), one CRC32C
/// over it (validating the batch), and the kernel's copy out of the socket — as
/// `1/memcpy + 1/crc32c + 1/loopback`, each a bandwidth in GB/s. A broker's measured
/// `broker_cpu_s_per_gb` divided by this says how many such minimal passes its work costs.
/// The loopback term is the wall-clock rate of one sender and one receiver thread, a lower
/// bound on the kernel's CPU per GB (the two copies may run on two cores at once).
pub fn copy_floor_cpu_s_per_gb(memcpy_gb_s: f64, crc32c_gb_s: f64, loopback_gb_s: f64) -> f64 {
    1.0 / memcpy_gb_s + 1.0 / crc32c_gb_s + 1.0 / loopback_gb_s
}

/// The median of `rounds` timings of `pass` run `passes` times over `bytes`, in GB/s.
fn median_gb_per_sec(bytes: usize, mut pass: impl FnMut()) -> f64 {
    let mut rates: Vec<f64> = (0..MEM_ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..MEM_PASSES_PER_ROUND {
                pass();
            }
            (bytes * MEM_PASSES_PER_ROUND) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// memcpy bandwidth (bytes copied per second, each byte read once and written once) and CRC32C
/// bandwidth on one stream (one thread, one buffer, the `crc32c` crate the storage engine uses,
/// hardware-accelerated where the CPU has it), both in GB/s, medians of `MEM_ROUNDS` rounds.
fn memory_bandwidth() -> (f64, f64) {
    // Distinct non-zero bytes, written once before timing, so every page is backed and neither
    // the copy nor the checksum reads the shared zero page.
    let src: Vec<u8> = (0..MEM_BUFFER).map(|i| (i * 131 % 251) as u8 + 1).collect();
    let mut dst = vec![0u8; MEM_BUFFER];
    dst.copy_from_slice(&src);
    let memcpy = median_gb_per_sec(MEM_BUFFER, || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    });
    let mut crc = 0u32;
    let crc32c = median_gb_per_sec(MEM_BUFFER, || {
        crc = crc32c::crc32c_append(crc, std::hint::black_box(&src));
    });
    std::hint::black_box(crc);
    (memcpy, crc32c)
}

fn loopback(total_mb: usize) -> Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; BLOCK];
        let mut n = 0;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(n),
                k => n += k,
            }
        }
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    let buf = vec![0x5Au8; BLOCK];
    let t = Instant::now();
    for _ in 0..total_mb {
        s.write_all(&buf)?;
    }
    drop(s);
    let received = reader
        .join()
        .map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    Ok(received as f64 / t.elapsed().as_secs_f64() / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_floor_adds_the_seconds_per_gb_of_each_pass() {
        // 10 GB/s copy (0.1 s/GB) + 20 GB/s CRC (0.05) + 4 GB/s loopback (0.25).
        let f = copy_floor_cpu_s_per_gb(10.0, 20.0, 4.0);
        assert!((f - 0.4).abs() < 1e-12, "{f}");
    }

    #[test]
    fn median_ignores_one_disturbed_round() {
        let mut round = 0;
        let rate = median_gb_per_sec(1 << 20, || {
            round += 1;
            // One pass in the whole run stalls; the median round does not see it.
            if round == 3 {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        // A round without the stall copies nothing in almost no time: far above 1 GB/s.
        assert!(rate > 1.0, "{rate}");
    }
}
