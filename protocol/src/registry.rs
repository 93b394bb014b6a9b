//! The one registry of APIs Tributary serves and their version ranges. It drives ApiVersions
//! responses and request dispatch alike, so the two cannot disagree.
//!
//! Minimum versions follow Apache Kafka 4.0 (KIP-896): Produce v3+ and Fetch v4+, the first
//! versions that carry RecordBatch v2, which is the only record format Tributary stores.

/// Kafka API keys Tributary knows by name.
pub mod api_key {
    pub const PRODUCE: i16 = 0;
    pub const FETCH: i16 = 1;
    pub const LIST_OFFSETS: i16 = 2;
    pub const METADATA: i16 = 3;
    pub const API_VERSIONS: i16 = 18;
    pub const CREATE_TOPICS: i16 = 19;
    pub const DELETE_TOPICS: i16 = 20;
    pub const DELETE_RECORDS: i16 = 21;
    pub const INIT_PRODUCER_ID: i16 = 22;
    pub const DESCRIBE_CONFIGS: i16 = 32;
    pub const DESCRIBE_CLUSTER: i16 = 60;
    pub const OFFSET_COMMIT: i16 = 8;
    pub const OFFSET_FETCH: i16 = 9;
    pub const FIND_COORDINATOR: i16 = 10;
    pub const JOIN_GROUP: i16 = 11;
    pub const HEARTBEAT: i16 = 12;
    pub const LEAVE_GROUP: i16 = 13;
    pub const SYNC_GROUP: i16 = 14;
    pub const DESCRIBE_GROUPS: i16 = 15;
    pub const LIST_GROUPS: i16 = 16;
    pub const DELETE_GROUPS: i16 = 42;
    pub const OFFSET_DELETE: i16 = 47;
    pub const ALTER_CONFIGS: i16 = 33;
    pub const CREATE_PARTITIONS: i16 = 37;
    pub const ELECT_LEADERS: i16 = 43;
    pub const DESCRIBE_QUORUM: i16 = 55;
    pub const OFFSET_FOR_LEADER_EPOCH: i16 = 23;
    pub const DESCRIBE_LOG_DIRS: i16 = 35;
    pub const INCREMENTAL_ALTER_CONFIGS: i16 = 44;
    pub const ALTER_PARTITION_REASSIGNMENTS: i16 = 45;
    pub const LIST_PARTITION_REASSIGNMENTS: i16 = 46;
    pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
    pub const ADD_OFFSETS_TO_TXN: i16 = 25;
    pub const END_TXN: i16 = 26;
    pub const TXN_OFFSET_COMMIT: i16 = 28;
    pub const WRITE_TXN_MARKERS: i16 = 27;
    pub const DESCRIBE_PRODUCERS: i16 = 61;
    pub const DESCRIBE_TRANSACTIONS: i16 = 65;
    pub const LIST_TRANSACTIONS: i16 = 66;
    pub const SASL_HANDSHAKE: i16 = 17;
    pub const SASL_AUTHENTICATE: i16 = 36;
    pub const DESCRIBE_USER_SCRAM_CREDENTIALS: i16 = 50;
    pub const ALTER_USER_SCRAM_CREDENTIALS: i16 = 51;
    pub const DESCRIBE_ACLS: i16 = 29;
    pub const CREATE_ACLS: i16 = 30;
    pub const DELETE_ACLS: i16 = 31;
    pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
    pub const ALTER_CLIENT_QUOTAS: i16 = 49;
    pub const CONSUMER_GROUP_HEARTBEAT: i16 = 68;
    pub const CONSUMER_GROUP_DESCRIBE: i16 = 69;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSpec {
    pub key: i16,
    pub name: &'static str,
    pub min_version: i16,
    pub max_version: i16,
    /// First version using flexible encoding (compact strings and tagged fields, KIP-482).
    pub flexible_from: i16,
}

impl ApiSpec {
    pub fn supports(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }

    pub fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_from
    }

    /// Request header v2 (with tagged fields) for flexible versions, v1 otherwise.
    pub fn request_header_flexible(&self, version: i16) -> bool {
        self.is_flexible(version)
    }

    /// Response header v1 for flexible versions, v0 otherwise — except ApiVersions, whose
    /// response header is always v0 so that a client can parse it before it knows our versions.
    pub fn response_header_flexible(&self, version: i16) -> bool {
        self.key != api_key::API_VERSIONS && self.is_flexible(version)
    }
}

pub const SUPPORTED_APIS: &[ApiSpec] = &[
    spec(api_key::PRODUCE, "Produce", 3, 10, 9),
    spec(api_key::FETCH, "Fetch", 4, 16, 12),
    spec(api_key::LIST_OFFSETS, "ListOffsets", 1, 10, 6),
    spec(api_key::METADATA, "Metadata", 0, 12, 9),
    spec(api_key::API_VERSIONS, "ApiVersions", 0, 3, 3),
    spec(api_key::CREATE_TOPICS, "CreateTopics", 2, 7, 5),
    spec(api_key::DELETE_TOPICS, "DeleteTopics", 1, 6, 4),
    spec(api_key::DELETE_RECORDS, "DeleteRecords", 0, 2, 2),
    spec(api_key::INIT_PRODUCER_ID, "InitProducerId", 0, 4, 2),
    spec(
        api_key::ADD_PARTITIONS_TO_TXN,
        "AddPartitionsToTxn",
        0,
        4,
        3,
    ),
    spec(api_key::ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 3, 3),
    spec(api_key::END_TXN, "EndTxn", 0, 3, 3),
    spec(api_key::TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 3, 3),
    spec(api_key::WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 1, 1),
    spec(api_key::DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0, 0),
    spec(
        api_key::DESCRIBE_TRANSACTIONS,
        "DescribeTransactions",
        0,
        0,
        0,
    ),
    spec(api_key::LIST_TRANSACTIONS, "ListTransactions", 0, 1, 0),
    spec(api_key::SASL_HANDSHAKE, "SaslHandshake", 0, 1, i16::MAX),
    spec(api_key::SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2, 2),
    spec(
        api_key::DESCRIBE_USER_SCRAM_CREDENTIALS,
        "DescribeUserScramCredentials",
        0,
        0,
        0,
    ),
    spec(
        api_key::ALTER_USER_SCRAM_CREDENTIALS,
        "AlterUserScramCredentials",
        0,
        0,
        0,
    ),
    spec(api_key::DESCRIBE_ACLS, "DescribeAcls", 1, 3, 2),
    spec(api_key::CREATE_ACLS, "CreateAcls", 1, 3, 2),
    spec(api_key::DELETE_ACLS, "DeleteAcls", 1, 3, 2),
    spec(
        api_key::DESCRIBE_CLIENT_QUOTAS,
        "DescribeClientQuotas",
        0,
        1,
        1,
    ),
    spec(api_key::ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1, 1),
    spec(api_key::DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4, 4),
    spec(api_key::DESCRIBE_CLUSTER, "DescribeCluster", 0, 1, 0),
    spec(api_key::OFFSET_COMMIT, "OffsetCommit", 2, 9, 8),
    spec(api_key::OFFSET_FETCH, "OffsetFetch", 1, 9, 6),
    spec(api_key::FIND_COORDINATOR, "FindCoordinator", 0, 4, 3),
    spec(api_key::JOIN_GROUP, "JoinGroup", 0, 7, 6),
    spec(api_key::HEARTBEAT, "Heartbeat", 0, 4, 4),
    spec(api_key::LEAVE_GROUP, "LeaveGroup", 0, 4, 4),
    spec(api_key::SYNC_GROUP, "SyncGroup", 0, 5, 4),
    spec(api_key::DESCRIBE_GROUPS, "DescribeGroups", 0, 5, 5),
    spec(api_key::LIST_GROUPS, "ListGroups", 0, 5, 3),
    spec(api_key::DELETE_GROUPS, "DeleteGroups", 0, 2, 2),
    spec(api_key::OFFSET_DELETE, "OffsetDelete", 0, 0, i16::MAX),
    spec(
        api_key::CONSUMER_GROUP_HEARTBEAT,
        "ConsumerGroupHeartbeat",
        0,
        1,
        0,
    ),
    spec(
        api_key::CONSUMER_GROUP_DESCRIBE,
        "ConsumerGroupDescribe",
        0,
        1,
        0,
    ),
    spec(api_key::ALTER_CONFIGS, "AlterConfigs", 0, 2, 2),
    spec(api_key::CREATE_PARTITIONS, "CreatePartitions", 0, 3, 2),
    spec(api_key::ELECT_LEADERS, "ElectLeaders", 0, 2, 2),
    spec(
        api_key::ALTER_PARTITION_REASSIGNMENTS,
        "AlterPartitionReassignments",
        0,
        1,
        0,
    ),
    spec(
        api_key::LIST_PARTITION_REASSIGNMENTS,
        "ListPartitionReassignments",
        0,
        0,
        0,
    ),
    spec(api_key::DESCRIBE_QUORUM, "DescribeQuorum", 0, 1, 0),
    spec(api_key::DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 4, 2),
    spec(
        api_key::OFFSET_FOR_LEADER_EPOCH,
        "OffsetForLeaderEpoch",
        2,
        4,
        4,
    ),
    spec(
        api_key::INCREMENTAL_ALTER_CONFIGS,
        "IncrementalAlterConfigs",
        0,
        1,
        1,
    ),
];

const fn spec(key: i16, name: &'static str, min: i16, max: i16, flexible_from: i16) -> ApiSpec {
    ApiSpec {
        key,
        name,
        min_version: min,
        max_version: max,
        flexible_from,
    }
}

pub fn lookup(key: i16) -> Option<&'static ApiSpec> {
    SUPPORTED_APIS.iter().find(|s| s.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_consistent() {
        for s in SUPPORTED_APIS {
            assert!(s.min_version <= s.max_version, "{}", s.name);
            assert_eq!(lookup(s.key), Some(s));
            // Every range must be one kafka-protocol can encode responses for.
            let k = kafka_protocol::messages::ApiKey::try_from(s.key).expect("known key");
            let valid = k.valid_versions();
            assert!(
                valid.min <= s.min_version && s.max_version <= valid.max,
                "{}",
                s.name
            );
        }
        let api_versions = lookup(api_key::API_VERSIONS).expect("registered");
        assert!(!api_versions.response_header_flexible(3));
        assert!(api_versions.request_header_flexible(3));
    }
}
