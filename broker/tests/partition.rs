//! Network partitions between the brokers of a three-node cluster, each node in a network
//! namespace the test creates (`common::netns`): an isolated leader cannot acknowledge acks=all
//! writes while the other two elect a new leader and go on acknowledging; an isolated follower
//! leaves the ISR and rejoins it. After each heal nothing acknowledged is lost or doubled and
//! every replica holds the same log — no divergent data survives.
//!
//! The cuts are blackhole routes inside the namespaces between brokers only: the test's clients
//! still reach every broker, the isolated one included, as a client on the far side of a split
//! network would.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Buf;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, MetadataResponse, ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tributary_protocol::record_batch::build_batch;

use common::cluster::{longest_ack_gap, metadata, produce, values_on_disk, Ack, Cluster, Writer};
use common::netns::Netns;
use common::{encode_request, rd_create_topics, wait_until, RawConn};

const TOPIC: &str = "partitioned";
/// One partition led by each broker, so a test can pick a leader that is, or is not, the
/// active controller.
const PARTITIONS: i32 = 3;
/// How long a raw request may wait for its answer before it counts as unanswered.
const RAW_READ_TIMEOUT: Duration = Duration::from_secs(15);
/// The produce timeout of the raw writes to an isolated leader.
const RAW_PRODUCE_TIMEOUT_MS: i32 = 1500;

/// Three nodes, each in its own namespace, with `PARTITIONS` RF=3 partitions whose replicas
/// are all in sync; `replica.lag.time.max.ms` is `lag_ms`.
fn start(net: &Netns, lag_ms: u64) -> Cluster {
    let mut cluster = Cluster::new_with(net.hosts());
    cluster.extra = vec![format!("replica.lag.time.max.ms={lag_ms}")];
    cluster.start_all();
    // `ip netns exec` execs the broker: the child is the broker itself, so killing the child
    // kills the broker.
    let broker = std::path::Path::new(env!("CARGO_BIN_EXE_tributary"));
    for n in &cluster.nodes {
        let pid = n.child.as_ref().expect("started").id();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the child runs");
        assert_eq!(exe, broker, "node {}'s child is not the broker", n.id);
    }
    let all = cluster.all_bootstrap();
    wait_until("three brokers", || {
        metadata(&all, None).brokers().len() == 3
    });
    rd_create_topics(
        cluster.nodes[0].client,
        &[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(3))
            .set("min.insync.replicas", "2")],
    );
    wait_until("every replica in sync", || {
        (0..3).all(|i| {
            (0..PARTITIONS)
                .all(|part| placement(&cluster, i, part).is_some_and(|p| p.isr == vec![1, 2, 3]))
        })
    });
    cluster
}

/// The node whose quorum leads the metadata log (its controller is the active one).
fn active_controller(cluster: &Cluster) -> Option<usize> {
    let active: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&i| {
            cluster.gauge(i, "kafka_controller_kafkacontroller_activecontrollercount") == Some(1)
        })
        .collect();
    match active[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// One partition of `TOPIC` as one broker sees it.
#[derive(Debug, Clone, PartialEq)]
struct Placement {
    leader: i32,
    leader_epoch: i32,
    isr: Vec<i32>,
}

/// Sends one request to `addr` and reads its answer; `Err` when the connection fails or no
/// answer comes within `RAW_READ_TIMEOUT`.
fn try_request<R, S>(addr: SocketAddr, key: ApiKey, version: i16, req: &R) -> Result<S, String>
where
    R: kafka_protocol::protocol::Encodable,
    S: Decodable,
{
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(RAW_READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut conn = RawConn::connect_stream(stream);
    conn.send_raw(&encode_request(1, key, version, req));
    let mut resp = conn
        .read_frame()
        .ok_or_else(|| format!("{key:?} to {addr}: no answer"))?;
    let header = ResponseHeader::decode(&mut resp, key.response_header_version(version))
        .map_err(|e| e.to_string())?;
    assert_eq!(header.correlation_id, 1);
    let out = S::decode(&mut resp, version).map_err(|e| e.to_string())?;
    assert_eq!(resp.remaining(), 0, "trailing bytes in the answer");
    Ok(out)
}

/// Partition `part` of `TOPIC` as node `i` itself sees it (a raw Metadata request to it alone:
/// a client library would move on to whichever broker it likes).
fn placement(cluster: &Cluster, i: usize, part: i32) -> Option<Placement> {
    let req = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))]));
    let resp: MetadataResponse =
        try_request(cluster.nodes[i].client, ApiKey::Metadata, 9, &req).ok()?;
    let t = resp.topics.first()?;
    let p = t.partitions.iter().find(|p| p.partition_index == part)?;
    let mut isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
    isr.sort_unstable();
    Some(Placement {
        leader: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        isr,
    })
}

/// One acks=all produce of the single record `value` to partition `part` straight to `addr`:
/// the partition's error code, or why there was none.
fn raw_produce(addr: SocketAddr, part: i32, value: &str) -> Result<i16, String> {
    let batch = build_batch(&[(None, Some(value.as_bytes()))], 1_700_000_000_000, None).freeze();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(RAW_PRODUCE_TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(part)
                .with_records(Some(batch))])]);
    let resp: ProduceResponse = try_request(addr, ApiKey::Produce, 8, &req)?;
    Ok(resp.responses[0].partition_responses[0].error_code)
}

fn bootstrap_of(cluster: &Cluster, nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|&i| cluster.nodes[i].client.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The background writer of these tests: the broker waits `request.timeout.ms` for the ISR
/// before it answers a produce.
fn writer(bootstrap: String, part: i32) -> Writer {
    Writer::start(
        bootstrap,
        TOPIC,
        part,
        &[
            ("message.timeout.ms", "60000"),
            ("request.timeout.ms", "3000"),
            ("linger.ms", "5"),
        ],
        Duration::from_millis(5),
        Duration::from_secs(70),
    )
}

/// Partition `part` of `TOPIC` from its first offset through `bootstrap`, as (offset, value):
/// read until every one of `want` arrived and nothing more came for two seconds, or 60 s passed.
fn read_log(bootstrap: &str, part: i32, want: &[String]) -> Vec<(i64, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, part, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut missing: std::collections::HashSet<&String> = want.iter().collect();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Instant::now();
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                missing.remove(&v);
                out.push((m.offset(), v));
                last = Instant::now();
            }
            _ if missing.is_empty() && last.elapsed() > Duration::from_secs(2) => break,
            _ => {}
        }
    }
    out
}

/// Checks partition `part` after a heal: each acknowledged record is in the log exactly once, at
/// the offset its acknowledgement named (an offset below 0: anywhere); none of `never` is; and,
/// once every node is stopped, each node's files hold exactly that log.
fn check_log(cluster: &mut Cluster, bootstrap: &str, part: i32, acked: &[Ack], never: &[String]) {
    let want: Vec<String> = acked.iter().map(|a| a.value.clone()).collect();
    let log = read_log(bootstrap, part, &want);
    let at: std::collections::HashMap<i64, &String> = log.iter().map(|(o, v)| (*o, v)).collect();
    let mut seen = std::collections::HashMap::new();
    for (_, v) in &log {
        *seen.entry(v.as_str()).or_insert(0usize) += 1;
    }
    let lost: Vec<&Ack> = acked
        .iter()
        .filter(|a| {
            if a.offset < 0 {
                !seen.contains_key(a.value.as_str())
            } else {
                at.get(&a.offset) != Some(&&a.value)
            }
        })
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged records are not at their acknowledged offset, e.g. {:?} (log holds {:?} there)",
        lost.len(),
        &lost[..lost.len().min(5)],
        lost.iter().take(5).map(|a| at.get(&a.offset)).collect::<Vec<_>>()
    );
    let doubled: Vec<(&&str, &usize)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "records written twice: {doubled:?}");
    let surfaced: Vec<&String> = never
        .iter()
        .filter(|v| seen.contains_key(v.as_str()))
        .collect();
    assert!(
        surfaced.is_empty(),
        "writes no quorum acknowledged are in the log: {surfaced:?}"
    );
    let offsets: Vec<i64> = log.iter().map(|(o, _)| *o).collect();
    assert!(
        offsets.iter().enumerate().all(|(i, &o)| o == i as i64),
        "the log has gaps or repeats: {offsets:?}"
    );
    // Every copy: stop all three (kill -9 is enough: an acknowledged record is fsynced on every
    // ISR member) and read each node's files.
    for i in 0..cluster.nodes.len() {
        cluster.kill(i);
    }
    let values: Vec<String> = log.into_iter().map(|(_, v)| v).collect();
    for n in &cluster.nodes {
        assert_eq!(
            values_on_disk(n.dir.clone(), TOPIC, part),
            values,
            "node {}'s copy differs from the log",
            n.id
        );
    }
}

/// Node `i`'s index in `cluster.nodes` for broker id `id`.
fn index_of(id: i32) -> usize {
    usize::try_from(id - 1).expect("broker ids start at 1")
}

/// Asserts the cut around node `i` is real: no connection across it either way, while the test
/// still reaches node `i`'s client port.
fn assert_cut(net: &Netns, cluster: &Cluster, i: usize, from: &[usize]) {
    for &j in from {
        for port in [cluster.nodes[j].controller, cluster.nodes[j].client] {
            assert!(!net.can_connect(i, port), "node {i} reaches {port}");
        }
        for port in [cluster.nodes[i].controller, cluster.nodes[i].client] {
            assert!(!net.can_connect(j, port), "node {j} reaches {port}");
        }
    }
    assert!(net.client_can_connect(cluster.nodes[i].client));
}

/// Cuts the leader of one partition off from the other two brokers — a broker that is also the
/// active controller when `controller_too`, one that is not otherwise — while an idempotent
/// writer and raw acks=all writes to the isolated leader keep coming; then heals the cut.
fn isolated_leader(controller_too: bool) {
    let mut net = Netns::new(3);
    let mut cluster = start(&net, 3000);
    let mut controller = None;
    wait_until("one active controller", || {
        controller = active_controller(&cluster);
        controller.is_some()
    });
    let ci = controller.expect("waited for");
    let (part, before) = (0..PARTITIONS)
        .map(|part| (part, placement(&cluster, ci, part).expect("metadata")))
        .find(|(_, p)| (index_of(p.leader) == ci) == controller_too)
        .expect("the partitions' leaders are spread over the brokers");
    let li = index_of(before.leader);
    let others: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let majority = bootstrap_of(&cluster, &others);
    let writer = writer(cluster.all_bootstrap(), part);
    wait_until("the writer's first acknowledgements", || {
        writer.acked() >= 50
    });
    // The probe can succeed: the leader reaches its peers before the cut.
    for &j in &others {
        assert!(net.can_connect(li, cluster.nodes[j].controller));
    }
    let controller_at_cut = active_controller(&cluster).map(|i| cluster.nodes[i].id);
    net.isolate(li, &others);
    cluster.note_fault(format!("network cut of node {}", cluster.nodes[li].id));
    let cut_at = Instant::now();
    assert_cut(&net, &cluster, li, &others);
    // Until the other two elect a new leader (and for two writes more), every acks=all write sent
    // straight to the isolated leader goes unacknowledged.
    let mut refused = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut after_election = 0;
    while after_election < 2 {
        let value = format!("isolated-{}", refused.len());
        let answer = raw_produce(cluster.nodes[li].client, part, &value);
        assert!(
            answer != Ok(0),
            "the isolated leader acknowledged {value:?} ({:?} after the cut)",
            cut_at.elapsed()
        );
        refused.push((value, answer));
        let elected = others.iter().all(|&j| {
            placement(&cluster, j, part)
                .is_some_and(|p| p.leader > 0 && p.leader != before.leader && p.isr.len() == 2)
        });
        if elected {
            after_election += 1;
        }
        assert!(
            Instant::now() < deadline,
            "no new leader 40 s after the cut; the isolated leader answered {refused:?}"
        );
    }
    let elected = placement(&cluster, others[0], part).expect("metadata");
    eprintln!(
        "partition {part}: leader {} isolated (active controller at the cut: {controller_at_cut:?}); \
         {} leads (epoch {} → {}) {:?} after the cut; the isolated leader answered {refused:?}",
        before.leader,
        elected.leader,
        before.leader_epoch,
        elected.leader_epoch,
        cut_at.elapsed(),
    );
    assert!(elected.leader_epoch > before.leader_epoch);
    // Through the majority, acks=all writes are acknowledged.
    produce(&majority, TOPIC, &[part], 100, "majority");
    net.heal();
    let healed_at = Instant::now();
    // The old leader follows, drops its unacknowledged tail and is back in the ISR; it sees the
    // new leader too.
    wait_until("the old leader back in the ISR", || {
        (0..3).all(|i| {
            placement(&cluster, i, part)
                .is_some_and(|p| p.leader == elected.leader && p.isr == [1, 2, 3])
        })
    });
    eprintln!("back in the ISR {:?} after the heal", healed_at.elapsed());
    produce(&cluster.all_bootstrap(), TOPIC, &[part], 50, "healed");
    std::thread::sleep(Duration::from_millis(500));
    // The writer's client stays with the isolated leader while the cut lasts: its produce
    // requests there time out (REQUEST_TIMED_OUT), which librdkafka retries on the same broker,
    // and its metadata refreshes go to the broker it is connected to, whose image is stale. It
    // moves once the healed old leader answers NOT_LEADER_OR_FOLLOWER; the batches the old
    // leader appended meanwhile are retried on the new one, and the old leader's copies are
    // truncated. Whatever the client does, every acknowledgement must hold.
    let (sent, mut acked) = writer.stop();
    let during = acked
        .iter()
        .filter(|a| a.at > cut_at && a.at < healed_at)
        .count();
    let after = acked.iter().filter(|a| a.at >= healed_at).count();
    eprintln!(
        "writer: {sent} sent, {} acknowledged: {during} while the leader was cut off, {after} \
         after the heal",
        acked.len()
    );
    let now = Instant::now();
    acked.extend(
        (0..100)
            .map(|i| format!("majority-{i}"))
            .chain((0..50).map(|i| format!("healed-{i}")))
            .map(|value| Ack {
                // The synchronous producer does not report offsets; any offset passes.
                value,
                offset: -1,
                at: now,
            }),
    );
    let never: Vec<String> = refused.into_iter().map(|(v, _)| v).collect();
    check_log(&mut cluster, &majority, part, &acked, &never);
}

#[test]
fn isolated_leader_cannot_acknowledge() {
    isolated_leader(false);
}

#[test]
fn isolated_leader_and_controller_cannot_acknowledge() {
    isolated_leader(true);
}

#[test]
fn isolated_follower_leaves_and_rejoins_isr() {
    let mut net = Netns::new(3);
    let mut cluster = start(&net, 3000);
    let part = 0;
    let before = placement(&cluster, 0, part).expect("metadata");
    let li = index_of(before.leader);
    // A follower that is not the active controller, so that only replication sees the cut.
    let controller = active_controller(&cluster);
    let fi = [(li + 1) % 3, (li + 2) % 3]
        .into_iter()
        .find(|&i| Some(i) != controller)
        .expect("two followers, one controller");
    let follower = cluster.nodes[fi].id;
    let others: Vec<usize> = (0..3).filter(|&i| i != fi).collect();
    let majority = bootstrap_of(&cluster, &others);
    let writer = writer(majority.clone(), part);
    wait_until("the writer's first acknowledgements", || {
        writer.acked() >= 50
    });
    // The probe can succeed: the follower reaches its peers before the cut.
    for &j in &others {
        assert!(net.can_connect(fi, cluster.nodes[j].controller));
    }
    net.isolate(fi, &others);
    cluster.note_fault(format!("network cut of node {}", cluster.nodes[fi].id));
    let cut_at = Instant::now();
    assert_cut(&net, &cluster, fi, &others);
    // The leader drops the silent follower from the ISR and goes on acknowledging.
    wait_until("the ISR without the cut-off follower", || {
        placement(&cluster, li, part)
            .is_some_and(|p| p.leader == before.leader && !p.isr.contains(&follower))
    });
    eprintln!("the ISR shrank {:?} after the cut", cut_at.elapsed());
    let acked_at_shrink = writer.acked();
    produce(&majority, TOPIC, &[part], 100, "majority");
    wait_until("the writer acknowledged while the follower was out", || {
        writer.acked() > acked_at_shrink + 50
    });
    net.heal();
    let healed_at = Instant::now();
    // Back, it catches up and rejoins; every node, the follower included, sees the whole ISR.
    wait_until("the follower back in the ISR", || {
        (0..3).all(|i| placement(&cluster, i, part).is_some_and(|p| p.isr == [1, 2, 3]))
    });
    eprintln!("back in the ISR {:?} after the heal", healed_at.elapsed());
    let (_, mut acked) = writer.stop();
    let now = Instant::now();
    acked.extend((0..100).map(|i| Ack {
        value: format!("majority-{i}"),
        offset: -1,
        at: now,
    }));
    check_log(&mut cluster, &majority, part, &acked, &[]);
}

/// A link cut between a leader and one follower only, both still in touch with the active
/// controller: nothing fences anyone, and the lag window (30 s, Kafka's default) would hold
/// every acks=all write for all of it. The kernel ends the leader's connection from the
/// follower once nothing came back for `replica.link.timeout.ms` (2 s); the leader then drops
/// the follower from the ISR and goes on acknowledging — within the 3 s a cut may cost.
#[test]
fn a_follower_cut_from_its_leader_alone_leaves_the_isr_within_the_link_timeout() {
    let mut net = Netns::new(3);
    let mut cluster = start(&net, 30_000);
    let ci = active_controller(&cluster).expect("one active controller");
    // A partition led by a node that is not the active controller; its other follower is cut.
    let (part, li) = (0..PARTITIONS)
        .map(|part| {
            (
                part,
                index_of(placement(&cluster, ci, part).expect("metadata").leader),
            )
        })
        .find(|&(_, li)| li != ci)
        .expect("a partition the controller does not lead");
    let fi = (0..3).find(|&i| i != li && i != ci).expect("three nodes");
    let follower = cluster.nodes[fi].id;
    let writer = writer(cluster.all_bootstrap(), part);
    wait_until("the writer's first acknowledgements", || {
        writer.acked() >= 50
    });
    net.isolate(fi, &[li]);
    cluster.note_fault(format!(
        "network cut between nodes {} and {follower}",
        cluster.nodes[li].id
    ));
    let cut_at = Instant::now();
    assert!(net.can_connect(fi, cluster.nodes[ci].controller));
    wait_until("the ISR without the cut-off follower", || {
        placement(&cluster, li, part).is_some_and(|p| !p.isr.contains(&follower))
    });
    let shrunk = cut_at.elapsed();
    eprintln!("the ISR shrank {shrunk:?} after the cut");
    // The link timeout, the ISR change's commit, and this test's polling of Metadata.
    assert!(
        shrunk < Duration::from_secs(4),
        "the ISR shrank only after {shrunk:?}: the link timeout (2 s) should have done it, not the fetch silence (5 s)"
    );
    let at_shrink = writer.acked();
    wait_until("acknowledgements after the shrink", || {
        writer.acked() > at_shrink + 50
    });
    let seen = cluster.liveness().expect("liveness counters");
    assert_eq!(seen.fenced(), 0, "nobody lost the controller: {seen}");
    net.heal();
    wait_until("the follower back in the ISR", || {
        (0..3).all(|i| placement(&cluster, i, part).is_some_and(|p| p.isr.len() == 3))
    });
    let (_, acked) = writer.stop();
    let gap = longest_ack_gap(&acked, cut_at, None);
    eprintln!("longest ack gap after the cut {gap:?}");
    assert!(gap < Duration::from_secs(3), "acks stalled {gap:?}");
    let all = cluster.all_bootstrap();
    check_log(&mut cluster, &all, part, &acked, &[]);
}
