//! `trib groups ...`: list, describe (members, assignments, committed offsets and lag),
//! reset offsets of an inactive group, delete.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::groups::GroupInfo;
use rdkafka::{Offset, TopicPartitionList};

use crate::admin::{client_config, metadata};
use crate::Cli;

#[derive(Subcommand)]
pub enum GroupsCommand {
    /// Group ids with their state.
    List,
    /// State, members, assignments, committed offsets, end offsets and lag.
    Describe { group: String },
    /// Move the committed offsets of an inactive group.
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long, conflicts_with_all = ["to_latest", "to_offset"])]
        to_earliest: bool,
        #[arg(long, conflicts_with = "to_offset")]
        to_latest: bool,
        #[arg(long)]
        to_offset: Option<i64>,
    },
    /// Delete an empty group and its committed offsets.
    Delete { group: String },
}

fn group_consumer(cli: &Cli, group: &str) -> Result<BaseConsumer> {
    client_config(cli)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .context("creating a client")
}

/// Topic → partitions from a consumer-protocol assignment (version, [topic, [partition]], user data).
fn decode_assignment(b: &[u8]) -> BTreeMap<String, Vec<i32>> {
    let mut out = BTreeMap::new();
    let i16_at = |at: usize| b.get(at..at + 2).map(|x| i16::from_be_bytes([x[0], x[1]]));
    let i32_at = |at: usize| {
        b.get(at..at + 4)
            .map(|x| i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
    };
    let mut at = 2;
    let Some(n) = i32_at(at) else { return out };
    at += 4;
    for _ in 0..n.max(0) {
        let Some(len) = i16_at(at) else { break };
        at += 2;
        let Some(name) = b.get(at..at + len.max(0) as usize) else {
            break;
        };
        at += len.max(0) as usize;
        let Some(np) = i32_at(at) else { break };
        at += 4;
        let mut parts = Vec::new();
        for _ in 0..np.max(0) {
            let Some(p) = i32_at(at) else { break };
            at += 4;
            parts.push(p);
        }
        out.insert(String::from_utf8_lossy(name).into_owned(), parts);
    }
    out
}

pub fn groups(cli: &Cli, cmd: &GroupsCommand) -> Result<()> {
    let probe: BaseConsumer = client_config(cli).create().context("creating a client")?;
    match cmd {
        GroupsCommand::List => list(cli, &probe),
        GroupsCommand::Describe { group } => describe(cli, &probe, group),
        GroupsCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
        } => reset_offsets(
            cli,
            &probe,
            group,
            topic,
            *to_earliest,
            *to_latest,
            *to_offset,
        ),
        GroupsCommand::Delete { group } => delete(cli, group),
    }
}

/// `groups list`: every group id with its state, sorted.
fn list(cli: &Cli, probe: &BaseConsumer) -> Result<()> {
    let list = probe
        .fetch_group_list(None, cli.timeout())
        .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    let mut groups: Vec<(String, String)> = list
        .groups()
        .iter()
        .map(|g| (g.name().to_string(), g.state().to_string()))
        .collect();
    groups.sort();
    for (name, state) in groups {
        println!("{name}\t{state}");
    }
    Ok(())
}

/// `groups describe`: the group's state and members, then its committed offsets with their
/// lag and owner. A KIP-848 consumer group is described by its coordinator
/// (ConsumerGroupDescribe: epochs, assignor, each member's epoch, subscription, assignment and
/// target); a classic one through DescribeGroups.
fn describe(cli: &Cli, probe: &BaseConsumer, group: &str) -> Result<()> {
    // A broker without KIP-848 (or any failure to ask) leaves the classic description.
    if let Ok(Some(owner)) = describe_consumer_group(cli, group) {
        return print_lag(cli, group, &owner);
    }
    let list = probe
        .fetch_group_list(Some(group), cli.timeout())
        .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    let g = list
        .groups()
        .first()
        .ok_or_else(|| anyhow!("group {group} not found"))?;
    println!(
        "Group: {}\tState: {}\tProtocol: {} {}",
        g.name(),
        g.state(),
        g.protocol_type(),
        g.protocol()
    );
    let owner = print_members(g);
    print_lag(cli, group, &owner)
}

/// Describes `group` if it is a KIP-848 consumer group, printing its epochs and members;
/// returns which member owns each partition, or `None` for a group of the classic protocol.
fn describe_consumer_group(
    cli: &Cli,
    group: &str,
) -> Result<Option<BTreeMap<(String, i32), String>>> {
    use kafka_protocol::messages::{
        ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
        FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    };
    use kafka_protocol::protocol::StrBytes;
    let first = cli.bootstrap.split(',').next().unwrap_or_default();
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into()));
    let found: FindCoordinatorResponse =
        crate::reassign::request_at(cli, first, ApiKey::FindCoordinator, 3, &find)?;
    if found.error_code != 0 {
        bail!(
            "finding the coordinator of {group}: {}",
            crate::reassign::error_name(found.error_code)
        );
    }
    let coordinator = format!("{}:{}", found.host.as_str(), found.port);
    let req = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))]);
    let resp: ConsumerGroupDescribeResponse =
        crate::reassign::request_at(cli, &coordinator, ApiKey::ConsumerGroupDescribe, 1, &req)?;
    let Some(g) = resp.groups.first().filter(|g| g.error_code == 0) else {
        return Ok(None);
    };
    println!(
        "Group: {group}\tType: consumer\tState: {}\tGroupEpoch: {}\tAssignmentEpoch: {}\tAssignor: {}",
        g.group_state.as_str(),
        g.group_epoch,
        g.assignment_epoch,
        g.assignor_name.as_str()
    );
    let by_topic = |a: &kafka_protocol::messages::consumer_group_describe_response::Assignment| {
        a.topic_partitions
            .iter()
            .map(|t| (t.topic_name.0.to_string(), t.partitions.clone()))
            .collect::<BTreeMap<String, Vec<i32>>>()
    };
    let mut owner = BTreeMap::new();
    for m in &g.members {
        let subscribed: Vec<&str> = m
            .subscribed_topic_names
            .iter()
            .map(|t| t.0.as_str())
            .collect();
        let assigned = by_topic(&m.assignment);
        println!(
            "Member: {}\tProtocol: {}\tEpoch: {}\tInstance: {}\tClient: {}\tHost: {}\tSubscribed: {:?}{}\tAssignment: {:?}\tTarget: {:?}",
            m.member_id.as_str(),
            // KIP-1099's member type: a classic member of a mixed group (JoinGroup) or not.
            if m.member_type == 0 { "classic" } else { "consumer" },
            m.member_epoch,
            m.instance_id.as_ref().map_or("-", |i| i.as_str()),
            m.client_id.as_str(),
            m.client_host.as_str(),
            subscribed,
            m.subscribed_topic_regex.as_ref().map(|r| format!(" /{}/", r.as_str())).unwrap_or_default(),
            assigned,
            by_topic(&m.target_assignment),
        );
        for (t, ps) in assigned {
            for p in ps {
                owner.insert((t.clone(), p), m.member_id.to_string());
            }
        }
    }
    Ok(Some(owner))
}

/// Prints each member with its assignment; returns which member owns each partition.
fn print_members(g: &GroupInfo) -> BTreeMap<(String, i32), String> {
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    for m in g.members() {
        let assignment = m.assignment().map(decode_assignment).unwrap_or_default();
        println!(
            "Member: {}\tClient: {}\tHost: {}\tAssignment: {:?}",
            m.id(),
            m.client_id(),
            m.client_host(),
            assignment
        );
        for (t, ps) in assignment {
            for p in ps {
                owner.insert((t.clone(), p), m.id().to_string());
            }
        }
    }
    owner
}

/// Prints the group's committed offset, end offset, lag and owner of every partition of a
/// non-internal topic it has an offset for.
fn print_lag(cli: &Cli, group: &str, owner: &BTreeMap<(String, i32), String>) -> Result<()> {
    let (_, md) = metadata(cli, None)?;
    let consumer = group_consumer(cli, group)?;
    let mut tpl = TopicPartitionList::new();
    for t in md.topics().iter().filter(|t| !t.name().starts_with("__")) {
        for p in t.partitions() {
            tpl.add_partition(t.name(), p.id());
        }
    }
    let committed = consumer
        .committed_offsets(tpl, cli.timeout())
        .map_err(|e| anyhow!("fetching committed offsets: {e}"))?;
    println!("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tOWNER");
    for e in committed.elements() {
        let Offset::Offset(c) = e.offset() else {
            continue;
        };
        let (_, end) = consumer
            .fetch_watermarks(e.topic(), e.partition(), cli.timeout())
            .map_err(|x| anyhow!("end offset of {}/{}: {x}", e.topic(), e.partition()))?;
        let who = owner
            .get(&(e.topic().to_string(), e.partition()))
            .cloned()
            .unwrap_or_else(|| "-".into());
        println!(
            "{}\t{}\t{c}\t{end}\t{}\t{who}",
            e.topic(),
            e.partition(),
            end - c
        );
    }
    Ok(())
}

/// `groups reset-offsets`: refuses a group with members, then commits the chosen offset of
/// every partition of the topic.
fn reset_offsets(
    cli: &Cli,
    probe: &BaseConsumer,
    group: &str,
    topic: &str,
    to_earliest: bool,
    to_latest: bool,
    to_offset: Option<i64>,
) -> Result<()> {
    if !(to_earliest || to_latest || to_offset.is_some()) {
        bail!("say where to: --to-earliest, --to-latest or --to-offset N");
    }
    let list = probe
        .fetch_group_list(Some(group), cli.timeout())
        .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    if let Some(g) = list.groups().first() {
        if !matches!(g.state(), "Empty" | "Dead" | "") {
            bail!(
                "group {group} is {} with {} members; stop its consumers before resetting offsets",
                g.state(),
                g.members().len()
            );
        }
    }
    let (_, md) = metadata(cli, Some(topic))?;
    let t = md
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .ok_or_else(|| anyhow!("topic {topic} does not exist"))?;
    let consumer = group_consumer(cli, group)?;
    let mut tpl = TopicPartitionList::new();
    for p in t.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), cli.timeout())
            .map_err(|e| anyhow!("offsets of {topic}/{}: {e}", p.id()))?;
        let target = reset_target(to_offset, to_earliest, low, high);
        tpl.add_partition_offset(topic, p.id(), Offset::Offset(target))
            .map_err(|e| anyhow!("{e}"))?;
        println!("{topic}\t{}\t{target}", p.id());
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .map_err(|e| anyhow!("committing offsets for {group}: {e}"))?;
    Ok(())
}

/// Where a reset moves a partition whose offsets run from `low` to `high`: the given offset
/// (kept within them), else the earliest, else the latest.
fn reset_target(to_offset: Option<i64>, to_earliest: bool, low: i64, high: i64) -> i64 {
    match (to_offset, to_earliest) {
        (Some(o), _) => o.clamp(low, high),
        (None, true) => low,
        (None, false) => high,
    }
}

/// `groups delete`: deletes the group through the admin client.
fn delete(cli: &Cli, group: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(cli)
        .create()
        .context("creating the admin client")?;
    let opts = AdminOptions::new().request_timeout(Some(cli.timeout()));
    let results = futures::executor::block_on(admin.delete_groups(&[group], &opts))
        .map_err(|e| anyhow!("cannot reach the broker at {}: {e}", cli.bootstrap))?;
    for r in results {
        r.map_err(|(g, e)| anyhow!("deleting group {g}: {e}"))?;
    }
    println!("deleted group {group}");
    Ok(())
}
