//! `trib topics ...` and `trib cluster info`.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;

use crate::Cli;

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Topic names, one per line.
    List {
        /// Include internal topics such as __consumer_offsets.
        #[arg(long)]
        internal: bool,
    },
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Replicas of each partition; -1: the broker's default.replication.factor.
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i32,
        /// Topic config, repeatable: `--config retention.ms=60000`.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Partitions, leaders, replicas, in-sync replicas, log start and end offsets, and configs.
    Describe { name: String },
    /// Delete a topic and its data.
    Delete { name: String },
    /// Change topic configs, keeping the other overrides.
    AlterConfig {
        name: String,
        #[arg(long = "set", value_name = "KEY=VALUE", required = true)]
        set: Vec<String>,
    },
    /// Move a partition to other brokers (`--replicas 2,3,1`, the first preferred as leader),
    /// or cancel its move (`--cancel`); it completes once the new replicas are in sync.
    Reassign {
        name: String,
        #[arg(long)]
        partition: i32,
        #[arg(
            long,
            value_name = "ID,ID,...",
            conflicts_with = "cancel",
            required_unless_present = "cancel"
        )]
        replicas: Option<String>,
        #[arg(long)]
        cancel: bool,
    },
    /// Reassignments in progress: each partition's replicas, those being added and removed.
    Reassignments,
}

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Brokers, the controller, and the API versions the bootstrap broker serves.
    Info,
}

pub fn client_config(cli: &Cli) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cli.bootstrap)
        .set("socket.timeout.ms", cli.timeout_ms.to_string())
        .set("log_level", "3");
    for (k, v) in &cli.security {
        c.set(k, v);
    }
    c
}

fn admin(cli: &Cli) -> Result<AdminClient<DefaultClientContext>> {
    client_config(cli)
        .create()
        .context("creating the admin client")
}

pub fn metadata(cli: &Cli, topic: Option<&str>) -> Result<(BaseConsumer, Metadata)> {
    let consumer: BaseConsumer = client_config(cli).create().context("creating a client")?;
    let md = consumer
        .fetch_metadata(topic, cli.timeout())
        .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    Ok((consumer, md))
}

pub fn parse_kv(s: &str) -> Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| anyhow!("{s:?} is not KEY=VALUE"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

fn opts(cli: &Cli) -> AdminOptions {
    AdminOptions::new()
        .operation_timeout(Some(cli.timeout()))
        .request_timeout(Some(cli.timeout()))
}

/// A topic's config overrides (entries set on the topic itself).
fn topic_configs(cli: &Cli, name: &str) -> Result<Vec<(String, String, bool)>> {
    let admin = admin(cli)?;
    let results = futures::executor::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(name)], &opts(cli)),
    )
    .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("no answer for topic {name}"))?
        .map_err(|e| anyhow!("describing topic {name}: {e}"))?;
    Ok(resource
        .entries
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default(), e.is_default))
        .collect())
}

pub fn topics(cli: &Cli, cmd: &TopicsCommand) -> Result<()> {
    match cmd {
        TopicsCommand::List { internal } => {
            let (_, md) = metadata(cli, None)?;
            let mut names: Vec<&str> = md
                .topics()
                .iter()
                .map(|t| t.name())
                .filter(|n| *internal || !n.starts_with("__"))
                .collect();
            names.sort_unstable();
            for n in names {
                println!("{n}");
            }
        }
        TopicsCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let configs: Vec<(String, String)> =
                configs.iter().map(|c| parse_kv(c)).collect::<Result<_>>()?;
            let mut topic = NewTopic::new(
                name,
                *partitions,
                TopicReplication::Fixed(*replication_factor),
            );
            for (k, v) in &configs {
                topic = topic.set(k, v);
            }
            let admin = admin(cli)?;
            let results = futures::executor::block_on(admin.create_topics([&topic], &opts(cli)))
                .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
            for r in results {
                r.map_err(|(t, e)| anyhow!("creating topic {t}: {e}"))?;
            }
            println!("created topic {name} with {partitions} partitions");
        }
        TopicsCommand::Describe { name } => describe(cli, name)?,
        TopicsCommand::Reassign {
            name,
            partition,
            replicas,
            cancel,
        } => crate::reassign::reassign(cli, name, *partition, replicas.as_deref(), *cancel)?,
        TopicsCommand::Reassignments => crate::reassign::list(cli)?,
        TopicsCommand::Delete { name } => {
            let admin = admin(cli)?;
            let results =
                futures::executor::block_on(admin.delete_topics(&[name.as_str()], &opts(cli)))
                    .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
            for r in results {
                r.map_err(|(t, e)| anyhow!("deleting topic {t}: {e}"))?;
            }
            println!("deleted topic {name}");
        }
        TopicsCommand::AlterConfig { name, set } => {
            let changes: Vec<(String, String)> =
                set.iter().map(|c| parse_kv(c)).collect::<Result<_>>()?;
            // AlterConfigs replaces every override, so send the current ones along.
            let mut merged: BTreeMap<String, String> = topic_configs(cli, name)?
                .into_iter()
                .filter(|(_, _, default)| !default)
                .map(|(k, v, _)| (k, v))
                .collect();
            merged.extend(changes);
            let mut alter = AlterConfig::new(ResourceSpecifier::Topic(name));
            for (k, v) in &merged {
                alter = alter.set(k, v);
            }
            let admin = admin(cli)?;
            let results = futures::executor::block_on(admin.alter_configs([&alter], &opts(cli)))
                .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
            for r in results {
                r.map_err(|(_, e)| anyhow!("altering configs of {name}: {e}"))?;
            }
            println!("altered configs of {name}");
        }
    }
    Ok(())
}

fn describe(cli: &Cli, name: &str) -> Result<()> {
    let (consumer, md) = metadata(cli, Some(name))?;
    let topic = md
        .topics()
        .first()
        .ok_or_else(|| anyhow!("no metadata for topic {name}"))?;
    if let Some(err) = topic.error() {
        bail!(
            "topic {name}: {:?}",
            rdkafka::types::RDKafkaErrorCode::from(err)
        );
    }
    println!("Topic: {name}\tPartitions: {}", topic.partitions().len());
    let configs = topic_configs(cli, name)?;
    let tiered = configs
        .iter()
        .any(|(k, v, _)| k == "remote.storage.enable" && v == "true");
    for p in topic.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(name, p.id(), cli.timeout())
            .map_err(|e| anyhow!("offsets of {name}/{}: {e}", p.id()))?;
        let tiers = match tiered {
            true => tier_ranges(cli, &md, name, p.id(), p.leader(), low)?,
            false => String::new(),
        };
        println!(
            "\tPartition: {}\tLeader: {}\tReplicas: {:?}\tIsr: {:?}\tLogStartOffset: {low}\tLogEndOffset: {high}{tiers}",
            p.id(),
            p.leader(),
            p.replicas(),
            p.isr()
        );
    }
    println!("Configs:");
    for (k, v, default) in configs {
        println!(
            "\t{k}={v}{}",
            if default { "" } else { "\t(set on the topic)" }
        );
    }
    Ok(())
}

/// A tiered partition's two ranges, as its leader answers ListOffsets -4 (the local log's
/// start) and -5 (the last offset in the remote store): `\tRemote: a..=b\tLocal: c..` (no
/// remote range when nothing is copied yet).
fn tier_ranges(
    cli: &Cli,
    md: &Metadata,
    topic: &str,
    partition: i32,
    leader: i32,
    low: i64,
) -> Result<String> {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsResponse, TopicName};
    let broker = md
        .brokers()
        .iter()
        .find(|b| b.id() == leader)
        .ok_or_else(|| anyhow!("{topic}/{partition} has no live leader to ask for its tiers"))?;
    let at = format!("{}:{}", broker.host(), broker.port());
    let offset = |timestamp: i64| -> Result<i64> {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(kafka_protocol::protocol::StrBytes::from_string(
                    topic.into(),
                )))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(timestamp)])]);
        let resp: ListOffsetsResponse =
            crate::reassign::request_at(cli, &at, ApiKey::ListOffsets, 9, &req)?;
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| anyhow!("ListOffsets answered no partition"))?;
        match p.error_code {
            0 => Ok(p.offset),
            code => bail!("ListOffsets {timestamp} of {topic}/{partition}: error {code}"),
        }
    };
    let local = offset(-4)?;
    let tiered = offset(-5)?;
    Ok(match tiered {
        t if t >= low => format!("\tRemote: {low}..={t}\tLocalLogStartOffset: {local}"),
        _ => format!("\tRemote: none\tLocalLogStartOffset: {local}"),
    })
}

pub fn cluster(cli: &Cli, cmd: &ClusterCommand) -> Result<()> {
    match cmd {
        ClusterCommand::Info => {
            let (_, md) = metadata(cli, None)?;
            println!(
                "Bootstrap broker: {} (id {})",
                md.orig_broker_name(),
                md.orig_broker_id()
            );
            let racks = broker_racks(cli);
            for b in md.brokers() {
                match racks.get(&b.id()) {
                    Some(rack) => println!(
                        "Broker {} at {}:{}\track {rack}",
                        b.id(),
                        b.host(),
                        b.port()
                    ),
                    None => println!("Broker {} at {}:{}", b.id(), b.host(), b.port()),
                }
            }
            match controller(cli) {
                Ok((cluster_id, controller)) => {
                    println!("Cluster: {cluster_id}\nController: {controller}")
                }
                Err(e) => println!("Controller: unknown ({e:#})"),
            }
            println!("Topics: {}", md.topics().len());
            println!("API versions served:");
            for (key, min, max) in api_versions(cli)? {
                println!("\t{:<28} {key:>3}  v{min}-v{max}", api_name(key));
            }
        }
    }
    Ok(())
}

/// One request/response exchange with the bootstrap broker; returns the response after its
/// length.
pub(crate) fn exchange(cli: &Cli, request: &[u8]) -> Result<Vec<u8>> {
    let first = cli.bootstrap.split(',').next().unwrap_or_default();
    exchange_at(cli, first, request)
}

/// As [`exchange`], with the broker at `host_port`, over the listener's security protocol
/// (`--command-config`).
pub(crate) fn exchange_at(cli: &Cli, host_port: &str, request: &[u8]) -> Result<Vec<u8>> {
    crate::raw::exchange_at(cli, host_port, request)
}

/// Each broker's `broker.rack`, from DescribeCluster (empty when the broker cannot say).
fn broker_racks(cli: &Cli) -> std::collections::BTreeMap<i32, String> {
    use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
    let first = cli.bootstrap.split(',').next().unwrap_or_default();
    let asked: Result<DescribeClusterResponse> = crate::reassign::request_at(
        cli,
        first,
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    );
    asked
        .map(|r| {
            r.brokers
                .iter()
                .filter_map(|b| Some((b.broker_id.0, b.rack.as_ref()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The cluster id and controller from DescribeCluster v0 (a flexible request, header v2).
fn controller(cli: &Cli) -> Result<(String, i32)> {
    let mut req = Vec::new();
    req.extend_from_slice(&60i16.to_be_bytes());
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&2i32.to_be_bytes());
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"trib");
    req.push(0); // header tagged fields
    req.push(0); // include_cluster_authorized_operations
    req.push(0); // tagged fields
    let body = exchange(cli, &req)?;
    // correlation id, header tags, throttle, error code
    let mut at = 4 + 1 + 4;
    let code = body
        .get(at..at + 2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| anyhow!("truncated DescribeCluster response"))?;
    if code != 0 {
        bail!("DescribeCluster failed with error code {code}");
    }
    at += 2;
    let compact_string = |at: &mut usize| -> Result<Option<String>> {
        let mut len: usize = 0;
        for i in 0..5 {
            let b = *body
                .get(*at)
                .ok_or_else(|| anyhow!("truncated DescribeCluster response"))?;
            *at += 1;
            len |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        if len == 0 {
            return Ok(None);
        }
        let s = body
            .get(*at..*at + len - 1)
            .ok_or_else(|| anyhow!("truncated DescribeCluster response"))?;
        *at += len - 1;
        Ok(Some(String::from_utf8_lossy(s).into_owned()))
    };
    let _error_message = compact_string(&mut at)?;
    let cluster_id = compact_string(&mut at)?.unwrap_or_default();
    let controller = body
        .get(at..at + 4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| anyhow!("truncated DescribeCluster response"))?;
    Ok((cluster_id, controller))
}

/// Asks the bootstrap broker for ApiVersions (v0: the one every broker answers).
fn api_versions(cli: &Cli) -> Result<Vec<(i16, i16, i16)>> {
    let client = b"trib";
    let mut req = Vec::new();
    req.extend_from_slice(&18i16.to_be_bytes());
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&(client.len() as i16).to_be_bytes());
    req.extend_from_slice(client);
    let body = exchange(cli, &req)?;
    let get = |at: usize| -> Result<i16> {
        body.get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| anyhow!("truncated ApiVersions response"))
    };
    let error = get(4)?;
    if error != 0 {
        bail!("ApiVersions failed with error code {error}");
    }
    let count = body
        .get(6..10)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| anyhow!("truncated ApiVersions response"))?;
    let mut out = Vec::new();
    for i in 0..usize::try_from(count).unwrap_or(0) {
        let at = 10 + i * 6;
        out.push((get(at)?, get(at + 2)?, get(at + 4)?));
    }
    out.sort_unstable();
    Ok(out)
}

fn api_name(key: i16) -> &'static str {
    match key {
        0 => "Produce",
        1 => "Fetch",
        2 => "ListOffsets",
        3 => "Metadata",
        8 => "OffsetCommit",
        9 => "OffsetFetch",
        10 => "FindCoordinator",
        11 => "JoinGroup",
        12 => "Heartbeat",
        13 => "LeaveGroup",
        14 => "SyncGroup",
        15 => "DescribeGroups",
        16 => "ListGroups",
        18 => "ApiVersions",
        19 => "CreateTopics",
        20 => "DeleteTopics",
        21 => "DeleteRecords",
        22 => "InitProducerId",
        23 => "OffsetForLeaderEpoch",
        29 => "DescribeAcls",
        30 => "CreateAcls",
        31 => "DeleteAcls",
        32 => "DescribeConfigs",
        33 => "AlterConfigs",
        35 => "DescribeLogDirs",
        37 => "CreatePartitions",
        42 => "DeleteGroups",
        43 => "ElectLeaders",
        44 => "IncrementalAlterConfigs",
        45 => "AlterPartitionReassignments",
        46 => "ListPartitionReassignments",
        47 => "OffsetDelete",
        48 => "DescribeClientQuotas",
        49 => "AlterClientQuotas",
        50 => "DescribeUserScramCredentials",
        51 => "AlterUserScramCredentials",
        55 => "DescribeQuorum",
        60 => "DescribeCluster",
        _ => "(other)",
    }
}
