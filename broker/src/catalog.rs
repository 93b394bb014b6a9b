//! Cluster metadata: the topics, their partition counts, ids and config overrides. The controller
//! shard owns the catalog, persists it, and pushes immutable snapshots (`Arc<Catalog>`) to every
//! shard; shards only ever read their snapshot.
//!
//! On disk the catalog is one JSON document with a CRC32C, replaced atomically (write a temporary
//! file, fsync, rename, fsync the directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub const CATALOG_FILE: &str = "catalog.json";
pub const PRODUCER_ID_FILE: &str = "producer-ids.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    /// A numeric topic config: the topic's override, else `default` (the broker-level value).
    /// Overrides are validated before they are stored, so they parse.
    pub fn config_or<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.configs
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Whether `cleanup.policy` (default `delete`) includes `policy`.
    pub fn cleanup_policy_includes(&self, policy: &str) -> bool {
        self.configs
            .get("cleanup.policy")
            .map_or(policy == "delete", |p| {
                p.split(',').any(|p| p.trim() == policy)
            })
    }

    /// Whether the topic's `message.timestamp.type` is LogAppendTime; `broker_default` is
    /// `log.message.timestamp.type`'s.
    pub fn log_append_time(&self, broker_default: bool) -> bool {
        self.configs
            .get("message.timestamp.type")
            .map_or(broker_default, |t| t == "LogAppendTime")
    }

    /// The topic's `compression.type` as a codec (`None`: the producer's); `broker_default` is
    /// the broker's `compression.type`.
    pub fn compression_type(&self, broker_default: Option<i16>) -> Option<i16> {
        self.configs
            .get("compression.type")
            .and_then(|v| crate::config::parse_compression_type("compression.type", v).ok())
            .unwrap_or(broker_default)
    }

    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::parse_str(&self.id).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub version: u64,
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Broker configs changed at runtime through AlterConfigs (absent in catalogs written before
    /// they existed).
    #[serde(default)]
    pub broker_configs: DynamicBrokerConfigs,
}

/// Dynamic broker configs, as Kafka keeps them: cluster-wide defaults (AlterConfigs on the
/// broker resource with an empty name) and per-broker values (named by node id), the latter
/// taking precedence. Both override the static `--config`/`--set` values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicBrokerConfigs {
    pub cluster: BTreeMap<String, String>,
    pub per_broker: BTreeMap<i32, BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    crc32c: u32,
    body: String,
}

/// `value` as the checksummed JSON document [`read_checked`] reads.
fn encode_checked<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let body = serde_json::to_string(value)?;
    let env = Envelope {
        crc32c: crc32c::crc32c(body.as_bytes()),
        body,
    };
    Ok(serde_json::to_vec(&env)?)
}

/// Writes `value` to `dir/name` atomically and durably, on the calling thread: for start-up,
/// before the shards run. A shard uses [`write_atomic_async`].
pub fn write_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    let bytes = encode_checked(value)?;
    tributary_storage::io::now::write_file_atomic(dir, name, &bytes, true)
        .with_context(|| format!("writing {}", dir.join(name).display()))
}

/// [`write_atomic`] on the executor's blocking thread, so the shard goes on while the disk
/// syncs.
pub async fn write_atomic_async<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    let bytes = encode_checked(value)?;
    tributary_storage::io::write_file_atomic(dir, name, bytes, true)
        .await
        .with_context(|| format!("writing {}", dir.join(name).display()))
}

/// Reads a file written by [`write_atomic`]; `None` if it does not exist.
pub fn read_checked<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let env: Envelope = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a Tributary metadata file", path.display()))?;
    let crc = crc32c::crc32c(env.body.as_bytes());
    if crc != env.crc32c {
        bail!(
            "{} fails its checksum (stored {:#x}, computed {crc:#x}); restore it from a backup or remove the data directory",
            path.display(),
            env.crc32c
        );
    }
    Ok(Some(serde_json::from_str(&env.body)?))
}

impl Catalog {
    pub fn load_or_create(data_dir: &Path) -> Result<Self> {
        if let Some(c) = read_checked::<Catalog>(&data_dir.join(CATALOG_FILE))? {
            return Ok(c);
        }
        let c = Catalog {
            version: 1,
            cluster_id: new_cluster_id(),
            topics: BTreeMap::new(),
            broker_configs: DynamicBrokerConfigs::default(),
        };
        write_atomic(data_dir, CATALOG_FILE, &c)?;
        Ok(c)
    }

    /// Persists the catalog on the calling thread (start-up).
    pub fn save(&self, data_dir: &Path) -> Result<()> {
        write_atomic(data_dir, CATALOG_FILE, self)
    }

    /// Persists the catalog from a shard, through the blocking thread.
    pub async fn save_async(&self, data_dir: &Path) -> Result<()> {
        write_atomic_async(data_dir, CATALOG_FILE, self).await
    }
}

/// Kafka cluster ids are a random UUID in URL-safe base64 without padding (22 characters).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let v = uuid::Uuid::new_v4().as_u128();
    (0..22)
        .map(|i| ALPHABET[((v >> (i * 6)) & 63) as usize] as char)
        .collect()
}

/// Directory of one partition: `<data-dir>/<topic>-<partition>`, as Kafka lays it out.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_round_trips_and_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Catalog::load_or_create(dir.path()).unwrap();
        assert_eq!(c.cluster_id.len(), 22);
        c.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: uuid::Uuid::new_v4().to_string(),
                partitions: 3,
                configs: BTreeMap::new(),
            },
        );
        c.save(dir.path()).unwrap();
        assert_eq!(Catalog::load_or_create(dir.path()).unwrap(), c);
        let path = dir.path().join(CATALOG_FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\\\"partitions\\\":3", "\\\"partitions\\\":4");
        std::fs::write(&path, text).unwrap();
        let e = Catalog::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn record_policy_reads_topic_overrides_over_broker_defaults() {
        let mut t = TopicMeta {
            name: "t".into(),
            id: String::new(),
            partitions: 1,
            configs: BTreeMap::new(),
        };
        assert!(!t.cleanup_policy_includes("compact"));
        assert!(t.cleanup_policy_includes("delete"));
        assert!(t.log_append_time(true));
        assert_eq!(t.compression_type(Some(3)), Some(3));
        for (k, v) in [
            ("cleanup.policy", "delete,compact"),
            ("message.timestamp.type", "CreateTime"),
            ("compression.type", "producer"),
        ] {
            t.configs.insert(k.into(), v.into());
        }
        assert!(t.cleanup_policy_includes("compact"));
        assert!(!t.log_append_time(true));
        assert_eq!(t.compression_type(Some(3)), None);
    }

    #[test]
    fn dynamic_broker_configs_persist_and_old_catalogs_load_without_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Catalog::load_or_create(dir.path()).unwrap();
        c.broker_configs
            .cluster
            .insert("log.retention.ms".into(), "1000".into());
        c.broker_configs
            .per_broker
            .entry(0)
            .or_default()
            .insert("log.segment.bytes".into(), "4096".into());
        c.save(dir.path()).unwrap();
        assert_eq!(Catalog::load_or_create(dir.path()).unwrap(), c);

        // A catalog written before dynamic broker configs existed has no such field.
        let old = r#"{"version":3,"cluster_id":"abc","topics":{}}"#;
        write_atomic(
            dir.path(),
            CATALOG_FILE,
            &serde_json::from_str::<serde_json::Value>(old).unwrap(),
        )
        .unwrap();
        let c = Catalog::load_or_create(dir.path()).unwrap();
        assert_eq!(c.version, 3);
        assert_eq!(c.broker_configs, DynamicBrokerConfigs::default());
    }
}
