//! Starting and stopping the broker: one pinned glommio executor per selected CPU, each a shard
//! with its own listener on the shared port (SO_REUSEPORT), and an orderly shutdown. Every port
//! the process listens on is owned first (`PortLock`), so no other broker shares it. TLS
//! listeners' keystores and truststores are read here, once, before any shard starts.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use futures::channel::oneshot;
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::cluster::config::ListenerSpec;
use crate::cluster::node::MetadataNode;
use crate::config::BrokerConfig;
use crate::connection::serve_connection;
use crate::controller::Controller;
use crate::limits::{ConnectionLimits, ConnectionQuotas};
use crate::routing::ShardId;
use crate::sasl::ListenerCtx;
use crate::shard::{Hosted, Shard, ShardRequest, ShardTask};
use crate::tls_acceptor::TlsAcceptor;

/// How long a listener found on the port may take to disappear before start-up gives up.
const LISTEN_PROBE_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

pub struct BrokerHandle {
    pub addr: SocketAddr,
    /// Every client listener by name, with the address it is bound to (the first is `addr`).
    pub listeners: Vec<(String, SocketAddr)>,
    /// Where the metrics endpoint listens (`metrics.listen`, port 0 resolved); `None` when off.
    pub metrics_addr: Option<SocketAddr>,
    _data_dir_lock: std::fs::File,
    /// The ports this process listens on, owned until it exits (`PortLock`).
    _port_locks: Vec<PortLock>,
    peers: Vec<async_channel::Sender<ShardRequest>>,
    threads: Vec<glommio::ExecutorJoinHandle<()>>,
}

/// Fails if something keeps accepting connections on `addr` once this process owns its port
/// (`PortLock`): a program other than a broker that set SO_REUSEPORT too, which the kernel lets
/// share the port, or a broker killed a moment ago, whose listener can stay alive while the
/// kernel tears down its io_uring — only a listener that persists for a while counts. (A plain
/// bind is no test: connections of a killed broker linger on the port and refuse it.)
fn refuse_if_listening(addr: SocketAddr, key: &str) -> Result<()> {
    let probe = if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    };
    let deadline = std::time::Instant::now() + LISTEN_PROBE_GRACE;
    while std::net::TcpStream::connect_timeout(&probe, std::time::Duration::from_millis(200))
        .is_ok()
    {
        if std::time::Instant::now() >= deadline {
            return Err(anyhow!(
                "cannot listen on {addr} for {key}: address in use: something else accepts connections there (`ss -ltnp 'sport = :{}'` names it); stop it or give {key} another port",
                addr.port()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// This process's claim on a TCP port, held while the broker runs: a Unix datagram socket bound
/// to the abstract name `tributary/tcp-port/<port>`.
///
/// Why not the listening socket itself: glommio's `TcpListener::bind` always sets
/// SO_REUSEPORT (every shard binds its own socket on the port, and the kernel spreads
/// connections over them), and Linux lets any socket of the same effective UID join such a
/// port (socket(7)), so two brokers of one user, started at the same moment, would both listen
/// and split its connections. One exclusive socket shared by the shards would need a glommio
/// listener built from a raw fd (`unsafe FromRawFd`), which this crate forbids. An abstract
/// name is exclusive within the network namespace, taken atomically by `bind`, and freed by the
/// kernel when the process exits however it exits, so no stale lock survives a crash. It keys
/// on the port alone: one broker per port, whatever the addresses.
struct PortLock {
    _socket: std::os::unix::net::UnixDatagram,
}

/// Takes the `PortLock` of `addr`'s port (already resolved: not 0) for the listener `key`.
fn lock_port(addr: SocketAddr, key: &str) -> Result<PortLock> {
    use std::os::linux::net::SocketAddrExt;
    let port = addr.port();
    let name = format!("tributary/tcp-port/{port}");
    let unix = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .with_context(|| format!("cannot name the lock of port {port}"))?;
    match std::os::unix::net::UnixDatagram::bind_addr(&unix) {
        Ok(socket) => Ok(PortLock { _socket: socket }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(anyhow!(
            "cannot listen on {addr} for {key}: address in use: another tributary process owns port {port} (it holds the abstract socket @{name}; `ss -xlp | grep {name}` names it); stop that broker or give {key} another port"
        )),
        Err(e) => Err(anyhow!(
            "cannot take the lock of port {port} for {key}, the abstract socket @{name}: {e}"
        )),
    }
}

/// A port this process owns and will listen on: its lock, and a bound, non-listening
/// SO_REUSEPORT socket that holds the port (resolving port 0) until the listeners bind it.
struct OwnedPort {
    lock: PortLock,
    _reservation: socket2::Socket,
    addr: SocketAddr,
}

/// Takes `addr` for the listener `key` (named in errors): reserves the port, takes its lock,
/// then waits out a dying broker's listener.
fn own_port(addr: SocketAddr, key: &str) -> Result<OwnedPort> {
    let domain = if addr.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let reservation = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    reservation.set_reuse_port(true)?;
    if let Err(e) = reservation.bind(&addr.into()) {
        // A socket without SO_REUSEPORT (another program's), or one of another user's.
        return Err(match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow!(
                "cannot listen on {addr} for {key}: address in use (`ss -ltnp 'sport = :{}'` names who holds it); stop it or give {key} another port",
                addr.port()
            ),
            _ => anyhow!("cannot bind {addr} for {key}: {e}"),
        });
    }
    let addr = reservation
        .local_addr()?
        .as_socket()
        .ok_or_else(|| anyhow!("listener address is not an IP address"))?;
    let lock = lock_port(addr, key)?;
    refuse_if_listening(addr, key)?;
    Ok(OwnedPort {
        lock,
        _reservation: reservation,
        addr,
    })
}

/// Every port this process listens on, owned before any shard binds one.
struct Ports {
    /// The first client listener's; `None` on a controller-only node.
    client: Option<OwnedPort>,
    /// The other client listeners', with their specs.
    extra: Vec<(OwnedPort, ListenerSpec)>,
    metrics: Option<OwnedPort>,
    /// The controller listener's lock; the quorum binds the listener itself (a port 0 one is
    /// resolved there, unlocked).
    controller: Option<PortLock>,
}

impl Ports {
    /// Owns `config`'s listen ports, recording each client listener's bound port (for port 0).
    fn own(config: &mut BrokerConfig) -> Result<Self> {
        let mut ports = Ports {
            client: None,
            extra: Vec::new(),
            metrics: None,
            controller: None,
        };
        // Fixed ports named so far: one given twice would meet its own lock, which is this
        // process's, not another broker's.
        let mut given: Vec<(u16, String)> = Vec::new();
        let mut give = |addr: SocketAddr, key: String| -> Result<String> {
            if let Some((_, first)) = given.iter().find(|(p, _)| *p != 0 && *p == addr.port()) {
                return Err(anyhow!(
                    "port {} is given to both {first} and {key}; give each its own port",
                    addr.port()
                ));
            }
            given.push((addr.port(), key.clone()));
            Ok(key)
        };
        if config.cluster.roles.broker {
            let name = config
                .listeners
                .first()
                .map_or("PLAINTEXT", |l| l.name.as_str());
            let key = give(
                config.listen,
                format!("listener {name} (--listen or listeners)"),
            )?;
            ports.client = Some(own_port(config.listen, &key)?);
            for l in config.listeners.iter().skip(1) {
                let want = l
                    .listen
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| anyhow!("listener {}: cannot resolve {:?}", l.name, l.listen))?;
                let key = give(want, format!("listener {} (listeners)", l.name))?;
                let owned = own_port(want, &key)?;
                config.bound.insert(l.name.clone(), owned.addr.port());
                ports.extra.push((owned, l.clone()));
            }
        }
        if let Some(m) = config.metrics_listen {
            let key = give(m, "metrics.listen".into())?;
            ports.metrics = Some(own_port(m, &key)?);
        }
        if let Some(c) = config.cluster.controller_listen.filter(|c| c.port() != 0) {
            let key = give(c, "the controller listener (listeners)".into())?;
            ports.controller = Some(lock_port(c, &key)?);
        }
        Ok(ports)
    }

    /// Once every listener is bound: the reservations go, the locks stay.
    fn into_locks(self) -> Vec<PortLock> {
        let owned = self
            .client
            .into_iter()
            .chain(self.extra.into_iter().map(|(p, _)| p))
            .chain(self.metrics);
        let mut locks: Vec<PortLock> = owned.map(|p| p.lock).collect();
        locks.extend(self.controller);
        locks
    }
}

/// File descriptors kept free beyond the segment files for connections, index and metadata files.
const FD_HEADROOM: u64 = 4096;

/// Every segment file stays open while the broker runs, so the open-file limit must exceed the
/// number of segments in the data directory. Raises the soft limit to the hard limit, as Kafka's
/// and Redpanda's service units do, and refuses to start if even that is too low.
fn ensure_fd_limit(data_dir: &std::path::Path) -> Result<()> {
    let mut segments = 0u64;
    for dir in std::fs::read_dir(data_dir)
        .with_context(|| format!("listing {}", data_dir.display()))?
        .flatten()
    {
        if dir.file_type().is_ok_and(|t| t.is_dir()) {
            segments += std::fs::read_dir(dir.path())
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                        .count() as u64
                })
                .unwrap_or(0);
        }
    }
    let limit = rlimit::increase_nofile_limit(u64::MAX)
        .context("reading the open-file limit (RLIMIT_NOFILE)")?;
    let needed = segments + FD_HEADROOM;
    if limit < needed {
        return Err(anyhow!(
            "{} holds {segments} segment files and each stays open, but the open-file limit is {limit} even after raising it to the hard limit; raise the hard limit to at least {needed} (ulimit -Hn, or LimitNOFILE= in the service unit) or use larger segments",
            data_dir.display()
        ));
    }
    info!(open_file_limit = limit, segments, "open-file limit");
    Ok(())
}

/// The remote log store's thread, when tiered storage is on and this node is a broker.
fn start_remote_store(config: &BrokerConfig) -> Result<Option<tributary_remote::RemoteStore>> {
    if !config.tiered.enabled || !config.cluster.roles.broker {
        return Ok(None);
    }
    tributary_remote::RemoteStore::start(&config.tiered.store)
        .map(Some)
        .map_err(|e| anyhow!("remote.log.storage.system.enable is true, but {e}"))
}

pub fn start(config: BrokerConfig) -> Result<BrokerHandle> {
    let lock = lock_data_dir(&config.data_dir)?;
    ensure_fd_limit(&config.data_dir)?;
    let tls = crate::tls_reload::build(&config)?;
    crate::tls_reload::log_served(&tls, "static configs");
    let inter_broker = match config.cluster.roles.broker {
        true => crate::inter_broker::InterBrokerSecurity::from_config(&config)?,
        false => Default::default(),
    };
    let legacy = crate::cluster::node::read_legacy(&config.data_dir, config.node_id)?;
    let mut config = config;
    // A controller-only node serves no clients: it has no client listener, and its address is
    // its controller listener's.
    let serves_clients = config.cluster.roles.broker;
    let ports = Ports::own(&mut config)?;
    let addr = match &ports.client {
        Some(p) => p.addr,
        None => config.cluster.controller_listen.unwrap_or(config.listen),
    };
    let metrics_addr = ports.metrics.as_ref().map(|p| p.addr);
    let metrics_ready = Arc::new(AtomicBool::new(false));
    if config.advertised_port == 0 {
        config.advertised_port = addr.port();
    }
    let config = Arc::new(config);
    crate::numa::log_placement(
        std::path::Path::new(crate::numa::SYSFS_ROOT),
        &config.cpus,
        &crate::config::allowed_cpus(),
    );
    let front = Front {
        addr: serves_clients.then_some(addr),
        extra: ports
            .extra
            .iter()
            .map(|(p, l)| (p.addr, l.clone()))
            .collect(),
        tls,
        inter_broker,
        // Dynamic connection limits in the metadata image apply once shard 0 applies it,
        // before any shard accepts.
        connections: ConnectionQuotas::new(ConnectionLimits::from_config(&config)),
        // Shard 0's quorum transport writes what it doubts of other nodes; every shard's
        // Metadata answers read it.
        doubts: Arc::new(tributary_quorum::PeerDoubts::default()),
        metrics: metrics_addr.map(|listen| MetricsFront {
            listen,
            ready: metrics_ready.clone(),
        }),
        remote: start_remote_store(&config)?,
    };
    let (peers, threads) = launch_shards(&config, front, legacy)?;
    let listeners = served_listeners(&config, &ports, serves_clients.then_some(addr));
    // The shards listen on every reserved port now; the locks keep them this process's.
    let port_locks = ports.into_locks();
    metrics_ready.store(true, Ordering::Release);
    log_listening(&config, addr, metrics_addr, serves_clients);
    Ok(BrokerHandle {
        addr,
        listeners,
        metrics_addr,
        _data_dir_lock: lock,
        _port_locks: port_locks,
        peers,
        threads,
    })
}

/// Creates the data directory and takes its lock, which this process holds until it exits:
/// two brokers on one directory would write the same segments.
fn lock_data_dir(data_dir: &std::path::Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let lock_path = data_dir.join(".lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        return Err(anyhow!(
            "data directory {} is in use by another broker; stop it or choose another --data-dir",
            data_dir.display()
        ));
    }
    Ok(lock)
}

/// Starts one executor per selected CPU, hands every shard the full list of peers' request
/// queues once all have announced theirs, and waits until each shard is ready or one says why
/// it cannot be. Shard 0 opens the metadata quorum (importing `legacy`, a single-node
/// catalog) and hands every other shard the first image.
fn launch_shards(
    config: &Arc<BrokerConfig>,
    front: Front,
    legacy: Option<Catalog>,
) -> Result<(Vec<ShardQueue>, Vec<glommio::ExecutorJoinHandle<()>>)> {
    let shards = config.cpus.len();
    // Each shard builds its own request queue inside its executor (why: `run_shard`) and
    // announces it here.
    let (queue_tx, queue_rx) = std::sync::mpsc::channel::<(usize, ShardQueue)>();
    let (image_txs, image_rxs): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| async_channel::bounded::<Arc<Catalog>>(1))
        .unzip();
    let mut legacy = legacy;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut peer_lists = Vec::with_capacity(shards);
    let mut threads = Vec::with_capacity(shards);
    for (i, image_rx) in image_rxs.into_iter().enumerate() {
        let (peers_tx, peers_rx) = oneshot::channel::<Vec<ShardQueue>>();
        peer_lists.push(peers_tx);
        let metadata = if i == 0 {
            Metadata::Open {
                legacy: legacy.take().map(Box::new),
                shards: image_txs.clone(),
            }
        } else {
            Metadata::From(image_rx)
        };
        let mut front = front.clone();
        // Shard 0 serves the metrics endpoint.
        if i != 0 {
            front.metrics = None;
        }
        let seed = ShardSeed {
            id: ShardId(i),
            metadata,
            front,
            announce: queue_tx.clone(),
            peers: peers_rx,
            ready: ready_tx.clone(),
        };
        threads.push(spawn_shard(config.clone(), seed)?);
    }
    drop(queue_tx);
    let mut queues: Vec<Option<ShardQueue>> = vec![None; shards];
    for _ in 0..shards {
        let (i, tx) = queue_rx
            .recv()
            .map_err(|_| anyhow!("a shard exited during start-up"))?;
        queues[i] = Some(tx);
    }
    let senders: Vec<ShardQueue> = queues.into_iter().flatten().collect();
    for peers in peer_lists {
        let _ = peers.send(senders.clone());
    }
    drop(ready_tx);
    drop(image_txs);
    for _ in 0..shards {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(anyhow!(e)),
            Err(_) => return Err(anyhow!("a shard exited during start-up")),
        }
    }
    Ok((senders, threads))
}

/// What one shard's executor starts from, and the channels it reports through while the
/// shards start.
struct ShardSeed {
    id: ShardId,
    metadata: Metadata,
    front: Front,
    /// Where the shard announces its request queue.
    announce: std::sync::mpsc::Sender<(usize, ShardQueue)>,
    /// Every shard's queue, once all have announced theirs; dropped unsent if start-up failed.
    peers: oneshot::Receiver<Vec<ShardQueue>>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
}

/// Starts the executor of one shard, pinned to its CPU.
fn spawn_shard(
    config: Arc<BrokerConfig>,
    seed: ShardSeed,
) -> Result<glommio::ExecutorJoinHandle<()>> {
    let i = seed.id.0;
    let cpu = config.cpus[i];
    let builder = LocalExecutorBuilder::new(Placement::Fixed(cpu))
        .name(&format!("shard-{i}"))
        .io_memory(config.shard_io_memory_bytes)
        .spin_before_park(Duration::from_micros(config.shard_spin_before_park_us));
    // The shard's request queue is built inside its executor, on its CPU: see `run_shard`.
    builder
        .spawn(move || async move {
            let ShardSeed {
                id,
                metadata,
                front,
                announce,
                peers,
                ready,
            } = seed;
            let (tx, rx) = async_channel::bounded(config.queued_max_requests);
            let _ = announce.send((id.0, tx));
            drop(announce);
            // Dropped unsent: start-up failed elsewhere.
            let Ok(peers) = peers.await else {
                return;
            };
            run_shard(id, config, peers, rx, metadata, front, ready).await;
        })
        .map_err(|e| anyhow!("cannot start the executor for shard {i} on CPU {cpu}: {e}"))
}

/// Every client listener by name with the address it is bound to; none on a controller-only
/// node (`addr` is `None`).
fn served_listeners(
    config: &BrokerConfig,
    ports: &Ports,
    addr: Option<SocketAddr>,
) -> Vec<(String, SocketAddr)> {
    let mut listeners = Vec::new();
    let Some(addr) = addr else {
        return listeners;
    };
    if let Some(first) = config.listeners.first() {
        listeners.push((first.name.clone(), addr));
    }
    for (p, l) in &ports.extra {
        listeners.push((l.name.clone(), p.addr));
    }
    listeners
}

fn log_listening(
    config: &BrokerConfig,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    serves_clients: bool,
) {
    if let Some(m) = metrics_addr {
        info!(addr = %m, "metrics endpoint is listening");
    }
    if !serves_clients {
        info!(%addr, data_dir = %config.data_dir.display(), "tributary controller (process.roles=controller) is serving the metadata quorum; it serves no clients");
        return;
    }
    for l in config.listeners.iter().skip(1) {
        info!(listener = %l.name, protocol = l.protocol.name(), port = config.bound.get(&l.name).copied().unwrap_or(0), "listening");
    }
    info!(%addr, shards = config.cpus.len(), cpus = ?config.cpus, data_dir = %config.data_dir.display(), "tributary is listening");
}

/// The sending side of a shard's queue of requests from other shards.
type ShardQueue = async_channel::Sender<ShardRequest>;

/// Where a shard listens (`None`: nowhere, on a controller-only node), and the connection
/// counts every shard's listener shares.
#[derive(Clone)]
struct Front {
    addr: Option<SocketAddr>,
    /// The other client listeners.
    extra: Vec<(SocketAddr, ListenerSpec)>,
    /// The TLS listeners' handshakes, by listener name.
    tls: BTreeMap<String, TlsAcceptor>,
    /// How the shard connects to other brokers.
    inter_broker: crate::inter_broker::InterBrokerSecurity,
    connections: Arc<ConnectionQuotas>,
    doubts: Arc<tributary_quorum::PeerDoubts>,
    /// Shard 0's: where to serve metrics.
    metrics: Option<MetricsFront>,
    /// The remote log store (tiered storage), one thread for the process.
    remote: Option<tributary_remote::RemoteStore>,
}

/// The metrics endpoint's address (owned, port 0 resolved), and whether every shard is ready
/// (for `/health`).
#[derive(Clone)]
struct MetricsFront {
    listen: SocketAddr,
    ready: Arc<AtomicBool>,
}

/// Where a shard gets the metadata image it starts with.
enum Metadata {
    /// Shard 0: open the metadata quorum (importing a single-node catalog, if given) and hand
    /// the image to every shard.
    Open {
        legacy: Option<Box<Catalog>>,
        shards: Vec<async_channel::Sender<Arc<Catalog>>>,
    },
    /// Every other shard: wait for shard 0's.
    From(async_channel::Receiver<Arc<Catalog>>),
}

/// Runs shard `id` inside its executor, whose thread glommio pins to the shard's CPU before
/// anything here runs, until it is stopped.
///
/// Linux's default memory policy (local allocation) places a page on the NUMA node of the CPU
/// that first touches it, not of the thread that allocated it. So everything a shard keeps for
/// long is built here and in the executor closure (its request queue, the `Shard` with its
/// partitions, caches and buffers; glommio builds the io_uring memory after pinning too), on
/// the shard's own node; built in `start`, on the main thread, it would sit on whichever node
/// that ran on, a cross-node access away for shards on other nodes.
async fn run_shard(
    id: ShardId,
    config: Arc<BrokerConfig>,
    peers: Vec<async_channel::Sender<ShardRequest>>,
    rx: async_channel::Receiver<ShardRequest>,
    metadata: Metadata,
    front: Front,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    if let Err(e) = tributary_storage::io::prime_executor_io(&config.data_dir).await {
        let _ = ready.send(Err(format!(
            "shard {}: direct I/O on {} failed: {e}",
            id.0,
            config.data_dir.display()
        )));
        return;
    }
    let (catalog, node) = match first_image(&config, metadata, &front.doubts).await {
        Ok(Some(first)) => first,
        // Closed without an image: shard 0 failed to start and said why.
        Ok(None) => return,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let Front {
        addr,
        extra,
        tls,
        inter_broker,
        connections,
        doubts,
        metrics,
        remote,
    } = front;
    let remote = remote.map(|store| {
        let t = &config.tiered;
        Rc::new(crate::tiered::RemoteLogs::new(
            store,
            t.index_cache_bytes,
            t.reader,
        ))
    });
    let hosted = Hosted::default()
        .with(node.clone().map(|n| Rc::new(Controller::new(n))))
        .with(remote);
    let shard = Rc::new(Shard::new(
        id,
        config.clone(),
        peers,
        catalog.clone(),
        hosted,
        connections,
        doubts,
    ));
    shard.install_coordinator_write_waits();
    install_security(&shard, &config, tls, inter_broker);
    observe_sync_rounds(&shard);
    // Opens this shard's partitions, takes their replication roles and loads the groups of
    // the offsets partitions this node leads.
    shard.apply_catalog(catalog).await;
    shard.set_aside_strays().await;
    let bound = bind_listeners(id, &config, addr, extra).and_then(|listeners| {
        let metrics = metrics.map(|m| bind_metrics(&shard, m)).transpose()?;
        Ok((listeners, metrics))
    });
    let (listeners, metrics_server) = match bound {
        Ok(bound) => bound,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    info!(
        shard = id.0,
        partitions = shard.owned_partition_count(),
        "shard ready"
    );
    let _ = ready.send(Ok(()));
    serve_shard(shard, config, node, rx, listeners, metrics_server).await;
}

/// The image a shard starts with: shard 0 opens the metadata quorum and hands its image to
/// every other shard (and keeps the node); the others wait for it (`None`: shard 0 failed).
async fn first_image(
    config: &BrokerConfig,
    metadata: Metadata,
    doubts: &Arc<tributary_quorum::PeerDoubts>,
) -> Result<Option<(Arc<Catalog>, Option<Rc<MetadataNode>>)>, String> {
    match metadata {
        Metadata::Open { legacy, shards } => {
            let node = MetadataNode::start(config, legacy.map(|c| *c), doubts.clone())
                .await
                .map_err(|e| format!("{e:#}"))?;
            let image = node.image();
            for tx in shards {
                let _ = tx.send(image.clone()).await;
            }
            Ok(Some((image, Some(node))))
        }
        Metadata::From(image) => Ok(image.recv().await.ok().map(|image| (image, None))),
    }
}

/// The shard's TLS keystores (the static ones first, then those the image's dynamic configs
/// set for this broker) and how it connects to other brokers.
fn install_security(
    shard: &Rc<Shard>,
    config: &BrokerConfig,
    tls: BTreeMap<String, TlsAcceptor>,
    inter_broker: crate::inter_broker::InterBrokerSecurity,
) {
    let dynamic_tls = crate::tls_reload::dynamic_at_start(&tls, &shard.broker_config());
    if shard.id.0 == 0 {
        crate::tls_reload::log_served(&dynamic_tls, "dynamic configs");
    }
    shard.install_tls(tls);
    shard.install_tls(dynamic_tls);
    shard.set_inter_broker(crate::tls_reload::inter_broker_at_start(
        inter_broker,
        config,
        &shard.broker_config(),
    ));
}

/// The shard's sync rounds, timed by the storage layer, land in its metrics.
fn observe_sync_rounds(shard: &Rc<Shard>) {
    let weak = Rc::downgrade(shard);
    tributary_storage::group_commit::observe_rounds(Box::new(move |files, elapsed| {
        if let Some(shard) = weak.upgrade() {
            shard.metrics.observe_sync_round(files, elapsed);
        }
    }));
}

/// Binds this shard's client listeners on the shared ports (none on a controller-only node).
fn bind_listeners(
    id: ShardId,
    config: &BrokerConfig,
    addr: Option<SocketAddr>,
    extra: Vec<(SocketAddr, ListenerSpec)>,
) -> Result<Vec<(TcpListener, ListenerSpec)>, String> {
    let mut listeners = Vec::new();
    if let Some(addr) = addr {
        let l = TcpListener::bind(addr)
            .map_err(|e| format!("shard {}: cannot listen on {addr}: {e}", id.0))?;
        if let Some(spec) = config.listeners.first() {
            listeners.push((l, spec.clone()));
        }
    }
    for (addr, spec) in extra {
        let l = TcpListener::bind(addr).map_err(|e| {
            format!(
                "shard {}: cannot listen on {addr} (listener {}): {e}",
                id.0, spec.name
            )
        })?;
        listeners.push((l, spec));
    }
    Ok(listeners)
}

/// Serves the shard — its listeners, metadata loops, timers and the requests other shards
/// send — until a `Stop` request closes its partitions, then cancels what it started.
async fn serve_shard(
    shard: Rc<Shard>,
    config: Arc<BrokerConfig>,
    node: Option<Rc<MetadataNode>>,
    rx: async_channel::Receiver<ShardRequest>,
    listeners: Vec<(TcpListener, ListenerSpec)>,
    metrics_server: Option<glommio::task::JoinHandle<()>>,
) {
    let metadata_tasks = node.as_ref().map(|node| {
        [
            glommio::spawn_local(node.clone().publish_loop(shard.clone())).detach(),
            glommio::spawn_local(node.clone().controller_loop(config.clone())).detach(),
        ]
    });
    let accept: Vec<_> = listeners
        .into_iter()
        .map(|(l, spec)| {
            let ctx = Rc::new(ListenerCtx::new(&config, spec));
            shard.add_listener(ctx.clone());
            glommio::spawn_local(accept_loop(shard.clone(), l, ctx)).detach()
        })
        .collect();
    let ticker = glommio::spawn_local(group_ticker(shard.clone())).detach();
    let periodic = spawn_periodic(&shard, &config);
    while let Ok(req) = rx.recv().await {
        if let ShardRequest::Stop { reply } = req {
            if let Some(tasks) = &metadata_tasks {
                tasks.iter().for_each(|t| t.cancel());
            }
            if let Some(node) = &node {
                node.quorum.shutdown().await;
            }
            shard.close_partitions().await;
            let _ = reply.send(());
            break;
        }
        glommio::spawn_local(shard.clone().handle(req)).detach();
    }
    for a in &accept {
        a.cancel();
    }
    if let Some(m) = metrics_server {
        m.cancel();
    }
    ticker.cancel();
    for task in periodic {
        task.cancel();
    }
}

/// The shard's periodic work: retention, transaction expiry, the leaders' ISR checks (see
/// `isr_check_interval_ms`) and high watermark checkpoints (twice per
/// replica.lag.time.max.ms), and the log cleaner when enabled.
fn spawn_periodic(shard: &Rc<Shard>, config: &BrokerConfig) -> Vec<glommio::task::JoinHandle<()>> {
    let mut tasks = vec![
        glommio::spawn_local(every(
            shard.clone(),
            config.log_retention_check_interval_ms,
            |s| async move { s.enforce_retention().await },
        ))
        .detach(),
        glommio::spawn_local(every(
            shard.clone(),
            config.transaction_cleanup_interval_ms,
            crate::handlers::txn::tick,
        ))
        .detach(),
        glommio::spawn_local(every(
            shard.clone(),
            crate::replica::leader::isr_check_interval_ms(config),
            |s| async move { s.check_isr().await },
        ))
        .detach(),
        glommio::spawn_local(every(
            shard.clone(),
            (config.replica_lag_time_max_ms / 2).max(1),
            |s| async move { s.checkpoint_high_watermarks().await },
        ))
        .detach(),
    ];
    if config.tiered.enabled {
        tasks.push(
            glommio::spawn_local(every(
                shard.clone(),
                config.tiered.task_interval_ms,
                |s| async move { s.tier_segments().await },
            ))
            .detach(),
        );
    }
    if config.cleaner.log_cleaner_enable {
        tasks.push(
            glommio::spawn_local(every(
                shard.clone(),
                config.cleaner.log_cleaner_backoff_ms,
                |s| async move { s.clean_partitions().await },
            ))
            .detach(),
        );
    }
    tasks
}

/// Binds the metrics endpoint on this shard and starts serving it.
fn bind_metrics(
    shard: &Rc<Shard>,
    m: MetricsFront,
) -> Result<glommio::task::JoinHandle<()>, String> {
    let listener = TcpListener::bind(m.listen).map_err(|e| {
        format!(
            "cannot listen for metrics on {} (metrics.listen): {e}",
            m.listen
        )
    })?;
    Ok(glommio::spawn_local(crate::metrics::http::serve(
        shard.clone(),
        listener,
        m.ready,
    ))
    .detach())
}

/// How often group timers (session expiry, rebalance deadlines) are checked.
const GROUP_TICK: Duration = Duration::from_millis(100);

/// How often a shard whose groups have no timers ticks ([`GroupCoordinator::quiet`]), until a
/// join, a consumer heartbeat or a load wakes it: only to expire offsets and to release read
/// buffers other shards sent back, which reads release as they go too.
///
/// [`GroupCoordinator::quiet`]: crate::group::GroupCoordinator::quiet
const QUIET_GROUP_TICK: Duration = Duration::from_secs(1);

async fn group_ticker(shard: Rc<Shard>) {
    let check_every = Duration::from_millis(shard.config.offsets_retention_check_interval_ms);
    let mut last_expiry = std::time::Instant::now();
    while !shard.draining.get() {
        if shard.groups.quiet() {
            // Listened for right after the check: nothing runs between the two.
            let activity = shard.groups.listen_activity();
            futures_lite::future::or(
                async { glommio::timer::sleep(QUIET_GROUP_TICK).await },
                activity,
            )
            .await;
        } else {
            glommio::timer::sleep(GROUP_TICK).await;
        }
        // Read buffers other shards have sent back once their responses were written.
        tributary_storage::io::release_returned_buffers();
        let now = std::time::Instant::now();
        let expire = now.duration_since(last_expiry) >= check_every;
        if expire {
            last_expiry = now;
        }
        let topics = || crate::coordinators::subscribable_topics(&shard.catalog());
        let (changed, tombstones) = shard.groups.tick(now, expire, &topics);
        if !changed.is_empty() || !tombstones.is_empty() {
            let s = shard.clone();
            shard
                .groups
                .persist_tick(move |g| s.group_log(g), changed, tombstones)
                .await;
        }
    }
}

/// Runs `work` on the shard every `period_ms` until it drains: the retention check and the log
/// cleaner.
async fn every<F, Fut>(shard: Rc<Shard>, period_ms: u64, work: F)
where
    F: Fn(Rc<Shard>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let period = Duration::from_millis(period_ms);
    while !shard.draining.get() {
        let drained = shard.drain_event.listen();
        futures_lite::future::or(glommio::timer::sleep(period), drained).await;
        if shard.draining.get() {
            return;
        }
        work(shard.clone()).await;
    }
}

/// Accepts `listener`'s connections; on a TLS listener each gets the handshake the shard holds
/// when it arrives (a reload swaps it for the connections after).
async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, ctx: Rc<ListenerCtx>) {
    let tls = ctx.protocol.is_tls();
    while let Some(stream) = crate::accept::accept_until_drained(&shard, &listener, &ctx.name).await
    {
        let acceptor = match tls {
            true => match shard.tls_acceptor(&ctx.name) {
                Some(a) => Some(a),
                // Never served in the clear: a TLS listener without its handshake refuses.
                None => {
                    warn!(listener = %ctx.name, "no TLS configuration for this listener; closing the connection");
                    continue;
                }
            },
            false => None,
        };
        admit(&shard, stream, &ctx, &acceptor);
    }
}

/// Starts serving `stream` if the connection limits allow it; otherwise closes it at once.
fn admit(
    shard: &Rc<Shard>,
    stream: glommio::net::TcpStream,
    ctx: &Rc<ListenerCtx>,
    tls: &Option<TlsAcceptor>,
) {
    let Ok(peer) = stream.peer_addr() else {
        return; // Already gone.
    };
    match shard.connections.admit(peer.ip()) {
        Ok(slot) => {
            glommio::spawn_local(serve_connection(
                shard.clone(),
                stream,
                slot,
                ctx.clone(),
                tls.clone(),
            ))
            .detach();
        }
        Err(refused) => {
            let n = shard.connections_refused.get() + 1;
            shard.connections_refused.set(n);
            // One line per power of two refusals keeps a connection storm from flooding the log.
            if n.is_power_of_two() {
                warn!(%peer, refused_so_far = n, "refusing connection: {refused}");
            }
            drop(stream);
        }
    }
}

impl BrokerHandle {
    /// What the shards' fetches have read so far, summed over the shards.
    pub fn fetch_stats(&self) -> crate::shard::FetchStats {
        futures::executor::block_on(async {
            let mut total = crate::shard::FetchStats::default();
            for p in &self.peers {
                let (tx, rx) = oneshot::channel();
                if p.send(ShardRequest::FetchStats { reply: tx })
                    .await
                    .is_err()
                {
                    continue;
                }
                if let Ok(s) = rx.await {
                    total.reads += s.reads;
                    total.read_bytes += s.read_bytes;
                    total.sessions += s.sessions;
                }
            }
            total
        })
    }

    /// Stops accepting, lets in-flight requests finish, flushes and closes every log.
    pub fn shutdown(self) -> Result<()> {
        info!("shutting down");
        futures::executor::block_on(async {
            // Controlled shutdown first: leadership moves to other replicas while this node
            // still answers, so clients move at once instead of after a session timeout.
            if let Some(p) = self.peers.first() {
                let (tx, rx) = oneshot::channel();
                let shutdown = ShardTask::new(|shard| async move {
                    if let Some(c) = crate::controller::of(&shard) {
                        c.node.controlled_shutdown(&shard.config).await;
                    }
                    let _ = tx.send(());
                });
                if p.send(ShardRequest::Run(shutdown)).await.is_ok() {
                    let _ = rx.await;
                }
            }
            for phase in 0..2 {
                let mut waits = Vec::new();
                for p in &self.peers {
                    let (tx, rx) = oneshot::channel();
                    let req = if phase == 0 {
                        ShardRequest::Drain { reply: tx }
                    } else {
                        ShardRequest::Stop { reply: tx }
                    };
                    if p.send(req).await.is_ok() {
                        waits.push(rx);
                    }
                }
                for w in waits {
                    let _ = w.await;
                }
            }
        });
        for t in self.threads {
            t.join()
                .map_err(|e| anyhow!("shard thread failed: {e:?}"))?;
        }
        info!("stopped");
        Ok(())
    }
}
