//! Which topic a partition directory holds, and what happens to directories the metadata image
//! no longer gives this node (Kafka's stray partitions).
//!
//! Every partition directory holds `partition.metadata`, as Kafka's do: the id of the topic
//! whose data it is. A directory is **stray** when the image does not place that partition on
//! this node, or names another topic id for it — the topic was deleted (and perhaps created
//! again with the same name), or the partition moved away, while this node was down. A stray
//! directory is never opened as the partition: at start-up it is renamed aside to
//! `NAME-P.TOPICID-stray` and left for the operator (`rm -r` once sure), and a warning says so.
//! Renaming instead of deleting keeps a misdirected start — a node pointed at the wrong metadata
//! log — from destroying data. Directories from before this file existed are claimed by the
//! topic the image names.

use std::path::{Path, PathBuf};

use tracing::warn;
use tributary_metadata::types::TopicPartition;
use tributary_storage::io;

use crate::catalog::Catalog;

/// The metadata log's directory in the data directory, named as Kafka names it.
pub const METADATA_DIR: &str = "__cluster_metadata-0";

/// The file naming a partition directory's topic id.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// The suffix of a directory set aside.
pub const STRAY_SUFFIX: &str = "-stray";

/// The topic id recorded in `dir`, if the directory has one.
pub async fn recorded_topic_id(dir: &Path) -> std::io::Result<Option<String>> {
    let Some(bytes) = io::read_file(&dir.join(PARTITION_METADATA_FILE)).await? else {
        return Ok(None);
    };
    Ok(parse_metadata(&String::from_utf8_lossy(&bytes)))
}

/// Records `topic_id` in `dir` (durably: a crash must not leave a directory claiming no topic
/// after it took writes).
pub async fn record_topic_id(dir: &Path, topic_id: &str) -> std::io::Result<()> {
    let text = format!("version: 0\ntopic_id: {topic_id}\n");
    io::write_file_atomic(dir, PARTITION_METADATA_FILE, text.into_bytes(), true).await
}

fn parse_metadata(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// `NAME-P` → (`NAME`, P); `None` for anything else (the metadata log, stray directories,
/// files).
pub fn parse_dir_name(name: &str) -> Option<(&str, i32)> {
    if name == METADATA_DIR || name.ends_with(STRAY_SUFFIX) {
        return None;
    }
    let (topic, p) = name.rsplit_once('-')?;
    let p: i32 = p.parse().ok()?;
    (!topic.is_empty() && p >= 0 && p.to_string() == name[topic.len() + 1..]).then_some((topic, p))
}

/// Whether the image places `topic`-`partition` on `node` with topic id `id` (any id when the
/// directory records none).
pub fn belongs(image: &Catalog, node: i32, topic: &str, partition: i32, id: Option<&str>) -> bool {
    let Some(t) = image.topics.get(topic) else {
        return false;
    };
    let placed = usize::try_from(partition)
        .ok()
        .and_then(|i| t.assignment.get(i))
        .is_some_and(|p| p.replicas.contains(&node));
    placed && id.is_none_or(|id| id == t.id)
}

/// Renames a stray partition directory aside and says so; the new path.
pub async fn set_aside(dir: &Path, id: Option<&str>, why: &str) -> std::io::Result<PathBuf> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let aside = dir.with_file_name(format!("{name}.{}{STRAY_SUFFIX}", id.unwrap_or("unknown")));
    io::rename(dir, &aside).await?;
    if let Some(parent) = dir.parent() {
        io::sync_dir(parent).await?;
    }
    warn!(
        dir = %dir.display(),
        moved_to = %aside.display(),
        "stray partition directory set aside: {why}; it is not served — delete it once sure it is not needed"
    );
    Ok(aside)
}

/// The partitions whose directories are under `data_dir`, in order.
pub async fn list(data_dir: &Path) -> std::io::Result<Vec<TopicPartition>> {
    let dir = data_dir.to_path_buf();
    let names = io::blocking(move || io::now::read_dir_names(&dir)).await?;
    let mut out: Vec<TopicPartition> = names
        .iter()
        .filter_map(|n| parse_dir_name(n).map(|(t, p)| TopicPartition::new(t, p)))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{PartitionRegistration, TopicMeta};

    #[test]
    fn directory_names_parse_as_kafka_names_them() {
        assert_eq!(parse_dir_name("orders-3"), Some(("orders", 3)));
        assert_eq!(parse_dir_name("a-b-c-12"), Some(("a-b-c", 12)));
        assert_eq!(
            parse_dir_name("ends--1"),
            Some(("ends-", 1)),
            "a legal name ending in -"
        );
        assert_eq!(
            parse_dir_name("__consumer_offsets-0"),
            Some(("__consumer_offsets", 0))
        );
        for other in [
            METADATA_DIR,
            "orders-3.abc-stray",
            "orders",
            "orders-",
            "-3",
            "orders-03",
            "orders-x",
            "catalog.json",
        ] {
            assert_eq!(parse_dir_name(other), None, "{other}");
        }
    }

    #[test]
    fn metadata_text_names_the_topic_id() {
        assert_eq!(
            parse_metadata("version: 0\ntopic_id: abc-1\n"),
            Some("abc-1".into())
        );
        assert_eq!(parse_metadata("version: 0\n"), None);
        assert_eq!(parse_metadata("topic_id:   \n"), None);
    }

    #[test]
    fn a_directory_belongs_when_placed_here_with_the_same_id() {
        let mut image = Catalog::empty();
        image.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: "id-1".into(),
                partitions: 2,
                configs: Default::default(),
                assignment: vec![
                    PartitionRegistration::new(vec![1, 2]),
                    PartitionRegistration::new(vec![2, 3]),
                ],
            },
        );
        assert!(belongs(&image, 1, "t", 0, Some("id-1")));
        assert!(belongs(&image, 1, "t", 0, None), "no recorded id: claimed");
        assert!(
            !belongs(&image, 1, "t", 0, Some("id-0")),
            "an earlier topic"
        );
        assert!(!belongs(&image, 1, "t", 1, Some("id-1")), "moved away");
        assert!(!belongs(&image, 1, "t", 2, None), "no such partition");
        assert!(!belongs(&image, 1, "gone", 0, None), "no such topic");
    }
}
