//! `rebalance`: what a rebalance costs a consumer group, by group protocol. A group of
//! `--members` consumers reads `--partitions` partitions while a producer writes at `--rate`;
//! once every partition is owned, one member is added, then one original member is killed
//! (SIGKILL: no leave, the group finds out when its session ends). For each event: how long
//! until every partition is owned again, and the longest pause in the stream of messages any
//! *unaffected* member (neither the one added nor the one killed) received — the stop-the-world
//! cost an eager rebalance has and an incremental one should not.
//!
//! Protocols: `eager` (classic, range), `cooperative` (classic, cooperative-sticky) and
//! `consumer` (KIP-848, `group.protocol=consumer`: the broker assigns). Each member runs as a
//! child process (`rebalance-member`) so that it can be killed; it reports its assignment
//! changes and every pause in its messages on stdout.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

#[derive(clap::Args, Clone)]
pub struct RebalanceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    #[arg(long, default_value = "bench-rebalance")]
    pub topic: String,
    #[arg(long, default_value_t = 64)]
    pub partitions: i32,
    /// Members before the one added.
    #[arg(long, default_value_t = 10)]
    pub members: usize,
    /// Messages per second over all partitions.
    #[arg(long, default_value_t = 2000)]
    pub rate: u32,
    /// Protocols to run, in order: eager, cooperative, consumer.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "eager,cooperative,consumer"
    )]
    pub protocols: Vec<String>,
    /// The classic members' session.timeout.ms. A KIP-848 group's session is the broker's
    /// (group.consumer.session.timeout.ms): set the two alike to compare the kill.
    #[arg(long, default_value_t = 10_000)]
    pub session_ms: u32,
    /// How long after each event pauses are looked for.
    #[arg(long, default_value_t = 8)]
    pub settle_secs: u64,
    /// Print one JSON object with the results as the last line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of one member process.
#[derive(clap::Args, Clone)]
pub struct MemberArgs {
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub group: String,
    #[arg(long)]
    pub protocol: String,
    #[arg(long)]
    pub session_ms: u32,
}

/// A pause in a member's messages it reports: at the default rate a member of ten receives one
/// about every 5 ms, and a fetch round trip is a few ms more.
const PAUSE_REPORTED: Duration = Duration::from_millis(50);
/// How long a group must hold every partition, unchanged, to count as settled.
const STABLE_FOR: Duration = Duration::from_secs(2);
/// How long an event may take to reach full ownership before the run gives up.
const OWNED_WITHIN: Duration = Duration::from_secs(180);

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One member process: joins, reads, and prints `A <us> <p,p,…>` at every assignment change
/// and `P <us> <pause us>` for every pause of `PAUSE_REPORTED` or more between two messages.
pub fn member(args: &MemberArgs) -> Result<()> {
    let mut cfg = rdkafka::config::ClientConfig::new();
    cfg.set("bootstrap.servers", &args.bootstrap)
        .set("group.id", &args.group)
        .set("auto.offset.reset", "latest")
        .set("enable.auto.commit", "true")
        .set("log_level", "3");
    match args.protocol.as_str() {
        "consumer" => cfg.set("group.protocol", "consumer"),
        p => cfg
            .set("session.timeout.ms", args.session_ms.to_string())
            .set("partition.assignment.strategy", classic_strategy(p)?),
    };
    let c: BaseConsumer = cfg.create().context("creating the member")?;
    c.subscribe(&[&args.topic]).context("subscribing")?;
    let mut owned: BTreeSet<i32> = BTreeSet::new();
    let mut last: Option<u64> = None;
    let mut checked = Instant::now();
    loop {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(10)) {
            let now = wall_us();
            if let Some(before) = last.replace(now) {
                if now - before >= PAUSE_REPORTED.as_micros() as u64 {
                    println!("P {now} {}", now - before);
                }
            }
        }
        if checked.elapsed() >= Duration::from_millis(20) {
            checked = Instant::now();
            let now: BTreeSet<i32> = c
                .assignment()
                .map(|a| a.elements().iter().map(|e| e.partition()).collect())
                .unwrap_or_default();
            if now != owned {
                let list: Vec<String> = now.iter().map(i32::to_string).collect();
                println!("A {} {}", wall_us(), list.join(","));
                owned = now;
            }
        }
    }
}

fn classic_strategy(protocol: &str) -> Result<&'static str> {
    match protocol {
        "eager" => Ok("range"),
        "cooperative" => Ok("cooperative-sticky"),
        other => bail!("unknown protocol {other}: use eager, cooperative or consumer"),
    }
}

/// What the parent knows of one member from its reports.
#[derive(Default)]
struct Seen {
    owned: BTreeSet<i32>,
    /// (time, assignment) of every change.
    changes: Vec<(u64, BTreeSet<i32>)>,
    /// (time the pause ended, pause).
    pauses: Vec<(u64, u64)>,
}

struct Member {
    child: Child,
    seen: Arc<Mutex<Seen>>,
}

impl Member {
    fn spawn(args: &RebalanceArgs, group: &str, protocol: &str) -> Result<Member> {
        let exe = std::env::current_exe().context("finding this program to run members")?;
        let mut child = Command::new(exe)
            .args([
                "rebalance-member",
                "--bootstrap",
                &args.bootstrap,
                "--topic",
                &args.topic,
            ])
            .args(["--group", group, "--protocol", protocol])
            .args(["--session-ms", &args.session_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a member process")?;
        let out = child.stdout.take().context("the member's stdout")?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                record(&sink, &line);
            }
        });
        Ok(Member { child, seen })
    }

    fn owned(&self) -> BTreeSet<i32> {
        self.seen
            .lock()
            .map(|s| s.owned.clone())
            .unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record(seen: &Mutex<Seen>, line: &str) {
    let mut parts = line.split(' ');
    let (kind, t) = (parts.next(), parts.next().and_then(|t| t.parse().ok()));
    let (Some(kind), Some(t)) = (kind, t) else {
        return;
    };
    let Ok(mut s) = seen.lock() else { return };
    match kind {
        "A" => {
            let owned: BTreeSet<i32> = parts
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|p| p.parse().ok())
                .collect();
            s.changes.push((t, owned.clone()));
            s.owned = owned;
        }
        "P" => {
            if let Some(pause) = parts.next().and_then(|p| p.parse().ok()) {
                s.pauses.push((t, pause));
            }
        }
        _ => {}
    }
}

/// Whether the living members own every partition exactly once, each of the first
/// `partitions` members something.
fn all_owned(members: &[&Member], partitions: i32) -> bool {
    let mut all = Vec::new();
    for m in members {
        all.extend(m.owned());
    }
    all.sort_unstable();
    all == (0..partitions).collect::<Vec<_>>()
}

/// Waits until the members own every partition once (and `newcomer`, when given, owns some)
/// and, with `stable`, keep it so for `STABLE_FOR`; the time it first held.
fn wait_owned(
    members: &[&Member],
    newcomer: Option<&Member>,
    partitions: i32,
    stable: bool,
    what: &str,
) -> Result<Instant> {
    let deadline = Instant::now() + OWNED_WITHIN;
    let mut since: Option<(Instant, Vec<BTreeSet<i32>>)> = None;
    loop {
        if Instant::now() > deadline {
            bail!(
                "{what}: the group did not own all {partitions} partitions within {OWNED_WITHIN:?}"
            );
        }
        let now: Vec<BTreeSet<i32>> = members.iter().map(|m| m.owned()).collect();
        let joined = newcomer.is_none_or(|m| !m.owned().is_empty());
        if joined && all_owned(members, partitions) {
            match &since {
                Some((t, before)) if *before == now => {
                    if !stable || t.elapsed() >= STABLE_FOR {
                        return Ok(*t);
                    }
                }
                _ => since = Some((Instant::now(), now)),
            }
        } else {
            since = None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One event's cost: until every partition was owned again, and the longest pause in an
/// unaffected member's messages.
#[derive(Debug, Clone)]
pub struct EventCost {
    pub owned_again_ms: u64,
    pub unaffected_pause_ms: u64,
    /// Partitions that changed owner.
    pub moved: usize,
}

/// The longest pause in any of `members`' messages that overlaps `from`..`until` (wall
/// clock, µs), in ms.
fn longest_pause(members: &[&Member], from: u64, until: u64) -> u64 {
    let mut longest = 0;
    for m in members {
        let Ok(s) = m.seen.lock() else { continue };
        for (end, pause) in &s.pauses {
            if *end >= from && end.saturating_sub(*pause) <= until {
                longest = longest.max(*pause);
            }
        }
    }
    longest / 1000
}

/// One protocol's run: the group's join, then the two events.
#[derive(Debug, Clone)]
pub struct ProtocolCost {
    pub protocol: String,
    pub join_ms: u64,
    pub add: EventCost,
    pub kill: EventCost,
}

pub fn run(args: &RebalanceArgs) -> Result<()> {
    for p in &args.protocols {
        if p != "consumer" {
            classic_strategy(p)?;
        }
    }
    create_topic(args)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = spawn_producer(args, &stop)?;
    let mut results = Vec::new();
    for protocol in &args.protocols {
        eprintln!(
            "{protocol}: {} members on {} partitions at {} msg/s",
            args.members, args.partitions, args.rate
        );
        let cost = run_protocol(args, protocol);
        if let Err(e) = &cost {
            eprintln!("{protocol}: {e:#}");
        }
        results.push(cost?);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = producer.join();
    print_results(args, &results);
    Ok(())
}

fn run_protocol(args: &RebalanceArgs, protocol: &str) -> Result<ProtocolCost> {
    let group = format!("bench-rebalance-{protocol}-{}", wall_us());
    let mut members = Vec::new();
    let started = Instant::now();
    for _ in 0..args.members {
        members.push(Member::spawn(args, &group, protocol)?);
    }
    let guard = Killer(&mut members);
    let all: Vec<&Member> = guard.0.iter().collect();
    let joined = wait_owned(&all, None, args.partitions, true, "the join")?;
    let join_ms = (joined - started).as_millis() as u64;
    eprintln!("{protocol}: joined in {join_ms} ms; adding a member");
    let mut newcomer = Member::spawn(args, &group, protocol)?;
    let add = event(args, &all, Some(&newcomer), |_| {}, "the added member")?;
    eprintln!(
        "{protocol}: add owned again in {} ms; killing a member",
        add.owned_again_ms
    );
    let mut survivors: Vec<&Member> = all[1..].to_vec();
    survivors.push(&newcomer);
    let victim = &all[0];
    wait_owned(
        &[&all[..], &[&newcomer]].concat(),
        None,
        args.partitions,
        true,
        "settling",
    )?;
    let pid = victim.child.id();
    let kill = event(
        args,
        &survivors,
        None,
        |_| kill_pid(pid),
        "the killed member",
    )?;
    eprintln!("{protocol}: kill owned again in {} ms", kill.owned_again_ms);
    newcomer.kill();
    drop(guard);
    Ok(ProtocolCost {
        protocol: protocol.to_string(),
        join_ms,
        add,
        kill,
    })
}

/// Kills every member when the run ends, however it ends.
struct Killer<'a>(&'a mut Vec<Member>);

impl Drop for Killer<'_> {
    fn drop(&mut self) {
        for m in self.0.iter_mut() {
            m.kill();
        }
    }
}

fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// Runs `act`, then measures until `members` own every partition again (and `newcomer` some).
fn event(
    args: &RebalanceArgs,
    members: &[&Member],
    newcomer: Option<&Member>,
    act: impl FnOnce(()),
    what: &str,
) -> Result<EventCost> {
    let before: Vec<BTreeSet<i32>> = members.iter().map(|m| m.owned()).collect();
    let (from, at) = (wall_us(), Instant::now());
    act(());
    let mut everyone = members.to_vec();
    everyone.extend(newcomer);
    let owned = wait_owned(&everyone, newcomer, args.partitions, false, what)?;
    std::thread::sleep(Duration::from_secs(args.settle_secs));
    let pause = longest_pause(members, from, wall_us());
    let after: Vec<BTreeSet<i32>> = members.iter().map(|m| m.owned()).collect();
    let moved = before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.difference(a).count())
        .sum();
    Ok(EventCost {
        owned_again_ms: owned.saturating_duration_since(at).as_millis() as u64,
        unaffected_pause_ms: pause,
        moved,
    })
}

fn create_topic(args: &RebalanceArgs) -> Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", &args.bootstrap)
            .create()
            .context("creating the admin client")?;
    let topic = NewTopic::new(&args.topic, args.partitions, TopicReplication::Fixed(1));
    let results = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .context("CreateTopics failed; is the broker reachable at --bootstrap?")?;
    for r in results {
        match r {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => bail!("creating topic {t}: {e}"),
        }
    }
    Ok(())
}

/// A producer writing `--rate` messages a second, round robin over the partitions, until `stop`.
fn spawn_producer(
    args: &RebalanceArgs,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let producer: BaseProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("linger.ms", "2")
        .set("log_level", "3")
        .create()
        .context("creating the producer")?;
    let (topic, partitions, rate, stop) = (
        args.topic.clone(),
        args.partitions,
        args.rate.max(1),
        stop.clone(),
    );
    Ok(std::thread::spawn(move || {
        let start = Instant::now();
        let payload = [b'x'; 100];
        let mut sent: u64 = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * f64::from(rate)) as u64;
            while sent < due {
                let p = (sent % partitions as u64) as i32;
                let rec = BaseRecord::<(), [u8]>::to(&topic)
                    .partition(p)
                    .payload(&payload);
                if producer.send(rec).is_err() {
                    break;
                }
                sent += 1;
            }
            producer.poll(Duration::from_millis(1));
        }
        let _ = producer.flush(Duration::from_secs(10));
    }))
}

fn print_results(args: &RebalanceArgs, results: &[ProtocolCost]) {
    println!(
        "{:<12} {:>8} {:>14} {:>14} {:>7} {:>14} {:>14} {:>7}",
        "protocol",
        "join ms",
        "add: owned ms",
        "add: pause ms",
        "moved",
        "kill: owned ms",
        "kill: pause ms",
        "moved"
    );
    for r in results {
        println!(
            "{:<12} {:>8} {:>14} {:>14} {:>7} {:>14} {:>14} {:>7}",
            r.protocol,
            r.join_ms,
            r.add.owned_again_ms,
            r.add.unaffected_pause_ms,
            r.add.moved,
            r.kill.owned_again_ms,
            r.kill.unaffected_pause_ms,
            r.kill.moved
        );
    }
    if args.json {
        let event = |e: &EventCost| serde_json::json!({ "owned_again_ms": e.owned_again_ms, "unaffected_pause_ms": e.unaffected_pause_ms, "moved": e.moved });
        let results: Vec<serde_json::Value> = results
            .iter()
            .map(|r| serde_json::json!({ "protocol": r.protocol, "join_ms": r.join_ms, "add": event(&r.add), "kill": event(&r.kill) }))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "members": args.members, "partitions": args.partitions, "rate": args.rate, "session_ms": args.session_ms, "results": results })
        );
    }
}
