//! The KRaft keys that make a node part of a cluster — `process.roles`,
//! `controller.quorum.voters`, `listeners`, `advertised.listeners`, `controller.listener.names`
//! and the quorum's timeouts — parsed and checked the way Kafka checks them, with its messages.
//!
//! With none of them set the node is `broker,controller` and the one voter of its own quorum,
//! listening for clients on `--listen`: the single-node broker of the README's first command.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{anyhow, bail, Context, Result};

/// One entry of `controller.quorum.voters`: `id@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
}

/// One entry of `listeners` / `advertised.listeners`: `NAME://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// `process.roles`: what the node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// Serves clients and holds partition replicas; registers with the controllers.
    pub broker: bool,
    /// A voter of the metadata quorum; may be the active controller.
    pub controller: bool,
}

/// The node's place in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: i32,
    pub roles: Roles,
    /// The controller quorum's voters; one voter (this node) when `controller.quorum.voters` is
    /// unset.
    pub voters: Vec<Voter>,
    /// Where the quorum accepts its peers (the listener named in `controller.listener.names`);
    /// `None` on a single-voter node, which has no peers.
    pub controller_listen: Option<SocketAddr>,
    pub election_timeout_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
}

impl ClusterConfig {
    /// Whether this node is a broker and the only voter (the single node of the README's first
    /// command). Broker-only nodes may still follow it through a controller listener.
    pub fn single_voter(&self) -> bool {
        self.voters.len() == 1 && self.roles.controller && self.roles.broker
    }
}

/// How a listener's connections are secured: Kafka's `SecurityProtocol`, by its wire id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAINTEXT" => Some(Self::Plaintext),
            "SSL" => Some(Self::Ssl),
            "SASL_PLAINTEXT" => Some(Self::SaslPlaintext),
            "SASL_SSL" => Some(Self::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's id, as DescribeCluster and broker registrations carry it.
    pub fn id(self) -> i16 {
        match self {
            Self::Plaintext => 0,
            Self::Ssl => 1,
            Self::SaslPlaintext => 2,
            Self::SaslSsl => 3,
        }
    }

    pub fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }

    /// Whether connections run TLS (SSL, SASL_SSL).
    pub fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

/// One listener clients connect to: where it binds, how it is secured and what clients
/// connecting there are told (the brokers' endpoints on the same listener name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// HOST:PORT to bind.
    pub listen: String,
    /// HOST:PORT clients are told; `None`: the bound address.
    pub advertised: Option<String>,
}

/// The client listeners and what clients are told, from `listeners` / `advertised.listeners`
/// or, when those are unset, one PLAINTEXT listener on `--listen` / `--advertised-listener`.
/// `listen` and `advertised` are the inter-broker listener's (`inter.broker.listener.name`):
/// the address brokers register with and reach each other on. A controller-only node serves
/// no clients: its `listen` is `--listen`'s, unused, and `all` is empty.
#[derive(Debug, Clone)]
pub struct ClientListener {
    pub listen: String,
    pub advertised: Option<String>,
    /// Every client listener, the inter-broker one first.
    pub all: Vec<ListenerSpec>,
}

/// Parses the cluster keys. `get` returns a key's value ("" when unset).
pub fn parse(
    get: &dyn Fn(&str) -> String,
    node_id: i32,
    cli_listen: &str,
    cli_advertised: Option<&str>,
) -> Result<(ClusterConfig, ClientListener)> {
    let roles = parse_roles(&get("process.roles"))?;
    let voters = parse_voters(&get("controller.quorum.voters"))?;
    let listeners = parse_listeners("listeners", &get("listeners"))?;
    let controller_names: Vec<String> = list(&get("controller.listener.names"));
    let election_timeout_ms = positive("controller.quorum.election.timeout.ms", &get)?;
    let (broker_session_timeout_ms, broker_heartbeat_interval_ms) = broker_liveness_ms(get)?;
    let voters = quorum_voters(roles, voters, node_id)?;
    let controller_listen =
        controller_listener(roles, voters.len(), &listeners, &controller_names)?;
    let client = client_listeners(get, roles, &listeners, &controller_names)?;
    let mut all = listener_specs(
        get,
        roles,
        &client,
        &controller_names,
        cli_listen,
        cli_advertised,
    )?;
    put_inter_broker_first(&get("inter.broker.listener.name"), roles, &mut all)?;
    let (listen, advertised) = match all.first() {
        Some(l) => (l.listen.clone(), l.advertised.clone()),
        None => (cli_listen.to_string(), cli_advertised.map(str::to_string)),
    };
    Ok((
        ClusterConfig {
            node_id,
            roles,
            voters,
            controller_listen,
            election_timeout_ms,
            broker_session_timeout_ms,
            broker_heartbeat_interval_ms,
        },
        ClientListener {
            listen,
            advertised,
            all,
        },
    ))
}

/// `broker.session.timeout.ms` and `broker.heartbeat.interval.ms`, in that order: a broker
/// heartbeats more often than its session lasts.
fn broker_liveness_ms(get: &dyn Fn(&str) -> String) -> Result<(u64, u64)> {
    let broker_session_timeout_ms = positive("broker.session.timeout.ms", &get)?;
    let broker_heartbeat_interval_ms = positive("broker.heartbeat.interval.ms", &get)?;
    if broker_heartbeat_interval_ms >= broker_session_timeout_ms {
        bail!(
            "config broker.heartbeat.interval.ms ({broker_heartbeat_interval_ms}) must be below broker.session.timeout.ms ({broker_session_timeout_ms}), or every broker would be fenced between two heartbeats"
        );
    }
    Ok((broker_session_timeout_ms, broker_heartbeat_interval_ms))
}

/// The quorum's voters: those of `controller.quorum.voters`, or this node alone when it is a
/// controller and the key is unset. A controller must be one of them, a broker-only node not.
fn quorum_voters(roles: Roles, voters: Vec<Voter>, node_id: i32) -> Result<Vec<Voter>> {
    let voters = if voters.is_empty() {
        if !roles.controller {
            bail!(
                "config controller.quorum.voters is empty, but process.roles=broker: a broker-only node follows the controllers' metadata log; list the controllers as id@host:port (their CONTROLLER listeners)"
            );
        }
        vec![Voter {
            id: node_id,
            host: String::new(),
            port: 0,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        }]
    } else {
        voters
    };
    let ids: Vec<String> = voters.iter().map(|v| v.id.to_string()).collect();
    let is_voter = voters.iter().any(|v| v.id == node_id);
    if !roles.controller && is_voter {
        bail!(
            "If process.roles contains just the 'broker' role, the node id {node_id} must not be included in the set of voters controller.quorum.voters={{{}}}; give the broker a node.id outside the voters",
            ids.join(", ")
        );
    }
    if roles.controller && !is_voter {
        bail!(
            "If process.roles contains the 'controller' role, the node id {node_id} must be included in the set of voters controller.quorum.voters={{{}}}; set node.id to one of them",
            ids.join(", ")
        );
    }
    Ok(voters)
}

/// Whether `l` is a controller listener: named in `controller.listener.names`.
fn is_controller(controller_names: &[String], l: &Listener) -> bool {
    controller_names.contains(&l.name)
}

/// Where the quorum accepts its peers: the first of `listeners` named in
/// `controller.listener.names`. A broker-only node must have none; a controller with other
/// voters, or without the broker role, must have one.
fn controller_listener(
    roles: Roles,
    voter_count: usize,
    listeners: &[Listener],
    controller_names: &[String],
) -> Result<Option<SocketAddr>> {
    Ok(
        match listeners.iter().find(|l| is_controller(controller_names, l)) {
            Some(l) if !roles.controller => bail!(
                "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running KRaft with just the broker role; remove {}://{}:{} from listeners",
                l.name, l.host, l.port
            ),
            Some(l) => Some(resolve(&format!("{}:{}", l.host, l.port), "listeners")?),
            None if roles.controller && (voter_count > 1 || !roles.broker) => bail!(
                "controller.listener.names must contain at least one value appearing in the 'listeners' configuration when running the KRaft controller role with several voters or without the broker role; add e.g. CONTROLLER://host:port to listeners and controller.listener.names=CONTROLLER"
            ),
            None => None,
        },
    )
}

/// The listeners clients are served on: those of `listeners` not named in
/// `controller.listener.names`. A controller-only node has none; a broker given `listeners`
/// has at least one.
fn client_listeners<'a>(
    get: &dyn Fn(&str) -> String,
    roles: Roles,
    listeners: &'a [Listener],
    controller_names: &[String],
) -> Result<Vec<&'a Listener>> {
    let client: Vec<&Listener> = listeners
        .iter()
        .filter(|l| !is_controller(controller_names, l))
        .collect();
    if !roles.broker {
        if let Some(l) = client.first() {
            bail!(
                "The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller; remove {}://{}:{} (a controller-only node serves no clients)",
                l.name, l.host, l.port
            );
        }
    }
    if roles.broker && client.is_empty() && !listeners.is_empty() {
        bail!(
            "config listeners={}: no listener for clients (every one is named in controller.listener.names); add PLAINTEXT://host:port",
            get("listeners")
        );
    }
    Ok(client)
}

/// Every client listener with its security protocol (`listener.security.protocol.map`) and
/// what clients are told (`advertised.listeners`); a broker with no `listeners` gets one
/// PLAINTEXT listener on `--listen` / `--advertised-listener`.
fn listener_specs(
    get: &dyn Fn(&str) -> String,
    roles: Roles,
    client: &[&Listener],
    controller_names: &[String],
    cli_listen: &str,
    cli_advertised: Option<&str>,
) -> Result<Vec<ListenerSpec>> {
    let protocols = parse_protocol_map(&get("listener.security.protocol.map"))?;
    let advertised = parse_listeners("advertised.listeners", &get("advertised.listeners"))?;
    for a in advertised
        .iter()
        .filter(|l| !is_controller(controller_names, l))
    {
        if !client.iter().any(|l| l.name == a.name) {
            bail!(
                "config advertised.listeners: {} is not a listener clients are served on (not in listeners); name one of {}",
                a.name,
                client.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let mut all: Vec<ListenerSpec> = Vec::new();
    if roles.broker && client.is_empty() {
        all.push(ListenerSpec {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            listen: cli_listen.to_string(),
            advertised: advertised
                .iter()
                .find(|l| l.name == "PLAINTEXT")
                .map(|l| format!("{}:{}", l.host, l.port))
                .or_else(|| cli_advertised.map(str::to_string)),
        });
    }
    for l in client {
        let protocol = match protocols.iter().find(|(n, _)| *n == l.name) {
            Some((_, p)) => *p,
            None => bail!(
                "config listener.security.protocol.map: no security protocol defined for listener {}; add {}:PLAINTEXT (or SSL, SASL_PLAINTEXT, SASL_SSL)",
                l.name,
                l.name
            ),
        };
        all.push(ListenerSpec {
            name: l.name.clone(),
            protocol,
            listen: format!("{}:{}", l.host, l.port),
            advertised: advertised
                .iter()
                .find(|a| a.name == l.name)
                .map(|a| format!("{}:{}", a.host, a.port)),
        });
    }
    Ok(all)
}

/// Moves the inter-broker listener (`inter.broker.listener.name`, given as `inter`) to the
/// front of `all`. A broker must name one of its client listeners; a controller-only node has
/// none, and keeps `all` as it is.
fn put_inter_broker_first(inter: &str, roles: Roles, all: &mut Vec<ListenerSpec>) -> Result<()> {
    // The inter-broker listener: named, else the first PLAINTEXT one, else the first.
    let inter_index = if inter.is_empty() {
        all.iter()
            .position(|l| l.protocol == SecurityProtocol::Plaintext)
            .unwrap_or(0)
    } else {
        match all.iter().position(|l| l.name == inter) {
            Some(i) => i,
            None if !roles.broker => 0,
            None => bail!(
                "config inter.broker.listener.name={inter}: not a client listener in listeners; name one of {}",
                all.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
        }
    };
    if !all.is_empty() {
        let l = all.remove(inter_index);
        all.insert(0, l);
    }
    Ok(())
}

/// `listener.security.protocol.map`: `NAME:PROTOCOL,…`.
fn parse_protocol_map(v: &str) -> Result<Vec<(String, SecurityProtocol)>> {
    let mut out = Vec::new();
    for entry in list(v) {
        let Some((name, proto)) = entry.split_once(':') else {
            bail!(
                "config listener.security.protocol.map: {entry:?} is not NAME:PROTOCOL (e.g. SASL_PLAINTEXT:SASL_PLAINTEXT)"
            );
        };
        let Some(p) = SecurityProtocol::parse(proto.trim()) else {
            bail!(
                "config listener.security.protocol.map: {proto:?} is not a security protocol; use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            );
        };
        out.push((name.trim().to_string(), p));
    }
    Ok(out)
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn positive(key: &str, get: &dyn Fn(&str) -> String) -> Result<u64> {
    let v = get(key);
    let n: u64 = v
        .parse()
        .map_err(|_| anyhow!("config {key}: {v:?} is not a whole number of milliseconds"))?;
    if n == 0 {
        bail!("config {key}: must be at least 1");
    }
    Ok(n)
}

/// `broker`, `controller` or both, as Kafka spells them.
fn parse_roles(v: &str) -> Result<Roles> {
    let roles = list(v);
    for r in &roles {
        if r != "broker" && r != "controller" {
            bail!("config process.roles: unknown role {r:?}; the roles are broker and controller");
        }
    }
    let has = |r: &str| roles.iter().any(|x| x == r);
    let roles = Roles {
        broker: has("broker"),
        controller: has("controller"),
    };
    if !roles.broker && !roles.controller {
        bail!("config process.roles is empty; set broker, controller or broker,controller");
    }
    Ok(roles)
}

/// `1@host:port,2@host:port`: ids unique and non-negative, addresses resolved.
pub fn parse_voters(v: &str) -> Result<Vec<Voter>> {
    let mut voters: Vec<Voter> = Vec::new();
    for entry in list(v) {
        let bad = || {
            anyhow!(
                "config controller.quorum.voters: {entry:?} is not id@host:port (e.g. 1@10.0.0.1:9093)"
            )
        };
        let (id, addr) = entry.split_once('@').ok_or_else(bad)?;
        let id: i32 = id.trim().parse().map_err(|_| bad())?;
        if id < 0 {
            bail!("config controller.quorum.voters: voter id {id} is negative");
        }
        let (host, port) = split_host_port(addr).ok_or_else(bad)?;
        if voters.iter().any(|x| x.id == id) {
            bail!("config controller.quorum.voters: voter id {id} appears twice");
        }
        let addr = resolve(addr, "controller.quorum.voters")?;
        voters.push(Voter {
            id,
            host,
            port,
            addr,
        });
    }
    Ok(voters)
}

/// `NAME://host:port,…`; names unique.
pub fn parse_listeners(key: &str, v: &str) -> Result<Vec<Listener>> {
    let mut out: Vec<Listener> = Vec::new();
    for entry in list(v) {
        let bad = || {
            anyhow!(
                "config {key}: {entry:?} is not NAME://host:port (e.g. PLAINTEXT://127.0.0.1:9092)"
            )
        };
        let (name, addr) = entry.split_once("://").ok_or_else(bad)?;
        let (host, port) = split_host_port(addr).ok_or_else(bad)?;
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(bad());
        }
        if out.iter().any(|l| l.name == name) {
            bail!("config {key}: listener name {name} appears twice; each listener needs its own name");
        }
        out.push(Listener { name, host, port });
    }
    Ok(out)
}

fn split_host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.trim().rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

fn resolve(addr: &str, what: &str) -> Result<SocketAddr> {
    let addr = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    addr.to_socket_addrs()
        .with_context(|| format!("config {what}: cannot resolve {addr:?}"))?
        .next()
        .ok_or_else(|| anyhow!("config {what}: {addr:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn run(pairs: &[(&str, &str)]) -> Result<(ClusterConfig, ClientListener)> {
        let mut m: BTreeMap<&str, String> = [
            ("process.roles", "broker,controller"),
            ("controller.quorum.voters", ""),
            ("listeners", ""),
            ("advertised.listeners", ""),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listener.security.protocol.map",
                crate::config::DEFAULT_PROTOCOL_MAP,
            ),
            ("inter.broker.listener.name", ""),
            ("controller.quorum.election.timeout.ms", "1000"),
            ("broker.session.timeout.ms", "9000"),
            ("broker.heartbeat.interval.ms", "2000"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        for (k, v) in pairs {
            m.insert(k, v.to_string());
        }
        let node: i32 = pairs
            .iter()
            .find(|(k, _)| *k == "node.id")
            .map_or(0, |(_, v)| v.parse().unwrap());
        parse(&|k| m[k].clone(), node, "127.0.0.1:9092", None)
    }

    #[test]
    fn no_keys_is_a_single_voter_on_the_cli_listener() {
        let (c, l) = run(&[]).unwrap();
        assert!(c.single_voter());
        assert_eq!(c.voters[0].id, 0);
        assert_eq!(c.controller_listen, None);
        assert_eq!(l.listen, "127.0.0.1:9092");
        assert_eq!(l.advertised, None);
    }

    #[test]
    fn three_voters_with_named_listeners() {
        let (c, l) = run(&[
            ("node.id", "2"),
            (
                "controller.quorum.voters",
                "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
            ),
            ("advertised.listeners", "PLAINTEXT://localhost:9094"),
        ])
        .unwrap();
        assert_eq!(c.voters.len(), 3);
        assert_eq!(c.node_id, 2);
        assert_eq!(c.controller_listen, Some("127.0.0.1:9095".parse().unwrap()));
        assert_eq!(l.listen, "127.0.0.1:9094");
        assert_eq!(l.advertised.as_deref(), Some("localhost:9094"));
    }

    #[test]
    fn broker_only_and_controller_only_nodes() {
        let voters = (
            "controller.quorum.voters",
            "1@127.0.0.1:9093,2@127.0.0.1:9095",
        );
        let (c, l) = run(&[
            ("process.roles", "broker"),
            ("node.id", "7"),
            voters,
            ("listeners", "PLAINTEXT://127.0.0.1:9099"),
        ])
        .unwrap();
        assert_eq!(
            c.roles,
            Roles {
                broker: true,
                controller: false
            }
        );
        assert!(!c.single_voter());
        assert_eq!(c.controller_listen, None);
        assert_eq!(l.listen, "127.0.0.1:9099");

        let (c, _) = run(&[
            ("process.roles", "controller"),
            ("node.id", "2"),
            voters,
            ("listeners", "CONTROLLER://127.0.0.1:9095"),
        ])
        .unwrap();
        assert_eq!(
            c.roles,
            Roles {
                broker: false,
                controller: true
            }
        );
        assert_eq!(c.controller_listen, Some("127.0.0.1:9095".parse().unwrap()));
        // One controller-only voter is a quorum too; it must be reachable by brokers.
        let (c, _) = run(&[
            ("process.roles", "controller"),
            ("node.id", "1"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
            ("listeners", "CONTROLLER://127.0.0.1:9093"),
        ])
        .unwrap();
        assert!(!c.single_voter());
    }

    #[test]
    fn several_client_listeners_with_their_protocols() {
        let (_, l) = run(&[
            (
                "listeners",
                "SASL_PLAINTEXT://127.0.0.1:9094,PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9096",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
            ),
            ("advertised.listeners", "SASL_PLAINTEXT://broker.example:9094"),
            ("inter.broker.listener.name", "INTERNAL"),
        ])
        .unwrap();
        // The inter-broker listener first: brokers register and reach each other there.
        assert_eq!(l.listen, "127.0.0.1:9096");
        let names: Vec<&str> = l.all.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["INTERNAL", "SASL_PLAINTEXT", "PLAINTEXT"]);
        assert_eq!(l.all[1].protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(l.all[1].advertised.as_deref(), Some("broker.example:9094"));
        assert_eq!(l.all[2].advertised, None);
        // Unnamed, the inter-broker listener is the first PLAINTEXT one.
        let (_, l) = run(&[(
            "listeners",
            "SASL_PLAINTEXT://127.0.0.1:9094,PLAINTEXT://127.0.0.1:9092",
        )])
        .unwrap();
        assert_eq!(l.listen, "127.0.0.1:9092");
        // A single node may serve only SASL clients: it talks to no other broker.
        let (_, l) = run(&[("listeners", "SASL_PLAINTEXT://127.0.0.1:9094")]).unwrap();
        assert_eq!(l.all.len(), 1);
        assert_eq!(l.listen, "127.0.0.1:9094");
        // TLS listeners, with Kafka's default protocol map; the inter-broker listener is still
        // the PLAINTEXT one.
        let (_, l) = run(&[(
            "listeners",
            "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9095",
        )])
        .unwrap();
        let protocols: Vec<SecurityProtocol> = l.all.iter().map(|x| x.protocol).collect();
        assert_eq!(
            protocols,
            [
                SecurityProtocol::Plaintext,
                SecurityProtocol::Ssl,
                SecurityProtocol::SaslSsl
            ]
        );
        assert!(l.all[1].protocol.is_tls() && !l.all[1].protocol.is_sasl());
        assert!(l.all[2].protocol.is_tls() && l.all[2].protocol.is_sasl());
        // A single node may serve only TLS clients, as with SASL.
        let (_, l) = run(&[("listeners", "SSL://127.0.0.1:9093")]).unwrap();
        assert_eq!(l.listen, "127.0.0.1:9093");
        assert_eq!(l.all[0].protocol, SecurityProtocol::Ssl);
    }

    #[test]
    fn bad_cluster_keys_are_refused_with_what_to_do() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("process.roles", "broker")], "broker-only node follows"),
            (&[("process.roles", "")], "is empty"),
            (&[("process.roles", "broker,zookeeper")], "unknown role"),
            (
                &[
                    ("process.roles", "broker"),
                    ("controller.quorum.voters", "0@127.0.0.1:1"),
                ],
                "must not be included in the set of voters",
            ),
            (
                &[
                    ("process.roles", "broker"),
                    ("node.id", "4"),
                    ("controller.quorum.voters", "1@127.0.0.1:1"),
                    (
                        "listeners",
                        "PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:3",
                    ),
                ],
                "just the broker role",
            ),
            (
                &[
                    ("process.roles", "controller"),
                    ("controller.quorum.voters", "0@127.0.0.1:1"),
                    (
                        "listeners",
                        "PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:1",
                    ),
                ],
                "must only contain KRaft controller listeners",
            ),
            (
                &[("process.roles", "controller")],
                "without the broker role",
            ),
            (
                &[("controller.quorum.voters", "1@127.0.0.1:9093")],
                "must be included in the set of voters",
            ),
            (
                &[("controller.quorum.voters", "0@127.0.0.1:1,0@127.0.0.1:2")],
                "appears twice",
            ),
            (
                &[("controller.quorum.voters", "x@127.0.0.1:1")],
                "id@host:port",
            ),
            (
                &[("controller.quorum.voters", "0@127.0.0.1")],
                "id@host:port",
            ),
            (
                &[("controller.quorum.voters", "0@127.0.0.1:1,1@127.0.0.1:2")],
                "controller.listener.names",
            ),
            (
                &[(
                    "listeners",
                    "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2",
                )],
                "appears twice",
            ),
            (
                &[("listeners", "EXTERNAL://127.0.0.1:1")],
                "no security protocol defined for listener EXTERNAL",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://127.0.0.1:1"),
                    ("inter.broker.listener.name", "INTERNAL"),
                ],
                "not a client listener",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://127.0.0.1:1"),
                    ("advertised.listeners", "SASL_PLAINTEXT://h:1"),
                ],
                "not a listener clients are served on",
            ),
            (
                &[("listener.security.protocol.map", "X:TLS")],
                "not a security protocol",
            ),
            (&[("listeners", "127.0.0.1:1")], "NAME://host:port"),
            (&[("broker.heartbeat.interval.ms", "9000")], "must be below"),
            (
                &[("controller.quorum.election.timeout.ms", "0")],
                "at least 1",
            ),
        ];
        for (pairs, want) in cases {
            let e = format!("{:#}", run(pairs).unwrap_err());
            assert!(e.contains(want), "{pairs:?}: {e}");
        }
    }
}
