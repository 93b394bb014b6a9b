//! Request decoders, one module per API. Each decodes exactly the fields of the versions the
//! registry advertises and refuses anything else; none allocates from an unchecked count.

pub mod acls;
pub mod alter_configs;
pub mod api_versions;
pub mod consumer_group;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod describe_quorum;
pub mod elect_leaders;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod produce;
pub mod quotas;
pub mod sasl;
pub mod txn;

use crate::registry;

/// Whether `version` of `api_key` uses the flexible encoding.
pub(crate) fn flexible(api_key: i16, version: i16) -> bool {
    registry::lookup(api_key).is_some_and(|s| s.is_flexible(version))
}

/// Test helper: every strict prefix of a valid request must decode to an error, never a panic.
#[cfg(test)]
pub(crate) fn assert_prefixes_fail<T: std::fmt::Debug>(
    bytes: &bytes::Bytes,
    decode: impl Fn(&mut crate::Reader) -> Result<T, crate::DecodeError>,
) {
    for cut in 0..bytes.len() {
        let mut r = crate::Reader::new(bytes.slice(..cut));
        let out = decode(&mut r).and_then(|v| r.expect_end("request").map(|()| v));
        assert!(out.is_err(), "prefix of {cut} bytes decoded: {out:?}");
    }
}
