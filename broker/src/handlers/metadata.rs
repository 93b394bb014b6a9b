//! Metadata: brokers, topics and partition leaders from the shard's catalog snapshot, creating
//! requested topics first when auto-creation is on.

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::BrokerId;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::metadata;
use tributary_protocol::topic::validate_topic_name;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{AclOperation, ResourceType};

use super::common::authorized_operations::{self as ops, when};
use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
#[cfg(test)]
use crate::catalog::note_fencings;
use crate::catalog::{BrokerRegistration, Catalog};
use crate::conn::Conn;
use crate::controller::NewTopic;
use crate::shard::Shard;
#[cfg(test)]
use std::collections::HashMap;

/// Metadata: the requested topics (every one the principal may describe when none are named),
/// auto-created first when allowed, the brokers listed on the client's listener, and the
/// cluster's id, controller and authorized operations as version `v` has them.
pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| metadata::decode(r, v))?;
    let (requested, asked_by_id, unknown_ids) = by_name(&shard.catalog(), req.topics.as_deref());
    if let Some(names) = &requested {
        auto_create(shard, conn, names, req.allow_auto_topic_creation).await;
    }
    // A leader seen dying is not named (`answered_leader`); rather than "no leader", which a
    // client follows up only at its next topic scan, the answer waits a moment for the new one.
    let me = shard.config.node_id;
    let catalog = super::common::past_doubted_leaders(shard, |catalog, doubted| {
        names_a_doubted_leader(catalog, requested.as_deref(), me, doubted)
    })
    .await;
    // Every topic: only those the principal may describe. Named ones it may not:
    // TOPIC_AUTHORIZATION_FAILED.
    let names: Vec<Option<String>> = match requested {
        Some(n) => n,
        None => catalog
            .topics
            .keys()
            .filter(|t| may_describe(shard, conn, t))
            .cloned()
            .map(Some)
            .collect(),
    };
    let mut topics = topics(
        shard,
        conn,
        &catalog,
        &names,
        v,
        req.include_topic_authorized_operations,
    );
    // A topic asked for by id that the principal may not describe keeps its name to itself,
    // as in Kafka.
    for (t, id) in topics.iter_mut().zip(&asked_by_id) {
        if let Some(id) =
            id.filter(|_| t.error_code == ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())
        {
            t.name = None;
            t.topic_id = uuid::Uuid::from_bytes(id);
        }
    }
    topics.extend(unknown_ids.into_iter().map(|id| {
        MetadataResponseTopic::default()
            .with_error_code(ErrorCode::UNKNOWN_TOPIC_ID.code())
            .with_name(None)
            .with_topic_id(uuid::Uuid::from_bytes(id))
    }));
    let cfg = &shard.config;
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers(shard, conn, &catalog))
        .with_topics(topics);
    if v >= 2 {
        resp = resp.with_cluster_id(Some(str_bytes(&catalog.cluster_id)));
    }
    if v >= 1 {
        // As KRaft brokers answer: clients cannot reach the controllers, and any broker takes
        // admin requests (this one proposes them to the quorum itself).
        resp = resp.with_controller_id(BrokerId(cfg.node_id));
    }
    if (8..=10).contains(&v) {
        resp = resp.with_cluster_authorized_operations(when(
            req.include_cluster_authorized_operations,
            shard.authorized_ops(
                conn,
                ResourceType::Cluster,
                tributary_security::acl::CLUSTER_RESOURCE_NAME,
                ops::CLUSTER,
            ),
        ));
    }
    frame(spec, header, &resp)
}

/// The requested topics by name: a topic asked for by id (v12+, as KIP-848 consumers ask for
/// the topics of an assignment) is answered by its name; beside them, which were asked for by
/// id, and the ids no topic has (answered UNKNOWN_TOPIC_ID). `None`: every topic.
type ByName = (
    Option<Vec<Option<String>>>,
    Vec<Option<[u8; 16]>>,
    Vec<[u8; 16]>,
);

fn by_name(
    catalog: &Catalog,
    topics: Option<&[tributary_protocol::requests::metadata::MetadataTopic]>,
) -> ByName {
    let Some(topics) = topics else {
        return (None, Vec::new(), Vec::new());
    };
    let mut names = Vec::with_capacity(topics.len());
    let mut by_id = Vec::with_capacity(topics.len());
    let mut unknown = Vec::new();
    for t in topics {
        let named = t.name.clone().or_else(|| {
            (t.topic_id != [0; 16])
                .then(|| catalog.topic_by_id(&t.topic_id).map(|m| m.name.clone()))
                .flatten()
        });
        let id = (t.name.is_none() && t.topic_id != [0; 16]).then_some(t.topic_id);
        match named {
            Some(name) => {
                names.push(Some(name));
                by_id.push(id);
            }
            None if t.topic_id == [0; 16] => {
                names.push(None);
                by_id.push(None);
            }
            None => unknown.push(t.topic_id),
        }
    }
    (Some(names), by_id, unknown)
}

/// Whether the principal may see topic `t` in Metadata: DESCRIBE on it.
fn may_describe(shard: &Shard, conn: Conn<'_>, t: &str) -> bool {
    shard.allowed(conn, AclOperation::Describe, ResourceType::Topic, t)
}

/// Creates the topics of `names` that do not exist and have valid names, those the principal
/// may create, when the request allows auto-creation (`allow`) and the broker has it on; the
/// catalog to answer from, taken again after a creation.
async fn auto_create(shard: &Rc<Shard>, conn: Conn<'_>, names: &[Option<String>], allow: bool) {
    let catalog = shard.catalog();
    // Auto-creation needs CREATE on the cluster or on the topic, as in Kafka.
    let may_create = |t: &str| {
        shard.allowed_on_cluster(conn, AclOperation::Create)
            || shard.allowed(conn, AclOperation::Create, ResourceType::Topic, t)
    };
    let missing: Vec<NewTopic> = names
        .iter()
        .flatten()
        .filter(|n| !catalog.topics.contains_key(*n) && validate_topic_name(n).is_ok())
        .filter(|n| may_create(n))
        .map(|n| NewTopic {
            name: n.clone(),
            partitions: shard.config.num_partitions,
            replication_factor: shard.config.default_replication_factor,
            configs: Vec::new(),
            assignment: None,
        })
        .collect();
    if !missing.is_empty() && allow && shard.config.auto_create_topics {
        crate::controller::ask(
            shard,
            |s, c| async move { c.create_topics(&s, missing).await },
        )
        .await;
    }
}

/// The topics of `names` as Metadata v`v` answers them (see [`describe_topic`]):
/// TOPIC_AUTHORIZATION_FAILED for one the principal may not describe, and from v8 the
/// authorized operations of each one found when the client asked for them (`asked_ops`).
fn topics(
    shard: &Shard,
    conn: Conn<'_>,
    catalog: &Catalog,
    names: &[Option<String>],
    v: i16,
    asked_ops: bool,
) -> Vec<MetadataResponseTopic> {
    // What this node doubts, once for the whole answer.
    let doubted = shard.doubts.doubted(Instant::now());
    names
        .iter()
        .map(|n| {
            if let Some(name) = n.as_deref().filter(|n| !may_describe(shard, conn, n)) {
                return MetadataResponseTopic::default()
                    .with_name(Some(topic_name(name)))
                    .with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.code());
            }
            let t = describe_topic(catalog, n.as_deref(), v, shard.config.node_id, &doubted);
            if v >= 8 {
                // As Kafka's `handleTopicMetadataRequest`: every topic asked for by name that
                // the principal may describe gets its operations, one that does not exist
                // too (kafka-python's admin reads the field of an unknown topic); an unknown
                // topic id, and a topic it may not describe, keep the schema's INT32_MIN.
                let asked = asked_ops && n.is_some();
                let allowed = match (asked, n.as_deref()) {
                    (true, Some(name)) => {
                        shard.authorized_ops(conn, ResourceType::Topic, name, ops::TOPIC)
                    }
                    _ => ops::TOPIC,
                };
                t.with_topic_authorized_operations(when(asked, allowed))
            } else {
                t
            }
        })
        .collect()
}

/// The brokers Metadata lists (see [`listed`]), as the client's listener reaches them.
fn brokers(shard: &Shard, conn: Conn<'_>, catalog: &Catalog) -> Vec<MetadataResponseBroker> {
    // Each broker's endpoint on the listener the client connected to; one without that
    // listener is left out, as Kafka does.
    let grace = Duration::from_millis(shard.config.cluster.broker_session_timeout_ms);
    let now = Instant::now();
    let fenced_since = |id| shard.fenced_since.borrow().get(&id).copied();
    catalog
        .brokers
        .values()
        .filter(|b| listed(b, fenced_since(b.id), now, grace))
        .filter_map(|b| {
            let (host, port) = b.endpoint(conn.listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect()
}

/// Topic `name` as Metadata v`v` answers it, naming no leader in `doubted` (`me` is this node).
fn describe_topic(
    catalog: &Catalog,
    name: Option<&str>,
    v: i16,
    me: i32,
    doubted: &[i32],
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    let Some(name) = name else {
        return t
            .with_error_code(ErrorCode::UNKNOWN_TOPIC_ID.code())
            .with_name(None);
    };
    t = t.with_name(Some(topic_name(name)));
    if v >= 1 {
        t = t.with_is_internal(crate::group::is_internal(name));
    }
    if validate_topic_name(name).is_err() {
        return t.with_error_code(ErrorCode::INVALID_TOPIC_EXCEPTION.code());
    }
    let Some(meta) = catalog.topics.get(name) else {
        return t.with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code());
    };
    if v >= 10 {
        t = t.with_topic_id(meta.uuid());
    }
    let ids = |ids: &[i32]| ids.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let partitions = (0..meta.partitions)
        .zip(&meta.assignment)
        .map(|(p, r)| {
            let leader = answered_leader(r.leader, me, doubted);
            let code = if leader < 0 {
                ErrorCode::LEADER_NOT_AVAILABLE
            } else {
                ErrorCode::NONE
            };
            let offline: Vec<i32> = r
                .replicas
                .iter()
                .copied()
                .filter(|b| catalog.brokers.get(b).is_none_or(|b| b.fenced))
                .collect();
            let mut part = MetadataResponsePartition::default()
                .with_error_code(code.code())
                .with_partition_index(p)
                .with_leader_id(BrokerId(leader))
                .with_replica_nodes(ids(&r.replicas))
                .with_isr_nodes(ids(&r.isr));
            if v >= 5 {
                part = part.with_offline_replicas(ids(&offline));
            }
            if v >= 7 {
                part = part.with_leader_epoch(r.leader_epoch.0);
            }
            part
        })
        .collect();
    t.with_partitions(partitions)
}

/// The leader Metadata names for a partition the image says `leader` leads: none (-1, with
/// LEADER_NOT_AVAILABLE) while this node doubts that leader's process (its quorum connection
/// just ended, or its port refuses: see `tributary_quorum::PeerDoubts`), until the fencing that
/// moves the partition arrives or the doubt clears. A client told the dead leader keeps it, and
/// librdkafka looks again only at its next one-second topic scan (its fast leader query stops
/// once every partition has a leader); told none, it asks again at once and backs off from
/// `retry.backoff.ms`, finding the new leader within a few hundred milliseconds.
/// Whether a partition of the topics `names` (every topic: `None`) is led, in `catalog`, by a
/// node in `doubted` other than `me`.
fn names_a_doubted_leader(
    catalog: &Catalog,
    names: Option<&[Option<String>]>,
    me: i32,
    doubted: &[i32],
) -> bool {
    let doubtful = |t: &crate::catalog::TopicMeta| {
        t.assignment
            .iter()
            .any(|r| answered_leader(r.leader, me, doubted) != r.leader)
    };
    match names {
        None => catalog.topics.values().any(doubtful),
        Some(names) => names
            .iter()
            .flatten()
            .filter_map(|n| catalog.topics.get(n.as_str()))
            .any(doubtful),
    }
}

pub fn answered_leader(leader: i32, me: i32, doubted: &[i32]) -> i32 {
    if leader >= 0 && leader != me && doubted.contains(&leader) {
        -1
    } else {
        leader
    }
}

/// Whether Metadata lists broker `b`: a live one always; a fenced one for `grace` (one
/// `broker.session.timeout.ms`) after this shard first saw it fenced, then no more (Kafka
/// leaves fenced brokers out at once). The grace is for librdkafka: when the response that
/// moves a partition to its new leader also drops the old leader's broker, librdkafka 2.12
/// decommissions that broker while the partition is still on its way off it, parks the
/// partition on its internal broker and finds the new leader only at its next one-second
/// topic scan — about a second more of every leader kill (measured: 1.4–1.5 s ack gaps
/// listed out at once, 0.13–0.4 s listed). Once the grace ends the partitions have long
/// moved, and dropping the broker costs nothing. A client that tries a listed dead broker is
/// refused at once and tries another.
pub fn listed(
    b: &BrokerRegistration,
    fenced_since: Option<Instant>,
    now: Instant,
    grace: Duration,
) -> bool {
    if !b.fenced {
        return true;
    }
    fenced_since.is_some_and(|since| now.saturating_duration_since(since) < grace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::command::{apply, FenceReason, MetadataCommand};

    fn image_with_broker_1_fenced(fenced: bool) -> Catalog {
        let mut image = Catalog::empty();
        let register = MetadataCommand::RegisterBroker {
            id: 1,
            incarnation: "x".into(),
            host: "127.0.0.1".into(),
            port: 9000,
            listeners: Vec::new(),
            rack: None,
        };
        apply(&mut image, 1, &register.encode());
        if fenced {
            let fence = MetadataCommand::FenceBroker {
                id: 1,
                controlled: false,
                epoch: None,
                reason: FenceReason::ProcessGone,
            };
            apply(&mut image, 2, &fence.encode());
        }
        image
    }

    #[test]
    fn a_fenced_broker_stays_listed_for_one_grace_then_goes() {
        let grace = Duration::from_millis(2000);
        let t0 = Instant::now();
        let mut since = HashMap::new();
        let live = image_with_broker_1_fenced(false);
        note_fencings(&mut since, &live, t0);
        assert!(since.is_empty());
        assert!(listed(&live.brokers[&1], None, t0, grace));

        let fenced = image_with_broker_1_fenced(true);
        note_fencings(&mut since, &fenced, t0);
        // A later image that still shows it fenced keeps the first sighting.
        note_fencings(&mut since, &fenced, t0 + Duration::from_millis(1500));
        let b = &fenced.brokers[&1];
        assert!(listed(
            b,
            since.get(&1).copied(),
            t0 + Duration::from_millis(1999),
            grace
        ));
        assert!(!listed(b, since.get(&1).copied(), t0 + grace, grace));
        // Never seen fenced by this shard: not listed.
        assert!(!listed(b, None, t0, grace));

        note_fencings(&mut since, &live, t0 + grace);
        assert!(since.is_empty(), "unfenced: forgotten");
    }

    #[test]
    fn a_doubted_leader_is_not_named() {
        let doubted = [2];
        assert_eq!(answered_leader(2, 1, &doubted), -1);
        assert_eq!(answered_leader(3, 1, &doubted), 3);
        assert_eq!(answered_leader(-1, 1, &doubted), -1);
        // This node never doubts itself.
        assert_eq!(answered_leader(2, 2, &doubted), 2);
    }
}
