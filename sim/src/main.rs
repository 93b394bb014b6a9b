//! `tributary-sim`: runs seeds of the deterministic cluster simulation and stops at the first
//! broken invariant, printing how to replay it.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tributary_sim::{run, Canary, Options};

#[derive(Parser)]
#[command(about = "Deterministic simulation of a Tributary cluster under faults")]
struct Args {
    /// The first seed (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How many consecutive seeds to run.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Events per seed.
    #[arg(long, default_value_t = 200_000)]
    steps: u64,
    /// A fault every this many simulated milliseconds on average.
    #[arg(long, default_value_t = 1500)]
    fault_every_ms: u64,
    /// Break a rule on purpose, which must make the run fail: `hw` (the high watermark
    /// ignores the ISR) or `dedup` (the leader skips the idempotent sequence check).
    #[arg(long)]
    canary: Option<String>,
    /// Print every event (but the clock's and raft's) with the state it met, to stderr.
    #[arg(long)]
    trace: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "tributary-sim: seeds {first}..{} ({} steps each)",
        first + args.seeds,
        args.steps
    );
    let canary = match args.canary.as_deref().map(|c| (c, Canary::parse(c))) {
        None => None,
        Some((_, Some(c))) => Some(c),
        Some((name, None)) => {
            eprintln!("unknown canary {name:?}: use `hw` or `dedup`");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut steps = 0u64;
    let mut last_progress = Instant::now();
    for seed in first..first + args.seeds {
        let mut opts = Options::new(seed, args.steps);
        opts.fault_every_ms = args.fault_every_ms;
        opts.limits.canary = canary;
        opts.trace = args.trace;
        match run(&opts) {
            Ok(report) => {
                steps += report.steps;
                if args.seeds == 1 || last_progress.elapsed().as_secs() >= 5 {
                    last_progress = Instant::now();
                    let rate = steps as f64 / started.elapsed().as_secs_f64();
                    println!(
                        "seed {seed}: ok, {} steps, {} s simulated, {} acknowledged, {} refused, \
                         {} faults, fencings {:?} ({rate:.0} steps/s overall)",
                        report.steps,
                        report.simulated_ms / 1000,
                        report.acknowledged,
                        report.produce_refused,
                        report.faults,
                        report.fencings_by_reason
                    );
                }
            }
            Err(failure) => {
                eprintln!("{failure}");
                return ExitCode::FAILURE;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "all {} seeds held every invariant: {steps} steps in {secs:.1} s ({:.0} steps/s)",
        args.seeds,
        steps as f64 / secs
    );
    ExitCode::SUCCESS
}
