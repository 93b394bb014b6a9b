//! The metadata image (`tributary_metadata::catalog`, re-exported) and its files: the catalog
//! of a data directory from before the metadata log, and the checksummed JSON documents the
//! cluster node keeps.
//!
//! On disk a document is JSON with a CRC32C, replaced atomically (write a temporary file,
//! fsync, rename, fsync the directory).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub use tributary_metadata::catalog::*;

pub const CATALOG_FILE: &str = "catalog.json";
pub const PRODUCER_ID_FILE: &str = "producer-ids.json";

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

/// Writes `value` to `dir/name` atomically and durably, on the calling thread (tests write
/// single-node catalogs from before the metadata log with it).
pub fn write_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    let bytes = encode_checked(value)?;
    tributary_storage::io::now::write_file_atomic(dir, name, &bytes, true)
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

/// Kafka cluster ids are a random UUID in URL-safe base64 without padding (22 characters).
pub fn new_cluster_id() -> String {
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

/// Keeps `fenced_since` in step with an image: a broker newly fenced is noted at `now`, one
/// no longer fenced (or gone) is forgotten.
pub fn note_fencings(
    fenced_since: &mut std::collections::HashMap<i32, std::time::Instant>,
    image: &Catalog,
    now: std::time::Instant,
) {
    fenced_since.retain(|id, _| image.brokers.get(id).is_some_and(|b| b.fenced));
    for b in image.brokers.values().filter(|b| b.fenced) {
        fenced_since.entry(b.id).or_insert(now);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn legacy() -> Catalog {
        let mut c = Catalog::empty();
        c.cluster_id = new_cluster_id();
        c
    }

    #[test]
    fn catalog_round_trips_and_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = legacy();
        assert_eq!(c.cluster_id.len(), 22);
        c.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: uuid::Uuid::new_v4().to_string(),
                partitions: 3,
                configs: BTreeMap::new(),
                assignment: Vec::new(),
            },
        );
        write_atomic(dir.path(), CATALOG_FILE, &c).unwrap();
        let path = dir.path().join(CATALOG_FILE);
        assert_eq!(read_checked::<Catalog>(&path).unwrap(), Some(c));
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\\\"partitions\\\":3", "\\\"partitions\\\":4");
        std::fs::write(&path, text).unwrap();
        let e = read_checked::<Catalog>(&path).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn old_catalogs_load_without_the_fields_added_since() {
        let dir = tempfile::tempdir().unwrap();
        // A catalog written before dynamic broker configs, brokers and assignments existed.
        let old = r#"{"version":3,"cluster_id":"abc","topics":{"t":{"name":"t","id":"x","partitions":2,"configs":{}}}}"#;
        write_atomic(
            dir.path(),
            CATALOG_FILE,
            &serde_json::from_str::<serde_json::Value>(old).unwrap(),
        )
        .unwrap();
        let c: Catalog = read_checked(&dir.path().join(CATALOG_FILE))
            .unwrap()
            .unwrap();
        assert_eq!(c.version, 3);
        assert_eq!(c.broker_configs, DynamicBrokerConfigs::default());
        assert!(c.brokers.is_empty());
        assert!(c.topics["t"].assignment.is_empty());
    }
}
