//! `trib produce` and `trib consume`.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::metadata::MetadataTopic;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::admin::{client_config, metadata, parse_kv};
use crate::Cli;

#[derive(Args)]
pub struct ProduceArgs {
    topic: String,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Header for every message, repeatable: `--header source=trib`.
    #[arg(long = "header", value_name = "KEY=VALUE")]
    headers: Vec<String>,
    #[arg(long)]
    partition: Option<i32>,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
}

#[derive(Args)]
pub struct ConsumeArgs {
    topic: String,
    /// Start at the earliest offset (without a group: the default is the end).
    #[arg(long)]
    from_beginning: bool,
    /// Start at this offset (needs --partition).
    #[arg(long)]
    offset: Option<i64>,
    #[arg(long)]
    partition: Option<i32>,
    /// Consume as a member of this group, committing offsets.
    #[arg(long)]
    group: Option<String>,
    /// Exit after this many messages.
    #[arg(long)]
    max_messages: Option<u64>,
    /// `value` (default) or `json` (partition, offset, timestamp, key, value, headers).
    #[arg(long, default_value = "value")]
    format: String,
}

#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

struct Ctx(Arc<Deliveries>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.0.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

pub fn produce(cli: &Cli, a: &ProduceArgs) -> Result<()> {
    let headers: Vec<(String, String)> = a
        .headers
        .iter()
        .map(|h| parse_kv(h))
        .collect::<Result<_>>()?;
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<Ctx> = client_config(cli)
        .set("acks", &a.acks)
        .set("compression.type", &a.compression)
        .set("message.timeout.ms", (cli.timeout_ms * 3).to_string())
        .create_with_context(Ctx(deliveries.clone()))
        .context("creating the producer (check --acks and --compression)")?;
    let stdin = std::io::stdin();
    let mut sent = 0u64;
    for line in stdin.lock().lines() {
        let line = line.context("reading stdin")?;
        let (key, value) = match &a.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_string()), v.to_string()),
                None => (None, line.clone()),
            },
            None => (None, line.clone()),
        };
        let mut hs = OwnedHeaders::new();
        for (k, v) in &headers {
            hs = hs.insert(Header {
                key: k,
                value: Some(v),
            });
        }
        let mut record = BaseRecord::to(&a.topic).payload(&value).headers(hs);
        if let Some(k) = &key {
            record = record.key(k);
        }
        if let Some(p) = a.partition {
            record = record.partition(p);
        }
        let mut record = Some(record);
        while let Some(r) = record.take() {
            match producer.send(r) {
                Ok(()) => sent += 1,
                Err((e, back))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                    record = Some(back);
                }
                Err((e, _)) => bail!("producing to {}: {e}", a.topic),
            }
        }
    }
    producer
        .flush(cli.timeout() * 3)
        .map_err(|e| anyhow!("flushing: {e}"))?;
    let failed = deliveries.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = deliveries
            .first_error
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_default();
        bail!(
            "{failed} of {sent} messages were not delivered to {}: {first}",
            a.topic
        );
    }
    eprintln!(
        "produced {} messages to {}",
        deliveries.ok.load(Ordering::Relaxed),
        a.topic
    );
    Ok(())
}

pub fn consume(cli: &Cli, a: &ConsumeArgs) -> Result<()> {
    if a.offset.is_some() && a.partition.is_none() {
        bail!("--offset needs --partition");
    }
    if !matches!(a.format.as_str(), "value" | "json") {
        bail!("--format must be value or json");
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let consumer = consumer_for(cli, a)?;
    let (_, md) = metadata(cli, Some(&a.topic))?;
    let topic = md
        .topics()
        .first()
        .ok_or_else(|| anyhow!("no metadata for topic {}", a.topic))?;
    if topic.error().is_some() || topic.partitions().is_empty() {
        bail!("topic {} does not exist", a.topic);
    }
    start_consuming(&consumer, a, topic)?;
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) && a.max_messages.is_none_or(|m| count < m) {
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.map_err(|e| anyhow!("consuming {}: {e}", a.topic))?;
        count += 1;
        println!("{}", format_message(&msg, &a.format));
    }
    if a.group.is_some() && count > 0 {
        consumer
            .commit_consumer_state(CommitMode::Sync)
            .map_err(|e| anyhow!("committing offsets: {e}"))?;
    }
    Ok(())
}

/// The consumer's settings: where it starts without a committed offset, and its group (with
/// `--group`, a member that commits; else the console's, never committing).
fn consumer_for(cli: &Cli, a: &ConsumeArgs) -> Result<BaseConsumer> {
    let mut conf = client_config(cli);
    conf.set("enable.partition.eof", "false")
        .set(
            "auto.offset.reset",
            if a.from_beginning {
                "earliest"
            } else {
                "latest"
            },
        )
        .set("group.id", a.group.as_deref().unwrap_or("trib-console"))
        .set(
            "enable.auto.commit",
            if a.group.is_some() { "true" } else { "false" },
        );
    conf.create().context("creating the consumer")
}

/// Subscribes as a group member (`--group` without `--partition`), else assigns the given
/// partition, or every partition of `topic`, from the chosen start.
fn start_consuming(consumer: &BaseConsumer, a: &ConsumeArgs, topic: &MetadataTopic) -> Result<()> {
    if let (Some(_), None) = (&a.group, a.partition) {
        return consumer.subscribe(&[&a.topic]).context("subscribing");
    }
    let mut tpl = TopicPartitionList::new();
    let start = match (a.offset, a.from_beginning) {
        (Some(o), _) => Offset::Offset(o),
        (None, true) => Offset::Beginning,
        (None, false) if a.group.is_some() => Offset::Stored,
        (None, false) => Offset::End,
    };
    let parts: Vec<i32> = match a.partition {
        Some(p) => vec![p],
        None => topic.partitions().iter().map(|p| p.id()).collect(),
    };
    for p in parts {
        tpl.add_partition_offset(&a.topic, p, start)
            .map_err(|e| anyhow!("{e}"))?;
    }
    consumer.assign(&tpl).context("assigning partitions")
}

/// One message as `--format` prints it: the value alone, or a JSON object with its partition,
/// offset, timestamp, key, value and headers.
fn format_message(msg: &BorrowedMessage<'_>, format: &str) -> String {
    let value = String::from_utf8_lossy(msg.payload().unwrap_or_default());
    if format != "json" {
        return value.into_owned();
    }
    let headers: serde_json::Map<String, serde_json::Value> = msg
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        serde_json::Value::from(
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        ),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": msg.timestamp().to_millis(),
        "key": msg.key().map(|k| String::from_utf8_lossy(k).into_owned()),
        "value": value,
        "headers": headers,
    })
    .to_string()
}
