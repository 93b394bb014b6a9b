//! `trib`: the operator's command line for Tributary and any Kafka-compatible broker — topics
//! and their reassignment, console produce and consume, consumer groups, leader elections,
//! transactions and producers, ACLs, SCRAM users and client quotas, and cluster information —
//! built on librdkafka, with raw requests for the admin calls it lacks.
//! `trib top`, a live view of throughput and latencies, reads the brokers' metrics endpoints instead.
//! `--command-config` takes Kafka's client security properties (SASL, TLS), for librdkafka's
//! commands and the raw requests alike.
//! Exit status 0 on success; otherwise one line on stderr naming the cause.

#![forbid(unsafe_code)]

mod acls;
mod admin;
mod groups;
mod io;
mod quotas;
mod raw;
mod reassign;
mod security;
mod top;
mod txn;
mod users;

use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "trib",
    version,
    about = "Topics, messages and consumer groups of a Kafka-compatible broker"
)]
pub struct Cli {
    /// Broker to bootstrap from.
    #[arg(
        long,
        global = true,
        env = "TRIB_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap: String,
    /// How long to wait for the broker on each request.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Kafka client properties for a secured listener (security.protocol, sasl.mechanism,
    /// sasl.jaas.config, ssl.truststore.location, ...), as kafka-topics.sh --command-config.
    #[arg(long, global = true, env = "TRIB_COMMAND_CONFIG")]
    pub command_config: Option<std::path::PathBuf>,
    /// The librdkafka settings `command_config` stands for.
    #[arg(skip)]
    pub security: Vec<(String, String)>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Create, list, describe, delete and configure topics.
    #[command(subcommand)]
    Topics(admin::TopicsCommand),
    /// Produce one message per stdin line.
    Produce(io::ProduceArgs),
    /// Print messages of a topic.
    Consume(io::ConsumeArgs),
    /// Inspect and manage consumer groups.
    #[command(subcommand)]
    Groups(groups::GroupsCommand),
    /// Brokers and the API versions they serve.
    #[command(subcommand)]
    Cluster(admin::ClusterCommand),
    /// Partition leadership: preferred and unclean elections.
    #[command(subcommand)]
    Leaders(reassign::LeadersCommand),
    /// Transactions the brokers coordinate.
    #[command(subcommand)]
    Transactions(txn::TransactionsCommand),
    /// Producers a partition remembers (idempotent and transactional).
    #[command(subcommand)]
    Producers(txn::ProducersCommand),
    /// ACLs: list, create and delete (as kafka-acls.sh).
    #[command(subcommand)]
    Acls(acls::AclsCommand),
    /// SCRAM credentials: create, delete and list users (as kafka-configs.sh --entity-type users).
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// Client quotas by user and client id: describe and alter.
    #[command(subcommand)]
    Quotas(quotas::QuotasCommand),
    /// Live throughput and latencies from brokers' metrics endpoints (`metrics.listen`).
    Top(top::TopArgs),
}

fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Topics(c) => admin::topics(cli, c),
        Command::Produce(a) => io::produce(cli, a),
        Command::Consume(a) => io::consume(cli, a),
        Command::Groups(c) => groups::groups(cli, c),
        Command::Cluster(c) => admin::cluster(cli, c),
        Command::Leaders(c) => reassign::leaders(cli, c),
        Command::Transactions(c) => txn::transactions(cli, c),
        Command::Producers(c) => txn::producers(cli, c),
        Command::Acls(c) => acls::acls(cli, c),
        Command::Users(c) => users::users(cli, c),
        Command::Quotas(c) => quotas::quotas(cli, c),
        Command::Top(a) => top::top(cli, a),
    }
}

fn main() {
    // `trib ... | head` closes stdout early; leave quietly as Unix tools do instead of panicking.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.to_string().contains("failed printing to stdout") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let mut cli = Cli::parse();
    if let Some(path) = &cli.command_config {
        match security::load(path) {
            Ok(settings) => cli.security = settings,
            Err(e) => {
                eprintln!("trib: {e:#}");
                std::process::exit(1);
            }
        }
    }
    if let Err(e) = run(&cli) {
        eprintln!("trib: {e:#}");
        std::process::exit(1);
    }
}
