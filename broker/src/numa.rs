//! The machine's NUMA topology, read from sysfs, and shard placement on one node (`--numa-node`).
//!
//! A request for a partition another shard owns hops to that shard through its request queue;
//! when the two shards run on different nodes (sockets), the hop and the memory the request
//! touches cross the interconnect, which costs latency. Start-up logs which node each shard's
//! CPU is on and warns when the shards span nodes.
//!
//! Every function takes the sysfs root (`/sys` in production) so tests can point it at a
//! fixture.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use tracing::{info, warn};

/// Where sysfs is mounted.
pub const SYSFS_ROOT: &str = "/sys";

/// Under the sysfs root: one `nodeN` directory per online NUMA node, each with `cpulist` and
/// `distance`, beside `has_memory` (the nodes with memory of their own).
const NODE_DIR: &str = "devices/system/node";

/// Under the sysfs root: the online CPUs, the one node of a kernel built without NUMA support
/// (it has no node directory).
const CPU_ONLINE: &str = "devices/system/cpu/online";

/// Largest CPU id a CPU list may name. Kernels are built for at most 8192 CPUs today; a larger
/// id is a typo, and a range up to it would allocate without bound.
pub const CPU_ID_LIMIT: usize = 65_535;

/// Parses the Linux CPU list format (`0-3,8-11`, as in sysfs `cpulist` files and `taskset -c`)
/// into sorted, distinct CPU ids. Blank text is the empty list (a node without CPUs has an empty
/// `cpulist`). The message of an error names the bad part; callers say where the list came from.
pub fn parse_cpulist(text: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else {
            bail!("bad entry {part:?} (expected CPUs and ranges like 0-3,8-11)");
        };
        if a > b {
            bail!("range {part} is backwards");
        }
        if b > CPU_ID_LIMIT {
            bail!("{part}: CPU {b} is above the largest CPU id {CPU_ID_LIMIT}");
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The shortest CPU list naming `ids` (`0-3,8-11`), as sysfs and `taskset -c` write them.
pub fn format_cpulist(ids: &[usize]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if sorted[i] == start {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{}", sorted[i]);
        }
        i += 1;
    }
    out
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: usize,
    /// Its CPUs, sorted; empty for a node with memory only.
    pub cpus: Vec<usize>,
    /// The kernel's relative cost of reaching each node's memory from this one (10: local), in
    /// the order of [`Topology::nodes`]; empty when sysfs does not say.
    pub distances: Vec<u32>,
    /// Whether it has memory of its own: the memory of its CPUs' threads otherwise lives on
    /// other nodes.
    pub has_memory: bool,
}

/// The NUMA nodes of the machine, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// False when sysfs shows no NUMA nodes (a kernel without NUMA support): one node 0 then
    /// holds every CPU.
    pub numa: bool,
}

/// Reads a sysfs CPU list, naming the file in any error.
fn read_cpulist(path: &Path) -> Result<Vec<usize>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_cpulist(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// Reads a file that may be missing: `None` when it is.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

impl Topology {
    /// Reads the topology under the sysfs root `sys`. Without a node directory (a kernel
    /// without NUMA support) the machine is one node holding the online CPUs, or `fallback`
    /// (the process's affinity mask) when sysfs does not list those either.
    pub fn read(sys: &Path, fallback: &[usize]) -> Result<Topology> {
        let dir = sys.join(NODE_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Self::without_numa(sys, fallback)
            }
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<usize>().ok())
            {
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return Self::without_numa(sys, fallback);
        }
        ids.sort_unstable();
        // `has_memory` is a node list, in the CPU list format.
        let has_memory_path = dir.join("has_memory");
        let with_memory = read_optional(&has_memory_path)?
            .map(|t| parse_cpulist(&t).map_err(|e| anyhow!("{}: {e}", has_memory_path.display())))
            .transpose()?;
        let mut nodes = Vec::with_capacity(ids.len());
        for id in ids {
            let node_dir = dir.join(format!("node{id}"));
            let cpus = read_cpulist(&node_dir.join("cpulist"))?;
            let distance_path = node_dir.join("distance");
            let distances = match read_optional(&distance_path)? {
                None => Vec::new(),
                Some(text) => text
                    .split_whitespace()
                    .map(|d| {
                        d.parse::<u32>().map_err(|_| {
                            anyhow!(
                                "{}: bad distance {d:?} (expected numbers like 10 21)",
                                distance_path.display()
                            )
                        })
                    })
                    .collect::<Result<_>>()?,
            };
            let has_memory = with_memory.as_ref().is_none_or(|m| m.contains(&id));
            nodes.push(Node {
                id,
                cpus,
                distances,
                has_memory,
            });
        }
        Ok(Topology { nodes, numa: true })
    }

    fn without_numa(sys: &Path, fallback: &[usize]) -> Result<Topology> {
        let online = sys.join(CPU_ONLINE);
        let cpus = match read_optional(&online)? {
            Some(text) => parse_cpulist(&text).map_err(|e| anyhow!("{}: {e}", online.display()))?,
            None => fallback.to_vec(),
        };
        Ok(Topology {
            nodes: vec![Node {
                id: 0,
                cpus,
                distances: Vec::new(),
                has_memory: true,
            }],
            numa: false,
        })
    }

    /// The node `cpu` belongs to.
    pub fn node_of(&self, cpu: usize) -> Option<usize> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map(|n| n.id)
    }

    /// The distinct nodes `cpus` are on, by id.
    pub fn nodes_of(&self, cpus: &[usize]) -> Vec<usize> {
        let mut ids: Vec<usize> = cpus.iter().filter_map(|c| self.node_of(*c)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Every node with its CPUs, e.g. `node 0 (CPUs 0-7,16-23), node 1 (CPUs 8-15,24-31)`.
    fn list(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            if !out.is_empty() {
                out.push_str(", ");
            }
            let cpus = if n.cpus.is_empty() {
                "no CPUs".to_string()
            } else {
                format!("CPUs {}", format_cpulist(&n.cpus))
            };
            let _ = write!(out, "node {} ({cpus})", n.id);
        }
        out
    }

    /// The nodes for the start-up log: CPUs, distances and nodes without memory, e.g.
    /// `node0 CPUs 0-7,16-23 distances 10 21; node1 CPUs 8-15,24-31 distances 21 10`.
    pub fn describe(&self) -> String {
        if !self.numa {
            return format!(
                "one node: the kernel shows no NUMA nodes; CPUs {}",
                format_cpulist(&self.nodes[0].cpus)
            );
        }
        let mut out = String::new();
        for n in &self.nodes {
            if !out.is_empty() {
                out.push_str("; ");
            }
            let _ = write!(out, "node{} CPUs {}", n.id, format_cpulist(&n.cpus));
            if n.cpus.is_empty() {
                out.push_str("none");
            }
            if self.nodes.len() > 1 && !n.distances.is_empty() {
                out.push_str(" distances");
                for d in &n.distances {
                    let _ = write!(out, " {d}");
                }
            }
            if !n.has_memory {
                out.push_str(" (no memory: its CPUs use other nodes' memory)");
            }
        }
        out
    }

    /// Which node each shard's CPU is on, shard `i` running on `cpus[i]`, grouped by node, e.g.
    /// `node0: shards 0-3 on CPUs 0-3; node1: shards 4-7 on CPUs 8-11`.
    pub fn describe_shards(&self, cpus: &[usize]) -> String {
        let mut groups: Vec<(Option<usize>, Vec<usize>, Vec<usize>)> = Vec::new();
        for (shard, cpu) in cpus.iter().enumerate() {
            let node = self.node_of(*cpu);
            match groups.iter_mut().find(|g| g.0 == node) {
                Some(g) => {
                    g.1.push(shard);
                    g.2.push(*cpu);
                }
                None => groups.push((node, vec![shard], vec![*cpu])),
            }
        }
        let mut out = String::new();
        for (node, shards, cpus) in groups {
            if !out.is_empty() {
                out.push_str("; ");
            }
            let _ = match node {
                Some(n) => write!(out, "node{n}: "),
                None => write!(out, "no node: "),
            };
            let _ = write!(
                out,
                "shard{} {} on CPU{} {}",
                if shards.len() == 1 { "" } else { "s" },
                format_cpulist(&shards),
                if cpus.len() == 1 { "" } else { "s" },
                format_cpulist(&cpus)
            );
        }
        out
    }

    /// The CPUs for the shards of `--numa-node node`: the node's CPUs that are in `allowed`
    /// (the process's affinity mask), the first `cores` of them when given. An error says
    /// what is wrong and what to do; the caller prefixes the flag or key it came from.
    pub fn select(
        &self,
        node: usize,
        allowed: &[usize],
        cores: Option<usize>,
    ) -> Result<Vec<usize>> {
        let Some(n) = self.nodes.iter().find(|n| n.id == node) else {
            if self.numa {
                bail!("no such NUMA node; this machine has {}", self.list());
            }
            bail!(
                "no such NUMA node; the kernel shows no NUMA nodes, so the machine is one node: {}",
                self.list()
            );
        };
        if n.cpus.is_empty() {
            bail!(
                "node {node} has no CPUs (memory only); choose a node with CPUs: {}",
                self.list()
            );
        }
        let cpus: Vec<usize> = n
            .cpus
            .iter()
            .copied()
            .filter(|c| allowed.contains(c))
            .collect();
        if cpus.is_empty() {
            let usable: Vec<String> = self
                .nodes
                .iter()
                .filter(|m| m.cpus.iter().any(|c| allowed.contains(c)))
                .map(|m| m.id.to_string())
                .collect();
            bail!(
                "none of node {node}'s CPUs ({}) are in this process's affinity mask ({}); start the broker with a mask that includes them (taskset -c {}, or CPUAffinity= in its service unit), or choose a node the mask covers: {}",
                format_cpulist(&n.cpus),
                format_cpulist(allowed),
                format_cpulist(&n.cpus),
                if usable.is_empty() {
                    "none".to_string()
                } else {
                    usable.join(", ")
                }
            );
        }
        match cores {
            Some(0) => bail!("--cores must be at least 1"),
            Some(k) if k > cpus.len() => bail!(
                "node {node} has only {} CPUs in this process's affinity mask ({}), fewer than --cores {k}",
                cpus.len(),
                format_cpulist(&cpus)
            ),
            Some(k) => Ok(cpus[..k].to_vec()),
            None => Ok(cpus),
        }
    }
}

/// Logs, at start-up, the NUMA nodes and the node each shard's CPU (`cpus[i]` for shard `i`) is
/// on, and warns when the shards span nodes. `allowed` stands for every CPU when sysfs lists
/// none. A topology that cannot be read is a warning: it only informs placement.
pub fn log_placement(sys: &Path, cpus: &[usize], allowed: &[usize]) {
    let topology = match Topology::read(sys, allowed) {
        Ok(t) => t,
        Err(e) => {
            warn!(
                "cannot read the NUMA topology, so which node each shard runs on is unknown: {e:#}"
            );
            return;
        }
    };
    info!(
        nodes = %topology.describe(),
        shards = %topology.describe_shards(cpus),
        "NUMA topology"
    );
    let spanned = topology.nodes_of(cpus);
    if spanned.len() > 1 {
        let list: Vec<String> = spanned.iter().map(|n| n.to_string()).collect();
        warn!(
            "the shards span NUMA nodes {}: a request for a partition another shard owns hops to that shard, and a hop between nodes crosses the interconnect and touches the other node's memory, which costs latency; to keep every shard on one node start with --numa-node N (one broker per node), with --cores K for fewer shards",
            list.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/numa")
            .join(name)
    }

    #[test]
    fn cpulists_parse_and_format() {
        assert_eq!(
            parse_cpulist("0-3,8-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 9, 10, 11]
        );
        assert_eq!(parse_cpulist(" 5 , 2-3,3").unwrap(), vec![2, 3, 5]);
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(format_cpulist(&[11, 0, 1, 2, 3, 8, 9, 10, 5]), "0-3,5,8-11");
        assert_eq!(format_cpulist(&[]), "");
        for bad in [
            "4-2",
            "0-x",
            "a",
            "0-3:2/4",
            "1-",
            &format!("0-{}", CPU_ID_LIMIT + 1),
        ] {
            assert!(parse_cpulist(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn two_sockets() {
        let t = Topology::read(&fixture("two-socket"), &[]).unwrap();
        assert!(t.numa);
        assert_eq!(t.nodes.len(), 2);
        let expect0: Vec<usize> = (0..8).chain(16..24).collect();
        let expect1: Vec<usize> = (8..16).chain(24..32).collect();
        assert_eq!(t.nodes[0].cpus, expect0);
        assert_eq!(t.nodes[1].cpus, expect1);
        assert_eq!(t.nodes[0].distances, vec![10, 21]);
        assert_eq!(t.nodes[1].distances, vec![21, 10]);
        assert!(t.nodes.iter().all(|n| n.has_memory));
        assert_eq!(t.node_of(17), Some(0));
        assert_eq!(t.node_of(24), Some(1));
        assert_eq!(t.node_of(32), None);
        assert_eq!(
            t.describe(),
            "node0 CPUs 0-7,16-23 distances 10 21; node1 CPUs 8-15,24-31 distances 21 10"
        );
        // Four shards over both sockets.
        let cpus = [0, 1, 8, 9];
        assert_eq!(t.nodes_of(&cpus), vec![0, 1]);
        assert_eq!(
            t.describe_shards(&cpus),
            "node0: shards 0-1 on CPUs 0-1; node1: shards 2-3 on CPUs 8-9"
        );
        assert_eq!(t.describe_shards(&[16]), "node0: shard 0 on CPU 16");
    }

    #[test]
    fn node_selection_keeps_to_the_affinity_mask() {
        let t = Topology::read(&fixture("two-socket"), &[]).unwrap();
        let all: Vec<usize> = (0..32).collect();
        assert_eq!(
            t.select(1, &all, None).unwrap(),
            (8..16).chain(24..32).collect::<Vec<_>>()
        );
        // A mask that leaves out node 1's first CPUs and its hyperthreads.
        let mask: Vec<usize> = (0..8).chain(12..16).collect();
        assert_eq!(t.select(1, &mask, None).unwrap(), vec![12, 13, 14, 15]);
        assert_eq!(t.select(1, &mask, Some(2)).unwrap(), vec![12, 13]);
        let e = t.select(1, &mask, Some(5)).unwrap_err().to_string();
        assert!(
            e.contains("node 1 has only 4 CPUs in this process's affinity mask (12-15), fewer than --cores 5"),
            "{e}"
        );
        // A mask holding node 0's CPUs only.
        let e = t.select(1, &[0, 1, 2], None).unwrap_err().to_string();
        assert!(
            e.contains("none of node 1's CPUs (8-15,24-31)")
                && e.contains("affinity mask (0-2)")
                && e.contains("taskset -c 8-15,24-31")
                && e.contains("covers: 0"),
            "{e}"
        );
        let e = t.select(7, &all, None).unwrap_err().to_string();
        assert!(
            e.contains("no such NUMA node")
                && e.contains("node 0 (CPUs 0-7,16-23), node 1 (CPUs 8-15,24-31)"),
            "{e}"
        );
        assert!(t.select(0, &all, Some(0)).is_err());
    }

    #[test]
    fn single_node_and_memory_only_nodes() {
        let t = Topology::read(&fixture("single-node"), &[]).unwrap();
        assert!(t.numa);
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].cpus, vec![0, 1, 2, 3]);
        assert_eq!(t.describe(), "node0 CPUs 0-3");
        assert_eq!(t.select(0, &[0, 1, 2, 3], Some(3)).unwrap(), vec![0, 1, 2]);
        assert_eq!(t.nodes_of(&[0, 1, 2, 3]), vec![0]);

        // Node 1: CPUs without memory; node 2: memory without CPUs.
        let t = Topology::read(&fixture("memory-less"), &[]).unwrap();
        assert_eq!(t.nodes.len(), 3);
        assert!(t.nodes[0].has_memory && !t.nodes[1].has_memory && t.nodes[2].has_memory);
        assert!(t.nodes[2].cpus.is_empty());
        assert!(
            t.describe()
                .contains("node1 CPUs 2-3 distances 20 10 30 (no memory")
                && t.describe().ends_with("node2 CPUs none distances 30 30 10"),
            "{}",
            t.describe()
        );
        let e = t.select(2, &[0, 1, 2, 3], None).unwrap_err().to_string();
        assert!(e.contains("node 2 has no CPUs (memory only)"), "{e}");
    }

    #[test]
    fn without_a_node_directory_one_node_holds_every_cpu() {
        let t = Topology::read(&fixture("no-numa"), &[0]).unwrap();
        assert!(!t.numa);
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].cpus, (0..6).collect::<Vec<_>>());
        assert!(
            t.describe().contains("no NUMA nodes; CPUs 0-5"),
            "{}",
            t.describe()
        );
        assert_eq!(t.select(0, &[1, 2, 3], None).unwrap(), vec![1, 2, 3]);
        let e = t.select(1, &[1, 2, 3], None).unwrap_err().to_string();
        assert!(e.contains("one node: node 0 (CPUs 0-5)"), "{e}");
        // No sysfs at all: the CPUs given stand for the machine.
        let t = Topology::read(&fixture("no-such-root"), &[2, 3]).unwrap();
        assert!(!t.numa);
        assert_eq!(t.nodes[0].cpus, vec![2, 3]);
    }

    #[test]
    fn garbled_sysfs_files_are_named() {
        let e = format!(
            "{:#}",
            Topology::read(&fixture("garbled-cpulist"), &[]).unwrap_err()
        );
        assert!(
            e.contains("devices/system/node/node1/cpulist") && e.contains("\"4-x\""),
            "{e}"
        );
        let e = format!(
            "{:#}",
            Topology::read(&fixture("garbled-distance"), &[]).unwrap_err()
        );
        assert!(
            e.contains("devices/system/node/node0/distance") && e.contains("bad distance"),
            "{e}"
        );
    }
}
