//! `trib transactions list|describe` and `trib producers describe`: KIP-664's admin calls
//! (ListTransactions to every broker, DescribeTransactions to the id's coordinator,
//! DescribeProducers to the partition's leader), sent as raw requests and decoded with the
//! `kafka-protocol` crate.

use anyhow::{anyhow, bail, Result};
use clap::Subcommand;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    ListTransactionsRequest, ListTransactionsResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::reassign::{error_name, request_at};
use crate::Cli;

/// FindCoordinator v3: one key, with its type.
const FIND_COORDINATOR_VERSION: i16 = 3;
const TRANSACTION_KEY: i8 = 1;

#[derive(Subcommand)]
pub enum TransactionsCommand {
    /// Transactions the brokers coordinate, one per line (ListTransactions to every broker).
    List {
        /// Only these states (Ongoing, PrepareCommit, CompleteAbort, …); repeatable.
        #[arg(long = "state")]
        states: Vec<String>,
    },
    /// One transactional id: its producer, state, timeout and partitions.
    Describe { transactional_id: String },
}

#[derive(Subcommand)]
pub enum ProducersCommand {
    /// The producers a partition's leader remembers, with any open transaction's first offset.
    Describe { topic: String, partition: i32 },
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn check(code: i16, what: &str) -> Result<()> {
    if code != 0 {
        bail!("{what}: {}", error_name(code));
    }
    Ok(())
}

pub fn transactions(cli: &Cli, cmd: &TransactionsCommand) -> Result<()> {
    match cmd {
        TransactionsCommand::List { states } => {
            let (_, md) = crate::admin::metadata(cli, None)?;
            let req = ListTransactionsRequest::default()
                .with_state_filters(states.iter().map(|x| s(x)).collect())
                .with_duration_filter(-1);
            let mut rows = Vec::new();
            for b in md.brokers() {
                let addr = format!("{}:{}", b.host(), b.port());
                let resp: ListTransactionsResponse =
                    request_at(cli, &addr, ApiKey::ListTransactions, 1, &req)?;
                check(resp.error_code, &format!("broker {}", b.id()))?;
                if let Some(u) = resp.unknown_state_filters.first() {
                    bail!("unknown transaction state {:?}", u.as_str());
                }
                for t in resp.transaction_states {
                    rows.push((
                        t.transactional_id.0.to_string(),
                        t.producer_id.0,
                        t.transaction_state.to_string(),
                        b.id(),
                    ));
                }
            }
            rows.sort();
            println!("TRANSACTIONAL_ID\tPRODUCER_ID\tSTATE\tCOORDINATOR");
            for (id, pid, state, node) in rows {
                println!("{id}\t{pid}\t{state}\t{node}");
            }
            Ok(())
        }
        TransactionsCommand::Describe { transactional_id } => {
            let first = cli.bootstrap.split(',').next().unwrap_or_default();
            let find = FindCoordinatorRequest::default()
                .with_key(s(transactional_id))
                .with_key_type(TRANSACTION_KEY);
            let found: FindCoordinatorResponse = request_at(
                cli,
                first,
                ApiKey::FindCoordinator,
                FIND_COORDINATOR_VERSION,
                &find,
            )?;
            check(found.error_code, "finding the transaction coordinator")?;
            let coordinator = format!("{}:{}", found.host.as_str(), found.port);
            let req = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s(transactional_id))]);
            let resp: DescribeTransactionsResponse =
                request_at(cli, &coordinator, ApiKey::DescribeTransactions, 0, &req)?;
            let t = resp
                .transaction_states
                .first()
                .ok_or_else(|| anyhow!("the coordinator answered for no transactional id"))?;
            check(t.error_code, transactional_id)?;
            println!("TransactionalId: {transactional_id}");
            println!("Coordinator: {}", found.node_id.0);
            println!("ProducerId: {}", t.producer_id.0);
            println!("ProducerEpoch: {}", t.producer_epoch);
            println!("State: {}", t.transaction_state.as_str());
            println!("TimeoutMs: {}", t.transaction_timeout_ms);
            println!("StartTimeMs: {}", t.transaction_start_time_ms);
            for d in &t.topics {
                println!("Partitions: {} {:?}", d.topic.0.as_str(), d.partitions);
            }
            Ok(())
        }
    }
}

pub fn producers(cli: &Cli, cmd: &ProducersCommand) -> Result<()> {
    let ProducersCommand::Describe { topic, partition } = cmd;
    let (_, md) = crate::admin::metadata(cli, Some(topic))?;
    let leader = md
        .topics()
        .first()
        .and_then(|t| t.partitions().iter().find(|p| p.id() == *partition))
        .map(|p| p.leader())
        .ok_or_else(|| anyhow!("{topic}-{partition} does not exist"))?;
    let broker = md
        .brokers()
        .iter()
        .find(|b| b.id() == leader)
        .ok_or_else(|| anyhow!("{topic}-{partition} has no leader"))?;
    let addr = format!("{}:{}", broker.host(), broker.port());
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(s(topic)))
        .with_partition_indexes(vec![*partition])]);
    let resp: DescribeProducersResponse =
        request_at(cli, &addr, ApiKey::DescribeProducers, 0, &req)?;
    let p = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| anyhow!("the broker answered for no partition"))?;
    check(p.error_code, &format!("{topic}-{partition}"))?;
    println!(
        "PRODUCER_ID\tEPOCH\tLAST_SEQUENCE\tLAST_TIMESTAMP\tCOORDINATOR_EPOCH\tTXN_START_OFFSET"
    );
    for a in &p.active_producers {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            a.producer_id.0,
            a.producer_epoch,
            a.last_sequence,
            a.last_timestamp,
            a.coordinator_epoch,
            a.current_txn_start_offset
        );
    }
    Ok(())
}
