//! Test support: an in-process broker on 127.0.0.1:0, and a raw protocol connection for the
//! bad-input tests that a well-behaved client library cannot send.

#![allow(dead_code)]

pub mod cluster;
pub mod netns;
pub mod s3;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tributary_broker::config::{BrokerConfig, ConfigInput};
use tributary_broker::server::{self, BrokerHandle};

/// The broker binary in its own process, for what an in-process broker cannot show (its
/// memory, a kill -9), killed when dropped: a failing test must not leave it running, holding
/// its deleted data directory's space and CPU.
pub struct BrokerProcess(pub Child);

impl BrokerProcess {
    /// Starts the binary on `data_dir`, listening on `addr`, with `--set` for each `key=value`
    /// of `sets`, and waits up to 60 s for it to listen. Its log (the broker logs to standard
    /// output) and anything on standard error are appended to `log`.
    pub fn spawn<I>(data_dir: &Path, log: &Path, addr: SocketAddr, sets: I) -> Self
    where
        I: IntoIterator,
        I::Item: std::fmt::Display,
    {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tributary"));
        cmd.arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            // Brokers of parallel tests must not share the default metrics port.
            .arg("--set")
            .arg("metrics.listen=127.0.0.1:0");
        for set in sets {
            cmd.arg("--set").arg(set.to_string());
        }
        let child = cmd
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("broker binary starts");
        let broker = Self(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "broker did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(10));
        }
        broker
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// kill -9, then reaped.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.0.kill()?;
        self.0.wait().map(|_| ())
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Polls `done` every 100 ms for up to 30 s; fails the test naming `what` if it never holds.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sum over shards (and any other labels) of metric `name` on the broker's `/metrics`;
/// `name` may go on with its first labels (`kafka_log_log_logendoffset{topic="t"`).
pub fn metric(metrics: SocketAddr, name: &str) -> f64 {
    let mut s = TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ',', '}']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every value of `topic` (partitions 0..`partitions`) from the start at `isolation`
/// (`read_committed` or `read_uncommitted`), in arrival order: read until at least `at_least`
/// arrived and nothing new came for two seconds, or thirty seconds passed.
pub fn read_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: &str,
    at_least: usize,
) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = std::time::Instant::now();
    while std::time::Instant::now() < deadline
        && (out.len() < at_least || last.elapsed() < Duration::from_secs(2))
    {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            last = std::time::Instant::now();
        }
    }
    out
}

/// The sum of a consumer's committed offsets over its assignment (0 for a partition without one).
pub fn committed_total(consumer: &rdkafka::consumer::BaseConsumer) -> i64 {
    use rdkafka::consumer::Consumer;
    let committed = consumer
        .committed(Duration::from_secs(30))
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            _ => 0,
        })
        .sum()
}

/// Creates topics with librdkafka's admin client and checks that each was created.
pub fn rd_create_topics(addr: SocketAddr, topics: &[rdkafka::admin::NewTopic<'_>]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .create()
        .expect("admin client");
    let res = futures::executor::block_on(admin.create_topics(topics, &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
}

/// A broker's start-up input: data in `dir`, the client listener on an ephemeral port, `cores`
/// shards (at most the CPUs allowed), `props` over the defaults.
pub fn config_input(dir: &Path, cores: usize, props: &[(&str, &str)]) -> ConfigInput {
    ConfigInput {
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".into(),
        advertised_listener: None,
        cores: Some(cores.min(tributary_broker::config::allowed_cpus().len())),
        cpus: None,
        numa_node: None,
        properties: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

pub fn start_broker(dir: &Path, cores: usize, props: &[(&str, &str)]) -> BrokerHandle {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    // Brokers of parallel tests must not share the default metrics port; a test's own
    // `metrics.listen` comes later and wins.
    let mut all = vec![("metrics.listen", "127.0.0.1:0")];
    all.extend_from_slice(props);
    let config = BrokerConfig::build(config_input(dir, cores, &all)).expect("config");
    server::start(config).expect("broker starts")
}

pub struct RawConn {
    pub stream: TcpStream,
    correlation: i32,
}

impl RawConn {
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Self {
            stream,
            correlation: 0,
        }
    }

    /// A connection over a stream the test set up itself (bound to a source address, say).
    pub fn connect_stream(stream: TcpStream) -> Self {
        Self {
            stream,
            correlation: 0,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads one response frame; `None` when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// True when the broker has closed this connection.
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }

    pub fn encode_request<R: Encodable>(&mut self, key: ApiKey, version: i16, req: &R) -> BytesMut {
        self.correlation += 1;
        encode_request(self.correlation, key, version, req)
    }

    pub fn request<R: Encodable, S: Decodable>(&mut self, key: ApiKey, version: i16, req: &R) -> S {
        let frame = self.encode_request(key, version, req);
        self.send_raw(&frame);
        let mut resp = self.read_frame().unwrap_or_else(|| {
            panic!(
                "no {key:?} response from {:?}: the connection closed, or nothing came within the read timeout",
                self.stream.peer_addr()
            )
        });
        let header =
            ResponseHeader::decode(&mut resp, key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        let out = S::decode(&mut resp, version).expect("response decodes");
        assert_eq!(resp.remaining(), 0, "trailing bytes in response");
        out
    }
}

/// A produce request of `records` (a record batch, or whatever bytes a bad-input test sends)
/// to `partition` of `topic`, with `acks` and a 5 s timeout.
pub fn produce_request(
    topic: &str,
    partition: i32,
    acks: i16,
    records: Bytes,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                topic.to_string(),
            )))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// One request frame: length prefix, request header (client id `raw-test`) and body.
pub fn encode_request<R: Encodable>(
    correlation: i32,
    key: ApiKey,
    version: i16,
    req: &R,
) -> BytesMut {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("raw-test")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, key.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    frame
}

/// Produces with the sync rdkafka producer and waits for every delivery.
pub fn rd_produce(
    addr: SocketAddr,
    topic: &str,
    extra: &[(&str, &str)],
    messages: &[(Option<String>, String)],
) {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", addr.to_string())
        .set("acks", "all");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let producer: BaseProducer = cfg.create().expect("producer");
    for (key, value) in messages {
        let mut rec = BaseRecord::<String, String>::to(topic).payload(value);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        let mut rec = Some(rec);
        while let Some(r) = rec.take() {
            if let Err((e, back)) = producer.send(r) {
                assert!(
                    matches!(
                        e.rdkafka_error_code(),
                        Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                    ),
                    "send failed: {e}"
                );
                producer.poll(Duration::from_millis(10));
                rec = Some(back);
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("all messages delivered");
}

/// Reads `count` messages of `partitions` partitions from the beginning with a sync consumer.
pub fn rd_consume(
    addr: SocketAddr,
    topic: &str,
    partitions: i32,
    count: usize,
) -> Vec<(i32, i64, Option<String>, String)> {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr.to_string())
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while out.len() < count && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("fetch ok");
            out.push((
                m.partition(),
                m.offset(),
                m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            ));
        }
    }
    out
}

/// IncrementalAlterConfigs SET of `configs` on broker resource `name`: the error code and message.
pub fn incremental_alter(addr: SocketAddr, name: &str, configs: &[(&str, &str)]) -> (i16, String) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
    };
    use kafka_protocol::messages::incremental_alter_configs_response::IncrementalAlterConfigsResponse;
    use kafka_protocol::protocol::StrBytes;
    let mut raw = RawConn::connect(addr);
    let resp: IncrementalAlterConfigsResponse = raw.request(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_string(name.into()))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            AlterableConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_config_operation(0)
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                ),
        ]),
    );
    let r = &resp.responses[0];
    let msg = r.error_message.as_deref().map(ToString::to_string);
    (r.error_code, msg.unwrap_or_default())
}

/// AlterConfigs v1 on one resource, raw: its error code and message.
pub fn raw_alter(
    addr: SocketAddr,
    kind: i8,
    name: &str,
    configs: &[(&str, &str)],
) -> (i16, String) {
    use kafka_protocol::messages::alter_configs_request::{
        AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResponse;
    use kafka_protocol::protocol::StrBytes;
    let mut raw = RawConn::connect(addr);
    let resp: AlterConfigsResponse = raw.request(
        ApiKey::AlterConfigs,
        1,
        &AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.into()))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]),
    );
    let r = &resp.responses[0];
    let msg = r
        .error_message
        .as_deref()
        .map(ToString::to_string)
        .unwrap_or_default();
    (r.error_code, msg)
}
