//! `trib topics reassign`, `trib topics reassignments` and `trib leaders elect`: the admin
//! calls librdkafka's admin API lacks (AlterPartitionReassignments, ListPartitionReassignments,
//! ElectLeaders), sent as raw requests to the bootstrap broker and decoded with the
//! `kafka-protocol` crate. The broker forwards them to the metadata quorum itself.

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;

use crate::Cli;

/// AlterPartitionReassignments and ListPartitionReassignments: v0, the version every broker
/// with KIP-455 serves.
const REASSIGNMENTS_VERSION: i16 = 0;
/// ElectLeaders v1: the first with the election type.
const ELECT_LEADERS_VERSION: i16 = 1;
/// Kafka's `ElectionType`.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

#[derive(Subcommand)]
pub enum LeadersCommand {
    /// Move leadership to each partition's preferred (first) replica, or, `--unclean`, give a
    /// partition without a leader to any live replica (what others held beyond it is lost).
    Elect {
        topic: String,
        /// One partition; all of the topic's without it.
        #[arg(long)]
        partition: Option<i32>,
        #[arg(long)]
        unclean: bool,
    },
}

/// `trib topics reassign`: move one partition to `replicas`, or cancel its move.
pub fn reassign(
    cli: &Cli,
    topic: &str,
    partition: i32,
    replicas: Option<&str>,
    cancel: bool,
) -> Result<()> {
    let target = match (replicas, cancel) {
        (Some(list), false) => Some(parse_replicas(list)?),
        (None, true) => None,
        _ => bail!("give either --replicas or --cancel"),
    };
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms(cli))
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    target
                        .as_ref()
                        .map(|r| r.iter().map(|&b| BrokerId(b)).collect()),
                )])]);
    let resp: AlterPartitionReassignmentsResponse = request(
        cli,
        ApiKey::AlterPartitionReassignments,
        REASSIGNMENTS_VERSION,
        &req,
    )?;
    check(
        resp.error_code,
        resp.error_message.as_deref(),
        "reassignment",
    )?;
    let p = resp
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| anyhow!("the broker answered for no partition"))?;
    check(
        p.error_code,
        p.error_message.as_deref(),
        &format!("{topic}-{partition}"),
    )?;
    match target {
        Some(r) => println!("reassigning {topic}-{partition} to replicas {r:?}"),
        None => println!("cancelled the reassignment of {topic}-{partition}"),
    }
    Ok(())
}

/// `trib topics reassignments`: every reassignment in progress, one partition per line.
pub fn list(cli: &Cli) -> Result<()> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms(cli))
        .with_topics(None);
    let resp: ListPartitionReassignmentsResponse = request(
        cli,
        ApiKey::ListPartitionReassignments,
        REASSIGNMENTS_VERSION,
        &req,
    )?;
    check(
        resp.error_code,
        resp.error_message.as_deref(),
        "listing reassignments",
    )?;
    if resp.topics.is_empty() {
        println!("no reassignment in progress");
    }
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    for t in &resp.topics {
        for p in &t.partitions {
            println!(
                "{}-{}\tReplicas: {:?}\tAdding: {:?}\tRemoving: {:?}",
                t.name.0.as_str(),
                p.partition_index,
                ids(&p.replicas),
                ids(&p.adding_replicas),
                ids(&p.removing_replicas)
            );
        }
    }
    Ok(())
}

pub fn leaders(cli: &Cli, cmd: &LeadersCommand) -> Result<()> {
    let LeadersCommand::Elect {
        topic,
        partition,
        unclean,
    } = cmd;
    let partitions: Vec<i32> = match partition {
        Some(p) => vec![*p],
        None => {
            let (_, md) = crate::admin::metadata(cli, Some(topic))?;
            let t = md
                .topics()
                .first()
                .ok_or_else(|| anyhow!("no metadata for topic {topic}"))?;
            if t.error().is_some() || t.partitions().is_empty() {
                bail!("topic {topic} does not exist");
            }
            t.partitions().iter().map(|p| p.id()).collect()
        }
    };
    let req = ElectLeadersRequest::default()
        .with_election_type(if *unclean { UNCLEAN } else { PREFERRED })
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(TopicName(StrBytes::from_string(topic.clone())))
            .with_partitions(partitions)]))
        .with_timeout_ms(timeout_ms(cli));
    let resp: ElectLeadersResponse =
        request(cli, ApiKey::ElectLeaders, ELECT_LEADERS_VERSION, &req)?;
    check(resp.error_code, None, "leader election")?;
    let mut failed = 0;
    for t in &resp.replica_election_results {
        for p in &t.partition_result {
            let name = format!("{}-{}", t.topic.0.as_str(), p.partition_id);
            match p.error_code {
                0 => println!("{name}\telected"),
                code => {
                    // Nothing to do is not a failure (kafka-leader-election.sh says so too).
                    if code != ELECTION_NOT_NEEDED {
                        failed += 1;
                    }
                    println!(
                        "{name}\t{}{}",
                        error_name(code),
                        p.error_message
                            .as_deref()
                            .map_or(String::new(), |m| format!(": {m}"))
                    );
                }
            }
        }
    }
    if failed > 0 {
        bail!("{failed} partition(s) got no new leader");
    }
    Ok(())
}

/// `2,3,1` as broker ids.
fn parse_replicas(list: &str) -> Result<Vec<i32>> {
    list.split(',')
        .map(|s| {
            s.trim()
                .parse::<i32>()
                .with_context(|| format!("{s:?} in --replicas is not a broker id"))
        })
        .collect()
}

fn timeout_ms(cli: &Cli) -> i32 {
    i32::try_from(cli.timeout_ms).unwrap_or(i32::MAX)
}

/// Ok for code 0; otherwise the error `what: NAME (message)`.
pub(crate) fn check(code: i16, message: Option<&str>, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    bail!("{what}: {}", describe_error(code, message))
}

const ELECTION_NOT_NEEDED: i16 = 84;

/// Kafka's name for an error code (`CLUSTER_AUTHORIZATION_FAILED`), from the `kafka-protocol`
/// crate's table of every code Kafka defines; a code it does not know is `error code N`.
pub(crate) fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("error code {code}"),
        // The crate names each code in CamelCase after Kafka's `Errors` enum.
        Some(known) => {
            let camel = known.to_string();
            let mut name = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            name
        }
    }
}

/// An error code with the broker's message for it: `NAME (message)`, or `NAME` without one.
pub(crate) fn describe_error(code: i16, message: Option<&str>) -> String {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{} ({m})", error_name(code)),
        None => error_name(code),
    }
}

/// Ends a command whose request carried several entries the broker answered one by one
/// (`noun`: what they are, plural). One failure is the command's error; with several, each is
/// printed on stderr and the error counts them. Either way the exit status is nonzero.
pub(crate) fn entries_done(failures: Vec<String>, total: usize, noun: &str) -> Result<()> {
    match failures.len() {
        0 => Ok(()),
        1 => bail!("{}", failures[0]),
        n => {
            for f in &failures {
                eprintln!("trib: {f}");
            }
            bail!("{n} of {total} {noun} failed")
        }
    }
}

/// One request to the bootstrap broker and its decoded response.
/// One request to the bootstrap broker and its decoded response.
pub(crate) fn request<Req: Encodable, Resp: Decodable>(
    cli: &Cli,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Result<Resp> {
    let first = cli.bootstrap.split(',').next().unwrap_or_default();
    request_at(cli, first, key, version, req)
}

/// One request to the broker at `host_port` and its decoded response.
pub(crate) fn request_at<Req: Encodable, Resp: Decodable>(
    cli: &Cli,
    host_port: &str,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Result<Resp> {
    const CORRELATION: i32 = 1;
    let body = crate::raw::encode_request(key, version, CORRELATION, req)?;
    let answer = crate::admin::exchange_at(cli, host_port, &body)?;
    crate::raw::decode_response(answer, key, version, CORRELATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_lists_parse_and_bad_ones_are_named() {
        assert_eq!(parse_replicas("2, 3,1").unwrap(), vec![2, 3, 1]);
        let e = parse_replicas("2,x").unwrap_err().to_string();
        assert!(e.contains("\"x\""), "{e}");
        assert_eq!(error_name(85), "NO_REASSIGNMENT_IN_PROGRESS");
        assert_eq!(error_name(999), "error code 999");
    }

    #[test]
    fn error_codes_have_kafkas_names() {
        for (code, name) in [
            (-1, "UNKNOWN_SERVER_ERROR"),
            (6, "NOT_LEADER_OR_FOLLOWER"),
            (31, "CLUSTER_AUTHORIZATION_FAILED"),
            (42, "INVALID_REQUEST"),
            (54, "SECURITY_DISABLED"),
            (58, "SASL_AUTHENTICATION_FAILED"),
            (84, "ELECTION_NOT_NEEDED"),
            (91, "RESOURCE_NOT_FOUND"),
            (92, "DUPLICATE_RESOURCE"),
            (105, "TRANSACTIONAL_ID_NOT_FOUND"),
        ] {
            assert_eq!(error_name(code), name);
        }
        assert_eq!(
            describe_error(54, Some("No Authorizer is configured.")),
            "SECURITY_DISABLED (No Authorizer is configured.)"
        );
        assert_eq!(describe_error(91, Some("")), "RESOURCE_NOT_FOUND");
    }
}
