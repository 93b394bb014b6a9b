//! The topic config keys: one table holding, per key, its type, the bounds Kafka's `LogConfig`
//! puts on it, the broker key that supplies its default, and its documentation. CreateTopics,
//! AlterConfigs, IncrementalAlterConfigs, DescribeConfigs and the dynamic broker configs all read
//! this table; a new topic key is one entry here plus the line in `Shard::log_config` that uses it.

use crate::config::{BrokerConfig, ConfigKind};

/// What values a key accepts. Numeric bounds are inclusive; an `Int` key is also capped at
/// `i32::MAX` and a `Long` key at `i64::MAX`, as Kafka's INT and LONG types are.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    AtLeast(i64),
    Between(i64, i64),
    /// A double in [0, 1].
    Ratio,
    OneOf(&'static [&'static str]),
    /// A comma-separated list of items from the set, at least one.
    ListOf(&'static [&'static str]),
    /// Checked by a function of its own; its error says what is allowed.
    Parsed(fn(&str) -> Result<(), String>),
}

/// A topic-level config key.
pub struct TopicKey {
    pub name: &'static str,
    pub kind: ConfigKind,
    pub bound: Bound,
    /// The broker key whose value is the default (Kafka's "server default property").
    pub broker_key: Option<&'static str>,
    /// The default, from the effective broker config.
    pub default: fn(&BrokerConfig) -> String,
    pub doc: &'static str,
    /// Takes effect in this version; the others are stored and described but not yet enforced.
    pub enforced: bool,
}

const CLEANUP_POLICIES: &[&str] = &["delete", "compact"];
const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const BOOLEANS: &[&str] = &["true", "false"];

/// Tributary's smallest segment. Kafka 4.0 raised its own minimum to 1 MiB (KIP-1030) and keeps
/// a test-only key for smaller ones; Tributary allows 1 KiB so that tests and small deployments
/// can roll segments often.
pub const SEGMENT_BYTES_MIN: i64 = 1024;

pub const TOPIC_KEYS: &[TopicKey] = &[
    TopicKey {
        name: "remote.storage.enable",
        kind: ConfigKind::Bool,
        bound: Bound::OneOf(BOOLEANS),
        broker_key: None,
        default: |_| "false".into(),
        doc: "Tiered storage: copy closed segments to the remote log store (remote.log.storage.*) and keep only local.retention.* of them on local disk. Needs remote.log.storage.system.enable; not for compacted topics.",
        enforced: true,
    },
    TopicKey {
        name: "local.retention.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(-2),
        broker_key: Some("log.local.retention.ms"),
        default: |c| c.log_local_retention_ms.to_string(),
        doc: "With remote.storage.enable: how long a segment copied to the remote store stays on local disk (-2: retention.ms; -1: for ever). At most retention.ms.",
        enforced: true,
    },
    TopicKey {
        name: "local.retention.bytes",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(-2),
        broker_key: Some("log.local.retention.bytes"),
        default: |c| c.log_local_retention_bytes.to_string(),
        doc: "With remote.storage.enable: local bytes kept of segments copied to the remote store (-2: retention.bytes; -1: no limit). At most retention.bytes.",
        enforced: true,
    },
    TopicKey {
        name: "cleanup.policy",
        kind: ConfigKind::List,
        bound: Bound::ListOf(CLEANUP_POLICIES),
        broker_key: None,
        default: |_| "delete".into(),
        doc: "delete, compact or compact,delete.",
        enforced: true,
    },
    TopicKey {
        name: "compression.type",
        kind: ConfigKind::String,
        bound: Bound::OneOf(COMPRESSION_TYPES),
        broker_key: Some("compression.type"),
        default: |c| broker_value(c, "compression.type"),
        doc: "Codec batches are stored with: producer keeps the producer's; uncompressed, gzip, snappy, lz4 or zstd recompresses.",
        enforced: true,
    },
    TopicKey {
        name: "max.message.bytes",
        kind: ConfigKind::Int,
        bound: Bound::AtLeast(0),
        broker_key: Some("message.max.bytes"),
        default: |c| c.message_max_bytes.to_string(),
        doc: "Largest record batch accepted for this topic.",
        enforced: true,
    },
    TopicKey {
        name: "message.timestamp.type",
        kind: ConfigKind::String,
        bound: Bound::OneOf(TIMESTAMP_TYPES),
        broker_key: Some("log.message.timestamp.type"),
        default: |c| broker_value(c, "log.message.timestamp.type"),
        doc: "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's append time.",
        enforced: true,
    },
    TopicKey {
        name: "message.timestamp.before.max.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(0),
        broker_key: Some("log.message.timestamp.before.max.ms"),
        default: |c| c.log_message_timestamp_before_max_ms.to_string(),
        doc: "CreateTime records further behind the broker's clock are refused (INVALID_TIMESTAMP).",
        enforced: true,
    },
    TopicKey {
        name: "message.timestamp.after.max.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(0),
        broker_key: Some("log.message.timestamp.after.max.ms"),
        default: |c| c.log_message_timestamp_after_max_ms.to_string(),
        doc: "CreateTime records further ahead of the broker's clock are refused (INVALID_TIMESTAMP).",
        enforced: true,
    },
    TopicKey {
        name: "retention.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(-1),
        broker_key: Some("log.retention.ms"),
        default: |c| c.log_retention_ms.to_string(),
        doc: "Age after which whole segments are deleted (-1: never).",
        enforced: true,
    },
    TopicKey {
        name: "retention.bytes",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(-1),
        broker_key: Some("log.retention.bytes"),
        default: |c| c.log_retention_bytes.to_string(),
        doc: "Partition size above which the oldest segments are deleted (-1: never).",
        enforced: true,
    },
    TopicKey {
        name: "segment.bytes",
        kind: ConfigKind::Int,
        bound: Bound::AtLeast(SEGMENT_BYTES_MIN),
        broker_key: Some("log.segment.bytes"),
        default: |c| c.log_segment_bytes.to_string(),
        doc: "Size at which a partition rolls to a new segment.",
        enforced: true,
    },
    TopicKey {
        name: "segment.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(1),
        broker_key: Some("log.roll.ms"),
        default: |c| c.log_roll_ms.to_string(),
        doc: "Roll a segment when its batches' timestamps span more than this many milliseconds.",
        enforced: true,
    },
    TopicKey {
        name: "index.interval.bytes",
        kind: ConfigKind::Int,
        bound: Bound::AtLeast(0),
        broker_key: Some("log.index.interval.bytes"),
        default: |c| c.log_index_interval_bytes.to_string(),
        doc: "Bytes of log between sparse index entries.",
        enforced: true,
    },
    TopicKey {
        name: "min.insync.replicas",
        kind: ConfigKind::Int,
        bound: Bound::AtLeast(1),
        broker_key: Some("min.insync.replicas"),
        default: |c| c.min_insync_replicas.to_string(),
        doc: "In-sync replicas (the leader among them) that must hold a write for acks=all; fewer: NOT_ENOUGH_REPLICAS.",
        enforced: true,
    },
    TopicKey {
        name: "unclean.leader.election.enable",
        kind: ConfigKind::Bool,
        bound: Bound::OneOf(BOOLEANS),
        broker_key: Some("unclean.leader.election.enable"),
        default: |c| c.unclean_leader_election_enable.to_string(),
        doc: "Let a live replica outside the ISR lead when every in-sync replica is fenced: online again, but records acknowledged only by the old ISR are lost.",
        enforced: true,
    },
    TopicKey {
        name: "flush.messages",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(1),
        broker_key: Some("log.flush.interval.messages"),
        default: |c| c.log_flush_interval_messages.to_string(),
        doc: "fdatasync once this many messages are unsynced; 1 acknowledges nothing before it is synced.",
        enforced: true,
    },
    TopicKey {
        name: "flush.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(0),
        broker_key: Some("log.flush.interval.ms"),
        default: |c| c.log_flush_interval_ms.to_string(),
        doc: "fdatasync written data at most this many milliseconds after it was written.",
        enforced: true,
    },
    TopicKey {
        name: "delete.retention.ms",
        kind: ConfigKind::Long,
        bound: Bound::AtLeast(0),
        broker_key: Some("log.cleaner.delete.retention.ms"),
        default: |c| c.cleaner.log_cleaner_delete_retention_ms.to_string(),
        doc: "How long tombstones are kept in compacted topics.",
        enforced: true,
    },
    TopicKey {
        name: "min.cleanable.dirty.ratio",
        kind: ConfigKind::Double,
        bound: Bound::Ratio,
        broker_key: Some("log.cleaner.min.cleanable.ratio"),
        default: |c| c.cleaner.log_cleaner_min_cleanable_ratio.to_string(),
        doc: "Share of a compacted partition's closed log that must be new before it is cleaned.",
        enforced: true,
    },
];

/// A broker key's effective value as text.
fn broker_value(cfg: &BrokerConfig, key: &str) -> String {
    cfg.values.get(key).map(|v| v.0.clone()).unwrap_or_default()
}

pub fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}

/// The broker default for a topic key (empty for an unknown key).
pub fn topic_default(cfg: &BrokerConfig, key: &str) -> String {
    topic_key(key).map_or_else(String::new, |k| (k.default)(cfg))
}

/// Checks one topic config; the error text goes back to the client with INVALID_CONFIG.
pub fn validate_topic_config(key: &str, value: Option<&str>) -> Result<(), String> {
    let Some(def) = topic_key(key) else {
        return Err(format!("unknown topic config {key:?}"));
    };
    let Some(value) = value else {
        return Err(format!("topic config {key} has a null value"));
    };
    check_value(key, def.kind, def.bound, value)
}

/// The checks across keys that tiered storage needs, on a topic's whole config (`get` its value
/// of a key, falling back to the broker default), in Kafka's words: remote storage needs the
/// broker's `remote.log.storage.system.enable` and a topic that is not compacted, and the local
/// retention may not exceed the whole.
pub fn check_remote_storage(
    get: &dyn Fn(&str) -> String,
    system_enabled: bool,
) -> Result<(), String> {
    if get("remote.storage.enable") != "true" {
        return Ok(());
    }
    if !system_enabled {
        return Err("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage (set remote.log.storage.system.enable=true on the brokers).".into());
    }
    if get("cleanup.policy")
        .split(',')
        .any(|p| p.trim() == "compact")
    {
        return Err("Remote log storage is unsupported for the compacted topics".into());
    }
    for (local, whole) in [
        ("local.retention.ms", "retention.ms"),
        ("local.retention.bytes", "retention.bytes"),
    ] {
        let l: i64 = get(local).trim().parse().unwrap_or(-2);
        let w: i64 = get(whole).trim().parse().unwrap_or(-1);
        if l == -1 && w >= 0 {
            return Err(format!(
                "Invalid value -1 for configuration {local}: Value must not be -1 as {whole} value is set as {w}."
            ));
        }
        if l >= 0 && w >= 0 && l > w {
            return Err(format!(
                "Invalid value {l} for configuration {local}: Value must not be more than {whole} property value: {w}"
            ));
        }
    }
    Ok(())
}

/// [`check_remote_storage`] of a topic whose overrides are `configs` (a later one of a key
/// wins), the broker's defaults under them.
pub fn check_topic_remote_storage<'a>(
    cfg: &BrokerConfig,
    configs: impl IntoIterator<Item = (&'a String, &'a String)> + Clone,
) -> Result<(), String> {
    let get = |key: &str| {
        configs
            .clone()
            .into_iter()
            .filter(|(k, _)| k.as_str() == key)
            .last()
            .map_or_else(|| topic_default(cfg, key), |(_, v)| v.clone())
    };
    check_remote_storage(&get, cfg.tiered.enabled)
}

/// Checks `value` of a key of type `kind` against `bound`; the message names the key and the
/// allowed values, in the words Kafka's `ConfigException` uses.
pub fn check_value(key: &str, kind: ConfigKind, bound: Bound, value: &str) -> Result<(), String> {
    let invalid = |why: String| {
        Err(format!(
            "Invalid value {value:?} for configuration {key}: {why}"
        ))
    };
    let type_max = match kind {
        ConfigKind::Int => i64::from(i32::MAX),
        _ => i64::MAX,
    };
    match bound {
        Bound::AtLeast(min) | Bound::Between(min, _) => {
            let max = match bound {
                Bound::Between(_, max) => max.min(type_max),
                _ => type_max,
            };
            match value.trim().parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(()),
                Ok(_) if max == i64::MAX => invalid(format!("value must be at least {min}")),
                Ok(_) => invalid(format!("value must be between {min} and {max}")),
                Err(_) => invalid("not a whole number".into()),
            }
        }
        Bound::Parsed(check) => check(value).or_else(invalid),
        Bound::Ratio => match value.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
            _ => invalid("value must be a number between 0 and 1".into()),
        },
        Bound::OneOf(allowed) => {
            if allowed.contains(&value) {
                Ok(())
            } else {
                invalid(format!("string must be one of: {}", allowed.join(", ")))
            }
        }
        Bound::ListOf(allowed) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if !items.is_empty() && items.iter().all(|i| allowed.contains(i)) {
                Ok(())
            } else {
                invalid(format!(
                    "a comma-separated list of one or more of: {}",
                    allowed.join(", ")
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_config_validation() {
        assert!(validate_topic_config("retention.ms", Some("-1")).is_ok());
        assert!(validate_topic_config("segment.bytes", Some("12")).is_err());
        assert!(validate_topic_config("cleanup.policy", Some("compact")).is_ok());
        assert!(validate_topic_config("cleanup.policy", Some("compact,delete")).is_ok());
        assert!(validate_topic_config("cleanup.policy", Some("shred")).is_err());
        assert!(validate_topic_config("cleanup.policy", Some("")).is_err());
        assert!(validate_topic_config("no.such.key", Some("1")).is_err());
        assert!(validate_topic_config("retention.ms", None).is_err());
        assert!(validate_topic_config("min.cleanable.dirty.ratio", Some("0.3")).is_ok());
        for bad in ["1.5", "-0.1", "half"] {
            assert!(validate_topic_config("min.cleanable.dirty.ratio", Some(bad)).is_err());
        }
        assert!(validate_topic_config("segment.ms", Some("0")).is_err());
        assert!(validate_topic_config("flush.messages", Some("0")).is_err());
        assert!(validate_topic_config("retention.bytes", Some("-2")).is_err());
        assert!(validate_topic_config("compression.type", Some("zstd")).is_ok());
        assert!(validate_topic_config("compression.type", Some("brotli")).is_err());
        assert!(validate_topic_config("message.timestamp.type", Some("CreateTime")).is_ok());
        assert!(validate_topic_config("message.timestamp.type", Some("LogAppendTime")).is_ok());
        assert!(validate_topic_config("message.timestamp.type", Some("Now")).is_err());
        assert!(validate_topic_config("unclean.leader.election.enable", Some("true")).is_ok());
        assert!(validate_topic_config("unclean.leader.election.enable", Some("1")).is_err());
        for key in [
            "message.timestamp.before.max.ms",
            "message.timestamp.after.max.ms",
        ] {
            assert!(validate_topic_config(key, Some("0")).is_ok());
            assert!(validate_topic_config(key, Some("-1")).is_err());
        }
    }

    #[test]
    fn int_keys_stop_at_int_max_and_messages_name_the_range() {
        assert!(validate_topic_config("segment.bytes", Some("2147483647")).is_ok());
        let e = validate_topic_config("segment.bytes", Some("2147483648")).unwrap_err();
        assert!(
            e.contains("segment.bytes") && e.contains("2147483647"),
            "{e}"
        );
        let e = validate_topic_config("segment.bytes", Some("100")).unwrap_err();
        assert!(e.contains("segment.bytes") && e.contains("1024"), "{e}");
        assert!(validate_topic_config("max.message.bytes", Some("-1")).is_err());
        assert!(validate_topic_config("index.interval.bytes", Some("-1")).is_err());
        assert!(validate_topic_config("delete.retention.ms", Some("-1")).is_err());
        assert!(validate_topic_config("flush.ms", Some("9223372036854775807")).is_ok());
    }

    #[test]
    fn every_default_is_valid() {
        let cfg =
            crate::config::BrokerConfig::build(crate::config::ConfigInput::for_test(&[])).unwrap();
        for k in TOPIC_KEYS {
            let d = (k.default)(&cfg);
            assert!(
                validate_topic_config(k.name, Some(&d)).is_ok(),
                "{}={d}",
                k.name
            );
        }
    }
}
