//! A follower's fetch loop: one task per shard and leader broker, fetching every partition
//! this shard follows from that leader over one connection, with Kafka's Fetch v12 as a
//! follower sends it (`replica_id`, `current_leader_epoch`, `last_fetched_epoch`). What comes
//! back is appended with its offsets and epochs, made durable, and only then is the next fetch
//! sent — its offset is how the leader learns what this replica holds, so "in the ISR" means
//! "has it on disk". Where the leader says the logs diverge, the replica truncates first; its
//! log start follows the leader's. A fetch the leader holds (nothing new) is given up when the
//! shard starts following another partition from that leader, so that one is fetched at once.
//!
//! The task ends when the shard follows nothing from that leader any more.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use event_listener::EventListener;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info, warn};
use tributary_metadata::types::{Offset, TopicPartition};
use tributary_protocol::ErrorCode;

use super::LeaderEpoch;
use crate::config::BrokerConfig;
use crate::metrics::Stage;
use crate::shard::Shard;

/// Fetch version followers send: the first with `last_fetched_epoch` and divergence.
const REPLICA_FETCH_VERSION: i16 = 12;
/// Bytes one fetch response may carry (Kafka's `replica.fetch.response.max.bytes`).
const REPLICA_FETCH_RESPONSE_BYTES_MAX: i32 = 10 << 20;
/// A response frame larger than this closes the connection: the leader was asked for at most
/// the above, plus framing.
const RESPONSE_FRAME_BYTES_MAX: usize = (REPLICA_FETCH_RESPONSE_BYTES_MAX as usize) * 2 + (1 << 20);
/// Pause after an error before fetching again.
const BACKOFF: Duration = Duration::from_millis(100);
/// The first pause after a fetch the leader refused without anything to apply; it doubles
/// while refusals go on, up to [`BACKOFF`].
const REFUSED_BACKOFF_MIN: Duration = Duration::from_millis(5);

/// What a follower's fetches ask for and how long it waits for each, from the broker config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSettings {
    /// Bytes one partition's share of a fetch may carry (`replica.fetch.max.bytes`).
    pub partition_max_bytes: i32,
    /// How long a leader may hold a fetch with nothing new (`replica.fetch.wait.max.ms`).
    pub max_wait_ms: i32,
    /// A fetch answered later than this is given up, and the connection dropped and reopened
    /// (`replica.socket.timeout.ms`).
    pub response_timeout: Duration,
}

impl FetchSettings {
    pub fn from_config(config: &BrokerConfig) -> Self {
        Self {
            partition_max_bytes: config.replica_fetch_max_bytes,
            max_wait_ms: config.replica_fetch_wait_max_ms,
            response_timeout: Duration::from_millis(config.replica_socket_timeout_ms),
        }
    }
}

/// One followed partition in a fetch: where this replica's log ends and its last epoch.
struct Item {
    topic: String,
    partition: i32,
    leader_epoch: i32,
    fetch_offset: i64,
    /// The epoch of the last batch this replica holds; -1 when it holds none.
    last_fetched_epoch: i32,
}

pub async fn run(shard: Rc<Shard>, leader: i32) {
    info!(leader, shard = shard.id.0, "replica fetcher started");
    let settings = FetchSettings::from_config(&shard.config);
    let mut link = Link {
        leader,
        conn: None,
        correlation: 0,
        warned: String::new(),
    };
    let mut refused_pause = REFUSED_BACKOFF_MIN;
    loop {
        if shard.draining.get() {
            break;
        }
        if !follows_from(&shard, leader) {
            break;
        }
        if !link.connect(&shard).await {
            glommio::timer::sleep(BACKOFF).await;
            continue;
        }
        // Taken after connecting (which may take a while), and listened for from here on: a
        // partition this shard starts following from this leader later interrupts the fetch.
        let items = followed(&shard, leader);
        let changed = shard.replicas.follows_changed.listen();
        let sent = Instant::now();
        match link.fetch(&shard, &items, &settings, changed).await {
            Round::Answered(resp) => {
                let answered = Instant::now();
                let metrics = &shard.metrics;
                metrics.observe_stage(Stage::ReplicaAnswer, answered - sent);
                let applied = apply(&shard, leader, &items, *resp).await;
                if applied.is_ok() {
                    metrics.observe_stage(Stage::ReplicaApply, answered.elapsed());
                }
                match applied {
                    Ok(Applied::Accepted) => refused_pause = REFUSED_BACKOFF_MIN,
                    Ok(Applied::Refused) => {
                        // The two nodes' images disagree for a moment (a new partition's leader
                        // has not taken the role yet): ask again soon, then less often.
                        glommio::timer::sleep(refused_pause).await;
                        refused_pause = (refused_pause * 2).min(BACKOFF);
                    }
                    Err(e) => {
                        warn!(leader, error = %e, "applying a replica fetch failed");
                        glommio::timer::sleep(BACKOFF).await;
                    }
                }
            }
            Round::NewFollow => {
                debug!(leader, "following a new partition: fetching again at once");
            }
            Round::Failed(e) => {
                debug!(leader, error = %e, "replica fetch failed; reconnecting");
                glommio::timer::sleep(BACKOFF).await;
            }
        }
    }
    shard.replicas.fetchers.borrow_mut().remove(&leader);
    info!(leader, shard = shard.id.0, "replica fetcher stopped");
    // A partition may have started following this leader while the task wound down.
    if follows_from(&shard, leader) && !shard.draining.get() {
        shard.replicas.fetchers.borrow_mut().insert(leader);
        glommio::spawn_local(run(shard.clone(), leader)).detach();
    }
}

/// How one fetch ended.
enum Round {
    /// The leader answered.
    Answered(Box<FetchResponse>),
    /// This shard started following another partition from this leader while the fetch was
    /// out; it was given up, with its connection.
    NewFollow,
    /// No answer in time, or the connection failed; it is dropped.
    Failed(String),
}

/// What applying an answer did.
enum Applied {
    /// The leader answered every partition, or something was appended or truncated.
    Accepted,
    /// Nothing done, and the leader refused some partition or returned none.
    Refused,
}

/// A fetcher's connection to its leader.
struct Link {
    leader: i32,
    conn: Option<crate::inter_broker::BrokerStream>,
    correlation: i32,
    /// The last connection error warned about: a leader that is down is the usual case
    /// (debug), but a TLS or login failure is the operator's to fix, said once until it
    /// changes.
    warned: String,
}

impl Link {
    /// Connects unless connected, and again when a SASL session nears its end (before the
    /// leader closes it); whether there is a connection now.
    async fn connect(&mut self, shard: &Shard) -> bool {
        let leader = self.leader;
        if self.conn.as_ref().is_some_and(|c| c.needs_renewal()) {
            self.conn = None;
        }
        if self.conn.is_some() {
            return true;
        }
        let Some(addr) = leader_addr(shard, leader) else {
            return false;
        };
        let client = format!("tributary-replica-{}", shard.config.node_id);
        match crate::inter_broker::connect(&shard.inter_broker(), &addr, &client).await {
            Ok(s) => {
                let timeout = shard.config.replica_link_timeout_ms;
                if timeout > 0 {
                    if let Err(error) = s.set_link_timeout(Duration::from_millis(timeout)) {
                        warn!(leader, %addr, %error, "cannot set replica.link.timeout.ms on the connection to the leader: a network cut will show only after replica.socket.timeout.ms");
                    }
                }
                self.conn = Some(s);
                self.warned.clear();
                true
            }
            Err(crate::inter_broker::ConnectError::Security(e)) => {
                if e != self.warned {
                    warn!(leader, %addr, error = %e, "cannot follow the leader: the secured connection failed");
                    self.warned = e;
                }
                false
            }
            Err(e) => {
                debug!(leader, %addr, error = %e, "cannot reach the leader");
                false
            }
        }
    }

    /// One fetch of `items`. The leader may hold it for `replica.fetch.wait.max.ms` when it has
    /// nothing new for them, so if this shard starts following another partition from this
    /// leader meanwhile (`changed`, listened to since `items` were taken) the fetch is given up
    /// and the new partition fetched at once — its first writes would otherwise wait out that
    /// hold before any follower had them. The connection goes with it: the leader's answer to
    /// the fetch given up would arrive as the answer to the next one.
    async fn fetch(
        &mut self,
        shard: &Shard,
        items: &[Item],
        settings: &FetchSettings,
        changed: EventListener,
    ) -> Round {
        let leader = self.leader;
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        let Some(stream) = self.conn.as_mut() else {
            return Round::Failed("not connected".into());
        };
        let request = encode_fetch(shard.config.node_id, correlation, items, settings);
        let answered = async {
            let response = glommio::timer::timeout(settings.response_timeout, async {
                crate::inter_broker::exchange::<FetchResponse>(
                    stream,
                    &request,
                    ApiKey::Fetch,
                    REPLICA_FETCH_VERSION,
                    correlation,
                    RESPONSE_FRAME_BYTES_MAX,
                )
                .await
                .map_err(|e| glommio::GlommioError::IoError(std::io::Error::other(e)))
            })
            .await;
            match response {
                Ok(resp) => Round::Answered(Box::new(resp)),
                Err(e) => Round::Failed(e.to_string()),
            }
        };
        let interrupted = async {
            new_follow(shard, leader, items, changed).await;
            Round::NewFollow
        };
        let round = futures_lite::future::or(answered, interrupted).await;
        if !matches!(round, Round::Answered(_)) {
            self.conn = None;
        }
        round
    }
}

/// Resolves once this shard follows a partition from `leader` that `items` does not fetch at
/// its current epoch: a new partition, or one whose leader epoch moved on.
async fn new_follow(shard: &Shard, leader: i32, items: &[Item], mut changed: EventListener) {
    loop {
        changed.await;
        changed = shard.replicas.follows_changed.listen();
        if follows_beyond(shard, leader, items) {
            return;
        }
    }
}

/// Whether this shard follows a partition from `leader` (one it holds: as [`followed`]) that
/// `items`, sorted as `followed` sorts them, lack at its epoch.
fn follows_beyond(shard: &Shard, leader: i32, items: &[Item]) -> bool {
    let following = shard.replicas.following.borrow();
    following
        .iter()
        .filter(|(_, f)| f.leader == leader)
        .any(|(key, f)| {
            let (topic, p) = (&key.topic, key.partition);
            let fetched = items
                .binary_search_by(|i| (i.topic.as_str(), i.partition).cmp(&(topic.as_str(), p)))
                .is_ok_and(|k| items[k].leader_epoch == f.leader_epoch.0);
            !fetched && shard.partition(topic, p).is_some()
        })
}

/// Whether this shard follows a partition it holds from `leader`.
fn follows_from(shard: &Shard, leader: i32) -> bool {
    let following = shard.replicas.following.borrow();
    following
        .iter()
        .any(|(key, f)| f.leader == leader && shard.partition(&key.topic, key.partition).is_some())
}

/// What this shard fetches from `leader`, sorted by topic and partition.
fn followed(shard: &Shard, leader: i32) -> Vec<Item> {
    let following = shard.replicas.following.borrow();
    let mut items: Vec<Item> = following
        .iter()
        .filter(|(_, f)| f.leader == leader)
        .filter_map(|(key, f)| {
            let part = shard.partition(&key.topic, key.partition)?;
            Some(Item {
                topic: key.topic.clone(),
                partition: key.partition,
                leader_epoch: f.leader_epoch.0,
                fetch_offset: part.log_end_offset(),
                last_fetched_epoch: part.latest_epoch().unwrap_or(-1),
            })
        })
        .collect();
    items.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    items
}

fn leader_addr(shard: &Shard, leader: i32) -> Option<crate::inter_broker::BrokerAddr> {
    crate::inter_broker::broker_addr(&shard.catalog(), leader)
}

fn encode_fetch(node: i32, correlation: i32, items: &[Item], settings: &FetchSettings) -> Bytes {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for it in items {
        let part = FetchPartition::default()
            .with_partition(it.partition)
            .with_current_leader_epoch(it.leader_epoch)
            .with_fetch_offset(it.fetch_offset)
            .with_last_fetched_epoch(it.last_fetched_epoch)
            .with_partition_max_bytes(settings.partition_max_bytes);
        match topics.last_mut().filter(|t| t.topic.0.as_str() == it.topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(it.topic.clone())))
                    .with_partitions(vec![part]),
            ),
        }
    }
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(node))
        .with_max_wait_ms(settings.max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(REPLICA_FETCH_RESPONSE_BYTES_MAX)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    crate::inter_broker::encode(
        ApiKey::Fetch,
        REPLICA_FETCH_VERSION,
        correlation,
        &format!("tributary-replica-{node}"),
        &req,
    )
}

/// Appends, truncates and moves the high watermark and the log start as the leader's answer
/// says. Its partitions are applied concurrently: each one's append and sync is its own, so a
/// fetch that brings several costs the slowest of their syncs, not their sum, before the next
/// fetch tells the leader what this replica holds.
async fn apply(
    shard: &Rc<Shard>,
    leader: i32,
    items: &[Item],
    resp: FetchResponse,
) -> Result<Applied, String> {
    if resp.error_code != 0 {
        return Err(format!("fetch error {}", resp.error_code));
    }
    let applies = resp.responses.iter().flat_map(|topic| {
        let name = topic.topic.0.as_str();
        topic
            .partitions
            .iter()
            .map(move |p| apply_partition(shard, leader, items, name, p))
    });
    let mut progressed = false;
    let mut errors = false;
    for taken in futures::future::join_all(applies).await {
        match taken? {
            Taken::Progressed => progressed = true,
            Taken::Refused => errors = true,
            Taken::Nothing => {}
        }
    }
    // Refusals must not turn into a busy loop.
    if !progressed && (errors || resp.responses.is_empty()) {
        return Ok(Applied::Refused);
    }
    Ok(Applied::Accepted)
}

/// What the leader's answer for one partition did here.
enum Taken {
    /// Something appended or truncated.
    Progressed,
    /// The leader refused the partition.
    Refused,
    /// Nothing: no new records, or the partition is no longer followed from this leader at
    /// this epoch.
    Nothing,
}

/// Applies the leader's answer for one partition of this fetch.
async fn apply_partition(
    shard: &Rc<Shard>,
    leader: i32,
    items: &[Item],
    name: &str,
    p: &PartitionData,
) -> Result<Taken, String> {
    let Some(item) = items
        .iter()
        .find(|i| i.topic == name && i.partition == p.partition_index)
    else {
        return Ok(Taken::Nothing);
    };
    // Still following this leader at this epoch? (The image may have moved on.)
    let current = shard
        .replicas
        .following
        .borrow()
        .get(&TopicPartition::new(item.topic.clone(), item.partition))
        .copied();
    if current.map(|f| (f.leader, f.leader_epoch)) != Some((leader, LeaderEpoch(item.leader_epoch)))
    {
        return Ok(Taken::Nothing);
    }
    let Some(part) = shard.partition(name, p.partition_index) else {
        return Ok(Taken::Nothing);
    };
    let code = ErrorCode(p.error_code);
    if code == ErrorCode::OFFSET_OUT_OF_RANGE {
        reset_out_of_range(&part, item, p).await?;
        return Ok(Taken::Progressed);
    }
    if code.is_error() {
        debug!(
            topic = name,
            partition = p.partition_index,
            error = code.0,
            "replica fetch refused"
        );
        return Ok(Taken::Refused);
    }
    if p.diverging_epoch.epoch >= 0 {
        truncate_divergent(
            &part,
            name,
            p.partition_index,
            p.diverging_epoch.epoch,
            p.diverging_epoch.end_offset,
        )
        .await?;
        return Ok(Taken::Progressed);
    }
    match take_records(&part, p).await? {
        true => Ok(Taken::Progressed),
        false => Ok(Taken::Nothing),
    }
}

/// A fetch offset out of the leader's range: below its log start, this replica starts over
/// there (Kafka's `truncateFullyAndStartAt`); above its log end, it truncates to the leader's
/// high watermark.
async fn reset_out_of_range(
    part: &Rc<tributary_storage::Partition>,
    item: &Item,
    p: &PartitionData,
) -> Result<(), String> {
    let (topic, partition) = (item.topic.as_str(), item.partition);
    if item.fetch_offset < p.log_start_offset {
        warn!(
            topic,
            partition,
            from = item.fetch_offset,
            to = p.log_start_offset,
            "replica behind the leader's log start: starting over there"
        );
        part.truncate_fully_and_start_at(p.log_start_offset)
            .await
            .map_err(|e| e.to_string())?;
    } else {
        let to = p.high_watermark.max(part.log_start_offset());
        warn!(
            topic,
            partition,
            from = item.fetch_offset,
            to,
            "replica ahead of the leader: truncating to its high watermark"
        );
        part.truncate_to(to).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Appends what the leader returned, durably, then takes its high watermark (up to what is
/// durable here) and its log start; whether anything was appended.
async fn take_records(
    part: &Rc<tributary_storage::Partition>,
    p: &PartitionData,
) -> Result<bool, String> {
    let mut appended = false;
    if let Some(records) = p.records.as_ref().filter(|r| !r.is_empty()) {
        let end = part
            .append_as_follower(records)
            .await
            .map_err(|e| e.to_string())?;
        part.sync_to(end).await.map_err(|e| e.to_string())?;
        appended = true;
    }
    let hw = p.high_watermark.min(part.durable_offset());
    part.set_high_watermark(hw);
    // What the leader deleted (DeleteRecords, retention) goes here too, or this replica would
    // serve it again once it leads (KIP-107).
    part.follow_log_start(p.log_start_offset)
        .await
        .map_err(|e| e.to_string())?;
    Ok(appended)
}

/// Kafka's truncation on a diverging epoch: the leader says its `epoch` ends at `end`; this
/// replica truncates to `truncation_target`.
async fn truncate_divergent(
    part: &Rc<tributary_storage::Partition>,
    topic: &str,
    partition: i32,
    epoch: i32,
    end: i64,
) -> Result<(), String> {
    let leo = part.log_end_offset();
    let (my_epoch, my_end) = part.end_offset_for(epoch);
    let target = super::truncation_target(
        epoch,
        Offset(end),
        (my_epoch, Offset(my_end)),
        Offset(leo),
        Offset(part.log_start_offset()),
    )
    .0;
    if target >= leo {
        // No batch to drop, but an epoch this replica began at its log end (as a leader, deposed
        // before appending) may be one the leader never had: the truncation drops it, so the
        // next fetch names the epoch before it instead of meeting the same divergence again.
        debug!(
            topic,
            partition,
            at = leo,
            epoch,
            "divergence at the log end"
        );
        part.truncate_to(leo).await.map_err(|e| e.to_string())?;
        return Ok(());
    }
    info!(
        topic,
        partition,
        from = leo,
        to = target,
        epoch,
        "truncating a divergent tail"
    );
    if let Err(e) = part.truncate_to(target).await {
        // Not a batch boundary of this log: fall back to the high watermark, a batch end every
        // in-sync replica shares.
        let hw = part.high_watermark().min(target);
        warn!(topic, partition, error = %e, to = hw, "truncating to the high watermark instead");
        part.truncate_to(hw).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn a_fetch_asks_for_what_the_config_says() {
        let config = crate::config::BrokerConfig::build(crate::config::ConfigInput::for_test(&[
            ("replica.fetch.max.bytes", "4096"),
            ("replica.fetch.wait.max.ms", "250"),
            ("replica.socket.timeout.ms", "7000"),
        ]))
        .unwrap();
        let settings = FetchSettings::from_config(&config);
        assert_eq!(settings.response_timeout, Duration::from_millis(7000));
        let items = [Item {
            topic: "t".into(),
            partition: 3,
            leader_epoch: 2,
            fetch_offset: 40,
            last_fetched_epoch: 1,
        }];
        let mut frame = encode_fetch(7, 9, &items, &settings);
        let len = frame.get_i32();
        assert_eq!(usize::try_from(len).unwrap(), frame.remaining());
        let header = RequestHeader::decode(&mut frame, 2).unwrap();
        assert_eq!(header.correlation_id, 9);
        let req = FetchRequest::decode(&mut frame, REPLICA_FETCH_VERSION).unwrap();
        assert_eq!(req.max_wait_ms, 250);
        assert_eq!(req.replica_id, BrokerId(7));
        let p = &req.topics[0].partitions[0];
        assert_eq!(
            (p.partition, p.partition_max_bytes, p.fetch_offset),
            (3, 4096, 40)
        );
    }
}
