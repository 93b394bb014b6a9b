//! `tributary-bench machine`: the physical limits a broker on this machine is held against,
//! measured without root — O_DIRECT sequential write and read bandwidth of the data directory's
//! filesystem, fdatasync latency, loopback TCP bandwidth.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

const ALIGN: usize = 4096;
const BLOCK: usize = 1 << 20;

/// A 4 KiB-aligned buffer without unsafe code: over-allocate and start at an aligned address.
struct Aligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let buf = vec![0xA5u8; len + ALIGN];
        let start = (ALIGN - (buf.as_ptr() as usize % ALIGN)) % ALIGN;
        Aligned { buf, start, len }
    }
    fn slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn slice_mut(&mut self) -> &mut [u8] {
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
    eprintln!("machine: loopback TCP");
    let tcp_mb_s = loopback(2048)?;
    Ok(json!({
        "mode": "machine",
        "dir": dir.display().to_string(),
        "odirect_write_mb_per_sec": write_mb_s,
        "odirect_read_mb_per_sec": read_mb_s,
        "fdatasync_us": {"p50": sync_us.value_at_quantile(0.5), "p99": sync_us.value_at_quantile(0.99), "max": sync_us.max()},
        "loopback_tcp_mb_per_sec": tcp_mb_s,
        "git_sha": env!("TRIBUTARY_GIT_SHA"),
    }))
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
