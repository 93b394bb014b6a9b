//! DescribeLogDirs: the one data directory, the size of each partition in it (asked of the shard
//! that owns the partition) and, from v4, the filesystem's total and usable bytes; with tiered
//! storage, the remote log store as a second directory named by its URL, with the bytes each
//! of those partitions has there (as Redpanda reports its bucket; Kafka reports none).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResponse, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use tributary_metadata::types::TopicPartition;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::describe_log_dirs;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::routing::ShardId;
use crate::shard::{call, Shard, ShardRequest};

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
) -> HandlerResult {
    let v = header.api_version;
    let req = decode_all(r, |r| describe_log_dirs::decode(r, v))?;
    let calls = (0..shard.shards).map(|s| {
        call(shard, ShardId(s), |reply| ShardRequest::PartitionSizes {
            reply,
        })
    });
    let mut sizes: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for reply in futures::future::join_all(calls).await {
        sizes.extend(reply.unwrap_or_default());
    }
    // Partitions not asked for, or that do not exist, are left out, as Kafka leaves them out.
    if let Some(wanted) = &req.topics {
        sizes.retain(|tp, _| {
            wanted
                .iter()
                .any(|(wt, wp)| *wt == tp.topic && wp.contains(&tp.partition))
        });
    }
    let remote = remote_sizes(shard, sizes.keys());
    let topics = topics_of(sizes);
    let data_dir = shard.config.data_dir.clone();
    // Path resolution and statvfs touch the file system: the executor's blocking thread runs them.
    let (dir, space) = tributary_storage::io::blocking(move || {
        let dir = std::fs::canonicalize(&data_dir).unwrap_or_else(|_| data_dir.clone());
        let space = filesystem_bytes(&data_dir);
        Ok((dir, space))
    })
    .await
    .unwrap_or_else(|_| (shard.config.data_dir.clone(), None));
    let mut result = DescribeLogDirsResult::default()
        .with_error_code(ErrorCode::NONE.code())
        .with_log_dir(str_bytes(&dir.to_string_lossy()))
        .with_topics(topics);
    if v >= 4 {
        let (total, usable) = space.unwrap_or((-1, -1));
        result = result.with_total_bytes(total).with_usable_bytes(usable);
    }
    let mut results = vec![result];
    if !remote.is_empty() {
        let mut store = DescribeLogDirsResult::default()
            .with_error_code(ErrorCode::NONE.code())
            .with_log_dir(str_bytes(&shard.config.tiered.store.url))
            .with_topics(topics_of(remote));
        if v >= 4 {
            store = store.with_total_bytes(-1).with_usable_bytes(-1);
        }
        results.push(store);
    }
    frame(
        spec,
        header,
        &DescribeLogDirsResponse::default().with_results(results),
    )
}

/// The bytes each of `hosted` has in the remote log store, for those with any there.
fn remote_sizes<'a>(
    shard: &Shard,
    hosted: impl Iterator<Item = &'a TopicPartition>,
) -> BTreeMap<TopicPartition, i64> {
    if !shard.config.tiered.enabled {
        return BTreeMap::new();
    }
    let catalog = shard.catalog();
    hosted
        .filter_map(|tp| {
            let log = catalog.remote_log(&tp.topic, tp.partition)?;
            let bytes: u64 = log.readable().map(|s| s.size).sum();
            (bytes > 0).then(|| (tp.clone(), i64::try_from(bytes).unwrap_or(i64::MAX)))
        })
        .collect()
}

/// The response's topics for partition sizes in topic order.
fn topics_of(sizes: BTreeMap<TopicPartition, i64>) -> Vec<DescribeLogDirsTopic> {
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for (TopicPartition { topic, partition }, size) in sizes {
        let part = DescribeLogDirsPartition::default()
            .with_partition_index(partition)
            .with_partition_size(size)
            .with_offset_lag(0)
            .with_is_future_key(false);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(part),
            _ => topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(vec![part]),
            ),
        }
    }
    topics
}

/// The size of the filesystem holding `dir` and the bytes an unprivileged writer may still use
/// (Java's `FileStore.getTotalSpace` / `getUsableSpace`, which Kafka reports).
fn filesystem_bytes(dir: &std::path::Path) -> Option<(i64, i64)> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    let unit = u128::from(s.fragment_size());
    let clamp = |blocks: u128| i64::try_from(blocks * unit).unwrap_or(i64::MAX);
    Some((
        clamp(u128::from(s.blocks())),
        clamp(u128::from(s.blocks_available())),
    ))
}
