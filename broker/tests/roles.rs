//! `process.roles` split as Kafka deployments split it: three controller-only nodes (the
//! metadata quorum) and two broker-only nodes (which follow the quorum's log as observers),
//! each its own `tributary` process on loopback. Only the brokers appear in Metadata and hold
//! partitions; the controllers serve no clients; killing the active controller elects another
//! while the brokers keep serving; a killed broker is fenced (the controller no longer hears
//! its metadata fetches), its partitions move, and it rejoins when restarted.

mod common;

use std::net::TcpStream;

use rdkafka::admin::{NewTopic, TopicReplication};

use common::cluster::{broker_ids, consume_group, leaders, metadata, produce, Cluster};
use common::{rd_create_topics, wait_until, RawConn};
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterResponse;
use kafka_protocol::messages::ApiKey;

/// DescribeCluster v1 to `addr` for `endpoint_type` (1 brokers, 2 controllers).
fn describe_cluster(addr: std::net::SocketAddr, endpoint_type: i8) -> DescribeClusterResponse {
    RawConn::connect(addr).request(
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(endpoint_type),
    )
}

const ACTIVE: &str = "kafka_controller_kafkacontroller_activecontrollercount";

fn active_controller(cluster: &Cluster) -> Option<usize> {
    let mut active = (0..3).filter(|&i| cluster.gauge(i, ACTIVE) == Some(1));
    let first = active.next();
    first.filter(|_| active.next().is_none())
}

#[test]
fn controller_only_and_broker_only_nodes_make_one_cluster() {
    let mut cluster =
        Cluster::with_roles(&["controller", "controller", "controller", "broker", "broker"]);
    cluster.extra = vec!["offsets.topic.replication.factor=2".into()];
    cluster.start_all();
    let b4 = cluster.bootstrap(3);
    let both = cluster.all_bootstrap();
    wait_until("both brokers, and only they, in Metadata", || {
        broker_ids(&metadata(&b4, None)) == vec![4, 5]
    });
    for i in 0..3 {
        assert!(
            TcpStream::connect(cluster.nodes[i].client).is_err(),
            "controller {} serves no clients",
            i + 1
        );
        wait_until("each controller saying it serves no clients", || {
            cluster.log(i).contains("serves no clients")
        });
    }
    // The active controller serves no clients, so a broker names itself the controller to
    // talk to (it takes admin requests), and refuses controller-endpoint requests.
    let d = describe_cluster(cluster.nodes[3].client, 1);
    assert_eq!((d.error_code, d.controller_id.0), (0, 4));
    let mut ids: Vec<i32> = d.brokers.iter().map(|b| b.broker_id.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, [4, 5]);
    assert_eq!(describe_cluster(cluster.nodes[3].client, 2).error_code, 114);
    rd_create_topics(
        cluster.nodes[3].client,
        &[NewTopic::new("split", 2, TopicReplication::Fixed(2))],
    );
    wait_until("the topic led by the brokers", || {
        let l = leaders(&b4, "split");
        l.len() == 2 && l.iter().all(|id| [4, 5].contains(id))
    });
    // Partitions added later get the topic's replication factor.
    {
        use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
        use rdkafka::client::DefaultClientContext;
        let admin: AdminClient<DefaultClientContext> = rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", &b4)
            .create()
            .unwrap();
        let grown = futures::executor::block_on(
            admin.create_partitions(&[NewPartitions::new("split", 3)], &AdminOptions::new()),
        )
        .unwrap();
        assert!(grown.iter().all(|r| r.is_ok()), "{grown:?}");
        wait_until("three partitions of two replicas each", || {
            let m = metadata(&b4, Some("split"));
            let ps = m.topics()[0].partitions();
            ps.len() == 3 && ps.iter().all(|p| p.replicas().len() == 2)
        });
    }
    produce(&both, "split", &[0, 1], 200, "a");
    let got = consume_group(&both, "split", "readers-a", 200);
    assert_eq!(got.len(), 200);

    // Kill the active controller: another is elected and the brokers follow it.
    let mut active = None;
    wait_until("one active controller", || {
        active = active_controller(&cluster);
        active.is_some()
    });
    let active = active.unwrap();
    cluster.kill(active);
    wait_until("a new active controller", || {
        active_controller(&cluster).is_some_and(|i| i != active)
    });
    // Metadata changes go through the new controller; writes keep being acknowledged.
    rd_create_topics(
        cluster.nodes[4].client,
        &[NewTopic::new("after", 1, TopicReplication::Fixed(2))],
    );
    produce(&both, "split", &[0, 1], 200, "b");

    // Kill a broker: the controller fences it and its partitions move to the other.
    cluster.kill(4);
    wait_until(
        "broker 5 fenced and every partition led by broker 4",
        || broker_ids(&metadata(&b4, None)) == vec![4] && leaders(&b4, "split") == vec![4, 4, 4],
    );
    produce(&b4, "split", &[0, 1], 200, "c");
    let mut got = consume_group(&b4, "split", "readers-b", 600);
    got.sort();
    let mut want: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|t| (0..200).map(move |i| format!("{t}-{i}")))
        .collect();
    want.sort();
    assert_eq!(got, want, "every acknowledged message, once");

    // Restarted, it registers again and serves.
    cluster.spawn(4);
    cluster.wait_listening(4);
    wait_until("broker 5 back in Metadata", || {
        broker_ids(&metadata(&b4, None)) == vec![4, 5]
    });
    // A broker-only node has no quorum port to probe: its metadata fetch connection ended
    // and its client port refused a connection, which is the evidence it was fenced on.
    let controller_logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(
        controller_logs.contains("its client port refused a connection"),
        "broker 5 was fenced on the evidence of its death"
    );
    let gone = (0..3)
        .filter_map(|i| {
            cluster.gauge(
                i,
                "tributary_broker_fencings_total{reason=\"process_gone\"}",
            )
        })
        .max();
    assert!(gone.is_some_and(|n| n >= 1), "fencings counted: {gone:?}");
}
