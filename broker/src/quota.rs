//! Client quotas (Kafka's `producer_byte_rate` and `consumer_byte_rate`, KIP-13/KIP-55, and
//! `request_percentage`, KIP-124): the quota configs live in the metadata image, set with
//! AlterClientQuotas by user, client id or both (with `<default>` entities); each shard measures
//! the bytes each (user, client id) produces and fetches through it, and the shard time its
//! requests take, over a sliding window of samples and, past the quota, tells the client how long
//! to hold back (`throttle_time_ms`) and reads nothing more from that connection until then
//! (KIP-219). A quota holds per shard: a client on one connection sees the broker's quota, one
//! spread over k shards of a broker up to k times it, and a connection handed to another shard
//! meets that shard's measure of its client (at most once: a connection moves once).
//!
//! A request's time is the time the shard spent polling its handler (decoding, deciding,
//! encoding), not the time it waited — for a long-polling fetch, a rebalance, another shard or
//! the disk — as Kafka counts a request handler thread's time and not a request's wait in
//! purgatory. `request_percentage` is a share of one shard's time: 100 is a whole shard.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tributary_protocol::frame::{FrameBuilder, ResponseFrame, FRAME_PREFIX_BYTES};
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::Reader;

use crate::catalog::Catalog;

pub use tributary_metadata::quota::{
    QuotaChange, QuotaEntity, QuotaRecord, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QUOTA_KEYS,
    REQUEST_PERCENTAGE,
};

use crate::config::saturating_u32;
pub use crate::config::QuotaWindow;

/// `quota.sensors.max` by default: (user, client id) pairs a shard measures at most; when a new
/// pair comes past it the least recently used is forgotten.
pub const SENSORS_MAX: usize = 10_000;
/// When the sensors are full, a new pair makes room for itself and this share of the rest
/// (1/16): the oldest go together, in one scan.
const EVICTED_SHARE: usize = 16;
/// Nanoseconds of shard time per second that make one percent of a shard.
const NANOS_PER_SECOND_PER_PERCENT: f64 = 1e7;

/// The quota `key` applying to `user` and `client`, by Kafka's precedence: user and client,
/// user and default client, user, default user and client, default user and default client,
/// default user, client, default client.
pub fn quota_for(catalog: &Catalog, user: &str, client: &str, key: &str) -> Option<f64> {
    let u = || Some(Some(user.to_string()));
    let c = || Some(Some(client.to_string()));
    let order = [
        (u(), c()),
        (u(), Some(None)),
        (u(), None),
        (Some(None), c()),
        (Some(None), Some(None)),
        (Some(None), None),
        (None, c()),
        (None, Some(None)),
    ];
    order.into_iter().find_map(|(user, client)| {
        catalog
            .client_quotas
            .iter()
            .find(|q| q.entity.user == user && q.entity.client == client)
            .and_then(|q| q.values.get(key).copied())
    })
}

/// APIs whose requests no request quota counts or throttles, as in Kafka: ApiVersions and the
/// SASL exchange, which a client needs before it can be anyone (Kafka answers them during
/// authentication, outside its request handlers), and the brokers' own requests (cluster
/// actions: WriteTxnMarkers here; a follower's Fetch is told apart by its replica id).
pub fn request_quota_exempt(key: i16) -> bool {
    matches!(
        key,
        api_key::API_VERSIONS
            | api_key::SASL_HANDSHAKE
            | api_key::SASL_AUTHENTICATE
            | api_key::WRITE_TXN_MARKERS
    )
}

/// Whether a Fetch request (`body` just past its header) comes from a follower replica.
pub(crate) fn from_follower(body: &Reader, version: i16) -> bool {
    use tributary_protocol::requests::fetch;
    let mut r = body.clone();
    if version < fetch::REPLICA_STATE_FROM {
        // The replica id is the body's first field.
        r.i32("replica_id").is_ok_and(|id| id >= 0)
    } else {
        fetch::decode(&mut r, version).is_ok_and(|f| f.replica_id >= 0)
    }
}

/// Amount per sample over the last samples of a [`QuotaWindow`].
#[derive(Debug, Default)]
struct Rate {
    samples: VecDeque<(Instant, u64)>,
}

impl Rate {
    fn record(&mut self, now: Instant, amount: u64, w: &QuotaWindow) {
        match self.samples.back_mut() {
            Some((start, n)) if now.duration_since(*start) < w.sample => {
                *n = n.saturating_add(amount)
            }
            _ => self.samples.push_back((now, amount)),
        }
        while self.samples.len() > w.samples {
            self.samples.pop_front();
        }
        // Samples older than the window no longer count.
        while self
            .samples
            .front()
            .is_some_and(|(s, _)| now.duration_since(*s) > w.span())
        {
            self.samples.pop_front();
        }
    }

    /// Amount per second over the window, and the window's length: as Kafka, at least
    /// (samples - 1) whole samples, so a first burst is not measured over a few microseconds
    /// (and never less than a millisecond, for a window of one sample).
    fn rate(&self, now: Instant, w: &QuotaWindow) -> (f64, Duration) {
        let total = self
            .samples
            .iter()
            .fold(0u64, |sum, (_, n)| sum.saturating_add(*n));
        let first = self.samples.front().map_or(now, |(s, _)| *s);
        let window = now
            .duration_since(first)
            .max(
                w.sample
                    .saturating_mul(saturating_u32(w.samples.saturating_sub(1))),
            )
            .max(Duration::from_millis(1));
        (total as f64 / window.as_secs_f64(), window)
    }
}

/// One (user, client id) pair's rates, one per quota key, and when it last recorded.
#[derive(Debug)]
struct Sensor {
    rates: [Rate; QUOTA_KEYS.len()],
    used: Instant,
}

/// A shard's measurements, by user then client id, so that a pair already measured is found
/// from borrowed names, without allocating.
#[derive(Debug, Default)]
pub struct QuotaSensors {
    users: HashMap<String, HashMap<String, Sensor>>,
    pairs: usize,
    window: QuotaWindow,
}

impl QuotaSensors {
    pub fn new(window: QuotaWindow) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }

    /// Records `amount` against `key`'s quota for the pair, keeping at most `max_pairs` pairs;
    /// the throttle time when the pair is over `quota` per second (Kafka's
    /// `(rate - quota) / quota * window`, at most `cap`), else zero.
    fn record(
        &mut self,
        now: Instant,
        pair: (&str, &str),
        key: usize,
        (quota, cap): (f64, Duration),
        amount: u64,
        max_pairs: usize,
    ) -> Duration {
        let known = self
            .users
            .get(pair.0)
            .is_some_and(|clients| clients.contains_key(pair.1));
        // Only a new pair makes room, by forgetting the least recently used ones: a pair
        // already measured must not evict another (nor scan them all) on each request.
        if !known {
            if self.pairs >= max_pairs.max(1) {
                self.forget_least_recently_used(self.pairs + 1 - max_pairs.max(1));
            }
            self.users.entry(pair.0.to_string()).or_default().insert(
                pair.1.to_string(),
                Sensor {
                    rates: Default::default(),
                    used: now,
                },
            );
            self.pairs += 1;
        }
        let Some(sensor) = self
            .users
            .get_mut(pair.0)
            .and_then(|clients| clients.get_mut(pair.1))
        else {
            return Duration::ZERO;
        };
        sensor.used = now;
        let Some(rate) = sensor.rates.get_mut(key) else {
            return Duration::ZERO;
        };
        rate.record(now, amount, &self.window);
        let (rate, window) = rate.rate(now, &self.window);
        if quota <= 0.0 || rate <= quota {
            return Duration::ZERO;
        }
        let secs = (rate - quota) / quota * window.as_secs_f64();
        Duration::try_from_secs_f64(secs.min(cap.as_secs_f64())).unwrap_or(cap)
    }

    /// Forgets at least `needed` pairs, the least recently used, and a sixteenth of them all
    /// with them: a stream of new pairs (client ids are the client's to choose) pays one scan
    /// per many pairs, not one per request.
    fn forget_least_recently_used(&mut self, needed: usize) {
        let mut all: Vec<(Instant, &String, &String)> = self
            .users
            .iter()
            .flat_map(|(u, clients)| clients.iter().map(move |(c, s)| (s.used, u, c)))
            .collect();
        let n = needed.max(all.len() / EVICTED_SHARE).min(all.len());
        if n == 0 {
            return;
        }
        if n < all.len() {
            all.select_nth_unstable_by_key(n - 1, |(used, _, _)| *used);
        }
        let oldest: Vec<(String, String)> = all[..n]
            .iter()
            .map(|(_, u, c)| ((*u).clone(), (*c).clone()))
            .collect();
        for (user, client) in oldest {
            if let Some(clients) = self.users.get_mut(&user) {
                if clients.remove(&client).is_some() {
                    self.pairs -= 1;
                }
                if clients.is_empty() {
                    self.users.remove(&user);
                }
            }
        }
    }

    /// A byte rate's record: `bytes` against a quota of `quota` bytes per second.
    pub fn record_bytes(
        &mut self,
        now: Instant,
        pair: (&str, &str),
        key: &str,
        quota: f64,
        bytes: u64,
        max_pairs: usize,
    ) -> Duration {
        let Some(k) = QUOTA_KEYS.iter().position(|q| *q == key) else {
            return Duration::ZERO;
        };
        let cap = self.window.span();
        self.record(now, pair, k, (quota, cap), bytes, max_pairs)
    }

    /// A request's record: `busy` of shard time against a quota of `percent` of one shard.
    pub fn record_request(
        &mut self,
        now: Instant,
        pair: (&str, &str),
        percent: f64,
        busy: Duration,
        max_pairs: usize,
    ) -> Duration {
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        let quota = percent * NANOS_PER_SECOND_PER_PERCENT;
        let cap = self.window.request_throttle_max();
        self.record(now, pair, REQUEST_KEY, (quota, cap), nanos, max_pairs)
    }
}

/// `REQUEST_PERCENTAGE`'s index in [`QUOTA_KEYS`].
const REQUEST_KEY: usize = 2;

/// A future that sums the time spent inside its polls: the shard time a request handler takes,
/// without the time it waits.
pub struct Busy<'a, F: ?Sized> {
    inner: Pin<&'a mut F>,
    spent: Duration,
}

impl<'a, F: Future + ?Sized> Busy<'a, F> {
    pub fn new(inner: Pin<&'a mut F>) -> Self {
        Self {
            inner,
            spent: Duration::ZERO,
        }
    }
}

impl<F: Future + ?Sized> Future for Busy<'_, F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.spent += started.elapsed();
        polled.map(|out| (out, self.spent))
    }
}

/// Where a response's `throttle_time_ms` sits, in bytes after the response header: first in
/// the body for most APIs from the version that has it, after the error code for
/// OffsetDelete. `None` for an API without one at `version`, and for Produce (after its
/// partitions) and ApiVersions (after its API list, and exempt), whose place depends on what
/// comes before it.
pub fn throttle_field_at(key: i16, version: i16) -> Option<usize> {
    use api_key::*;
    let from = match key {
        OFFSET_DELETE => return Some(2),
        FETCH | FIND_COORDINATOR | HEARTBEAT | LEAVE_GROUP | SYNC_GROUP | DESCRIBE_GROUPS
        | LIST_GROUPS | DELETE_TOPICS => 1,
        LIST_OFFSETS | JOIN_GROUP | CREATE_TOPICS | OFFSET_FOR_LEADER_EPOCH => 2,
        METADATA | OFFSET_COMMIT | OFFSET_FETCH => 3,
        DELETE_RECORDS
        | INIT_PRODUCER_ID
        | ADD_PARTITIONS_TO_TXN
        | ADD_OFFSETS_TO_TXN
        | END_TXN
        | TXN_OFFSET_COMMIT
        | DESCRIBE_ACLS
        | CREATE_ACLS
        | DELETE_ACLS
        | DESCRIBE_CONFIGS
        | ALTER_CONFIGS
        | DESCRIBE_LOG_DIRS
        | CREATE_PARTITIONS
        | DELETE_GROUPS
        | ELECT_LEADERS
        | INCREMENTAL_ALTER_CONFIGS
        | ALTER_PARTITION_REASSIGNMENTS
        | LIST_PARTITION_REASSIGNMENTS
        | DESCRIBE_CLIENT_QUOTAS
        | ALTER_CLIENT_QUOTAS
        | DESCRIBE_USER_SCRAM_CREDENTIALS
        | ALTER_USER_SCRAM_CREDENTIALS
        | CONSUMER_GROUP_HEARTBEAT
        | CONSUMER_GROUP_DESCRIBE
        | DESCRIBE_CLUSTER
        | DESCRIBE_PRODUCERS
        | DESCRIBE_TRANSACTIONS
        | LIST_TRANSACTIONS => 0,
        _ => return None,
    };
    (version >= from).then_some(0)
}

/// `frame`, answering `throttle` in its `throttle_time_ms` when that is longer than what the
/// response already carries (a byte-rate quota's): the client is told the longer of the two, as
/// Kafka answers Produce and Fetch, not their sum. The handlers encode their responses before
/// their request time is known, so the field is set in the encoded frame: in place where it
/// sits at a fixed place, by decoding and encoding again for Produce. A response without the
/// field is left as it is; the connection is still held back.
pub fn with_throttle_time(
    spec: &ApiSpec,
    version: i16,
    frame: ResponseFrame,
    throttle: Duration,
) -> ResponseFrame {
    let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
    let header = FRAME_PREFIX_BYTES + 4 + usize::from(spec.response_header_flexible(version));
    if spec.key == api_key::PRODUCE {
        return produce_with_throttle_time(spec, version, frame, header, ms);
    }
    let Some(at) = throttle_field_at(spec.key, version).map(|at| header + at) else {
        return frame;
    };
    let Some((first, rest)) = frame.pieces().split_first() else {
        return frame;
    };
    if first.len() < at + 4 {
        return frame;
    }
    let (first, rest) = (first.clone(), rest.to_vec());
    drop(frame);
    let mut first = first
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    let carried = i32::from_be_bytes([first[at], first[at + 1], first[at + 2], first[at + 3]]);
    first[at..at + 4].copy_from_slice(&carried.max(ms).to_be_bytes());
    if rest.is_empty() {
        return first.into();
    }
    // A fetch response in pieces: its first piece patched, the records still referenced.
    let mut out = FrameBuilder::new();
    out.extend_from_slice(&first);
    for piece in &rest {
        out.put_records(piece);
    }
    out.finish()
}

/// A Produce response's `throttle_time_ms` follows its partitions: the response is decoded,
/// given the longer throttle and encoded again (it carries no records).
fn produce_with_throttle_time(
    spec: &ApiSpec,
    version: i16,
    frame: ResponseFrame,
    header: usize,
    ms: i32,
) -> ResponseFrame {
    use kafka_protocol::messages::ProduceResponse;
    use kafka_protocol::protocol::Decodable;
    let bytes = frame.to_vec();
    if bytes.len() < header {
        return frame;
    }
    let correlation_id = i32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let mut body = bytes::Bytes::from(bytes).split_off(header);
    let Ok(resp) = ProduceResponse::decode(&mut body, version) else {
        return frame;
    };
    let carried = resp.throttle_time_ms;
    let resp = resp.with_throttle_time_ms(carried.max(ms));
    let mut out = BytesMut::new();
    match tributary_protocol::response::encode_frame(&mut out, spec, version, correlation_id, &resp)
    {
        Ok(()) => out.into(),
        Err(_) => frame,
    }
}

/// The connection's user: its principal's name.
pub(crate) fn user_of<'a>(conn: &crate::conn::Conn<'a>) -> &'a str {
    conn.principal
        .strip_prefix("User:")
        .unwrap_or(conn.principal)
}

/// The index in `metrics::THROTTLE_TYPES` a throttle for `key` is counted under.
pub(crate) fn throttle_kind(key: &str) -> usize {
    match key {
        PRODUCER_BYTE_RATE => 0,
        CONSUMER_BYTE_RATE => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tributary_protocol::registry::SUPPORTED_APIS;

    impl QuotaSensors {
        fn has(&self, user: &str, client: &str) -> bool {
            self.users
                .get(user)
                .is_some_and(|clients| clients.contains_key(client))
        }
    }

    #[test]
    fn at_capacity_only_a_new_pair_evicts_the_least_recently_used() {
        let mut s = QuotaSensors::default();
        let t0 = Instant::now();
        let max = 100;
        let names: Vec<String> = (0..max).map(|i| format!("u{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            let at = t0 + Duration::from_millis(i as u64);
            s.record_bytes(at, (n, "c"), PRODUCER_BYTE_RATE, 1e9, 1, max);
        }
        let later = t0 + Duration::from_secs(60);
        // A pair already measured, by any key: nothing is forgotten.
        s.record_bytes(later, ("u5", "c"), PRODUCER_BYTE_RATE, 1e9, 1, max);
        s.record_request(later, ("u6", "c"), 50.0, Duration::from_micros(1), max);
        assert_eq!(s.pairs, max);
        assert!(s.has("u0", "c"));
        // A new pair forgets the least recently used ones: a sixteenth of them (u0..u5, not
        // the recently used u5 and u6), in one scan; the next few new pairs need none.
        s.record_bytes(later, ("new", "c"), PRODUCER_BYTE_RATE, 1e9, 1, max);
        assert_eq!(s.pairs, max - max / 16 + 1);
        for gone in ["u0", "u1", "u2", "u3", "u4", "u7"] {
            assert!(!s.has(gone, "c"), "{gone}");
        }
        assert!(s.has("u8", "c"));
        assert!(s.has("u5", "c") && s.has("u6", "c") && s.has("new", "c"));
        // A smaller bound (quota.sensors.max lowered at a restart) is met at the next new pair.
        s.record_request(later, ("newer", "c"), 50.0, Duration::ZERO, 10);
        assert_eq!(s.pairs, 10);
        assert!(s.has("newer", "c"));
        assert_eq!(s.users.values().map(HashMap::len).sum::<usize>(), s.pairs);
    }

    #[test]
    fn a_client_over_its_quota_is_throttled_in_proportion() {
        let mut s = QuotaSensors::default();
        let t0 = Instant::now();
        let rec = |s: &mut QuotaSensors, pair, key, bytes| {
            s.record_bytes(t0, pair, key, 100_000.0, bytes, SENSORS_MAX)
        };
        // 100 KB against a 100 KB/s quota over a 10 s minimum window: 10 KB/s, no throttle.
        assert_eq!(
            rec(&mut s, ("alice", "c"), PRODUCER_BYTE_RATE, 100_000),
            Duration::ZERO
        );
        // 2 MB more: 2.1 MB over 10 s is 210 KB/s, 1.1 times over: 11 s, capped.
        let d = rec(&mut s, ("alice", "c"), PRODUCER_BYTE_RATE, 2_000_000);
        assert!(d >= Duration::from_secs(10), "{d:?}");
        // Another pair and another key are measured apart.
        assert_eq!(
            rec(&mut s, ("bob", "c"), PRODUCER_BYTE_RATE, 100_000),
            Duration::ZERO
        );
        assert_eq!(
            rec(&mut s, ("alice", "c"), CONSUMER_BYTE_RATE, 100_000),
            Duration::ZERO
        );
        // Old samples leave the window.
        let later = t0 + QuotaWindow::default().span() + Duration::from_secs(2);
        assert_eq!(
            s.record_bytes(
                later,
                ("alice", "c"),
                PRODUCER_BYTE_RATE,
                100_000.0,
                1,
                SENSORS_MAX
            ),
            Duration::ZERO
        );
    }

    #[test]
    fn the_window_is_configurable() {
        let w = QuotaWindow {
            samples: 3,
            sample: Duration::from_millis(500),
        };
        let mut s = QuotaSensors::new(w);
        let t0 = Instant::now();
        let pair = ("alice", "c");
        // 1 MB against 100 KB/s, measured over at least two samples (1 s): nine times over,
        // 9 s of throttle, bounded by the 1.5 s window.
        let d = s.record_bytes(
            t0,
            pair,
            PRODUCER_BYTE_RATE,
            100_000.0,
            1_000_000,
            SENSORS_MAX,
        );
        assert_eq!(d, Duration::from_millis(1500));
        // Past the window the burst no longer counts.
        let later = t0 + Duration::from_secs(2);
        let d = s.record_bytes(later, pair, PRODUCER_BYTE_RATE, 100_000.0, 1, SENSORS_MAX);
        assert_eq!(d, Duration::ZERO);
        // A request quota's throttle is bounded by one sample.
        let d = s.record_request(t0, pair, 1.0, Duration::from_secs(5), SENSORS_MAX);
        assert_eq!(d, Duration::from_millis(500));
        // One sample: a first record is measured over no less than a millisecond.
        let mut one = QuotaSensors::new(QuotaWindow {
            samples: 1,
            sample: Duration::from_secs(1),
        });
        let d = one.record_bytes(t0, pair, PRODUCER_BYTE_RATE, 1.0, 10, SENSORS_MAX);
        assert_eq!(d, Duration::from_secs(1));
        // An absurd window is measured, not a panic.
        let mut huge = QuotaSensors::new(QuotaWindow {
            samples: usize::MAX,
            sample: Duration::from_secs(u64::MAX / 2),
        });
        let d = huge.record_bytes(t0, pair, PRODUCER_BYTE_RATE, 1.0, 10, SENSORS_MAX);
        assert_eq!(d, Duration::ZERO);
        let d = huge.record_bytes(t0, pair, PRODUCER_BYTE_RATE, 1e-300, u64::MAX, SENSORS_MAX);
        assert!(d > Duration::from_secs(1 << 40), "{d:?}");
    }

    #[test]
    fn request_time_is_a_share_of_one_shard_throttled_up_to_one_sample() {
        let mut s = QuotaSensors::default();
        let t0 = Instant::now();
        let pair = ("alice", "app");
        // 10 % of a shard over the 10 s minimum window is 1 s of shard time.
        let mut rec = |busy_ms: u64| {
            s.record_request(t0, pair, 10.0, Duration::from_millis(busy_ms), SENSORS_MAX)
        };
        assert_eq!(rec(900), Duration::ZERO, "0.9 s: 9 %");
        assert_eq!(rec(100), Duration::ZERO, "1 s: exactly 10 %");
        // 1.05 s: 10.5 %, 5 % over: 5 % of the 10 s window.
        let d = rec(50);
        assert!(
            d.abs_diff(Duration::from_millis(500)) < Duration::from_millis(5),
            "{d:?}"
        );
        // Far over: bounded by one sample (Kafka's request quota bound), not the window.
        assert_eq!(rec(10_000), QuotaWindow::default().request_throttle_max());
        // The byte rates of the same pair are measured apart.
        assert_eq!(
            s.record_bytes(t0, pair, PRODUCER_BYTE_RATE, 1.0, 1, SENSORS_MAX),
            Duration::ZERO
        );
        // 100 is one whole shard: a shard busy for the client all the time stays within it.
        let mut whole = QuotaSensors::default();
        for i in 0..10u64 {
            let second = Duration::from_secs(1);
            let at = t0 + second * i as u32;
            let d = whole.record_request(at, pair, 100.0, second, SENSORS_MAX);
            assert_eq!(d, Duration::ZERO, "second {i}");
        }
    }

    #[test]
    fn busy_time_counts_polls_not_waits() {
        let waited = Duration::from_millis(30);
        let mut fut = std::pin::pin!(async {
            std::thread::sleep(Duration::from_millis(5));
            futures::pending!();
            7
        });
        let started = Instant::now();
        let mut busy = Busy::new(fut.as_mut());
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut busy).poll(&mut cx).is_pending());
        // Waiting between polls is not the request's time.
        std::thread::sleep(waited);
        let Poll::Ready((out, spent)) = Pin::new(&mut busy).poll(&mut cx) else {
            panic!("the second poll completes");
        };
        assert_eq!(out, 7);
        assert!(spent >= Duration::from_millis(5), "{spent:?}");
        assert!(spent < started.elapsed() - waited + Duration::from_millis(1));
    }

    #[test]
    fn the_sensors_bound_is_the_config_keys_default() {
        let key = crate::config::BROKER_KEYS
            .iter()
            .find(|k| k.name == "quota.sensors.max")
            .expect("quota.sensors.max is a broker key");
        assert_eq!(key.default, SENSORS_MAX.to_string());
    }

    #[test]
    fn exempt_apis_are_kafkas() {
        for key in [
            api_key::API_VERSIONS,
            api_key::SASL_HANDSHAKE,
            api_key::SASL_AUTHENTICATE,
            api_key::WRITE_TXN_MARKERS,
        ] {
            assert!(request_quota_exempt(key), "{key}");
        }
        for key in [
            api_key::PRODUCE,
            api_key::FETCH,
            api_key::METADATA,
            api_key::LIST_OFFSETS,
            api_key::JOIN_GROUP,
            api_key::ALTER_CLIENT_QUOTAS,
        ] {
            assert!(!request_quota_exempt(key), "{key}");
        }
    }

    #[test]
    fn a_followers_fetch_is_told_apart_at_every_version() {
        use kafka_protocol::messages::{BrokerId, FetchRequest};
        use kafka_protocol::protocol::Encodable;
        for v in [4, 12, 14, 15, 16] {
            for (replica, follower) in [(-1, false), (3, true)] {
                let mut req = FetchRequest::default().with_max_wait_ms(500);
                if v < 15 {
                    req = req.with_replica_id(BrokerId(replica));
                } else {
                    req.replica_state.replica_id = BrokerId(replica);
                }
                let mut b = BytesMut::new();
                req.encode(&mut b, v).unwrap();
                let body = Reader::new(b.freeze());
                assert_eq!(from_follower(&body, v), follower, "v{v} replica {replica}");
            }
        }
    }

    /// Each registered API's response with `throttle_time_ms` set to `ms`, encoded at `v`
    /// (`None` when the API has no such field, or not at `v`).
    fn encoded_with_throttle(key: i16, v: i16, ms: i32) -> Option<Vec<u8>> {
        use kafka_protocol::messages::*;
        use kafka_protocol::protocol::Encodable;
        macro_rules! enc {
            ($t:ty) => {{
                let mut b = BytesMut::new();
                <$t>::default()
                    .with_throttle_time_ms(ms)
                    .encode(&mut b, v)
                    .ok()
                    .map(|()| b.to_vec())
            }};
        }
        match key {
            api_key::PRODUCE => enc!(ProduceResponse),
            api_key::FETCH => enc!(FetchResponse),
            api_key::LIST_OFFSETS => enc!(ListOffsetsResponse),
            api_key::METADATA => enc!(MetadataResponse),
            api_key::API_VERSIONS => enc!(ApiVersionsResponse),
            api_key::CREATE_TOPICS => enc!(CreateTopicsResponse),
            api_key::DELETE_TOPICS => enc!(DeleteTopicsResponse),
            api_key::DELETE_RECORDS => enc!(DeleteRecordsResponse),
            api_key::INIT_PRODUCER_ID => enc!(InitProducerIdResponse),
            api_key::ADD_PARTITIONS_TO_TXN => enc!(AddPartitionsToTxnResponse),
            api_key::ADD_OFFSETS_TO_TXN => enc!(AddOffsetsToTxnResponse),
            api_key::END_TXN => enc!(EndTxnResponse),
            api_key::TXN_OFFSET_COMMIT => enc!(TxnOffsetCommitResponse),
            api_key::DESCRIBE_PRODUCERS => enc!(DescribeProducersResponse),
            api_key::DESCRIBE_TRANSACTIONS => enc!(DescribeTransactionsResponse),
            api_key::LIST_TRANSACTIONS => enc!(ListTransactionsResponse),
            api_key::DESCRIBE_USER_SCRAM_CREDENTIALS => {
                enc!(DescribeUserScramCredentialsResponse)
            }
            api_key::ALTER_USER_SCRAM_CREDENTIALS => enc!(AlterUserScramCredentialsResponse),
            api_key::DESCRIBE_ACLS => enc!(DescribeAclsResponse),
            api_key::CREATE_ACLS => enc!(CreateAclsResponse),
            api_key::DELETE_ACLS => enc!(DeleteAclsResponse),
            api_key::DESCRIBE_CLIENT_QUOTAS => enc!(DescribeClientQuotasResponse),
            api_key::ALTER_CLIENT_QUOTAS => enc!(AlterClientQuotasResponse),
            api_key::DESCRIBE_CONFIGS => enc!(DescribeConfigsResponse),
            api_key::DESCRIBE_CLUSTER => enc!(DescribeClusterResponse),
            api_key::OFFSET_COMMIT => enc!(OffsetCommitResponse),
            api_key::OFFSET_FETCH => enc!(OffsetFetchResponse),
            api_key::FIND_COORDINATOR => enc!(FindCoordinatorResponse),
            api_key::JOIN_GROUP => enc!(JoinGroupResponse),
            api_key::HEARTBEAT => enc!(HeartbeatResponse),
            api_key::LEAVE_GROUP => enc!(LeaveGroupResponse),
            api_key::SYNC_GROUP => enc!(SyncGroupResponse),
            api_key::DESCRIBE_GROUPS => enc!(DescribeGroupsResponse),
            api_key::LIST_GROUPS => enc!(ListGroupsResponse),
            api_key::DELETE_GROUPS => enc!(DeleteGroupsResponse),
            api_key::OFFSET_DELETE => enc!(OffsetDeleteResponse),
            api_key::ALTER_CONFIGS => enc!(AlterConfigsResponse),
            api_key::CREATE_PARTITIONS => enc!(CreatePartitionsResponse),
            api_key::ELECT_LEADERS => enc!(ElectLeadersResponse),
            api_key::ALTER_PARTITION_REASSIGNMENTS => enc!(AlterPartitionReassignmentsResponse),
            api_key::LIST_PARTITION_REASSIGNMENTS => enc!(ListPartitionReassignmentsResponse),
            api_key::DESCRIBE_LOG_DIRS => enc!(DescribeLogDirsResponse),
            api_key::OFFSET_FOR_LEADER_EPOCH => enc!(OffsetForLeaderEpochResponse),
            api_key::INCREMENTAL_ALTER_CONFIGS => enc!(IncrementalAlterConfigsResponse),
            api_key::CONSUMER_GROUP_HEARTBEAT => enc!(ConsumerGroupHeartbeatResponse),
            api_key::CONSUMER_GROUP_DESCRIBE => enc!(ConsumerGroupDescribeResponse),
            // No throttle_time_ms in these responses.
            api_key::SASL_HANDSHAKE
            | api_key::SASL_AUTHENTICATE
            | api_key::WRITE_TXN_MARKERS
            | api_key::DESCRIBE_QUORUM => None,
            other => panic!("API key {other} is registered: add its response type here"),
        }
    }

    #[test]
    fn the_throttle_field_is_where_every_registered_response_encodes_it() {
        let sentinel = 0x5a6b_7c0d_i32.to_be_bytes();
        for spec in SUPPORTED_APIS {
            for v in spec.min_version..=spec.max_version {
                let body = encoded_with_throttle(spec.key, v, i32::from_be_bytes(sentinel));
                let actual = body.and_then(|b| {
                    (0..b.len().saturating_sub(3)).find(|&i| b[i..i + 4] == sentinel)
                });
                let expected = throttle_field_at(spec.key, v);
                match spec.key {
                    // Set by decoding and encoding again (Produce), or exempt (ApiVersions).
                    api_key::PRODUCE | api_key::API_VERSIONS => {
                        assert_eq!(expected, None, "{} v{v}", spec.name);
                    }
                    _ => assert_eq!(expected, actual, "{} v{v}", spec.name),
                }
            }
        }
    }

    #[test]
    fn the_longer_throttle_is_set_in_an_encoded_response() {
        use kafka_protocol::messages::{MetadataResponse, ProduceResponse};
        use kafka_protocol::protocol::Decodable;
        let spec = |key| {
            SUPPORTED_APIS
                .iter()
                .find(|s| s.key == key)
                .expect("registered")
        };
        let decode_body = |frame: &ResponseFrame, flexible: bool| {
            let b = frame.to_vec();
            assert_eq!(
                i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize,
                b.len() - 4
            );
            assert_eq!(i32::from_be_bytes([b[4], b[5], b[6], b[7]]), 42);
            bytes::Bytes::from(b).split_off(8 + usize::from(flexible))
        };
        for v in [9, 12] {
            let metadata = spec(api_key::METADATA);
            let mut out = BytesMut::new();
            let resp = MetadataResponse::default().with_cluster_id(Some("c".into()));
            tributary_protocol::response::encode_frame(&mut out, metadata, v, 42, &resp).unwrap();
            let frame = with_throttle_time(metadata, v, out.into(), Duration::from_millis(1500));
            let got = MetadataResponse::decode(
                &mut decode_body(&frame, metadata.response_header_flexible(v)),
                v,
            )
            .unwrap();
            assert_eq!(got.throttle_time_ms, 1500);
            assert_eq!(got.cluster_id.as_deref(), Some("c"));
        }
        let produce = spec(api_key::PRODUCE);
        for (v, carried, want) in [(8, 3000, 3000), (9, 0, 1500), (10, 1000, 1500)] {
            let mut out = BytesMut::new();
            let resp = ProduceResponse::default().with_throttle_time_ms(carried);
            tributary_protocol::response::encode_frame(&mut out, produce, v, 42, &resp).unwrap();
            let frame = with_throttle_time(produce, v, out.into(), Duration::from_millis(1500));
            let got = ProduceResponse::decode(
                &mut decode_body(&frame, produce.response_header_flexible(v)),
                v,
            )
            .unwrap();
            assert_eq!(got.throttle_time_ms, want, "v{v}: the longer one");
        }
        // A response in pieces (a fetch's records): the first piece is patched, the records
        // are still the buffer they were read into.
        let fetch = spec(api_key::FETCH);
        let records = bytes::Bytes::from(vec![9u8; 8192]);
        let response = || {
            let mut b = FrameBuilder::new();
            tributary_protocol::header::begin_response(&mut b, 42, true);
            b.extend_from_slice(&250i32.to_be_bytes());
            b.extend_from_slice(&[1, 2, 3]);
            b.put_records(&records);
            b.extend_from_slice(&[4, 5]);
            b.finish()
        };
        let before = response().to_vec();
        let frame = with_throttle_time(fetch, 12, response(), Duration::from_millis(700));
        assert!(frame
            .pieces()
            .iter()
            .any(|p| p.as_ptr() == records.as_ptr()));
        let after = frame.to_vec();
        assert_eq!(after.len(), before.len());
        assert_eq!(&after[9..13], &700i32.to_be_bytes());
        assert_eq!(after[..9], before[..9]);
        assert_eq!(after[13..], before[13..]);
    }

    #[test]
    fn quotas_resolve_in_kafkas_order() {
        let mut c = Catalog::empty();
        let rec = |user: Option<Option<&str>>, client: Option<Option<&str>>, v: f64| QuotaRecord {
            entity: QuotaEntity {
                user: user.map(|u| u.map(str::to_string)),
                client: client.map(|c| c.map(str::to_string)),
            },
            values: [(PRODUCER_BYTE_RATE.to_string(), v)].into_iter().collect(),
        };
        c.client_quotas = vec![
            rec(None, Some(None), 8.0),
            rec(None, Some(Some("app")), 7.0),
            rec(Some(None), None, 6.0),
            rec(Some(Some("alice")), None, 3.0),
            rec(Some(Some("alice")), Some(Some("app")), 1.0),
        ];
        let q = |c: &Catalog, u: &str, cl: &str| quota_for(c, u, cl, PRODUCER_BYTE_RATE);
        assert_eq!(q(&c, "alice", "app"), Some(1.0));
        assert_eq!(q(&c, "alice", "other"), Some(3.0));
        assert_eq!(
            q(&c, "bob", "app"),
            Some(6.0),
            "the default user comes before clients"
        );
        assert_eq!(quota_for(&c, "bob", "app", CONSUMER_BYTE_RATE), None);
        // request_percentage resolves the same way, apart from the byte rates.
        c.client_quotas[4]
            .values
            .insert(REQUEST_PERCENTAGE.to_string(), 25.0);
        c.client_quotas[0]
            .values
            .insert(REQUEST_PERCENTAGE.to_string(), 50.0);
        assert_eq!(
            quota_for(&c, "alice", "app", REQUEST_PERCENTAGE),
            Some(25.0)
        );
        assert_eq!(quota_for(&c, "bob", "x", REQUEST_PERCENTAGE), Some(50.0));
        assert_eq!(q(&c, "alice", "app"), Some(1.0));
        c.client_quotas.remove(2);
        assert_eq!(q(&c, "bob", "app"), Some(7.0));
        assert_eq!(q(&c, "bob", "x"), Some(8.0));
    }
}
