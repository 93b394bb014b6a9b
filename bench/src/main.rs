//! `tributary-bench`: a load generator and latency harness for any Kafka-compatible broker, built
//! on librdkafka, in the spirit of `rdkafka_performance` and the OpenMessaging Benchmark.
//!
//! Modes: `produce` (throughput and acknowledgement latency; with `--transactional-id`, in
//! transactions, adding the commit latency), `consume` (read throughput),
//! `e2e` (producers and consumers together; latency from a timestamp in each payload), `machine`
//! (the disk, loopback, memcpy and CRC32C limits to quote results against), `compare` (two runs
//! side by side), `rebalance` (what adding and killing a consumer group member costs, per group
//! protocol), `failover` (a three-node cluster of its own whose partition leader it kills repeatedly:
//! the produce stall per kill, and whether every acknowledged message survives exactly once)
//! and `run` (an OpenMessaging Benchmark workload file, replayed).
//! Each load mode prints a progress line per second and a summary; `--json` adds one JSON object
//! on the last stdout line, `--report DIR` writes the HDR distribution and SVG pictures, and
//! `--broker-pid PID` adds the broker's CPU-seconds, in total and per GB.

#![forbid(unsafe_code)]

mod cluster;
mod controller;
mod cpu;
mod failover;
mod faults;
mod floor;
mod gaps;
mod group_reader;
mod load;
mod machine;
mod mixed;
mod readback;
mod rebalance;
mod report;
mod store;
mod workload;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tributary-bench",
    about = "Throughput and latency of a Kafka-compatible broker"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Produce and report throughput and acknowledgement latency.
    Produce(load::LoadArgs),
    /// Read a topic from the beginning and report read throughput.
    Consume(load::LoadArgs),
    /// Produce and consume together; latency from send to receipt.
    E2e(load::LoadArgs),
    /// Measure this machine's limits: O_DIRECT write/read, fdatasync latency, loopback TCP,
    /// memcpy and CRC32C bandwidth, and the copy floor in CPU-seconds per GB.
    Machine {
        /// Directory on the filesystem the broker's data lives on.
        #[arg(long, default_value = "./data")]
        dir: PathBuf,
        /// Bytes written and read, in MiB.
        #[arg(long, default_value_t = 1024)]
        size_mb: usize,
    },
    /// Start a three-node cluster, fail one node repeatedly under acks=all produce (kill -9,
    /// SIGSTOP or SIGTERM of a partition leader, a follower or the controller, or a seeded mix
    /// of them); report the ack gap per fault (or the writable seconds of the mix) and check
    /// nothing acknowledged is lost.
    Failover(failover::FailoverArgs),
    /// Replay an OpenMessaging Benchmark workload file (bench/workloads/): producers at its
    /// rate, one consumer group per subscription; publish and end-to-end latency.
    Run(workload::RunArgs),
    /// What a rebalance costs a group, per protocol (classic eager and cooperative, KIP-848):
    /// add a member, then kill one, under steady consumption; time until every partition is
    /// owned again and the longest pause of the members the change did not concern.
    Rebalance(rebalance::RebalanceArgs),
    /// One member of a `rebalance` run (started by it).
    #[command(hide = true)]
    RebalanceMember(rebalance::MemberArgs),
    /// The remote log store's own PUT and GET throughput (tiered storage's limit).
    Store(store::StoreArgs),
    /// An S3-compatible server on files, to measure tiered storage against on one machine.
    S3Server(store::S3ServerArgs),
    /// Print the ratios of two JSON summaries (B/A); with --report draw them together.
    Compare {
        a: PathBuf,
        b: PathBuf,
        #[arg(long)]
        report: Option<PathBuf>,
    },
}

fn main() {
    let result: Result<()> = match Cli::parse().mode {
        Mode::Produce(a) => load::check_client_config(&a).and_then(|()| load::produce(&a)),
        Mode::Consume(a) => load::check_client_config(&a).and_then(|()| load::consume(&a)),
        Mode::E2e(a) => load::check_client_config(&a).and_then(|()| load::e2e(&a)),
        Mode::Machine { dir, size_mb } => machine::measure(&dir, size_mb).map(|v| println!("{v}")),
        Mode::Compare { a, b, report } => report::compare(&a, &b, report.as_deref()),
        Mode::Failover(a) => failover::run(&a),
        Mode::Run(a) => workload::run(&a),
        Mode::Rebalance(a) => rebalance::run(&a),
        Mode::RebalanceMember(a) => rebalance::member(&a),
        Mode::Store(a) => store::measure(&a),
        Mode::S3Server(a) => store::s3_server(&a),
    };
    if let Err(e) = result {
        eprintln!("tributary-bench: {e:#}");
        std::process::exit(1);
    }
}
