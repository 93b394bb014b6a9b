//! The metrics endpoint (`metrics.listen`): a scrape after known traffic from real clients shows
//! that traffic, in Prometheus text format; `/health`, unknown paths and the endpoint's bounds.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{rd_consume, rd_create_topics, rd_produce, start_broker, RawConn};

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Sends `request` and reads until the server closes: (status code, body). `None` when the
/// connection closes without a response.
fn http(addr: SocketAddr, request: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // A server that closes early may reset the connection while this is written.
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    if raw.is_empty() {
        return None;
    }
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    Some((status, body.to_string()))
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    http(addr, req.as_bytes()).expect("a response")
}

/// Parses the text exposition format 0.0.4: every sample's family must have had its `# TYPE`
/// line first; label values are unescaped.
fn parse(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{line}"
            );
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                (name.to_string(), parse_labels(body))
            }
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(&name);
        assert!(types.contains_key(family), "no TYPE before {line}");
        out.push((name, labels, value));
    }
    out
}

fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "label {name} opens with a quote");
        let mut value = String::new();
        loop {
            match chars.next().expect("label value closes") {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("dangling escape"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        if chars.peek() == Some(&',') {
            chars.next();
        }
        labels.insert(name, value);
    }
    labels
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
        })
        .map(|s| s.2)
}

fn sum(samples: &[Sample], name: &str, label: (&str, &str)) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && l.get(label.0).is_some_and(|v| v == label.1))
        .map(|s| s.2)
        .sum()
}

#[test]
fn scrape_shows_the_traffic_sent() {
    const RECORDS: usize = 200;
    const VALUE_BYTES: usize = 100;
    const PARTITIONS: i32 = 4;
    let dir = tempfile::tempdir().unwrap();
    // Sync rounds, whose histograms this checks (written-through flushes have their own test).
    let broker = start_broker(dir.path(), 2, &[("log.flush.write.through", "false")]);
    let metrics = broker.metrics_addr.expect("metrics endpoint on");
    let topic = "metered";
    rd_create_topics(
        broker.addr,
        &[rdkafka::admin::NewTopic::new(
            topic,
            PARTITIONS,
            rdkafka::admin::TopicReplication::Fixed(1),
        )],
    );
    let messages: Vec<(Option<String>, String)> = (0..RECORDS)
        .map(|i| {
            (
                Some(format!("k{i}")),
                format!("{i:0width$}", width = VALUE_BYTES),
            )
        })
        .collect();
    rd_produce(broker.addr, topic, &[], &messages);
    let consumed = rd_consume(broker.addr, topic, PARTITIONS, RECORDS);
    assert_eq!(consumed.len(), RECORDS);
    // A client connected while the scrape runs.
    let _client = RawConn::connect(broker.addr);

    let (status, body) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    let samples = parse(&body);
    let t = ("topic", topic);

    let produces = value(
        &samples,
        "kafka_network_requestmetrics_requests_total",
        &[("request", "Produce")],
    );
    assert!(produces.is_some_and(|n| n > 0.0), "{produces:?}");
    let fetches = value(
        &samples,
        "kafka_network_requestmetrics_requests_total",
        &[("request", "Fetch")],
    );
    assert!(fetches.is_some_and(|n| n > 0.0), "{fetches:?}");
    let bytes_in = value(
        &samples,
        "kafka_server_brokertopicmetrics_bytesin_total",
        &[t],
    )
    .unwrap();
    assert!(bytes_in >= (RECORDS * VALUE_BYTES) as f64, "{bytes_in}");
    let messages_in = value(
        &samples,
        "kafka_server_brokertopicmetrics_messagesin_total",
        &[t],
    );
    assert_eq!(messages_in, Some(RECORDS as f64));
    let bytes_out = value(
        &samples,
        "kafka_server_brokertopicmetrics_bytesout_total",
        &[t],
    )
    .unwrap();
    assert!(bytes_out >= (RECORDS * VALUE_BYTES) as f64, "{bytes_out}");
    assert_eq!(
        sum(&samples, "kafka_log_log_highwatermark", t),
        RECORDS as f64
    );
    assert_eq!(
        sum(&samples, "kafka_log_log_logendoffset", t),
        RECORDS as f64
    );
    assert_eq!(sum(&samples, "kafka_log_log_logstartoffset", t), 0.0);
    for p in 0..PARTITIONS {
        let p = p.to_string();
        let size = value(&samples, "kafka_log_log_size", &[t, ("partition", &p)]);
        let hw = value(
            &samples,
            "kafka_log_log_highwatermark",
            &[t, ("partition", &p)],
        );
        // Every partition of the topic has its gauges, whichever shard owns it.
        assert!(size.is_some() && hw.is_some(), "partition {p}");
    }
    assert!(sum(&samples, "kafka_log_log_size", t) >= (RECORDS * VALUE_BYTES) as f64);
    let open = value(
        &samples,
        "kafka_server_socket_server_metrics_connection_count",
        &[],
    );
    assert!(open.is_some_and(|n| n >= 1.0), "{open:?}");
    let read_bytes: f64 = (0..2)
        .map(|s| {
            value(
                &samples,
                "tributary_fetch_read_bytes_total",
                &[("shard", &s.to_string())],
            )
            .unwrap()
        })
        .sum();
    assert!(
        read_bytes >= bytes_out,
        "fetch read bytes {read_bytes} < bytes out {bytes_out}"
    );
    // Freshly produced data is read back from the tail kept in memory (log.tail.cache.bytes
    // is on by default), and every fetch that returned records made at least one log read.
    let shard_sum = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|s| s.2)
            .sum()
    };
    let tail_hits = shard_sum("tributary_log_tail_cache_hits_total");
    let log_reads = tail_hits
        + shard_sum("tributary_log_read_ahead_hits_total")
        + shard_sum("tributary_log_disk_reads_total");
    assert!(
        tail_hits > 0.0,
        "consuming what was just produced hits the tail cache"
    );
    assert!(log_reads >= 1.0 && read_bytes > 0.0);
    let synced: f64 = samples
        .iter()
        .filter(|(n, _, _)| n == "tributary_group_commit_files_synced_total")
        .map(|s| s.2)
        .sum();
    assert!(synced > 0.0, "acks=all with flush.messages=1 syncs files");
    assert!(value(
        &samples,
        "tributary_request_memory_capacity_bytes",
        &[("shard", "0")]
    )
    .is_some());

    // Each histogram's buckets never decrease, and its +Inf bucket and _count equal the
    // request counter of that API.
    let latency = "kafka_network_requestmetrics_totaltime_seconds";
    let mut histograms = 0;
    for (_, labels, count) in samples
        .iter()
        .filter(|(n, _, _)| n == &format!("{latency}_count"))
    {
        histograms += 1;
        let api = &labels["request"];
        let mut buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|(n, l, _)| n == &format!("{latency}_bucket") && &l["request"] == api)
            .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap(), *v))
            .collect();
        buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        assert!(buckets.len() > 2, "{api}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{api}: {buckets:?}"
        );
        assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
        assert_eq!(buckets.last().unwrap().1, *count, "{api}");
        let requests = value(
            &samples,
            "kafka_network_requestmetrics_requests_total",
            &[("request", api)],
        );
        assert_eq!(requests, Some(*count), "{api}");
    }
    assert!(histograms >= 2, "Produce and Fetch at least");

    // The per-stage histograms count what was sent: one hop, append and durable wait per
    // batch appended, one receive and respond per produce request (all acks=all), one read per
    // fetch read, one send per fetch, and the sync rounds cover exactly the files synced.
    let total = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|s| s.2)
            .sum()
    };
    let stage = |family: &str, stage: &str| -> f64 {
        check_histogram(&samples, family, &[("stage", stage)])
    };
    let produce_family = "tributary_produce_stage_seconds";
    let batches = total("tributary_batches_appended_total");
    assert!(batches >= 1.0);
    for s in ["hop", "append", "durable"] {
        assert_eq!(stage(produce_family, s), batches, "stage {s}");
    }
    assert_eq!(
        stage(produce_family, "replicate"),
        0.0,
        "one node replicates nothing"
    );
    assert_eq!(
        stage(produce_family, "backlog"),
        0.0,
        "one node holds no replication backlog"
    );
    for s in ["receive", "validate", "respond"] {
        assert_eq!(stage(produce_family, s), produces.unwrap(), "stage {s}");
    }
    let fetch_family = "tributary_fetch_stage_seconds";
    assert_eq!(
        stage(fetch_family, "read"),
        total("tributary_fetch_reads_total")
    );
    assert_eq!(stage(fetch_family, "send"), fetches.unwrap());
    let rounds = check_histogram(&samples, "tributary_sync_round_seconds", &[]);
    assert!(rounds >= total("tributary_group_commit_rounds_total") && rounds > 0.0);
    assert_eq!(
        value(&samples, "tributary_sync_round_files_sum", &[]),
        Some(total("tributary_group_commit_files_synced_total"))
    );
    assert_eq!(
        value(&samples, "tributary_sync_round_files_count", &[]),
        Some(rounds)
    );
    broker.shutdown().unwrap();
}

/// Checks a histogram series' buckets (never decreasing, `+Inf` equal to `_count`) and
/// returns its count.
fn check_histogram(samples: &[Sample], family: &str, labels: &[(&str, &str)]) -> f64 {
    let count = value(samples, &format!("{family}_count"), labels)
        .unwrap_or_else(|| panic!("{family}{labels:?} has a count"));
    let mut buckets: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(n, l, _)| {
            n == &format!("{family}_bucket")
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
        })
        .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap(), *v))
        .collect();
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "{family}{labels:?}: {buckets:?}"
    );
    assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY));
    assert_eq!(buckets.last().unwrap().1, count, "{family}{labels:?}");
    count
}

#[test]
fn consumer_group_lag_is_the_high_watermark_less_the_committed_offset() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    const RECORDS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 2, &[]);
    let metrics = broker.metrics_addr.expect("metrics endpoint on");
    let topic = "lagged";
    rd_create_topics(
        broker.addr,
        &[rdkafka::admin::NewTopic::new(
            topic,
            2,
            rdkafka::admin::TopicReplication::Fixed(1),
        )],
    );
    let messages: Vec<(Option<String>, String)> =
        (0..RECORDS).map(|i| (None, format!("m{i}"))).collect();
    rd_produce(broker.addr, topic, &[], &messages);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr.to_string())
        .set("group.id", "behind")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(3))
        .unwrap();
    tpl.add_partition_offset(topic, 1, Offset::Offset(0))
        .unwrap();
    consumer
        .commit(&tpl, CommitMode::Sync)
        .expect("offsets committed");

    let (status, body) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    let samples = parse(&body);
    let labels = |p: &'static str| {
        [
            ("consumergroup", "behind"),
            ("topic", topic),
            ("partition", p),
        ]
    };
    assert_eq!(
        value(&samples, "kafka_consumergroup_current_offset", &labels("0")),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "kafka_consumergroup_current_offset", &labels("1")),
        Some(0.0)
    );
    let mut lag = 0.0;
    for (p, committed) in [("0", 3.0), ("1", 0.0)] {
        let hw = value(
            &samples,
            "kafka_log_log_highwatermark",
            &[("topic", topic), ("partition", p)],
        )
        .unwrap();
        let l = value(&samples, "kafka_consumergroup_lag", &labels(p)).unwrap();
        assert_eq!(l, hw - committed, "partition {p}");
        lag += l;
    }
    assert_eq!(lag, (RECORDS - 3) as f64);
    broker.shutdown().unwrap();
}

/// By default (`log.flush.write.through`) an acks=all produce's flushes are durable as
/// written: they are counted, and the topic's segments need no sync round.
#[test]
fn written_through_flushes_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let metrics = broker.metrics_addr.expect("metrics endpoint on");
    rd_create_topics(
        broker.addr,
        &[rdkafka::admin::NewTopic::new(
            "through",
            1,
            rdkafka::admin::TopicReplication::Fixed(1),
        )],
    );
    let messages: Vec<(Option<String>, String)> =
        (0..50).map(|i| (None, format!("value {i}"))).collect();
    rd_produce(broker.addr, "through", &[("acks", "all")], &messages);
    assert_eq!(rd_consume(broker.addr, "through", 1, 50).len(), 50);
    let (status, body) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    let samples = parse(&body);
    let total = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|s| s.2)
            .sum()
    };
    assert!(
        total("tributary_group_commit_written_through_total") >= 1.0,
        "acks=all flushes written through"
    );
    assert_eq!(total("tributary_group_commit_files_synced_total"), 0.0);
    broker.shutdown().unwrap();
}

#[test]
fn health_unknown_paths_and_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let metrics = broker.metrics_addr.expect("metrics endpoint on");
    assert_eq!(get(metrics, "/health"), (200, "ok\n".to_string()));
    assert_eq!(get(metrics, "/nope").0, 404);
    assert_eq!(
        http(metrics, b"POST /metrics HTTP/1.1\r\n\r\n").map(|r| r.0),
        Some(405)
    );
    assert_eq!(http(metrics, b"hello\r\n\r\n").map(|r| r.0), Some(400));
    // A request head past METRICS_REQUEST_MAX_BYTES (8 KiB) is not answered.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9 * 1024)
    );
    assert_eq!(http(metrics, huge.as_bytes()), None);
    broker.shutdown().unwrap();
}

#[test]
fn slow_and_surplus_scrape_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[]);
    let metrics = broker.metrics_addr.expect("metrics endpoint on");
    // METRICS_CONNECTIONS_MAX (4) connections that never finish their request.
    let mut slow: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(metrics).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A fifth is closed at once, unanswered.
    let started = Instant::now();
    assert_eq!(get_or_none(metrics), None);
    assert!(started.elapsed() < Duration::from_secs(3));
    // The slow ones are closed within METRICS_EXCHANGE_TIMEOUT (5 s), unanswered.
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        assert!(buf.is_empty());
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // Then scrapes are served again.
    assert_eq!(get(metrics, "/metrics").0, 200);
    broker.shutdown().unwrap();
}

fn get_or_none(addr: SocketAddr) -> Option<(u16, String)> {
    http(addr, b"GET /metrics HTTP/1.1\r\n\r\n")
}

#[test]
fn empty_metrics_listen_turns_the_endpoint_off() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), 1, &[("metrics.listen", "")]);
    assert_eq!(broker.metrics_addr, None);
    broker.shutdown().unwrap();
}
