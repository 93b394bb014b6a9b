//! CPU accounting for a run: the CPU-seconds the broker process(es) (`--broker-pid`, repeatable
//! for a cluster) and this benchmark process spent between the start and the end of the measured
//! phase, read from `/proc/PID/stat` (fields 14 and 15, `utime` and `stime`, in clock ticks).
//!
//! io_uring worker threads (`iou-wrk-*`, and `iou-sqp-*` for SQPOLL rings) are threads of the
//! process that owns the ring: the kernel creates them with `CLONE_THREAD`, so they belong to its
//! thread group, and `/proc/PID/stat` sums the CPU time of every thread of the group, those that
//! have already exited included. Adding them again would count them twice. This was checked
//! against a running broker: `/proc/PID/stat` was never below the sum of `/proc/PID/task/*/stat`
//! over its live threads, `iou-wrk-*` threads included (their CPU shows up in the process figure
//! and vanishes from the per-thread listing once an idle worker exits). Their share is reported
//! on its own, as `broker_io_uring_worker_cpu_s`: a lower bound, since a worker that was born and
//! exited within the run is in the process total but no longer listed.
//!
//! The clock tick (`sysconf(_SC_CLK_TCK)`) is read from the process's auxiliary vector
//! (`/proc/self/auxv`, entry `AT_CLKTCK`), which is where the C library gets it too, because the
//! crate forbids unsafe code and `libc::sysconf` is an unsafe call; 100, the value on every
//! Linux architecture, is assumed only if the vector cannot be read.
//!
//! On a virtual machine the host may stop a vCPU while it has work to run ("steal"). The run's
//! share of such time, over all CPUs, is read from the `cpu` line of `/proc/stat` (its eighth
//! value) and reported as `machine_steal_pct`: a tail that moves with it is the host's, not the
//! broker's.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// `AT_CLKTCK` in the auxiliary vector: the frequency `times()` and `/proc` count in.
const AT_CLKTCK: u64 = 17;

/// Clock ticks per second when the auxiliary vector does not say (Linux's `USER_HZ`).
const CLK_TCK_FALLBACK: u64 = 100;

/// Thread-name prefixes of io_uring's kernel-side threads in the process that owns the ring.
const IO_URING_THREAD_PREFIXES: &[&str] = &["iou-wrk-", "iou-sqp-"];

/// What this crate needs of one `/proc/PID/stat` or `/proc/PID/task/TID/stat` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// The command name (field 2), without its parentheses.
    pub comm: String,
    /// User-mode CPU time in clock ticks (field 14).
    pub utime: u64,
    /// Kernel-mode CPU time in clock ticks (field 15).
    pub stime: u64,
}

impl ProcStat {
    pub fn ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// Parses a `stat` line. The command name may hold spaces and parentheses of its own (a thread
/// can name itself `a) (b`), so it runs from the first `(` to the *last* `)`, and the numbered
/// fields are counted from there.
pub fn parse_stat(line: &str) -> Result<ProcStat> {
    let (open, close) = match (line.find('('), line.rfind(')')) {
        (Some(o), Some(c)) if o < c => (o, c),
        _ => bail!("not a /proc stat line (no parenthesised command name): {line:?}"),
    };
    let comm = line[open + 1..close].to_string();
    // After the name: field 3 (state) is index 0, so field N is index N - 3.
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        let s = rest
            .get(n - 3)
            .with_context(|| format!("stat line has no field {n}: {line:?}"))?;
        s.parse()
            .with_context(|| format!("stat field {n} is not a number ({s:?}): {line:?}"))
    };
    Ok(ProcStat {
        comm,
        utime: field(14)?,
        stime: field(15)?,
    })
}

/// The machine's CPU time so far, from the `cpu` line of `/proc/stat`: (all of it, stolen).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTimes {
    pub total: u64,
    pub steal: u64,
}

/// Parses `/proc/stat`'s aggregate `cpu` line: user nice system idle iowait irq softirq steal
/// (guest time is already inside user and nice, so it is not added again).
pub fn parse_machine_times(text: &str) -> Result<MachineTimes> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("/proc/stat has no aggregate \"cpu \" line")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().with_context(|| format!("/proc/stat: {line:?}")))
        .collect::<Result<_>>()?;
    if values.len() < 8 {
        bail!("/proc/stat's cpu line has no steal field (a kernel before 2.6.11?): {line:?}");
    }
    Ok(MachineTimes {
        total: values.iter().sum(),
        steal: values[7],
    })
}

/// The machine's CPU times now; `None` where `/proc/stat` cannot be read.
pub fn machine_times() -> Option<MachineTimes> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_times(&text).ok()
}

/// Percent of the machine's CPU time the host stole since `start` (a [`machine_times`]
/// reading); `None` if either reading is missing.
pub fn steal_since(start: Option<MachineTimes>) -> Option<f64> {
    steal_pct(start?, machine_times()?)
}

/// Percent of the machine's CPU time between two readings that the host stole.
pub fn steal_pct(start: MachineTimes, end: MachineTimes) -> Option<f64> {
    let total = end.total.checked_sub(start.total).filter(|t| *t > 0)?;
    let steal = end.steal.saturating_sub(start.steal);
    Some(100.0 * steal as f64 / total as f64)
}

fn read_stat(path: &Path) -> Result<ProcStat> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_stat(text.trim_end())
}

/// The `AT_CLKTCK` entry of an auxiliary vector: pairs of native-endian machine words (type,
/// value), ended by type 0.
pub fn clock_ticks_from_auxv(auxv: &[u8]) -> Option<u64> {
    let word = std::mem::size_of::<usize>();
    let read = |b: &[u8]| -> u64 {
        let mut w = [0u8; 8];
        if cfg!(target_endian = "little") {
            w[..word].copy_from_slice(b);
            u64::from_le_bytes(w)
        } else {
            w[8 - word..].copy_from_slice(b);
            u64::from_be_bytes(w)
        }
    };
    auxv.chunks_exact(2 * word)
        .map(|pair| (read(&pair[..word]), read(&pair[word..])))
        .take_while(|(kind, _)| *kind != 0)
        .find(|(kind, _)| *kind == AT_CLKTCK)
        .map(|(_, v)| v)
        .filter(|v| *v > 0)
}

/// Clock ticks per second, as `getconf CLK_TCK` reports it.
pub fn clock_ticks_per_sec() -> u64 {
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|a| clock_ticks_from_auxv(&a))
        .unwrap_or(CLK_TCK_FALLBACK)
}

/// The calling thread's CPU time so far (user and kernel), in seconds.
pub fn thread_cpu_s() -> Result<f64> {
    let ticks = read_stat(Path::new("/proc/thread-self/stat"))?.ticks();
    Ok(ticks as f64 / clock_ticks_per_sec() as f64)
}

/// One process's CPU at an instant: the thread group's total, and each live io_uring worker's.
#[derive(Debug, Clone, Default)]
struct Sample {
    ticks: u64,
    io_uring_threads: HashMap<String, u64>,
}

fn sample_pid(pid: u32) -> Result<Sample> {
    let dir = Path::new("/proc").join(pid.to_string());
    let ticks = read_stat(&dir.join("stat"))?.ticks();
    let mut io_uring_threads = HashMap::new();
    // Threads come and go while the directory is read; one that vanished counts as nothing.
    if let Ok(tasks) = std::fs::read_dir(dir.join("task")) {
        for task in tasks.flatten() {
            if let Ok(s) = read_stat(&task.path().join("stat")) {
                if IO_URING_THREAD_PREFIXES
                    .iter()
                    .any(|p| s.comm.starts_with(p))
                {
                    io_uring_threads.insert(task.file_name().to_string_lossy().into(), s.ticks());
                }
            }
        }
    }
    Ok(Sample {
        ticks,
        io_uring_threads,
    })
}

/// CPU spent over a run, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub broker_pids: Vec<u32>,
    /// The broker processes' CPU; `None` without `--broker-pid`, or if one of them exited.
    pub broker_cpu_s: Option<f64>,
    /// The part of `broker_cpu_s` seen in io_uring worker threads (a lower bound, see above).
    pub broker_io_uring_worker_cpu_s: Option<f64>,
    /// This process's CPU: the load generator, librdkafka's threads included.
    pub bench_cpu_s: f64,
    /// Percent of the machine's CPU time the host stole over the run (see the module doc).
    pub machine_steal_pct: Option<f64>,
}

impl Usage {
    /// The JSON fields a summary carries; per GB of `bytes`, the payload the run moved.
    pub fn to_json(&self, bytes: u64) -> Value {
        let gb = bytes as f64 / 1e9;
        let per_gb = |s: f64| if gb > 0.0 { Some(s / gb) } else { None };
        json!({
            "broker_pids": self.broker_pids,
            "broker_cpu_s": self.broker_cpu_s,
            "broker_cpu_s_per_gb": self.broker_cpu_s.and_then(per_gb),
            "broker_io_uring_worker_cpu_s": self.broker_io_uring_worker_cpu_s,
            "bench_cpu_s": self.bench_cpu_s,
            "bench_cpu_s_per_gb": per_gb(self.bench_cpu_s),
            "machine_steal_pct": self.machine_steal_pct,
        })
    }
}

/// Started at the beginning of a measured phase; `stop` at its end gives the `Usage` between.
pub struct Meter {
    hz: f64,
    pids: Vec<u32>,
    brokers: Vec<Sample>,
    bench: u64,
    machine: Option<MachineTimes>,
}

impl Meter {
    /// Fails if a `--broker-pid` names no readable process, before the run starts. A pid given
    /// twice is counted once.
    pub fn start(pids: &[u32]) -> Result<Self> {
        let mut pids = pids.to_vec();
        pids.sort_unstable();
        pids.dedup();
        let mut brokers = Vec::new();
        for &pid in &pids {
            let s = sample_pid(pid).with_context(|| {
                format!(
                    "--broker-pid {pid}: no such process, or not readable by this user; pass \
                     the process id of a running broker"
                )
            })?;
            brokers.push(s);
        }
        Ok(Meter {
            hz: clock_ticks_per_sec() as f64,
            pids,
            brokers,
            bench: read_stat(Path::new("/proc/self/stat"))?.ticks(),
            machine: machine_times(),
        })
    }

    /// The CPU used since `start`. A broker that exited meanwhile leaves the broker figures
    /// empty (with a warning) rather than failing the run that measured everything else.
    pub fn stop(&self) -> Usage {
        let bench_end = read_stat(Path::new("/proc/self/stat"))
            .map(|s| s.ticks())
            .unwrap_or(self.bench);
        let mut broker_ticks = 0u64;
        let mut io_uring_ticks = 0u64;
        let mut all_alive = true;
        for (pid, start) in self.pids.iter().zip(&self.brokers) {
            match sample_pid(*pid) {
                Ok(end) => {
                    broker_ticks += end.ticks.saturating_sub(start.ticks);
                    for (tid, t) in &end.io_uring_threads {
                        let before = start.io_uring_threads.get(tid).copied().unwrap_or(0);
                        io_uring_ticks += t.saturating_sub(before);
                    }
                }
                Err(e) => {
                    eprintln!("warning: broker CPU not reported: --broker-pid {pid}: {e:#}");
                    all_alive = false;
                }
            }
        }
        let measured = !self.pids.is_empty() && all_alive;
        Usage {
            broker_pids: self.pids.clone(),
            broker_cpu_s: measured.then(|| broker_ticks as f64 / self.hz),
            broker_io_uring_worker_cpu_s: measured.then(|| io_uring_ticks as f64 / self.hz),
            bench_cpu_s: bench_end.saturating_sub(self.bench) as f64 / self.hz,
            machine_steal_pct: steal_since(self.machine),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line's shape: pid, (comm), state, then fields 4.. — utime 1234, stime 567.
    fn line(comm: &str) -> String {
        format!("4242 ({comm}) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 3113 1000000 200 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0")
    }

    #[test]
    fn parses_utime_and_stime() {
        let s = parse_stat(&line("tributary")).expect("parses");
        assert_eq!(s.comm, "tributary");
        assert_eq!((s.utime, s.stime, s.ticks()), (1234, 567, 1801));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        for comm in ["iou-wrk-4242", "a b c", "x) (y", "((", ") 1 2 3 (", "))"] {
            let s = parse_stat(&line(comm)).expect("parses");
            assert_eq!(s.comm, comm);
            assert_eq!((s.utime, s.stime), (1234, 567), "{comm}");
        }
    }

    #[test]
    fn malformed_lines_are_errors_naming_what_is_missing() {
        let e = parse_stat("4242 tributary S 1 2 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no parenthesised command name"), "{e}");
        let e = parse_stat("4242 (t) S 1 2 3").unwrap_err().to_string();
        assert!(e.contains("no field 14"), "{e}");
        let bad = line("t").replace(" 1234 ", " x ");
        let e = parse_stat(&bad).unwrap_err().to_string();
        assert!(e.contains("field 14 is not a number"), "{e}");
    }

    #[test]
    fn this_process_stat_parses() {
        let s = read_stat(Path::new("/proc/self/stat")).expect("own stat");
        assert!(!s.comm.is_empty());
    }

    fn auxv(entries: &[(u64, u64)]) -> Vec<u8> {
        let word = std::mem::size_of::<usize>();
        let mut out = Vec::new();
        for (k, v) in entries {
            for x in [k, v] {
                let b = if cfg!(target_endian = "little") {
                    x.to_le_bytes()[..word].to_vec()
                } else {
                    x.to_be_bytes()[8 - word..].to_vec()
                };
                out.extend(b);
            }
        }
        out
    }

    #[test]
    fn clock_tick_comes_from_at_clktck_and_stops_at_at_null() {
        assert_eq!(
            clock_ticks_from_auxv(&auxv(&[(6, 4096), (17, 250), (0, 0)])),
            Some(250)
        );
        assert_eq!(
            clock_ticks_from_auxv(&auxv(&[(6, 4096), (0, 0), (17, 250)])),
            None
        );
        assert_eq!(clock_ticks_from_auxv(&auxv(&[(6, 4096)])), None);
        assert!(clock_ticks_per_sec() > 0);
    }

    /// The property the broker figure relies on: a thread's CPU is in its process's
    /// `/proc/PID/stat`, while the thread is alive and after it has exited.
    #[test]
    fn process_stat_includes_its_threads_cpu_live_and_exited() {
        let me = std::process::id();
        let before = sample_pid(me).expect("own sample").ticks;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // Spin until the thread alone has used 30 ticks (0.3 s at 100 Hz); bounded by time.
            let tid = std::fs::read_link("/proc/thread-self")
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .expect("thread id");
            let stat = format!("/proc/self/task/{tid}/stat");
            let start = std::time::Instant::now();
            let mut x = 0u64;
            let mut ticks = 0;
            while ticks < 30 && start.elapsed() < std::time::Duration::from_secs(20) {
                for i in 0..100_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                ticks = read_stat(Path::new(&stat)).expect("thread stat").ticks();
            }
            tx.send(ticks).expect("report");
            let _ = done_rx.recv();
        });
        let thread_ticks = rx.recv().expect("worker ran");
        assert!(thread_ticks >= 30, "the worker never used 30 ticks");
        let live = sample_pid(me).expect("own sample").ticks;
        // The process figure is scaled from the precise runtime, the thread's separately: allow
        // a tick or two of rounding.
        assert!(
            live - before + 2 >= thread_ticks,
            "live: {before} -> {live}, thread {thread_ticks}"
        );
        done_tx.send(()).expect("release");
        worker.join().expect("worker");
        let after = sample_pid(me).expect("own sample").ticks;
        assert!(
            after >= live,
            "an exited thread's CPU left the process total"
        );
    }

    #[test]
    fn steal_is_the_eighth_value_of_the_cpu_line_as_a_share_of_all() {
        let text = "cpu  100 5 50 800 10 2 3 30 7 0\ncpu0 50 2 25 400 5 1 1 15 3 0\nintr 1\n";
        let a = parse_machine_times(text).expect("parses");
        assert_eq!(
            a,
            MachineTimes {
                total: 1000,
                steal: 30
            }
        );
        let b = MachineTimes {
            total: 1200,
            steal: 80,
        };
        assert_eq!(steal_pct(a, b), Some(25.0));
        assert_eq!(steal_pct(b, b), None, "no time passed");
        let e = parse_machine_times("cpu  1 2 3 4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no steal field"), "{e}");
        assert!(parse_machine_times("intr 1\n").is_err());
        assert!(machine_times().is_some(), "this machine's /proc/stat");
    }

    #[test]
    fn a_pid_given_twice_is_counted_once() {
        let me = std::process::id();
        let m = Meter::start(&[me, me]).expect("own pid");
        assert_eq!(m.stop().broker_pids, vec![me]);
    }

    #[test]
    fn a_missing_broker_pid_is_refused_at_start() {
        // PIDs are below 2^22 on Linux; this one cannot exist.
        let e = Meter::start(&[u32::MAX])
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("--broker-pid 4294967295"), "{e}");
    }

    #[test]
    fn usage_per_gb_divides_by_the_payload_moved() {
        let u = Usage {
            broker_pids: vec![7],
            broker_cpu_s: Some(2.0),
            broker_io_uring_worker_cpu_s: Some(0.5),
            bench_cpu_s: 4.0,
            machine_steal_pct: Some(1.5),
        };
        let j = u.to_json(500_000_000);
        assert_eq!(j["broker_cpu_s_per_gb"], 4.0);
        assert_eq!(j["bench_cpu_s_per_gb"], 8.0);
        let j = u.to_json(0);
        assert!(j["broker_cpu_s_per_gb"].is_null());
        let none = Usage {
            broker_cpu_s: None,
            ..u
        };
        assert!(none.to_json(1_000_000_000)["broker_cpu_s_per_gb"].is_null());
    }
}
