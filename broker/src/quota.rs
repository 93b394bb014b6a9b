//! Client quotas (Kafka's `producer_byte_rate` and `consumer_byte_rate`, KIP-13/KIP-55): the
//! quota configs live in the metadata image, set with AlterClientQuotas by user, client id or
//! both (with `<default>` entities); each shard measures the bytes each (user, client id)
//! produces and fetches through it over a sliding window of samples and, past the quota, tells
//! the client how long to hold back (`throttle_time_ms`) and reads nothing more from that
//! connection until then (KIP-219). A quota holds per shard: a client on one connection sees
//! the broker's quota, one spread over k shards of a broker up to k times it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;

/// The quota keys served.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const QUOTA_KEYS: &[&str] = &[PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE];
/// Kafka's `quota.window.num` and `quota.window.size.seconds` defaults: the rate is measured
/// over this many samples of this length.
pub const WINDOW_SAMPLES: usize = 11;
pub const SAMPLE_LENGTH: Duration = Duration::from_secs(1);
/// The longest a single response throttles its connection (Kafka caps it at one window).
pub const THROTTLE_MAX: Duration = Duration::from_secs(WINDOW_SAMPLES as u64);
/// (user, client id) pairs a shard measures at most; the least recently used is forgotten.
pub const SENSORS_MAX: usize = 10_000;

/// One quota entity: its user part and client-id part, each absent, the default (`Some(None)`)
/// or a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<Option<String>>,
    pub client: Option<Option<String>>,
}

/// An AlterClientQuotas change: per entity, each key set (`Some`) or removed (`None`).
pub type QuotaChange = (QuotaEntity, Vec<(String, Option<f64>)>);

/// One entity's quota values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// Values are checked finite and positive before they reach the image, so equality is total.
impl Eq for QuotaRecord {}

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

/// Bytes per sample over the last [`WINDOW_SAMPLES`] samples.
#[derive(Debug, Default)]
struct Rate {
    samples: VecDeque<(Instant, u64)>,
}

impl Rate {
    fn record(&mut self, now: Instant, bytes: u64) {
        match self.samples.back_mut() {
            Some((start, n)) if now.duration_since(*start) < SAMPLE_LENGTH => *n += bytes,
            _ => self.samples.push_back((now, bytes)),
        }
        while self.samples.len() > WINDOW_SAMPLES {
            self.samples.pop_front();
        }
        // Samples older than the window no longer count.
        while self
            .samples
            .front()
            .is_some_and(|(s, _)| now.duration_since(*s) > SAMPLE_LENGTH * WINDOW_SAMPLES as u32)
        {
            self.samples.pop_front();
        }
    }

    /// Bytes per second over the window, and the window's length: as Kafka, at least
    /// (samples - 1) whole samples, so a first burst is not measured over a few microseconds.
    fn rate(&self, now: Instant) -> (f64, Duration) {
        let total: u64 = self.samples.iter().map(|(_, n)| n).sum();
        let first = self.samples.front().map_or(now, |(s, _)| *s);
        let window = now
            .duration_since(first)
            .max(SAMPLE_LENGTH * (WINDOW_SAMPLES as u32 - 1));
        (total as f64 / window.as_secs_f64(), window)
    }
}

/// A shard's measurements.
#[derive(Debug, Default)]
pub struct QuotaSensors {
    rates: HashMap<(String, String, &'static str), (Rate, Instant)>,
}

impl QuotaSensors {
    /// Records `bytes` against `key`'s quota for the pair; the throttle time when the pair
    /// is over `quota` bytes/s (Kafka's `(rate - quota) / quota * window`), else zero.
    pub fn record(
        &mut self,
        now: Instant,
        pair: (&str, &str),
        key: &'static str,
        quota: f64,
        bytes: u64,
    ) -> Duration {
        let id = (pair.0.to_string(), pair.1.to_string(), key);
        // Only a new pair makes room, by forgetting the least recently used one: a pair
        // already measured must not evict another (nor scan them all) on each request.
        if self.rates.len() >= SENSORS_MAX && !self.rates.contains_key(&id) {
            if let Some(oldest) = self
                .rates
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.rates.remove(&oldest);
            }
        }
        let entry = self
            .rates
            .entry(id)
            .or_insert_with(|| (Rate::default(), now));
        entry.1 = now;
        entry.0.record(now, bytes);
        let (rate, window) = entry.0.rate(now);
        if quota <= 0.0 || rate <= quota {
            return Duration::ZERO;
        }
        let secs = (rate - quota) / quota * window.as_secs_f64();
        Duration::from_secs_f64(secs.min(THROTTLE_MAX.as_secs_f64()))
    }
}

impl crate::shard::Shard {
    /// Records `bytes` a request moved against the `key` quota of the connection's user and
    /// the request's client id (its header's); how long the connection is to hold back (zero
    /// without a quota or within it).
    pub fn throttle(
        &self,
        conn: crate::handlers::Conn<'_>,
        client_id: Option<&str>,
        key: &'static str,
        bytes: u64,
    ) -> Duration {
        let catalog = self.catalog();
        if catalog.client_quotas.is_empty() {
            return Duration::ZERO;
        }
        let client_id = client_id.unwrap_or_default();
        let user = conn
            .principal
            .strip_prefix("User:")
            .unwrap_or(conn.principal);
        let Some(quota) = quota_for(&catalog, user, client_id, key) else {
            return Duration::ZERO;
        };
        let d = self.quota_sensors.borrow_mut().record(
            Instant::now(),
            (user, client_id),
            key,
            quota,
            bytes,
        );
        if d > conn.throttle.get() {
            conn.throttle.set(d);
        }
        if !d.is_zero() {
            let kind = usize::from(key != PRODUCER_BYTE_RATE);
            self.metrics.throttled(kind, d);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_capacity_only_a_new_pair_evicts_the_least_recently_used() {
        let mut s = QuotaSensors::default();
        let t0 = Instant::now();
        let names: Vec<String> = (0..SENSORS_MAX).map(|i| format!("u{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            s.record(
                t0 + Duration::from_millis(i as u64),
                (n, "c"),
                PRODUCER_BYTE_RATE,
                1e9,
                1,
            );
        }
        let later = t0 + Duration::from_secs(60);
        // A pair already measured: nothing is forgotten.
        s.record(later, ("u5", "c"), PRODUCER_BYTE_RATE, 1e9, 1);
        assert_eq!(s.rates.len(), SENSORS_MAX);
        assert!(s
            .rates
            .contains_key(&("u0".to_string(), "c".to_string(), PRODUCER_BYTE_RATE)));
        // A new pair forgets the least recently used one (u0).
        s.record(later, ("new", "c"), PRODUCER_BYTE_RATE, 1e9, 1);
        assert_eq!(s.rates.len(), SENSORS_MAX);
        assert!(!s
            .rates
            .contains_key(&("u0".to_string(), "c".to_string(), PRODUCER_BYTE_RATE)));
        assert!(s
            .rates
            .contains_key(&("u5".to_string(), "c".to_string(), PRODUCER_BYTE_RATE)));
    }

    #[test]
    fn a_client_over_its_quota_is_throttled_in_proportion() {
        let mut s = QuotaSensors::default();
        let t0 = Instant::now();
        // 100 KB against a 100 KB/s quota over a 10 s minimum window: 10 KB/s, no throttle.
        assert_eq!(
            s.record(t0, ("alice", "c"), PRODUCER_BYTE_RATE, 100_000.0, 100_000),
            Duration::ZERO
        );
        // 2 MB more: 2.1 MB over 10 s is 210 KB/s, 1.1 times over: 11 s, capped.
        let d = s.record(t0, ("alice", "c"), PRODUCER_BYTE_RATE, 100_000.0, 2_000_000);
        assert!(d >= Duration::from_secs(10), "{d:?}");
        // Another pair and another key are measured apart.
        assert_eq!(
            s.record(t0, ("bob", "c"), PRODUCER_BYTE_RATE, 100_000.0, 100_000),
            Duration::ZERO
        );
        assert_eq!(
            s.record(t0, ("alice", "c"), CONSUMER_BYTE_RATE, 100_000.0, 100_000),
            Duration::ZERO
        );
        // Old samples leave the window.
        let later = t0 + SAMPLE_LENGTH * (WINDOW_SAMPLES as u32 + 2);
        assert_eq!(
            s.record(later, ("alice", "c"), PRODUCER_BYTE_RATE, 100_000.0, 1),
            Duration::ZERO
        );
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
        c.client_quotas.remove(2);
        assert_eq!(q(&c, "bob", "app"), Some(7.0));
        assert_eq!(q(&c, "bob", "x"), Some(8.0));
    }
}
