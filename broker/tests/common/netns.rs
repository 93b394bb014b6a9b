//! Network namespaces a test creates so it can cut the links between brokers: one namespace per
//! node, each joined by a veth to a bridge in the root namespace that carries the test's own
//! (client) address, on a private /24 that no route of this machine uses. It owns their creation,
//! the partitions (blackhole routes inside the namespaces) and their removal — on drop, also
//! after a panic, and at start for what a test process that died left behind.
//!
//! It must not touch any link, namespace or route outside its naming scheme: a bridge `tpt<k>`
//! (its alias records the owning process id), namespaces `tpt<k>n<i>` and root-side veths
//! `tpt<k>v<i>`, where `k` is the third octet of `10.77.k.0/24`. Creating the bridge is the lock
//! on `k`: the kernel refuses a second link of the same name, so concurrent test processes (and
//! concurrent tests in one process) never share a subnet. Needs root and iproute2.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use super::cluster::Host;

/// The first two octets of every subnet this helper uses.
const NET_PREFIX: [u8; 2] = [10, 77];
/// Every name this helper creates starts with it; nothing else on the machine may.
const NAME_PREFIX: &str = "tpt";
/// Ports every node listens on inside its own namespace (no other process shares them).
const CLIENT_PORT: u16 = 9092;
const CONTROLLER_PORT: u16 = 9093;
const METRICS_PORT: u16 = 9644;
/// A node's address is `10.77.k.(HOST_BASE + i)` for node index `i` (0-based).
const HOST_BASE: u8 = 11;
/// How long a probe connection may take before the link counts as cut.
const PROBE_TIMEOUT_SECS: u32 = 2;

/// One test's namespaces, bridge and veths, removed on drop.
pub struct Netns {
    k: u8,
    nodes: usize,
    /// Blackhole routes in place: (namespace index, address it cannot reach).
    cut: Vec<(usize, Ipv4Addr)>,
}

/// Runs `ip` with `args`; its stdout, or the failure with its stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `ip` with `args` and fails the test if it fails.
fn ip_ok(args: &[&str]) -> String {
    ip(args).unwrap_or_else(|e| panic!("{e}"))
}

/// (network, prefix length) of each IPv4 route in every table of the root namespace.
fn routes() -> Vec<(u32, u32)> {
    const ROUTE_TYPES: [&str; 10] = [
        "local",
        "broadcast",
        "unicast",
        "blackhole",
        "unreachable",
        "prohibit",
        "multicast",
        "throw",
        "anycast",
        "nat",
    ];
    ip_ok(&["-4", "-o", "route", "show", "table", "all"])
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let mut dst = words.next()?;
            if ROUTE_TYPES.contains(&dst) {
                dst = words.next()?;
            }
            if dst == "default" {
                return None;
            }
            let (addr, len) = dst.split_once('/').unwrap_or((dst, "32"));
            Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len.parse().ok()?))
        })
        .collect()
}

/// True when some route of the machine overlaps `10.77.k.0/24`.
fn subnet_in_use(k: u8, routes: &[(u32, u32)]) -> bool {
    let ours = u32::from(Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], k, 0));
    routes.iter().any(|&(net, len)| {
        let len = len.min(24);
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        net & mask == ours & mask
    })
}

fn bridge(k: u8) -> String {
    format!("{NAME_PREFIX}{k}")
}

fn namespace(k: u8, i: usize) -> String {
    format!("{NAME_PREFIX}{k}n{i}")
}

fn veth(k: u8, i: usize) -> String {
    format!("{NAME_PREFIX}{k}v{i}")
}

/// The owner recorded in a bridge's alias.
const ALIAS_PREFIX: &str = "tributary-test-pid=";

/// Removes everything of subnet `k`: the processes left in its namespaces, the namespaces,
/// the veths and the bridge. Each step may find its object already gone.
fn teardown(k: u8, nodes: usize) {
    let listed = ip(&["netns", "list"]).unwrap_or_default();
    let ns_prefix = format!("{NAME_PREFIX}{k}n");
    for name in listed.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(i) = name.strip_prefix(&ns_prefix) else {
            continue;
        };
        if i.parse::<usize>().is_err() {
            continue;
        }
        // A broker a dead test started keeps its namespace alive (and a core busy).
        for pid in ip(&["netns", "pids", name]).unwrap_or_default().lines() {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
        let _ = ip(&["netns", "del", name]);
    }
    for i in 0..nodes.max(16) {
        let _ = ip(&["link", "del", &veth(k, i)]);
    }
    let _ = ip(&["link", "del", &bridge(k)]);
}

/// Removes the subnets whose owning test process is gone.
fn remove_leftovers() {
    let Ok(entries) = std::fs::read_dir("/sys/class/net") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(Ok(k)) = name.strip_prefix(NAME_PREFIX).map(str::parse::<u8>) else {
            continue;
        };
        let alias = std::fs::read_to_string(e.path().join("ifalias")).unwrap_or_default();
        // A bridge without an alias is being set up by a live test: leave it.
        let Some(Ok(pid)) = alias
            .trim()
            .strip_prefix(ALIAS_PREFIX)
            .map(str::parse::<u32>)
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            teardown(k, 0);
        }
    }
}

impl Netns {
    /// A bridge with the test's address and `nodes` namespaces joined to it, each with its
    /// loopback up and one address.
    pub fn new(nodes: usize) -> Self {
        assert!(nodes > 0 && nodes < 200, "{nodes} nodes");
        remove_leftovers();
        let pid = std::process::id();
        let start = (pid % 250) as u8;
        let routes = routes();
        let k = (0..=255u8)
            .map(|d| start.wrapping_add(d))
            .filter(|&k| !subnet_in_use(k, &routes))
            .find(|&k| ip(&["link", "add", &bridge(k), "type", "bridge"]).is_ok())
            .expect("a free 10.77.k.0/24 and bridge name");
        std::fs::write(
            format!("/sys/class/net/{}/ifalias", bridge(k)),
            format!("{ALIAS_PREFIX}{pid}"),
        )
        .expect("bridge alias");
        let me = Self {
            k,
            nodes,
            cut: Vec::new(),
        };
        let br = bridge(k);
        ip_ok(&["addr", "add", &format!("{}/24", me.client_ip()), "dev", &br]);
        ip_ok(&["link", "set", &br, "up"]);
        for i in 0..nodes {
            let ns = namespace(k, i);
            let v = veth(k, i);
            ip_ok(&["netns", "add", &ns]);
            ip_ok(&[
                "link", "add", &v, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip_ok(&["link", "set", &v, "master", &br, "up"]);
            let addr = format!("{}/24", me.node_ip(i));
            ip_ok(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip_ok(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        me
    }

    /// The root namespace's address on the bridge: where the test's clients connect from.
    pub fn client_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], self.k, 1)
    }

    pub fn node_ip(&self, i: usize) -> Ipv4Addr {
        let last = HOST_BASE + u8::try_from(i).expect("node index below 200");
        Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], self.k, last)
    }

    pub fn namespace(&self, i: usize) -> String {
        namespace(self.k, i)
    }

    /// Where each node listens and the command that starts it inside its namespace.
    pub fn hosts(&self) -> Vec<Host> {
        (0..self.nodes)
            .map(|i| {
                let at = |port| SocketAddr::from((self.node_ip(i), port));
                Host {
                    client: at(CLIENT_PORT),
                    controller: at(CONTROLLER_PORT),
                    metrics: at(METRICS_PORT),
                    prefix: vec![
                        "ip".into(),
                        "netns".into(),
                        "exec".into(),
                        self.namespace(i),
                    ],
                }
            })
            .collect()
    }

    /// Cuts node `i` off from every node in `from` (both directions); the root namespace, and
    /// with it the test's clients, still reaches all of them. A connect across the cut fails at
    /// once; packets of connections open across it are dropped, as on a partitioned network.
    pub fn isolate(&mut self, i: usize, from: &[usize]) {
        for &j in from {
            assert_ne!(i, j, "a node is not partitioned from itself");
            for (a, b) in [(i, j), (j, i)] {
                let dst = format!("{}/32", self.node_ip(b));
                ip_ok(&["-n", &self.namespace(a), "route", "add", "blackhole", &dst]);
                self.cut.push((a, self.node_ip(b)));
            }
        }
    }

    /// Removes every cut.
    pub fn heal(&mut self) {
        for (a, dst) in std::mem::take(&mut self.cut) {
            let dst = format!("{dst}/32");
            ip_ok(&["-n", &self.namespace(a), "route", "del", "blackhole", &dst]);
        }
    }

    /// True when a TCP connection from inside node `i`'s namespace to `to` opens within
    /// `PROBE_TIMEOUT_SECS`: what a broker there would get.
    pub fn can_connect(&self, i: usize, to: SocketAddr) -> bool {
        let script = format!("exec 3<>/dev/tcp/{}/{}", to.ip(), to.port());
        Command::new("ip")
            .args(["netns", "exec", &self.namespace(i), "timeout"])
            .arg(PROBE_TIMEOUT_SECS.to_string())
            .args(["bash", "-c", &script])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// True when the test itself (the root namespace) connects to `to`.
    pub fn client_can_connect(&self, to: SocketAddr) -> bool {
        let timeout = Duration::from_secs(PROBE_TIMEOUT_SECS.into());
        TcpStream::connect_timeout(&to, timeout).is_ok()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        teardown(self.k, self.nodes);
    }
}
