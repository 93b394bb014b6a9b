//! The admin APIs real tools call, driven by librdkafka's admin client where it covers them and
//! by raw requests otherwise: CreatePartitions, dynamic broker configs, topic config bounds and
//! the partition limit.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{raw_alter, rd_consume, rd_create_topics, rd_produce, start_broker, RawConn};
use kafka_protocol::messages::ApiKey;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewPartitions, NewTopic,
    ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

fn admin(addr: SocketAddr) -> AdminClient<DefaultClientContext> {
    rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .expect("admin client")
}

fn opts() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(Duration::from_secs(20)))
}

/// One CreatePartitions topic through librdkafka: `Ok` or the error code.
fn grow(
    a: &AdminClient<DefaultClientContext>,
    p: &NewPartitions<'_>,
    o: &AdminOptions,
) -> Result<(), RDKafkaErrorCode> {
    let res = futures::executor::block_on(a.create_partitions([p], o)).expect("CreatePartitions");
    assert_eq!(res.len(), 1);
    res[0].clone().map(|_| ()).map_err(|(_, code)| code)
}

fn partitions_of(addr: SocketAddr, topic: &str) -> usize {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .expect("consumer");
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    md.topics()[0].partitions().len()
}

#[test]
fn create_partitions_grows_a_topic_and_the_new_partitions_take_data_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("offsets.topic.num.partitions", "2")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("grow", 2, TopicReplication::Fixed(1))],
    );
    let a = admin(broker.addr);
    let o = opts();

    // validate_only changes nothing.
    grow(
        &a,
        &NewPartitions::new("grow", 8),
        &opts().validate_only(true),
    )
    .unwrap();
    assert_eq!(partitions_of(broker.addr, "grow"), 2);

    grow(&a, &NewPartitions::new("grow", 5), &o).unwrap();
    assert_eq!(partitions_of(broker.addr, "grow"), 5);
    assert_eq!(
        grow(&a, &NewPartitions::new("grow", 5), &o),
        Err(RDKafkaErrorCode::InvalidPartitions)
    );
    assert_eq!(
        grow(&a, &NewPartitions::new("grow", 3), &o),
        Err(RDKafkaErrorCode::InvalidPartitions)
    );
    assert_eq!(
        grow(&a, &NewPartitions::new("missing", 3), &o),
        Err(RDKafkaErrorCode::UnknownTopicOrPartition)
    );
    assert_eq!(
        grow(&a, &NewPartitions::new("grow", 6).assign(&[&[7]]), &o),
        Err(RDKafkaErrorCode::InvalidReplicaAssignment),
        "broker 7 does not exist"
    );
    assert_eq!(
        grow(&a, &NewPartitions::new("__consumer_offsets", 4), &o),
        Err(RDKafkaErrorCode::InvalidRequest)
    );
    grow(&a, &NewPartitions::new("grow", 6).assign(&[&[0]]), &o).unwrap();
    assert_eq!(partitions_of(broker.addr, "grow"), 6);

    // Every partition, old and new, takes records and serves them.
    let messages: Vec<_> = (0..600)
        .map(|i| (Some(format!("key-{i}")), format!("v{i}")))
        .collect();
    rd_produce(broker.addr, "grow", &[], &messages);
    let got = rd_consume(broker.addr, "grow", 6, 600);
    assert_eq!(got.len(), 600);
    for p in 0..6 {
        assert!(got.iter().any(|m| m.0 == p), "partition {p} got no records");
    }
    broker.shutdown().unwrap();
}

#[test]
fn create_topics_takes_manual_assignments_checked_as_kafka_checks_them() {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest,
    };
    use kafka_protocol::messages::{BrokerId, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new(
            "manual",
            2,
            TopicReplication::Variable(&[&[0], &[0]]),
        )],
    );
    assert_eq!(partitions_of(broker.addr, "manual"), 2);
    let a = admin(broker.addr);
    let create = |t: NewTopic<'_>| {
        let r = futures::executor::block_on(a.create_topics(&[t], &opts())).unwrap();
        r[0].clone().map(|_| ()).map_err(|(_, e)| e)
    };
    assert_eq!(
        create(NewTopic::new("m1", 1, TopicReplication::Variable(&[&[7]]))),
        Err(RDKafkaErrorCode::InvalidReplicaAssignment),
        "broker 7 is not registered"
    );
    assert_eq!(
        create(NewTopic::new(
            "m2",
            1,
            TopicReplication::Variable(&[&[0, 0]])
        )),
        Err(RDKafkaErrorCode::InvalidReplicaAssignment),
        "broker 0 twice"
    );

    // What librdkafka will not send: counts with assignments, gaps in the partition indexes.
    let mut raw = RawConn::connect(broker.addr);
    let mut ask = |partitions: i32, indexes: &[i32]| -> i16 {
        let t = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("m3")))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_assignments(
                indexes
                    .iter()
                    .map(|&p| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(p)
                            .with_broker_ids(vec![BrokerId(0)])
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![t])
            .with_timeout_ms(5000);
        let resp: CreateTopicsResponse = raw.request(ApiKey::CreateTopics, 5, &req);
        resp.topics[0].error_code
    };
    assert_eq!(
        ask(1, &[0]),
        42,
        "INVALID_REQUEST: both counts and assignments"
    );
    assert_eq!(
        ask(-1, &[0, 2]),
        39,
        "INVALID_REPLICA_ASSIGNMENT: not 0, 1, …"
    );
    assert_eq!(ask(-1, &[1, 0]), 0, "any order");
    assert_eq!(partitions_of(broker.addr, "m3"), 2);
    broker.shutdown().unwrap();
}

#[test]
fn create_partitions_refuses_a_topic_named_twice() {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsRequest, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::create_partitions_response::CreatePartitionsResponse;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("d", 1, TopicReplication::Fixed(1))],
    );
    let topic = |n: i32| {
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("d")))
            .with_count(n)
    };
    for v in 0..=3 {
        let mut c = RawConn::connect(broker.addr);
        let resp: CreatePartitionsResponse = c.request(
            ApiKey::CreatePartitions,
            v,
            &CreatePartitionsRequest::default()
                .with_topics(vec![topic(2), topic(3)])
                .with_timeout_ms(5000),
        );
        assert_eq!(resp.results.len(), 2);
        for r in &resp.results {
            assert_eq!(
                r.error_code,
                RDKafkaErrorCode::InvalidRequest as i16,
                "v{v}"
            );
        }
    }
    assert_eq!(partitions_of(broker.addr, "d"), 1);
    broker.shutdown().unwrap();
}

fn describe(
    a: &AdminClient<DefaultClientContext>,
    r: ResourceSpecifier<'_>,
) -> Vec<rdkafka::admin::ConfigEntry> {
    let res = futures::executor::block_on(a.describe_configs([&r], &opts())).expect("Describe");
    res.into_iter()
        .next()
        .expect("one result")
        .expect("resource described")
        .entries
}

fn entry<'a>(
    entries: &'a [rdkafka::admin::ConfigEntry],
    name: &str,
) -> &'a rdkafka::admin::ConfigEntry {
    entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} described"))
}

/// AlterConfigs through librdkafka, for changes that must succeed: the rdkafka crate drops the
/// per-resource error codes of an AlterConfigs result, so refusals are checked with
/// [`raw_alter`].
fn alter(
    a: &AdminClient<DefaultClientContext>,
    c: &AlterConfig<'_>,
) -> Result<(), RDKafkaErrorCode> {
    let res = futures::executor::block_on(a.alter_configs([c], &opts())).expect("AlterConfigs");
    match res.into_iter().next().expect("one result") {
        Ok(_) => Ok(()),
        Err((_, code)) => Err(code),
    }
}

fn segment_files(dir: &std::path::Path, topic: &str) -> usize {
    std::fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .count()
}

#[test]
fn dynamic_broker_configs_take_effect_survive_a_restart_and_are_described() {
    let dir = tempfile::tempdir().unwrap();
    let props = [
        ("offsets.topic.num.partitions", "1"),
        ("log.retention.hours", "5"),
    ];
    let broker = start_broker(dir.path(), 2, &props);
    let a = admin(broker.addr);

    // Read-only keys and bad values are refused, naming the key, as Kafka refuses them.
    let invalid_request = RDKafkaErrorCode::InvalidRequest as i16;
    let (code, msg) = raw_alter(broker.addr, 4, "0", &[("num.partitions", "3")]);
    assert_eq!(code, invalid_request);
    assert!(
        msg.contains("num.partitions") && msg.contains("read-only"),
        "{msg}"
    );
    let (code, msg) = raw_alter(broker.addr, 4, "0", &[("log.segment.bytes", "12")]);
    assert_eq!(code, invalid_request);
    assert!(
        msg.contains("log.segment.bytes") && msg.contains("1024"),
        "{msg}"
    );
    let (code, _) = raw_alter(broker.addr, 4, "3", &[("log.retention.ms", "1")]);
    assert_eq!(code, invalid_request, "there is no broker 3");

    // A broker-default segment size applies to existing partitions at once.
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("dyn", 1, TopicReplication::Fixed(1))],
    );
    alter(
        &a,
        &AlterConfig::new(ResourceSpecifier::Broker(0))
            .set("log.segment.bytes", "2048")
            .set("log.retention.ms", "86400000"),
    )
    .unwrap();
    let messages: Vec<_> = (0..100).map(|i| (None, format!("{i:0>100}"))).collect();
    rd_produce(
        broker.addr,
        "dyn",
        &[("linger.ms", "0"), ("batch.size", "200")],
        &messages,
    );
    assert!(
        segment_files(dir.path(), "dyn") > 2,
        "10 KB of records rolled 2 KiB segments"
    );
    let topic = describe(&a, ResourceSpecifier::Topic("dyn"));
    assert_eq!(
        entry(&topic, "segment.bytes").value.as_deref(),
        Some("2048")
    );
    assert_eq!(
        entry(&topic, "retention.ms").value.as_deref(),
        Some("86400000")
    );

    // A cluster-wide default, through IncrementalAlterConfigs with an empty broker name.
    let (code, msg) =
        common::incremental_alter(broker.addr, "", &[("log.flush.interval.ms", "5000")]);
    assert_eq!(code, 0, "{msg}");

    let check = |addr| {
        let a = admin(addr);
        let b = describe(&a, ResourceSpecifier::Broker(0));
        let seg = entry(&b, "log.segment.bytes");
        assert_eq!(seg.value.as_deref(), Some("2048"));
        assert_eq!(seg.source, ConfigSource::DynamicBroker);
        assert!(!seg.is_read_only);
        let flush = entry(&b, "log.flush.interval.ms");
        assert_eq!(flush.value.as_deref(), Some("5000"));
        assert_eq!(flush.source, ConfigSource::DynamicDefaultBroker);
        let hours = entry(&b, "log.retention.hours");
        assert_eq!(hours.source, ConfigSource::StaticBroker);
        assert!(hours.is_read_only);
        assert_eq!(entry(&b, "node.id").source, ConfigSource::Default);
    };
    check(broker.addr);
    broker.shutdown().unwrap();

    let broker = start_broker(dir.path(), 1, &props);
    check(broker.addr);
    // AlterConfigs replaces the broker's dynamic set: what is not named reverts.
    let a = admin(broker.addr);
    alter(
        &a,
        &AlterConfig::new(ResourceSpecifier::Broker(0)).set("log.retention.ms", "60000"),
    )
    .unwrap();
    let b = describe(&a, ResourceSpecifier::Broker(0));
    assert_eq!(entry(&b, "log.segment.bytes").source, ConfigSource::Default);
    assert_eq!(
        entry(&b, "log.retention.ms").value.as_deref(),
        Some("60000")
    );
    let topic = describe(&a, ResourceSpecifier::Topic("dyn"));
    assert_eq!(
        entry(&topic, "retention.ms").value.as_deref(),
        Some("60000")
    );
    broker.shutdown().unwrap();
}

#[test]
fn per_broker_keys_kafkas_tools_set_are_accepted_kept_and_documented_as_unused() {
    use kafka_protocol::messages::describe_configs_request::{
        DescribeConfigsRequest, DescribeConfigsResource,
    };
    use kafka_protocol::messages::describe_configs_response::DescribeConfigsResponse;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    // librdkafka's admin test sets this one on a broker.
    let (code, msg) = raw_alter(
        broker.addr,
        4,
        "0",
        &[
            ("sasl.kerberos.min.time.before.relogin", "58000"),
            ("num.io.threads", "4"),
        ],
    );
    assert_eq!(code, 0, "{msg}");
    // Its bounds are Kafka's still.
    let (code, msg) = raw_alter(
        broker.addr,
        4,
        "0",
        &[("sasl.kerberos.ticket.renew.window.factor", "2")],
    );
    assert_eq!(code, RDKafkaErrorCode::InvalidRequest as i16, "{msg}");
    let resp: DescribeConfigsResponse = RawConn::connect(broker.addr).request(
        ApiKey::DescribeConfigs,
        3,
        &DescribeConfigsRequest::default()
            .with_include_documentation(true)
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("0"))
                .with_configuration_keys(None)]),
    );
    let e = resp.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "sasl.kerberos.min.time.before.relogin")
        .expect("described");
    assert_eq!(e.value.as_deref(), Some("58000"));
    assert_eq!(e.config_source, 2, "DYNAMIC_BROKER_CONFIG");
    assert!(!e.read_only);
    let doc = e.documentation.as_deref().unwrap_or("");
    assert!(doc.contains("does not use it"), "{doc}");
    broker.shutdown().unwrap();
}

#[test]
fn topic_configs_are_held_to_kafkas_bounds() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
    };
    use kafka_protocol::messages::incremental_alter_configs_response::IncrementalAlterConfigsResponse;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    let a = admin(broker.addr);
    let create = |name: &str, k: &str, v: &str| {
        let t = NewTopic::new(name, 1, TopicReplication::Fixed(1)).set(k, v);
        let res = futures::executor::block_on(a.create_topics([&t], &opts())).unwrap();
        res[0].clone().map(|_| ()).map_err(|(_, c)| c)
    };
    for (k, v) in [
        ("segment.bytes", "2147483648"),
        ("segment.bytes", "13"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("max.message.bytes", "-1"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("cleanup.policy", "shred"),
        ("index.interval.bytes", "-1"),
        ("flush.messages", "0"),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "Sometime"),
    ] {
        assert_eq!(
            create("bad", k, v),
            Err(RDKafkaErrorCode::InvalidConfig),
            "{k}={v}"
        );
    }
    create("good", "segment.bytes", "2147483647").unwrap();

    let mut raw = RawConn::connect(broker.addr);
    let resp: IncrementalAlterConfigsResponse = raw.request(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("good"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("min.cleanable.dirty.ratio"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("2")))]),
        ]),
    );
    let r = &resp.responses[0];
    assert_eq!(r.error_code, RDKafkaErrorCode::InvalidConfig as i16);
    let msg = r
        .error_message
        .as_deref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        msg.contains("min.cleanable.dirty.ratio") && msg.contains("between 0 and 1"),
        "{msg}"
    );
    let (code, msg) = raw_alter(broker.addr, 2, "good", &[("segment.ms", "0")]);
    assert_eq!(code, RDKafkaErrorCode::InvalidConfig as i16);
    assert!(
        msg.contains("segment.ms") && msg.contains("at least 1"),
        "{msg}"
    );
    broker.shutdown().unwrap();
}

#[test]
fn max_broker_partitions_holds_for_create_topics_create_partitions_and_auto_create() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
    use kafka_protocol::messages::create_topics_response::CreateTopicsResponse;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        2,
        &[
            ("offsets.topic.num.partitions", "2"),
            ("max.broker.partitions", "10"),
            ("num.partitions", "4"),
        ],
    );
    let a = admin(broker.addr);
    find_coordinator(broker.addr, "g");
    // 2 (offsets) + 5 = 7.
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("five", 5, TopicReplication::Fixed(1))],
    );
    let t = NewTopic::new("four", 4, TopicReplication::Fixed(1));
    let res = futures::executor::block_on(a.create_topics([&t], &opts())).unwrap();
    assert_eq!(
        res[0].clone().unwrap_err().1,
        RDKafkaErrorCode::PolicyViolation
    );
    assert_eq!(
        grow(&a, &NewPartitions::new("five", 9), &opts()),
        Err(RDKafkaErrorCode::PolicyViolation)
    );
    grow(&a, &NewPartitions::new("five", 8), &opts()).unwrap();

    // A count far past the limit is refused before anything is sized from it; the message names
    // the key and the numbers.
    let mut raw = RawConn::connect(broker.addr);
    let resp: CreateTopicsResponse = raw.request(
        ApiKey::CreateTopics,
        5,
        &CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("huge")))
                .with_num_partitions(i32::MAX)
                .with_replication_factor(1)])
            .with_timeout_ms(5000),
    );
    let r = &resp.topics[0];
    assert_eq!(r.error_code, RDKafkaErrorCode::PolicyViolation as i16);
    let msg = r
        .error_message
        .as_deref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        msg.contains("max.broker.partitions=10") && msg.contains("10 this broker holds"),
        "{msg}"
    );

    // Auto-creation (num.partitions=4) would make 14: the topic is not created.
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .set("allow.auto.create.topics", "true")
        .create()
        .unwrap();
    let _ = c.fetch_metadata(Some("auto"), Duration::from_secs(10));
    let all = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    assert!(all.topics().iter().all(|t| t.name() != "auto"));
    broker.shutdown().unwrap();
}

#[test]
fn authorized_operations_are_answered_when_asked_and_int_min_otherwise() {
    use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterResponse;
    use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
    use kafka_protocol::messages::describe_groups_response::DescribeGroupsResponse;
    use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
    use kafka_protocol::messages::metadata_response::MetadataResponse;
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    // Kafka's bit fields with no authorizer: every operation that applies to the resource type.
    const TOPIC: i32 = 3576;
    const CLUSTER: i32 = 8096;
    const GROUP: i32 = 3400;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("ops", 1, TopicReplication::Fixed(1))],
    );
    let mut raw = RawConn::connect(broker.addr);
    for v in 8..=12 {
        for asked in [false, true] {
            let req = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("ops"))))]))
                .with_include_cluster_authorized_operations(asked && v <= 10)
                .with_include_topic_authorized_operations(asked);
            let resp: MetadataResponse = raw.request(ApiKey::Metadata, v, &req);
            let t = &resp.topics[0];
            assert_eq!(t.error_code, 0);
            assert_eq!(
                t.topic_authorized_operations,
                if asked { TOPIC } else { i32::MIN },
                "v{v}"
            );
            if v <= 10 {
                let want = if asked { CLUSTER } else { i32::MIN };
                assert_eq!(resp.cluster_authorized_operations, want, "v{v}");
            }
            // A topic that does not exist gets its operations too, as in Kafka's metadata
            // handler (kafka-python's admin reads them before it looks at the error).
            let req = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                    TopicName(StrBytes::from_static_str("no-such-topic")),
                ))]))
                .with_allow_auto_topic_creation(false)
                .with_include_topic_authorized_operations(asked);
            let resp: MetadataResponse = raw.request(ApiKey::Metadata, v, &req);
            let t = &resp.topics[0];
            assert_eq!(t.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION, v{v}");
            assert_eq!(
                t.topic_authorized_operations,
                if asked { TOPIC } else { i32::MIN },
                "unknown topic, v{v}"
            );
        }
    }
    for v in 0..=1 {
        for asked in [false, true] {
            let resp: DescribeClusterResponse = raw.request(
                ApiKey::DescribeCluster,
                v,
                &DescribeClusterRequest::default()
                    .with_include_cluster_authorized_operations(asked)
                    .with_endpoint_type(1),
            );
            let want = if asked { CLUSTER } else { i32::MIN };
            assert_eq!(resp.cluster_authorized_operations, want, "v{v}");
        }
    }
    for v in 3..=5 {
        for asked in [false, true] {
            let resp: DescribeGroupsResponse = raw.request(
                ApiKey::DescribeGroups,
                v,
                &DescribeGroupsRequest::default()
                    .with_groups(vec![GroupId(StrBytes::from_static_str("nobody"))])
                    .with_include_authorized_operations(asked),
            );
            let want = if asked { GROUP } else { i32::MIN };
            assert_eq!(resp.groups[0].authorized_operations, want, "v{v}");
        }
    }
    broker.shutdown().unwrap();
}

#[test]
fn offset_for_leader_epoch_answers_epoch_zero_with_the_log_end() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::offset_for_leader_epoch_response::OffsetForLeaderEpochResponse;
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("offsets.topic.num.partitions", "1")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("epochs", 2, TopicReplication::Fixed(1))],
    );
    let messages: Vec<_> = (0..10).map(|i| (None, format!("m{i}"))).collect();
    rd_produce(
        broker.addr,
        "epochs",
        &[("partitioner", "consistent")],
        &messages,
    );
    // (partition, current_leader_epoch, leader_epoch) → (error, epoch, end offset)
    let cases = [
        ((0, -1, 0), (0, 0, -2)),
        ((1, 0, 0), (0, 0, -2)),
        ((0, 0, 1), (0, -1, -1)),
        (
            (0, 1, 0),
            (RDKafkaErrorCode::UnknownLeaderEpoch as i16, -1, -1),
        ),
        (
            (0, -3, 0),
            (RDKafkaErrorCode::FencedLeaderEpoch as i16, -1, -1),
        ),
        (
            (2, -1, 0),
            (RDKafkaErrorCode::UnknownTopicOrPartition as i16, -1, -1),
        ),
    ];
    let mut raw = RawConn::connect(broker.addr);
    for v in 2..=4 {
        let partitions = cases
            .iter()
            .map(|((p, current, epoch), _)| {
                OffsetForLeaderPartition::default()
                    .with_partition(*p)
                    .with_current_leader_epoch(*current)
                    .with_leader_epoch(*epoch)
            })
            .collect();
        let mut req = OffsetForLeaderEpochRequest::default().with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("epochs")))
                .with_partitions(partitions),
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("nope")))
                .with_partitions(vec![OffsetForLeaderPartition::default()]),
        ]);
        if v >= 3 {
            req = req.with_replica_id(BrokerId(-1));
        }
        let resp: OffsetForLeaderEpochResponse = raw.request(ApiKey::OffsetForLeaderEpoch, v, &req);
        let got = &resp.topics[0].partitions;
        let ends: i64 = got[..2].iter().map(|p| p.end_offset).sum();
        assert_eq!(ends, 10, "epoch 0 ends at each log end: {got:?}");
        for (((p, _, _), (code, epoch, end)), g) in cases.iter().zip(got) {
            assert_eq!(g.partition, *p);
            assert_eq!(g.error_code, *code, "v{v} {g:?}");
            assert_eq!(g.leader_epoch, *epoch, "v{v} {g:?}");
            if *end != -2 {
                assert_eq!(g.end_offset, *end, "v{v} {g:?}");
            }
        }
        let missing = &resp.topics[1].partitions[0];
        assert_eq!(
            missing.error_code,
            RDKafkaErrorCode::UnknownTopicOrPartition as i16
        );
    }
    broker.shutdown().unwrap();
}

#[test]
fn describe_log_dirs_reports_partition_sizes_and_the_filesystem() {
    use kafka_protocol::messages::describe_log_dirs_request::{
        DescribableLogDirTopic, DescribeLogDirsRequest,
    };
    use kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResponse;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("offsets.topic.num.partitions", "1")]);
    find_coordinator(broker.addr, "g");
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("sizes", 2, TopicReplication::Fixed(1))],
    );
    let messages: Vec<_> = (0..200)
        .map(|i| (Some(format!("k{i}")), "x".repeat(500)))
        .collect();
    rd_produce(broker.addr, "sizes", &[], &messages);
    let mut raw = RawConn::connect(broker.addr);
    for v in 1..=4 {
        let all: DescribeLogDirsResponse = raw.request(
            ApiKey::DescribeLogDirs,
            v,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        assert_eq!(all.results.len(), 1);
        let d = &all.results[0];
        assert_eq!(d.error_code, 0);
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(d.log_dir.as_str(), canonical.to_str().unwrap());
        let t = d
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "sizes")
            .expect("topic listed");
        assert_eq!(t.partitions.len(), 2);
        let total: i64 = t.partitions.iter().map(|p| p.partition_size).sum();
        assert!(total >= 200 * 500, "{total} bytes hold 100 KB of values");
        assert!(d
            .topics
            .iter()
            .any(|t| t.name.0.as_str() == "__consumer_offsets"));
        if v >= 4 {
            assert!(d.total_bytes > 0 && d.usable_bytes >= 0, "{d:?}");
            assert!(d.usable_bytes <= d.total_bytes);
        }

        let some: DescribeLogDirsResponse = raw.request(
            ApiKey::DescribeLogDirs,
            v,
            &DescribeLogDirsRequest::default().with_topics(Some(vec![
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("sizes")))
                    .with_partitions(vec![1, 7]),
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("absent")))
                    .with_partitions(vec![0]),
            ])),
        );
        let topics = &some.results[0].topics;
        assert_eq!(topics.len(), 1, "{topics:?}");
        let parts: Vec<i32> = topics[0]
            .partitions
            .iter()
            .map(|p| p.partition_index)
            .collect();
        assert_eq!(parts, vec![1]);
    }
    broker.shutdown().unwrap();
}

#[test]
fn list_offsets_finds_records_inside_compressed_batches_and_the_max_timestamp() {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    use kafka_protocol::messages::list_offsets_response::ListOffsetsResponse;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("offsets.topic.num.partitions", "1")]);
    rd_create_topics(
        broker.addr,
        &[NewTopic::new("ts", 1, TopicReplication::Fixed(1))],
    );
    let base: i64 = 1_700_000_000_000;
    // Record i has timestamp base + 10 i, but record 7, which has the largest.
    let stamp = |i: i64| {
        if i == 7 {
            base + 100_000
        } else {
            base + 10 * i
        }
    };
    let producer: BaseProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .set("compression.codec", "gzip")
        .set("linger.ms", "500")
        .create()
        .unwrap();
    let value = "v".repeat(200);
    for i in 0..20 {
        producer
            .send(
                BaseRecord::<(), str>::to("ts")
                    .payload(&value)
                    .partition(0)
                    .timestamp(stamp(i)),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let log = std::fs::read(dir.path().join("ts-0").join("00000000000000000000.log")).unwrap();
    assert_eq!(
        i16::from_be_bytes([log[21], log[22]]) & 7,
        1,
        "the batch is gzip-compressed"
    );

    let mut raw = RawConn::connect(broker.addr);
    let mut ask = |v: i16, timestamp: i64| {
        let resp: ListOffsetsResponse = raw.request(
            ApiKey::ListOffsets,
            v,
            &ListOffsetsRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("ts")))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp)])]),
        );
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "v{v} {timestamp}");
        (p.offset, p.timestamp)
    };
    for v in 1..=10 {
        assert_eq!(
            ask(v, base + 35),
            (4, base + 40),
            "v{v}: the record, not the batch"
        );
        assert_eq!(ask(v, base + 190), (7, base + 100_000), "v{v}");
        assert_eq!(ask(v, base + 100_001), (-1, -1), "v{v}");
        assert_eq!(ask(v, -2).0, 0);
        assert_eq!(ask(v, -1).0, 20);
    }
    for v in 7..=10 {
        assert_eq!(ask(v, -3), (7, base + 100_000), "v{v}: MAX_TIMESTAMP");
    }
    for v in 8..=10 {
        assert_eq!(
            ask(v, -4).0,
            0,
            "v{v}: EARLIEST_LOCAL_TIMESTAMP is the log start"
        );
    }
    for v in 9..=10 {
        assert_eq!(ask(v, -5), (-1, -1), "v{v}: nothing is tiered");
    }
    broker.shutdown().unwrap();
}

/// FindCoordinator v1 for group `group`: (error, node id).
fn find_coordinator(addr: SocketAddr, group: &str) -> (i16, i32) {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(group.to_string()))
        .with_key_type(0);
    let resp: FindCoordinatorResponse =
        RawConn::connect(addr).request(ApiKey::FindCoordinator, 1, &req);
    (resp.error_code, resp.node_id.0)
}

#[test]
fn consumer_offsets_is_created_by_the_first_find_coordinator_not_at_start_up() {
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[("offsets.topic.num.partitions", "3")]);
    let topics = || -> Vec<(String, usize)> {
        let m: MetadataResponse = RawConn::connect(broker.addr).request(
            ApiKey::Metadata,
            9,
            &MetadataRequest::default().with_topics(None),
        );
        m.topics
            .iter()
            .map(|t| {
                let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                (name, t.partitions.len())
            })
            .collect()
    };
    assert!(topics().is_empty(), "a fresh broker has no topic");
    assert!(!dir.path().join("__consumer_offsets-0").exists());
    // As in Kafka, the first client that needs a group coordinator creates it; this broker
    // answers that client with the coordinator rather than COORDINATOR_NOT_AVAILABLE.
    assert_eq!(find_coordinator(broker.addr, "g"), (0, 0));
    assert_eq!(topics(), vec![("__consumer_offsets".to_string(), 3)]);
    broker.shutdown().unwrap();
}
