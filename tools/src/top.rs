//! `trib top`: a live view of brokers' throughput and latencies, read from their Prometheus
//! endpoints (`metrics.listen`). Each refresh scrapes every endpoint and turns the difference from
//! the previous scrape into rates and latency quantiles over that interval — what Prometheus's
//! `rate()` and `histogram_quantile()` would give for it — so the view needs no Prometheus server.
//! The scrape is a small blocking HTTP/1.1 GET, bounded in time and size; no HTTP library needed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::Cli;

/// Largest scrape response accepted, head and body (`--scrape-max-bytes`): a broker's exposition
/// grows with its partitions (four gauges each) and group offsets, about 5 MiB at 10,000
/// partitions; this leaves room for ten times that while bounding what a wrong endpoint can send.
pub const SCRAPE_MAX_BYTES: usize = 64 << 20;

/// Shortest refresh interval (`--interval-ms`): a scrape asks every shard of the broker for its
/// counters, and the endpoint serves only a few scrapes at once.
pub const INTERVAL_MIN_MS: u64 = 100;

/// Topics shown by default, busiest first (`--topics`).
pub const TOPICS_SHOWN: usize = 20;

/// Consumer-group partitions shown, largest lag first.
pub const LAG_ROWS: usize = 5;

/// Longest name shown in a table's first column; a longer one is cut and ends in `~`.
const NAME_WIDTH_MAX: usize = 48;

/// How often a wait between refreshes checks for Ctrl-C.
const STOP_POLL: Duration = Duration::from_millis(50);

/// ANSI: cursor home, then clear the screen.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

const REQUESTS: &str = "kafka_network_requestmetrics_requests_total";
const REQUEST_LATENCY: &str = "kafka_network_requestmetrics_totaltime_seconds";
const BYTES_IN: &str = "kafka_server_brokertopicmetrics_bytesin_total";
const MESSAGES_IN: &str = "kafka_server_brokertopicmetrics_messagesin_total";
const BYTES_OUT: &str = "kafka_server_brokertopicmetrics_bytesout_total";
const CONNECTIONS: &str = "kafka_server_socket_server_metrics_connection_count";
const MEMORY_USED: &str = "tributary_request_memory_used_bytes";
const MEMORY_CAPACITY: &str = "tributary_request_memory_capacity_bytes";
const GROUP_LAG: &str = "kafka_consumergroup_lag";
const THROTTLED: &str = "tributary_quota_throttled_responses_total";
const FILES_SYNCED: &str = "tributary_group_commit_files_synced_total";
const WRITTEN_THROUGH: &str = "tributary_group_commit_written_through_total";
const HANDED_OVER: &str = "tributary_connections_handed_over_total";

/// The stage histograms, each with the prefix its rows are shown under.
const STAGE_FAMILIES: [(&str, &str); 4] = [
    ("tributary_produce_stage_seconds", "produce"),
    ("tributary_fetch_stage_seconds", "fetch"),
    ("tributary_replica_fetch_stage_seconds", "follower"),
    ("tributary_sync_round_seconds", "sync round"),
];

/// Stages in the order a request passes them; a stage not listed here is shown after these.
const STAGE_ORDER: [&str; 13] = [
    "receive",
    "validate",
    "hop",
    "backlog",
    "append",
    "durable",
    "replicate",
    "respond",
    "wait",
    "read",
    "send",
    "answer",
    "apply",
];

#[derive(Args)]
pub struct TopArgs {
    /// A broker's metrics endpoint (its `metrics.listen`); repeat once per broker of a cluster.
    #[arg(
        long = "metrics",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:9644"
    )]
    metrics: Vec<String>,
    /// Time between refreshes; rates and quantiles are over this interval.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long)]
    iterations: Option<u64>,
    /// Topics shown, busiest first.
    #[arg(long, default_value_t = TOPICS_SHOWN)]
    topics: usize,
    /// Largest scrape response accepted, in bytes.
    #[arg(long, default_value_t = SCRAPE_MAX_BYTES)]
    scrape_max_bytes: usize,
}

pub fn top(cli: &Cli, args: &TopArgs) -> Result<()> {
    if args.interval_ms < INTERVAL_MIN_MS {
        bail!(
            "--interval-ms {} is too short: give at least {INTERVAL_MIN_MS}",
            args.interval_ms
        );
    }
    if args.iterations == Some(0) {
        bail!("--iterations 0 shows nothing: give at least 1, or leave it out to run until Ctrl-C");
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let interval = Duration::from_millis(args.interval_ms);
    let tty = std::io::stdout().is_terminal();
    let scrape_brokers = || scrape_all(&args.metrics, cli.timeout(), args.scrape_max_bytes);

    // The first scrape must reach every endpoint: a wrong address is an error, not a blank view.
    let mut prev: Vec<Option<Scrape>> = scrape_brokers()
        .into_iter()
        .map(|r| r.map(Some))
        .collect::<Result<_>>()?;
    let mut next = Instant::now() + interval;
    let mut refreshes = 0;
    while args.iterations.is_none_or(|n| refreshes < n) {
        if !sleep_until(next, &stop) {
            break;
        }
        let cur = scrape_brokers();
        let view = View::new(&args.metrics, &prev, &cur);
        let mut block = String::new();
        if tty {
            block.push_str(CLEAR_SCREEN);
        }
        view.render(&mut block, SystemTime::now(), interval, args.topics, tty);
        if !tty {
            // Logged blocks read apart.
            block.push('\n');
        }
        print!("{block}");
        let _ = std::io::stdout().flush();
        // A broker that failed this time starts again from its next scrape.
        prev = cur.into_iter().map(Result::ok).collect();
        refreshes += 1;
        // A refresh that fell behind (a slow scrape) still waits half an interval before the
        // next, so scrapes never run back to back.
        next = (next + interval).max(Instant::now() + interval / 2);
    }
    Ok(())
}

/// Sleeps until `when` in short steps; false when SIGINT or SIGTERM asked to stop.
fn sleep_until(when: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= when {
            return true;
        }
        std::thread::sleep((when - now).min(STOP_POLL));
    }
}

/// One scrape of one endpoint: its samples and when it was asked for them.
pub struct Scrape {
    at: Instant,
    samples: Vec<Sample>,
}

/// Scrapes every endpoint at once, so one slow broker delays the view by its own time only.
fn scrape_all(addrs: &[String], timeout: Duration, max_bytes: usize) -> Vec<Result<Scrape>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = addrs
            .iter()
            .map(|addr| s.spawn(move || scrape(addr, timeout, max_bytes)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("the scrape thread panicked")))
            })
            .collect()
    })
}

/// `GET /metrics` from `addr`, parsed.
fn scrape(addr: &str, timeout: Duration, max_bytes: usize) -> Result<Scrape> {
    let deadline = Instant::now() + timeout;
    let targets: Vec<_> = addr
        .to_socket_addrs()
        .with_context(|| {
            format!("cannot resolve the metrics address {addr} (give HOST:PORT, the broker's metrics.listen)")
        })?
        .collect();
    let mut last_error = None;
    let mut stream = None;
    for target in &targets {
        match TcpStream::connect_timeout(target, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let Some(mut stream) = stream else {
        let why = last_error.map_or_else(|| "no address".to_string(), |e| e.to_string());
        bail!(
            "cannot connect to the metrics endpoint {addr}: {why}; is the broker running, and is its metrics.listen set to {addr}?"
        );
    };
    let timed_out = || {
        anyhow!(
            "the metrics endpoint {addr} did not answer within {} ms (--timeout-ms); is {addr} the broker's metrics.listen?",
            timeout.as_millis()
        )
    };
    stream.set_write_timeout(Some(timeout))?;
    let at = Instant::now();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(|e| {
        if is_timeout(&e) {
            timed_out()
        } else {
            anyhow!("sending the scrape request to {addr}: {e}; is {addr} the broker's metrics.listen (not a Kafka listener)?")
        }
    })?;
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => return Err(timed_out()),
            Err(e) => bail!(
                "reading the scrape response of {addr}: {e}; is {addr} the broker's metrics.listen (not a Kafka listener)?"
            ),
        };
        if n == 0 {
            break;
        }
        if raw.len() + n > max_bytes {
            bail!(
                "the metrics endpoint {addr} sent more than {max_bytes} bytes; raise --scrape-max-bytes if it is that large"
            );
        }
        raw.extend_from_slice(&chunk[..n]);
        if response_complete(&raw) {
            break;
        }
    }
    let body = response_body(&raw).map_err(|e| anyhow!("the metrics endpoint {addr}: {e}"))?;
    let samples = parse(&body).with_context(|| format!("the metrics endpoint {addr}"))?;
    Ok(Scrape { at, samples })
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The end of an HTTP response's head (after its blank line) and its headers, lower-cased.
fn response_head(raw: &[u8]) -> Option<(usize, Vec<(String, String)>)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..end]);
    let headers = head
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase()))
        .collect();
    Some((end, headers))
}

/// True once a response with a `Content-Length` has all of its body, so a server that keeps the
/// connection open despite `Connection: close` does not hold the scrape until its timeout.
fn response_complete(raw: &[u8]) -> bool {
    let Some((end, headers)) = response_head(raw) else {
        return false;
    };
    headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .is_some_and(|len| raw.len() >= end + len)
}

/// The body of a complete `200` response (by `Content-Length`, chunked, or up to the close).
fn response_body(raw: &[u8]) -> Result<String, String> {
    let Some((end, headers)) = response_head(raw) else {
        return Err(if raw.is_empty() {
            "closed the connection without answering; is this the broker's metrics.listen?"
                .to_string()
        } else {
            "the response ended before its header did; is this an HTTP endpoint?".to_string()
        });
    };
    let status_line = String::from_utf8_lossy(&raw[..end]);
    let status_line = status_line.lines().next().unwrap_or_default();
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or_default();
    let status = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!(
            "answered {status_line:?}, not HTTP; is this the broker's metrics.listen?"
        ));
    }
    if status != "200" {
        return Err(format!(
            "answered {status_line:?} to GET /metrics; is this the broker's metrics.listen?"
        ));
    }
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let rest = &raw[end..];
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("its Content-Length {len:?} is not a number"))?;
        if rest.len() < len {
            return Err(format!(
                "the response ended after {} of its {len} body bytes",
                rest.len()
            ));
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    String::from_utf8(body).map_err(|_| "its body is not UTF-8 text".to_string())
}

/// A chunked body (RFC 9112 §7.1) decoded; chunk extensions and trailers are ignored.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk's size line is cut off")?;
        let line = String::from_utf8_lossy(&rest[..line_end]);
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| format!("chunk size {size:?} is not hexadecimal"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest
            .get(..size)
            .ok_or_else(|| format!("a chunk of {size} bytes is cut off"))?;
        body.extend_from_slice(chunk);
        rest = rest[size..]
            .strip_prefix(b"\r\n")
            .ok_or("a chunk does not end with CRLF")?;
    }
}

/// A sample's labels, (name, unescaped value), in the order written.
pub type Labels = Vec<(String, String)>;

/// One sample of the text exposition format: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the Prometheus text exposition format 0.0.4: one sample a line, `name{label="value",...}
/// value [timestamp]`; comments (`# HELP`, `# TYPE`, any `#` line) and blank lines are skipped.
/// A line that is none of these is an error naming its number and text.
pub fn parse(text: &str) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_line(line).map_err(|why| anyhow!("line {}: {why}: {raw:?}", i + 1))?;
        out.push(sample);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let name_end = line.find(|c| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("expected a metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.trim_start().strip_prefix('{') {
        (labels, rest) = parse_labels(body)?;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err(match rest.chars().next() {
            None => "no value".into(),
            Some(c) => format!("unexpected {c:?} where a space and the value belong"),
        });
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("timestamp {ts:?} is not an integer"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!(
            "unexpected {extra:?} after the value and timestamp"
        ));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The labels after a `{`, and what follows their `}`. Label values unescape `\\`, `\"` and `\n`.
fn parse_labels(body: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let key_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        if key.is_empty() {
            return Err("expected a label name or '}'".into());
        }
        rest = rest[key_end..]
            .trim_start()
            .strip_prefix('=')
            .ok_or_else(|| format!("expected '=' after label {key}"))?
            .trim_start()
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key}'s value is not in double quotes"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err(format!("label {key}'s value has no closing quote")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => return Err(format!("unknown escape \\{c} in label {key}")),
                    None => return Err(format!("label {key}'s value has no closing quote")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        rest = rest[close + 1..].trim_start();
        labels.push((key.to_string(), value));
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None if rest.starts_with('}') => {}
            None => return Err(format!("expected ',' or '}}' after label {key}")),
        }
    }
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse()
            .map_err(|_| format!("value {s:?} is not a number")),
    }
}

/// Sum of `name`'s samples grouped by their `label` (a sample without it under ""), other
/// labels (a broker's shards, say) summed over.
fn by_label(samples: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        *out.entry(s.label(label).unwrap_or_default().to_string())
            .or_insert(0.0) += s.value;
    }
    out
}

/// Sum of all of `name`'s samples; `None` when it has none.
fn sum_of(samples: &[Sample], name: &str) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .reduce(|a, b| a + b)
}

/// A histogram's cumulative buckets: (upper bound, observations at or below it), by bound.
pub type Buckets = Vec<(f64, f64)>;

/// Histogram `family`'s buckets grouped by `label` (a series without it under ""), other
/// labels summed over, as `sum by (label, le)` would.
fn histograms(samples: &[Sample], family: &str, label: &str) -> BTreeMap<String, Buckets> {
    let bucket = format!("{family}_bucket");
    let mut out: BTreeMap<String, Buckets> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == bucket) {
        let Some(le) = s.label("le").and_then(|v| parse_value(v).ok()) else {
            continue;
        };
        let key = s.label(label).unwrap_or_default().to_string();
        add_bucket(out.entry(key).or_default(), le, s.value);
    }
    for b in out.values_mut() {
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
    }
    out
}

fn add_bucket(buckets: &mut Buckets, le: f64, n: f64) {
    match buckets.iter_mut().find(|(b, _)| *b == le) {
        Some(x) => x.1 += n,
        None => buckets.push((le, n)),
    }
}

/// How much a counter grew from `prev` to `cur`. A counter that went down was reset (its broker
/// restarted) and all of `cur` is new, as Prometheus's `rate()` counts it; one not seen before
/// counts from zero.
pub fn increase(prev: Option<f64>, cur: f64) -> f64 {
    match prev {
        Some(p) if cur >= p => cur - p,
        _ => cur,
    }
}

/// Per-bucket increases from `prev` to `cur` of one histogram, cumulative like the buckets. If any
/// bucket went down the histogram was reset and `cur` is all new. Counts are kept non-decreasing
/// by bound, as `histogram_quantile` does, in case the two scrapes' buckets disagree.
pub fn bucket_increase(prev: &[(f64, f64)], cur: &[(f64, f64)]) -> Buckets {
    let before = |le: f64| prev.iter().find(|p| p.0 == le).map(|p| p.1);
    let reset = cur.iter().any(|&(le, c)| before(le).is_some_and(|p| c < p));
    let mut running: f64 = 0.0;
    cur.iter()
        .map(|&(le, c)| {
            let grew = if reset { c } else { increase(before(le), c) };
            running = running.max(grew);
            (le, running)
        })
        .collect()
}

/// The `q`-quantile (0 < q < 1) of cumulative `buckets` as Prometheus's `histogram_quantile`
/// estimates it: the bucket holding the rank, interpolated linearly within it (the first
/// bucket starts at 0); a rank in the `+Inf` bucket gives the highest finite bound. `None`
/// without observations or without a `+Inf` bucket.
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let &(last_bound, observations) = buckets.last()?;
    if last_bound != f64::INFINITY || buckets.len() < 2 || observations <= 0.0 {
        return None;
    }
    let rank = q * observations;
    let b = buckets.iter().position(|&(_, c)| c >= rank)?;
    if b == buckets.len() - 1 {
        return Some(buckets[b - 1].0);
    }
    let (end, cumulative) = buckets[b];
    if b == 0 && end <= 0.0 {
        return Some(end);
    }
    let (start, below) = if b == 0 { (0.0, 0.0) } else { buckets[b - 1] };
    Some(start + (end - start) * ((rank - below) / (cumulative - below)))
}

/// A topic's rates over an interval.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TopicRates {
    pub bytes_in: f64,
    pub messages_in: f64,
    pub bytes_out: f64,
}

/// What one interval between two scrapes of a broker saw; intervals of several brokers add up.
#[derive(Debug, Default)]
pub struct Interval {
    /// Per second, by topic.
    pub topics: BTreeMap<String, TopicRates>,
    /// Requests per second, by API.
    pub requests: BTreeMap<String, f64>,
    /// Observations in the interval of each latency histogram, by (family, request or stage).
    pub latency: BTreeMap<(String, String), Buckets>,
    /// Responses a quota delayed, per second.
    pub throttled: f64,
    /// Segment files made durable by a sync (a round's or a direct one), per second.
    pub synced: f64,
    /// Durable flushes that needed no sync (`log.flush.write.through`), per second.
    pub written_through: f64,
    /// Connections moved to the shard owning their partitions, per second.
    pub handed_over: f64,
}

impl Interval {
    /// The interval from `prev` to `cur`, `secs` apart.
    pub fn between(prev: &[Sample], cur: &[Sample], secs: f64) -> Interval {
        let secs = secs.max(f64::EPSILON);
        let rates = |name: &str, label: &str| -> BTreeMap<String, f64> {
            let before = by_label(prev, name, label);
            by_label(cur, name, label)
                .into_iter()
                .map(|(k, v)| {
                    let grew = increase(before.get(&k).copied(), v);
                    (k, grew / secs)
                })
                .collect()
        };
        let mut topics: BTreeMap<String, TopicRates> = BTreeMap::new();
        for (t, r) in rates(BYTES_IN, "topic") {
            topics.entry(t).or_default().bytes_in = r;
        }
        for (t, r) in rates(MESSAGES_IN, "topic") {
            topics.entry(t).or_default().messages_in = r;
        }
        for (t, r) in rates(BYTES_OUT, "topic") {
            topics.entry(t).or_default().bytes_out = r;
        }
        let mut latency = BTreeMap::new();
        let families = std::iter::once((REQUEST_LATENCY, "request"))
            .chain(STAGE_FAMILIES.iter().map(|(f, _)| (*f, "stage")));
        for (family, label) in families {
            let before = histograms(prev, family, label);
            for (key, buckets) in histograms(cur, family, label) {
                let old = before.get(&key).map(Vec::as_slice).unwrap_or_default();
                latency.insert((family.to_string(), key), bucket_increase(old, &buckets));
            }
        }
        let per_sec =
            |name: &str| increase(sum_of(prev, name), sum_of(cur, name).unwrap_or(0.0)) / secs;
        Interval {
            topics,
            requests: rates(REQUESTS, "request"),
            latency,
            throttled: per_sec(THROTTLED),
            synced: per_sec(FILES_SYNCED),
            written_through: per_sec(WRITTEN_THROUGH),
            handed_over: per_sec(HANDED_OVER),
        }
    }

    /// Adds another broker's interval to this one.
    pub fn add(&mut self, other: &Interval) {
        for (t, r) in &other.topics {
            let sum = self.topics.entry(t.clone()).or_default();
            sum.bytes_in += r.bytes_in;
            sum.messages_in += r.messages_in;
            sum.bytes_out += r.bytes_out;
        }
        for (api, r) in &other.requests {
            *self.requests.entry(api.clone()).or_default() += r;
        }
        for (key, buckets) in &other.latency {
            let sum = self.latency.entry(key.clone()).or_default();
            for &(le, n) in buckets {
                add_bucket(sum, le, n);
            }
            sum.sort_by(|x, y| x.0.total_cmp(&y.0));
        }
        self.throttled += other.throttled;
        self.synced += other.synced;
        self.written_through += other.written_through;
        self.handed_over += other.handed_over;
    }

    /// The p50 and p99 of one latency histogram over the interval, and its observations.
    fn p50_p99(&self, family: &str, key: &str) -> (Option<f64>, Option<f64>, f64) {
        match self.latency.get(&(family.to_string(), key.to_string())) {
            None => (None, None, 0.0),
            Some(b) => (
                quantile(0.5, b),
                quantile(0.99, b),
                b.last().map_or(0.0, |x| x.1),
            ),
        }
    }
}

/// One broker's rates over the interval, per second.
#[derive(Debug, Clone, Copy)]
struct BrokerRates {
    requests: f64,
    throttled: f64,
    /// Files made durable by a sync.
    synced: f64,
    /// Durable flushes written through, with no sync.
    written_through: f64,
    /// Connections moved to the shard owning their partitions.
    handed_over: f64,
}

/// One broker's line: its gauges from the latest scrape, its rates when it was scraped twice.
struct BrokerRow {
    addr: String,
    connections: Option<f64>,
    memory_used: Option<f64>,
    memory_capacity: Option<f64>,
    rates: Option<BrokerRates>,
    error: Option<String>,
}

/// One consumer group's lag on one partition.
#[derive(Debug, PartialEq)]
struct Lag {
    group: String,
    topic: String,
    partition: String,
    lag: f64,
}

/// Everything one refresh shows.
struct View {
    brokers: Vec<BrokerRow>,
    total: Interval,
    lag: Vec<Lag>,
}

impl View {
    /// The view of the interval from `prev` to `cur`, scrapes of `addrs` in order; a broker
    /// missing either scrape adds nothing to the totals.
    fn new(addrs: &[String], prev: &[Option<Scrape>], cur: &[Result<Scrape>]) -> View {
        let mut brokers = Vec::new();
        let mut total = Interval::default();
        let mut lag: BTreeMap<(String, String, String), f64> = BTreeMap::new();
        for ((addr, before), now) in addrs.iter().zip(prev).zip(cur) {
            let now = match now {
                Ok(s) => s,
                Err(e) => {
                    brokers.push(BrokerRow {
                        addr: addr.clone(),
                        connections: None,
                        memory_used: None,
                        memory_capacity: None,
                        rates: None,
                        error: Some(format!("{e:#}")),
                    });
                    continue;
                }
            };
            let rates = before.as_ref().map(|b| {
                let secs = now.at.duration_since(b.at).as_secs_f64();
                let interval = Interval::between(&b.samples, &now.samples, secs);
                total.add(&interval);
                BrokerRates {
                    requests: interval.requests.values().sum(),
                    throttled: interval.throttled,
                    synced: interval.synced,
                    written_through: interval.written_through,
                    handed_over: interval.handed_over,
                }
            });
            // A partition's lag is reported by the broker holding it; with replicas, keep the
            // largest any broker reports.
            for s in now.samples.iter().filter(|s| s.name == GROUP_LAG) {
                let key = [
                    s.label("consumergroup"),
                    s.label("topic"),
                    s.label("partition"),
                ]
                .map(|v| v.unwrap_or_default().to_string());
                let l = lag.entry(key.into()).or_insert(s.value);
                *l = l.max(s.value);
            }
            brokers.push(BrokerRow {
                addr: addr.clone(),
                connections: sum_of(&now.samples, CONNECTIONS),
                memory_used: sum_of(&now.samples, MEMORY_USED),
                memory_capacity: sum_of(&now.samples, MEMORY_CAPACITY),
                rates,
                error: None,
            });
        }
        View {
            brokers,
            total,
            lag: top_lag(lag),
        }
    }

    /// The block for one refresh: a header line with the time, then one table per section.
    fn render(
        &self,
        out: &mut String,
        now: SystemTime,
        interval: Duration,
        topics_shown: usize,
        tty: bool,
    ) {
        let n = self.brokers.len();
        let _ = writeln!(
            out,
            "--- {} · {n} broker{} · {:.1}s interval{} ---",
            utc(now),
            if n == 1 { "" } else { "s" },
            interval.as_secs_f64(),
            if tty { " · Ctrl-C quits" } else { "" }
        );
        self.render_brokers(out);
        self.render_topics(out, topics_shown);
        self.render_requests(out);
        self.render_stages(out);
        self.render_lag(out);
    }

    fn render_brokers(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .brokers
            .iter()
            .map(|b| {
                let status = match (&b.error, b.rates) {
                    (Some(_), _) => "down",
                    (None, None) => "new",
                    (None, Some(_)) => "up",
                };
                let memory = match (b.memory_used, b.memory_capacity) {
                    (Some(u), Some(c)) => format!("{}/{}", bytes(u), bytes(c)),
                    _ => "-".to_string(),
                };
                vec![
                    clip(&b.addr),
                    status.to_string(),
                    b.connections.map_or("-".into(), |c| format!("{c:.0}")),
                    b.rates.map_or("-".into(), |r| count(r.requests)),
                    memory,
                    b.rates.map_or("-".into(), |r| count(r.throttled)),
                    b.rates.map_or("-".into(), |r| count(r.synced)),
                    b.rates.map_or("-".into(), |r| count(r.written_through)),
                    b.rates.map_or("-".into(), |r| count(r.handed_over)),
                ]
            })
            .collect();
        table(
            out,
            &[
                "BROKER",
                "STATUS",
                "CONNS",
                "REQ/s",
                "REQ MEMORY",
                "THROTTLED/s",
                "SYNCED/s",
                "WRITTEN-THROUGH/s",
                "CONN-MOVES/s",
            ],
            &rows,
        );
        for b in &self.brokers {
            if let Some(e) = &b.error {
                let _ = writeln!(out, "  {}: {e}", b.addr);
            }
        }
    }

    fn render_topics(&self, out: &mut String, shown: usize) {
        let mut topics: Vec<(&String, &TopicRates)> = self.total.topics.iter().collect();
        // Busiest first; ties (idle topics) by name.
        topics.sort_by(|a, b| {
            (b.1.bytes_in + b.1.bytes_out)
                .total_cmp(&(a.1.bytes_in + a.1.bytes_out))
                .then(a.0.cmp(b.0))
        });
        let rows: Vec<Vec<String>> = topics
            .iter()
            .take(shown)
            .map(|(t, r)| {
                vec![
                    clip(t),
                    bytes(r.bytes_in),
                    count(r.messages_in),
                    bytes(r.bytes_out),
                ]
            })
            .collect();
        out.push('\n');
        table(
            out,
            &["TOPIC", "BYTES IN/s", "MSGS IN/s", "BYTES OUT/s"],
            &rows,
        );
        if topics.len() > shown {
            let _ = writeln!(out, "  … {} more topics (--topics)", topics.len() - shown);
        }
    }

    fn render_requests(&self, out: &mut String) {
        // Produce and Fetch always, then every other API answered in the interval, by name.
        let mut apis = vec!["Produce", "Fetch"];
        apis.extend(
            self.total
                .requests
                .iter()
                .filter(|(api, r)| **r > 0.0 && !matches!(api.as_str(), "Produce" | "Fetch"))
                .map(|(api, _)| api.as_str()),
        );
        let rows: Vec<Vec<String>> = apis
            .iter()
            .map(|api| {
                let rate = self.total.requests.get(*api).copied().unwrap_or(0.0);
                let (p50, p99, _) = self.total.p50_p99(REQUEST_LATENCY, api);
                vec![api.to_string(), count(rate), seconds(p50), seconds(p99)]
            })
            .collect();
        out.push('\n');
        table(out, &["REQUEST", "REQ/s", "P50", "P99"], &rows);
    }

    fn render_stages(&self, out: &mut String) {
        let mut rows = Vec::new();
        for (family, prefix) in STAGE_FAMILIES {
            let mut stages: Vec<&str> = self
                .total
                .latency
                .keys()
                .filter(|(f, _)| f == family)
                .map(|(_, stage)| stage.as_str())
                .collect();
            stages.sort_by_key(|s| {
                (
                    STAGE_ORDER
                        .iter()
                        .position(|o| o == s)
                        .unwrap_or(STAGE_ORDER.len()),
                    *s,
                )
            });
            for stage in stages {
                let (p50, p99, n) = self.total.p50_p99(family, stage);
                let name = if stage.is_empty() {
                    prefix.to_string()
                } else {
                    format!("{prefix} {stage}")
                };
                rows.push(vec![
                    clip(&name),
                    format!("{n:.0}"),
                    seconds(p50),
                    seconds(p99),
                ]);
            }
        }
        if rows.is_empty() {
            return;
        }
        out.push('\n');
        table(out, &["STAGE", "COUNT", "P50", "P99"], &rows);
    }

    fn render_lag(&self, out: &mut String) {
        out.push('\n');
        if self.lag.is_empty() {
            let _ = writeln!(out, "CONSUMER GROUP LAG: none reported");
            return;
        }
        let rows: Vec<Vec<String>> = self
            .lag
            .iter()
            .map(|l| {
                vec![
                    clip(&l.group),
                    clip(&l.topic),
                    l.partition.clone(),
                    format!("{:.0}", l.lag),
                ]
            })
            .collect();
        table(out, &["CONSUMER GROUP", "TOPIC", "PARTITION", "LAG"], &rows);
    }
}

/// The `LAG_ROWS` largest lags, largest first; ties by group, topic and partition.
fn top_lag(lag: BTreeMap<(String, String, String), f64>) -> Vec<Lag> {
    let mut all: Vec<Lag> = lag
        .into_iter()
        .map(|((group, topic, partition), lag)| Lag {
            group,
            topic,
            partition,
            lag,
        })
        .collect();
    // Stable: the map's order breaks ties.
    all.sort_by(|a, b| b.lag.total_cmp(&a.lag));
    all.truncate(LAG_ROWS);
    all
}

/// Writes a table: the first column left-aligned, the others right-aligned, two spaces apart.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "  {cell:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// `name`, cut to `NAME_WIDTH_MAX` characters.
fn clip(name: &str) -> String {
    if name.chars().count() <= NAME_WIDTH_MAX {
        return name.to_string();
    }
    let mut cut: String = name.chars().take(NAME_WIDTH_MAX - 1).collect();
    cut.push('~');
    cut
}

/// A byte count in binary units: `512B`, `1.5KiB`, `12.3MiB`.
fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0}B")
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

/// A count or rate: `12.5`, `3.4k`, `1.2M`.
fn count(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.1}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.1}M", v / 1e6)
    }
}

/// A duration in seconds as `17µs`, `1.25ms` or `2.50s`; `-` without observations.
fn seconds(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(s) if s < 1e-3 => format!("{:.0}µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.2}ms", s * 1e3),
        Some(s) => format!("{s:.2}s"),
    }
}

/// `t` as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// The proleptic Gregorian (year, month, day) of a day count from 1970-01-01, by 400-year eras
/// (146,097 days each) of years that start on March 1, so the leap day ends a year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_samples_labels_escapes_and_special_values() {
        let text = "# HELP x_total Things.\n\
                    # TYPE x_total counter\n\
                    \n\
                    x_total 3\n\
                    x_total{topic=\"a\\\\b\\\"c\\nd\",shard=\"0\"} 1.5e3\n\
                    h_bucket{le=\"+Inf\",} 7 1700000000000\n\
                    g{} NaN\n\
                    g2 { a = \"x\" } -Inf\n\
                    name:with_colon 0.25\n";
        let samples = parse(text).unwrap();
        assert_eq!(samples.len(), 6, "{samples:?}");
        assert_eq!(
            samples[0],
            Sample {
                name: "x_total".into(),
                labels: vec![],
                value: 3.0
            }
        );
        assert_eq!(
            samples[1].labels,
            labels(&[("topic", "a\\b\"c\nd"), ("shard", "0")])
        );
        assert_eq!(samples[1].value, 1500.0);
        assert_eq!(samples[2].labels, labels(&[("le", "+Inf")]));
        assert_eq!(samples[2].value, 7.0);
        assert!(samples[3].value.is_nan() && samples[3].labels.is_empty());
        assert_eq!(samples[4].labels, labels(&[("a", "x")]));
        assert_eq!(samples[4].value, f64::NEG_INFINITY);
        assert_eq!(samples[5].name, "name:with_colon");
        assert_eq!(parse_value("+Inf"), Ok(f64::INFINITY));
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        let cases = [
            ("a 1\nb{x=\"1\" 2\n", "line 2", "b{x=\\\"1\\\" 2"),
            ("a 1\n\n# c\nbad_value one\n", "line 4", "is not a number"),
            ("novalue\n", "line 1", "no value"),
            ("n{x=\"a\\tb\"} 1\n", "line 1", "unknown escape \\t"),
            ("n{x=\"open} 1\n", "line 1", "no closing quote"),
            ("n{x=1} 1\n", "line 1", "not in double quotes"),
            ("n-1 1\n", "line 1", "unexpected '-'"),
            ("{x=\"1\"} 1\n", "line 1", "expected a metric name"),
            ("n 1 notatime\n", "line 1", "timestamp"),
            ("n 1 2 3\n", "line 1", "unexpected \"3\""),
        ];
        for (text, line, why) in cases {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(line) && e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_as_prometheus_does() {
        let b = [(0.001, 2.0), (0.0025, 8.0), (f64::INFINITY, 10.0)];
        // p50: rank 5 lies in (0.001, 0.0025], which holds ranks 3..8: 0.001 + 0.0015 * 3/6.
        assert!(close(quantile(0.5, &b).unwrap(), 0.00175));
        // p10: rank 1 in the first bucket, which starts at 0: 0.001 * 1/2.
        assert!(close(quantile(0.1, &b).unwrap(), 0.0005));
        // p80: rank 8 is the last of (0.001, 0.0025].
        assert!(close(quantile(0.8, &b).unwrap(), 0.0025));
        // p99: rank 9.9 is in +Inf: the highest finite bound.
        assert_eq!(quantile(0.99, &b), Some(0.0025));
        assert_eq!(
            quantile(0.5, &[(0.001, 0.0), (f64::INFINITY, 0.0)]),
            None,
            "no observations"
        );
        assert_eq!(
            quantile(0.5, &[(0.001, 2.0), (0.01, 4.0)]),
            None,
            "no +Inf bucket"
        );
        assert_eq!(quantile(0.5, &[]), None);
    }

    #[test]
    fn bucket_increases_are_the_interval_and_a_reset_starts_over() {
        let prev = [(0.001, 1.0), (0.0025, 4.0), (f64::INFINITY, 5.0)];
        let cur = [(0.001, 3.0), (0.0025, 12.0), (f64::INFINITY, 15.0)];
        let d = bucket_increase(&prev, &cur);
        assert_eq!(d, vec![(0.001, 2.0), (0.0025, 8.0), (f64::INFINITY, 10.0)]);
        assert!(close(quantile(0.5, &d).unwrap(), 0.00175));
        // The broker restarted: fewer observations than before, all of them new.
        let restarted = [(0.001, 1.0), (0.0025, 1.0), (f64::INFINITY, 2.0)];
        assert_eq!(bucket_increase(&cur, &restarted), restarted.to_vec());
        // Nothing before: everything counts.
        assert_eq!(bucket_increase(&[], &cur), cur.to_vec());
    }

    #[test]
    fn counter_increase_handles_new_and_reset_counters() {
        assert_eq!(increase(Some(100.0), 250.0), 150.0);
        assert_eq!(increase(Some(100.0), 30.0), 30.0, "reset: all of it is new");
        assert_eq!(increase(None, 40.0), 40.0);
    }

    /// A scrape of one broker as its endpoint renders it, with the given counters.
    fn exposition(bytes_in: u64, messages: u64, produces: u64, buckets: [u64; 3]) -> String {
        let [b1, b2, inf] = buckets;
        format!(
            "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter\n\
             kafka_server_brokertopicmetrics_bytesin_total{{topic=\"orders\"}} {bytes_in}\n\
             kafka_server_brokertopicmetrics_bytesin_total{{topic=\"idle\"}} 7\n\
             kafka_server_brokertopicmetrics_messagesin_total{{topic=\"orders\"}} {messages}\n\
             kafka_network_requestmetrics_requests_total{{request=\"Produce\"}} {produces}\n\
             kafka_network_requestmetrics_requests_total{{request=\"Metadata\"}} 1\n\
             kafka_network_requestmetrics_totaltime_seconds_bucket{{request=\"Produce\",le=\"0.001\"}} {b1}\n\
             kafka_network_requestmetrics_totaltime_seconds_bucket{{request=\"Produce\",le=\"0.0025\"}} {b2}\n\
             kafka_network_requestmetrics_totaltime_seconds_bucket{{request=\"Produce\",le=\"+Inf\"}} {inf}\n\
             tributary_produce_stage_seconds_bucket{{stage=\"append\",le=\"0.00001\"}} {b1}\n\
             tributary_produce_stage_seconds_bucket{{stage=\"append\",le=\"+Inf\"}} {inf}\n\
             tributary_produce_stage_seconds_bucket{{stage=\"receive\",le=\"0.00001\"}} 0\n\
             tributary_produce_stage_seconds_bucket{{stage=\"receive\",le=\"+Inf\"}} 0\n\
             tributary_sync_round_seconds_bucket{{le=\"0.001\"}} {b1}\n\
             tributary_sync_round_seconds_bucket{{le=\"+Inf\"}} {inf}\n\
             tributary_quota_throttled_responses_total{{type=\"Produce\"}} {produces}\n\
             tributary_quota_throttled_responses_total{{type=\"Fetch\"}} 0\n\
             tributary_group_commit_files_synced_total{{shard=\"0\"}} {produces}\n\
             tributary_group_commit_written_through_total{{shard=\"1\"}} {messages}\n\
             tributary_connections_handed_over_total{{shard=\"0\"}} {inf}\n\
             kafka_server_socket_server_metrics_connection_count 3\n\
             tributary_request_memory_used_bytes{{shard=\"0\"}} 1024\n\
             tributary_request_memory_used_bytes{{shard=\"1\"}} 1024\n\
             tributary_request_memory_capacity_bytes{{shard=\"0\"}} 1048576\n\
             tributary_request_memory_capacity_bytes{{shard=\"1\"}} 1048576\n"
        )
    }

    #[test]
    fn an_interval_gives_rates_per_second_and_adds_up_over_brokers() {
        let prev = parse(&exposition(1_000, 10, 4, [1, 4, 5])).unwrap();
        let cur = parse(&exposition(5_000, 50, 24, [3, 12, 15])).unwrap();
        let one = Interval::between(&prev, &cur, 2.0);
        assert_eq!(
            one.topics["orders"],
            TopicRates {
                bytes_in: 2_000.0,
                messages_in: 20.0,
                bytes_out: 0.0
            }
        );
        assert_eq!(one.topics["idle"].bytes_in, 0.0);
        assert_eq!(one.requests["Produce"], 10.0);
        assert_eq!(one.requests["Metadata"], 0.0);
        assert_eq!(one.throttled, 10.0);
        assert_eq!(one.handed_over, 5.0);
        let (p50, p99, n) = one.p50_p99(REQUEST_LATENCY, "Produce");
        assert!(close(p50.unwrap(), 0.00175), "{p50:?}");
        assert_eq!((p99, n), (Some(0.0025), 10.0));
        assert_eq!(one.p50_p99("tributary_sync_round_seconds", "").2, 10.0);

        // A second broker, the same traffic over 4 s: rates add, observations pool.
        let mut both = Interval::between(&prev, &cur, 2.0);
        both.add(&Interval::between(&prev, &cur, 4.0));
        assert_eq!(both.topics["orders"].bytes_in, 3_000.0);
        assert_eq!(both.requests["Produce"], 15.0);
        let (p50, _, n) = both.p50_p99(REQUEST_LATENCY, "Produce");
        assert!(close(p50.unwrap(), 0.00175));
        assert_eq!(n, 20.0);
        assert_eq!(
            both.latency[&(REQUEST_LATENCY.to_string(), "Produce".to_string())],
            vec![(0.001, 4.0), (0.0025, 16.0), (f64::INFINITY, 20.0)]
        );
    }

    fn scrape_of(text: &str, at: Instant) -> Scrape {
        Scrape {
            at,
            samples: parse(text).unwrap(),
        }
    }

    #[test]
    fn the_view_shows_topics_requests_stages_lag_and_unreachable_brokers() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let mut lag = String::new();
        for (g, p, l) in [
            ("g1", 0, 5),
            ("g1", 1, 50),
            ("g2", 0, 500),
            ("g2", 1, 1),
            ("g3", 0, 40),
            ("g3", 1, 30),
        ] {
            let _ = writeln!(
                lag,
                "kafka_consumergroup_lag{{consumergroup=\"{g}\",topic=\"orders\",partition=\"{p}\"}} {l}"
            );
        }
        let addrs = ["a:1".to_string(), "b:2".to_string(), "c:3".to_string()];
        let prev = [
            Some(scrape_of(&exposition(1_000, 10, 4, [1, 4, 5]), t0)),
            None,
            Some(scrape_of("", t0)),
        ];
        let cur = [
            Ok(scrape_of(
                &(exposition(5_000, 50, 24, [3, 12, 15]) + &lag),
                t1,
            )),
            Ok(scrape_of(&exposition(9, 9, 9, [9, 9, 9]), t1)),
            Err(anyhow!("cannot connect to the metrics endpoint c:3")),
        ];
        let view = View::new(&addrs, &prev, &cur);
        let mut out = String::new();
        view.render(
            &mut out,
            UNIX_EPOCH + Duration::from_secs(1_704_067_200),
            Duration::from_millis(1500),
            1,
            false,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "--- 2024-01-01 00:00:00 UTC · 3 brokers · 1.5s interval ---"
        );
        let row = |first: &str| -> Vec<&str> {
            lines
                .iter()
                .find(|l| l.split_whitespace().next() == Some(first))
                .unwrap_or_else(|| panic!("no {first} row in\n{out}"))
                .split_whitespace()
                .collect()
        };
        // The broker scraped twice has rates; the new one only gauges; the third is down.
        assert_eq!(
            row("a:1"),
            [
                "a:1",
                "up",
                "3",
                "10.0",
                "2.0KiB/2.0MiB",
                "10.0",
                "10.0",
                "20.0",
                "5.0"
            ]
        );
        assert_eq!(
            row("b:2"),
            ["b:2", "new", "3", "-", "2.0KiB/2.0MiB", "-", "-", "-", "-"]
        );
        assert_eq!(
            row("c:3"),
            ["c:3", "down", "-", "-", "-", "-", "-", "-", "-"]
        );
        assert!(
            out.contains("  c:3: cannot connect to the metrics endpoint c:3\n"),
            "{out}"
        );
        // Only the busiest topic fits --topics 1.
        assert_eq!(row("orders"), ["orders", "2.0KiB", "20.0", "0B"]);
        assert!(!out.contains("\nidle"), "{out}");
        assert!(out.contains("… 1 more topics (--topics)"), "{out}");
        assert_eq!(row("Produce"), ["Produce", "10.0", "1.75ms", "2.50ms"]);
        assert_eq!(row("Fetch"), ["Fetch", "0.0", "-", "-"]);
        assert!(
            !out.contains("Metadata"),
            "an API without requests in the interval: {out}"
        );
        // Stages in request order; receive had no observations.
        let receive = out.find("produce receive").unwrap();
        let append = out.find("produce append").unwrap();
        assert!(receive < append, "{out}");
        assert_eq!(row("produce")[1..], ["receive", "0", "-", "-"]);
        assert!(out.contains("sync round"), "{out}");
        // Lag: the five largest, largest first.
        let lag_rows: Vec<&str> = lines
            .iter()
            .skip_while(|l| !l.starts_with("CONSUMER GROUP"))
            .skip(1)
            .copied()
            .collect();
        let lags: Vec<&str> = lag_rows
            .iter()
            .map(|l| l.split_whitespace().last().unwrap())
            .collect();
        assert_eq!(lags, ["500", "50", "40", "30", "5"], "{out}");
        assert!(
            lag_rows[0].starts_with("g2") && lag_rows[0].contains(" 0 "),
            "{out}"
        );
    }

    #[test]
    fn response_bodies_by_length_chunks_or_close_and_refusals() {
        let ok =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\na 1\nextra";
        assert_eq!(response_body(ok), Ok("a 1\n".to_string()));
        assert!(response_complete(ok));
        assert!(!response_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\na 1\n"
        ));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\na 1\n\r\n6\r\nb 22\n\n\r\n0\r\n\r\n";
        assert_eq!(response_body(chunked), Ok("a 1\nb 22\n\n".to_string()));
        let until_close = b"HTTP/1.0 200 OK\r\n\r\nx 2\n";
        assert_eq!(response_body(until_close), Ok("x 2\n".to_string()));
        let refusals: [(&[u8], &str); 6] = [
            (b"", "closed the connection without answering"),
            (b"HTTP/1.1 200 OK\r\nContent-Len", "ended before its header"),
            (
                b"HTTP/1.1 404 Not Found\r\n\r\n",
                "\"HTTP/1.1 404 Not Found\" to GET /metrics",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
                "after 2 of its 10 body bytes",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "not hexadecimal",
            ),
        ];
        for (raw, why) in refusals {
            let e = response_body(raw).unwrap_err();
            assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn an_endpoint_that_is_not_listening_is_named_with_what_to_check() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let e = format!(
            "{:#}",
            scrape(&addr, Duration::from_secs(5), SCRAPE_MAX_BYTES)
                .err()
                .unwrap()
        );
        assert!(e.contains(&addr) && e.contains("metrics.listen"), "{e}");
    }

    #[test]
    fn a_scrape_is_bounded_in_size_and_time() {
        use std::net::TcpListener;
        // A server that sends an endless header: the size cap ends the scrape.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let junk = vec![b'x'; 4096];
            while s.write_all(&junk).is_ok() {}
        });
        let e = format!(
            "{:#}",
            scrape(&addr, Duration::from_secs(10), 64 * 1024)
                .err()
                .unwrap()
        );
        assert!(
            e.contains("more than 65536 bytes") && e.contains("--scrape-max-bytes"),
            "{e}"
        );
        server.join().unwrap();

        // A server that accepts and never answers: the timeout ends it.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let started = Instant::now();
        let e = format!(
            "{:#}",
            scrape(&addr, Duration::from_millis(300), SCRAPE_MAX_BYTES)
                .err()
                .unwrap()
        );
        assert!(e.contains("did not answer within 300 ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
    }

    #[test]
    fn formats_and_dates() {
        assert_eq!(bytes(0.0), "0B");
        assert_eq!(bytes(1536.0), "1.5KiB");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0GiB");
        assert_eq!(count(12.34), "12.3");
        assert_eq!(count(3_400.0), "3.4k");
        assert_eq!(count(1_250_000.0), "1.2M");
        assert_eq!(seconds(Some(0.0000175)), "18µs");
        assert_eq!(seconds(Some(0.00175)), "1.75ms");
        assert_eq!(seconds(Some(2.5)), "2.50s");
        assert_eq!(seconds(None), "-");
        assert_eq!(clip("short"), "short");
        let long = "t".repeat(NAME_WIDTH_MAX + 5);
        assert_eq!(clip(&long).chars().count(), NAME_WIDTH_MAX);
        assert!(clip(&long).ends_with('~'));
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723)),
            "2000-02-29 01:02:03 UTC"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_704_067_199)),
            "2023-12-31 23:59:59 UTC"
        );
    }
}
