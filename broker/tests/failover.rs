//! Availability under one fault at a time, three `tributary` processes on loopback: kill -9
//! of a partition's leader, of a follower and of the active controller, SIGSTOP of a leader,
//! SIGTERM of one, and a leader killed and started again at once. Each test runs an idempotent acks=all producer through the fault and
//! asserts two things: the longest gap between two acknowledgements stays within the fault's
//! bound, and every acknowledged record is read back exactly once.
//!
//! The kills run with a session timeout (and, for the controller, an election timeout) far
//! longer than their bound, so they can only pass by acting on the evidence a dead process
//! leaves (its connections closed, its ports refusing), never by waiting the timeout out. The
//! pause leaves no evidence: it is bounded by the session timeout. The fencings each fault
//! caused are read from a survivor's `tributary_broker_fencings_total` by reason.
//!
//! The scenarios take one lock: run side by side on two cores, three clusters would measure
//! each other.

mod common;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{NewTopic, TopicReplication};

use common::cluster::{
    longest_ack_gap, placement, read_until_all, Ack, Cluster, Writer, SESSION_TIMEOUT_MS,
};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const TOPIC: &str = "failover";
/// Far above every bound a kill is held to: a kill that waited for it fails.
const LONG_SESSION_MS: u64 = 20_000;
/// How long a fault's acks may take to resume before the test gives up measuring.
const RESUME_LIMIT: Duration = Duration::from_secs(40);
/// How long a healed node may take to be back in the ISR.
const HEAL_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillLeader,
    KillFollower,
    KillController,
    StopLeader,
    TermLeader,
    RestartLeader,
}

/// What a scenario saw.
struct Seen {
    gap: Duration,
    fencings: Vec<(&'static str, i64)>,
}

#[test]
fn a_killed_leader_fails_over_on_the_evidence_not_the_session_timeout() {
    let seen = scenario(Fault::KillLeader, &[&session(LONG_SESSION_MS)]);
    assert!(seen.gap < Duration::from_secs(5), "ack gap {:?}", seen.gap);
    assert!(fenced(&seen, "process_gone") >= 1, "{:?}", seen.fencings);
    assert_eq!(fenced(&seen, "silent"), 0, "{:?}", seen.fencings);
}

#[test]
fn a_killed_follower_leaves_the_isr_on_the_evidence() {
    let seen = scenario(Fault::KillFollower, &[&session(LONG_SESSION_MS)]);
    assert!(seen.gap < Duration::from_secs(5), "ack gap {:?}", seen.gap);
    assert!(fenced(&seen, "process_gone") >= 1, "{:?}", seen.fencings);
    assert_eq!(fenced(&seen, "silent"), 0, "{:?}", seen.fencings);
}

#[test]
fn a_killed_controller_is_replaced_before_its_election_timeout() {
    // Raft's heartbeats run at a tenth of the election timeout: 500 ms ticks here, so the
    // survivors' early campaign takes one to three ticks; a wait for the timeout takes 5–10 s.
    let election = "controller.quorum.election.timeout.ms=5000";
    let seen = scenario(
        Fault::KillController,
        &[&session(LONG_SESSION_MS), election],
    );
    assert!(seen.gap < Duration::from_secs(5), "ack gap {:?}", seen.gap);
    assert!(fenced(&seen, "process_gone") >= 1, "{:?}", seen.fencings);
    assert_eq!(fenced(&seen, "silent"), 0, "{:?}", seen.fencings);
}

#[test]
fn a_paused_leader_is_fenced_after_the_session_timeout_and_loses_nothing() {
    let seen = scenario(Fault::StopLeader, &[]);
    // The session, then the client's own socket timeout (2 s) for the last request it had
    // sent to the paused leader, a commit and its metadata refreshes (one-second scans):
    // measured 2.6–5.5 s. Far below the 60 s of librdkafka's default socket timeout.
    let bound = Duration::from_millis(SESSION_TIMEOUT_MS) + Duration::from_secs(8);
    assert!(seen.gap < bound, "ack gap {:?}", seen.gap);
    assert!(fenced(&seen, "silent") >= 1, "{:?}", seen.fencings);
}

#[test]
fn a_leader_shutting_down_hands_its_partitions_over_first() {
    let seen = scenario(Fault::TermLeader, &[&session(LONG_SESSION_MS)]);
    assert!(seen.gap < Duration::from_secs(3), "ack gap {:?}", seen.gap);
    assert!(
        fenced(&seen, "controlled_shutdown") >= 1,
        "{:?}",
        seen.fencings
    );
    assert_eq!(fenced(&seen, "silent"), 0, "{:?}", seen.fencings);
}

#[test]
fn a_leader_restarted_inside_its_session_is_a_new_broker() {
    // Killed and started again at once, far inside the session: the old incarnation's session
    // ends on the evidence (its ports refused) or at the new one's registration, whichever
    // the controller sees first; leadership moves to the in-sync follower meanwhile, and the
    // new incarnation rejoins the ISR once it has caught up (the scenario waits for it).
    let seen = scenario(Fault::RestartLeader, &[&session(LONG_SESSION_MS)]);
    assert!(seen.gap < Duration::from_secs(5), "ack gap {:?}", seen.gap);
    let ended = fenced(&seen, "process_gone") + fenced(&seen, "restarted");
    assert!(ended >= 1, "{:?}", seen.fencings);
    assert_eq!(fenced(&seen, "silent"), 0, "{:?}", seen.fencings);
}

fn session(ms: u64) -> String {
    format!("broker.session.timeout.ms={ms}")
}

fn fenced(seen: &Seen, reason: &str) -> i64 {
    seen.fencings
        .iter()
        .find(|(r, _)| *r == reason)
        .map_or(0, |(_, n)| *n)
}

/// Runs one fault through a fresh three-node cluster: returns the longest ack gap around it
/// and the fencings counted, after checking that nothing acknowledged was lost or doubled.
fn scenario(fault: Fault, settings: &[&str]) -> Seen {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::new(3);
    cluster.extra = settings.iter().map(|s| s.to_string()).collect();
    cluster.start_all();
    let controller = wait_for_controller(&cluster, &[0, 1, 2]);
    let (victim, replicas) = choose(fault, controller);
    create_topic(&cluster, &replicas);
    wait_full_isr(&cluster, 0);
    let bootstrap = cluster.all_bootstrap();
    let mut client = vec![("linger.ms", "1"), ("message.timeout.ms", "120000")];
    if fault == Fault::StopLeader {
        // A paused leader answers nothing and closes nothing: librdkafka's requests to it
        // wait out `socket.timeout.ms` (60 s by default), and an idempotent producer drains
        // them before it writes to the new leader, however fast the cluster moved the
        // partition. The broker cannot shorten that wait; a latency-minded client sets it.
        client.push(("socket.timeout.ms", "2000"));
    }
    let writer = Writer::start(
        bootstrap.clone(),
        TOPIC,
        0,
        &client,
        Duration::from_millis(2),
        Duration::from_secs(60),
    );
    wait_acks(&writer, 100);
    let at = Instant::now();
    eprintln!(
        "{fault:?} of node {victim} at {:?}",
        std::time::SystemTime::now()
    );
    let victim_i = (victim - 1) as usize;
    match fault {
        Fault::StopLeader => cluster.signal(victim_i, "STOP"),
        Fault::TermLeader => {
            let status = cluster.terminate(victim_i);
            assert!(
                status.is_some_and(|s| s.success()),
                "clean exit: {status:?}"
            );
        }
        Fault::RestartLeader => {
            cluster.kill(victim_i);
            cluster.spawn(victim_i);
        }
        _ => cluster.kill(victim_i),
    }
    let resumed = wait_acks(&writer, writer.acked() + 200);
    eprintln!(
        "{fault:?} of node {victim}: acks resumed within {:?}",
        resumed.duration_since(at)
    );
    let survivor = (0..3).find(|&i| i != victim_i).unwrap_or(0);
    let fencings = cluster
        .liveness_on(survivor)
        .expect("a survivor reports the liveness counters")
        .fencings;
    let healed = Instant::now();
    match fault {
        Fault::StopLeader => cluster.signal(victim_i, "CONT"),
        Fault::RestartLeader => {}
        _ => cluster.spawn(victim_i),
    }
    cluster.wait_listening(victim_i);
    wait_full_isr(&cluster, survivor);
    let more = writer.acked() + 100;
    wait_acks(&writer, more);
    let (sent, acks) = writer.stop();
    check_exactly_once(&cluster, sent, &acks);
    // The healing (a restart, a rejoin, leadership moving back to the preferred replica) is
    // not this fault's.
    let gap = longest_ack_gap(&acks, at, Some(healed));
    eprintln!("{fault:?}: longest ack gap {gap:?}, fencings {fencings:?}");
    Seen { gap, fencings }
}

/// The node to hurt and the partition's replicas (the first leads): the leader is never the
/// controller unless the controller is the fault, so each case measures one failover.
fn choose(fault: Fault, controller: i32) -> (i32, Vec<i32>) {
    let others: Vec<i32> = (1..=3).filter(|&n| n != controller).collect();
    match fault {
        Fault::KillController => (controller, vec![controller, others[0], others[1]]),
        Fault::KillFollower => (others[1], vec![others[0], controller, others[1]]),
        _ => (others[0], vec![others[0], controller, others[1]]),
    }
}

fn create_topic(cluster: &Cluster, replicas: &[i32]) {
    let assignment: &[&[i32]] = &[replicas];
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Variable(assignment))
        .set("min.insync.replicas", "2");
    common::rd_create_topics(cluster.nodes[0].client, &[topic]);
}

/// The controller id node `i`s DescribeCluster names, once one of `alive` answers with one.
fn wait_for_controller(cluster: &Cluster, alive: &[usize]) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for &i in alive {
            if let Some(id) = describe_controller(cluster.nodes[i].client).filter(|id| *id > 0) {
                return id;
            }
        }
        assert!(Instant::now() < deadline, "no controller named within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn describe_controller(addr: SocketAddr) -> Option<i32> {
    use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    let mut conn = common::RawConn::connect(addr);
    let resp: DescribeClusterResponse = conn.request(
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    );
    (resp.error_code == 0).then_some(resp.controller_id.0)
}

fn wait_full_isr(cluster: &Cluster, via: usize) {
    let bootstrap = cluster.bootstrap(via);
    let deadline = Instant::now() + HEAL_LIMIT;
    loop {
        let (leader, isr) = placement(&bootstrap, TOPIC);
        if leader > 0 && isr.len() == 3 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ISR still {isr:?} (leader {leader}) after {HEAL_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the writer has `n` acknowledgements; when the last of them came.
fn wait_acks(writer: &Writer, n: usize) -> Instant {
    let deadline = Instant::now() + RESUME_LIMIT;
    while writer.acked() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records acknowledged after {RESUME_LIMIT:?}",
            writer.acked()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Instant::now()
}

/// Every acknowledged record is in the partition exactly once, at the offset its
/// acknowledgement gave, and nothing is there that was never sent.
fn check_exactly_once(cluster: &Cluster, sent: usize, acks: &[Ack]) {
    let want: Vec<String> = acks.iter().map(|a| a.value.clone()).collect();
    let read = read_until_all(
        &cluster.all_bootstrap(),
        TOPIC,
        &want,
        Duration::from_secs(60),
    );
    let mut seen = std::collections::HashMap::new();
    for (offset, v) in read.iter().enumerate() {
        assert!(seen.insert(v.as_str(), offset).is_none(), "{v} read twice");
    }
    for a in acks {
        let at = seen.get(a.value.as_str());
        assert!(
            at.is_some(),
            "acknowledged {} (offset {}) lost",
            a.value,
            a.offset
        );
        assert_eq!(at.map(|&o| o as i64), Some(a.offset), "{} moved", a.value);
    }
    assert!(read.len() <= sent, "{} read, {sent} sent", read.len());
}
