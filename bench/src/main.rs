//! `tributary-bench`: a load generator for any Kafka-compatible broker, built on librdkafka.
//!
//! Today it has one mode, `produce`: send N messages of a fixed size as fast as the client allows
//! and report throughput and per-message acknowledgement latency (send → delivery report).
//! It prints one progress line per second to stderr and a summary (or, with `--json`, one JSON
//! object) at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::ClientContext;

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
    /// Produce messages as fast as possible and report throughput and ack latency.
    Produce(ProduceArgs),
}

#[derive(Parser)]
struct ProduceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long, default_value = "bench")]
    topic: String,
    /// Create the topic with this many partitions first (an existing topic is used as is).
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    #[arg(long, default_value_t = 1024)]
    message_size: usize,
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    #[arg(long, default_value = "none")]
    compression: String,
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    #[arg(long, default_value_t = 1_000_000)]
    batch_size: usize,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// Delivery reports arrive through `poll()` on the sending thread; the mutex is uncontended.
struct Ctx {
    latency_us: Mutex<Histogram<u64>>,
    delivered: AtomicU64,
    errors: AtomicU64,
}

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Self::DeliveryOpaque) {
        if result.is_ok() {
            let us = (sent.elapsed().as_micros() as u64).clamp(1, LATENCY_MAX_US);
            if let Ok(mut h) = self.latency_us.lock() {
                let _ = h.record(us);
            }
            self.delivered.fetch_add(1, Ordering::Relaxed);
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Highest latency the histogram records; anything slower is counted as this.
const LATENCY_MAX_US: u64 = 60_000_000;

fn main() -> Result<()> {
    match Cli::parse().mode {
        Mode::Produce(args) => produce(args),
    }
}

fn create_topic(args: &ProduceArgs) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .create()
        .context("creating the admin client")?;
    let topic = NewTopic::new(&args.topic, args.partitions, TopicReplication::Fixed(1));
    let results = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .context("CreateTopics failed; is the broker reachable at --bootstrap?")?;
    for r in results {
        match r {
            Ok(_) => eprintln!(
                "created topic {} with {} partitions",
                args.topic, args.partitions
            ),
            Err((t, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                eprintln!("using existing topic {t}")
            }
            Err((t, e)) => bail!("creating topic {t}: {e}"),
        }
    }
    Ok(())
}

fn produce(args: ProduceArgs) -> Result<()> {
    create_topic(&args)?;
    let producer: BaseProducer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("acks", &args.acks)
        .set("compression.type", &args.compression)
        .set("linger.ms", args.linger_ms.to_string())
        .set("batch.size", args.batch_size.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(Ctx {
            latency_us: Mutex::new(Histogram::new_with_bounds(1, LATENCY_MAX_US, 3)?),
            delivered: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        })
        .context("creating the producer")?;
    let payload: Vec<u8> = (0..args.message_size).map(|i| (i % 251) as u8).collect();
    let ctx = producer.context();
    let start = Instant::now();
    let mut last_report = start;
    let mut sent = 0u64;
    let mut delivered_at_report = 0u64;
    let delivered = || ctx.delivered.load(Ordering::Relaxed);
    let errors = || ctx.errors.load(Ordering::Relaxed);
    let p99 = || {
        ctx.latency_us
            .lock()
            .map(|h| h.value_at_quantile(0.99))
            .unwrap_or(0)
    };
    while delivered() + errors() < args.messages {
        if sent < args.messages {
            let record: BaseRecord<'_, [u8], [u8], Box<Instant>> =
                BaseRecord::with_opaque_to(&args.topic, Box::new(Instant::now()))
                    .payload(payload.as_slice());
            match producer.send(record) {
                Ok(()) => sent += 1,
                Err((e, _))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("send failed: {e}"),
            }
        } else {
            producer.poll(Duration::from_millis(5));
        }
        if sent.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
        let now = Instant::now();
        if now - last_report >= Duration::from_secs(1) {
            let d = delivered();
            let rate = (d - delivered_at_report) as f64 / (now - last_report).as_secs_f64();
            eprintln!(
                "{:>6.1}s  {:>10.0} msgs/s  {:>8.1} MB/s  p99 {} us  ({d}/{} acknowledged)",
                (now - start).as_secs_f64(),
                rate,
                rate * args.message_size as f64 / 1e6,
                p99(),
                args.messages
            );
            last_report = now;
            delivered_at_report = d;
        }
    }
    producer.flush(Duration::from_secs(60))?;
    let secs = start.elapsed().as_secs_f64();
    let h = ctx
        .latency_us
        .lock()
        .map(|h| h.clone())
        .unwrap_or_else(|_| Histogram::new(3).expect("histogram"));
    let msgs = delivered();
    let summary = serde_json::json!({
        "mode": "produce",
        "msgs": msgs,
        "errors": errors(),
        "seconds": secs,
        "msgs_per_sec": msgs as f64 / secs,
        "mb_per_sec": msgs as f64 * args.message_size as f64 / secs / 1e6,
        "latency_us": {
            "p50": h.value_at_quantile(0.5), "p90": h.value_at_quantile(0.9), "p99": h.value_at_quantile(0.99),
            "p999": h.value_at_quantile(0.999), "max": h.max(),
        },
        "config": {
            "topic": args.topic, "partitions": args.partitions, "message_size": args.message_size,
            "acks": args.acks, "compression": args.compression, "linger_ms": args.linger_ms, "batch_size": args.batch_size,
        },
        "broker": args.bootstrap,
    });
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "{msgs} messages in {secs:.2}s: {:.0} msgs/s, {:.1} MB/s; ack latency p50 {} us, p99 {} us, max {} us; {} errors",
            summary["msgs_per_sec"].as_f64().unwrap_or(0.0),
            summary["mb_per_sec"].as_f64().unwrap_or(0.0),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max(),
            errors()
        );
    }
    if errors() > 0 {
        bail!("{} messages were not acknowledged", errors());
    }
    Ok(())
}
