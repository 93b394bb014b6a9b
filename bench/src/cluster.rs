//! A three-node Tributary cluster on 127.0.0.1, run as child processes for `failover`: free
//! ports, one data directory and one log file per node, `kill -9`, SIGSTOP/SIGCONT, SIGTERM and
//! restart of one node, and a Drop guard that kills every node still running whether the run
//! ends in success, an error or a panic. It knows nothing of Kafka: finding leaders, followers,
//! controllers and ISRs is the caller's job.
//!
//! Signals other than SIGKILL go through the system's `kill` command: the crate forbids unsafe
//! code, and `libc::kill` is an unsafe call.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Nodes in the cluster: the smallest controller quorum that survives losing one.
pub const NODES: usize = 3;
/// How often `wait_exit` looks whether a terminated node has exited.
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A signal `signal` sends, by the name the `kill` command takes.
#[derive(Clone, Copy, Debug)]
pub enum Signal {
    /// Freeze the process: its sockets stay open, it answers nothing.
    Stop,
    /// Thaw a stopped process.
    Cont,
    /// Ask for a clean exit: the broker runs its controlled shutdown.
    Term,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Term => "TERM",
        }
    }
}

/// How a terminated node ended.
#[derive(Debug)]
pub enum Exit {
    /// It exited by itself within the timeout, after this long.
    Exited(ExitStatus, Duration),
    /// It was still running at the timeout and was killed with SIGKILL.
    Killed,
}

struct Node {
    id: i32,
    client_port: u16,
    controller_port: u16,
    child: Option<Child>,
    /// Sent SIGTERM and not waited for yet (`wait_exit`): its exit is expected, not a crash.
    terminating_since: Option<Instant>,
    /// A terminating node's exit as `check_alive` saw it, and how long after the SIGTERM, so
    /// the time of a shutdown is measured while the caller sleeps, not when it asks.
    exited: Option<(ExitStatus, Duration)>,
}

pub struct Cluster {
    broker: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
    voters: String,
    /// `KEY=VALUE` settings given to every node after the cluster's own.
    extra: Vec<String>,
    keep_dir: bool,
}

/// `n` distinct ports the kernel had free a moment ago. All listeners are held until every port
/// is picked, so the kernel cannot hand out one port twice; another process may still take one
/// before a node binds it, and then that node fails to start with a clear log line.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("binding 127.0.0.1:0 to find free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl Cluster {
    /// Creates `dir` (which must not exist yet) and starts the nodes in it.
    pub fn start(broker: &Path, dir: &Path, extra: &[String]) -> Result<Self> {
        if !broker.is_file() {
            bail!(
                "broker binary {} not found; build it with \
                 `cargo build --release -p tributary-broker --bin tributary` or pass --broker",
                broker.display()
            );
        }
        if dir.exists() {
            bail!(
                "{} already exists; remove it or pass another --dir (it is created and removed \
                 by the run)",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ports = free_ports(2 * NODES)?;
        let nodes: Vec<Node> = (0..NODES)
            .map(|i| Node {
                id: i as i32 + 1,
                client_port: ports[2 * i],
                controller_port: ports[2 * i + 1],
                child: None,
                terminating_since: None,
                exited: None,
            })
            .collect();
        let voters = nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            broker: broker.to_path_buf(),
            dir: dir.to_path_buf(),
            nodes,
            voters,
            extra: extra.to_vec(),
            keep_dir: false,
        };
        for id in 1..=NODES as i32 {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    /// The client listeners of all nodes, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `id`'s client listener.
    pub fn client_addr(&self, id: i32) -> Result<SocketAddr> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .with_context(|| format!("no node {id} in this cluster"))?;
        Ok(SocketAddr::from(([127, 0, 0, 1], node.client_port)))
    }

    pub fn log_path(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}.log"))
    }

    /// Leaves the directory (data and node logs) in place when the cluster is dropped.
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    fn node_mut(&mut self, id: i32) -> Result<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .with_context(|| format!("no node {id} in this cluster"))
    }

    fn spawn(&mut self, id: i32) -> Result<()> {
        let log_path = self.log_path(id);
        let mut log: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        writeln!(log, "=== tributary-bench: starting node {id} ===")?;
        let stderr = log.try_clone()?;
        let data_dir = self.dir.join(format!("node-{id}"));
        let voters = self.voters.clone();
        let extra = self.extra.clone();
        let broker = self.broker.clone();
        let node = self.node_mut(id)?;
        if node.child.is_some() {
            bail!("node {id} is already running");
        }
        if node.terminating_since.is_some() {
            bail!("node {id} was sent SIGTERM; wait for its exit (wait_exit) before starting it");
        }
        let mut cmd = Command::new(&broker);
        cmd.arg("--data-dir")
            .arg(&data_dir)
            .arg("--cpus")
            .arg(node_cpu(id).to_string())
            .arg("--set")
            .arg(format!("node.id={id}"))
            .arg("--set")
            .arg(format!("controller.quorum.voters={voters}"))
            .arg("--set")
            .arg(format!(
                "listeners=PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
                node.client_port, node.controller_port
            ))
            .arg("--set")
            .arg("metrics.listen=127.0.0.1:0");
        for kv in &extra {
            cmd.arg("--set").arg(kv);
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(stderr);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", broker.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// Sends SIGKILL to node `id` (no shutdown path runs) and reaps it.
    pub fn kill(&mut self, id: i32) -> Result<()> {
        let node = self.node_mut(id)?;
        let Some(mut child) = node.child.take() else {
            bail!("node {id} is not running");
        };
        node.terminating_since = None;
        // `Child::kill` is SIGKILL on Unix; it works on a stopped process too.
        child.kill().with_context(|| format!("killing node {id}"))?;
        child.wait().with_context(|| format!("reaping node {id}"))?;
        Ok(())
    }

    /// Starts node `id` again on its old data directory and ports.
    pub fn restart(&mut self, id: i32) -> Result<()> {
        self.spawn(id)
    }

    /// The ids of the nodes running now (a stopped node counts; a terminating one does not).
    pub fn running(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some() && n.terminating_since.is_none())
            .map(|n| n.id)
            .collect()
    }

    /// Sends `signal` to node `id` with the `kill` command. After `Signal::Term` the node's exit
    /// is expected: `check_alive` ignores it and `wait_exit` reaps it.
    pub fn signal(&mut self, id: i32, signal: Signal) -> Result<()> {
        let node = self.node_mut(id)?;
        let Some(child) = node.child.as_ref() else {
            bail!(
                "node {id} is not running; cannot send it SIG{}",
                signal.name()
            );
        };
        let pid = child.id().to_string();
        let status = Command::new("kill")
            .args(["-s", signal.name(), &pid])
            .status()
            .with_context(|| {
                format!(
                    "running `kill -s {} {pid}` for node {id}; is the `kill` command installed?",
                    signal.name()
                )
            })?;
        if !status.success() {
            bail!(
                "`kill -s {} {pid}` (node {id}) failed: {status}",
                signal.name()
            );
        }
        if matches!(signal, Signal::Term) {
            node.terminating_since = Some(Instant::now());
        }
        Ok(())
    }

    /// Waits until `timeout` after its SIGTERM for node `id` to exit, and reaps it (or takes
    /// the exit `check_alive` already reaped); past the timeout it is killed with SIGKILL
    /// instead, so a shutdown that hangs costs a bounded time.
    pub fn wait_exit(&mut self, id: i32, timeout: Duration) -> Result<Exit> {
        let node = self.node_mut(id)?;
        let Some(since) = node.terminating_since.take() else {
            bail!("node {id} was not sent SIGTERM; nothing to wait for");
        };
        if let Some((status, took)) = node.exited.take() {
            return Ok(Exit::Exited(status, took));
        }
        let Some(mut child) = node.child.take() else {
            bail!("node {id} is not running");
        };
        let deadline = since + timeout;
        loop {
            if let Some(status) = child
                .try_wait()
                .with_context(|| format!("waiting for node {id} to exit"))?
            {
                return Ok(Exit::Exited(status, since.elapsed()));
            }
            if Instant::now() >= deadline {
                child.kill().with_context(|| format!("killing node {id}"))?;
                child.wait().with_context(|| format!("reaping node {id}"))?;
                return Ok(Exit::Killed);
            }
            std::thread::sleep(EXIT_POLL_INTERVAL);
        }
    }

    /// Fails if a node that should be running has exited, naming its log.
    pub fn check_alive(&mut self) -> Result<()> {
        let mut dead = None;
        for node in &mut self.nodes {
            let Some(child) = node.child.as_mut() else {
                continue;
            };
            let Some(status) = child.try_wait()? else {
                continue;
            };
            node.child = None;
            if let Some(since) = node.terminating_since {
                node.exited = Some((status, since.elapsed()));
            } else {
                dead = Some((node.id, status));
                break;
            }
        }
        if let Some((id, status)) = dead {
            bail!(
                "node {id} exited on its own ({status}); see {}",
                self.log_path(id).display()
            );
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if self.keep_dir {
            eprintln!("node data and logs kept in {}", self.dir.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

/// The CPU node `id`'s one shard runs on: the nodes spread over this process's CPUs, as on
/// separate machines, instead of all taking the first one (`--cores 1` would pin every node
/// to it, and three brokers sharing one CPU under full load fall behind each other).
fn node_cpu(id: i32) -> usize {
    let cpus = allowed_cpus();
    let i = usize::try_from(id.max(1) - 1).unwrap_or(0);
    cpus[i % cpus.len()]
}

/// This process's CPUs, from `Cpus_allowed_list` in /proc/self/status (`0-3,6`); CPU 0 when it
/// cannot be read.
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("0");
    let cpus = parse_cpu_list(list.trim());
    if cpus.is_empty() {
        vec![0]
    } else {
        cpus
    }
}

fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<usize>(), hi.trim().parse::<usize>()) {
            cpus.extend(lo..=hi);
        }
    }
    cpus
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_linux_writes_them() {
        assert_eq!(parse_cpu_list("0-1"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-4,7"), vec![0, 2, 3, 4, 7]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
    }
}
