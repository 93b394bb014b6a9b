//! ACLs over the wire, with Kafka's StandardAuthorizer rules: a broker whose only listener is
//! SASL_PLAINTEXT (PLAIN users admin, alice, bob; admin a super user), ACLs created, described
//! and deleted with the ACL APIs, and the matrix — nothing allowed without an ACL, a LITERAL
//! and a PREFIXED allow, DENY beating ALLOW, WRITE implying DESCRIBE, `User:*`, topics hidden
//! from Metadata, groups, transactional ids and the cluster's own operations.

mod common;

use std::net::SocketAddr;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateAclsRequest, CreateAclsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    InitProducerIdRequest, InitProducerIdResponse, JoinGroupRequest, JoinGroupResponse,
    MetadataRequest, MetadataResponse, ProduceResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tributary_broker::server::BrokerHandle;

use common::{metric, start_broker, RawConn};

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";"#;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const SECURITY_DISABLED: i16 = 54;
const INVALID_REQUEST: i16 = 42;

// Kafka's codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TRANSACTIONAL_ID: i8 = 5;
const ANY: i8 = 1;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn broker(dir: &std::path::Path, authorizer: bool) -> (BrokerHandle, SocketAddr) {
    broker_on(dir, authorizer, 1, &[])
}

/// The broker of these tests on `shards` shards, with `extra` properties.
fn broker_on(
    dir: &std::path::Path,
    authorizer: bool,
    shards: usize,
    extra: &[(&str, &str)],
) -> (BrokerHandle, SocketAddr) {
    let mut props = vec![
        ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
        ("sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        ("super.users", "User:admin"),
    ];
    if authorizer {
        props.push((
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ));
    }
    props.extend_from_slice(extra);
    let b = start_broker(dir, shards, &props);
    let addr = b.addr;
    (b, addr)
}

/// A connection authenticated as `user` with PLAIN.
fn login(addr: SocketAddr, user: &str) -> RawConn {
    let mut c = RawConn::connect(addr);
    let h: SaslHandshakeResponse = c.request(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    assert_eq!(h.error_code, 0);
    let a: SaslAuthenticateResponse = c.request(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(format!("\0{user}\0{user}-secret").into_bytes().into()),
    );
    assert_eq!(a.error_code, 0, "{user} logs in");
    c
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn acl(rt: i8, name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

fn create_acls(c: &mut RawConn, acls: Vec<AclCreation>) -> Vec<i16> {
    let r: CreateAclsResponse = c.request(
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(acls),
    );
    r.results.iter().map(|x| x.error_code).collect()
}

fn create_topic(c: &mut RawConn, name: &str) -> i16 {
    let r: CreateTopicsResponse = c.request(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
    );
    r.topics[0].error_code
}

fn produce(c: &mut RawConn, topic: &str) -> i16 {
    let batch = tributary_protocol::record_batch::build_batch(
        &[(None, Some(b"v"))],
        1_700_000_000_000,
        None,
    );
    let r: ProduceResponse = c.request(
        ApiKey::Produce,
        9,
        &common::produce_request(topic, 0, 1, batch.freeze()),
    );
    r.responses[0].partition_responses[0].error_code
}

fn fetch(c: &mut RawConn, topic: &str) -> (i16, usize) {
    let r: FetchResponse = c.request(
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(10)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.records.as_ref().map_or(0, |b| b.len()))
}

fn metadata(c: &mut RawConn, topics: Option<&[&str]>) -> Vec<(String, i16)> {
    let r: MetadataResponse = c.request(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
                    .collect()
            })),
    );
    r.topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect()
}

#[test]
fn the_acl_matrix_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (b, addr) = broker(dir.path(), true);
    let mut admin = login(addr, "admin");
    let mut alice = login(addr, "alice");
    let mut bob = login(addr, "bob");
    for t in ["orders", "logs-app", "logs-web", "secret"] {
        assert_eq!(
            create_topic(&mut admin, t),
            0,
            "a super user may do anything"
        );
    }
    // Nothing is allowed without an ACL: no topic shows, none can be written or created.
    assert!(metadata(&mut alice, None).is_empty());
    assert_eq!(
        metadata(&mut alice, Some(&["orders"])),
        [("orders".to_string(), TOPIC_AUTHORIZATION_FAILED)]
    );
    // Asked for by id, a topic the principal may not describe keeps its name to itself.
    let id = {
        let r: MetadataResponse = admin.request(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s("orders"))))
            ])),
        );
        r.topics[0].topic_id
    };
    let r: MetadataResponse = alice.request(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_topic_id(id)
            .with_name(None)])),
    );
    assert_eq!(r.topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(
        (r.topics[0].name.as_ref(), r.topics[0].topic_id),
        (None, id)
    );
    assert_eq!(produce(&mut alice, "orders"), TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(create_topic(&mut alice, "mine"), TOPIC_AUTHORIZATION_FAILED);
    // Only ALTER on the cluster changes ACLs.
    assert_eq!(
        create_acls(
            &mut bob,
            vec![acl(TOPIC, "orders", LITERAL, "User:bob", ALL, ALLOW)]
        ),
        [CLUSTER_AUTHORIZATION_FAILED]
    );
    // A bad binding is INVALID_REQUEST; the valid ones of the request are still created.
    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                acl(TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
                acl(TOPIC, "logs-", PREFIXED, "User:alice", READ, ALLOW),
                acl(GROUP, "g-alice", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "logs-web", LITERAL, "User:*", READ, DENY),
                acl(TOPIC, "x", LITERAL, "alice-without-type", READ, ALLOW),
                acl(
                    CLUSTER,
                    "kafka-cluster",
                    LITERAL,
                    "User:alice",
                    CREATE,
                    ALLOW
                ),
            ]
        ),
        [0, 0, 0, 0, INVALID_REQUEST, 0]
    );
    // LITERAL WRITE: alice writes orders, and WRITE implies DESCRIBE (she sees it).
    assert_eq!(produce(&mut alice, "orders"), 0);
    let seen: Vec<String> = metadata(&mut alice, None)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        seen,
        ["logs-app", "logs-web", "orders"],
        "READ and WRITE imply DESCRIBE"
    );
    // PREFIXED READ: alice reads logs-app; the DENY for User:* beats it on logs-web.
    assert_eq!(produce(&mut admin, "logs-app"), 0);
    assert_eq!(produce(&mut admin, "logs-web"), 0);
    let (code, bytes) = fetch(&mut alice, "logs-app");
    assert_eq!(code, 0);
    assert!(bytes > 0);
    assert_eq!(fetch(&mut alice, "logs-web").0, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(fetch(&mut alice, "secret").0, TOPIC_AUTHORIZATION_FAILED);
    // Reading orders is not writing it.
    assert_eq!(fetch(&mut alice, "orders").0, TOPIC_AUTHORIZATION_FAILED);
    // CREATE on the cluster lets alice create topics.
    assert_eq!(create_topic(&mut alice, "mine"), 0);
    // Groups: READ on g-alice only.
    let join = |c: &mut RawConn, group: &str| -> i16 {
        let r: JoinGroupResponse = c.request(
            ApiKey::JoinGroup,
            5,
            &JoinGroupRequest::default()
                .with_group_id(kafka_protocol::messages::GroupId(s(group)))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_member_id(s(""))
                .with_protocol_type(s("consumer")),
        );
        r.error_code
    };
    assert_eq!(join(&mut bob, "g-alice"), GROUP_AUTHORIZATION_FAILED);
    assert_ne!(join(&mut alice, "g-alice"), GROUP_AUTHORIZATION_FAILED);
    let fc: FindCoordinatorResponse = bob.request(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(s("g-alice"))
            .with_key_type(0),
    );
    assert_eq!(fc.error_code, GROUP_AUTHORIZATION_FAILED);
    // Transactional ids and idempotent producers.
    let init = |c: &mut RawConn, id: Option<&str>| -> i16 {
        let r: InitProducerIdResponse = c.request(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(id.map(|i| TransactionalId(s(i))))
                .with_transaction_timeout_ms(60_000),
        );
        r.error_code
    };
    assert_eq!(
        init(&mut alice, Some("tx-a")),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );
    assert_eq!(init(&mut bob, None), CLUSTER_AUTHORIZATION_FAILED);
    assert_eq!(
        init(&mut alice, None),
        0,
        "WRITE on a topic allows idempotence (KIP-679)"
    );
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(
                TRANSACTIONAL_ID,
                "tx-",
                PREFIXED,
                "User:alice",
                WRITE,
                ALLOW
            )]
        ),
        [0]
    );
    assert_eq!(init(&mut alice, Some("tx-a")), 0);
    // A follower's fetch needs CLUSTER_ACTION.
    let r: FetchResponse = bob.request(
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_replica_id(BrokerId(7))
            .with_topics(vec![]),
    );
    assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
    // Administrative APIs: bob may look at and change nothing.
    {
        use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::*;
        let r: DescribeConfigsResponse = bob.request(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("orders"))
                    .with_configuration_keys(None),
            ]),
        );
        assert_eq!(r.results[0].error_code, TOPIC_AUTHORIZATION_FAILED);
        let r: ListOffsetsResponse = bob.request(
            ApiKey::ListOffsets,
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(s("orders")))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1)])]),
        );
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            TOPIC_AUTHORIZATION_FAILED
        );
        let r: DescribeLogDirsResponse = bob.request(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
        let r: DeleteGroupsResponse = bob.request(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default()
                .with_groups_names(vec![kafka_protocol::messages::GroupId(s("g-alice"))]),
        );
        assert_eq!(r.results[0].error_code, GROUP_AUTHORIZATION_FAILED);
        let r: DescribeUserScramCredentialsResponse = bob.request(
            ApiKey::DescribeUserScramCredentials,
            0,
            &DescribeUserScramCredentialsRequest::default().with_users(None),
        );
        assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
        // Metadata reports what the ACLs allow alice on orders: WRITE and the DESCRIBE it
        // implies (bits 4 and 8).
        let r: MetadataResponse = alice.request(
            ApiKey::Metadata,
            10,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(TopicName(s("orders"))))
                ]))
                .with_include_topic_authorized_operations(true),
        );
        assert_eq!(r.topics[0].topic_authorized_operations, (1 << 4) | (1 << 8));
    }
    // DescribeAcls lists what was made; DeleteAcls takes the deny away.
    let d: DescribeAclsResponse = admin.request(
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(TOPIC)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(ANY)
            .with_operation(ANY)
            .with_permission_type(ANY),
    );
    assert_eq!(d.error_code, 0);
    let names: Vec<String> = d
        .resources
        .iter()
        .map(|r| r.resource_name.to_string())
        .collect();
    assert_eq!(names, ["logs-", "logs-web", "orders"]);
    let del: DeleteAclsResponse = admin.request(
        ApiKey::DeleteAcls,
        3,
        &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_type_filter(TOPIC)
            .with_resource_name_filter(Some(s("logs-web")))
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(LITERAL)
            .with_operation(ANY)
            .with_permission_type(DENY)]),
    );
    assert_eq!(del.filter_results[0].error_code, 0);
    assert_eq!(del.filter_results[0].matching_acls.len(), 1);
    assert_eq!(fetch(&mut alice, "logs-web").0, 0, "the deny is gone");
    // bob may not describe ACLs.
    let d: DescribeAclsResponse = bob.request(
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(ANY)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(ANY)
            .with_operation(ANY)
            .with_permission_type(ANY),
    );
    assert_eq!(d.error_code, CLUSTER_AUTHORIZATION_FAILED);
    // ACLs are in the metadata log: a restart keeps them.
    drop((admin, alice, bob));
    b.shutdown().unwrap();
    let (b, addr) = broker(dir.path(), true);
    let mut alice = login(addr, "alice");
    assert_eq!(produce(&mut alice, "orders"), 0);
    assert_eq!(produce(&mut alice, "secret"), TOPIC_AUTHORIZATION_FAILED);
    b.shutdown().unwrap();
}

/// A SASL connection handed to the shard owning the partition it writes
/// (`connection.handover.produce.requests`) keeps its principal there: alice's writes stay
/// allowed where her ACL allows them and refused where none does.
#[test]
fn a_connection_handed_to_another_shard_keeps_its_principal() {
    assert!(
        tributary_broker::config::allowed_cpus().len() >= 2,
        "this test needs two CPUs: a connection moves between two shards"
    );
    const HANDED_OVER: &str = "tributary_connections_handed_over_total";
    let dir = tempfile::tempdir().unwrap();
    let props = [("connection.handover.produce.requests", "4")];
    let (b, addr) = broker_on(dir.path(), true, 2, &props);
    let scrape = b.metrics_addr.expect("metrics endpoint");
    let mut admin = login(addr, "admin");
    for t in ["allowed", "denied"] {
        assert_eq!(create_topic(&mut admin, t), 0);
    }
    let grant = acl(TOPIC, "allowed", LITERAL, "User:alice", WRITE, ALLOW);
    assert_eq!(create_acls(&mut admin, vec![grant]), [0]);
    // Each connection lands on either shard; twenty all landing on the owner of `allowed`
    // is a one-in-a-million event.
    let mut moved = false;
    for _ in 0..20 {
        let before = metric(scrape, HANDED_OVER);
        let mut alice = login(addr, "alice");
        for _ in 0..4 {
            assert_eq!(produce(&mut alice, "allowed"), 0);
        }
        // After a move these are served by the other shard.
        for _ in 0..2 {
            assert_eq!(produce(&mut alice, "allowed"), 0);
            assert_eq!(produce(&mut alice, "denied"), TOPIC_AUTHORIZATION_FAILED);
        }
        if metric(scrape, HANDED_OVER) > before {
            moved = true;
            break;
        }
    }
    assert!(moved, "no connection moved in twenty");
    b.shutdown().unwrap();
}

#[test]
fn without_an_authorizer_acl_requests_are_security_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let (b, addr) = broker(dir.path(), false);
    let mut alice = login(addr, "alice");
    assert_eq!(
        create_acls(
            &mut alice,
            vec![acl(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW)]
        ),
        [SECURITY_DISABLED]
    );
    // Everything is allowed.
    assert_eq!(create_topic(&mut alice, "t"), 0);
    assert_eq!(produce(&mut alice, "t"), 0);
    b.shutdown().unwrap();
}

/// OffsetFetch and OffsetDelete check each topic as Kafka does: DESCRIBE to see a topic's
/// committed offset (a named topic without it answers TOPIC_AUTHORIZATION_FAILED, a fetch of
/// all the group's offsets leaves it out), READ to delete it (a topic without it keeps its
/// offset).
#[test]
fn group_offsets_are_checked_per_topic() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
        OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
    };
    const DELETE: i8 = 6;
    let dir = tempfile::tempdir().unwrap();
    let (b, addr) = broker(dir.path(), true);
    let mut admin = login(addr, "admin");
    for t in ["seen", "hidden"] {
        assert_eq!(create_topic(&mut admin, t), 0);
    }
    let commit: OffsetCommitResponse = admin.request(
        ApiKey::OffsetCommit,
        8,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(s("offsets")))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(
                [("seen", 5), ("hidden", 7)]
                    .into_iter()
                    .map(|(t, o)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(o)])
                    })
                    .collect(),
            ),
    );
    assert!(commit
        .topics
        .iter()
        .all(|t| t.partitions.iter().all(|p| p.error_code == 0)));
    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                acl(GROUP, "offsets", LITERAL, "User:alice", READ, ALLOW),
                acl(GROUP, "offsets", LITERAL, "User:alice", DELETE, ALLOW),
                acl(TOPIC, "seen", LITERAL, "User:alice", READ, ALLOW),
            ],
        ),
        vec![0, 0, 0]
    );
    let fetch = |c: &mut RawConn, topics: Option<&[&str]>| -> Vec<(String, i64, i16)> {
        let r: OffsetFetchResponse = c.request(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default()
                .with_group_id(GroupId(s("offsets")))
                .with_topics(topics.map(|ts| {
                    ts.iter()
                        .map(|t| {
                            OffsetFetchRequestTopic::default()
                                .with_name(TopicName(s(t)))
                                .with_partition_indexes(vec![0])
                        })
                        .collect()
                })),
        );
        assert_eq!(r.error_code, 0);
        let mut out: Vec<(String, i64, i16)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.to_string(), p.committed_offset, p.error_code))
            })
            .collect();
        out.sort();
        out
    };
    let mut alice = login(addr, "alice");
    assert_eq!(
        fetch(&mut alice, Some(&["seen", "hidden"])),
        vec![
            ("hidden".to_string(), -1, TOPIC_AUTHORIZATION_FAILED),
            ("seen".to_string(), 5, 0)
        ]
    );
    assert_eq!(
        fetch(&mut alice, None),
        vec![("seen".to_string(), 5, 0)],
        "a topic alice may not describe is left out"
    );
    let delete: OffsetDeleteResponse = alice.request(
        ApiKey::OffsetDelete,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(GroupId(s("offsets")))
            .with_topics(
                ["seen", "hidden"]
                    .into_iter()
                    .map(|t| {
                        OffsetDeleteRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetDeleteRequestPartition::default().with_partition_index(0)
                            ])
                    })
                    .collect(),
            ),
    );
    assert_eq!(delete.error_code, 0);
    let mut codes: Vec<(String, i16)> = delete
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions[0].error_code))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![
            ("hidden".to_string(), TOPIC_AUTHORIZATION_FAILED),
            ("seen".to_string(), 0)
        ]
    );
    assert_eq!(
        fetch(&mut admin, Some(&["seen", "hidden"])),
        vec![("hidden".to_string(), 7, 0), ("seen".to_string(), -1, 0)],
        "only the offset alice may read was deleted"
    );
    drop((admin, alice));
    b.shutdown().unwrap();
}

#[test]
fn consumer_group_heartbeats_and_describes_need_describe_on_the_topics() {
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse, GroupId,
    };
    let dir = tempfile::tempdir().unwrap();
    let (b, addr) = broker(dir.path(), true);
    let mut admin = login(addr, "admin");
    for t in ["seen", "hidden"] {
        assert_eq!(create_topic(&mut admin, t), 0);
    }
    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                acl(GROUP, "cg", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "seen", LITERAL, "User:alice", READ, ALLOW),
            ],
        ),
        vec![0, 0]
    );
    let join = |c: &mut RawConn, topics: &[&str]| -> ConsumerGroupHeartbeatResponse {
        c.request(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("cg")))
                .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(topics.iter().map(|t| TopicName(s(t))).collect()))
                .with_topic_partitions(Some(Vec::new())),
        )
    };
    let mut alice = login(addr, "alice");
    // A subscription naming a topic alice may not describe is refused, as in Kafka.
    let r = join(&mut alice, &["seen", "hidden"]);
    assert_eq!(r.error_code, TOPIC_AUTHORIZATION_FAILED);
    let r = join(&mut alice, &["seen"]);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // The admin's member takes `hidden` too; a describe alice may not see whole is refused.
    let r = join(&mut admin, &["seen", "hidden"]);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(GROUP, "cg", LITERAL, "User:alice", ALL, ALLOW)],
        ),
        vec![0]
    );
    let describe = |c: &mut RawConn| -> i16 {
        let d: ConsumerGroupDescribeResponse = c.request(
            ApiKey::ConsumerGroupDescribe,
            0,
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg"))]),
        );
        d.groups[0].error_code
    };
    common::wait_until("the admin's member assigned hidden", || {
        describe(&mut admin) == 0 && describe(&mut alice) == TOPIC_AUTHORIZATION_FAILED
    });
    b.shutdown().unwrap();
}
