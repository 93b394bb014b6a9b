//! The request floor: the CPU a minimal server on this machine spends per durable request at
//! the light load the broker's goals are set for. One blocking thread serves one loopback TCP
//! connection: it reads each 1 KiB request, copies it into a 4 KiB block, overwrites that
//! block of one of eight preallocated `O_DIRECT | O_DSYNC` files (a broker's partitions,
//! written through), and writes an 8-byte acknowledgement. A client sends the requests paced
//! at `FLOOR_REQUESTS_PER_SEC` without waiting for the acknowledgements, as a producer with
//! requests in flight does. No parsing, no checksum, no response framing: a broker's CPU per
//! message at the same rate, divided by this, is how much its own work costs beyond the
//! kernel's wake-ups, copies and the write.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::machine::{dsync_file, pace, Aligned, ALIGN};

/// Requests per second: 1 KiB messages, one request each, as at the broker's light-load goal.
pub const FLOOR_REQUESTS_PER_SEC: u64 = 5_000;

/// How long the paced requests run.
const FLOOR_RUN: Duration = Duration::from_secs(5);

/// Files the requests are spread over, round robin.
const FLOOR_FILES: usize = 8;

/// 4 KiB blocks per file, overwritten in turn.
const FLOOR_FILE_BLOCKS: u64 = 256;

const REQUEST_BYTES: usize = 1024;
const ACK_BYTES: usize = 8;

/// Runs the floor's server and client in `dir`; the server thread's CPU per request and the
/// client's acknowledgement latency, counted from each request's due time.
pub fn request_floor(dir: &Path) -> Result<Value> {
    let floor = run(dir, FLOOR_REQUESTS_PER_SEC, FLOOR_RUN)?;
    let requests = floor.requests as f64;
    Ok(json!({
        "requests_per_sec": FLOOR_REQUESTS_PER_SEC,
        "server_cpu_us_per_request": floor.server_cpu_s * 1e6 / requests,
        "server_cores": floor.server_cpu_s / FLOOR_RUN.as_secs_f64(),
        "ack_us": {"p50": floor.ack_us.value_at_quantile(0.5), "p99": floor.ack_us.value_at_quantile(0.99), "max": floor.ack_us.max()},
    }))
}

/// What one run of the floor measured.
struct Floor {
    requests: u64,
    server_cpu_s: f64,
    ack_us: Histogram<u64>,
}

/// The floor at `rate` requests per second for `length`.
fn run(dir: &Path, rate: u64, length: Duration) -> Result<Floor> {
    let paths: Vec<PathBuf> = (0..FLOOR_FILES)
        .map(|i| dir.join(format!(".tributary-bench-floor-{i}")))
        .collect();
    let files = paths
        .iter()
        .map(|p| dsync_file(p, FLOOR_FILE_BLOCKS))
        .collect::<Result<Vec<_>>>()?;
    let requests = (rate as f64 * length.as_secs_f64()) as u64;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || serve(&listener, &files, requests));
    let writer = TcpStream::connect(addr)?;
    writer.set_nodelay(true)?;
    let reader = writer.try_clone()?;
    let interval = Duration::from_secs(1) / rate as u32;
    let start = Instant::now() + Duration::from_millis(100);
    let acks = std::thread::spawn(move || read_acks(reader, start, interval, requests));
    send_requests(writer, start, interval, requests)?;
    let ack_us = acks
        .join()
        .map_err(|_| anyhow::anyhow!("the request floor's acknowledgement reader panicked"))??;
    let server_cpu_s = server
        .join()
        .map_err(|_| anyhow::anyhow!("the request floor's server panicked"))??;
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    Ok(Floor {
        requests,
        server_cpu_s,
        ack_us,
    })
}

/// Serves `requests` requests on the first connection; the thread's CPU seconds meanwhile.
fn serve(listener: &TcpListener, files: &[File], requests: u64) -> Result<f64> {
    let (mut conn, _) = listener.accept()?;
    conn.set_nodelay(true)?;
    let before = crate::cpu::thread_cpu_s()?;
    let mut block = Aligned::new(ALIGN);
    let mut request = [0u8; REQUEST_BYTES];
    let ack = [0u8; ACK_BYTES];
    for i in 0..requests {
        conn.read_exact(&mut request)?;
        block.slice_mut()[..REQUEST_BYTES].copy_from_slice(&request);
        let file = &files[i as usize % FLOOR_FILES];
        let at = (i / FLOOR_FILES as u64) % FLOOR_FILE_BLOCKS * ALIGN as u64;
        file.write_all_at(block.slice(), at)?;
        conn.write_all(&ack)?;
    }
    Ok(crate::cpu::thread_cpu_s()? - before)
}

fn send_requests(mut conn: TcpStream, start: Instant, interval: Duration, n: u64) -> Result<()> {
    let request = [0x5Au8; REQUEST_BYTES];
    for i in 0..n {
        pace(start, interval, i);
        conn.write_all(&request)?;
    }
    Ok(())
}

fn read_acks(
    mut conn: TcpStream,
    start: Instant,
    interval: Duration,
    n: u64,
) -> Result<Histogram<u64>> {
    let mut hist = crate::load::new_histogram();
    let mut ack = [0u8; ACK_BYTES];
    for i in 0..n {
        conn.read_exact(&mut ack)?;
        let due = start + interval * i as u32;
        hist.record((due.elapsed().as_micros() as u64).max(1))?;
    }
    Ok(hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_is_written_and_acknowledged_and_the_server_cpu_counted() {
        let dir = std::env::temp_dir().join(format!("bench-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let floor = run(&dir, 1_000, Duration::from_millis(300)).unwrap();
        assert_eq!(floor.requests, 300);
        assert_eq!(floor.ack_us.len(), 300, "one acknowledgement per request");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "the files are removed: {left:?}");
        std::fs::remove_dir(&dir).unwrap();
    }
}
